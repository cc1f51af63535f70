//! Performs a [`Plan`]: the only place the reconciler writes.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::context::Context;
use super::decide::{HubWrite, MetadataChange, Plan, ise_name};
use super::error::{Error, Step};
use crate::api::{
    CLEANUP_FINALIZER, InternalServiceExport, InternalServiceExportSpec,
    LAST_SEEN_RESOURCE_VERSION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport,
    set_condition,
};
use crate::controller::ApiFailure;
use crate::controller::{delete_unless_gone, merge_patch, only_uid};

/// What `perform` changed, for metrics.
#[derive(Debug, Default, Clone)]
pub struct Performed {
    pub hub_writes: u32,
    pub member_writes: u32,
    /// The ISE as the hub answered our write (`Some(None)`: deleted), for reads of our own
    /// writes until the view has seen them.
    pub hub_object: Option<Option<InternalServiceExport>>,
    /// The ServiceExport as the member answered our last write of it (also a deleting one's
    /// finalizer removal), and the resourceVersions that write superseded: the decision's and any
    /// between our writes. A view still showing one of those is behind our own write.
    pub export_object: Option<ServiceExport>,
    pub superseded: Vec<String>,
}

/// Performs the plan's writes in order: metadata → hub delete → finalizer removal → status
/// (then its events are queued: they belong to the status change and so are never lost to a
/// later failing step, and never wait for the Events budget here) → hub create/update. A 409 is returned as is, for the caller to re-observe.
pub async fn perform(
    ctx: &Context,
    se: &ServiceExport,
    plan: &Plan,
    now: Timestamp,
) -> Result<Performed, Error> {
    let mut w = Writes::new(ctx, se);
    if let Some(change) = &plan.metadata {
        w.metadata(change).await?;
    }
    if let Some(HubWrite::Delete { uid }) = &plan.hub {
        w.delete_ise(uid.as_ref()).await?;
    }
    if plan.remove_finalizer && !w.remove_finalizer().await? {
        // The export finished deleting once the finalizer went; nothing left to update.
        return Ok(w.done);
    }
    if !plan.conditions.is_empty() {
        w.status(plan, now).await?;
        ctx.events.publish(
            kube::Resource::object_ref(se, &ctx.se_version),
            &plan.events,
        );
    }
    match &plan.hub {
        Some(HubWrite::Create(ise)) => w.create_ise(ise).await?,
        Some(HubWrite::UpdateSpec(spec)) => w.update_ise(spec).await?,
        _ => {}
    }
    Ok(w.done)
}

/// One export's writes, in the order [`perform`] makes them.
struct Writes<'a> {
    ctx: &'a Context,
    se: &'a ServiceExport,
    ns: &'a str,
    name: &'a str,
    exports: Api<ServiceExport>,
    /// Optimistic concurrency on the ServiceExport: every write names the version it was
    /// decided on, then the version the previous write produced.
    resource_version: Option<String>,
    done: Performed,
}

impl<'a> Writes<'a> {
    fn new(ctx: &'a Context, se: &'a ServiceExport) -> Self {
        let ns = se.metadata.namespace.as_deref().unwrap_or_default();
        Self {
            ctx,
            se,
            ns,
            name: se.metadata.name.as_deref().unwrap_or_default(),
            exports: Api::namespaced_with(ctx.member_client.clone(), ns, &ctx.se_version),
            resource_version: se.metadata.resource_version.clone(),
            done: Performed::default(),
        }
    }

    fn err(&self, step: Step) -> impl FnOnce(kube::Error) -> Error + use<> {
        let failed = ApiFailure::of(&self.ctx.member, self.ns, self.name, step);
        move |e| failed(e).into()
    }

    async fn metadata(&mut self, change: &MetadataChange) -> Result<(), Error> {
        let body = metadata_patch(self.se, change, self.resource_version.as_deref());
        self.patch(false, &body, Step::PatchMetadata).await
    }

    async fn delete_ise(&mut self, uid: Option<&String>) -> Result<(), Error> {
        let uid = match uid {
            Some(uid) => Some(uid.clone()),
            None => own_ise_uid(self.ctx, self.ns, self.name).await?,
        };
        let Some(uid) = uid else { return Ok(()) };
        let params = only_uid(Some(uid));
        // Accepted (gone, or terminating behind the hub's finalizer) or already gone: the
        // export is withdrawn and the finalizer may go. A failed precondition (409) means
        // the name now holds another object: the caller re-observes.
        let name = ise_name(self.ns, self.name);
        let deleted = delete_unless_gone(&self.ctx.hub, &name, &params)
            .await
            .map_err(self.err(Step::DeleteInternalServiceExport))?;
        self.done.hub_writes += u32::from(deleted);
        self.done.hub_object = Some(None);
        Ok(())
    }

    /// `false`: the export is gone (it was only waiting for our finalizer).
    async fn remove_finalizer(&mut self) -> Result<bool, Error> {
        let body = self
            .se
            .finalizer_removal_patch(self.resource_version.as_deref());
        match self
            .exports
            .patch(self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(patched) => {
                self.wrote(patched);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(self.err(Step::RemoveFinalizer)(e)),
        }
    }

    async fn status(&mut self, plan: &Plan, now: Timestamp) -> Result<(), Error> {
        let mut conditions = self.se.conditions().to_vec();
        for c in &plan.conditions {
            set_condition(&mut conditions, c, Time(now));
        }
        let body = json!({"metadata": {"resourceVersion": self.resource_version}, "status": {"conditions": conditions}});
        self.patch(true, &body, Step::PatchStatus).await
    }

    /// Merge-patches the ServiceExport (its status subresource when `status`).
    async fn patch(&mut self, status: bool, body: &Value, step: Step) -> Result<(), Error> {
        let patched = merge_patch(&self.exports, self.name, status, body).await;
        self.wrote(patched.map_err(self.err(step))?);
        Ok(())
    }

    /// Counts a write of the ServiceExport and carries its new resourceVersion to the next.
    fn wrote(&mut self, patched: ServiceExport) {
        self.done.member_writes += 1;
        self.done.superseded.extend(self.resource_version.take());
        self.resource_version = patched.metadata.resource_version.clone();
        // Remembered also when deleting: the finalizer removal's answer is what a view still
        // showing the export with our finalizer must be read as (else its next reconcile,
        // on the hub's ISE deletion, would read the ISE live and patch a gone export again).
        self.done.export_object = Some(patched);
    }

    async fn create_ise(&mut self, ise: &InternalServiceExport) -> Result<(), Error> {
        let mut ise = ise.clone();
        ise.metadata.name = Some(ise_name(self.ns, self.name));
        ise.metadata.namespace = Some(self.ctx.hub_namespace.clone());
        let created = self
            .ctx
            .hub
            .create(&PostParams::default(), &ise)
            .await
            .map_err(self.err(Step::CreateInternalServiceExport))?;
        self.done.hub_writes += 1;
        self.done.hub_object = Some(Some(created));
        Ok(())
    }

    async fn update_ise(&mut self, spec: &InternalServiceExportSpec) -> Result<(), Error> {
        let body = json!({"spec": spec_with_clears(spec)});
        let patched = self
            .ctx
            .hub
            .patch(
                &ise_name(self.ns, self.name),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
            .map_err(self.err(Step::UpdateInternalServiceExport))?;
        self.done.hub_writes += 1;
        self.done.hub_object = Some(Some(patched));
        Ok(())
    }
}

/// The UID of this export's ISE, read live: `None` when the name is free, already terminating,
/// or held by another export (a name collision, or another member's object) — never ours to delete.
async fn own_ise_uid(ctx: &Context, ns: &str, name: &str) -> Result<Option<String>, Error> {
    let live = ctx.read_ise(ns, name).await?;
    Ok(live
        .filter(|ise| {
            ise.metadata.deletion_timestamp.is_none()
                && ise.spec.service_reference.cluster_id == ctx.member
                && ise.spec.service_reference.namespaced_name == format!("{ns}/{name}")
        })
        .and_then(|ise| ise.metadata.uid))
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
fn spec_with_clears(spec: &InternalServiceExportSpec) -> Value {
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
