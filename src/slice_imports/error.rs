//! Errors of the EndpointSliceImport job: each names the member, the import and the step.

use crate::controller::{ApiFailure, Step as _};

/// A failed reconcile of one EndpointSliceImport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {}: {} for EndpointSliceImport {}/{}: {}", .0.member, .0.step.as_str(), .0.namespace, .0.name, .0.source)]
    Kube(#[from] ApiFailure<Step>),
}

/// The step of a reconcile that failed; also the stable `error` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    GetEndpointSliceImport,
    AddFinalizer,
    RemoveFinalizer,
    AnnotateEndpointSliceImport,
    GetEndpointSlice,
    CreateEndpointSlice,
    UpdateEndpointSlice,
    DeleteEndpointSlice,
}

impl crate::controller::Step for Step {
    fn as_str(self) -> &'static str {
        match self {
            Self::GetEndpointSliceImport => "get_endpointsliceimport",
            Self::AddFinalizer => "add_finalizer",
            Self::RemoveFinalizer => "remove_finalizer",
            Self::AnnotateEndpointSliceImport => "annotate_endpointsliceimport",
            Self::GetEndpointSlice => "get_endpointslice",
            Self::CreateEndpointSlice => "create_endpointslice",
            Self::UpdateEndpointSlice => "update_endpointslice",
            Self::DeleteEndpointSlice => "delete_endpointslice",
        }
    }
}

crate::controller::api_failures_only!(Error);

impl Error {
    /// The view was behind: a 409 (a changed import or slice, a slice that exists already) or
    /// a 404 of the slice being updated. The reconcile then reads both live and decides again.
    pub(super) fn stale_view(&self) -> bool {
        let Self::Kube(failed) = self;
        failed.stale_view(|step| step == Step::UpdateEndpointSlice)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_conflict_or_the_slice_updated_gone_is_a_stale_view() {
        use super::{Error, Step};
        let stale = |step, code| {
            crate::controller::reconcile_tests::refused_at::<_, Error>(step, code).stale_view()
        };
        assert!(stale(Step::AddFinalizer, 409));
        assert!(stale(Step::UpdateEndpointSlice, 404));
        assert!(!stale(Step::CreateEndpointSlice, 404));
    }
}
