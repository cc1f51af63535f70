//! The pure heart of the reconciler: from what was observed, the writes that converge it.
//! No I/O here; every branch of the reference controller is a unit test below.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::public_ip::PublicIp;
use crate::api::{
    CONDITION_CONFLICT, CONDITION_VALID, ConditionSpec, ExportedObjectReference,
    InternalServiceExport, InternalServiceExportSpec, LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport, ServicePort, WEIGHT_ANNOTATION,
    condition_matches, find_condition,
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
}

/// Annotation: whether an Azure LoadBalancer Service is internal (case-sensitive "true").
pub const AZURE_LB_INTERNAL_ANNOTATION: &str =
    "service.beta.kubernetes.io/azure-load-balancer-internal";
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
}

/// The last-seen annotations to write on the ServiceExport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSeen {
    pub resource_version: String,
    pub timestamp: String,
}

/// One patch of the ServiceExport's metadata, made before any hub write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataChange {
    pub add_finalizer: bool,
    pub last_seen: Option<LastSeen>,
}

/// The hub-side write.
#[derive(Debug, Clone, PartialEq)]
pub enum HubWrite {
    Create(Box<InternalServiceExport>),
    /// Replace the spec (every field, so stale ones are cleared).
    UpdateSpec(Box<InternalServiceExportSpec>),
    /// Delete this export's ISE. `uid` (from the view) is a precondition so only the object
    /// observed is deleted; `None`: the view has none, so `act` reads the name live and deletes
    /// only an ISE exported for this very member and Service.
    Delete {
        uid: Option<String>,
    },
}

/// Event severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// An Event to record on the ServiceExport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub kind: EventKind,
    pub reason: &'static str,
    pub note: String,
}

impl EventSpec {
    fn new(kind: EventKind, reason: &'static str, note: String) -> Self {
        Self { kind, reason, note }
    }
}

/// How the reconcile ended, for logs, spans and the `outcome` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to do: no finalizer on a deleted export.
    Skipped,
    Exported,
    Unexported,
    Invalid(&'static str),
}

impl Outcome {
    /// Stable label: `exported`, `unexported`, `skipped`, `invalid:<reason>`.
    pub fn label(&self) -> String {
        match self {
            Self::Skipped => "skipped".into(),
            Self::Exported => "exported".into(),
            Self::Unexported => "unexported".into(),
            Self::Invalid(r) => format!("invalid:{r}"),
        }
    }
}

/// The writes that converge one ServiceExport, in the order `act` performs them:
/// metadata → hub delete → finalizer removal → status → hub create/update.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub metadata: Option<MetadataChange>,
    pub hub: Option<HubWrite>,
    pub remove_finalizer: bool,
    /// Conditions to set; empty means no status write.
    pub conditions: Vec<ConditionSpec>,
    pub events: Vec<EventSpec>,
    /// Reconcile again after a bounded backoff even if nothing changes (after a UID-mismatch
    /// unexport; a public IP that is not listed yet).
    pub recheck: bool,
    /// The export cannot complete yet (Azure lookup failed, DNS label pending): the reconcile
    /// fails with this message after the other writes, and is retried with backoff.
    pub pending: Option<String>,
    /// `exportedSince` of the ISE written, when one is.
    pub exported_since: Option<Timestamp>,
    pub outcome: Outcome,
}

impl Plan {
    fn new(outcome: Outcome) -> Self {
        Self {
            metadata: None,
            hub: None,
            remove_finalizer: false,
            conditions: vec![],
            events: vec![],
            recheck: false,
            pending: None,
            exported_since: None,
            outcome,
        }
    }

    /// Whether the plan withdraws an export (deletes an ISE or drops the cleanup finalizer):
    /// such a plan is only carried out once the observations it rests on are confirmed live.
    pub fn unexports(&self) -> bool {
        matches!(self.hub, Some(HubWrite::Delete { .. })) || self.remove_finalizer
    }

    /// Number of API writes the plan makes, Events not counted.
    pub fn writes(&self) -> usize {
        usize::from(self.metadata.is_some())
            + usize::from(self.hub.is_some())
            + usize::from(self.remove_finalizer)
            + usize::from(!self.conditions.is_empty())
    }
}

/// The hub-side name of an export: `<namespace>-<name>`.
pub fn ise_name(namespace: &str, name: &str) -> String {
    format!("{namespace}-{name}")
}

/// Where to look up the Service's public IP, when the Traffic Manager fields need one:
/// `(resource group, ingress IP)`.
pub fn public_ip_query(settings: &Settings, service: &Service) -> Option<(String, String)> {
    if !settings.traffic_manager || !is_load_balancer(service) || is_internal_lb(service) {
        return None;
    }
    let ip = ingress_ip(service)?;
    let rg = annotation(
        &service.metadata.annotations,
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
    )
    .map(str::trim)
    .filter(|rg| !rg.is_empty())
    .unwrap_or(&settings.default_resource_group);
    Some((rg.to_string(), ip.to_string()))
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

/// Decides the writes for one ServiceExport. Running it on the state its own plan produces
/// yields an empty plan (idempotence is unit-tested).
pub fn decide(settings: &Settings, obs: &Observation<'_>) -> Plan {
    let se = obs.export;
    let ns = se.metadata.namespace.as_deref().unwrap_or_default();
    let name = se.metadata.name.as_deref().unwrap_or_default();
    let has_finalizer = se.has_cleanup_finalizer();
    let generation = se.metadata.generation;
    let namespaced_name = format!("{ns}/{name}");
    // Only an ISE exported for this very `<ns>/<name>` is ours to delete or update.
    let own_ise = obs
        .ise
        .filter(|ise| ise.spec.service_reference.namespaced_name == namespaced_name);

    if se.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Plan::new(Outcome::Skipped);
        }
        let mut plan = Plan::new(Outcome::Unexported);
        unexport(&mut plan, own_ise, true);
        return plan;
    }

    let service = obs
        .service
        .filter(|s| s.metadata.deletion_timestamp.is_none());
    let Some(service) = service else {
        return invalid_and_unexported(
            se,
            own_ise,
            has_finalizer,
            ConditionSpec::new(
                CONDITION_VALID,
                "False",
                reason::NOT_FOUND,
                format!("service {ns}/{name} is not found"),
                generation,
            ),
            EventSpec::new(
                EventKind::Warning,
                "ServiceNotFound",
                format!("Service {name} is not found or in the deleting state"),
            ),
            Outcome::Invalid(reason::NOT_FOUND),
        );
    };

    if !is_eligible(service) {
        return invalid_and_unexported(
            se,
            own_ise,
            has_finalizer,
            ConditionSpec::new(
                CONDITION_VALID,
                "False",
                reason::INELIGIBLE,
                format!("service {ns}/{name} is not eligible for export"),
                generation,
            ),
            EventSpec::new(
                EventKind::Warning,
                "ServiceNotEligible",
                format!(
                    "Service {name} is not eligible for exporting and please check service spec"
                ),
            ),
            Outcome::Invalid(reason::INELIGIBLE),
        );
    }

    let weight = match parse_weight(se) {
        Ok(w) => w,
        Err(e) => {
            // The current export stays: unexporting would cut live traffic over a typo.
            let mut plan = Plan::new(Outcome::Invalid(reason::INVALID_WEIGHT));
            let want = ConditionSpec::new(
                CONDITION_VALID,
                "False",
                reason::INVALID_WEIGHT,
                format!("serviceExport {ns}/{name} has an invalid weight annotation, err = {e}"),
                generation,
            );
            set_and_tell(
                &mut plan,
                se,
                want,
                EventSpec::new(
                    EventKind::Warning,
                    reason::INVALID_WEIGHT,
                    format!("ServiceExport {name} has invalid weight value in the annotation"),
                ),
            );
            return plan;
        }
    };

    if weight == 0 {
        return invalid_and_unexported(
            se,
            own_ise,
            has_finalizer,
            ConditionSpec::new(
                CONDITION_VALID,
                "True",
                reason::VALID,
                format!("exported service {ns}/{name} with 0 weight"),
                generation,
            ),
            EventSpec::new(
                EventKind::Normal,
                "Service",
                format!("Service {name} weight is set to 0"),
            ),
            Outcome::Unexported,
        );
    }

    if let Some(other) = obs.ise.filter(|_| own_ise.is_none()) {
        let mut plan = Plan::new(Outcome::Invalid(reason::NAME_COLLISION));
        let other_name = &other.spec.service_reference.namespaced_name;
        let want = ConditionSpec::new(
            CONDITION_VALID,
            "False",
            reason::NAME_COLLISION,
            format!(
                "service {ns}/{name} cannot be exported: its hub name {} is already used by the export of service {other_name}",
                ise_name(ns, name)
            ),
            generation,
        );
        set_and_tell(
            &mut plan,
            se,
            want,
            EventSpec::new(
                EventKind::Warning,
                reason::NAME_COLLISION,
                format!("Service {name} collides with the export of {other_name} in the hub"),
            ),
        );
        // Our finalizer guards nothing in the hub: the object there is someone else's.
        plan.remove_finalizer = has_finalizer;
        return plan;
    }

    let service_uid = service.metadata.uid.as_deref().unwrap_or_default();
    if let Some(ise) = own_ise.filter(|ise| !terminating(ise))
        && ise.spec.service_reference.uid != service_uid
    {
        // The Service was deleted and re-created: unexport the old one, then export afresh
        // (the ISE's deletion triggers that; the recheck is the fallback).
        let mut plan = Plan::new(Outcome::Unexported);
        unexport(&mut plan, Some(ise), has_finalizer);
        plan.recheck = true;
        return plan;
    }

    export(settings, obs, service, own_ise, weight, has_finalizer)
}

fn export(
    settings: &Settings,
    obs: &Observation<'_>,
    service: &Service,
    own_ise: Option<&InternalServiceExport>,
    weight: i64,
    has_finalizer: bool,
) -> Plan {
    let se = obs.export;
    let ns = se.metadata.namespace.as_deref().unwrap_or_default();
    let name = se.metadata.name.as_deref().unwrap_or_default();
    let generation = se.metadata.generation;
    let mut plan = Plan::new(Outcome::Exported);
    let mut metadata = MetadataChange {
        add_finalizer: !has_finalizer,
        last_seen: None,
    };

    let valid = ConditionSpec::new(
        CONDITION_VALID,
        "True",
        reason::VALID,
        format!("service {ns}/{name} is valid for export"),
        generation,
    );
    set_and_tell(
        &mut plan,
        se,
        valid,
        EventSpec::new(
            EventKind::Normal,
            "ValidServiceExport",
            format!("Service {name} is valid for export"),
        ),
    );
    // An ISE being deleted is on its way out: its verdict is not this export's, and its name
    // cannot be written until it is gone (its deletion triggers the next reconcile).
    let leaving = own_ise.is_some_and(terminating);
    let own_ise = own_ise.filter(|ise| !terminating(ise));
    let hub_conflict = own_ise.and_then(|ise| find_condition(ise.conditions(), CONDITION_CONFLICT));
    let current_conflict = find_condition(se.conditions(), CONDITION_CONFLICT);
    if let Some(hub) = hub_conflict {
        // The hub resolved the conflict: reflect it, in the ServiceExport's own generation.
        let verdict = ConditionSpec {
            type_: CONDITION_CONFLICT.into(),
            status: hub.status.clone(),
            reason: hub.reason.clone(),
            message: hub.message.clone(),
            observed_generation: generation,
        };
        match verdict_event(name, &hub.status) {
            Some(event) => set_and_tell(&mut plan, se, verdict, event),
            None => {
                set_if_changed(&mut plan, se, verdict);
            }
        }
    } else if current_conflict.is_none() || own_ise.is_none() {
        // No verdict yet, or a verdict about an export that no longer exists: re-arm.
        let pending = ConditionSpec::new(
            CONDITION_CONFLICT,
            "Unknown",
            reason::PENDING_CONFLICT_RESOLUTION,
            format!("service {ns}/{name} is pending export conflict resolution"),
            generation,
        );
        set_and_tell(
            &mut plan,
            se,
            pending,
            EventSpec::new(
                EventKind::Normal,
                "PendingExportConflictResolution",
                format!("Service {name} is pending export conflict resolution"),
            ),
        );
    }

    let service_rv = service
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let stamp = last_seen(se, obs.now);
    let fresh_stamp = || LastSeen {
        resource_version: service_rv.clone(),
        timestamp: obs.now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    };
    let mut spec = build_spec(settings, service, ns, name, weight);
    let (tm_pending, tm_fields) = traffic_manager_fields(settings, service, obs.public_ip);
    spec = tm_fields.apply(spec);
    plan.pending = tm_pending;

    // Not listed yet (a new LoadBalancer's address is newer than the list): look again later.
    plan.recheck = matches!(obs.public_ip, PublicIpObservation::NotFound)
        && public_ip_query(settings, service).is_some();
    let needs_write = match own_ise {
        None => !leaving,
        Some(ise) => !same_export(&ise.spec, &spec),
    };
    if needs_write && plan.pending.is_none() {
        // exportedSince is when this content was first seen; a new Service resourceVersion
        // starts a new measurement, an unchanged one keeps the stored time.
        let since = match &stamp {
            Some((rv, ts)) if *rv == service_rv => *ts,
            _ => {
                metadata.last_seen = Some(fresh_stamp());
                obs.now
            }
        };
        spec.service_reference.exported_since = Some(Time(since));
        plan.exported_since = Some(since);
        plan.hub = Some(match own_ise {
            None => HubWrite::Create(Box::new(InternalServiceExport {
                api_version: Some(format!("{}/v1alpha1", crate::api::GROUP)),
                kind: Some("InternalServiceExport".into()),
                metadata: Default::default(),
                spec,
                status: None,
            })),
            Some(_) => HubWrite::UpdateSpec(Box::new(spec)),
        });
    } else if stamp.is_none() {
        metadata.last_seen = Some(fresh_stamp());
    }
    if metadata != MetadataChange::default() {
        plan.metadata = Some(metadata);
    }
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

/// The event fleet-networking records when it copies the hub's verdict to the export.
fn verdict_event(name: &str, status: &str) -> Option<EventSpec> {
    match status {
        "True" => Some(EventSpec::new(
            EventKind::Warning,
            "ServiceExportConflictFound",
            format!("Service {name} is in conflict with other exported services"),
        )),
        "False" => Some(EventSpec::new(
            EventKind::Normal,
            "NoServiceExportConflictFound",
            format!("Service {name} is exported without conflict"),
        )),
        _ => None,
    }
}

/// Not-found, ineligible and weight 0: unexport if we hold the finalizer, set `Valid`, and tell
/// the user once (when the condition changes, not on every resync).
fn invalid_and_unexported(
    se: &ServiceExport,
    own_ise: Option<&InternalServiceExport>,
    has_finalizer: bool,
    want: ConditionSpec,
    event: EventSpec,
    outcome: Outcome,
) -> Plan {
    let mut plan = Plan::new(outcome);
    if has_finalizer {
        unexport(&mut plan, own_ise, true);
    }
    set_and_tell(&mut plan, se, want, event);
    plan
}

/// Sets `want` and, only when that changes the export, records `event`.
fn set_and_tell(plan: &mut Plan, se: &ServiceExport, want: ConditionSpec, event: EventSpec) {
    if set_if_changed(plan, se, want) {
        plan.events.push(event);
    }
}

/// Adds `want` to the plan's conditions unless the export already carries it. True if added.
fn set_if_changed(plan: &mut Plan, se: &ServiceExport, want: ConditionSpec) -> bool {
    if condition_matches(find_condition(se.conditions(), &want.type_), &want) {
        return false;
    }
    plan.conditions.push(want);
    true
}

/// The stored last-seen annotations, when both are present, parse, and are not in the future.
fn last_seen(se: &ServiceExport, now: Timestamp) -> Option<(String, Timestamp)> {
    let annotations = &se.metadata.annotations;
    let rv = annotation(annotations, LAST_SEEN_RESOURCE_VERSION_ANNOTATION)?;
    let ts: Timestamp = annotation(annotations, LAST_SEEN_TIMESTAMP_ANNOTATION)?
        .parse()
        .ok()?;
    (ts <= now).then(|| (rv.to_string(), ts))
}

fn build_spec(
    settings: &Settings,
    service: &Service,
    ns: &str,
    name: &str,
    weight: i64,
) -> InternalServiceExportSpec {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ports| {
            ports
                .iter()
                .map(|p| ServicePort {
                    name: p.name.clone().filter(|n| !n.is_empty()),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                    port: p.port,
                    target_port: p.target_port.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    InternalServiceExportSpec {
        ports,
        service_reference: ExportedObjectReference {
            cluster_id: settings.member.clone(),
            // Set explicitly: the reference relies on a cache filling TypeMeta, which may not.
            kind: "Service".into(),
            api_version: Some("v1".into()),
            namespace: ns.into(),
            name: name.into(),
            resource_version: service
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default(),
            generation: service.metadata.generation.unwrap_or_default(),
            uid: service.metadata.uid.clone().unwrap_or_default(),
            namespaced_name: format!("{ns}/{name}"),
            exported_since: None,
        },
        weight: settings.traffic_manager.then_some(weight),
        ..Default::default()
    }
}

/// The Traffic Manager fields, all of them, so that stale ones are cleared.
#[derive(Debug, Default)]
struct TrafficManagerFields {
    type_: Option<String>,
    is_internal_load_balancer: Option<bool>,
    public_ip_resource_id: Option<String>,
    is_dns_label_configured: Option<bool>,
}

impl TrafficManagerFields {
    fn apply(self, spec: InternalServiceExportSpec) -> InternalServiceExportSpec {
        InternalServiceExportSpec {
            type_: self.type_,
            is_internal_load_balancer: self.is_internal_load_balancer,
            public_ip_resource_id: self.public_ip_resource_id,
            is_dns_label_configured: self.is_dns_label_configured,
            ..spec
        }
    }
}

/// `(pending error, fields)`. `false` booleans are left out, as fleet-networking's `omitempty`
/// writes them.
fn traffic_manager_fields(
    settings: &Settings,
    service: &Service,
    public_ip: &PublicIpObservation,
) -> (Option<String>, TrafficManagerFields) {
    let mut fields = TrafficManagerFields::default();
    if !settings.traffic_manager {
        return (None, fields);
    }
    let type_ = service
        .spec
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "ClusterIP".into());
    fields.type_ = Some(type_);
    if !is_load_balancer(service) {
        return (None, fields);
    }
    if is_internal_lb(service) {
        fields.is_internal_load_balancer = Some(true);
        return (None, fields);
    }
    if ingress_ip(service).is_none() {
        // The Service changes again when its LB gets an address; that triggers a reconcile.
        return (None, fields);
    }
    let pip = match public_ip {
        PublicIpObservation::Found(pip) => pip,
        PublicIpObservation::Failed(message) => return (Some(message.clone()), fields),
        PublicIpObservation::NotFound | PublicIpObservation::NotNeeded => return (None, fields),
    };
    fields.public_ip_resource_id = Some(pip.id.clone());
    let mut dns_configured = pip.dns_label_configured;
    // The cloud provider reconciles the DNS label from this annotation.
    match annotation(&service.metadata.annotations, AZURE_DNS_LABEL_ANNOTATION) {
        None => {}
        Some("") => dns_configured = false,
        Some(_) if !dns_configured => {
            return (
                Some(format!(
                    "in the process of adding DNS to the public ip address {}",
                    pip.id
                )),
                fields,
            );
        }
        Some(_) => {}
    }
    fields.is_dns_label_configured = dns_configured.then_some(true);
    (None, fields)
}

/// Equal in everything but the fields that move without changing what is exported:
/// the Service's resourceVersion and the export timestamp.
fn same_export(current: &InternalServiceExportSpec, want: &InternalServiceExportSpec) -> bool {
    let strip = |s: &InternalServiceExportSpec| {
        let mut s = s.clone();
        s.service_reference.resource_version.clear();
        s.service_reference.exported_since = None;
        s
    };
    strip(current) == strip(want)
}

fn is_eligible(service: &Service) -> bool {
    let spec = service.spec.as_ref();
    let external_name = spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName");
    let headless = spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    !external_name && !headless
}

fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

fn is_internal_lb(service: &Service) -> bool {
    annotation(&service.metadata.annotations, AZURE_LB_INTERNAL_ANNOTATION) == Some("true")
}

/// The first ingress IP, when there is a non-empty one.
fn ingress_ip(service: &Service) -> Option<&str> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
}

fn annotation<'a>(annotations: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    annotations.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests;
