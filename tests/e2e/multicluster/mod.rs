//! Issue #44: fleet-networking's MultiClusterService controller (`mcs-controller-manager`) run
//! from the hub for a member, against real apiservers: fleet-networking's own integration
//! specs of `pkg/controllers/multiclusterservice` (`reference`), the Events, the internal load
//! balancer, a restart and a take-over from the agent that write nothing (`restarts`), a member
//! without the fleet system namespace (`faults`).
//!
//! Only the MultiClusterService job runs (`--controllers multiclusterservice`). The hub's verdict
//! on a ServiceImport (its status) is written by the test, as the ServiceImport job writes it
//! from the hub's InternalServiceImport. The fleet system namespace is created by the test, as
//! fleet's member agent would have it.

mod faults;
mod reference;
mod restarts;

use crate::support;

use std::time::Duration;

use fleetnet_hub::api::{MultiClusterService, ServiceImport};
use fleetnet_hub::app::Running;
use fleetnet_hub::fleet::Controllers;
use fleetnet_hub::multicluster::decide::{DERIVED_SERVICE_LABEL, SERVICE_IMPORT_LABEL};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const M: &str = "m1";
const NS: &str = "my-ns";
const SYSTEM: &str = "fleet-system";
const MCS: &str = "my-mcs";
const SVC: &str = "my-svc";
const DERIVED: &str = "my-ns-my-mcs";

/// A fleet of member `M` with namespaces `NS` and `SYSTEM`, and a client of `M`.
async fn one_member() -> (Fleet, kube::Client) {
    let fleet = Fleet::builder().members([M]).start().await.expect("fleet");
    let member = fleet.member(M).client().await.expect("member client");
    namespace(&member, NS).await;
    namespace(&member, SYSTEM).await;
    (fleet, member)
}

/// The process, in this one, running only the MultiClusterService job; once `M` is ready.
async fn start(fleet: &Fleet) -> Running {
    let only = Controllers::parse("multiclusterservice").expect("a known job");
    start_jobs(fleet, M, only).await
}

fn mcses(member: &kube::Client) -> Api<MultiClusterService> {
    Api::namespaced(member.clone(), NS)
}

fn imports(member: &kube::Client) -> Api<ServiceImport> {
    Api::namespaced(member.clone(), NS)
}

fn derived_services(member: &kube::Client) -> Api<Service> {
    Api::namespaced(member.clone(), SYSTEM)
}

/// Creates MultiClusterService `name` of `NS` importing `import`, with `annotations`.
async fn create_mcs(member: &kube::Client, name: &str, import: &str, annotations: &[(&str, &str)]) {
    let annotations: serde_json::Map<_, _> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"serviceImport": {"name": import}}
    }))
    .expect("a MultiClusterService");
    mcses(member)
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create MultiClusterService");
}

/// The `Valid` condition: (status, reason, message, observedGeneration).
fn valid(mcs: &MultiClusterService) -> Option<(String, String, String, Option<i64>)> {
    let c = mcs.conditions().iter().find(|c| c.type_ == "Valid")?;
    Some((
        c.status.clone(),
        c.reason.clone(),
        c.message.clone(),
        c.observed_generation,
    ))
}

fn label<'a>(mcs: &'a MultiClusterService, key: &str) -> Option<&'a str> {
    mcs.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Waits until MultiClusterService `name` satisfies `holds`; returns it.
async fn wait_mcs(
    member: &kube::Client,
    name: &str,
    what: &str,
    holds: impl Fn(&MultiClusterService) -> bool,
) -> MultiClusterService {
    let api = mcses(member);
    eventually(&format!("{NS}/{name}: {what}"), || {
        let api = api.clone();
        let holds = &holds;
        async move { api.get_opt(name).await.ok().flatten().filter(|m| holds(m)) }
    })
    .await
}

/// Waits until `name`'s `Valid` condition has `status` and `reason`.
async fn wait_valid(
    member: &kube::Client,
    name: &str,
    status: &str,
    reason: &str,
) -> MultiClusterService {
    wait_mcs(member, name, &format!("Valid={status} ({reason})"), |m| {
        valid(m).is_some_and(|(s, r, _, _)| s == status && r == reason)
    })
    .await
}

/// The hub's verdict on import `name`, as the ServiceImport job writes it into its status:
/// exported by `clusters`, with `ports` (name, port).
async fn set_verdict(member: &kube::Client, name: &str, clusters: &[&str], ports: &[(&str, i32)]) {
    let clusters: Vec<_> = clusters.iter().map(|c| json!({"cluster": c})).collect();
    let ports: Vec<_> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP"}))
        .collect();
    let status = json!({"status": {"type": "ClusterSetIP", "clusters": clusters, "ports": ports}});
    imports(member)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the hub's verdict on the ServiceImport");
}

/// Waits until `api` has nothing named `name`.
async fn wait_absent<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} gone"), || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// The messages of the Events with `reason` about MultiClusterService `name`, read as the
/// reference's recorder writes them and `kubectl describe` reads them: core/v1, by
/// `involvedObject`.
async fn events(member: &kube::Client, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(member.clone(), NS);
    let all = api
        .list(&Default::default())
        .await
        .expect("list events")
        .items;
    all.into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("MultiClusterService")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// Waits for an Event with `reason` and `note` about MultiClusterService `name`.
async fn wait_event(member: &kube::Client, name: &str, reason: &str, note: &str) {
    eventually(&format!("event {reason}: {note}"), || async {
        events(member, name, reason)
            .await
            .iter()
            .any(|n| n == note)
            .then_some(())
    })
    .await;
}

/// Requests an apiserver counted for `resource` with `verb`, any response code.
async fn requests(client: &kube::Client, resource: &str, verb: &str) -> f64 {
    apiserver_requests(client, resource, verb).await
}

/// Writes (POST, PUT, PATCH, DELETE) of MultiClusterServices, ServiceImports and Services.
async fn job_writes(member: &kube::Client) -> f64 {
    writes_by(member).await.iter().map(|(_, n)| n).sum()
}

/// The writes of [`job_writes`], by `<resource> <verb>`.
async fn writes_by(member: &kube::Client) -> Vec<(String, f64)> {
    let mut all = vec![];
    for resource in ["multiclusterservices", "serviceimports", "services"] {
        for verb in ["POST", "PUT", "PATCH", "DELETE"] {
            let n = requests(member, resource, verb).await;
            all.push((format!("{resource} {verb}"), n));
        }
    }
    all
}

/// The job's writes once they have not moved for `quiet`.
async fn settled_writes(member: &kube::Client, quiet: Duration) -> f64 {
    support::settled_count("writes", quiet, || job_writes(member)).await
}

/// The owner references of import `name` without their UIDs, as (kind, name, controller,
/// blockOwnerDeletion).
async fn owners(
    member: &kube::Client,
    name: &str,
) -> Option<Vec<(String, String, Option<bool>, Option<bool>)>> {
    let si = imports(member).get_opt(name).await.ok()??;
    let refs = si.metadata.owner_references.unwrap_or_default();
    Some(
        refs.into_iter()
            .map(|r| {
                assert_eq!(r.api_version, "networking.fleet.azure.com/v1alpha1");
                (r.kind, r.name, r.controller, r.block_owner_deletion)
            })
            .collect(),
    )
}

fn ours() -> Vec<(String, String, Option<bool>, Option<bool>)> {
    vec![(
        "MultiClusterService".into(),
        MCS.into(),
        Some(true),
        Some(true),
    )]
}

/// Its import and derived-service labels.
fn labels_of(mcs: &MultiClusterService) -> (Option<&str>, Option<&str>) {
    (
        label(mcs, SERVICE_IMPORT_LABEL),
        label(mcs, DERIVED_SERVICE_LABEL),
    )
}
