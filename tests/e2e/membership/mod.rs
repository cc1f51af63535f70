//! Issue #44: the member's InternalMemberCluster kept from the hub as fleet-networking's two
//! networking agents keep it (`pkg/controllers/member/internalmembercluster/v1beta1`), in one
//! status write per heartbeat period; against real apiservers. The test writes the IMC as
//! fleet's hub does (spec.state, heartbeatPeriodSeconds) with fleet's MemberAgent entry in its
//! status; writes are counted server-side (`apiserver_request_total`).

mod handoff;
mod join;
mod leave;

use crate::support;

use std::time::Duration;

use fleetnet_hub::api::{
    InternalMemberCluster, MULTI_CLUSTER_SERVICE_AGENT as MCS, SERVICE_EXPORT_IMPORT_AGENT as SEI,
};
use fleetnet_hub::app::Running;
use fleetnet_hub::fleet::Controllers;
use fleetnet_testenv::Fleet;
use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const M: &str = "m1";
const NS: &str = "work";

/// The process with the membership job alone (`--controllers internalmembercluster`), or with
/// `controllers`, ready.
async fn start(fleet: &Fleet, controllers: &str) -> Running {
    start_jobs(
        fleet,
        M,
        Controllers::parse(controllers).expect("known jobs"),
    )
    .await
}

fn imcs(hub: &kube::Client, hub_ns: &str) -> Api<InternalMemberCluster> {
    Api::namespaced(hub.clone(), hub_ns)
}

/// fleet's MemberAgent entry and a status field of its own, as fleet's member agent writes them.
fn fleets_own_status() -> serde_json::Value {
    json!({
        "agentStatus": [{
            "type": "MemberAgent",
            "conditions": [{"type": "Joined", "status": "True", "reason": "MemberJoined",
                            "message": "", "observedGeneration": 1,
                            "lastTransitionTime": "2026-12-01T00:00:00Z"}],
            "lastReceivedHeartbeat": "2026-12-01T00:00:00Z"
        }],
        "conditions": [{"type": "Joined", "status": "True", "reason": "MemberJoined",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-12-01T00:00:00Z"}],
        "properties": {"kubernetes-fleet.io/node-count": {"value": "3",
                       "observationTime": "2026-12-01T00:00:00Z"}}
    })
}

/// The IMC named after `M`, `Join`, as fleet's hub creates it (`period`: heartbeatPeriodSeconds,
/// `None`: the CRD's default), with fleet's own status ([`fleets_own_status`]) when `fleets`.
async fn create_imc(hub: &kube::Client, hub_ns: &str, period: Option<i32>, fleets: bool) {
    let mut spec = json!({"state": "Join"});
    if let Some(period) = period {
        spec["heartbeatPeriodSeconds"] = json!(period);
    }
    let imc: InternalMemberCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1",
        "kind": "InternalMemberCluster",
        "metadata": {"name": M, "namespace": hub_ns},
        "spec": spec,
    }))
    .expect("an IMC");
    imcs(hub, hub_ns)
        .create(&PostParams::default(), &imc)
        .await
        .expect("create IMC");
    if fleets {
        imcs(hub, hub_ns)
            .patch_status(
                M,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": fleets_own_status() })),
            )
            .await
            .expect("fleet's status");
    }
}

async fn get_imc(hub: &kube::Client, hub_ns: &str) -> InternalMemberCluster {
    imcs(hub, hub_ns).get(M).await.expect("get IMC")
}

/// The `Joined` condition of `agent`'s entry: (status, reason, observedGeneration), and the
/// entry's heartbeat.
fn joined(
    imc: &InternalMemberCluster,
    agent: &str,
) -> Option<(String, String, Option<i64>, Option<Timestamp>)> {
    let entry = imc.agent_status(agent)?;
    let c = entry.conditions.iter().find(|c| c.type_ == "Joined")?;
    Some((
        c.status.clone(),
        c.reason.clone(),
        c.observed_generation,
        entry.last_received_heartbeat.as_ref().map(|t| t.0),
    ))
}

/// Whether both networking agents' entries say `status`/`reason` for the IMC's generation.
fn both(imc: &InternalMemberCluster, status: &str, reason: &str) -> bool {
    [MCS, SEI].iter().all(|agent| {
        joined(imc, agent)
            .is_some_and(|(s, r, g, _)| s == status && r == reason && g == imc.metadata.generation)
    })
}

/// Waits until both entries say `status`/`reason` for the IMC's generation; the IMC then.
async fn wait_both(
    hub: &kube::Client,
    hub_ns: &str,
    status: &str,
    reason: &str,
) -> InternalMemberCluster {
    let api = imcs(hub, hub_ns);
    eventually(&format!("both agents {status}/{reason}"), || {
        let api = api.clone();
        async move {
            let imc = api.get(M).await.ok()?;
            both(&imc, status, reason).then_some(imc)
        }
    })
    .await
}

/// Status writes of InternalMemberClusters the hub has answered (any code).
async fn status_writes(hub: &kube::Client) -> f64 {
    let text = apiserver_metrics(hub).await;
    ["PUT", "PATCH"]
        .iter()
        .map(|verb| {
            sum(
                &text,
                "apiserver_request_total",
                &[
                    "resource=\"internalmemberclusters\"",
                    "subresource=\"status\"",
                    &format!("verb=\"{verb}\""),
                ],
            )
        })
        .sum()
}

/// Sets `spec.state` as fleet's hub does (a new generation).
async fn set_state(hub: &kube::Client, hub_ns: &str, state: &str) {
    imcs(hub, hub_ns)
        .patch(
            M,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"state": state}})),
        )
        .await
        .expect("set spec.state");
}

/// Reconciles of the membership job with `outcome` the process counted.
fn outcomes(running: &Running, outcome: &str) -> f64 {
    sum(
        &running.metrics.encode(),
        "fleetnet_reconcile_total",
        &[&format!("outcome=\"internalmembercluster:{outcome}\"")],
    )
}
