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
    /// Writes are not allowed (this replica lost or does not hold the leader lease).
    #[error("member {member}: not writing {namespace}/{name}: this replica is not the leader")]
    NotLeader {
        member: String,
        namespace: String,
        name: String,
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

    /// Stable label for metrics: the failed step, `pending` or `not_leader`.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube { step, .. } => step.as_str(),
            Self::Pending { .. } => "pending",
            Self::NotLeader { .. } => "not_leader",
        }
    }

    /// The wait a throttling server asked for, which the requeue must not undercut.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Pending { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A 409 the reconcile resolves by reading the object again.
    pub(super) fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409))
    }
}
