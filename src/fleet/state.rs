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
    /// Where the member is declared: its file, or `Secret <ns>/<name>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When the phase last changed.
    pub since: Timestamp,
    /// The kubeconfig was refused (a field not allowed, the file itself, its name): no
    /// connection is made.
    pub refused: bool,
    /// TLS verification of the member's server is off (allowed by `--allow-insecure-member-tls`).
    pub tls_verify_disabled: bool,
    /// The proxy the member's connection goes through (its kubeconfig's `proxy-url`, allowed
    /// by `--allow-member-proxy`), as `http://host:port`: never its credentials.
    pub proxy: Option<String>,
    /// Each job that runs for the member, by name: one job failing (its hub watch, a CRD the
    /// hub lacks) neither stops nor hides the others.
    pub jobs: BTreeMap<&'static str, JobStatus>,
}

/// What one job of a member is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobPhase {
    /// Its watches have not all listed yet.
    Syncing,
    /// Every watch of the job has listed; reconciling.
    Ready,
    /// A watch of the job fails, or did not list in time.
    Failing,
}

impl JobPhase {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Syncing => "syncing",
            JobPhase::Ready => "ready",
            JobPhase::Failing => "failing",
        }
    }
}

/// The state of one job of a member, as `/members` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    pub phase: JobPhase,
    /// Why it is failing (kept after recovery until the next failure).
    pub last_error: Option<String>,
    /// Whether the failure is on the member's side (then the member is failing too).
    #[serde(skip)]
    pub member_side: bool,
    /// When the phase last changed.
    pub since: Timestamp,
    /// The last object the job left to another writer (fleet-networking's agent still writing
    /// it): `<manager> wrote <object> at <time>`; kept until the member is engaged again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_writer: Option<String>,
}

/// What happened to a member engagement, as the task that saw it reports it. Every phase change
/// is one of these through [`MemberStatus::next`]: the lifecycle's one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// (Re)connecting: building its client, discovering its API.
    Connecting,
    /// Discovered; its watches started.
    Syncing,
    /// Every watch has listed once.
    Synced,
    /// Unusable for now, and why.
    Failed(String),
    /// Its kubeconfig was refused: never connected, until its content changes.
    Refused(String),
    /// It works again after the failure named (any, when `None`): a member that had synced is
    /// Ready again, unless another failure has been reported since.
    Recovered(Option<String>),
}

impl MemberStatus {
    /// A new engagement, connecting.
    fn engaged(kubeconfig_hash: &str, now: Timestamp) -> Self {
        Self {
            phase: Phase::Connecting,
            last_error: None,
            last_sync: None,
            server: None,
            kubeconfig_hash: kubeconfig_hash.to_string(),
            source: None,
            since: now,
            refused: false,
            tls_verify_disabled: false,
            proxy: None,
            jobs: BTreeMap::new(),
        }
    }

    /// The status after `event` at `now`; `None` when the event changes nothing.
    pub fn next(&self, event: &Event, now: Timestamp) -> Option<Self> {
        let mut next = self.clone();
        let phase = match event {
            Event::Connecting => Phase::Connecting,
            Event::Syncing => Phase::Syncing,
            Event::Synced => Phase::Ready,
            Event::Failed(e) => {
                next.last_error = Some(e.clone());
                Phase::Failing
            }
            Event::Refused(e) => {
                next.last_error = Some(e.clone());
                next.refused = true;
                Phase::Failing
            }
            Event::Recovered(cause) => {
                let failed = self.phase == Phase::Failing
                    && self.last_sync.is_some()
                    && cause
                        .as_ref()
                        .is_none_or(|c| self.last_error.as_ref() == Some(c));
                if !failed {
                    return None;
                }
                Phase::Ready
            }
        };
        if phase != self.phase {
            next.since = now;
        }
        next.phase = phase;
        if phase == Phase::Ready {
            next.last_sync = Some(now);
        }
        Some(next)
    }
}

impl MemberStatus {
    /// What `owner` publishes of member `name` on the hub ([`crate::status`]): phases, errors
    /// (redacted already, clipped), since when; never its server, proxy or kubeconfig.
    pub fn published(&self, name: &str, owner: &str) -> crate::status::Status {
        let jobs = self.jobs.iter().map(|(job, s)| {
            let state = crate::status::JobState {
                phase: s.phase.as_str().to_string(),
                last_error: s.last_error.as_deref().map(crate::status::clip),
                since: s.since.to_string(),
            };
            (job.to_string(), state)
        });
        crate::status::Status {
            member: name.to_string(),
            owner: owner.to_string(),
            phase: self.phase.as_str().to_string(),
            since: self.since.to_string(),
            last_error: self.last_error.as_deref().map(crate::status::clip),
            source: self.source.clone(),
            jobs: jobs.collect(),
            ..Default::default()
        }
    }
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
    /// Reads of the kubeconfig directory so far.
    scans: std::sync::atomic::AtomicU64,
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
        let status = MemberStatus::engaged(kubeconfig_hash, Timestamp::now());
        self.write().insert(name.to_string(), status);
    }

    /// [`Self::engage`], with the place that declares the member (shown on `/members`).
    pub fn engage_from(&self, name: &str, kubeconfig_hash: &str, source: String) {
        let status = MemberStatus {
            source: Some(source),
            ..MemberStatus::engaged(kubeconfig_hash, Timestamp::now())
        };
        self.write().insert(name.to_string(), status);
    }

    /// A running member's new kubeconfig was taken in place (`Ok`: its hash, the engagement's
    /// from now on) or refused (`Err`: why, shown as its last error while it keeps the
    /// credentials it has).
    pub fn rotated(&self, name: &str, outcome: Result<&str, String>) {
        if let Some(status) = self.write().get_mut(name) {
            match outcome {
                Ok(hash) => status.kubeconfig_hash = hash.to_string(),
                Err(refusal) => status.last_error = Some(refusal),
            }
        }
    }

    /// Stops tracking a member (it left the fleet).
    pub fn remove(&self, name: &str) {
        self.write().remove(name);
    }

    /// Runs `forget` unless member `name` is tracked (engaged again since it was removed), with
    /// engagements held off meanwhile: what a stopped engagement leaves behind is dropped
    /// without racing a new engagement that registers it again.
    pub fn unless_engaged(&self, name: &str, forget: impl FnOnce()) {
        let members = self.write();
        if !members.contains_key(name) {
            forget();
        }
    }

    /// Applies `event` to member `name` ([`MemberStatus::next`]); whether it changed anything.
    pub fn record(&self, name: &str, event: Event) -> bool {
        let mut members = self.write();
        let Some(status) = members.get_mut(name) else {
            return false;
        };
        match status.next(&event, Timestamp::now()) {
            Some(next) => {
                *status = next;
                true
            }
            None => false,
        }
    }

    /// The member's `jobs` are starting: each syncing.
    pub fn jobs_started(&self, name: &str, jobs: impl IntoIterator<Item = &'static str>) {
        let now = Timestamp::now();
        if let Some(s) = self.write().get_mut(name) {
            s.jobs = jobs
                .into_iter()
                .map(|job| {
                    let status = JobStatus {
                        phase: JobPhase::Syncing,
                        last_error: None,
                        member_side: false,
                        since: now,
                        other_writer: None,
                    };
                    (job, status)
                })
                .collect();
        }
    }

    /// Job `job` of member `name` fails (`member_side`: a watch of the member, which fails
    /// the member too; else one of the hub, which costs only the job).
    pub fn job_failed(&self, name: &str, job: &'static str, error: &str, member_side: bool) {
        if member_side {
            self.record(name, Event::Failed(format!("{job}: {error}")));
        }
        if let Some(status) = self.write().get_mut(name).and_then(|s| s.jobs.get_mut(job)) {
            if status.phase != JobPhase::Failing {
                status.since = Timestamp::now();
            }
            status.phase = JobPhase::Failing;
            status.last_error = Some(error.to_string());
            status.member_side = member_side;
        }
    }

    /// Job `job` of member `name` left an object to another writer (`told`: who, what, when).
    pub fn job_other_writer(&self, name: &str, job: &'static str, told: String) {
        if let Some(status) = self.write().get_mut(name).and_then(|s| s.jobs.get_mut(job)) {
            status.other_writer = Some(told);
        }
    }

    /// Every watch of job `job` of member `name` has listed (again): the job is ready, and so
    /// is the member once no job fails on its side.
    pub fn job_ready(&self, name: &str, job: &'static str) {
        let member_failing_job = {
            let mut members = self.write();
            let Some(member) = members.get_mut(name) else {
                return;
            };
            if let Some(status) = member.jobs.get_mut(job) {
                if status.phase != JobPhase::Ready {
                    status.since = Timestamp::now();
                }
                status.phase = JobPhase::Ready;
                status.member_side = false;
            }
            member.jobs.values().any(|j| j.member_side)
        };
        if !member_failing_job {
            self.record(name, Event::Recovered(None));
        }
    }

    /// Records the member's API server URL and whether its TLS verification is off.
    pub fn set_server(&self, name: &str, server: &str, tls_verify_disabled: bool) {
        if let Some(s) = self.write().get_mut(name) {
            s.server = Some(server.to_string());
            s.tls_verify_disabled = tls_verify_disabled;
        }
    }

    /// Records the proxy (printable, `http://host:port`) the member's connection goes through.
    pub fn set_proxy(&self, name: &str, proxy: Option<String>) {
        if let Some(s) = self.write().get_mut(name) {
            s.proxy = proxy;
        }
    }

    /// Records whether the hub answered its last probe.
    pub fn set_hub_reachable(&self, reachable: bool) {
        self.hub_reachable.store(reachable, Ordering::Relaxed);
    }

    /// One more read of the kubeconfig directory.
    pub fn scanned(&self) {
        self.scans.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads of the kubeconfig directory so far.
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
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
        state.record("a", Event::Synced);
        assert!(!state.ready(), "b still connecting");
        state.record("b", Event::Failed("unreachable".into()));
        assert!(state.ready(), "a failing member does not hold readiness");
        state.record("a", Event::Failed("watch error".into()));
        state.record("a", Event::Synced);
        assert_eq!(
            state.member("a").and_then(|m| m.last_error).as_deref(),
            Some("watch error"),
            "the last error is kept after recovery"
        );
        state.set_hub_reachable(false);
        assert!(!state.ready(), "hub unreachable");
        assert!(
            !state.record("gone", Event::Synced),
            "an unknown member stays unknown"
        );
    }

    #[test]
    fn a_job_failing_on_the_hub_side_costs_only_that_job() {
        let state = FleetState::default();
        state.engage("a", "h1");
        state.jobs_started("a", ["serviceexport", "endpointslice"]);
        state.record("a", Event::Synced);
        state.job_ready("a", "serviceexport");
        state.job_failed(
            "a",
            "endpointslice",
            "EndpointSliceExports watch: 404",
            false,
        );
        let a = state.member("a").expect("a");
        assert_eq!(a.phase, Phase::Ready, "a hub-side failure is the job's");
        assert_eq!(a.jobs["endpointslice"].phase, JobPhase::Failing);
        assert_eq!(a.jobs["serviceexport"].phase, JobPhase::Ready);

        state.job_failed(
            "a",
            "serviceexport",
            "ServiceExports watch: too large",
            true,
        );
        let a = state.member("a").expect("a");
        assert_eq!(
            a.phase,
            Phase::Failing,
            "a member-side failure is the member's"
        );
        assert_eq!(
            a.last_error.as_deref(),
            Some("serviceexport: ServiceExports watch: too large")
        );
        state.job_ready("a", "endpointslice");
        assert_eq!(
            state.member("a").map(|m| m.phase),
            Some(Phase::Failing),
            "another job still fails on the member's side"
        );
        state.job_ready("a", "serviceexport");
        let a = state.member("a").expect("a");
        assert_eq!(a.phase, Phase::Ready);
        assert!(a.jobs.values().all(|j| j.phase == JobPhase::Ready));
    }

    #[test]
    fn only_a_synced_member_recovers_and_only_from_the_failure_named() {
        let state = FleetState::default();
        state.engage("a", "h1");
        state.record("a", Event::Failed("not answering".into()));
        assert!(
            !state.record("a", Event::Recovered(None)),
            "never synced: not Ready"
        );
        state.record("a", Event::Synced);
        state.record("a", Event::Failed("watch error".into()));
        let other = Event::Recovered(Some("not answering".into()));
        assert!(!state.record("a", other), "another failure stands");
        assert_eq!(state.member("a").map(|m| m.phase), Some(Phase::Failing));
        assert!(state.record("a", Event::Recovered(Some("watch error".into()))));
        assert_eq!(state.member("a").map(|m| m.phase), Some(Phase::Ready));
        assert!(!state.record("a", Event::Recovered(None)), "not failing");
    }

    #[test]
    fn every_event_moves_the_lifecycle_as_written() {
        let t0 = Timestamp::from_second(1_000).expect("t0");
        let t1 = Timestamp::from_second(2_000).expect("t1");
        let new = MemberStatus::engaged("h", t0);
        assert_eq!(new.phase, Phase::Connecting);
        let step = |s: &MemberStatus, e: Event| s.next(&e, t1).expect("changes");
        let syncing = step(&new, Event::Syncing);
        assert_eq!((syncing.phase, syncing.since), (Phase::Syncing, t1));
        let ready = step(&syncing, Event::Synced);
        assert_eq!((ready.phase, ready.last_sync), (Phase::Ready, Some(t1)));
        let failing = step(&ready, Event::Failed("x".into()));
        assert_eq!(
            (failing.phase, failing.last_error.as_deref()),
            (Phase::Failing, Some("x"))
        );
        let refused = step(&new, Event::Refused("bad".into()));
        assert!(refused.refused && refused.phase == Phase::Failing);
        let again = step(&ready, Event::Synced);
        assert_eq!(again.since, ready.since, "the same phase keeps its since");
        assert_eq!(step(&failing, Event::Connecting).phase, Phase::Connecting);
    }
}
