//! The Helm charts: `tests/chart.sh` (helm lint + template with several value sets, assertions
//! on the output), then the rendered manifests applied to a real hub apiserver, and the
//! controller running with exactly the RBAC the charts ship (hub and member side); the rendered
//! NetworkPolicy is among the objects the apiserver accepts. Last, the
//! sharded rendering (3 replicas, PDB, Lease RBAC) applied, and a sharded replica of the real
//! binary running with the chart's identity.

use crate::support;

use std::process::Command;

use fleetnet_hub::api::{InternalServiceExport, WEIGHT_ANNOTATION};
use fleetnet_testenv::{Fleet, ScopedIdentity, load_cluster_role};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_lint_render_apply_and_grant_exactly_what_the_controller_needs() {
    let out = tempfile::tempdir().expect("tempdir");
    let status = Command::new("bash")
        .arg(repo().join("tests/chart.sh"))
        .env("FLEETNET_CHART_OUT", out.path())
        .env("FLEETNET_HUB_BIN", env!("CARGO_BIN_EXE_fleetnet-hub"))
        .output()
        .expect("run tests/chart.sh");
    let stdout = String::from_utf8_lossy(&status.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        status.status.success()
            && summary.starts_with("chart: ")
            && summary.ends_with(", 0 failed"),
        "tests/chart.sh failed ({}):\n{stdout}\n{}",
        status.status,
        String::from_utf8_lossy(&status.stderr)
    );
    eprintln!("{summary}");

    // The members of values `three-members`; the chart creates their namespaces itself.
    let fleet = Fleet::builder()
        .members(["member-1", "member-2", "member-3"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", "fleetnet-system")
        .await
        .expect("release namespace");
    let discovery = Discovery::new(hub.clone()).run().await.expect("discovery");
    let applied = apply_rendering(&hub, &discovery, &out.path().join("three-members.yaml")).await;
    assert_eq!(
        applied.len(),
        19,
        "every rendered object applied (the hub reader ClusterRole and its binding among them)"
    );
    // The NetworkPolicy (#40 item 5) is accepted by a real apiserver as rendered.
    let policies: Vec<&DynamicObject> = applied
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "NetworkPolicy"))
        .collect();
    assert_eq!(policies.len(), 1, "one NetworkPolicy applied");
    assert_eq!(
        policies[0].data["spec"]["policyTypes"],
        serde_json::json!(["Ingress"]),
        "ingress only: {:?}",
        policies[0].data
    );
    let ports: Vec<&serde_json::Value> = policies[0].data["spec"]["ingress"]
        .as_array()
        .map(|rules| rules.iter().map(|r| &r["ports"][0]["port"]).collect())
        .unwrap_or_default();
    assert_eq!(
        ports,
        [&serde_json::json!(8081), &serde_json::json!(8080)],
        "the health and metrics ports only"
    );

    // Hub side: the chart's own ServiceAccount, with the RBAC just applied (no extra rules).
    let hub_identity = fleetnet_testenv::ScopedIdentity::bare("fleetnet-system", "fleetnet-hub");
    let hub_kubeconfig = fleet
        .hub()
        .issue_scoped_kubeconfig(
            &hub_identity,
            &fleet.scratch_dir().join("hub-sa.kubeconfig"),
        )
        .await
        .expect("hub SA kubeconfig");
    // Member side: exactly the ClusterRole the member chart ships.
    let member_role =
        load_cluster_role(&repo().join("charts/fleetnet-hub/files/member-clusterrole.yaml"))
            .expect("member ClusterRole");
    let member_identity = ScopedIdentity {
        namespace: "fleetnet-system".into(),
        name: "fleetnet-hub-member".into(),
        cluster_role: Some(member_role),
        role: None,
        role_namespaces: vec![],
    };
    let member_kubeconfig = fleet
        .member("member-1")
        .issue_scoped_kubeconfig(
            &member_identity,
            &fleet.scratch_dir().join("member-1-sa.kubeconfig"),
        )
        .await
        .expect("member SA kubeconfig");

    let member = fleet
        .member("member-1")
        .client()
        .await
        .expect("member admin");
    namespace(&member, "shop").await;
    let exporter = start_exporter(
        &fleet,
        "member-1",
        ExporterOptions {
            member_kubeconfig: Some(member_kubeconfig.clone()),
            hub_kubeconfig: Some(hub_kubeconfig.clone()),
            ..Default::default()
        },
    )
    .await;
    export_cart_and_wait(&member, &hub, &fleet.hub_namespace("member-1")).await;
    // Weight 0 exercises delete + finalizer removal with the same identities.
    exports(&member, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(
                &serde_json::json!({"metadata": {"annotations": {WEIGHT_ANNOTATION: "0"}}}),
            ),
        )
        .await
        .expect("weight 0");
    wait_ise_gone(&hub, &fleet.hub_namespace("member-1"), "shop-cart").await;
    exporter.stop().await;

    // And nothing more: the hub identity cannot write outside the member namespaces.
    let sa_hub = fleetnet_testenv::client_from_kubeconfig("hub", &hub_kubeconfig)
        .await
        .expect("SA client");
    let mut stray = InternalServiceExport::default();
    stray.metadata.name = Some("stray".into());
    stray.spec.service_reference.namespaced_name = "x/y".into();
    let denied = Api::<InternalServiceExport>::namespaced(sa_hub, "default")
        .create(&PostParams::default(), &stray)
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "{denied:?}"
    );
    let sa_member = fleetnet_testenv::client_from_kubeconfig("member-1", &member_kubeconfig)
        .await
        .expect("SA client");
    let denied = Api::<k8s_openapi::api::core::v1::Service>::namespaced(sa_member, "shop")
        .delete("cart", &Default::default())
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "member identity may not delete Services: {denied:?}"
    );

    sharded_rendering_is_accepted_and_its_lease_rbac_suffices(
        &fleet,
        &discovery,
        &out.path().join("sharded.yaml"),
        &hub_kubeconfig,
    )
    .await;
}

// --- the sharded rendering (#13) ------------------------------------------------------------------

/// The sharded value set (3 replicas, PDB minAvailable 2, the Lease Role) applied over the
/// release: every object accepted as rendered; then one replica of the real binary, with the
/// chart's ServiceAccount and exactly that RBAC, announces itself, holds every member's Lease,
/// exports, and on SIGTERM releases the Leases and deletes its announcement.
async fn sharded_rendering_is_accepted_and_its_lease_rbac_suffices(
    fleet: &Fleet,
    discovery: &Discovery,
    rendering: &std::path::Path,
    hub_kubeconfig: &std::path::Path,
) {
    const NS: &str = "fleetnet-system";
    let hub = fleet.hub().client().await.expect("hub client");
    let applied = apply_rendering(&hub, discovery, rendering).await;
    let one = |kind: &str| {
        let of_kind: Vec<&DynamicObject> = applied
            .iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
            // Roles and RoleBindings also in every member namespace: the release's own here.
            .filter(|o| {
                !matches!(kind, "Role" | "RoleBinding")
                    || o.metadata.namespace.as_deref() == Some(NS)
            })
            .collect();
        assert_eq!(of_kind.len(), 1, "one {kind} in the sharded rendering");
        of_kind[0].clone()
    };
    let deployment = one("Deployment");
    assert_eq!(deployment.data["spec"]["replicas"], 3, "3 replicas");
    let args: Vec<String> = serde_json::from_value(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .expect("container args");
    assert!(args.iter().any(|a| a == "--shard-members"), "{args:?}");
    let id = args
        .iter()
        .find_map(|a| a.strip_prefix("--leader-election-id="))
        .expect("--leader-election-id")
        .to_string();
    let pdb = one("PodDisruptionBudget");
    assert_eq!(pdb.data["spec"]["minAvailable"], 2, "PDB keeps 2 of 3");
    let role = one("Role");
    let resources: Vec<serde_json::Value> = role.data["rules"]
        .as_array()
        .map(|rules| rules.iter().map(|r| r["resources"].clone()).collect())
        .unwrap_or_default();
    assert_eq!(
        resources,
        [
            serde_json::json!(["secrets"]),
            serde_json::json!(["secrets"]),
            serde_json::json!(["secrets"]),
            serde_json::json!(["leases"])
        ],
        "the release-namespace Role is about the member Secrets, the cleanup records (cleanupOnRemove) and Leases only: {:?}",
        role.data["rules"]
    );
    let binding = one("RoleBinding");
    assert_eq!(
        binding.data["roleRef"]["name"],
        role.metadata.name.clone().unwrap_or_default()
    );
    println!(
        "chart: sharded rendering applied ({} objects: Deployment x3, PDB minAvailable 2, Lease Role + RoleBinding)",
        applied.len()
    );

    // One replica with the chart's identity: the Lease RBAC is enough to shard.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(["run", "--hub-kubeconfig"])
        .arg(hub_kubeconfig)
        .arg("--kubeconfig-dir")
        .arg(fleet.member_kubeconfig_dir())
        .args(["--shard-members", "--leader-election-namespace", NS])
        .args(["--leader-election-id", &id])
        .arg(format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            free_port()
        ))
        .arg(format!("--metrics-bind-address=127.0.0.1:{}", free_port()))
        .env("POD_NAME", "fleetnet-hub-0")
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map(support::KillOnDrop)
        .expect("start a replica");
    let leases: Api<Lease> = Api::namespaced(hub.clone(), NS);
    let members = ["member-1", "member-2", "member-3"];
    let holder = |l: &Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    eventually(
        "the replica announced and holding every member's shard",
        || async {
            let list = leases.list(&Default::default()).await.ok()?.items;
            let announced = list.iter().any(|l| {
                l.metadata
                    .labels
                    .as_ref()
                    .and_then(|m| m.get("fleetnet.azure.com/replica-of"))
                    == Some(&id)
                    && holder(l).starts_with("fleetnet-hub-0_")
            });
            let holds = members.iter().all(|m| {
                use fleetnet_hub::ownership::{
                    placement::shard_of,
                    shard::{DEFAULT_SHARDS, shard_lease},
                };
                let shard = shard_lease(&id, shard_of(m, DEFAULT_SHARDS));
                list.iter().any(|l| {
                    l.metadata.name.as_deref() == Some(shard.as_str())
                        && holder(l).starts_with("fleetnet-hub-0_")
                })
            });
            (announced && holds).then_some(())
        },
    )
    .await;
    let member = fleet
        .member("member-1")
        .client()
        .await
        .expect("member admin");
    create_service(&member, &service("shop", "sharded", 80)).await;
    create_export(&member, "shop", "sharded", &[]).await;
    wait_ise(
        &hub,
        &fleet.hub_namespace("member-1"),
        "shop-sharded",
        |_| true,
    )
    .await;

    signal(child.id(), "-TERM");
    let status = child.wait().expect("wait");
    let _ = child.kill();
    assert!(status.success(), "replica exited with {status}");
    let list = leases
        .list(&Default::default())
        .await
        .expect("leases")
        .items;
    let left: Vec<String> = list
        .iter()
        .filter(|l| holder(l).starts_with("fleetnet-hub-0_"))
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    assert!(
        left.is_empty(),
        "still held or announced after SIGTERM: {left:?}"
    );
    println!(
        "chart: one replica with the chart's identity held {members:?}, exported, released on SIGTERM"
    );
}

/// Server-side applies every object of a rendering to the hub; returns them as applied.
pub(crate) async fn apply_rendering(
    hub: &kube::Client,
    discovery: &Discovery,
    path: &std::path::Path,
) -> Vec<DynamicObject> {
    let rendered = std::fs::read_to_string(path).expect("rendered chart");
    let objects: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple(&rendered).expect("rendered YAML parses");
    let mut applied = vec![];
    for obj in objects.into_iter().filter(|o| !o.is_null()) {
        let obj: DynamicObject = serde_json::from_value(obj).expect("a Kubernetes object");
        let (resource, caps) = support::served_as(discovery, &obj);
        let name = obj.metadata.name.clone().expect("name");
        let api: Api<DynamicObject> = match (&caps.scope, obj.metadata.namespace.as_deref()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(hub.clone(), ns, &resource)
            }
            (kube::discovery::Scope::Namespaced, None) => {
                panic!("{} {name} has no namespace", resource.kind)
            }
            (kube::discovery::Scope::Cluster, _) => Api::all_with(hub.clone(), &resource),
        };
        let result = api
            .patch(
                &name,
                &PatchParams::apply("chart-test").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {} {name}: {e}", resource.kind));
        applied.push(result);
    }
    applied
}
