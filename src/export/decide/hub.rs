//! What the hub gets of a decision: the InternalServiceExport to create or update, stamped
//! with the time its content was first seen (the last-seen annotations on the ServiceExport).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::service::annotation;
use super::{HubWrite, LastSeen, MetadataChange, Observation, Plan, Subject, ise_name};
use crate::api::{
    InternalServiceExport, InternalServiceExportSpec, LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport,
};

/// The ISE create or update (when `needs_write` and nothing is pending), stamped with the
/// time its content was first seen; returns the ServiceExport metadata change that goes first.
pub(super) fn hub_write(
    plan: &mut Plan,
    obs: &Observation<'_>,
    subject: &Subject<'_>,
    service: &Service,
    mut spec: InternalServiceExportSpec,
    own_ise: Option<&InternalServiceExport>,
    needs_write: bool,
) -> MetadataChange {
    let mut metadata = MetadataChange {
        add_finalizer: !subject.has_finalizer,
        last_seen: None,
    };
    let service_rv = service
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let stamp = last_seen(subject.se, obs.now);
    let fresh_stamp = || LastSeen {
        resource_version: service_rv.clone(),
        timestamp: obs.now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    };
    if !needs_write || plan.pending.is_some() {
        if stamp.is_none() {
            metadata.last_seen = Some(fresh_stamp());
        }
        return metadata;
    }
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
        None => {
            let mut ise = new_ise(subject.ns, subject.name, spec);
            // `act` names it (and places it in the member's namespace).
            ise.metadata = Default::default();
            HubWrite::Create(Box::new(ise))
        }
        Some(_) => HubWrite::UpdateSpec(Box::new(spec)),
    });
    metadata
}

/// The ISE of export `<ns>/<name>` with `spec`, named as `act` creates it.
pub(super) fn new_ise(
    ns: &str,
    name: &str,
    spec: InternalServiceExportSpec,
) -> InternalServiceExport {
    InternalServiceExport {
        api_version: Some(format!("{}/v1alpha1", crate::api::GROUP)),
        kind: Some("InternalServiceExport".into()),
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(ise_name(ns, name)),
            ..Default::default()
        },
        spec,
        status: None,
    }
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
