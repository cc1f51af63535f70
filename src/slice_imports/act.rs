//! Performs a [`Plan`]: the only place the EndpointSliceImport job writes, in the reference's
//! order: the cleanup finalizer on the import (hub) before its slice is written (member), the
//! generation annotated before its duration is observed, and on deletion the slice deleted
//! before the finalizer is removed. Each hub write carries the import's resourceVersion, as
//! the reference's updates do: a stale view is refused (409), not overwritten.

use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::context::Context;
use super::decide::{CLEANUP_FINALIZER, LAST_OBSERVED_GENERATION_ANNOTATION, Plan, SliceWrite};
use super::error::{Error, Step};
use crate::api::EndpointSliceImport;
use crate::controller::{ApiFailure, delete_unless_gone};

/// Performs `plan` for the import `name` (`import` and `slice`: as decided on).
pub(super) async fn perform(
    ctx: &Context,
    name: &str,
    import: &EndpointSliceImport,
    slice: Option<&EndpointSlice>,
    plan: &Plan,
) -> Result<(), Error> {
    let mut import = import.clone();
    if plan.add_finalizer {
        let mut finalizers = import.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(CLEANUP_FINALIZER.to_string());
        let body = json!({"finalizers": finalizers});
        import = patch_import(ctx, name, &import, body, Step::AddFinalizer).await?;
    }
    if let Some(write) = &plan.slice {
        write_slice(ctx, name, slice, write).await?;
    }
    if let Some(observe) = &plan.observe {
        let body =
            json!({"annotations": {LAST_OBSERVED_GENERATION_ANNOTATION: observe.generation}});
        import = patch_import(ctx, name, &import, body, Step::AnnotateEndpointSliceImport).await?;
        if let Some(took) = observe.took {
            let origin = &import.spec.endpoint_slice_reference.cluster_id;
            ctx.observer
                .slice_import_duration(origin, &ctx.member, observe.first, took);
            log_duration(ctx, name, origin, observe.first, took);
        }
    }
    if plan.remove_finalizer {
        let finalizers: Vec<String> = import
            .metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != CLEANUP_FINALIZER)
            .collect();
        let body = json!({"finalizers": finalizers});
        patch_import(ctx, name, &import, body, Step::RemoveFinalizer).await?;
        ctx.own_imports.forget(&name.to_string());
        tracing::info!(member = %ctx.member, import = %name, "EndpointSlice unimported");
    }
    Ok(())
}

/// Merges `metadata` into the import, on the version decided on; the import as the hub
/// answered, remembered over the version the view shows.
async fn patch_import(
    ctx: &Context,
    name: &str,
    import: &EndpointSliceImport,
    mut metadata: serde_json::Value,
    step: Step,
) -> Result<EndpointSliceImport, Error> {
    metadata["resourceVersion"] = json!(import.metadata.resource_version);
    let view_rv = view_rv(ctx, name);
    let mut after = ctx
        .hub
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": metadata })),
        )
        .await
        .map_err(ApiFailure::of(&ctx.member, &ctx.hub_namespace, name, step))?;
    after.metadata.managed_fields = None;
    ctx.own_imports
        .wrote(name.to_string(), [view_rv], after.clone());
    Ok(after)
}

fn view_rv(ctx: &Context, name: &str) -> Option<String> {
    let key = kube::runtime::reflector::ObjectRef::new(name).within(&ctx.hub_namespace);
    ctx.imports
        .get(&key)
        .and_then(|i| i.metadata.resource_version.clone())
}

/// Creates, updates or deletes the imported slice `name` of the fleet system namespace.
async fn write_slice(
    ctx: &Context,
    name: &str,
    slice: Option<&EndpointSlice>,
    write: &SliceWrite,
) -> Result<(), Error> {
    let err = |step| ApiFailure::of(&ctx.member, &ctx.hub_namespace, name, step);
    let superseded = slice.and_then(|s| s.metadata.resource_version.clone());
    let slice_view_rv = {
        let key = kube::runtime::reflector::ObjectRef::new(name).within(&ctx.fleet_namespace);
        ctx.slices
            .get(&key)
            .and_then(|s| s.metadata.resource_version.clone())
    };
    let after = match write {
        SliceWrite::Create(wanted) => Some(
            ctx.member_slices
                .create(&PostParams::default(), wanted)
                .await
                .map_err(err(Step::CreateEndpointSlice))?,
        ),
        SliceWrite::Update(wanted) => Some(
            ctx.member_slices
                .replace(name, &PostParams::default(), wanted)
                .await
                .map_err(err(Step::UpdateEndpointSlice))?,
        ),
        SliceWrite::Delete => {
            // Never written, or deleted by someone (gone already): nothing left to unimport.
            delete_unless_gone(&ctx.member_slices, name, &DeleteParams::default())
                .await
                .map_err(err(Step::DeleteEndpointSlice))?;
            None
        }
    };
    let after = after.map(|mut s| {
        s.metadata.managed_fields = None;
        s
    });
    ctx.own_slices
        .wrote(name.to_string(), [slice_view_rv, superseded], after);
    Ok(())
}

/// The reference logs each data point (its backend had no histograms).
fn log_duration(ctx: &Context, name: &str, origin: &str, first: bool, took: Duration) {
    tracing::debug!(
        member = %ctx.member,
        import = %name,
        origin_cluster_id = %origin,
        is_first_import = first,
        took_ms = took.as_millis() as u64,
        "endpointSliceExportImportDurationMilliseconds"
    );
}
