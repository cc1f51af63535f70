//! Issue #44, point 3: a member whose agents made everything is taken over by fleetnet-hub with
//! every job on, with no delete and no write; an agent still writing an object the hub serves
//! is told (`serviceexport:other_writer`), not fought; once the agent stops, new work flows.
//!
//! What the agents made is made here by fleetnet-hub itself, then handed to the agents: every
//! managedFields entry of fleetnet-hub renamed to the agent's manager by a client whose
//! User-Agent is the agent's (`member-net-controller-manager/v0.0.0`,
//! `mcs-controller-manager/v0.0.0`). The objects are then exactly what the jobs would write,
//! owned as the agents own theirs; that each job writes what the agent writes, field by field,
//! is what each job's own adoption test shows (`slices::adoption`, `service_imports::restarts`,
//! `multicluster::restarts`, `slice_imports::reference`).

mod takeover;

use crate::support;

use fleetnet_hub::api::{
    InternalMemberCluster, InternalServiceExport, InternalServiceImport, MultiClusterService,
    ServiceExport, ServiceExportVersion, ServiceImport,
};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;
use support::*;

const M: &str = "m1";
const NS: &str = "my-ns";
const SYSTEM: &str = "fleet-system";
/// The member agent's field manager, and the User-Agent its client sends.
const MEMBER_AGENT: &str = "member-net-controller-manager";
/// The MultiClusterService agent's.
const MCS_AGENT: &str = "mcs-controller-manager";

/// A client of the cluster of `kubeconfig` that names itself as `agent` does (its version
/// after a `/`, as controller-runtime's clients do): the apiserver records its writes under
/// the manager `agent`.
async fn agent_client(kubeconfig: &std::path::Path, agent: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig valid");
    let ua = format!("{agent}/v0.0.0 (linux/amd64) kubernetes/0000000");
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&ua).expect("a header"),
    ));
    kube::Client::try_from(config).expect("a client")
}

/// The kinds the jobs write in the member, each with a namespace it is written in.
fn member_kinds() -> Vec<(&'static str, ApiResource)> {
    vec![
        (NS, ApiResource::erase::<Service>(&())),
        (SYSTEM, ApiResource::erase::<Service>(&())),
        (NS, ApiResource::erase::<EndpointSlice>(&())),
        (
            NS,
            ApiResource::erase::<ServiceExport>(&ServiceExportVersion::V1Beta1),
        ),
        (NS, ApiResource::erase::<ServiceImport>(&())),
        (NS, ApiResource::erase::<MultiClusterService>(&())),
    ]
}

/// The kinds the jobs write in the member's hub namespace.
fn hub_kinds() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<InternalServiceExport>(&()),
        ApiResource::erase::<fleetnet_hub::api::EndpointSliceExport>(&()),
        ApiResource::erase::<InternalServiceImport>(&()),
        ApiResource::erase::<InternalMemberCluster>(&()),
    ]
}

/// Which agent wrote an entry fleetnet-hub wrote of an object of `kind` in `ns`: the
/// MultiClusterService agent the MultiClusterServices, their ServiceImports (but their status:
/// the member agent's import controller) and the derived Services; the member agent the rest.
fn agent_of(kind: &str, ns: &str, subresource: Option<&str>) -> &'static str {
    match (kind, ns, subresource) {
        ("MultiClusterService", _, _) | ("Service", SYSTEM, _) => MCS_AGENT,
        ("ServiceImport", _, Some("status")) => MEMBER_AGENT,
        ("ServiceImport", _, _) => MCS_AGENT,
        _ => MEMBER_AGENT,
    }
}

/// Hands every object of `kind` in `ns` to the agents: fleetnet-hub's managedFields entries
/// renamed to the agent's manager, written by the agent's clients (`agents`: one per agent).
/// Only the managed fields change: no field is written, no time moves.
async fn hand_to_agents(agents: &[(&str, kube::Client)], ns: &str, kind: &ApiResource) {
    let client = &agents[0].1;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, kind);
    for mut obj in api.list(&Default::default()).await.expect("list").items {
        let Some(entries) = obj.metadata.managed_fields.as_mut() else {
            continue;
        };
        let mut writer = None;
        for entry in entries.iter_mut() {
            if entry.manager.as_deref() == Some(fleetnet_hub::client::FIELD_MANAGER) {
                let agent = agent_of(&kind.kind, ns, entry.subresource.as_deref());
                entry.manager = Some(agent.to_string());
                writer = Some(agent);
            }
        }
        let Some(agent) = writer else { continue };
        let (_, by) = agents
            .iter()
            .find(|(name, _)| *name == agent)
            .expect("an agent's client");
        let name = obj.metadata.name.clone().unwrap_or_default();
        Api::<DynamicObject>::namespaced_with(by.clone(), ns, kind)
            .replace(&name, &PostParams::default(), &obj)
            .await
            .expect("handed to the agent");
    }
}

/// Writes (POST, PUT, PATCH, DELETE) of every kind the jobs write, but the membership job's
/// heartbeats: by `<resource> <verb>`, the member's then the hub's.
async fn writes(member: &kube::Client, hub: &kube::Client) -> Vec<(String, f64)> {
    let mut all = vec![];
    let mut member_kinds: Vec<_> = member_kinds().into_iter().map(|(_, k)| k.plural).collect();
    // Counted by resource, in every namespace at once.
    member_kinds.dedup();
    let hub_kinds = hub_kinds().into_iter().map(|k| k.plural);
    let kinds = member_kinds.into_iter().map(|k| (member, k)).chain(
        hub_kinds
            .filter(|k| k != "internalmemberclusters")
            .map(|k| (hub, k)),
    );
    for (client, resource) in kinds {
        for verb in ["POST", "PUT", "PATCH", "DELETE"] {
            let n = apiserver_requests(client, &resource, verb).await;
            all.push((format!("{resource} {verb}"), n));
        }
    }
    all
}

/// The sum of [`writes`].
async fn total_writes(member: &kube::Client, hub: &kube::Client) -> f64 {
    writes(member, hub).await.iter().map(|(_, n)| n).sum()
}

/// The hub's verdict on InternalServiceImport `name`, as fleet-networking's hub controller
/// writes it: the whole status.
async fn set_hub_verdict(hub: &kube::Client, hub_ns: &str, name: &str) {
    let api: Api<InternalServiceImport> = Api::namespaced(hub.clone(), hub_ns);
    let mut isi = api.get(name).await.expect("get InternalServiceImport");
    isi.status = Some(
        serde_json::from_value(json!({
            "type": "ClusterSetIP",
            "clusters": [{"cluster": M}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
        }))
        .expect("a status"),
    );
    api.replace_status(name, &PostParams::default(), &isi)
        .await
        .expect("the hub's verdict");
}

/// `reconcile_total` of `outcome` in the process's metrics.
async fn outcome_count(running: &fleetnet_hub::app::Running, outcome: &str) -> f64 {
    let (_, text) = http_get(running.metrics_address, "/metrics").await;
    sum(
        &text,
        "fleetnet_reconcile_total",
        &[&format!("outcome=\"{outcome}\"")],
    )
}

/// What fleet-networking's hub controller writes on ISE `name` once it found no conflict.
async fn no_conflict(hub: &kube::Client, hub_ns: &str, name: &str) {
    let body = json!({"status": {"conditions": [{
        "type": "Conflict", "status": "False", "reason": "NoConflictFound",
        "message": format!("service {NS}/web is exported without conflict"),
        "observedGeneration": 0, "lastTransitionTime": "2026-12-03T00:00:00Z",
    }]}});
    ises(hub, hub_ns)
        .patch_status(name, &Default::default(), &kube::api::Patch::Merge(&body))
        .await
        .expect("the hub's verdict");
}
