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
    fn category(&self) -> &'static str {
        Error::category(self)
    }

    /// The wait an API server asked for in its refusal.
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Kube(failed) => failed.retry_after(),
            Self::Unreachable { .. } | Self::NoServiceExports { .. } => None,
        }
    }
}

impl Error {
    /// Stable label for metrics: the failed step, `member_unreachable`, `no_serviceexport_api`,
    /// or `not_leader` (a write the fence refused).
    pub fn category(&self) -> &'static str {
        match self {
            _ if crate::ownership::refused(self) => "not_leader",
            Self::Kube(failed) => failed.step.as_str(),
            Self::Unreachable { .. } => "member_unreachable",
            Self::NoServiceExports { .. } => "no_serviceexport_api",
        }
    }

    /// The status write found the object changed since it was read (a 409): read it again.
    pub(super) fn stale_view(&self) -> bool {
        matches!(self, Self::Kube(failed)
            if failed.step == Step::UpdateStatus && failed.refused_with() == Some(409))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconcile_tests::{honours_retry_after, refusal};

    fn failed(step: Step, code: u16) -> Error {
        Error::from(ApiFailure::of("m1", "fleet-member-m1", "m1", step)(
            refusal(code, 0),
        ))
    }

    #[test]
    fn errors_name_member_object_and_step_and_tell_a_conflict() {
        let e = failed(Step::UpdateStatus, 409);
        let text = e.to_string();
        assert!(text.contains("member m1"), "{text}");
        assert!(text.contains("fleet-member-m1/m1"), "{text}");
        assert!(
            text.contains("update_internalmembercluster_status"),
            "{text}"
        );
        assert!(e.stale_view());
        assert!(!failed(Step::UpdateStatus, 500).stale_view());
        assert!(!failed(Step::DeleteServiceExport, 409).stale_view());
        assert_eq!(
            failed(Step::ListServiceExports, 500).category(),
            "list_serviceexports"
        );
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        let throttled = Error::from(ApiFailure::of("m1", "ns", "m1", Step::UpdateStatus)(
            refusal(429, 20),
        ));
        honours_retry_after(&throttled);
    }
}
