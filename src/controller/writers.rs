//! Two writers of one object: fleet-networking's agent still writing for a member fleetnet-hub
//! serves. A job asks, before it overwrites an object it serves, whether the agent wrote it
//! last, after the member was engaged; if so it reports that and leaves the object alone (the
//! two would otherwise take turns overwriting each other), and looks again later.
//!
//! The apiserver records who wrote what in `metadata.managedFields`, one entry per field
//! manager with the time it last changed a field; a controller-runtime client's manager is its
//! User-Agent up to the first `/`: the agents' binaries' names ([`AGENT_MANAGERS`]). Only those
//! count: the objects the jobs serve have other, legitimate writers (the hub's controllers
//! write an InternalServiceExport's conflict verdict, a user edits a ServiceExport's spec with
//! `kubectl`, the cloud provider a derived Service's status, the garbage collector owner
//! references), and none of them is a second writer of what the agent wrote. Knowing the names
//! also lets a view keep a writer as a `&'static str`, with no allocation per object.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

use crate::client::FIELD_MANAGER;

/// The field managers of fleet-networking's member agents (`member-net-controller-manager`
/// for the export, import and membership controllers, `mcs-controller-manager` for the
/// MultiClusterService controller).
pub const AGENT_MANAGERS: [&str; 2] = ["member-net-controller-manager", "mcs-controller-manager"];

/// How long an agent's write is left alone. A running agent rewrites an object at once on
/// every change it sees, so while it runs its write is always this recent; once it stopped,
/// the job takes the object over this long after its last write.
pub const HOLD: Duration = Duration::from_secs(120);

/// An agent wrote an object last: who, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherWriter {
    /// Its field manager, one of [`AGENT_MANAGERS`].
    pub manager: &'static str,
    /// When it last changed a field (managedFields' time, whole seconds).
    pub time: Timestamp,
}

impl OtherWriter {
    /// When its write stops holding the object ([`HOLD`] after it): the job looks again then.
    pub fn until(&self) -> Timestamp {
        self.time.checked_add(HOLD).unwrap_or(Timestamp::MAX)
    }

    /// How long from `now` until [`OtherWriter::until`] (at least one second).
    pub fn wait(&self, now: Timestamp) -> Duration {
        let left = Duration::try_from(self.until().duration_since(now)).unwrap_or_default();
        left.max(Duration::from_secs(1))
    }
}

/// What a view keeps of an object's managedFields: the newest agent write and our own newest
/// write, in 24 bytes (whole seconds, as managedFields has them), instead of the field sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writers {
    /// 1 + the agent's index in [`AGENT_MANAGERS`]; 0: no agent wrote it.
    agent: u8,
    /// When the agent last wrote it (seconds since the epoch).
    agent_at: i64,
    /// When we last wrote it; [`NEVER`]: we never did.
    own_at: i64,
}

/// No write.
const NEVER: i64 = i64::MIN;

impl Default for Writers {
    fn default() -> Self {
        Self {
            agent: 0,
            agent_at: NEVER,
            own_at: NEVER,
        }
    }
}

impl Writers {
    /// Read from an object's managedFields; our manager is `own`.
    pub fn of(meta: &ObjectMeta, own: &str) -> Self {
        let mut writers = Self::default();
        for entry in meta.managed_fields.iter().flatten() {
            let (Some(manager), Some(Time(time))) = (entry.manager.as_deref(), &entry.time) else {
                continue;
            };
            let at = time.as_second();
            if manager == own {
                writers.own_at = writers.own_at.max(at);
            } else if let Some(i) = AGENT_MANAGERS.iter().position(|a| *a == manager)
                && (writers.agent == 0 || writers.agent_at < at)
            {
                writers.agent = u8::try_from(i + 1).unwrap_or(0);
                writers.agent_at = at;
            }
        }
        writers
    }

    /// The agent that wrote it last, and when.
    fn agent(self) -> Option<(&'static str, Timestamp)> {
        let manager = AGENT_MANAGERS.get(usize::from(self.agent.checked_sub(1)?))?;
        Some((manager, Timestamp::from_second(self.agent_at).ok()?))
    }

    /// When we last wrote it.
    fn own(self) -> Option<Timestamp> {
        (self.own_at != NEVER)
            .then(|| Timestamp::from_second(self.own_at).ok())
            .flatten()
    }

    /// Read with fleetnet-hub's own manager ([`FIELD_MANAGER`]).
    pub fn of_ours(meta: &ObjectMeta) -> Self {
        Self::of(meta, FIELD_MANAGER)
    }

    /// The agent, if it wrote last (not before our own last write) and after `since`.
    pub fn other_writer(self, since: Timestamp) -> Option<OtherWriter> {
        let (manager, time) = self.agent()?;
        // Whole seconds: a write in the same second as ours may be the later one, and leaving
        // the object alone is the safe side (it is taken over when the hold ends).
        let last = self.own().is_none_or(|own| time >= own);
        (last && time > since).then_some(OtherWriter { manager, time })
    }

    /// The managedFields these writers stand for (manager and time only), for an object a
    /// view rebuilds; `None` when there are none.
    pub fn managed_fields(self) -> Option<Vec<ManagedFieldsEntry>> {
        let entry = |manager: &str, time: Timestamp| ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            operation: Some("Update".to_owned()),
            time: Some(Time(time)),
            ..Default::default()
        };
        let mut entries = vec![];
        if let Some(own) = self.own() {
            entries.push(entry(FIELD_MANAGER, own));
        }
        if let Some((agent, time)) = self.agent() {
            entries.push(entry(agent, time));
        }
        Some(entries).filter(|e| !e.is_empty())
    }
}

/// Whether an agent wrote `meta`'s object last, after our own last write (as manager `own`)
/// and after `since`: see [`since`] for what a job passes.
pub fn other_writer(meta: &ObjectMeta, own: &str, since: Timestamp) -> Option<OtherWriter> {
    Writers::of(meta, own).other_writer(since)
}

/// The `since` a job passes at `now`: what the agent wrote before the member was `engaged`
/// is adopted, not another writer, and a write older than [`HOLD`] no longer holds.
pub fn since(engaged: Timestamp, now: Timestamp) -> Timestamp {
    let held = now.checked_sub(HOLD).unwrap_or(Timestamp::MIN);
    engaged.max(held)
}

#[cfg(test)]
mod tests;
