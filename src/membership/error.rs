//! Errors of the membership job: each names the member, the object and the step.

use crate::controller::{ApiFailure, Step as _};

/// A failed reconcile of one InternalMemberCluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {}: {} for {}/{}: {}", .0.member, .0.step.as_str(), .0.namespace, .0.name, .0.source)]
    Kube(#[from] ApiFailure<Step>),
    /// The member's API server did not answer: no heartbeat until it does.
    #[error(
        "member {member}: API server unreachable; no heartbeat for InternalMemberCluster {namespace}/{name}: {source}"
    )]
    Unreachable {
        member: String,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    /// The member does not serve ServiceExport in a version we read.
    #[error("member {member}: cannot clean up ServiceExports on leave: {reason}")]
    NoServiceExports { member: String, reason: String },
}

/// The step of a reconcile that failed; also the stable `error` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    GetInternalMemberCluster,
    UpdateStatus,
    ListMultiClusterServices,
    DeleteMultiClusterService,
    ListServiceExports,
    DeleteServiceExport,
}

impl crate::controller::Step for Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::GetInternalMemberCluster => "get_internalmembercluster",
            Self::UpdateStatus => "update_internalmembercluster_status",
            Self::ListMultiClusterServices => "list_multiclusterservices",
            Self::DeleteMultiClusterService => "delete_multiclusterservice",
            Self::ListServiceExports => "list_serviceexports",
            Self::DeleteServiceExport => "delete_serviceexport",
        }
    }
}

impl crate::controller::Failure for Error {
    /// The failed step, `member_unreachable` or `no_serviceexport_api`.
    fn what_failed(&self) -> &'static str {
        match self {
            Self::Kube(failed) => failed.step.as_str(),
            Self::Unreachable { .. } => "member_unreachable",
            Self::NoServiceExports { .. } => "no_serviceexport_api",
        }
    }
}

impl Error {
    /// The status write found the object changed since it was read (a 409): read it again.
    pub(super) fn stale_view(&self) -> bool {
        matches!(self, Self::Kube(failed)
            if failed.step == Step::UpdateStatus && failed.refused_with() == Some(409))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconcile_tests::refused_at;

    #[test]
    fn only_a_conflict_of_the_status_write_is_read_again() {
        let stale = |step, code| refused_at::<_, Error>(step, code).stale_view();
        assert!(stale(Step::UpdateStatus, 409));
        assert!(!stale(Step::UpdateStatus, 500));
        assert!(!stale(Step::DeleteServiceExport, 409));
    }
}
