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

impl crate::controller::Failure for Error {
    fn what_failed(&self) -> &'static str {
        let Self::Kube(failed) = self;
        failed.step.as_str()
    }
}

impl Error {
    /// The view was behind: a 409 (a changed import or slice, a slice that exists already) or
    /// a 404 of the slice being updated. The reconcile then reads both live and decides again.
    pub(super) fn stale_view(&self) -> bool {
        match self {
            Self::Kube(failed) => match failed.refused_with() {
                Some(409) => true,
                Some(404) => failed.step == Step::UpdateEndpointSlice,
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
        refused_at(("fleet-member-m1", "imp"), step, code)
    }

    #[test]
    fn errors_name_member_import_and_step_and_tell_a_stale_view() {
        let e = failed(Step::CreateEndpointSlice, 500);
        let import = "EndpointSliceImport fleet-member-m1/imp";
        names_member_object_and_step(&e, import, "create_endpointslice");
        assert!(failed(Step::CreateEndpointSlice, 409).stale_view());
        assert!(failed(Step::AddFinalizer, 409).stale_view());
        assert!(failed(Step::UpdateEndpointSlice, 404).stale_view());
        assert!(!failed(Step::CreateEndpointSlice, 404).stale_view());
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        throttled_at::<_, Error>(Step::CreateEndpointSlice);
    }
}
