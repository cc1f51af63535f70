//! Errors of the EndpointSlice job: each names the member, the slice and the step.

use crate::controller::{ApiFailure, Step as _};

/// A failed reconcile of one EndpointSlice.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {}: {} for EndpointSlice {}/{}: {}", .0.member, .0.step.as_str(), .0.namespace, .0.name, .0.source)]
    Kube(#[from] ApiFailure<Step>),
}

/// The step of a reconcile that failed; also the stable `error` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    GetEndpointSlice,
    GetServiceExport,
    AnnotateEndpointSlice,
    GetEndpointSliceExport,
    CreateEndpointSliceExport,
    UpdateEndpointSliceExport,
    DeleteEndpointSliceExport,
}

impl crate::controller::Step for Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::GetEndpointSlice => "get_endpointslice",
            Self::GetServiceExport => "get_serviceexport",
            Self::AnnotateEndpointSlice => "annotate_endpointslice",
            Self::GetEndpointSliceExport => "get_endpointsliceexport",
            Self::CreateEndpointSliceExport => "create_endpointsliceexport",
            Self::UpdateEndpointSliceExport => "update_endpointsliceexport",
            Self::DeleteEndpointSliceExport => "delete_endpointsliceexport",
        }
    }
}

impl Step {
    fn in_hub(self) -> bool {
        matches!(
            self,
            Self::GetEndpointSliceExport
                | Self::CreateEndpointSliceExport
                | Self::UpdateEndpointSliceExport
                | Self::DeleteEndpointSliceExport
        )
    }
}

impl crate::controller::Failure for Error {
    fn category(&self) -> &'static str {
        Error::category(self)
    }
}

impl Error {
    /// Stable label for metrics: the failed step or `not_leader` (a write the fence refused:
    /// the lease was lost meanwhile).
    pub fn category(&self) -> &'static str {
        match self {
            _ if crate::ownership::refused(self) => "not_leader",
            Self::Kube(failed) => failed.step.as_str(),
        }
    }

    /// The view was behind: a 409 (taken name, changed object), or a 404 of the export being
    /// updated. `Some(true)` when the hub refused (the reconcile reads everything again either
    /// way; the answer is for tests and logs).
    pub(super) fn stale_view(&self) -> Option<bool> {
        match self {
            Self::Kube(failed) => match failed.refused_with() {
                Some(409) => Some(failed.step.in_hub()),
                Some(404) if failed.step == Step::UpdateEndpointSliceExport => Some(true),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconcile_tests::{honours_retry_after, refusal};

    fn failed(step: Step, code: u16) -> Error {
        Error::from(ApiFailure::of("m1", "work", "web-1", step)(refusal(
            code, 0,
        )))
    }

    #[test]
    fn errors_name_member_slice_and_step_and_tell_a_stale_view() {
        let e = failed(Step::CreateEndpointSliceExport, 404);
        let text = e.to_string();
        assert!(text.contains("member m1"), "{text}");
        assert!(text.contains("EndpointSlice work/web-1"), "{text}");
        assert!(text.contains("create_endpointsliceexport"), "{text}");
        assert_eq!(
            e.stale_view(),
            None,
            "a missing namespace is not a stale view"
        );
        assert_eq!(
            failed(Step::CreateEndpointSliceExport, 409).stale_view(),
            Some(true)
        );
        assert_eq!(
            failed(Step::UpdateEndpointSliceExport, 404).stale_view(),
            Some(true)
        );
        assert_eq!(
            failed(Step::AnnotateEndpointSlice, 409).stale_view(),
            Some(false)
        );
        assert_eq!(failed(Step::AnnotateEndpointSlice, 500).stale_view(), None);
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        let throttled = Error::from(ApiFailure::of(
            "m1",
            "work",
            "web-1",
            Step::CreateEndpointSliceExport,
        )(refusal(429, 20)));
        honours_retry_after(&throttled);
    }
}
