//! What the decision reads from a Service: eligibility, the ISE spec it exports, and the
//! Traffic Manager fields (load balancer, public IP, DNS label).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;

use super::{
    AZURE_DNS_LABEL_ANNOTATION, AZURE_LB_INTERNAL_ANNOTATION, AZURE_LB_RESOURCE_GROUP_ANNOTATION,
    PublicIpObservation, PublicIpQuery, Settings,
};
use crate::api::{ExportedObjectReference, InternalServiceExportSpec, ServicePort};
use crate::export::public_ip::resource_group_allowed;

/// Where to look up the Service's public IP, when the Traffic Manager fields need one: the
/// resource group the Service names (annotation), else the member's default, and its ingress
/// IP; or, when that group is not one the member may read ([`resource_group_allowed`]), that
/// no lookup is made.
pub fn public_ip_query(settings: &Settings, service: &Service) -> Option<PublicIpQuery> {
    if !settings.traffic_manager || !is_load_balancer(service) || is_internal_lb(service) {
        return None;
    }
    let ip = ingress_ip(service)?;
    let annotated = annotation(
        &service.metadata.annotations,
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
    )
    .map(str::trim)
    .filter(|rg| !rg.is_empty());
    let Some(rg) = annotated else {
        // The operator's own choice for this member (an empty one fails the lookup, as before).
        return Some(PublicIpQuery::Lookup {
            resource_group: settings.default_resource_group.clone(),
            ip: ip.to_string(),
        });
    };
    let allowed = resource_group_allowed(
        &settings.default_resource_group,
        &settings.allowed_resource_groups,
        rg,
    );
    Some(match allowed {
        true => PublicIpQuery::Lookup {
            resource_group: rg.to_string(),
            ip: ip.to_string(),
        },
        false => PublicIpQuery::NotAllowed {
            resource_group: rg.to_string(),
        },
    })
}

pub(super) fn build_spec(
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
pub(super) struct TrafficManagerFields {
    type_: Option<String>,
    is_internal_load_balancer: Option<bool>,
    public_ip_resource_id: Option<String>,
    is_dns_label_configured: Option<bool>,
}

impl TrafficManagerFields {
    pub(super) fn apply(self, spec: InternalServiceExportSpec) -> InternalServiceExportSpec {
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
pub(super) fn traffic_manager_fields(
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
    if let Some(PublicIpQuery::NotAllowed { .. }) = public_ip_query(settings, service) {
        // Whatever was observed: an IP of a group the member may not read is never exported.
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
pub(super) fn same_export(
    current: &InternalServiceExportSpec,
    want: &InternalServiceExportSpec,
) -> bool {
    let strip = |s: &InternalServiceExportSpec| {
        let mut s = s.clone();
        s.service_reference.resource_version.clear();
        s.service_reference.exported_since = None;
        s
    };
    strip(current) == strip(want)
}

pub(super) fn is_eligible(service: &Service) -> bool {
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

pub(super) fn annotation<'a>(
    annotations: &'a Option<BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.as_ref()?.get(key).map(String::as_str)
}
