//! fleet-networking's own integration specs of its member EndpointSlice controller
//! (`pkg/controllers/member/endpointslice/controller_integration_test.go` at HEAD), one function
//! each, named after the spec, with its objects, its BeforeEach / AfterEach and its checks (10 s
//! eventually, 1 s consistently). As the reference's suite runs that controller alone, these run
//! the EndpointSlice job alone (`--controllers endpointslice`), on real apiservers; one test per
//! Describe, its specs in order on one fleet (Serial, Ordered, as there).
//!
//! The reference's names: member `bravelion` is `M`, its unique name
//! `bravelion-work-app-endpointslice` is `m1-work-app-endpointslice`.

use std::future::Future;

use fleetnet_hub::api::{
    ExportedObjectReference, LAST_SEEN_GENERATION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

const SVC: &str = "app";
const SLICE: &str = "app-endpointslice";
const ALT_SLICE: &str = "app-endpointslice-2";
const IPV4: &str = "1.2.3.4";
const ALT_IPV4: &str = "2.3.4.5";
const IPV6: &str = "2001:db8:1::ab9:c0a8:102";
const EVENTUALLY: Duration = Duration::from_secs(10);
const CONSISTENTLY: Duration = Duration::from_secs(1);

/// The reference's `endpointSliceUniqueName`.
fn unique_name() -> String {
    format!("{M}-{NS}-{SLICE}")
}

/// One fleet for a Describe's specs, the EndpointSlice job alone running.
struct Suite {
    hub: kube::Client,
    member: kube::Client,
    hub_ns: String,
    _fleet: Fleet,
    running: Running,
}

impl Suite {
    async fn start() -> Self {
        let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
        let only = Controllers::parse("endpointslice").expect("a known job");
        let running = start_jobs(&fleet, M, only).await;
        Self {
            hub,
            member,
            hub_ns,
            _fleet: fleet,
            running,
        }
    }
}

// ---- objects, as the reference's helpers make them ----

/// `name`, IPv4 or IPv6, one endpoint (no conditions: ready), port 80; of Service `app` if
/// `labelled`.
fn slice_of(name: &str, labelled: bool, address_type: &str, address: &str) -> EndpointSlice {
    let mut metadata = json!({"namespace": NS, "name": name});
    if labelled {
        metadata["labels"] = json!({"kubernetes.io/service-name": SVC});
    }
    serde_json::from_value(json!({
        "metadata": metadata,
        "addressType": address_type,
        "endpoints": [{"addresses": [address]}],
        "ports": [{"port": 80}]
    }))
    .expect("an EndpointSlice")
}

/// `managedIPv4EndpointSliceWithoutUniqueNameAnnotation`.
fn managed_slice() -> EndpointSlice {
    slice_of(SLICE, true, "IPv4", IPV4)
}

/// A ServiceExport `app` with these conditions `(type, status, reason)`.
async fn service_export(member: &kube::Client, conditions: &[(&str, &str, &str)]) {
    if exports(member, NS)
        .get_opt(SVC)
        .await
        .expect("get")
        .is_none()
    {
        create_export(member, NS, SVC, &[]).await;
    }
    set_conditions(member, conditions).await;
}

async fn set_conditions(member: &kube::Client, conditions: &[(&str, &str, &str)]) {
    let conditions: Vec<_> = conditions
        .iter()
        .map(|(type_, status, reason)| {
            json!({"type": type_, "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-12-05T00:00:00Z", "observedGeneration": 0})
        })
        .collect();
    exports(member, NS)
        .patch_status(
            SVC,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": conditions}})),
        )
        .await
        .expect("ServiceExport conditions");
}

const VALID: (&str, &str, &str) = ("Valid", "True", "ServiceIsValid");
const NO_CONFLICT: (&str, &str, &str) = ("Conflict", "False", "ServiceHasNoConflict");
const INVALID_NOT_FOUND: (&str, &str, &str) = ("Valid", "False", "ServiceNotFound");
const CONFLICTED: (&str, &str, &str) = ("Conflict", "True", "ServiceIsConflicted");

/// `FromMetaObjects(memberClusterID, slice.TypeMeta, slice.ObjectMeta, since)`: the reference's
/// client leaves TypeMeta empty, so kind and API version are.
fn reference_of(slice: &EndpointSlice, since: Timestamp) -> ExportedObjectReference {
    let m = &slice.metadata;
    let (ns, name) = (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    );
    ExportedObjectReference {
        cluster_id: M.into(),
        kind: String::new(),
        api_version: None,
        namespaced_name: format!("{ns}/{name}"),
        namespace: ns,
        name,
        resource_version: m.resource_version.clone().unwrap_or_default(),
        generation: m.generation.unwrap_or_default(),
        uid: m.uid.clone().unwrap_or_default(),
        exported_since: Some(Time(since)),
    }
}

/// The `endpointSliceExportTemplate` under `name`, referring to `slice` since `since`.
fn export_template(name: &str, slice: &EndpointSlice, since: Timestamp) -> EndpointSliceExport {
    let mut e: EndpointSliceExport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "EndpointSliceExport",
        "metadata": {"name": name},
        "spec": {
            "addressType": "IPv4",
            "endpoints": [{"addresses": [IPV4]}],
            "ports": [{"port": 80}],
            "endpointSliceReference": {"clusterId": M, "kind": "", "namespace": NS,
                "name": SLICE, "resourceVersion": "", "generation": 0, "uid": "",
                "namespacedName": ""},
            "ownerServiceReference": {"namespace": NS, "name": SVC, "namespacedName": ""}
        }
    }))
    .expect("an EndpointSliceExport");
    e.spec.endpoint_slice_reference = reference_of(slice, since);
    e
}

fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("now")
}

// ---- Eventually / Consistently and the reference's shared checks ----

type Check = Result<(), String>;

/// Gomega's `Eventually(...).Should(BeNil())`: what the check found once it passed.
async fn eventually_ok<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        match check().await {
            Ok(found) => return found,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn consistently_ok<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Check>,
{
    let until = Instant::now() + CONSISTENTLY;
    while Instant::now() < until {
        if let Err(e) = check().await {
            panic!("{what}: {e}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `endpointSliceUniqueNameIsNotAssignedActual`.
async fn unique_name_is_not_assigned(member: &kube::Client) -> Check {
    let slice = slices(member, NS)
        .get(SLICE)
        .await
        .map_err(|e| e.to_string())?;
    match unique_name_of(&slice) {
        Some(name) => Err(format!("unique name {name} assigned")),
        None => Ok(()),
    }
}

/// `endpointSliceIsNotExportedActual`.
async fn is_not_exported(hub: &kube::Client, hub_ns: &str) -> Check {
    let items = slice_exports(hub, hub_ns)
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?
        .items;
    match items.len() {
        0 => Ok(()),
        n => Err(format!("{n} EndpointSliceExports, want none")),
    }
}

/// The exports of the member's hub namespace when there are `n`.
async fn exports_are(
    hub: &kube::Client,
    hub_ns: &str,
    n: usize,
) -> Result<Vec<EndpointSliceExport>, String> {
    let items = slice_exports(hub, hub_ns)
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?
        .items;
    match items.len() == n {
        true => Ok(items),
        false => Err(format!("{} EndpointSliceExports, want {n}", items.len())),
    }
}

/// The slice `name` as exported: a unique name `<member>-<ns>-<name>-…`, the last-seen pair
/// of its generation, seen no earlier than `start`. Returns the slice and its last-seen time.
async fn stamped(
    member: &kube::Client,
    name: &str,
    start: Timestamp,
) -> Result<(EndpointSlice, Timestamp), String> {
    let slice = slices(member, NS)
        .get(name)
        .await
        .map_err(|e| e.to_string())?;
    let prefix = format!("{M}-{NS}-{name}-");
    let unique = unique_name_of(&slice).unwrap_or_default();
    if !unique.starts_with(&prefix) {
        return Err(format!("unique name {unique:?}, want prefix {prefix}"));
    }
    let annotation = |key| {
        slice
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let generation = slice.metadata.generation.unwrap_or_default().to_string();
    let seen_generation = annotation(LAST_SEEN_GENERATION_ANNOTATION);
    if seen_generation.as_deref() != Some(generation.as_str()) {
        return Err(format!(
            "last seen generation {seen_generation:?}, want {generation}"
        ));
    }
    let seen: Timestamp = annotation(LAST_SEEN_TIMESTAMP_ANNOTATION)
        .ok_or("last seen timestamp absent")?
        .parse()
        .map_err(|e| format!("last seen timestamp: {e}"))?;
    if seen < start {
        return Err(format!("last seen {seen}, want after {start}"));
    }
    Ok((slice, seen))
}

/// Waits until `name` is stamped and exported (the only export), its reference the
/// reference's; returns the slice, its export and its last-seen time.
async fn exported(
    s: &Suite,
    name: &str,
    start: Timestamp,
) -> (EndpointSlice, EndpointSliceExport, Timestamp) {
    eventually_ok("the slice stamped and exported", || async {
        let (slice, seen) = stamped(&s.member, name, start).await?;
        let mut all = exports_are(&s.hub, &s.hub_ns, 1).await?;
        let want = reference_of(&slice, seen);
        if all[0].spec.endpoint_slice_reference != want {
            return Err(format!(
                "reference {:?}, want {want:?}",
                all[0].spec.endpoint_slice_reference
            ));
        }
        Ok((slice, all.remove(0), seen))
    })
    .await
}

// ---- AfterEach ----

async fn delete_slice(s: &Suite, name: &str) {
    let _ = slices(&s.member, NS)
        .delete(name, &DeleteParams::default())
        .await;
    wait_gone(&slices(&s.member, NS), name).await;
}

async fn delete_service_export(s: &Suite) {
    let _ = exports(&s.member, NS)
        .delete(SVC, &DeleteParams::default())
        .await;
    wait_gone(&exports(&s.member, NS), SVC).await;
}

async fn delete_all_exports(s: &Suite) {
    slice_exports(&s.hub, &s.hub_ns)
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .expect("DeleteAllOf EndpointSliceExports");
    eventually_ok("all EndpointSliceExports deleted", || {
        is_not_exported(&s.hub, &s.hub_ns)
    })
    .await;
}

/// The checks of every "should not export" spec: no unique name, no export, eventually and
/// then consistently.
async fn never_exported(s: &Suite) {
    eventually_ok("no unique name", || unique_name_is_not_assigned(&s.member)).await;
    consistently_ok("no unique name", || unique_name_is_not_assigned(&s.member)).await;
    eventually_ok("not exported", || is_not_exported(&s.hub, &s.hub_ns)).await;
    consistently_ok("not exported", || is_not_exported(&s.hub, &s.hub_ns)).await;
}

/// The checks of every "should remove" spec: no export, no unique name.
async fn removed(s: &Suite) {
    eventually_ok("not exported", || is_not_exported(&s.hub, &s.hub_ns)).await;
    eventually_ok("no unique name", || unique_name_is_not_assigned(&s.member)).await;
}

/// Adds the unique name and the last-seen pair of `slice`'s generation at `since` (and the
/// finalizers given), as the reference's unexport specs do once their export exists.
async fn annotate_as_exported(s: &Suite, since: Timestamp, finalizers: &[&str]) {
    let slice = slices(&s.member, NS).get(SLICE).await.expect("get");
    let generation = slice.metadata.generation.unwrap_or_default().to_string();
    let mut metadata = json!({"annotations": {
        fleetnet_hub::api::UNIQUE_NAME_ANNOTATION: unique_name(),
        LAST_SEEN_GENERATION_ANNOTATION: generation,
        LAST_SEEN_TIMESTAMP_ANNOTATION: since.to_string(),
    }});
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    slices(&s.member, NS)
        .patch(
            SLICE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": metadata})),
        )
        .await
        .expect("annotate the slice");
}

/// The hub's export of the slice as the reference's unexport specs create it.
async fn create_reference_export(s: &Suite, slice: &EndpointSlice, since: Timestamp) {
    slice_exports(&s.hub, &s.hub_ns)
        .create(
            &PostParams::default(),
            &export_template(&unique_name(), slice, since),
        )
        .await
        .expect("create the EndpointSliceExport");
}

mod endpointsliceexport;
mod export;
mod skip;
mod unexport;
