//! What a decision produces: the writes (a [`Plan`]), the Events, and how it ended.

use jiff::Timestamp;

use crate::api::{ConditionSpec, InternalServiceExport, InternalServiceExportSpec};
use crate::controller::Reconciled;
use crate::controller::writers::OtherWriter;

/// The last-seen annotations to write on the ServiceExport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSeen {
    pub resource_version: String,
    pub timestamp: String,
}

/// One patch of the ServiceExport's metadata, made before any hub write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataChange {
    pub add_finalizer: bool,
    pub last_seen: Option<LastSeen>,
}

/// The hub-side write.
#[derive(Debug, Clone, PartialEq)]
pub enum HubWrite {
    Create(Box<InternalServiceExport>),
    /// Replace the spec (every field, so stale ones are cleared).
    UpdateSpec(Box<InternalServiceExportSpec>),
    /// Delete this export's ISE. `uid` (from the view) is a precondition so only the object
    /// observed is deleted; `None`: the view has none, so `act` reads the name live and deletes
    /// only an ISE exported for this very member and Service.
    Delete {
        uid: Option<String>,
    },
}

pub use crate::controller::events::{EventKind, EventSpec};

/// How the reconcile ended, for logs, spans and the `outcome` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to do: no finalizer on a deleted export.
    Skipped,
    Exported,
    Unexported,
    Invalid(&'static str),
    /// The export's ISE is another writer's (the agent still writing it): left alone.
    OtherWriter,
}

impl Outcome {
    /// Stable label: `exported`, `unexported`, `skipped`, `invalid:<reason>`.
    pub fn label(&self) -> String {
        crate::controller::Outcome::reconciled(*self).label()
    }
}

impl crate::controller::Outcome for Outcome {
    fn reconciled(self) -> Reconciled {
        let (outcome, reason) = match self {
            Self::Skipped => ("skipped", None),
            Self::Exported => ("exported", None),
            Self::Unexported => ("unexported", None),
            Self::Invalid(r) => ("invalid", Some(r)),
            // Prefixed, as every job's: the unprefixed labels are this job's older ones.
            Self::OtherWriter => return Reconciled::of(super::super::NAME, "other_writer"),
        };
        Reconciled::Done {
            job: None,
            outcome,
            reason,
        }
    }
}

/// The writes that converge one ServiceExport, in the order `act` performs them:
/// metadata → hub delete → finalizer removal → status → hub create/update.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub metadata: Option<MetadataChange>,
    pub hub: Option<HubWrite>,
    pub remove_finalizer: bool,
    /// Conditions to set; empty means no status write.
    pub conditions: Vec<ConditionSpec>,
    pub events: Vec<EventSpec>,
    /// Reconcile again after a bounded backoff even if nothing changes (after a UID-mismatch
    /// unexport; a public IP that is not listed yet).
    pub recheck: bool,
    /// The export cannot complete yet (Azure lookup failed, DNS label pending): the reconcile
    /// fails with this message after the other writes, and is retried with backoff.
    pub pending: Option<String>,
    /// `exportedSince` of the ISE written, when one is.
    pub exported_since: Option<Timestamp>,
    /// The ISE was left to this other writer ([`Plan::left_to`]).
    pub held: Option<OtherWriter>,
    pub outcome: Outcome,
}

impl Plan {
    pub(super) fn new(outcome: Outcome) -> Self {
        Self {
            metadata: None,
            hub: None,
            remove_finalizer: false,
            conditions: vec![],
            events: vec![],
            recheck: false,
            pending: None,
            exported_since: None,
            held: None,
            outcome,
        }
    }

    /// The plan when `other` (the agent still running for the member) wrote the ISE last:
    /// a plan that would update that ISE writes nothing at all, the export's status and
    /// last-seen stamp included (the agent writes those as well, and the two would take turns),
    /// and says why. A plan that creates or withdraws an ISE is not a second writer's business.
    pub fn left_to(self, other: Option<OtherWriter>) -> Self {
        match other {
            Some(other) if matches!(self.hub, Some(HubWrite::UpdateSpec(_))) => Self {
                held: Some(other),
                ..Self::new(Outcome::OtherWriter)
            },
            _ => self,
        }
    }

    /// Whether the plan withdraws an export (deletes an ISE or drops the cleanup finalizer):
    /// such a plan is only carried out once the observations it rests on are confirmed live.
    pub fn unexports(&self) -> bool {
        matches!(self.hub, Some(HubWrite::Delete { .. })) || self.remove_finalizer
    }

    /// Number of API writes the plan makes, Events not counted.
    pub fn writes(&self) -> usize {
        usize::from(self.metadata.is_some())
            + usize::from(self.hub.is_some())
            + usize::from(self.remove_finalizer)
            + usize::from(!self.conditions.is_empty())
    }
}
