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
    fn what_failed(&self) -> &'static str {
        let Self::Kube(failed) = self;
        failed.step.as_str()
    }
}

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
    use crate::controller::reconcile_tests::{
        names_member_object_and_step, refused_at, throttled_at,
    };

    fn failed(step: Step, code: u16) -> Error {
        refused_at(("work", "web-1"), step, code)
    }

    #[test]
    fn errors_name_member_slice_and_step_and_tell_a_stale_view() {
        let e = failed(Step::CreateEndpointSliceExport, 404);
        let step = "create_endpointsliceexport";
        names_member_object_and_step(&e, "EndpointSlice work/web-1", step);
        assert_eq!(
            e.stale_view(),
            None,
            "a missing namespace is not a stale view"
        );
        let stale = |step, code| failed(step, code).stale_view();
        assert_eq!(stale(Step::CreateEndpointSliceExport, 409), Some(true));
        assert_eq!(stale(Step::UpdateEndpointSliceExport, 404), Some(true));
        assert_eq!(stale(Step::AnnotateEndpointSlice, 409), Some(false));
        assert_eq!(stale(Step::AnnotateEndpointSlice, 500), None);
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        throttled_at::<_, Error>(Step::CreateEndpointSliceExport);
    }
}
