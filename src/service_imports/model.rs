//! What the ServiceImport jobs keep of each object: projections, reduced as the watch
//! delivers them. A member's ServiceImport keeps its identity, versions, finalizers and
//! status; an InternalServiceImport its identity, the ServiceImport it refers to and its
//! status (the hub's verdict).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    ExportedObjectReference, InternalServiceImport, ServiceImport, ServiceImportStatus,
};
use crate::controller::projection::{ObjectId, keyed_by_name};

/// The finalizer that keeps a ServiceImport until its InternalServiceImport is deleted.
pub const SERVICE_IMPORT_FINALIZER: &str = "networking.fleet.azure.com/serviceimport-cleanup";

/// A member's ServiceImport as decisions read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportView {
    pub id: ObjectId,
    pub generation: i64,
    pub created: Option<Time>,
    /// It has a deletion timestamp.
    pub deleting: bool,
    pub finalizers: Vec<String>,
    /// Absent and empty alike: fleet-networking compares the Go struct, where both are zero.
    pub status: ServiceImportStatus,
}

impl ImportView {
    /// Whether it carries the job's finalizer.
    pub fn finalized(&self) -> bool {
        self.finalizers
            .iter()
            .any(|f| f == SERVICE_IMPORT_FINALIZER)
    }
}

impl From<ServiceImport> for ImportView {
    fn from(si: ServiceImport) -> Self {
        let mut meta = si.metadata;
        Self {
            id: ObjectId::take(&mut meta),
            generation: meta.generation.unwrap_or_default(),
            created: meta.creation_timestamp,
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.unwrap_or_default(),
            status: si.status.unwrap_or_default(),
        }
    }
}

keyed_by_name!(ImportView, "ServiceImport", "serviceimports");

/// An InternalServiceImport as decisions read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InternalView {
    pub id: ObjectId,
    /// The ServiceImport it stands for.
    pub reference: ExportedObjectReference,
    /// The hub's verdict; absent and empty alike.
    pub status: ServiceImportStatus,
    /// Who wrote it last: the agent still writing it is another writer.
    pub writers: crate::controller::writers::Writers,
}

impl InternalView {
    /// The ServiceImport it refers to: `(namespace, name)`.
    pub fn referred(&self) -> (&str, &str) {
        (&self.reference.namespace, &self.reference.name)
    }
}

impl From<InternalServiceImport> for InternalView {
    fn from(isi: InternalServiceImport) -> Self {
        let mut meta = isi.metadata;
        Self {
            writers: crate::controller::writers::Writers::of_ours(&meta),
            id: ObjectId::take(&mut meta),
            reference: isi.spec.service_import_reference,
            status: isi.status.unwrap_or_default(),
        }
    }
}

keyed_by_name!(
    InternalView,
    "InternalServiceImport",
    "internalserviceimports"
);
