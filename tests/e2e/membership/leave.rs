//! `Leave`: the member's MultiClusterServices deleted and waited for, then its ServiceExports,
//! then `AgentLeft` for both agents (fleet-networking's specs "should update internal member
//! cluster status when a member cluster leaves", "should clean up all MCS related resources",
//! "should clean up all service export related resources"); a leave cut by a restart resumes.

use super::*;

use fleetnet_hub::api::{MultiClusterService, ServiceExport};
use kube::api::ListParams;

/// A finalizer the test holds, as a MultiClusterService or ServiceExport controller would.
const HOLD: &str = "test.fleet.azure.com/hold";

pub(super) fn mcses(member: &kube::Client) -> Api<MultiClusterService> {
    Api::namespaced(member.clone(), NS)
}

pub(super) async fn create_mcs(member: &kube::Client, name: &str, held: bool) {
    let finalizers: Vec<&str> = if held { vec![HOLD] } else { vec![] };
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": name, "namespace": NS, "finalizers": finalizers},
        "spec": {"serviceImport": {"name": name}},
    }))
    .expect("an MCS");
    mcses(member)
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create MCS");
}

async fn create_held_export(member: &kube::Client, name: &str, held: bool) {
    create_export(member, NS, name, &[]).await;
    if held {
        exports(member, NS)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": [HOLD]}})),
            )
            .await
            .expect("hold the export");
    }
}

/// Lets go of the test's finalizer on `api`'s `name`.
async fn release<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the finalizer");
}

/// Whether `name` is gone (`Some(true)`), deleting (`Some(false)`), or there and not deleting
/// (`None`).
async fn deleting<K>(api: &Api<K>, name: &str) -> Option<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await.expect("get") {
        None => Some(true),
        Some(o) if o.meta().deletion_timestamp.is_some() => Some(false),
        Some(_) => None,
    }
}

async fn wait_deleting<K>(api: &Api<K>, name: &str, gone: bool)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} deleted (gone: {gone})"), || async move {
        (deleting(api, name).await == Some(gone)).then_some(())
    })
    .await;
}

/// Whether neither entry says `AgentLeft` yet.
fn not_left(imc: &InternalMemberCluster) -> bool {
    [MCS, SEI]
        .iter()
        .all(|agent| joined(imc, agent).is_some_and(|(_, reason, _, _)| reason == "AgentJoined"))
}

/// The reference's leave, step by step: the MultiClusterServices first (the export untouched
/// while one is not gone), then the ServiceExports; `AgentLeft` only once both are gone.
#[tokio::test(flavor = "multi_thread")]
async fn leave_deletes_mcs_then_exports_waits_for_them_then_agent_left() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    create_mcs(&member, "svc-1", true).await;
    create_mcs(&member, "svc-2", false).await;
    create_held_export(&member, "svcexport-1", true).await;
    create_held_export(&member, "svcexport-2", false).await;
    create_imc(&hub, &hub_ns, None, false).await;
    let running = start(&fleet, "internalmembercluster").await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;

    set_state(&hub, &hub_ns, "Leave").await;
    let (mcs, ses) = (mcses(&member), exports(&member, NS));
    wait_deleting(&mcs, "svc-2", true).await;
    wait_deleting(&mcs, "svc-1", false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for se in ["svcexport-1", "svcexport-2"] {
        assert_eq!(
            deleting(&ses, se).await,
            None,
            "{se} deleted before the MCSs were gone"
        );
    }
    let imc = get_imc(&hub, &hub_ns).await;
    assert!(not_left(&imc), "left before the cleanup: {imc:?}");

    release(&mcs, "svc-1").await;
    wait_deleting(&ses, "svcexport-2", true).await;
    wait_deleting(&ses, "svcexport-1", false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let imc = get_imc(&hub, &hub_ns).await;
    assert!(not_left(&imc), "left before the exports were gone");

    release(&ses, "svcexport-1").await;
    let imc = wait_both(&hub, &hub_ns, "False", "AgentLeft").await;
    assert_eq!(imc.metadata.generation, Some(2));
    let all = ListParams::default();
    let left_mcs = Api::<MultiClusterService>::all(member.clone())
        .list(&all)
        .await
        .expect("list");
    assert!(left_mcs.items.is_empty());
    let left_ses = Api::<ServiceExport>::all_with(member.clone(), &Default::default())
        .list(&all)
        .await
        .expect("list");
    assert!(left_ses.items.is_empty());

    // Left: no more heartbeats, nothing written again.
    let writes = status_writes(&hub).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status_writes(&hub).await - writes, 0.0);
    running.shutdown().await;
}

/// A leave is the IMC's spec: a process stopped midway (an MCS not gone yet) and started again
/// carries it on; once left, a restart writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_leave_cut_by_a_restart_resumes() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    create_mcs(&member, "svc-1", true).await;
    create_held_export(&member, "svcexport-1", false).await;
    create_imc(&hub, &hub_ns, None, true).await;
    let running = start(&fleet, "internalmembercluster").await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;
    set_state(&hub, &hub_ns, "Leave").await;
    let mcs = mcses(&member);
    wait_deleting(&mcs, "svc-1", false).await;
    running.shutdown().await;

    release(&mcs, "svc-1").await;
    let ses = exports(&member, NS);
    assert_eq!(deleting(&ses, "svcexport-1").await, None);
    let running = start(&fleet, "internalmembercluster").await;
    wait_deleting(&ses, "svcexport-1", true).await;
    let imc = wait_both(&hub, &hub_ns, "False", "AgentLeft").await;
    let member_agent = imc.agent_status("MemberAgent").expect("fleet's entry");
    assert_eq!(member_agent.type_, "MemberAgent");
    running.shutdown().await;

    let writes = status_writes(&hub).await;
    let running = start(&fleet, "internalmembercluster").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        status_writes(&hub).await - writes,
        0.0,
        "a restart after leaving wrote"
    );
    assert_eq!(outcomes(&running, "gone"), 1.0);
    running.shutdown().await;
}

/// With the ServiceExport job running too (it holds the exports' cleanup finalizer and removes
/// it, with the export's ISE, once an export is deleted): a leave leaves nothing behind, in the
/// member or in the hub, before `AgentLeft`.
#[tokio::test(flavor = "multi_thread")]
async fn a_leave_with_the_export_job_leaves_nothing_behind() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    create_service(&member, &service(NS, "cart", 80)).await;
    create_export(&member, NS, "cart", &[]).await;
    create_imc(&hub, &hub_ns, Some(5), true).await;
    let running = start(&fleet, "serviceexport,internalmembercluster").await;
    wait_ise(&hub, &hub_ns, &format!("{NS}-cart"), |_| true).await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;

    let leaving = std::time::Instant::now();
    set_state(&hub, &hub_ns, "Leave").await;
    wait_both(&hub, &hub_ns, "False", "AgentLeft").await;
    let took = leaving.elapsed();
    assert_eq!(deleting(&exports(&member, NS), "cart").await, Some(true));
    assert!(
        ises(&hub, &hub_ns)
            .get_opt(&format!("{NS}-cart"))
            .await
            .expect("get ISE")
            .is_none(),
        "the export's ISE is left behind"
    );
    assert!(took < Duration::from_secs(15), "left after {took:?}");
    running.shutdown().await;
}

/// Member requests of `verb` on `resource` the apiserver behind `client` has answered (any code).
async fn requests(client: &kube::Client, resource: &str, verb: &str) -> f64 {
    let text = apiserver_metrics(client).await;
    let (resource, verb) = (
        format!("resource=\"{resource}\""),
        format!("verb=\"{verb}\""),
    );
    sum(&text, "apiserver_request_total", &[&resource, &verb])
}

/// A leave costs one finalizer removal per export and no live read of an ISE: a reconcile on
/// a view that has not yet caught up with our removal (the hub's ISE deletion triggers one)
/// reads our own write, not the view.
#[tokio::test(flavor = "multi_thread")]
async fn a_leave_removes_each_exports_finalizer_once_and_reads_no_ise() {
    const EXPORTS: usize = 30;
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    for i in 0..EXPORTS {
        let name = format!("svc-{i}");
        create_service(&member, &service(NS, &name, 80)).await;
        create_export(&member, NS, &name, &[]).await;
    }
    create_imc(&hub, &hub_ns, Some(5), true).await;
    let running = start(&fleet, "serviceexport,internalmembercluster").await;
    eventually("every export's ISE", || async {
        let listed = ises(&hub, &hub_ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        (listed.items.len() == EXPORTS).then_some(())
    })
    .await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;

    let patches = requests(&member, "serviceexports", "PATCH").await;
    let reads = requests(&hub, "internalserviceexports", "GET").await;
    set_state(&hub, &hub_ns, "Leave").await;
    wait_both(&hub, &hub_ns, "False", "AgentLeft").await;
    let patched = requests(&member, "serviceexports", "PATCH").await - patches;
    let read = requests(&hub, "internalserviceexports", "GET").await - reads;
    assert_eq!(patched, EXPORTS as f64, "finalizer removals");
    assert_eq!(read, 0.0, "live reads of ISEs");
    running.shutdown().await;
}
