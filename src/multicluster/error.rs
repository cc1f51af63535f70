//! Errors of the MultiClusterService job: each names the member, the MultiClusterService and
//! the step.

use crate::controller::{ApiFailure, Step as _};

/// A failed reconcile of one MultiClusterService.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {}: {} for MultiClusterService {}/{}: {}", .0.member, .0.step.as_str(), .0.namespace, .0.name, .0.source)]
    Kube(#[from] ApiFailure<Step>),
    /// The ServiceImport the MultiClusterService names is controlled by an object that is not
    /// a MultiClusterService: the reference's `SetControllerReference` refuses it, and the
    /// reconcile is retried with backoff.
    #[error(
        "member {member}: MultiClusterService {namespace}/{name}: ServiceImport {namespace}/{import} is controlled by {owner}"
    )]
    ControlledElsewhere {
        member: String,
        namespace: String,
        name: String,
        import: String,
        owner: String,
    },
}

/// The step of a reconcile that failed; also the stable `error` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    GetMultiClusterService,
    GetServiceImport,
    GetService,
    PatchMetadata,
    PatchStatus,
    RemoveFinalizer,
    CreateServiceImport,
    OwnServiceImport,
    DeleteServiceImport,
    CreateService,
    UpdateService,
    DeleteService,
}

impl crate::controller::Step for Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::GetMultiClusterService => "get_multiclusterservice",
            Self::GetServiceImport => "get_serviceimport",
            Self::GetService => "get_service",
            Self::PatchMetadata => "patch_metadata",
            Self::PatchStatus => "patch_status",
            Self::RemoveFinalizer => "remove_finalizer",
            Self::CreateServiceImport => "create_serviceimport",
            Self::OwnServiceImport => "own_serviceimport",
            Self::DeleteServiceImport => "delete_serviceimport",
            Self::CreateService => "create_service",
            Self::UpdateService => "update_service",
            Self::DeleteService => "delete_service",
        }
    }
}

impl crate::controller::Failure for Error {
    /// The failed step or `controlled_elsewhere`.
    fn what_failed(&self) -> &'static str {
        match self {
            Self::Kube(failed) => failed.step.as_str(),
            Self::ControlledElsewhere { .. } => "controlled_elsewhere",
        }
    }
}

impl Error {
    /// The views were behind the API: a 409 (a name taken, an object changed since it was
    /// read), or a 404 of an object being patched. The reconcile reads everything live again.
    pub(super) fn stale_view(&self) -> bool {
        match self {
            Self::Kube(failed) => match failed.refused_with() {
                Some(409) => true,
                Some(404) => matches!(
                    failed.step,
                    Step::PatchMetadata
                        | Step::PatchStatus
                        | Step::OwnServiceImport
                        | Step::UpdateService
                ),
                _ => false,
            },
            Self::ControlledElsewhere { .. } => false,
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
        refused_at(("work", "mcs"), step, code)
    }

    #[test]
    fn errors_name_member_object_and_step_and_tell_a_stale_view() {
        let e = failed(Step::CreateService, 404);
        names_member_object_and_step(&e, "MultiClusterService work/mcs", "create_service");
        assert!(!e.stale_view(), "a missing namespace is not a stale view");
        assert!(failed(Step::CreateServiceImport, 409).stale_view());
        assert!(failed(Step::UpdateService, 404).stale_view());
        assert!(failed(Step::PatchStatus, 409).stale_view());
        assert!(!failed(Step::PatchStatus, 500).stale_view());
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        throttled_at::<_, Error>(Step::PatchStatus);
    }
}
