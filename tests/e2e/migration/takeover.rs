//! The migration, end to end: taken over without a write, an agent still writing told and left
//! alone, new work once it stops.

use std::time::Duration;

use fleetnet_hub::fleet::Controllers;
use fleetnet_hub::fleet::state::JobPhase;
use kube::api::{Patch, PatchParams};

use super::*;

const WEB: &str = "web";
const MCS: &str = "my-mcs";

/// The member as its agents left it, made by fleetnet-hub with every job (see the module's
/// doc) while the hub's side is written as fleet's and fleet-networking's hub controllers do:
/// `web` exported (ServiceExport, ISE, an EndpointSlice and its EndpointSliceExport),
/// MultiClusterService `my-mcs` importing `web` (its ServiceImport, InternalServiceImport with
/// the hub's verdict, the derived Service), the InternalMemberCluster with both agents' status.
async fn made_by_the_agents(fleet: &Fleet, member: &kube::Client, hub: &kube::Client) {
    let hub_ns = fleet.hub_namespace(M);
    let imc: InternalMemberCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1", "kind": "InternalMemberCluster",
        "metadata": {"name": M, "namespace": hub_ns},
        "spec": {"state": "Join", "heartbeatPeriodSeconds": 600},
    }))
    .expect("an IMC");
    Api::<InternalMemberCluster>::namespaced(hub.clone(), &hub_ns)
        .create(&PostParams::default(), &imc)
        .await
        .expect("create IMC");
    let running = start_jobs(fleet, M, Controllers::default()).await;
    create_service(member, &service(NS, WEB, 80)).await;
    create_export(member, NS, WEB, &[]).await;
    let slice = endpoint_slice(NS, "web-1", WEB, &["10.0.0.1"]);
    slices(member, NS)
        .create(&PostParams::default(), &slice)
        .await
        .expect("create slice");
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": MCS, "namespace": NS},
        "spec": {"serviceImport": {"name": WEB}}
    }))
    .expect("a MultiClusterService");
    Api::<MultiClusterService>::namespaced(member.clone(), NS)
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create MultiClusterService");
    let ise = format!("{NS}-{WEB}");
    wait_ise(hub, &hub_ns, &ise, |_| true).await;
    no_conflict(hub, &hub_ns, &ise).await;
    wait_slice_export(hub, &hub_ns, NS, "web-1", |_| true).await;
    let isi = fleetnet_hub::service_imports::decide::internal_name(NS, WEB);
    let internals: Api<InternalServiceImport> = Api::namespaced(hub.clone(), &hub_ns);
    eventually("the InternalServiceImport", || async {
        internals.get_opt(&isi).await.ok().flatten()
    })
    .await;
    set_hub_verdict(hub, &hub_ns, &isi).await;
    let derived = format!("{NS}-{MCS}");
    let services: Api<Service> = Api::namespaced(member.clone(), SYSTEM);
    eventually("the derived Service", || async {
        services.get_opt(&derived).await.ok().flatten()
    })
    .await;
    let imcs: Api<InternalMemberCluster> = Api::namespaced(hub.clone(), &hub_ns);
    eventually("both agents' status", || async {
        let imc = imcs.get(M).await.ok()?;
        (imc.status?.agent_status.len() == 2).then_some(())
    })
    .await;
    settled_count("the first writes", Duration::from_secs(2), || {
        total_writes(member, hub)
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_taken_over_from_its_agents_and_an_agent_still_writing_is_told() {
    let fleet = Fleet::builder().members([M]).start().await.expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let member = fleet.member(M).client().await.expect("member client");
    let hub_ns = fleet.hub_namespace(M);
    namespace(&member, NS).await;
    namespace(&member, SYSTEM).await;
    // The apiservers' counters run from before this test (a pooled cluster's may not be 0).
    let deletes_before = deletes(&member, &hub).await;
    made_by_the_agents(&fleet, &member, &hub).await;

    let member_path = fleet.member(M).kubeconfig_path();
    let hub_path = fleet.hub().kubeconfig_path();
    let on_member = [
        (MEMBER_AGENT, agent_client(member_path, MEMBER_AGENT).await),
        (MCS_AGENT, agent_client(member_path, MCS_AGENT).await),
    ];
    let on_hub = [
        (MEMBER_AGENT, agent_client(hub_path, MEMBER_AGENT).await),
        (MCS_AGENT, agent_client(hub_path, MCS_AGENT).await),
    ];
    for (ns, kind) in member_kinds() {
        hand_to_agents(&on_member, ns, &kind).await;
    }
    // Handing over moved the member objects' resourceVersions, which the hub's copies carry:
    // the copies are brought up to date (as the agent would have made them) before their turn.
    let refresh = start_jobs(&fleet, M, Controllers::default()).await;
    settled_count("the copies", Duration::from_secs(2), || {
        total_writes(&member, &hub)
    })
    .await;
    refresh.shutdown().await;
    for kind in hub_kinds() {
        hand_to_agents(&on_hub, &hub_ns, &kind).await;
    }
    let ises: Api<InternalServiceExport> = Api::namespaced(hub.clone(), &hub_ns);
    let ise_name = format!("{NS}-{WEB}");
    let handed = ises.get(&ise_name).await.expect("the ISE");
    let managers: Vec<_> = handed
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| e.manager.as_deref())
        .collect();
    assert!(managers.contains(&MEMBER_AGENT), "{managers:?}");
    assert!(!managers.contains(&"fleetnet-hub"), "{managers:?}");
    let before = writes(&member, &hub).await;

    // fleetnet-hub with every job: every job ready, nothing written, nothing deleted.
    let running = start_jobs(&fleet, M, Controllers::default()).await;
    let status = running.state.member(M).expect("the member");
    assert_eq!(status.jobs.len(), Controllers::names().count());
    for (job, s) in &status.jobs {
        assert_eq!(s.phase, JobPhase::Ready, "{job}");
    }
    settled_count("taking over", Duration::from_secs(3), || {
        total_writes(&member, &hub)
    })
    .await;
    assert_eq!(writes(&member, &hub).await, before, "taking over wrote");

    // The agent still runs: it rewrites the ISE. Told, left as the agent wrote it.
    let mut ise = ises.get(&ise_name).await.expect("the ISE");
    ise.spec.ports[0].port = 8080;
    let ise = Api::<InternalServiceExport>::namespaced(on_hub[0].1.clone(), &hub_ns)
        .replace(&ise_name, &PostParams::default(), &ise)
        .await
        .expect("the agent's update");
    eventually("serviceexport:other_writer", || async {
        (outcome_count(&running, "serviceexport:other_writer").await > 0.0).then_some(())
    })
    .await;
    settled_count("the agent's write", Duration::from_secs(3), || {
        total_writes(&member, &hub)
    })
    .await;
    let after_agent = writes(&member, &hub).await;
    let (_, members) = http_get(running.health_address, "/members").await;
    let members: serde_json::Value = serde_json::from_str(&members).expect("/members");
    let told = members["members"][M]["jobs"]["serviceexport"]["other_writer"].as_str();
    assert!(
        told.is_some_and(|t| t.starts_with(&format!(
            "{MEMBER_AGENT} wrote InternalServiceExport {ise_name} at "
        ))),
        "{members}"
    );
    // A change of the Service does not make fleetnet-hub take the ISE back either.
    Api::<Service>::namespaced(member.clone(), NS)
        .patch(
            WEB,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"changed": "yes"}}})),
        )
        .await
        .expect("a Service change");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let changed: Vec<_> = writes(&member, &hub)
        .await
        .into_iter()
        .zip(after_agent)
        .filter(|((_, n), (_, before))| n != before)
        .map(|((k, n), (_, before))| (k, n - before))
        .collect();
    assert_eq!(
        changed,
        [("services PATCH".to_string(), 1.0)],
        "fleetnet-hub wrote besides the Service change"
    );
    let kept = ises.get(&ise_name).await.expect("the ISE");
    assert_eq!(
        kept.spec.ports[0].port, 8080,
        "the agent's write overwritten"
    );
    assert_eq!(
        kept.metadata.resource_version, ise.metadata.resource_version,
        "the ISE was rewritten"
    );
    // And its EndpointSliceExport.
    let slice_exports =
        Api::<fleetnet_hub::api::EndpointSliceExport>::namespaced(on_hub[0].1.clone(), &hub_ns);
    let mut ese = slice_exports
        .list(&Default::default())
        .await
        .expect("list")
        .items[0]
        .clone();
    ese.spec.endpoints.clear();
    let name = ese.metadata.name.clone().unwrap_or_default();
    let ese = slice_exports
        .replace(&name, &PostParams::default(), &ese)
        .await
        .expect("the agent's update");
    eventually("endpointslice:other_writer", || async {
        (outcome_count(&running, "endpointslice:other_writer").await > 0.0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = slice_exports.get(&name).await.expect("the export");
    assert_eq!(
        kept.metadata.resource_version, ese.metadata.resource_version,
        "the EndpointSliceExport was rewritten"
    );
    assert_eq!(
        deletes(&member, &hub).await - deletes_before,
        0.0,
        "deleted"
    );

    // The agent stopped: a new export is exported.
    create_service(&member, &service(NS, "web2", 80)).await;
    create_export(&member, NS, "web2", &[]).await;
    wait_ise(&hub, &hub_ns, &format!("{NS}-web2"), |_| true).await;
    running.shutdown().await;
}

/// DELETEs of the kinds [`writes`] counts, so far.
async fn deletes(member: &kube::Client, hub: &kube::Client) -> f64 {
    writes(member, hub)
        .await
        .iter()
        .filter(|(k, _)| k.ends_with("DELETE"))
        .map(|(_, n)| n)
        .sum()
}
