//! Issue #25: the member's EndpointSlices reach the hub as EndpointSliceExports without any
//! member agent, exactly as fleet-networking's member EndpointSlice and EndpointSliceExport
//! controllers write them; against real apiservers.
//!
//! Most tests run only the EndpointSlice jobs (`--controllers endpointslice,endpointsliceexport`)
//! and set the ServiceExports' Valid/Conflict conditions by hand, as fleet-networking's own tests
//! of that controller do; one runs every job with the hub's verdict written onto the ISE.
//! `reference_specs` mirrors fleet-networking's own integration specs of its EndpointSlice
//! controller, one function each, against that job alone (`--controllers endpointslice`).
//! Writes are counted server-side, from each apiserver's `apiserver_request_total`.

mod adoption;
mod reference;
mod reference_specs;
mod restarts;

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetnet_hub::api::EndpointSliceExport;
use fleetnet_hub::app::Running;
use fleetnet_hub::fleet::Controllers;
use fleetnet_testenv::Fleet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const M: &str = "m1";
const NS: &str = "work";

/// Both halves of the member agent's EndpointSlice export.
fn slices_only() -> Controllers {
    Controllers::parse("endpointslice,endpointsliceexport").expect("known jobs")
}

/// A ServiceExport `NS/name` whose status says `Valid=valid`, `Conflict=conflict`, as the
/// ServiceExport exporter and the hub would have set them.
async fn export_with(member: &kube::Client, name: &str, valid: &str, conflict: &str) {
    let api = exports(member, NS);
    if api.get_opt(name).await.expect("get export").is_none() {
        create_export(member, NS, name, &[]).await;
    }
    set_verdict(member, name, valid, conflict).await;
}

async fn set_verdict(member: &kube::Client, name: &str, valid: &str, conflict: &str) {
    let condition = |type_: &str, status: &str| {
        json!({"type": type_, "status": status, "reason": "Test", "message": "",
               "lastTransitionTime": "2026-12-05T00:00:00Z"})
    };
    exports(member, NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [
                condition("Valid", valid), condition("Conflict", conflict)
            ]}})),
        )
        .await
        .expect("set ServiceExport conditions");
}

async fn create_slice(member: &kube::Client, slice: &EndpointSlice) -> EndpointSlice {
    slices(member, NS)
        .create(&PostParams::default(), slice)
        .await
        .expect("create EndpointSlice")
}

async fn get_slice(member: &kube::Client, name: &str) -> EndpointSlice {
    slices(member, NS).get(name).await.expect("get slice")
}

async fn set_endpoints(member: &kube::Client, name: &str, addresses: &[&str]) {
    let endpoints: Vec<_> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    slices(member, NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "endpoints": endpoints })),
        )
        .await
        .expect("patch endpoints");
}

async fn set_unique_name(member: &kube::Client, name: &str, unique: &str) {
    slices(member, NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                fleetnet_hub::api::UNIQUE_NAME_ANNOTATION: unique
            }}})),
        )
        .await
        .expect("set unique name");
}

/// Waits until the slice carries no unique name.
async fn wait_unnamed(member: &kube::Client, name: &str) {
    let api = slices(member, NS);
    eventually(&format!("{NS}/{name} without a unique name"), || {
        let api = api.clone();
        async move {
            let s = api.get_opt(name).await.ok()??;
            unique_name_of(&s).is_none().then_some(())
        }
    })
    .await;
}

/// Requests an apiserver counted for `resource` with `verb`, any response code.
async fn requests(client: &kube::Client, resource: &str, verb: &str) -> f64 {
    apiserver_requests(client, resource, verb).await
}

/// Writes an apiserver counted for `resource` (POST, PUT, PATCH, DELETE), any response code.
async fn writes(client: &kube::Client, resource: &str) -> f64 {
    let mut total = 0.0;
    for verb in ["POST", "PUT", "PATCH", "DELETE"] {
        total += requests(client, resource, verb).await;
    }
    total
}

async fn ese_deletes(hub: &kube::Client) -> f64 {
    requests(hub, "endpointsliceexports", "DELETE").await
}

/// Slice writes in the member plus export writes in the hub.
async fn slice_writes(member: &kube::Client, hub: &kube::Client) -> f64 {
    writes(member, "endpointslices").await + writes(hub, "endpointsliceexports").await
}

/// The slice writes once they have not moved for `quiet`.
async fn settled_writes(member: &kube::Client, hub: &kube::Client, quiet: Duration) -> f64 {
    settled_count("slice writes", quiet, || slice_writes(member, hub)).await
}
