//! The chart's RBAC for members from fleet's inventory (`controller.memberInventory=true`,
//! `rbac.hubAccess=clusterWide`, no `members:` list), proven exactly what the controller uses,
//! as `used` proves the default values: the members come from their MemberClusters,
//! ClusterProfiles and token Secrets; every job's workload runs; member-2 leaves the inventory
//! (its MemberCluster deleted, `Leave` set, as fleet does) and is stopped once it has left.

use super::*;
use crate::fleet::inventory::{
    CLUSTER_PROFILES_CRD, MEMBER_CLUSTERS_CRD, PROFILES, create_imc, delete_member_cluster,
    install, member_cluster, set_leave, token_secret, write_profile,
};
use fleetnet_hub::api::InternalMemberCluster;
use fleetnet_hub::fleet::sources::inventory::{cluster_profiles, member_clusters};
use k8s_openapi::api::core::v1::Secret;
use kube::core::DynamicObject;

/// The token of a kubeconfig written by `token_kubeconfig`.
fn token_of(kubeconfig: &Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    fleetnet_testenv::tokens::token_in(&text).expect("a token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_rbac_is_exactly_what_the_controller_uses() {
    let hub_docs = render(
        RELEASE,
        "charts/fleetnet-hub",
        &[
            "--set",
            "controller.memberInventory=true",
            "--set",
            "rbac.hubAccess=clusterWide",
        ],
    );
    let member_docs = render("fleetnet-hub-member", "charts/fleetnet-hub-member", &[]);
    let (hub_sa, member_sa) = (service_account(&hub_docs), service_account(&member_docs));
    let hub_user = format!("system:serviceaccount:{}:{}", hub_sa.0, hub_sa.1);
    let prefix = deployment_flag(&hub_docs, "hub-namespace-prefix");
    let profiles_ns = deployment_flag(&hub_docs, "inventory-profile-namespace");
    assert_eq!(profiles_ns, PROFILES);
    let (fleet, audit_dir) = audited_fleet(&[&hub_user]).await;
    init_test_logs();

    // The hub as fleet leaves it: the inventory's CRDs, each member's MemberCluster and
    // ClusterProfile; member-2's InternalMemberCluster (member-1's is the membership walk's);
    // the chart's RBAC; the members' token Secrets, tokens of the member chart's identity.
    let hub = fleet.hub().client().await.expect("hub admin");
    for ns in [RELEASE_NS, PROFILES] {
        fleetnet_testenv::ensure_namespace(&hub, "hub", ns)
            .await
            .expect("namespace");
    }
    assert!(apply_rbac(&hub, &hub_docs).await > 0);
    install(&hub, MEMBER_CLUSTERS_CRD, &member_clusters()).await;
    install(&hub, CLUSTER_PROFILES_CRD, &cluster_profiles()).await;
    let scratch = fleet.scratch_dir().to_path_buf();
    let tokens_dir = scratch.join("member-tokens");
    let admins = members_as_the_chart(&fleet, &member_docs, &member_sa, &tokens_dir).await;
    let (ns1, ns2) = (
        fleet.hub_namespace("member-1"),
        fleet.hub_namespace("member-2"),
    );
    for m in MEMBERS {
        Api::<DynamicObject>::all_with(hub.clone(), &member_clusters())
            .create(&PostParams::default(), &member_cluster(m))
            .await
            .expect("MemberCluster");
        fleetnet_testenv::ensure_namespace(&hub, "hub", &fleet.hub_namespace(m))
            .await
            .expect("hub namespace");
        write_profile(&hub, &fleet, m).await;
        let token = token_of(&tokens_dir.join(format!("{m}.yaml")));
        Api::<Secret>::namespaced(hub.clone(), RELEASE_NS)
            .create(&PostParams::default(), &token_secret(m, &token))
            .await
            .expect("token Secret");
    }
    create_imc(&hub, &ns2, "member-2").await;
    let hub_kubeconfig = scratch.join("hub-sa.kubeconfig");
    token_kubeconfig(fleet.hub(), &hub_sa, &hub_kubeconfig).await;

    // The controller as the chart runs it: no kubeconfig file, member Secrets and the inventory.
    let empty = scratch.join("no-member-files");
    std::fs::create_dir_all(&empty).expect("dir");
    let config = as_the_chart_runs_it(&hub_docs, hub_kubeconfig, &empty, "rbac-inventory")
        .member_inventory(Some(profiles_ns))
        .build()
        .expect("a valid configuration");
    let running = app::start(config, Extensions::default())
        .await
        .expect("controller starts");
    for m in MEMBERS {
        wait_phase(&running, m, fleetnet_hub::fleet::Phase::Ready).await;
    }

    let walk = Walk {
        hub: hub.clone(),
        m1: admins["member-1"].clone(),
        m2: admins["member-2"].clone(),
        ns1,
        ns2: ns2.clone(),
        hub_log: audit_log(&audit_dir, "hub"),
        hub_user: hub_user.clone(),
    };
    walk.every_job().await;

    // member-2 leaves the inventory: served until its agents have left, then stopped.
    delete_member_cluster(&hub, "member-2").await;
    let imcs = Api::<InternalMemberCluster>::namespaced(hub.clone(), &ns2);
    set_leave(&imcs, "member-2").await;
    eventually("member-2 stopped after its leave", || async {
        running.state.member("member-2").is_none().then_some(())
    })
    .await;
    status::walk(&walk).await;
    running.shutdown().await;

    let mut cmp = audit::Comparison::default();
    add_hub(
        &mut cmp,
        &audit_log(&audit_dir, "hub"),
        &hub_user,
        &hub_docs,
        &hub_sa,
        &prefix,
    );
    let table = cmp.table();
    eprintln!(
        "\nRBAC (inventory values): used (hub audit log) vs granted (rendered chart)\n{table}\n"
    );
    assert_exact(&cmp, &table);
}
