//! The pure heart of the reconciler: from what was observed, the writes that converge it.
//! No I/O here; every branch of the reference controller is a unit test below.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::public_ip::PublicIp;
use crate::api::{
    CONDITION_VALID, ConditionSpec, InternalServiceExport, ServiceExport, WEIGHT_ANNOTATION,
};

/// Condition reasons, as fleet-networking spells them (its hub controllers and users read them).
pub mod reason {
    pub const VALID: &str = "ServiceIsValid";
    pub const NOT_FOUND: &str = "ServiceNotFound";
    pub const INELIGIBLE: &str = "ServiceIneligible";
    pub const PENDING_CONFLICT_RESOLUTION: &str = "ServicePendingConflictResolution";
    pub const INVALID_WEIGHT: &str = "ServiceExportInvalidWeightAnnotation";
    /// Not in the reference (which flaps): another Service already holds the hub-side name.
    pub const NAME_COLLISION: &str = "ServiceExportNameCollision";
    /// Not in the reference: the member has as many exports in the hub as it may have.
    pub const QUOTA_EXCEEDED: &str = "ExportQuotaExceeded";
    /// Not in the reference: the export's InternalServiceExport would be too large.
    pub const TOO_LARGE: &str = "ExportTooLarge";
}

pub use crate::api::AZURE_LB_INTERNAL_ANNOTATION;
/// Annotation: resource group of the LoadBalancer's public IP.
pub const AZURE_LB_RESOURCE_GROUP_ANNOTATION: &str =
    "service.beta.kubernetes.io/azure-load-balancer-resource-group";
/// Annotation: DNS label the cloud provider puts on the public IP.
pub const AZURE_DNS_LABEL_ANNOTATION: &str = "service.beta.kubernetes.io/azure-dns-label-name";

/// Process- and member-level settings the decision depends on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The member's cluster ID, written as `serviceReference.clusterId`.
    pub member: String,
    /// Traffic Manager feature: weight, type, LB and public IP fields on the ISE.
    pub traffic_manager: bool,
    /// Resource group of public IPs when the Service does not name one.
    pub default_resource_group: String,
    /// What the member may write to the hub.
    pub quotas: Quotas,
    /// Groups a Service's annotation may name besides the default (the operator's
    /// `azureResourceGroups`); any other is not looked up ([`public_ip_query`]).
    pub allowed_resource_groups: Vec<String>,
}

/// What the observe step found about the Service's public IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicIpObservation {
    /// No lookup applies (feature off, not an external LoadBalancer, no ingress IP yet).
    NotNeeded,
    Found(PublicIp),
    /// No public IP with that address in the resource group (yet).
    NotFound,
    /// The lookup failed; the export is retried later.
    Failed(String),
}

/// Everything the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    pub export: &'a ServiceExport,
    /// `None`: the Service does not exist.
    pub service: Option<&'a Service>,
    /// The hub object at the export's hub-side name, if any.
    pub ise: Option<&'a InternalServiceExport>,
    pub public_ip: &'a PublicIpObservation,
    /// Start of this reconcile.
    pub now: Timestamp,
    /// Against the member's export quota; read only when the export has no ISE of its own.
    pub standing: Standing,
}

/// The hub-side name of an export: `<namespace>-<name>`.
pub fn ise_name(namespace: &str, name: &str) -> String {
    format!("{namespace}-{name}")
}

/// The weight annotation: absent → 1; otherwise an integer in [0, 1000]. The errors are
/// fleet-networking's words, with the annotation as written.
pub fn parse_weight(export: &ServiceExport) -> Result<i64, String> {
    let Some(raw) = annotation(&export.metadata.annotations, WEIGHT_ANNOTATION) else {
        return Ok(1);
    };
    let weight: i64 = raw
        .parse()
        .map_err(|_| format!("the weight annotation is not a valid integer: {raw}"))?;
    if !(0..=1000).contains(&weight) {
        return Err(format!(
            "the weight annotation is not in the range [0, 1000]: {raw}"
        ));
    }
    Ok(weight)
}

/// Whether the object is being deleted (a finalizer holds it).
fn terminating(ise: &InternalServiceExport) -> bool {
    ise.metadata.deletion_timestamp.is_some()
}

/// The export being decided and what every branch needs to know about it.
struct Subject<'a> {
    se: &'a ServiceExport,
    ns: &'a str,
    name: &'a str,
    generation: Option<i64>,
    has_finalizer: bool,
    /// The ISE at the export's hub name when it was exported for this very `<ns>/<name>`: only
    /// such an ISE is ours to update or delete.
    own_ise: Option<&'a InternalServiceExport>,
}

impl<'a> Subject<'a> {
    fn new(obs: &Observation<'a>) -> Self {
        let se = obs.export;
        let ns = se.metadata.namespace.as_deref().unwrap_or_default();
        let name = se.metadata.name.as_deref().unwrap_or_default();
        let namespaced_name = format!("{ns}/{name}");
        Self {
            se,
            ns,
            name,
            generation: se.metadata.generation,
            has_finalizer: se.has_cleanup_finalizer(),
            own_ise: obs
                .ise
                .filter(|ise| ise.spec.service_reference.namespaced_name == namespaced_name),
        }
    }

    fn valid(&self, status: &str, reason: &'static str, message: String) -> ConditionSpec {
        ConditionSpec::new(CONDITION_VALID, status, reason, message, self.generation)
    }

    /// Not-found, ineligible and weight 0: unexport if we hold the finalizer, set `Valid`,
    /// and tell the user once (when the condition changes, not on every resync).
    fn invalid_and_unexported(
        &self,
        want: ConditionSpec,
        event: EventSpec,
        outcome: Outcome,
    ) -> Plan {
        let mut plan = Plan::new(outcome);
        if self.has_finalizer {
            unexport(&mut plan, self.own_ise, true);
        }
        set_and_tell(&mut plan, self.se, want, event);
        plan
    }
}

/// Decides the writes for one ServiceExport. Running it on the state its own plan produces
/// yields an empty plan (idempotence is unit-tested).
pub fn decide(settings: &Settings, obs: &Observation<'_>) -> Plan {
    let subject = Subject::new(obs);
    if subject.se.metadata.deletion_timestamp.is_some() {
        if !subject.has_finalizer {
            return Plan::new(Outcome::Skipped);
        }
        let mut plan = Plan::new(Outcome::Unexported);
        unexport(&mut plan, subject.own_ise, true);
        return plan;
    }
    let (service, weight) = match exportable(&subject, obs.service) {
        Ok(found) => found,
        Err(plan) => return *plan,
    };
    if let Some(other) = obs.ise.filter(|_| subject.own_ise.is_none()) {
        return name_collision(&subject, other);
    }
    let service_uid = service.metadata.uid.as_deref().unwrap_or_default();
    if let Some(ise) = subject.own_ise.filter(|ise| !terminating(ise))
        && ise.spec.service_reference.uid != service_uid
    {
        // The Service was deleted and re-created: unexport the old one, then export afresh
        // (the ISE's deletion triggers that; the recheck is the fallback).
        let mut plan = Plan::new(Outcome::Unexported);
        unexport(&mut plan, Some(ise), subject.has_finalizer);
        plan.recheck = true;
        return plan;
    }
    export(settings, obs, &subject, service, weight)
}

/// The Service and weight to export, or the plan that says why there is nothing to export.
fn exportable<'a>(
    subject: &Subject<'_>,
    service: Option<&'a Service>,
) -> Result<(&'a Service, i64), Box<Plan>> {
    let (ns, name) = (subject.ns, subject.name);
    let Some(service) = service.filter(|s| s.metadata.deletion_timestamp.is_none()) else {
        return Err(Box::new(subject.invalid_and_unexported(
            subject.valid(
                "False",
                reason::NOT_FOUND,
                format!("service {ns}/{name} is not found"),
            ),
            EventSpec::new(
                EventKind::Warning,
                "ServiceNotFound",
                format!("Service {name} is not found or in the deleting state"),
            ),
            Outcome::Invalid(reason::NOT_FOUND),
        )));
    };
    if !is_eligible(service) {
        return Err(Box::new(subject.invalid_and_unexported(
            subject.valid(
                "False",
                reason::INELIGIBLE,
                format!("service {ns}/{name} is not eligible for export"),
            ),
            EventSpec::new(
                EventKind::Warning,
                "ServiceNotEligible",
                format!(
                    "Service {name} is not eligible for exporting and please check service spec"
                ),
            ),
            Outcome::Invalid(reason::INELIGIBLE),
        )));
    }
    match parse_weight(subject.se) {
        Ok(0) => Err(Box::new(subject.invalid_and_unexported(
            subject.valid(
                "True",
                reason::VALID,
                format!("exported service {ns}/{name} with 0 weight"),
            ),
            EventSpec::new(
                EventKind::Normal,
                "Service",
                format!("Service {name} weight is set to 0"),
            ),
            Outcome::Unexported,
        ))),
        Ok(weight) => Ok((service, weight)),
        Err(e) => {
            // The current export stays: unexporting would cut live traffic over a typo.
            let mut plan = Plan::new(Outcome::Invalid(reason::INVALID_WEIGHT));
            let want = subject.valid(
                "False",
                reason::INVALID_WEIGHT,
                format!("serviceExport {ns}/{name} has an invalid weight annotation, err = {e}"),
            );
            let event = EventSpec::new(
                EventKind::Warning,
                reason::INVALID_WEIGHT,
                format!("ServiceExport {name} has invalid weight value in the annotation"),
            );
            set_and_tell(&mut plan, subject.se, want, event);
            Err(Box::new(plan))
        }
    }
}

/// Another Service's export already holds this export's hub name.
fn name_collision(subject: &Subject<'_>, other: &InternalServiceExport) -> Plan {
    let (ns, name) = (subject.ns, subject.name);
    let mut plan = Plan::new(Outcome::Invalid(reason::NAME_COLLISION));
    let other_name = &other.spec.service_reference.namespaced_name;
    let want = subject.valid(
        "False",
        reason::NAME_COLLISION,
        format!(
            "service {ns}/{name} cannot be exported: its hub name {} is already used by the export of service {other_name}",
            ise_name(ns, name)
        ),
    );
    let event = EventSpec::new(
        EventKind::Warning,
        reason::NAME_COLLISION,
        format!("Service {name} collides with the export of {other_name} in the hub"),
    );
    set_and_tell(&mut plan, subject.se, want, event);
    // Our finalizer guards nothing in the hub: the object there is someone else's.
    plan.remove_finalizer = subject.has_finalizer;
    plan
}

fn export(
    settings: &Settings,
    obs: &Observation<'_>,
    subject: &Subject<'_>,
    service: &Service,
    weight: i64,
) -> Plan {
    let (se, name) = (subject.se, subject.name);
    // An ISE being deleted is on its way out: its verdict is not this export's, and its name
    // cannot be written until it is gone (its deletion triggers the next reconcile).
    let leaving = subject.own_ise.is_some_and(terminating);
    let own_ise = subject.own_ise.filter(|ise| !terminating(ise));
    // An export in the hub keeps its place whatever the quota: it is never withdrawn for it.
    if own_ise.is_none() && !leaving && !obs.standing.admitted(settings.quotas.max_exports) {
        return over_quota(settings, subject);
    }
    let mut spec = build_spec(settings, service, subject.ns, name, weight);
    let (tm_pending, tm_fields) = traffic_manager_fields(settings, service, obs.public_ip);
    spec = tm_fields.apply(spec);
    let needs_write = match own_ise {
        None => !leaving,
        Some(ise) => !same_export(&ise.spec, &spec),
    };
    if needs_write {
        let mut measured = spec.clone();
        measured.service_reference.exported_since = Some(Time(obs.now));
        let bytes = quota::written_bytes(&new_ise(subject.ns, name, measured));
        let max = settings.quotas.max_export_bytes;
        if bytes > usize::try_from(max).unwrap_or(usize::MAX) {
            return too_large(settings, subject, bytes, own_ise.is_some());
        }
    }
    let mut plan = Plan::new(Outcome::Exported);
    let valid = subject.valid(
        "True",
        reason::VALID,
        format!("service {}/{name} is valid for export", subject.ns),
    );
    let event = EventSpec::new(
        EventKind::Normal,
        "ValidServiceExport",
        format!("Service {name} is valid for export"),
    );
    set_and_tell(&mut plan, se, valid, event);
    resource_group::scope_condition(&mut plan, settings, subject, service);
    conflict_condition(&mut plan, subject, own_ise);

    plan.pending = tm_pending;
    // Not listed yet (a new LoadBalancer's address is newer than the list): look again later.
    plan.recheck = matches!(obs.public_ip, PublicIpObservation::NotFound)
        && matches!(
            public_ip_query(settings, service),
            Some(PublicIpQuery::Lookup { .. })
        );
    let metadata = hub_write(&mut plan, obs, subject, service, spec, own_ise, needs_write);
    if metadata != MetadataChange::default() {
        plan.metadata = Some(metadata);
    }
    plan
}

/// The member has all the exports in the hub it may have: this one waits (looked at again
/// with the rechecks' backoff, at least every 5 minutes), nothing is written to the hub, and
/// the user is told once.
fn over_quota(settings: &Settings, subject: &Subject<'_>) -> Plan {
    let (ns, name, member) = (subject.ns, subject.name, &settings.member);
    let max = settings.quotas.max_exports;
    let mut plan = Plan::new(Outcome::Invalid(reason::QUOTA_EXCEEDED));
    let want = subject.valid(
        "False",
        reason::QUOTA_EXCEEDED,
        format!(
            "service {ns}/{name} is not exported: member {member} has reached its quota of {max} exports in the hub (--max-exports-per-member); it is exported once a place is free"
        ),
    );
    let event = EventSpec::new(
        EventKind::Warning,
        reason::QUOTA_EXCEEDED,
        format!(
            "Service {name} is not exported: member {member} is at its quota of {max} exports (--max-exports-per-member)"
        ),
    );
    set_and_tell(&mut plan, subject.se, want, event);
    plan.recheck = true;
    plan
}

/// The export's ISE would be larger than the hub takes from one member: nothing is written
/// (an export already in the hub stays as it was), and the user is told once per size.
fn too_large(settings: &Settings, subject: &Subject<'_>, bytes: usize, exported: bool) -> Plan {
    let (ns, name, member) = (subject.ns, subject.name, &settings.member);
    let max = settings.quotas.max_export_bytes;
    let mut plan = Plan::new(Outcome::Invalid(reason::TOO_LARGE));
    // An export already in the hub stays valid (its EndpointSlices stay exported with it):
    // only this change of it is not written.
    let (status, kept) = match exported {
        true => ("True", "; the export already in the hub stays as it was"),
        false => ("False", ""),
    };
    let want = subject.valid(
        status,
        reason::TOO_LARGE,
        format!(
            "service {ns}/{name} is not exported: its InternalServiceExport would be {bytes} bytes, above the limit of {max} bytes per exported object of member {member} (--max-export-bytes){kept}"
        ),
    );
    let event = EventSpec::new(
        EventKind::Warning,
        reason::TOO_LARGE,
        format!(
            "Service {name} is not exported: its export would be {bytes} bytes, above the limit of {max} (--max-export-bytes)"
        ),
    );
    set_and_tell(&mut plan, subject.se, want, event);
    plan
}

/// Unexport: delete our ISE and then drop the finalizer (if we hold it). An ISE missing from
/// the view is still deleted by name (the view may be behind); one already terminating is gone.
fn unexport(plan: &mut Plan, own_ise: Option<&InternalServiceExport>, has_finalizer: bool) {
    match own_ise {
        Some(ise) if terminating(ise) => {}
        Some(ise) => {
            plan.hub = Some(HubWrite::Delete {
                uid: ise.metadata.uid.clone(),
            })
        }
        None => plan.hub = Some(HubWrite::Delete { uid: None }),
    }
    plan.remove_finalizer = has_finalizer;
}

mod conditions;
mod hub;
mod plan;
pub mod quota;
mod resource_group;
mod service;
#[cfg(test)]
mod tests;

use conditions::{conflict_condition, set_and_tell};
use hub::{hub_write, new_ise};
pub use plan::{EventKind, EventSpec, HubWrite, LastSeen, MetadataChange, Outcome, Plan};
pub use quota::{Quotas, Standing};
pub use resource_group::{CONDITION_PUBLIC_IP_ALLOWED, PublicIpQuery};
pub use service::public_ip_query;
use service::{annotation, build_spec, is_eligible, same_export, traffic_manager_fields};
