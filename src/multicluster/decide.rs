//! The pure decision of the MultiClusterService job: from a MultiClusterService, the
//! ServiceImport it names and its derived Service as observed, the writes that converge them,
//! in fleet-networking's order (`pkg/controllers/multiclusterservice`): finalizer, old import
//! deleted, import label, import created or owned, then either the invalid branch (status
//! `Valid=Unknown`, derived Service deleted, its label removed) or the valid one (derived
//! label, derived Service, status `Valid=True` with its load balancer).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort as KubeServicePort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use service::service_change;

use crate::api::{ConditionSpec, MultiClusterService, ServiceImport, find_condition};
use crate::controller::events::{EventKind, EventSpec};

/// The job's name, as `--controllers` spells it.
pub const NAME: &str = "multiclusterservice";
/// The finalizer that holds a MultiClusterService until its import and Service are gone.
pub const FINALIZER: &str = "networking.fleet.azure.com/service-resources-cleanup";
/// Label on the MultiClusterService: its ServiceImport's name, written before the import.
pub const SERVICE_IMPORT_LABEL: &str = "networking.fleet.azure.com/service-import";
/// Label on the MultiClusterService: its derived Service's name, written before the Service.
pub use crate::api::DERIVED_SERVICE_LABEL;
/// Labels on the derived Service: the MultiClusterService it serves.
pub const MCS_NAME_LABEL: &str = "networking.fleet.azure.com/multi-cluster-service-name";
pub const MCS_NAMESPACE_LABEL: &str = "networking.fleet.azure.com/multi-cluster-service-namespace";
/// Annotation on the MultiClusterService asking for an internal load balancer...
pub const INTERNAL_LB_ANNOTATION: &str = "networking.fleet.azure.com/azure-load-balancer-internal";
/// ...which the derived Service carries as Azure's own annotation.
pub use crate::api::AZURE_LB_INTERNAL_ANNOTATION as SERVICE_INTERNAL_LB_ANNOTATION;
/// The MultiClusterService's condition (`Valid`).
pub use crate::api::CONDITION_VALID;
/// The owner reference's `apiVersion` and `kind`.
pub const API_VERSION: &str = "networking.fleet.azure.com/v1alpha1";
pub const KIND: &str = "MultiClusterService";
/// How soon a MultiClusterService whose import another one owns is looked at again.
pub const RETRY: Duration = Duration::from_secs(5);

pub const REASON_UNKNOWN: &str = "UnknownServiceImport";
pub const REASON_FOUND: &str = "FoundServiceImport";
pub const MESSAGE_UNKNOWN: &str = "importing service; if the condition remains for a while, please verify that service has been exported or service has been exported by other multiClusterService";
pub const MESSAGE_FOUND: &str = "found valid service import";

/// How a reconcile ended; its label is `multiclusterservice:<label>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Being deleted without our finalizer: nothing to do.
    Skipped,
    /// Imported and nothing to write.
    Unchanged,
    /// Imported: the derived Service or the status written.
    Imported,
    /// The import has no clusters yet: no derived Service.
    Pending,
    /// The import is owned by another MultiClusterService: looked at again in 5 s.
    OwnedByOther,
    /// Deleted: its Service and import deleted, the finalizer removed.
    Unimported,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::Unchanged => "unchanged",
            Self::Imported => "imported",
            Self::Pending => "pending",
            Self::OwnedByOther => "owned_by_other",
            Self::Unimported => "unimported",
        }
    }
}

impl crate::controller::Outcome for Outcome {
    /// `multiclusterservice:<label>`.
    fn reconciled(self) -> crate::controller::Reconciled {
        crate::controller::Reconciled::of(NAME, self.label())
    }
}

/// What one decision reads.
pub struct Observation<'a> {
    pub mcs: &'a MultiClusterService,
    /// The ServiceImport named by `spec.serviceImport.name`, in the MCS's namespace.
    pub import: Option<&'a ServiceImport>,
    /// The Service named by [`derived_service_name`], in the fleet system namespace.
    pub service: Option<&'a Service>,
}

/// A change of the MultiClusterService's metadata: one merge patch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataChange {
    pub add_finalizer: bool,
    /// `None`: the label removed.
    pub labels: BTreeMap<String, Option<String>>,
}

/// The derived Service as it should be: created, or patched over the one there.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceChange {
    pub name: String,
    /// Of the Service patched (optimistic concurrency); `None` for a create.
    pub resource_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub ports: Vec<KubeServicePort>,
}

/// The MultiClusterService's status as it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusChange {
    pub condition: ConditionSpec,
    pub load_balancer: LoadBalancerStatus,
}

/// One write, in the order of the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Metadata(MetadataChange),
    DeleteServiceImport(String),
    CreateServiceImport {
        name: String,
        owner: OwnerReference,
    },
    /// The import's owner references, ours set as its controller.
    OwnServiceImport {
        name: String,
        resource_version: Option<String>,
        owner_references: Vec<OwnerReference>,
    },
    DeleteService(String),
    CreateService(ServiceChange),
    UpdateService(ServiceChange),
    Status(StatusChange),
    RemoveFinalizer,
}

/// The writes one reconcile makes, in order, and what follows them.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub writes: Vec<Write>,
    /// Published after the writes, when there were any.
    pub events: Vec<EventSpec>,
    pub outcome: Outcome,
    /// Looked at again after this long.
    pub requeue: Option<Duration>,
    /// The import is controlled by this non-MultiClusterService owner: the writes before are
    /// made, then the reconcile fails (and is retried with backoff), as the reference's does.
    pub refused: Option<String>,
}

impl Plan {
    fn new(outcome: Outcome) -> Self {
        Self {
            writes: vec![],
            events: vec![],
            outcome,
            requeue: None,
            refused: None,
        }
    }

    /// The metadata change of the last write, or a new one: consecutive metadata changes are
    /// one patch.
    fn meta(&mut self) -> &mut MetadataChange {
        if !matches!(self.writes.last(), Some(Write::Metadata(_))) {
            self.writes.push(Write::Metadata(MetadataChange::default()));
        }
        match self.writes.last_mut() {
            Some(Write::Metadata(change)) => change,
            _ => unreachable!("a metadata change was just pushed"),
        }
    }

    /// Whether it deletes the derived Service of a MultiClusterService that stays: decided
    /// again on live reads first.
    pub fn withdraws(&self) -> bool {
        self.outcome != Outcome::Unimported
            && self
                .writes
                .iter()
                .any(|w| matches!(w, Write::DeleteService(_)))
    }

    /// The branch's Events, only when it wrote: a converged MultiClusterService is quiet.
    fn with_events(mut self, events: Vec<EventSpec>) -> Self {
        if !self.writes.is_empty() {
            self.events = events;
        } else if self.outcome == Outcome::Imported {
            self.outcome = Outcome::Unchanged;
        }
        self
    }
}

/// The writes that converge what `o` observed.
pub fn decide(o: &Observation) -> Plan {
    let mcs = o.mcs;
    if mcs.metadata.deletion_timestamp.is_some() {
        return decide_deleting(mcs);
    }
    let mut plan = Plan::new(Outcome::Imported);
    if !has_finalizer(mcs) {
        plan.meta().add_finalizer = true;
    }
    let desired = mcs.spec.service_import.name.clone();
    let current = label(mcs, SERVICE_IMPORT_LABEL);
    if let Some(old) = current.filter(|c| *c != desired) {
        plan.writes
            .push(Write::DeleteServiceImport(old.to_string()));
    }
    if current != Some(desired.as_str()) {
        let labels = &mut plan.meta().labels;
        labels.insert(SERVICE_IMPORT_LABEL.into(), Some(desired.clone()));
    }
    let import = match o.import {
        None => {
            let owner = owner_reference(mcs);
            let name = desired.clone();
            plan.writes.push(Write::CreateServiceImport { name, owner });
            None
        }
        Some(si) => match control(mcs, si) {
            Control::Ours(None) => Some(si),
            Control::Ours(Some(owner_references)) => {
                plan.writes.push(Write::OwnServiceImport {
                    name: desired.clone(),
                    resource_version: si.metadata.resource_version.clone(),
                    owner_references,
                });
                Some(si)
            }
            Control::OtherMcs => {
                plan.outcome = Outcome::OwnedByOther;
                plan.requeue = Some(RETRY);
                return invalid(plan, mcs, &desired);
            }
            Control::Elsewhere(owner) => {
                plan.refused = Some(owner);
                plan.outcome = Outcome::Pending;
                return plan;
            }
        },
    };
    match import.filter(|si| !si.clusters().is_empty()) {
        None => {
            plan.outcome = Outcome::Pending;
            invalid(plan, mcs, &desired)
        }
        Some(si) => valid(plan, mcs, si, o.service),
    }
}

/// Deleting: the derived Service and the import its labels name deleted, then the finalizer.
fn decide_deleting(mcs: &MultiClusterService) -> Plan {
    if !has_finalizer(mcs) {
        return Plan::new(Outcome::Skipped);
    }
    let mut plan = Plan::new(Outcome::Unimported);
    if let Some(service) = label(mcs, DERIVED_SERVICE_LABEL) {
        plan.writes.push(Write::DeleteService(service.into()));
    }
    let import = label(mcs, SERVICE_IMPORT_LABEL);
    if let Some(import) = import {
        plan.writes.push(Write::DeleteServiceImport(import.into()));
    }
    plan.writes.push(Write::RemoveFinalizer);
    // The reference formats the import's namespaced name, `<nil>` when it has none.
    let named = match import {
        Some(import) => format!("{}/{import}", namespace_of(mcs)),
        None => "<nil>".into(),
    };
    plan.events = vec![normal(
        "UnimportedService",
        format!("Unimported service {named}"),
    )];
    plan
}

/// No clusters export the import (or another MultiClusterService owns it): `Valid=Unknown`
/// without a load balancer, then the derived Service deleted and its label removed.
fn invalid(mut plan: Plan, mcs: &MultiClusterService, import: &str) -> Plan {
    let unknown = condition(mcs, "Unknown", REASON_UNKNOWN, MESSAGE_UNKNOWN);
    if let Some(status) = status_change(mcs, unknown, LoadBalancerStatus::default()) {
        plan.writes.push(Write::Status(status));
    }
    if let Some(service) = label(mcs, DERIVED_SERVICE_LABEL) {
        plan.writes.push(Write::DeleteService(service.into()));
        let labels = &mut plan.meta().labels;
        labels.insert(DERIVED_SERVICE_LABEL.into(), None);
    }
    let name = mcs.metadata.name.as_deref().unwrap_or_default();
    let note = format!("Importing {import} service and updated {name} status");
    plan.with_events(vec![normal("SuccessfulUpdateStatus", note)])
}

/// Clusters export the import: the derived label, the derived Service, `Valid=True` with the
/// Service's load balancer.
fn valid(
    mut plan: Plan,
    mcs: &MultiClusterService,
    si: &ServiceImport,
    service: Option<&Service>,
) -> Plan {
    let import = si.metadata.name.as_deref().unwrap_or_default();
    let name = derived_service_name(mcs);
    if label(mcs, DERIVED_SERVICE_LABEL) != Some(name.as_str()) {
        let labels = &mut plan.meta().labels;
        labels.insert(DERIVED_SERVICE_LABEL.into(), Some(name.clone()));
    }
    let ports = si.status.as_ref().map_or(&[][..], |s| &s.ports);
    if let Some(change) = service_change(mcs, ports, service, &name) {
        plan.writes.push(match service {
            None => Write::CreateService(change),
            Some(_) => Write::UpdateService(change),
        });
    }
    let lb = service
        .and_then(|s| s.status.as_ref())
        .and_then(|s| s.load_balancer.clone())
        .unwrap_or_default();
    let found = condition(mcs, "True", REASON_FOUND, MESSAGE_FOUND);
    if let Some(status) = status_change(mcs, found, lb) {
        plan.writes.push(Write::Status(status));
    }
    let mcs_name = mcs.metadata.name.as_deref().unwrap_or_default();
    plan.with_events(vec![
        normal(
            "FoundValidService",
            format!("Found valid service {import} and importing"),
        ),
        normal(
            "SuccessfulUpdateStatus",
            format!("Imported {import} service and updated {mcs_name} status"),
        ),
    ])
}

/// The derived Service's name: the one its label recorded, else `<namespace>-<name>`.
pub fn derived_service_name(mcs: &MultiClusterService) -> String {
    match label(mcs, DERIVED_SERVICE_LABEL) {
        Some(name) => name.to_string(),
        None => format!(
            "{}-{}",
            namespace_of(mcs),
            mcs.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

fn condition(
    mcs: &MultiClusterService,
    status: &str,
    reason: &str,
    message: &str,
) -> ConditionSpec {
    let generation = Some(mcs.metadata.generation.unwrap_or_default());
    ConditionSpec::new(CONDITION_VALID, status, reason, message.into(), generation)
}

/// The status to write, `None` when it is there: the reference compares the condition's
/// status and reason (its message not), an observed generation at least the desired one, and
/// the load balancer semantically (unset and empty alike).
fn status_change(
    mcs: &MultiClusterService,
    condition: ConditionSpec,
    load_balancer: LoadBalancerStatus,
) -> Option<StatusChange> {
    let current = find_condition(mcs.conditions(), CONDITION_VALID);
    let same_condition = current.is_some_and(|c| {
        c.status == condition.status
            && c.reason == condition.reason
            && c.observed_generation.unwrap_or_default()
                >= condition.observed_generation.unwrap_or_default()
    });
    let have = mcs.status.as_ref().and_then(|s| s.load_balancer.as_ref());
    if same_condition && ingress(have) == ingress(Some(&load_balancer)) {
        return None;
    }
    Some(StatusChange {
        condition,
        load_balancer,
    })
}

/// A load balancer's ingress, unset and empty lists alike.
fn ingress(lb: Option<&LoadBalancerStatus>) -> Vec<LoadBalancerIngress> {
    let all = lb.and_then(|lb| lb.ingress.clone()).unwrap_or_default();
    all.into_iter()
        .map(|mut i| {
            i.ports = i.ports.filter(|p| !p.is_empty());
            i
        })
        .collect()
}

/// Who controls the import.
enum Control {
    /// This MultiClusterService (`Some`: its owner references once ours is set).
    Ours(Option<Vec<OwnerReference>>),
    /// Another MultiClusterService.
    OtherMcs,
    /// Something else (described).
    Elsewhere(String),
}

/// `SetControllerReference` of the MultiClusterService over the import's references: refused
/// when another object controls it; else ours replaces any reference to the same object
/// (group, kind, name) or is added.
fn control(mcs: &MultiClusterService, si: &ServiceImport) -> Control {
    let ours = owner_reference(mcs);
    let refs = si.metadata.owner_references.clone().unwrap_or_default();
    let controller = refs.iter().find(|r| r.controller == Some(true));
    if let Some(c) = controller.filter(|c| !same_object(c, &ours)) {
        if c.api_version == API_VERSION && c.kind == KIND {
            return Control::OtherMcs;
        }
        return Control::Elsewhere(format!("{} {} ({})", c.kind, c.name, c.api_version));
    }
    let mut wanted = refs.clone();
    match wanted.iter().position(|r| same_object(r, &ours)) {
        Some(i) => wanted[i] = ours,
        None => wanted.push(ours),
    }
    Control::Ours((wanted != refs).then_some(wanted))
}

fn same_object(a: &OwnerReference, b: &OwnerReference) -> bool {
    let group = |r: &OwnerReference| match r.api_version.split_once('/') {
        Some((group, _)) => group.to_string(),
        None => String::new(),
    };
    group(a) == group(b) && a.kind == b.kind && a.name == b.name
}

/// The MultiClusterService as its import's controller.
pub fn owner_reference(mcs: &MultiClusterService) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        name: mcs.metadata.name.clone().unwrap_or_default(),
        uid: mcs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn has_finalizer(mcs: &MultiClusterService) -> bool {
    mcs.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

fn label<'a>(mcs: &'a MultiClusterService, key: &str) -> Option<&'a str> {
    mcs.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn namespace_of(mcs: &MultiClusterService) -> &str {
    mcs.metadata.namespace.as_deref().unwrap_or_default()
}

fn normal(reason: &'static str, note: String) -> EventSpec {
    EventSpec::new(EventKind::Normal, reason, note)
}

mod service;
#[cfg(test)]
mod tests;
