//! Performs a [`Plan`]: the only place the reconciler writes.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use serde_json::{Value, json};

use super::Context;
use super::decide::{EventKind, HubWrite, MetadataChange, Plan, ise_name};
use super::error::{Error, Step};
use crate::api::{
    CLEANUP_FINALIZER, InternalServiceExport, LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport, set_condition,
};

/// What `perform` changed, for metrics.
#[derive(Debug, Default, Clone)]
pub struct Performed {
    pub hub_writes: u32,
    pub member_writes: u32,
    /// The ISE as the hub answered our write (`Some(None)`: deleted), for reads of our own
    /// writes until the view has seen them.
    pub hub_object: Option<Option<InternalServiceExport>>,
}

/// Performs the plan's writes in order: metadata → hub delete → finalizer removal → status
/// (then its events, which belong to the status change and so are never lost to a later
/// failing step) → hub create/update. A 409 is returned as is, for the caller to re-observe.
pub async fn perform(
    ctx: &Context,
    se: &ServiceExport,
    plan: &Plan,
    now: Timestamp,
) -> Result<Performed, Error> {
    let ns = se.metadata.namespace.as_deref().unwrap_or_default();
    let name = se.metadata.name.as_deref().unwrap_or_default();
    let err = |step: Step| Error::kube(&ctx.member, ns, name, step);
    let exports: Api<ServiceExport> =
        Api::namespaced_with(ctx.member_client.clone(), ns, &ctx.se_version);
    let mut done = Performed::default();
    // Optimistic concurrency on the ServiceExport: every write names the version it was decided on.
    let mut resource_version = se.metadata.resource_version.clone();

    if let Some(change) = &plan.metadata {
        ctx.ensure_leader(ns, name)?;
        let body = metadata_patch(se, change, resource_version.as_deref());
        let patched = exports
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(err(Step::PatchMetadata))?;
        resource_version = patched.metadata.resource_version;
        done.member_writes += 1;
    }

    if let Some(HubWrite::Delete { uid }) = &plan.hub {
        let uid = match uid {
            Some(uid) => Some(uid.clone()),
            None => own_ise_uid(ctx, ns, name).await?,
        };
        if let Some(uid) = uid {
            ctx.ensure_leader(ns, name)?;
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            // Accepted (gone, or terminating behind the hub's finalizer) or already gone: the
            // export is withdrawn and the finalizer may go. A failed precondition (409) means
            // the name now holds another object: the caller re-observes.
            match ctx.hub.delete(&ise_name(ns, name), &params).await {
                Ok(_) => {
                    done.hub_writes += 1;
                    done.hub_object = Some(None);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => done.hub_object = Some(None),
                Err(e) => return Err(err(Step::DeleteInternalServiceExport)(e)),
            }
        }
    }

    if plan.remove_finalizer {
        ctx.ensure_leader(ns, name)?;
        let body = se.finalizer_removal_patch(resource_version.as_deref());
        match exports
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(patched) => {
                resource_version = patched.metadata.resource_version;
                done.member_writes += 1;
            }
            // The export finished deleting once the finalizer went; nothing left to update.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(done),
            Err(e) => return Err(err(Step::RemoveFinalizer)(e)),
        }
    }

    if !plan.conditions.is_empty() {
        ctx.ensure_leader(ns, name)?;
        let mut conditions = se.conditions().to_vec();
        for c in &plan.conditions {
            set_condition(&mut conditions, c, Time(now));
        }
        let body = json!({"metadata": {"resourceVersion": resource_version}, "status": {"conditions": conditions}});
        exports
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(err(Step::PatchStatus))?;
        done.member_writes += 1;
        publish_events(ctx, se, plan).await;
    }

    match &plan.hub {
        Some(HubWrite::Create(ise)) => {
            ctx.ensure_leader(ns, name)?;
            let mut ise: InternalServiceExport = (**ise).clone();
            ise.metadata.name = Some(ise_name(ns, name));
            ise.metadata.namespace = Some(ctx.hub_namespace.clone());
            let created = ctx
                .hub
                .create(&PostParams::default(), &ise)
                .await
                .map_err(err(Step::CreateInternalServiceExport))?;
            done.hub_writes += 1;
            done.hub_object = Some(Some(created));
        }
        Some(HubWrite::UpdateSpec(spec)) => {
            ctx.ensure_leader(ns, name)?;
            let body = json!({"spec": spec_with_clears(spec)});
            let patched = ctx
                .hub
                .patch(
                    &ise_name(ns, name),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await
                .map_err(err(Step::UpdateInternalServiceExport))?;
            done.hub_writes += 1;
            done.hub_object = Some(Some(patched));
        }
        _ => {}
    }

    Ok(done)
}

/// The UID of this export's ISE, read live: `None` when the name is free, already terminating,
/// or held by another export (a name collision, or another member's object) — never ours to delete.
async fn own_ise_uid(ctx: &Context, ns: &str, name: &str) -> Result<Option<String>, Error> {
    let live = super::read_ise(ctx, ns, name).await?;
    Ok(live
        .filter(|ise| {
            ise.metadata.deletion_timestamp.is_none()
                && ise.spec.service_reference.cluster_id == ctx.member
                && ise.spec.service_reference.namespaced_name == format!("{ns}/{name}")
        })
        .and_then(|ise| ise.metadata.uid))
}

async fn publish_events(ctx: &Context, se: &ServiceExport, plan: &Plan) {
    let reference = kube::Resource::object_ref(se, &ctx.se_version);
    for event in &plan.events {
        let ev = Event {
            type_: match event.kind {
                EventKind::Normal => EventType::Normal,
                EventKind::Warning => EventType::Warning,
            },
            reason: event.reason.to_string(),
            note: Some(event.note.clone()),
            action: "Export".into(),
            secondary: None,
        };
        // An event that cannot be recorded is not worth failing (and repeating) the export.
        if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
            tracing::warn!(error = %e, reason = event.reason, "could not record event");
        }
    }
}

fn metadata_patch(
    se: &ServiceExport,
    change: &MetadataChange,
    resource_version: Option<&str>,
) -> Value {
    let mut metadata = json!({"resourceVersion": resource_version});
    if change.add_finalizer {
        let mut finalizers = se.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(CLEANUP_FINALIZER.to_string());
        metadata["finalizers"] = json!(finalizers);
    }
    if let Some(ls) = &change.last_seen {
        metadata["annotations"] = json!({
            LAST_SEEN_RESOURCE_VERSION_ANNOTATION: ls.resource_version,
            LAST_SEEN_TIMESTAMP_ANNOTATION: ls.timestamp,
        });
    }
    json!({ "metadata": metadata })
}

/// The spec as a merge patch that also removes optional fields no longer set.
fn spec_with_clears(spec: &crate::api::InternalServiceExportSpec) -> Value {
    let mut v = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        for key in [
            "type",
            "isInternalLoadBalancer",
            "publicIPResourceID",
            "isDNSLabelConfigured",
            "weight",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    v
}
