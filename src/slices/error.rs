//! Errors of the EndpointSlice exporter: each names the member, the slice and the step.

/// A failed reconcile of one EndpointSlice.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {member}: {step} for EndpointSlice {namespace}/{name}: {source}")]
    Kube {
        member: String,
        namespace: String,
        name: String,
        step: Step,
        #[source]
        source: Box<kube::Error>,
    },
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

impl Step {
    pub fn as_str(self) -> &'static str {
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

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// Maps a failed API call of `step` for the slice `namespace/name` of `member`.
    pub fn kube(
        member: &str,
        namespace: &str,
        name: &str,
        step: Step,
    ) -> impl FnOnce(kube::Error) -> Self + use<> {
        let (member, namespace, name) =
            (member.to_string(), namespace.to_string(), name.to_string());
        move |source| Self::Kube {
            member,
            namespace,
            name,
            step,
            source: Box::new(source),
        }
    }

    /// Stable label for metrics: the failed step or `not_leader` (a write the fence refused:
    /// the lease was lost meanwhile).
    pub fn category(&self) -> &'static str {
        match self {
            _ if crate::ownership::refused(self) => "not_leader",
            Self::Kube { step, .. } => step.as_str(),
        }
    }

    /// The view was behind: a 409 (taken name, changed object), or a 404 of the export being
    /// updated. `Some(true)` when the hub refused (the reconcile reads everything again either
    /// way; the answer is for tests and logs).
    pub(super) fn stale_view(&self) -> Option<bool> {
        match self {
            Self::Kube { source, step, .. } => match source.as_ref() {
                kube::Error::Api(s) if s.code == 409 => Some(step.in_hub()),
                kube::Error::Api(s)
                    if s.code == 404 && *step == Step::UpdateEndpointSliceExport =>
                {
                    Some(true)
                }
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(step: Step, code: u16) -> Error {
        let status: kube::core::Status =
            serde_json::from_value(serde_json::json!({"code": code, "reason": "x"}))
                .expect("a Status");
        Error::kube("m1", "work", "web-1", step)(kube::Error::Api(Box::new(status)))
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
}
