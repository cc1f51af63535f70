//! Performs a [`Plan`]: the only place the EndpointSlice exporter writes. Deletes of the
//! exports that must go → the slice's unique-name annotation → the export's create or update.

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::context::Context;
use super::decide::{HubWrite, NameChange, Plan};
use super::error::{Error, Step};
use super::model::{ExportView, SliceView};
use crate::api::{
    EndpointSliceExportSpec, GROUP, LAST_SEEN_GENERATION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, UNIQUE_NAME_ANNOTATION,
};
use crate::controller::ApiFailure;
use crate::controller::only_uid;

/// Performs `plan` for the slice `ns/name` (`slice`: as decided on; `None`: gone).
pub(super) async fn perform(
    ctx: &Context,
    ns: &str,
    name: &str,
    slice: Option<&SliceView>,
    plan: &Plan,
) -> Result<(), Error> {
    delete_doomed(ctx, ns, name, plan).await?;
    let written_slice = match (&plan.name, slice) {
        (Some(change), Some(slice)) => Some(annotate(ctx, ns, name, slice, change).await?),
        _ => None,
    };
    let Some(write) = &plan.hub else {
        return Ok(());
    };
    write_export(ctx, ns, name, write, written_slice.as_ref(), slice).await
}

/// Deletes the exports that must go, each only if it is still the object the view showed.
async fn delete_doomed(ctx: &Context, ns: &str, name: &str, plan: &Plan) -> Result<(), Error> {
    for doomed in &plan.delete {
        let view_rv = view_rv(ctx, &doomed.name);
        match ctx
            .hub
            .delete(&doomed.name, &only_uid(doomed.uid.clone()))
            .await
        {
            Ok(_) => {
                ctx.observer.slice_write(&ctx.member, "delete");
                tracing::info!(member = %ctx.member, slice = %format!("{ns}/{name}"), export = %doomed.name, "EndpointSliceExport removed");
            }
            // Gone already, or the name now holds another object: not ours to delete.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(
                    ApiFailure::of(&ctx.member, ns, name, Step::DeleteEndpointSliceExport)(e)
                        .into(),
                );
            }
        }
        ctx.own_exports.wrote(doomed.name.clone(), [view_rv], None);
    }
    Ok(())
}

/// Sets or withdraws the slice's unique name; the slice as the member answered.
async fn annotate(
    ctx: &Context,
    ns: &str,
    name: &str,
    slice: &SliceView,
    change: &NameChange,
) -> Result<SliceView, Error> {
    let annotations = annotations_of(change);
    let slices: Api<SliceView> = Api::namespaced(ctx.member_client.clone(), ns);
    let body = json!({"metadata": {"annotations": annotations}});
    let after = slices
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map_err(ApiFailure::of(
            &ctx.member,
            ns,
            name,
            Step::AnnotateEndpointSlice,
        ))?;
    ctx.own_slices.wrote(
        ObjectRef::new(name).within(ns),
        [slice.metadata.resource_version.clone()],
        after.clone(),
    );
    Ok(after)
}

/// The merge patch of the slice's annotations that makes `change`. A first export stamps the
/// unique name and the last-seen pair in one write (the reference makes two).
fn annotations_of(change: &NameChange) -> Value {
    match change {
        NameChange::Stamp { unique, last_seen } => {
            let mut annotations = serde_json::Map::new();
            if let Some(unique) = unique {
                annotations.insert(UNIQUE_NAME_ANNOTATION.into(), json!(unique));
            }
            if let Some(seen) = last_seen {
                annotations.insert(
                    LAST_SEEN_GENERATION_ANNOTATION.into(),
                    json!(seen.generation.to_string()),
                );
                annotations.insert(LAST_SEEN_TIMESTAMP_ANNOTATION.into(), json!(seen.timestamp));
            }
            Value::Object(annotations)
        }
        NameChange::Withdraw => json!({
            UNIQUE_NAME_ANNOTATION: null,
            LAST_SEEN_GENERATION_ANNOTATION: null,
            LAST_SEEN_TIMESTAMP_ANNOTATION: null,
        }),
    }
}

/// Creates or updates the slice's own export, referring to the slice as annotated (when it
/// was, `written_slice`).
async fn write_export(
    ctx: &Context,
    ns: &str,
    name: &str,
    write: &HubWrite,
    written_slice: Option<&SliceView>,
    slice: Option<&SliceView>,
) -> Result<(), Error> {
    let err = |step| ApiFailure::of(&ctx.member, ns, name, step);
    // What the view shows before this write: after it, the view may show the write itself,
    // and a write remembered over its own version would never be forgotten.
    let unique = write.name().to_string();
    let view_before = view_rv(ctx, &unique);
    let result = match write {
        HubWrite::Create(export) => {
            let mut export = export.as_ref().clone();
            after_annotating(&mut export.spec, written_slice, slice);
            export.metadata.namespace = Some(ctx.hub_namespace.clone());
            export.api_version = Some(format!("{GROUP}/v1alpha1"));
            export.kind = Some("EndpointSliceExport".into());
            let created = ctx
                .hub
                .create(&PostParams::default(), &export)
                .await
                .map_err(err(Step::CreateEndpointSliceExport))?;
            ctx.observer.slice_write(&ctx.member, "create");
            created
        }
        HubWrite::Update { spec, .. } => {
            let mut spec = spec.as_ref().clone();
            after_annotating(&mut spec, written_slice, slice);
            let updated = ctx
                .hub
                .patch(
                    &unique,
                    &PatchParams::default(),
                    &Patch::Merge(&spec_patch(&spec)),
                )
                .await
                .map_err(err(Step::UpdateEndpointSliceExport))?;
            ctx.observer.slice_write(&ctx.member, "update");
            updated
        }
    };
    ctx.own_exports
        .wrote(unique, [view_before], Some(ExportView::from(result)));
    Ok(())
}

fn view_rv(ctx: &Context, unique: &str) -> Option<String> {
    ctx.hub_view
        .get(&ObjectRef::new(unique).within(&ctx.hub_namespace))
        .and_then(|e| e.id.resource_version.clone())
}

/// The export refers to the slice's version after our own annotation write, so that the watch
/// event of that write finds it current; unless the endpoints changed meanwhile (then the next
/// reconcile writes them).
fn after_annotating(
    spec: &mut EndpointSliceExportSpec,
    annotated: Option<&SliceView>,
    decided_on: Option<&SliceView>,
) {
    let (Some(after), Some(before)) = (annotated, decided_on) else {
        return;
    };
    if after.metadata.generation == before.metadata.generation {
        spec.endpoint_slice_reference.resource_version =
            after.metadata.resource_version.clone().unwrap_or_default();
    }
}

/// A JSON merge patch that makes the export's spec `spec`: lists are replaced whole, and an
/// empty port list removes the ports.
fn spec_patch(spec: &EndpointSliceExportSpec) -> Value {
    let mut value = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.entry("ports").or_insert(Value::Null);
    }
    json!({ "spec": value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_sets_only_what_it_names_and_a_withdrawal_removes_all_three() {
        use super::super::decide::LastSeen;
        let seen = LastSeen {
            generation: 4,
            timestamp: "2026-12-05T10:00:00Z".into(),
        };
        let both = NameChange::Stamp {
            unique: Some("m1-work-web-1a2b3".into()),
            last_seen: Some(seen.clone()),
        };
        assert_eq!(
            annotations_of(&both),
            json!({UNIQUE_NAME_ANNOTATION: "m1-work-web-1a2b3",
                LAST_SEEN_GENERATION_ANNOTATION: "4",
                LAST_SEEN_TIMESTAMP_ANNOTATION: "2026-12-05T10:00:00Z"})
        );
        let seen_only = NameChange::Stamp {
            unique: None,
            last_seen: Some(seen),
        };
        assert!(
            annotations_of(&seen_only)
                .get(UNIQUE_NAME_ANNOTATION)
                .is_none()
        );
        let gone = annotations_of(&NameChange::Withdraw);
        for key in [
            UNIQUE_NAME_ANNOTATION,
            LAST_SEEN_GENERATION_ANNOTATION,
            LAST_SEEN_TIMESTAMP_ANNOTATION,
        ] {
            assert_eq!(gone[key], Value::Null, "{key}");
        }
    }

    #[test]
    fn an_update_without_ports_removes_them() {
        let patch = spec_patch(&EndpointSliceExportSpec::default());
        assert_eq!(patch["spec"]["ports"], Value::Null);
        assert!(
            patch["spec"]
                .as_object()
                .is_some_and(|m| m.contains_key("ports"))
        );
        assert_eq!(patch["spec"]["endpoints"], json!([]));
    }

    #[test]
    fn the_export_carries_the_version_our_annotation_produced() {
        let mut spec = EndpointSliceExportSpec::default();
        spec.endpoint_slice_reference.resource_version = "1".into();
        let mut before = SliceView::default();
        before.metadata.generation = Some(2);
        let mut after = before.clone();
        after.metadata.resource_version = Some("5".into());
        after_annotating(&mut spec, Some(&after), Some(&before));
        assert_eq!(spec.endpoint_slice_reference.resource_version, "5");
        // The endpoints changed in between: left for the next reconcile.
        after.metadata.generation = Some(3);
        after.metadata.resource_version = Some("9".into());
        after_annotating(&mut spec, Some(&after), Some(&before));
        assert_eq!(spec.endpoint_slice_reference.resource_version, "5");
    }
}
