//! The membership job's workload (internalmembercluster), on member-1: its
//! InternalMemberCluster (as fleet's hub makes it, a heartbeat each second) joined (the status
//! updated with both networking agents), a heartbeat refused because fleet's member agent wrote
//! the status meanwhile (409: read live), then the leave: the member's MultiClusterServices and
//! ServiceExports listed and deleted, and both agents `AgentLeft`.

use fleetnet_hub::api::InternalMemberCluster;

use super::*;

const AGENTS: [&str; 2] = ["MultiClusterServiceAgent", "ServiceExportImportAgent"];

/// Whether both networking agents' entries have `Joined` with `reason`.
fn both(imc: &InternalMemberCluster, reason: &str) -> bool {
    AGENTS.iter().all(|agent| {
        imc.agent_status(agent).is_some_and(|entry| {
            entry
                .conditions
                .iter()
                .any(|c| c.type_ == "Joined" && c.reason == reason)
        })
    })
}

/// Whether the controller has read an InternalMemberCluster live (`get`) on the hub.
fn read_live(w: &Walk) -> bool {
    audit::read(&w.hub_log, &w.hub_user)
        .iter()
        .any(|r| r.verb == "get" && r.resource == "internalmemberclusters")
}

/// Every path of the membership job, on member-1 (its leave last).
pub(super) async fn walk(w: &Walk) {
    let (hub, ns1) = (&w.hub, w.ns1.as_str());
    let imcs: Api<InternalMemberCluster> = Api::namespaced(hub.clone(), ns1);
    let imc: InternalMemberCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1",
        "kind": "InternalMemberCluster",
        "metadata": {"name": "member-1", "namespace": ns1},
        "spec": {"state": "Join", "heartbeatPeriodSeconds": 1},
    }))
    .expect("an InternalMemberCluster");
    imcs.create(&PostParams::default(), &imc)
        .await
        .expect("create InternalMemberCluster");
    let imcs = &imcs;
    eventually("both agents joined", || async move {
        let imc = imcs.get("member-1").await.ok()?;
        both(&imc, "AgentJoined").then_some(())
    })
    .await;

    // fleet's member agent writes the status too (its own conditions), back to back for up to a
    // minute: a heartbeat sent over a version the view has not shown yet is refused and the
    // job reads the object live.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut beat = 0u64;
    while !read_live(w) && std::time::Instant::now() < deadline {
        for _ in 0..25 {
            beat += 1;
            let status = json!({"status": {"conditions": [{
                "type": "Joined", "status": "True", "reason": "MemberJoined",
                "message": format!("beat {beat}"), "observedGeneration": 1,
                "lastTransitionTime": "2026-12-01T00:00:00Z"
            }]}});
            let _ = imcs
                .patch_status("member-1", &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }
    assert!(
        read_live(w),
        "no live read of an InternalMemberCluster after a minute of conflicts"
    );

    // Leave: the member's MultiClusterServices and ServiceExports deleted and waited for, then
    // both agents left.
    let leave = json!({"spec": {"state": "Leave"}});
    imcs.patch("member-1", &PatchParams::default(), &Patch::Merge(&leave))
        .await
        .expect("leave");
    eventually("both agents left", || async move {
        let imc = imcs.get("member-1").await.ok()?;
        both(&imc, "AgentLeft").then_some(())
    })
    .await;
}
