//! Errors of the ServiceExport job: each names the member, the object and the step that failed.

use crate::controller::{ApiFailure, Step as _};

/// The step of a reconcile that failed; also the stable `error` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    GetServiceExport,
    GetService,
    PatchMetadata,
    PatchStatus,
    RemoveFinalizer,
    CreateInternalServiceExport,
    GetInternalServiceExport,
    UpdateInternalServiceExport,
    DeleteInternalServiceExport,
    LookupPublicIp,
}

impl crate::controller::Step for Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::GetServiceExport => "get_serviceexport",
            Self::GetService => "get_service",
            Self::PatchMetadata => "patch_serviceexport_metadata",
            Self::PatchStatus => "patch_serviceexport_status",
            Self::RemoveFinalizer => "remove_finalizer",
            Self::CreateInternalServiceExport => "create_internalserviceexport",
            Self::GetInternalServiceExport => "get_internalserviceexport",
            Self::UpdateInternalServiceExport => "update_internalserviceexport",
            Self::DeleteInternalServiceExport => "delete_internalserviceexport",
            Self::LookupPublicIp => "lookup_public_ip",
        }
    }
}

/// A failed reconcile of one ServiceExport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {}: {} for {}/{}: {}", .0.member, .0.step.as_str(), .0.namespace, .0.name, .0.source)]
    Kube(#[from] ApiFailure<Step>),
    /// The export cannot complete yet (Azure lookup failed, DNS label being added).
    #[error("member {member}: export of {namespace}/{name} is pending: {message}")]
    Pending {
        member: String,
        namespace: String,
        name: String,
        message: String,
        /// How long the service that refused asked us to wait (ARM's `Retry-After`).
        retry_after: Option<std::time::Duration>,
    },
}

impl Error {
    /// The wait a throttling server asked for (ARM, or an API server's refusal), which the
    /// requeue must not undercut.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Pending { retry_after, .. } => *retry_after,
            Self::Kube(failed) => failed.retry_after(),
        }
    }

    /// A 409 the reconcile resolves by reading the object again: which cluster refused.
    pub(super) fn conflict(&self) -> Option<Conflict> {
        match self {
            Self::Kube(failed) if failed.refused_with() == Some(409) => Some(match failed.step {
                Step::CreateInternalServiceExport
                | Step::GetInternalServiceExport
                | Step::UpdateInternalServiceExport
                | Step::DeleteInternalServiceExport => Conflict::Hub,
                _ => Conflict::Member,
            }),
            _ => None,
        }
    }
}

impl crate::controller::Failure for Error {
    /// The failed step or `pending`.
    fn what_failed(&self) -> &'static str {
        match self {
            Self::Kube(failed) => failed.step.as_str(),
            Self::Pending { .. } => "pending",
        }
    }

    fn retry_after(&self) -> Option<std::time::Duration> {
        Error::retry_after(self)
    }
}

/// Where a 409 came from: what a reconcile has to read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conflict {
    /// The member's ServiceExport changed under us: its ISE view is not implicated.
    Member,
    /// The hub's ISE is not what the view showed.
    Hub,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Failure as _;
    use crate::controller::reconcile_tests::{honours_retry_after, refused_at};

    #[test]
    fn a_409_names_the_cluster_that_refused() {
        let conflict = |step| refused_at::<_, Error>(step, 409).conflict();
        for step in [
            Step::PatchMetadata,
            Step::PatchStatus,
            Step::RemoveFinalizer,
        ] {
            assert_eq!(conflict(step), Some(Conflict::Member), "{step:?}");
        }
        for step in [
            Step::CreateInternalServiceExport,
            Step::UpdateInternalServiceExport,
            Step::DeleteInternalServiceExport,
        ] {
            assert_eq!(conflict(step), Some(Conflict::Hub), "{step:?}");
        }
        let refused = refused_at::<_, Error>(Step::PatchMetadata, 500);
        assert_eq!(refused.conflict(), None);
    }

    #[test]
    fn a_pending_export_waits_as_long_as_arm_asked() {
        let pending = Error::Pending {
            member: "m1".into(),
            namespace: "shop".into(),
            name: "cart".into(),
            message: "ARM throttled the lookup".into(),
            retry_after: Some(std::time::Duration::from_secs(20)),
        };
        honours_retry_after(&pending);
        assert_eq!(pending.category(), "pending");
    }
}
