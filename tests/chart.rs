//! The Helm charts: `tests/chart.sh` (helm lint + template with several value sets, assertions
//! on the output), then the rendered manifests applied to a real hub apiserver, and the
//! controller running with exactly the RBAC the charts ship (hub and member side).

mod support;

use std::path::PathBuf;
use std::process::Command;

use fleetnet_hub::api::{InternalServiceExport, WEIGHT_ANNOTATION};
use fleetnet_testenv::{Fleet, ScopedIdentity, load_cluster_role};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use support::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_lint_render_apply_and_grant_exactly_what_the_controller_needs() {
    let out = tempfile::tempdir().expect("tempdir");
    let status = Command::new("bash")
        .arg(repo().join("tests/chart.sh"))
        .env("FLEETNET_CHART_OUT", out.path())
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
    let rendered =
        std::fs::read_to_string(out.path().join("three-members.yaml")).expect("rendered chart");
    let objects: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple(&rendered).expect("rendered YAML parses");
    let discovery = Discovery::new(hub.clone()).run().await.expect("discovery");
    let mut applied = 0;
    for obj in objects.into_iter().filter(|o| !o.is_null()) {
        let obj: DynamicObject = serde_json::from_value(obj).expect("a Kubernetes object");
        let types = obj.types.clone().expect("apiVersion/kind");
        let gvk = kube::api::GroupVersionKind::try_from(&types).expect("gvk");
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("hub does not serve {gvk:?}"));
        let name = obj.metadata.name.clone().expect("name");
        let api: Api<DynamicObject> = match (&caps.scope, obj.metadata.namespace.as_deref()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(hub.clone(), ns, &resource)
            }
            (kube::discovery::Scope::Namespaced, None) => {
                panic!("{} {name} has no namespace", types.kind)
            }
            (kube::discovery::Scope::Cluster, _) => Api::all_with(hub.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("chart-test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
        applied += 1;
    }
    assert_eq!(applied, 16, "every rendered object applied");

    // Hub side: the chart's own ServiceAccount, with the RBAC just applied (no extra rules).
    let hub_identity = ScopedIdentity {
        namespace: "fleetnet-system".into(),
        name: "fleetnet-hub".into(),
        cluster_role: None,
        role: None,
        role_namespaces: vec![],
    };
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
    create_service(&member, &service("shop", "cart", 80)).await;
    create_export(&member, "shop", "cart", &[]).await;
    wait_ise(&hub, &fleet.hub_namespace("member-1"), "shop-cart", |_| {
        true
    })
    .await;
    wait_condition(&member, "shop", "cart", "Valid", "True", "ServiceIsValid").await;
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
}
