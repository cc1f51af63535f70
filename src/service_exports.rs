//! The member's ServiceExports as every job reads them: the projection a view keeps of each
//! ([`ServiceExportView`]) and the one watch of them the jobs share ([`ServiceExportFeed`]).
//! Below the jobs: the ServiceExport job reconciles what the watch touches, the EndpointSlice
//! job the slices of the touched export's Service.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::Api;

use crate::api::{
    LAST_SEEN_RESOURCE_VERSION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport,
    ServiceExportStatus, ServiceExportVersion, WEIGHT_ANNOTATION,
};
use crate::controller::ReconcileObserver;
use crate::controller::feed::{self, Feed};
use crate::controller::projection::{kept, rebuilt};
use crate::controller::views::View;

/// The annotations decisions read on a ServiceExport.
const EXPORT_ANNOTATIONS: [&str; 3] = [
    WEIGHT_ANNOTATION,
    LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION,
];

/// The shared watch's view, as logs name it.
const SERVICE_EXPORTS: View = View::member(0, "ServiceExports");

/// The member's one ServiceExport watch, before it runs.
pub type ServiceExportFeed = Feed<ServiceExportView>;

/// What one job gets of the ServiceExport watch.
pub type Subscription = feed::Subscription<ServiceExportView>;

/// The name of a ServiceExport in the shared watch's store.
pub(crate) type ExportRef = kube::runtime::reflector::ObjectRef<ServiceExportView>;

impl Feed<ServiceExportView> {
    /// The watch of `member`'s ServiceExports (of API `version`) through `client`; its
    /// failures and first list are reported to `observer`.
    pub fn watch(
        client: &kube::Client,
        version: ServiceExportVersion,
        member: &str,
        observer: Arc<dyn ReconcileObserver>,
    ) -> Self {
        let api = Api::<ServiceExportView>::all_with(client.clone(), &version);
        // Its failures are told as the ServiceExport job's: the watch is of its objects.
        Self::over(
            api,
            version,
            (SERVICE_EXPORTS, "serviceexport"),
            member,
            observer,
        )
    }
}

/// A ServiceExport as the controller keeps it: its metadata without annotations, the three
/// annotations decisions read as fields of their own (a `BTreeMap` of two entries is a
/// 544-byte node), and its status. Read as a `ServiceExport` and reduced at once; rebuilt as
/// one for each reconcile ([`ServiceExportView::to_export`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(from = "ServiceExport")]
pub struct ServiceExportView {
    metadata: ObjectMeta,
    /// The values of [`EXPORT_ANNOTATIONS`], in that order.
    annotations: [Option<String>; EXPORT_ANNOTATIONS.len()],
    status: Option<ServiceExportStatus>,
}

impl From<ServiceExport> for ServiceExportView {
    fn from(se: ServiceExport) -> Self {
        let mut metadata = se.metadata;
        let annotations = metadata.annotations.take();
        metadata.managed_fields = None;
        metadata.labels = None;
        metadata.owner_references = None;
        Self {
            metadata,
            annotations: kept(EXPORT_ANNOTATIONS, annotations),
            status: se.status,
        }
    }
}

impl ServiceExportView {
    /// The conditions of its status (none without a status).
    pub(crate) fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[][..], |s| &s.conditions[..])
    }

    /// The ServiceExport as reconciles read it: every field the view keeps, nothing else.
    pub(crate) fn to_export(&self) -> ServiceExport {
        ServiceExport {
            metadata: ObjectMeta {
                annotations: rebuilt(&EXPORT_ANNOTATIONS, &self.annotations),
                ..self.metadata.clone()
            },
            status: self.status.clone(),
            ..Default::default()
        }
    }
}

impl kube::Resource for ServiceExportView {
    type DynamicType = ServiceExportVersion;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::kind(v)
    }
    fn group(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::group(v)
    }
    fn version(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::version(v)
    }
    fn plural(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::plural(v)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
