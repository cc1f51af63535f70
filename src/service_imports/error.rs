//! Errors of the ServiceImport jobs: each names the member, the object and the step.

use crate::controller::{ApiFailure, Step as _};

/// A failed reconcile of one ServiceImport (forward) or InternalServiceImport (back).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {}: {} for {} {}/{}: {}", .0.member, .0.step.as_str(), .0.step.object(), .0.namespace, .0.name, .0.source)]
    Kube(#[from] ApiFailure<Step>),
}

/// The step of a reconcile that failed; also the stable `error` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    GetServiceImport,
    AddFinalizer,
    RemoveFinalizer,
    WriteServiceImportStatus,
    GetInternalServiceImport,
    CreateInternalServiceImport,
    UpdateInternalServiceImport,
    DeleteInternalServiceImport,
}

impl crate::controller::Step for Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::GetServiceImport => "get_serviceimport",
            Self::AddFinalizer => "add_serviceimport_finalizer",
            Self::RemoveFinalizer => "remove_serviceimport_finalizer",
            Self::WriteServiceImportStatus => "write_serviceimport_status",
            Self::GetInternalServiceImport => "get_internalserviceimport",
            Self::CreateInternalServiceImport => "create_internalserviceimport",
            Self::UpdateInternalServiceImport => "update_internalserviceimport",
            Self::DeleteInternalServiceImport => "delete_internalserviceimport",
        }
    }
}

impl Step {
    /// The kind of object the reconcile was about when this step failed.
    fn object(self) -> &'static str {
        match self {
            Self::GetServiceImport
            | Self::AddFinalizer
            | Self::RemoveFinalizer
            | Self::WriteServiceImportStatus => "ServiceImport",
            _ => "InternalServiceImport",
        }
    }
}

crate::controller::api_failures_only!(Error);

impl Error {
    /// The views were behind: a 409 (a changed object, a taken name), or a 404 of an object
    /// being updated. The reconcile reads both objects live and decides again.
    pub(super) fn stale_view(&self) -> bool {
        let Self::Kube(failed) = self;
        failed.stale_view(|step| {
            matches!(
                step,
                Step::AddFinalizer
                    | Step::RemoveFinalizer
                    | Step::WriteServiceImportStatus
                    | Step::UpdateInternalServiceImport
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 404 of a create means a missing namespace, not a view behind.
    #[test]
    fn a_conflict_or_an_object_written_gone_is_a_stale_view() {
        let error = crate::controller::reconcile_tests::refused_at::<_, Error>;
        assert!(error(Step::CreateInternalServiceImport, 409).stale_view());
        assert!(error(Step::WriteServiceImportStatus, 404).stale_view());
        assert!(!error(Step::CreateInternalServiceImport, 404).stale_view());
    }
}
