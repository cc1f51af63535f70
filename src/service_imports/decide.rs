//! The pure decisions of both halves: what one ServiceImport needs next in the hub
//! ([`forward`]), and what one InternalServiceImport needs next in the member ([`back`]).
//! Each returns one step; the reconcile performs it and decides again on what the API answered,
//! until nothing is left (the order of the reference: finalizer, then the hub's copy; on
//! deletion the hub's copy, then the finalizer).

use super::model::{ImportView, InternalView};
use crate::api::{ExportedObjectReference, ServiceImportStatus};
use crate::controller::writers::OtherWriter;

/// The forward job's name, as `--controllers` spells it (and its metric labels' prefix).
pub const NAME: &str = "serviceimport";
/// The status-back job's name, as `--controllers` spells it (and its metric labels' prefix).
pub const BACK_NAME: &str = "internalserviceimport";

/// The InternalServiceImport of the ServiceImport `namespace/name`: `<namespace>-<name>`.
pub fn internal_name(namespace: &str, name: &str) -> String {
    format!("{namespace}-{name}")
}

/// The next step of a ServiceImport's forward half.
#[derive(Debug, Clone, PartialEq)]
pub enum Forward {
    /// Converged (or being deleted without our finalizer: its cleanup is done).
    Nothing,
    /// Add the finalizer (before anything is written to the hub).
    AddFinalizer,
    /// Create the InternalServiceImport with this reference.
    Create(ExportedObjectReference),
    /// Update the InternalServiceImport's reference to this one.
    Update(ExportedObjectReference),
    /// Being deleted: delete the InternalServiceImport first.
    DeleteInternal,
    /// Being deleted, the InternalServiceImport gone: release the ServiceImport.
    RemoveFinalizer,
}

/// The next step for the ServiceImport `si` of `member`, whose InternalServiceImport is
/// `internal` (`None`: there is none).
pub fn forward(member: &str, si: &ImportView, internal: Option<&InternalView>) -> Forward {
    if si.deleting {
        return match (si.finalized(), internal) {
            (false, _) => Forward::Nothing,
            (true, Some(_)) => Forward::DeleteInternal,
            (true, None) => Forward::RemoveFinalizer,
        };
    }
    if !si.finalized() {
        return Forward::AddFinalizer;
    }
    match internal {
        None => Forward::Create(reference_of(member, si)),
        Some(isi) => {
            let desired = updated(&isi.reference, si);
            if desired == isi.reference {
                Forward::Nothing
            } else {
                Forward::Update(desired)
            }
        }
    }
}

/// The reference a new InternalServiceImport carries, as fleet-networking's `FromMetaObjects`
/// builds it. Kind and API version come from the ServiceImport's TypeMeta, which a typed Go
/// client's read leaves empty (the reference's integration specs expect them so): empty here.
pub fn reference_of(member: &str, si: &ImportView) -> ExportedObjectReference {
    ExportedObjectReference {
        cluster_id: member.to_string(),
        kind: String::new(),
        namespace: si.id.namespace.clone(),
        name: si.id.name.clone(),
        resource_version: si.id.resource_version.clone().unwrap_or_default(),
        generation: si.generation,
        uid: si.id.uid.clone().unwrap_or_default(),
        namespaced_name: format!("{}/{}", si.id.namespace, si.id.name),
        api_version: None,
        exported_since: si.created.clone(),
    }
}

/// The writer `step` leaves the InternalServiceImport to: `other` (the agent, when it wrote
/// it last) when the step would update it. Creating or deleting one is not a second writer's
/// business.
pub fn left_to(step: &Forward, other: Option<OtherWriter>) -> Option<OtherWriter> {
    other.filter(|_| matches!(step, Forward::Update(_)))
}

/// An existing reference brought up to date, as fleet-networking's `UpdateFromMetaObject`
/// does: version, generation and the export time (the creation time); the rest is kept.
pub fn updated(existing: &ExportedObjectReference, si: &ImportView) -> ExportedObjectReference {
    ExportedObjectReference {
        resource_version: si.id.resource_version.clone().unwrap_or_default(),
        generation: si.generation,
        exported_since: si.created.clone(),
        ..existing.clone()
    }
}

/// The next step for the InternalServiceImport `isi`, whose ServiceImport is `si` (`None`:
/// the member has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Back {
    Nothing,
    /// It names no ServiceImport (an empty namespace or name): nothing to read or delete on
    /// its word; the reference's read fails on it until it is fixed.
    Invalid,
    /// Copy the hub's verdict into the ServiceImport's status.
    WriteStatus,
    /// Its ServiceImport is gone (its finalizer was removed by hand): delete it.
    DeleteInternal,
}

/// See [`Back`].
pub fn back(isi: &InternalView, si: Option<&ImportView>) -> Back {
    let (ns, name) = isi.referred();
    if ns.is_empty() || name.is_empty() {
        return Back::Invalid;
    }
    match si {
        None => Back::DeleteInternal,
        Some(si) if same_status(&si.status, &isi.status) => Back::Nothing,
        Some(_) => Back::WriteStatus,
    }
}

/// Equal as fleet-networking compares them (`equality.Semantic`): an empty string is no string.
pub fn same_status(a: &ServiceImportStatus, b: &ServiceImportStatus) -> bool {
    normalized(a) == normalized(b)
}

fn normalized(s: &ServiceImportStatus) -> ServiceImportStatus {
    let mut s = s.clone();
    s.session_affinity = s.session_affinity.filter(|v| !v.is_empty());
    s.type_ = s.type_.filter(|v| !v.is_empty());
    s
}

/// How a reconcile ended well; its metric label is `<job>:<label>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This replica may not write for the member.
    Skipped,
    Unchanged,
    /// The finalizer was added and the InternalServiceImport created.
    Created,
    /// The InternalServiceImport's reference was brought up to date.
    Updated,
    /// The InternalServiceImport was deleted and the finalizer removed.
    CleanedUp,
    /// The hub's verdict was written into the ServiceImport's status.
    Reflected,
    /// The InternalServiceImport of a ServiceImport that is gone was deleted.
    DanglingDeleted,
    /// The ServiceImport is gone; so is (or was already) its InternalServiceImport.
    Gone,
    /// The InternalServiceImport names no ServiceImport.
    InvalidReference,
    /// The InternalServiceImport is another writer's (the agent still writing it): left alone.
    OtherWriter,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::Unchanged => "unchanged",
            Self::Created => "created",
            Self::Updated => "updated",
            Self::CleanedUp => "cleaned_up",
            Self::Reflected => "reflected",
            Self::DanglingDeleted => "dangling_deleted",
            Self::Gone => "gone",
            Self::InvalidReference => "invalid_reference",
            Self::OtherWriter => "other_writer",
        }
    }

    /// The outcome of a forward reconcile that performed `step` (the most telling one wins).
    pub fn of_forward(self, step: &Forward) -> Self {
        let this = match step {
            Forward::Nothing => Self::Unchanged,
            Forward::AddFinalizer | Forward::Create(_) => Self::Created,
            Forward::Update(_) => Self::Updated,
            Forward::DeleteInternal | Forward::RemoveFinalizer => Self::CleanedUp,
        };
        match (self, this) {
            (Self::Unchanged, this) => this,
            (was, _) => was,
        }
    }
}

/// The outcome of one half's reconcile, with the job it is labelled under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Labelled {
    pub job: &'static str,
    pub outcome: Outcome,
}

impl crate::controller::Outcome for Labelled {
    /// `serviceimport:<label>` or `internalserviceimport:<label>`.
    fn reconciled(self) -> crate::controller::Reconciled {
        crate::controller::Reconciled::of(self.job, self.outcome.label())
    }
}

#[cfg(test)]
mod tests;
