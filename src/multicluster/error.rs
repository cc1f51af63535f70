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
            Self::Kube(failed) => failed.stale_view(|step| {
                matches!(
                    step,
                    Step::PatchMetadata
                        | Step::PatchStatus
                        | Step::OwnServiceImport
                        | Step::UpdateService
                )
            }),
            Self::ControlledElsewhere { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The views are behind where a write finds its object changed, or gone from under it.
    #[test]
    fn a_conflict_or_an_object_written_gone_is_a_stale_view() {
        use crate::controller::reconcile_tests::refused_at;
        let stale = |step, code| refused_at::<_, Error>(step, code).stale_view();
        assert!(stale(Step::CreateServiceImport, 409));
        assert!(stale(Step::UpdateService, 404));
        assert!(stale(Step::OwnServiceImport, 404));
        assert!(
            !stale(Step::CreateService, 404),
            "a missing namespace is not a stale view"
        );
    }
}
