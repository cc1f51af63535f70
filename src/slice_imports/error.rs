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
    fn category(&self) -> &'static str {
        Error::category(self)
    }

    /// The wait an API server asked for in its refusal.
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Kube(failed) => failed.retry_after(),
        }
    }
}

impl Error {
    /// Stable label for metrics: the failed step or `not_leader` (a write the fence refused).
    pub fn category(&self) -> &'static str {
        match self {
            _ if crate::ownership::refused(self) => "not_leader",
            Self::Kube(failed) => failed.step.as_str(),
        }
    }

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
    use crate::controller::reconcile_tests::{honours_retry_after, refusal};

    fn failed(step: Step, code: u16) -> Error {
        Error::from(ApiFailure::of("m1", "fleet-member-m1", "imp", step)(
            refusal(code, 0),
        ))
    }

    #[test]
    fn errors_name_member_import_and_step_and_tell_a_stale_view() {
        let text = failed(Step::CreateEndpointSlice, 500).to_string();
        assert!(text.contains("member m1"), "{text}");
        assert!(
            text.contains("EndpointSliceImport fleet-member-m1/imp"),
            "{text}"
        );
        assert!(text.contains("create_endpointslice"), "{text}");
        assert!(failed(Step::CreateEndpointSlice, 409).stale_view());
        assert!(failed(Step::AddFinalizer, 409).stale_view());
        assert!(failed(Step::UpdateEndpointSlice, 404).stale_view());
        assert!(!failed(Step::CreateEndpointSlice, 404).stale_view());
        assert_eq!(
            failed(Step::DeleteEndpointSlice, 500).category(),
            "delete_endpointslice"
        );
    }

    #[test]
    fn a_failure_is_requeued_no_sooner_than_the_server_asked() {
        let throttled = Error::from(
            ApiFailure::of("m1", "ns", "imp", Step::CreateEndpointSlice)(refusal(429, 20)),
        );
        honours_retry_after(&throttled);
    }
}
