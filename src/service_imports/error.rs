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

impl crate::controller::Failure for Error {
    fn what_failed(&self) -> &'static str {
        let Self::Kube(failed) = self;
        failed.step.as_str()
    }
}

impl Error {
    /// The views were behind: a 409 (a changed object, a taken name), or a 404 of an object
    /// being updated. The reconcile reads both objects live and decides again.
    pub(super) fn stale_view(&self) -> bool {
        match self {
            Self::Kube(failed) => match failed.refused_with() {
                Some(409) => true,
                Some(404) => matches!(
                    failed.step,
                    Step::AddFinalizer
                        | Step::RemoveFinalizer
                        | Step::WriteServiceImportStatus
                        | Step::UpdateInternalServiceImport
                ),
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconcile_tests::{
        names_member_object_and_step, refused_at, throttled_at,
    };

    fn failed(step: Step, code: u16) -> Error {
        refused_at(("work", "svc"), step, code)
    }

    #[test]
    fn errors_name_member_object_and_step_and_tell_a_stale_view() {
        let e = failed(Step::AddFinalizer, 500);
        names_member_object_and_step(&e, "ServiceImport work/svc", "add_serviceimport_finalizer");
        let copy = "InternalServiceImport work/svc";
        let e = failed(Step::CreateInternalServiceImport, 500);
        names_member_object_and_step(&e, copy, "create_internalserviceimport");
        assert!(failed(Step::CreateInternalServiceImport, 409).stale_view());
        assert!(failed(Step::WriteServiceImportStatus, 404).stale_view());
        assert!(!failed(Step::CreateInternalServiceImport, 404).stale_view());
        assert!(!failed(Step::AddFinalizer, 500).stale_view());
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        throttled_at::<_, Error>(Step::WriteServiceImportStatus);
    }
}
