//! Sharded replicas: only a member's owner heartbeats for it, and a leave whose owner is
//! killed midway is carried on by the replica that takes the member over.

use super::*;

use crate::support::replicas::{Access, holders, replica, settled};

const MEMBERS: [&str; 2] = ["m1", "m2"];

/// The IMC of `member` in its hub namespace, `Join`, heartbeat every `period` seconds.
async fn create_imc_of(fleet: &Fleet, hub: &kube::Client, member: &str, period: i32) {
    let imc: InternalMemberCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1",
        "kind": "InternalMemberCluster",
        "metadata": {"name": member, "namespace": fleet.hub_namespace(member)},
        "spec": {"state": "Join", "heartbeatPeriodSeconds": period},
    }))
    .expect("an IMC");
    imcs(hub, &fleet.hub_namespace(member))
        .create(&PostParams::default(), &imc)
        .await
        .expect("create IMC");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_goes_on_when_its_owner_is_killed_and_only_owners_heartbeat() {
    init_test_logs();
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let period = 3;
    for m in MEMBERS {
        create_imc_of(&fleet, &hub, m, period).await;
    }
    let m1 = fleet.member("m1").client().await.expect("member client");
    namespace(&m1, NS).await;
    super::leave::create_mcs(&m1, "svc-1", true).await;
    let mcses = super::leave::mcses(&m1);
    create_export(&m1, NS, "svcexport-1", &[]).await;

    let admin = Access::admin(&fleet);
    let a = replica("replica-a", &admin, &[]);
    let b = replica("replica-b", &admin, &[]);
    settled(&hub, &[&a, &b], &MEMBERS).await;
    for m in MEMBERS {
        let ns = fleet.hub_namespace(m);
        let api = imcs(&hub, &ns);
        eventually(&format!("{m} joined"), || {
            let api = api.clone();
            async move { both(&api.get(m).await.ok()?, "True", "AgentJoined").then_some(()) }
        })
        .await;
    }

    // One writer per member: a write per member per period, not two.
    let writes = status_writes(&hub).await;
    tokio::time::sleep(Duration::from_secs(5 * period as u64)).await;
    let written = status_writes(&hub).await - writes;
    assert!(
        (8.0..=12.0).contains(&written),
        "{written} status writes for 2 members in 5 periods"
    );

    // m1 leaves; its owner is killed while the MCS is held.
    let ns1 = fleet.hub_namespace("m1");
    imcs(&hub, &ns1)
        .patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"state": "Leave"}})),
        )
        .await
        .expect("leave");
    eventually("the MCS deleting", || {
        let mcses = mcses.clone();
        async move {
            let m = mcses.get("svc-1").await.ok()?;
            m.metadata.deletion_timestamp.map(|_| ())
        }
    })
    .await;
    let owner = holders(&hub, &["m1"]).await["m1"].clone();
    let (mut victim, survivor) = if a.is(&owner) { (a, b) } else { (b, a) };
    victim.kill();
    mcses
        .patch(
            "svc-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the MCS");

    let api = imcs(&hub, &ns1);
    within(
        Duration::from_secs(60),
        "m1 left through the survivor",
        || {
            let api = api.clone();
            async move { both(&api.get("m1").await.ok()?, "False", "AgentLeft").then_some(()) }
        },
    )
    .await;
    assert!(
        exports(&m1, NS)
            .get_opt("svcexport-1")
            .await
            .expect("get")
            .is_none(),
        "the export is left behind"
    );
    let holder = holders(&hub, &["m1"]).await["m1"].clone();
    assert!(survivor.is(&holder), "m1 held by {holder}");
}
