//! What the kit tells of reconciles (how each ended, what it wrote, what the watches and
//! queues did), and to whom: the observer, for metrics and the member's state.

use std::time::Duration;

/// How a reconcile ended: what it did, or the category of the error it failed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// It ended well. Its label is `[<job>:]<outcome>[:<reason>]`.
    Done {
        /// The label's prefix: the job's name, or none (the ServiceExport job's labels, from
        /// when it was the only job, have none).
        job: Option<&'static str>,
        outcome: &'static str,
        /// Why, for an outcome that has reasons (`invalid:<reason>`).
        reason: Option<&'static str>,
    },
    Failed(&'static str),
}

impl Reconciled {
    /// Ended well with `outcome`, of job `job` (its label `<job>:<outcome>`).
    pub fn of(job: &'static str, outcome: &'static str) -> Self {
        Self::Done {
            job: Some(job),
            outcome,
            reason: None,
        }
    }

    /// Stable label, as metrics and spans carry it: `<outcome>`, `invalid:<reason>`,
    /// `endpointslice:<outcome>` or `error:<category>`.
    pub fn label(&self) -> String {
        match self {
            Self::Done {
                job,
                outcome,
                reason,
            } => {
                let mut label = String::new();
                if let Some(job) = job {
                    label.push_str(job);
                    label.push(':');
                }
                label.push_str(outcome);
                if let Some(reason) = reason {
                    label.push(':');
                    label.push_str(reason);
                }
                label
            }
            Self::Failed(category) => format!("error:{category}"),
        }
    }
}

/// Receives what reconciles did, for metrics and the member's state.
pub trait ReconcileObserver: Send + Sync + 'static {
    /// A reconcile of `member` started (in-flight reconciles are the member's queue depth).
    fn reconcile_started(&self, member: &str);
    /// One reconcile ended.
    fn reconciled(&self, member: &str, outcome: Reconciled, took: Duration);
    /// An ISE was created, updated or deleted (`op`).
    fn hub_write(&self, member: &str, op: &'static str);
    /// An ISE was written `latency` after the Service change it carries was first seen.
    fn export_latency(&self, member: &str, latency: Duration);
    /// The hub's conflict verdict reached the ServiceExport `latency` after its export time.
    fn conflict_reflected(&self, member: &str, latency: Duration);
    /// A watch of job `job` fails (`member_side`: a watch of the member; else of the hub).
    fn watch_failed(&self, member: &str, job: &'static str, member_side: bool, error: &str);
    /// Every watch of job `job` that had failed has listed again: its views are current.
    fn watches_recovered(&self, _member: &str, _job: &'static str) {}
    /// An EndpointSliceExport was created, updated or deleted (`op`).
    fn slice_write(&self, _member: &str, _op: &'static str) {}
    /// An EndpointSlice exported by `origin` was imported into `destination` `took` after its
    /// export (`exportedSince`), once per generation; `first_import`: its first.
    fn slice_import_duration(
        &self,
        _origin: &str,
        _destination: &str,
        _first_import: bool,
        _took: Duration,
    ) {
    }
    /// An item was dropped from a bounded queue (`queue`) of `member` because it was full.
    fn dropped(&self, _member: &str, _queue: &'static str) {}
    /// Job `job` left `object` to another writer (`writer`: the agent still writing it).
    fn other_writer(
        &self,
        _member: &str,
        _job: &'static str,
        _object: &str,
        _writer: &super::writers::OtherWriter,
    ) {
    }
}

/// An observer that records nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl ReconcileObserver for NoObserver {
    fn reconcile_started(&self, _: &str) {}
    fn watch_failed(&self, _: &str, _: &'static str, _: bool, _: &str) {}
    fn reconciled(&self, _: &str, _: Reconciled, _: Duration) {}
    fn hub_write(&self, _: &str, _: &'static str) {}
    fn export_latency(&self, _: &str, _: Duration) {}
    fn conflict_reflected(&self, _: &str, _: Duration) {}
}

/// Tells that job `job` left `object` of `member` to `other`: a Warning naming them, and the
/// observer (`/members` shows it on the job; the reconcile's outcome counts it in metrics).
pub fn tell_other_writer(
    observer: &dyn ReconcileObserver,
    job: &'static str,
    member: &str,
    object: &str,
    other: &super::writers::OtherWriter,
) {
    tracing::warn!(
        fleet.member = %member,
        job,
        object,
        manager = other.manager,
        written = %other.time,
        "another writer ({}) still writes this object for the member: left alone; is its agent still running?",
        other.manager,
    );
    observer.other_writer(member, job, object, other);
}

#[cfg(test)]
mod tests {
    use super::Reconciled;

    #[test]
    fn labels_are_prefixed_by_the_job_and_suffixed_by_the_reason() {
        let done = |job, outcome, reason| Reconciled::Done {
            job,
            outcome,
            reason,
        };
        assert_eq!(done(None, "exported", None).label(), "exported");
        assert_eq!(
            done(None, "invalid", Some("QuotaExceeded")).label(),
            "invalid:QuotaExceeded"
        );
        assert_eq!(
            done(Some("endpointslice"), "gone", None).label(),
            "endpointslice:gone"
        );
        assert_eq!(Reconciled::Failed("pending").label(), "error:pending");
    }
}
