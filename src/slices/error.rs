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

crate::controller::api_failures_only!(Error);

impl Error {
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
    use crate::controller::reconcile_tests::refused_at;

    #[test]
    fn a_stale_view_tells_whether_the_hub_refused() {
        let stale = |step, code| refused_at::<_, Error>(step, code).stale_view();
        let create = Step::CreateEndpointSliceExport;
        assert_eq!(
            stale(create, 404),
            None,
            "a missing namespace is not a stale view"
        );
        assert_eq!(stale(create, 409), Some(true));
        assert_eq!(stale(Step::UpdateEndpointSliceExport, 404), Some(true));
        assert_eq!(stale(Step::AnnotateEndpointSlice, 409), Some(false));
        assert_eq!(stale(Step::AnnotateEndpointSlice, 500), None);
    }
}
