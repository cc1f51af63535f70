//! The pure half of the EndpointSliceImport job: from what the views (or live reads) show of
//! one EndpointSliceImport, the MultiClusterServices that import its Service, the derived
//! Service and the imported EndpointSlice, the plan of writes, in the reference's order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};

use crate::api::{EndpointSliceImport, MultiClusterService};

/// The job's name, as `--controllers` spells it (and its metric labels' prefix).
pub const NAME: &str = "endpointsliceimport";

/// Marks the EndpointSlices this job imported (`endpointslice.kubernetes.io/managed-by`).
pub const CONTROLLER_ID: &str = "endpointsliceimport-controller.networking.fleet.azure.com";
/// The Kubernetes label that names a slice's manager.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub use crate::api::SERVICE_NAME_LABEL;
/// On an import from before its slice is written until the slice is deleted.
pub const CLEANUP_FINALIZER: &str = "networking.fleet.azure.com/endpointsliceimport-cleanup";
pub use crate::api::DERIVED_SERVICE_LABEL;
/// The generation of the import's slice whose export-import duration was observed last.
pub const LAST_OBSERVED_GENERATION_ANNOTATION: &str =
    "networking.fleet.azure.com/last-observed-generation";
/// How soon an import waiting for its derived Service is looked at again.
pub const RETRY: Duration = Duration::from_secs(2);

/// How a reconcile of an import ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This replica may not write for the member now.
    Skipped,
    /// No live MultiClusterService imports the Service: not imported (the reference's
    /// in-between state of an import just withdrawn).
    NoMultiClusterService,
    /// The derived Service is not a DNS-1035 label, missing, or being deleted: retried.
    NoDerivedService,
    Imported,
    Updated,
    Unchanged,
    /// The import was deleted: its slice is gone and the finalizer removed.
    Unimported,
}

impl Outcome {
    /// Stable label, as metrics and spans carry it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::NoMultiClusterService => "no_mcs",
            Self::NoDerivedService => "no_derived_service",
            Self::Imported => "imported",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
            Self::Unimported => "unimported",
        }
    }
}

impl crate::controller::Outcome for Outcome {
    /// `endpointsliceimport:<label>`.
    fn reconciled(self) -> crate::controller::Reconciled {
        crate::controller::Reconciled::of(NAME, self.label())
    }
}

/// The derived Service as the member's view shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerivedService {
    Missing,
    Deleting,
    Live,
}

/// Everything one decision reads.
pub struct Observation<'a> {
    pub import: &'a EndpointSliceImport,
    /// The member's name: the histogram's destination cluster.
    pub member: &'a str,
    /// The fleet system namespace, where slices are imported.
    pub namespace: &'a str,
    /// The MultiClusterServices of the owner Service's namespace that import it.
    pub multi_cluster_services: &'a [Arc<MultiClusterService>],
    /// The derived Service named by [`derived_service_name`], as the member has it.
    pub derived: DerivedService,
    /// The imported slice (named like the import), if the member has one.
    pub slice: Option<&'a EndpointSlice>,
    pub now: Timestamp,
}

/// A write to the member's EndpointSlice.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceWrite {
    Create(EndpointSlice),
    /// The slice as it is, with the imported fields replaced (its resourceVersion kept: a
    /// stale view is refused, not overwritten).
    Update(EndpointSlice),
    Delete,
}

/// One data point of fleet's export-import duration histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observe {
    /// The generation annotated on the import before the point is observed.
    pub generation: String,
    /// The import has never been observed (no annotation).
    pub first: bool,
    /// Since `exportedSince` (none without it: annotated, not observed); zero when the clocks
    /// disagree.
    pub took: Option<Duration>,
}

/// What one reconcile does, in this order: finalizer added → slice written → generation
/// annotated and observed → finalizer removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub outcome: Outcome,
    pub add_finalizer: bool,
    pub slice: Option<SliceWrite>,
    pub observe: Option<Observe>,
    pub remove_finalizer: bool,
    /// Look again after [`RETRY`].
    pub retry: bool,
}

impl Plan {
    fn only(outcome: Outcome) -> Self {
        Self {
            outcome,
            add_finalizer: false,
            slice: None,
            observe: None,
            remove_finalizer: false,
            retry: false,
        }
    }

    /// Whether it deletes anything (then it is decided again on live reads first).
    pub fn withdraws(&self) -> bool {
        self.remove_finalizer || matches!(self.slice, Some(SliceWrite::Delete))
    }

    /// How many writes it makes.
    pub fn writes(&self) -> usize {
        usize::from(self.add_finalizer)
            + usize::from(self.slice.is_some())
            + usize::from(self.observe.is_some())
            + usize::from(self.remove_finalizer)
    }
}

/// The derived Service of the first MultiClusterService (by name; those being deleted
/// skipped) that has the label; empty when none has it (as the reference: an empty name is
/// then not a valid Service name).
pub fn derived_service_name(multi_cluster_services: &[Arc<MultiClusterService>]) -> String {
    let mut live: Vec<&MultiClusterService> = multi_cluster_services
        .iter()
        .map(Arc::as_ref)
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    live.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    live.iter()
        .find_map(|m| m.metadata.labels.as_ref()?.get(DERIVED_SERVICE_LABEL))
        .cloned()
        .unwrap_or_default()
}

/// The plan for one import.
pub fn decide(o: &Observation<'_>) -> Plan {
    let import = o.import;
    let has_finalizer = import
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == CLEANUP_FINALIZER));
    if import.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            // Never imported: nothing of it in the member.
            return Plan::only(Outcome::Skipped);
        }
        let mut plan = Plan::only(Outcome::Unimported);
        plan.slice = o.slice.map(|_| SliceWrite::Delete);
        plan.remove_finalizer = true;
        return plan;
    }
    if o.multi_cluster_services.is_empty() {
        return Plan::only(Outcome::NoMultiClusterService);
    }
    let derived = derived_service_name(o.multi_cluster_services);
    if !is_dns1035_label(&derived) || o.derived != DerivedService::Live {
        let mut plan = Plan::only(Outcome::NoDerivedService);
        plan.retry = true;
        return plan;
    }
    let mut plan = Plan::only(Outcome::Unchanged);
    plan.add_finalizer = !has_finalizer;
    let wanted = imported_slice(import, &derived, o.namespace);
    plan.slice = match o.slice {
        None => {
            plan.outcome = Outcome::Imported;
            Some(SliceWrite::Create(wanted))
        }
        Some(slice) if converged(slice, &wanted) => None,
        Some(slice) => {
            plan.outcome = Outcome::Updated;
            Some(SliceWrite::Update(updated(slice, wanted)))
        }
    };
    plan.observe = observe(import, o.now);
    plan
}

/// The slice the reference makes of an import: its name, the two labels (and no other),
/// the address type, ports and endpoints (addresses only).
pub fn imported_slice(
    import: &EndpointSliceImport,
    derived: &str,
    namespace: &str,
) -> EndpointSlice {
    let spec = &import.spec;
    let mut slice = EndpointSlice {
        address_type: spec.address_type.clone(),
        endpoints: Some(
            spec.endpoints
                .iter()
                .map(|e| Endpoint {
                    addresses: e.addresses.clone(),
                    ..Endpoint::default()
                })
                .collect(),
        ),
        ports: Some(
            spec.ports
                .iter()
                .map(|p| EndpointPort {
                    app_protocol: p.app_protocol.clone(),
                    name: p.name.clone(),
                    port: p.port,
                    protocol: p.protocol.clone(),
                })
                .collect(),
        )
        .filter(|p: &Vec<EndpointPort>| !p.is_empty()),
        ..EndpointSlice::default()
    };
    slice.metadata.name = import.metadata.name.clone();
    slice.metadata.namespace = Some(namespace.to_string());
    slice.metadata.labels = Some(BTreeMap::from([
        (SERVICE_NAME_LABEL.to_string(), derived.to_string()),
        (MANAGED_BY_LABEL.to_string(), CONTROLLER_ID.to_string()),
    ]));
    slice
}

/// `slice` with the imported fields of `wanted`; everything else (annotations, owners, its
/// version) as the member has it.
fn updated(slice: &EndpointSlice, wanted: EndpointSlice) -> EndpointSlice {
    let mut next = slice.clone();
    next.address_type = wanted.address_type;
    next.endpoints = wanted.endpoints;
    next.ports = wanted.ports;
    next.metadata.labels = wanted.metadata.labels;
    next
}

/// Whether the member's slice already has what the import gives it. Compared as the API
/// server stores it (a port's name defaults to "", its protocol to TCP; empty lists and
/// conditions are absent), so that the server's defaults never look like drift.
pub fn converged(slice: &EndpointSlice, wanted: &EndpointSlice) -> bool {
    let labels = |s: &EndpointSlice| s.metadata.labels.clone().unwrap_or_default();
    slice.address_type == wanted.address_type
        && labels(slice) == labels(wanted)
        && ports(slice) == ports(wanted)
        && endpoints(slice) == endpoints(wanted)
}

fn ports(slice: &EndpointSlice) -> Vec<(String, String, Option<i32>, Option<String>)> {
    slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                p.port,
                p.app_protocol.clone(),
            )
        })
        .collect()
}

fn endpoints(slice: &EndpointSlice) -> Vec<Endpoint> {
    slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let mut e = e.clone();
            let empty = e.conditions.as_ref().is_some_and(|c| {
                c.ready.is_none() && c.serving.is_none() && c.terminating.is_none()
            });
            if empty {
                e.conditions = None;
            }
            e
        })
        .collect()
}

/// A data point to observe for the import's generation, unless one was (the annotation).
fn observe(import: &EndpointSliceImport, now: Timestamp) -> Option<Observe> {
    let reference = &import.spec.endpoint_slice_reference;
    let generation = reference.generation.to_string();
    let last = import
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LAST_OBSERVED_GENERATION_ANNOTATION));
    if last == Some(&generation) {
        return None;
    }
    let took = reference.exported_since.as_ref().map(|since| {
        let since = since.0.as_millisecond();
        let ms = now.as_millisecond().saturating_sub(since);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    });
    Some(Observe {
        generation,
        first: last.is_none(),
        took,
    })
}

/// Whether `s` is a DNS-1035 label (a Service name): 1–63 of `[a-z0-9-]`, starting with a
/// letter, ending with a letter or digit.
pub fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter().all(inner)
        && b.last().is_some_and(|c| *c != b'-')
}

#[cfg(test)]
mod tests;
