//! Members from fleet's inventory (issue #42, `--member-inventory`), on real apiservers: the
//! test writes what fleet writes (MemberCluster, InternalMemberCluster, the ClusterProfile and
//! its status, the InternalMemberCluster's `spec.state = Leave` on deletion) and the
//! credential Secret as the cluster-inventory API's secret-reader convention has it. The
//! process runs with the hub RBAC the chart renders for members it does not list
//! (`rbac.hubAccess=clusterWide`, `controller.memberInventory=true`).

use super::rotation::{bound_token, service_account};
use super::*;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use fleetnet_hub::api::{
    InternalMemberCluster, MULTI_CLUSTER_SERVICE_AGENT as MCS, SERVICE_EXPORT_IMPORT_AGENT as SEI,
};
use fleetnet_hub::fleet::sources::inventory::{cluster_profiles, member_clusters};
use fleetnet_hub::fleet::sources::register::{secret_for, secret_name};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::json;

/// The consumer namespace: member Secrets and the inventory's token Secrets.
const NS: &str = "fleetnet-system";
/// Where fleet writes ClusterProfiles.
pub(crate) const PROFILES: &str = "fleet-system";
/// A finalizer standing for fleet's own: the MemberCluster stays, being deleted, during the leave.
const FLEETS_FINALIZER: &str = "kubernetes-fleet.io/test-leave";

pub(crate) const MEMBER_CLUSTERS_CRD: &str =
    include_str!("../../fixtures/fleet-crds/cluster.kubernetes-fleet.io_memberclusters.yaml");
pub(crate) const CLUSTER_PROFILES_CRD: &str =
    include_str!("../../fixtures/fleet-crds/multicluster.x-k8s.io_clusterprofiles.yaml");

/// Installs a CRD in the hub and waits until its resource can be listed.
pub(crate) async fn install(hub: &kube::Client, text: &str, resource: &ApiResource) {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(text).expect("a CRD");
    Api::<CustomResourceDefinition>::all(hub.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let api = Api::<DynamicObject>::all_with(hub.clone(), resource);
    eventually("the CRD served", || {
        let api = api.clone();
        async move { api.list(&Default::default()).await.ok().map(|_| ()) }
    })
    .await;
}

/// The hub identity the chart gives with `rbac.hubAccess=clusterWide` and
/// `controller.memberInventory=true` (no `members:`): its RBAC applied to the hub as rendered,
/// and a kubeconfig of its ServiceAccount. Returns the kubeconfig's path.
async fn charts_identity(fleet: &Fleet, hub: &kube::Client) -> PathBuf {
    let rendered = support::chart::render_chart(&[
        "--set",
        "rbac.hubAccess=clusterWide",
        "--set",
        "controller.memberInventory=true",
    ]);
    let discovery = kube::discovery::Discovery::new(hub.clone())
        .run()
        .await
        .expect("discovery");
    let rbac = [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    ];
    for obj in rendered
        .into_iter()
        .filter(|o| rbac.iter().any(|k| o["kind"] == *k))
    {
        let obj: DynamicObject = serde_json::from_value(obj).expect("an object");
        let (resource, _) = support::served_as(&discovery, &obj);
        let name = obj.metadata.name.clone().expect("name");
        let api = match obj.metadata.namespace.as_deref() {
            Some(ns) => Api::<DynamicObject>::namespaced_with(hub.clone(), ns, &resource),
            None => Api::all_with(hub.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("chart").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", resource.kind));
    }
    let identity = fleetnet_testenv::ScopedIdentity {
        namespace: NS.into(),
        name: "fleetnet-hub".into(),
        cluster_role: None,
        role: None,
        role_namespaces: vec![],
    };
    let path = fleet.scratch_dir().join("inventory-hub-sa.kubeconfig");
    fleet
        .hub()
        .issue_scoped_kubeconfig(&identity, &path)
        .await
        .expect("the chart's ServiceAccount")
}

/// The MemberCluster fleet lists for `member`, with a finalizer as fleet's keeps it.
pub(crate) fn member_cluster(member: &str) -> DynamicObject {
    let mut mc = DynamicObject::new(member, &member_clusters()).data(json!({
        "spec": {"identity": {"kind": "ServiceAccount", "name": "member-agent-sa",
                              "namespace": "fleet-system"}}
    }));
    mc.metadata.finalizers = Some(vec![FLEETS_FINALIZER.into()]);
    mc
}

/// The InternalMemberCluster fleet creates in the member's hub namespace, `Join`.
pub(crate) async fn create_imc(hub: &kube::Client, hub_ns: &str, member: &str) {
    fleetnet_testenv::ensure_namespace(hub, "hub", hub_ns)
        .await
        .expect("hub namespace");
    let imc: InternalMemberCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1", "kind": "InternalMemberCluster",
        "metadata": {"name": member, "namespace": hub_ns}, "spec": {"state": "Join"},
    }))
    .expect("an IMC");
    Api::<InternalMemberCluster>::namespaced(hub.clone(), hub_ns)
        .create(&PostParams::default(), &imc)
        .await
        .expect("create IMC");
}

/// The ClusterProfile fleet writes for `member` once its agent reported the cluster's
/// properties: the spec, then the status with the `KubeFleet` access provider (fleet stores the
/// CA property string, base64 of the PEM, as bytes: base64 again on the wire).
pub(crate) async fn write_profile(hub: &kube::Client, fleet: &Fleet, member: &str) {
    let profiles =
        Api::<DynamicObject>::namespaced_with(hub.clone(), PROFILES, &cluster_profiles());
    let mut cp = DynamicObject::new(member, &cluster_profiles())
        .within(PROFILES)
        .data(json!({"spec": {"displayName": member, "clusterManager": {"name": "KubeFleet"}}}));
    cp.metadata.labels = Some([("x-k8s.io/cluster-manager".into(), "KubeFleet".into())].into());
    profiles
        .create(&PostParams::default(), &cp)
        .await
        .expect("create profile");
    let cluster = fleet.member(member);
    let ca_property = STANDARD.encode(cluster.ca_pem().expect("CA"));
    let status = json!({"status": {"accessProviders": [{"name": "KubeFleet", "cluster": {
        "server": cluster.server(),
        "certificate-authority-data": STANDARD.encode(ca_property),
    }}]}});
    profiles
        .patch_status(member, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("profile status");
}

/// `member`'s MemberCluster deleted (its finalizer keeps it, being deleted) and, as fleet's
/// profile controller does at once, its ClusterProfile.
pub(crate) async fn delete_member_cluster(hub: &kube::Client, member: &str) {
    Api::<DynamicObject>::all_with(hub.clone(), &member_clusters())
        .delete(member, &DeleteParams::default())
        .await
        .expect("delete MemberCluster");
    Api::<DynamicObject>::namespaced_with(hub.clone(), PROFILES, &cluster_profiles())
        .delete(member, &DeleteParams::default())
        .await
        .expect("fleet deletes the profile");
}

/// `Leave` on `member`'s InternalMemberCluster, as fleet's hub sets it on a MemberCluster's
/// deletion.
pub(crate) async fn set_leave(imcs: &Api<InternalMemberCluster>, member: &str) {
    imcs.patch(
        member,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"state": "Leave"}})),
    )
    .await
    .expect("Leave, as fleet's hub sets it");
}

/// alpha's leave done: both agents `Joined=False`, the member stopped, its ServiceExports of
/// `ns1` deleted on `member`.
async fn left(imcs: &Api<InternalMemberCluster>, running: &Running, member: &kube::Client) {
    wait_agents(imcs, "alpha", "False").await;
    eventually("alpha stopped after its leave", || async {
        running.state.member("alpha").is_none().then_some(())
    })
    .await;
    let exports = exports(member, "ns1")
        .list(&Default::default())
        .await
        .expect("list");
    assert!(
        exports.items.is_empty(),
        "the leave deleted its ServiceExports"
    );
}

/// The credential Secret `<NS>/<member>`, data `token`.
pub(crate) fn token_secret(member: &str, token: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(member.into());
    s.data = Some([("token".to_string(), ByteString(token.as_bytes().to_vec()))].into());
    s
}

/// The admin token of `member`'s kubeconfig.
fn admin_token(fleet: &Fleet, member: &str) -> String {
    let text = std::fs::read_to_string(fleet.member(member).kubeconfig_path()).expect("kubeconfig");
    fleetnet_testenv::tokens::token_in(&text).expect("a token")
}

fn error_of(running: &Running, member: &str) -> Option<String> {
    running.state.member(member)?.last_error
}

/// Whether both networking agents' `Joined` say `status`.
fn agents_joined(imc: &InternalMemberCluster, status: &str) -> bool {
    [MCS, SEI].iter().all(|agent| {
        imc.agent_status(agent)
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Joined"))
            .is_some_and(|c| c.status == status)
    })
}

async fn wait_agents(imcs: &Api<InternalMemberCluster>, member: &str, status: &str) {
    eventually(&format!("agents Joined={status}"), || async {
        let imc = imcs.get(member).await.ok()?;
        agents_joined(&imc, status).then_some(())
    })
    .await;
}

/// A fleet of one member, `alpha`, that fleet lists: its MemberCluster and its
/// InternalMemberCluster (`Join`) on the hub; the hub serves no ClusterProfiles yet.
async fn alpha_in_the_inventory() -> Fleet {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    for ns in [NS, PROFILES] {
        fleetnet_testenv::ensure_namespace(&hub, "hub", ns)
            .await
            .expect("ns");
    }
    install(&hub, MEMBER_CLUSTERS_CRD, &member_clusters()).await;
    Api::<DynamicObject>::all_with(hub.clone(), &member_clusters())
        .create(&PostParams::default(), &member_cluster("alpha"))
        .await
        .expect("MemberCluster");
    create_imc(&hub, &fleet.hub_namespace("alpha"), "alpha").await;
    fleet
}

/// The process as the chart runs it with `controller.memberInventory=true`, as `identity`: no
/// member in its kubeconfig directory, member Secrets and the inventory on.
fn inventory_config(fleet: &Fleet, identity: &Path) -> Config {
    let dir = member_dir(fleet, &[]);
    Config::builder(Some(identity.to_path_buf()), &dir)
        .member_sync_timeout(Duration::from_secs(10))
        .records(NS, fleetnet_hub::config::DEFAULT_LEADER_ELECTION_ID)
        .instance("test")
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
        .member_secrets_namespace(Some(NS.into()))
        .member_inventory(Some(PROFILES.into()))
        .build()
        .expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_fleet_lists_awaits_credentials_is_served_rotated_refused_twice_and_leaves() {
    let fleet = alpha_in_the_inventory().await;
    let hub = fleet.hub().client().await.expect("hub client");
    let mcs = Api::<DynamicObject>::all_with(hub.clone(), &member_clusters());
    let hub_ns = fleet.hub_namespace("alpha");
    // The process runs as the chart's ServiceAccount, alpha not in `members:`: what it may do
    // on the hub is what rbac.hubAccess=clusterWide and controller.memberInventory grant.
    let identity = charts_identity(&fleet, &hub).await;
    let config = inventory_config(&fleet, &identity);
    // The hub serves no ClusterProfiles yet.
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts despite the missing CRD");

    let e = eventually("alpha awaiting credentials", || async {
        error_of(&running, "alpha").filter(|e| e.starts_with("awaiting credentials"))
    })
    .await;
    assert!(e.contains("the hub does not serve ClusterProfiles"), "{e}");
    let members = http_get_body(running.health_address, "/members").await;
    assert!(
        members.contains("awaiting credentials") && members.contains("MemberCluster alpha"),
        "{members}"
    );
    let shown = eventually("`status` tells alpha awaiting credentials", || async {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .arg("status")
            .arg("--hub-kubeconfig")
            .arg(fleet.hub().kubeconfig_path())
            .args(["--output", "json"])
            .output()
            .await
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        text.contains("awaiting credentials").then_some(text)
    })
    .await;
    assert!(
        shown.contains("the hub does not serve ClusterProfiles"),
        "{shown}"
    );

    // The CRD and the profile as fleet writes them: still awaiting, the token now.
    install(&hub, CLUSTER_PROFILES_CRD, &cluster_profiles()).await;
    write_profile(&hub, &fleet, "alpha").await;
    let awaiting_token = format!("awaiting credentials: no Secret {NS}/alpha");
    eventually("alpha awaiting its token alone", || async {
        error_of(&running, "alpha").filter(|e| *e == awaiting_token)
    })
    .await;

    // The token Secret: engaged, its export on the hub, its agents joined.
    let secrets = Api::<Secret>::namespaced(hub.clone(), NS);
    let pp = PostParams::default();
    let admin = admin_token(&fleet, "alpha");
    secrets
        .create(&pp, &token_secret("alpha", &admin))
        .await
        .expect("token Secret");
    wait_phase(&running, "alpha", Phase::Ready).await;
    let engaged = running.state.member("alpha").expect("alpha");
    assert_eq!(engaged.source.as_deref(), Some("MemberCluster alpha"));
    export_and_wait(&fleet, "alpha", "ns1", "web").await;
    let imcs = Api::<InternalMemberCluster>::namespaced(hub.clone(), &hub_ns);
    wait_agents(&imcs, "alpha", "True").await;

    // The token changed: rotated in place, not engaged again.
    let member = fleet.member("alpha").client().await.expect("member client");
    service_account(&member).await;
    let second = bound_token(&member, "token-2").await;
    let patch = json!({"data": {"token": STANDARD.encode(&second)}});
    secrets
        .patch("alpha", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("rotate");
    let rotated = eventually("the new token taken", || async {
        running
            .state
            .member("alpha")
            .filter(|m| m.kubeconfig_hash != engaged.kubeconfig_hash)
    })
    .await;
    assert_eq!(
        rotated.since, engaged.since,
        "rotated in place: {rotated:?}"
    );
    export_and_wait(&fleet, "alpha", "ns1", "after-rotation").await;

    // alpha declared by a member Secret too: refused naming both; served again once it is gone.
    let kubeconfig = std::fs::read_to_string(fleet.member("alpha").kubeconfig_path()).expect("kc");
    secrets
        .create(&pp, &secret_for("alpha", NS, &kubeconfig))
        .await
        .expect("member Secret");
    let e = eventually("alpha refused naming both", || async {
        error_of(&running, "alpha").filter(|e| e.contains("both declare"))
    })
    .await;
    assert_eq!(
        e,
        format!(
            "Secret {NS}/{} and MemberCluster alpha both declare member \"alpha\": remove or rename one",
            secret_name("alpha")
        )
    );
    secrets
        .delete(&secret_name("alpha"), &DeleteParams::default())
        .await
        .expect("delete member Secret");
    wait_phase(&running, "alpha", Phase::Ready).await;
    for told in [&e, &http_get_body(running.health_address, "/members").await] {
        assert!(
            !told.contains(&admin) && !told.contains(&second),
            "no token shown"
        );
    }

    // The MemberCluster deleted: fleet deletes the profile, the member stays engaged...
    delete_member_cluster(&hub, "alpha").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        running.state.member("alpha").map(|m| m.phase),
        Some(Phase::Ready),
        "not stopped before its leave"
    );
    // ...until fleet asks it to leave and its agents have left.
    set_leave(&imcs, "alpha").await;
    left(&imcs, &running, &member).await;
    mcs.patch(
        "alpha",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("fleet's finalizer removed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(running.state.member("alpha").is_none(), "not served again");
    running.shutdown().await;
}

/// The resource versions of what the process writes for `member`: on the hub its
/// InternalServiceExports, InternalMemberCluster and MemberStatus; on the member the
/// ServiceExports of `ns`.
async fn written(fleet: &Fleet, member: &str, ns: &str) -> Vec<(String, Option<String>)> {
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(member);
    let mut all = vec![];
    let ises = ises(&hub, &hub_ns)
        .list(&Default::default())
        .await
        .expect("ISEs");
    all.extend(ises.items.into_iter().map(|o| ("ISE", o.metadata)));
    let imc = Api::<InternalMemberCluster>::namespaced(hub.clone(), &hub_ns);
    all.push(("IMC", imc.get(member).await.expect("IMC").metadata));
    let statuses =
        Api::<DynamicObject>::namespaced_with(hub, &hub_ns, &fleetnet_hub::status::resource());
    let statuses = statuses
        .list(&Default::default())
        .await
        .expect("MemberStatus");
    all.extend(
        statuses
            .items
            .into_iter()
            .map(|o| ("MemberStatus", o.metadata)),
    );
    let client = fleet.member(member).client().await.expect("member client");
    let exported = exports(&client, ns)
        .list(&Default::default())
        .await
        .expect("exports");
    all.extend(
        exported
            .items
            .into_iter()
            .map(|o| ("ServiceExport", o.metadata)),
    );
    all.into_iter()
        .map(|(kind, m)| {
            (
                format!("{kind} {}", m.name.unwrap_or_default()),
                m.resource_version,
            )
        })
        .collect()
}

/// alpha's profile and token Secret as fleet and its operator write them, the process started
/// as the chart's identity: alpha ready, an export of it on the hub, its agents joined.
/// Returns the identity's kubeconfig and the process.
async fn alpha_served_and_joined(fleet: &Fleet, hub: &kube::Client) -> (PathBuf, Running) {
    install(hub, CLUSTER_PROFILES_CRD, &cluster_profiles()).await;
    write_profile(hub, fleet, "alpha").await;
    Api::<Secret>::namespaced(hub.clone(), NS)
        .create(
            &PostParams::default(),
            &token_secret("alpha", &admin_token(fleet, "alpha")),
        )
        .await
        .expect("token Secret");
    let identity = charts_identity(fleet, hub).await;
    let running = app::start(inventory_config(fleet, &identity), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    export_and_wait(fleet, "alpha", "ns1", "web").await;
    let imcs = Api::<InternalMemberCluster>::namespaced(hub.clone(), &fleet.hub_namespace("alpha"));
    wait_agents(&imcs, "alpha", "True").await;
    (identity, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_a_converged_inventory_member_writes_nothing() {
    let fleet = alpha_in_the_inventory().await;
    let hub = fleet.hub().client().await.expect("hub client");
    let (identity, running) = alpha_served_and_joined(&fleet, &hub).await;
    // Converged: its MemberStatus published, the export's status written.
    tokio::time::sleep(fleetnet_hub::status::DEBOUNCE * 2).await;
    let before = written(&fleet, "alpha", "ns1").await;
    running.shutdown().await;

    let running = app::start(inventory_config(&fleet, &identity), Extensions::default())
        .await
        .expect("restarts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    assert_eq!(
        running.state.member("alpha").and_then(|m| m.source),
        Some("MemberCluster alpha".into())
    );
    tokio::time::sleep(fleetnet_hub::status::DEBOUNCE * 3).await;
    assert_eq!(
        written(&fleet, "alpha", "ns1").await,
        before,
        "a restart wrote"
    );
    running.shutdown().await;
}

/// A MemberCluster deleted while no replica runs: fleet has deleted its ClusterProfile by the
/// time one starts, so the member is reached on the connection its MemberCluster reports
/// (`status.properties`, where fleet took the profile's from) and its leave runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cluster_deleted_while_no_replica_ran_still_leaves() {
    let fleet = alpha_in_the_inventory().await;
    let hub = fleet.hub().client().await.expect("hub client");
    let mcs = Api::<DynamicObject>::all_with(hub.clone(), &member_clusters());
    let (identity, running) = alpha_served_and_joined(&fleet, &hub).await;
    let imcs = Api::<InternalMemberCluster>::namespaced(hub.clone(), &fleet.hub_namespace("alpha"));
    // The properties fleet's member agent reports and fleet copies into the profile.
    let cluster = fleet.member("alpha");
    let ca_property = STANDARD.encode(cluster.ca_pem().expect("CA"));
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .expect("now")
        .to_string();
    let properties = json!({"status": {"properties": {
        "k8s.io/cluster-entrypoint": {"value": cluster.server(), "observationTime": now},
        "k8s.io/cluster-certificate-authority-data": {"value": ca_property, "observationTime": now},
    }}});
    mcs.patch_status("alpha", &PatchParams::default(), &Patch::Merge(&properties))
        .await
        .expect("MemberCluster properties");
    running.shutdown().await;

    // No replica runs: the MemberCluster deleted, its profile deleted, `Leave` set, as fleet does.
    delete_member_cluster(&hub, "alpha").await;
    set_leave(&imcs, "alpha").await;

    let running = app::start(inventory_config(&fleet, &identity), Extensions::default())
        .await
        .expect("starts again");
    let member = fleet.member("alpha").client().await.expect("member client");
    left(&imcs, &running, &member).await;
    running.shutdown().await;
}
