//! What each member is doing, shared by the runtime (writer), the HTTP endpoints and metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use jiff::Timestamp;
use parking_lot::RwLock;
use serde::Serialize;

/// Lifecycle phase of a member engagement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Building the client, discovering the API.
    Connecting,
    /// Watches started, initial lists not complete yet.
    Syncing,
    /// Every watch has listed once; reconciling.
    Ready,
    /// Unusable for now (bad kubeconfig, unreachable, sync timeout); retried on its own.
    Failing,
}

impl Phase {
    /// Every phase, for gauges that export one series per phase.
    pub const ALL: [Phase; 4] = [
        Phase::Connecting,
        Phase::Syncing,
        Phase::Ready,
        Phase::Failing,
    ];

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::Syncing => "syncing",
            Phase::Ready => "ready",
            Phase::Failing => "failing",
        }
    }
}

/// State of one member as shown on `/members` and in metrics.
#[derive(Debug, Clone, Serialize)]
pub struct MemberStatus {
    pub phase: Phase,
    /// Last error, kept after recovery until the next one (cleared on a new engagement).
    pub last_error: Option<String>,
    /// When the member's watches last completed an initial sync.
    pub last_sync: Option<Timestamp>,
    /// The member's API server URL.
    pub server: Option<String>,
    /// First 12 hex digits of the kubeconfig's SHA-256: which engagement this is.
    pub kubeconfig_hash: String,
    /// When the phase last changed.
    pub since: Timestamp,
    /// The kubeconfig was refused (file paths, plugins, insecure TLS): no connection is made.
    pub refused: bool,
    /// TLS verification of the member's server is off (allowed by `--allow-insecure-member-tls`).
    pub tls_verify_disabled: bool,
}

/// All members' states, plus hub reachability.
#[derive(Debug, Default)]
pub struct FleetState {
    members: RwLock<BTreeMap<String, MemberStatus>>,
    hub_reachable: AtomicBool,
    runtime_alive: AtomicBool,
    /// Sharded: every declared member's owner (lease holder) as this replica last saw it.
    owners: RwLock<BTreeMap<String, String>>,
    /// Removed members whose cleanup is recorded and not done, with its last failure.
    cleanups: RwLock<BTreeMap<String, Option<String>>>,
}

/// Marks the runtime alive while it exists; dropped when the runtime returns or panics.
pub struct AliveGuard<'a>(&'a FleetState);

impl Drop for AliveGuard<'_> {
    fn drop(&mut self) {
        self.0.runtime_alive.store(false, Ordering::Relaxed);
    }
}

impl FleetState {
    /// A copy of every member's status.
    pub fn members(&self) -> BTreeMap<String, MemberStatus> {
        self.members.read().clone()
    }

    /// The status of one member.
    pub fn member(&self, name: &str) -> Option<MemberStatus> {
        self.members.read().get(name).cloned()
    }

    /// Starts tracking a (new engagement of a) member, in `Connecting`.
    pub fn engage(&self, name: &str, kubeconfig_hash: &str) {
        let status = MemberStatus {
            phase: Phase::Connecting,
            last_error: None,
            last_sync: None,
            server: None,
            kubeconfig_hash: kubeconfig_hash.to_string(),
            since: Timestamp::now(),
            refused: false,
            tls_verify_disabled: false,
        };
        self.write().insert(name.to_string(), status);
    }

    /// Stops tracking a member (it left the fleet).
    pub fn remove(&self, name: &str) {
        self.write().remove(name);
    }

    /// Moves a member to `phase`; `error` is recorded when given.
    pub fn set_phase(&self, name: &str, phase: Phase, error: Option<String>) {
        if let Some(s) = self.write().get_mut(name) {
            if s.phase != phase {
                s.since = Timestamp::now();
            }
            s.phase = phase;
            if phase == Phase::Ready {
                s.last_sync = Some(Timestamp::now());
            }
            if error.is_some() {
                s.last_error = error;
            }
        }
    }

    /// Records the member's API server URL and whether its TLS verification is off.
    pub fn set_server(&self, name: &str, server: &str, tls_verify_disabled: bool) {
        if let Some(s) = self.write().get_mut(name) {
            s.server = Some(server.to_string());
            s.tls_verify_disabled = tls_verify_disabled;
        }
    }

    /// A member that had synced and then failed is Ready again. With `cause`, only while that is
    /// still the failure it shows (another failure since then stands). Returns whether it was.
    pub fn recovered(&self, name: &str, cause: Option<&str>) -> bool {
        let failed = self.member(name).is_some_and(|s| {
            s.phase == Phase::Failing
                && s.last_sync.is_some()
                && cause.is_none_or(|c| s.last_error.as_deref() == Some(c))
        });
        if failed {
            self.set_phase(name, Phase::Ready, None);
        }
        failed
    }

    /// Marks the member's kubeconfig refused: failing with `error`, never connected.
    pub fn refuse(&self, name: &str, error: String) {
        self.set_phase(name, Phase::Failing, Some(error));
        if let Some(s) = self.write().get_mut(name) {
            s.refused = true;
        }
    }

    /// Records whether the hub answered its last probe.
    pub fn set_hub_reachable(&self, reachable: bool) {
        self.hub_reachable.store(reachable, Ordering::Relaxed);
    }

    /// Whether the hub answered its last probe.
    pub fn hub_reachable(&self) -> bool {
        self.hub_reachable.load(Ordering::Relaxed)
    }

    /// The runtime is alive until the returned guard drops.
    pub fn runtime_started(&self) -> AliveGuard<'_> {
        self.runtime_alive.store(true, Ordering::Relaxed);
        AliveGuard(self)
    }

    /// Records which replica owns each member (sharded mode).
    pub fn set_owners(&self, owners: BTreeMap<String, String>) {
        *self.owners.write() = owners;
    }

    /// The removed members whose cleanup is pending (as last listed or tried here), each
    /// with why its last attempt failed.
    pub fn set_cleanups(&self, pending: BTreeMap<String, Option<String>>) {
        *self.cleanups.write() = pending;
    }

    /// A pending cleanup tried: `Ok` ends it, `Err` keeps it with the reason.
    pub fn cleanup_tried(&self, member: &str, result: Result<(), String>) {
        let mut cleanups = self.cleanups.write();
        match result {
            Ok(()) => cleanups.remove(member),
            Err(e) => cleanups.insert(member.to_string(), Some(e)),
        };
    }

    /// Pending cleanups (`--cleanup-on-remove`), each with its last failure.
    pub fn cleanups(&self) -> BTreeMap<String, Option<String>> {
        self.cleanups.read().clone()
    }

    /// Which replica owns each member, as last seen (empty unless sharded).
    pub fn owners(&self) -> BTreeMap<String, String> {
        self.owners.read().clone()
    }

    /// Whether the fleet runtime is running (liveness).
    pub fn runtime_alive(&self) -> bool {
        self.runtime_alive.load(Ordering::Relaxed)
    }

    /// Ready to serve: the hub is reachable and every member has synced once or is failing.
    pub fn ready(&self) -> bool {
        self.hub_reachable()
            && self
                .members()
                .values()
                .all(|m| m.phase == Phase::Failing || m.last_sync.is_some())
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, BTreeMap<String, MemberStatus>> {
        self.members.write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_every_member_to_sync_or_fail() {
        let state = FleetState::default();
        state.set_hub_reachable(true);
        assert!(state.ready(), "no members: ready");
        state.engage("a", "h1");
        state.engage("b", "h2");
        assert!(!state.ready());
        state.set_phase("a", Phase::Ready, None);
        assert!(!state.ready(), "b still connecting");
        state.set_phase("b", Phase::Failing, Some("unreachable".into()));
        assert!(state.ready(), "a failing member does not hold readiness");
        state.set_phase("a", Phase::Failing, Some("watch error".into()));
        state.set_phase("a", Phase::Ready, None);
        assert_eq!(
            state.member("a").and_then(|m| m.last_error).as_deref(),
            Some("watch error")
        );
        state.set_hub_reachable(false);
        assert!(!state.ready(), "hub unreachable");
    }

    #[test]
    fn only_a_synced_member_recovers_and_only_from_the_failure_named() {
        let state = FleetState::default();
        state.engage("a", "h1");
        state.set_phase("a", Phase::Failing, Some("not answering".into()));
        assert!(!state.recovered("a", None), "never synced: not Ready");
        state.set_phase("a", Phase::Ready, None);
        state.set_phase("a", Phase::Failing, Some("watch error".into()));
        assert!(
            !state.recovered("a", Some("not answering")),
            "another failure stands"
        );
        assert_eq!(state.member("a").map(|m| m.phase), Some(Phase::Failing));
        assert!(state.recovered("a", Some("watch error")));
        assert_eq!(state.member("a").map(|m| m.phase), Some(Phase::Ready));
        assert!(!state.recovered("a", None), "not failing");
    }
}
