//! Errors of the reconciler: each names the member, the object and the step that failed.

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

impl Step {
    /// Stable snake_case name.
    pub fn as_str(self) -> &'static str {
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

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed reconcile of one ServiceExport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("member {member}: {step} for {namespace}/{name}: {source}")]
    Kube {
        member: String,
        namespace: String,
        name: String,
        step: Step,
        #[source]
        source: Box<kube::Error>,
    },
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
    /// Maps a failed API call of `step` on `namespace/name` of `member` to an [`Error`].
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

    /// Stable label for metrics: the failed step, `pending` or `not_leader` (a write the
    /// fence refused: the lease was lost meanwhile).
    pub fn category(&self) -> &'static str {
        match self {
            _ if crate::ownership::refused(self) => "not_leader",
            Self::Kube { step, .. } => step.as_str(),
            Self::Pending { .. } => "pending",
        }
    }

    /// The wait a throttling server asked for, which the requeue must not undercut.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Pending { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A 409 the reconcile resolves by reading the object again: which cluster refused.
    pub(super) fn conflict(&self) -> Option<Conflict> {
        match self {
            Self::Kube { source, step, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409) => {
                Some(match step {
                    Step::CreateInternalServiceExport
                    | Step::GetInternalServiceExport
                    | Step::UpdateInternalServiceExport
                    | Step::DeleteInternalServiceExport => Conflict::Hub,
                    _ => Conflict::Member,
                })
            }
            _ => None,
        }
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

    fn failed(step: Step, code: u16) -> Error {
        let status: kube::core::Status =
            serde_json::from_value(serde_json::json!({"code": code, "reason": "Conflict"}))
                .expect("a Status");
        Error::kube("m1", "shop", "cart", step)(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn a_409_names_the_cluster_that_refused() {
        for step in [
            Step::PatchMetadata,
            Step::PatchStatus,
            Step::RemoveFinalizer,
        ] {
            assert_eq!(
                failed(step, 409).conflict(),
                Some(Conflict::Member),
                "{step}"
            );
        }
        for step in [
            Step::CreateInternalServiceExport,
            Step::UpdateInternalServiceExport,
            Step::DeleteInternalServiceExport,
        ] {
            assert_eq!(failed(step, 409).conflict(), Some(Conflict::Hub), "{step}");
        }
        assert_eq!(failed(Step::PatchMetadata, 500).conflict(), None);
        assert!(
            failed(Step::PatchStatus, 409)
                .to_string()
                .contains("member m1")
        );
    }
}
