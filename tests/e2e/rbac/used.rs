//! The controller under exactly the charts' identities: every request it makes, from the
//! apiservers' audit logs, against what the rendered charts grant.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_rbac_is_exactly_what_the_controller_uses() {
    // --- the charts, rendered as a release in the test's members --------------------------------
    let members_value = format!("members={{{}}}", MEMBERS.join(","));
    // As the controller runs below: with --cleanup-on-remove (its records need the Secrets rule).
    let cleanup = "controller.cleanupOnRemove=true";
    let hub_docs = render(
        RELEASE,
        "charts/fleetnet-hub",
        &["--set", &members_value, "--set", cleanup],
    );
    let member_docs = render("fleetnet-hub-member", "charts/fleetnet-hub-member", &[]);
    let hub_sa = service_account(&hub_docs);
    let member_sa = service_account(&member_docs);
    let hub_user = format!("system:serviceaccount:{}:{}", hub_sa.0, hub_sa.1);
    let member_user = format!("system:serviceaccount:{}:{}", member_sa.0, member_sa.1);
    let lease_name = deployment_flag(&hub_docs, "leader-election-id");
    let lease_ns = deployment_flag(&hub_docs, "leader-election-namespace");
    let prefix = deployment_flag(&hub_docs, "hub-namespace-prefix");

    // --- a hub and two members, each auditing the controller's users ------------------------------
    let (fleet, audit_dir) = audited_fleet(&[&hub_user, &member_user]).await;
    let log_of = |cluster: &str| audit_log(&audit_dir, cluster);
    init_test_logs();

    // --- the charts' RBAC applied, and tokens for their ServiceAccounts ---------------------------
    let hub = fleet.hub().client().await.expect("hub admin");
    fleetnet_testenv::ensure_namespace(&hub, "hub", RELEASE_NS)
        .await
        .expect("release namespace");
    assert!(apply_rbac(&hub, &hub_docs).await > 0);
    let scratch = fleet.scratch_dir().to_path_buf();
    let hub_kubeconfig = scratch.join("hub-sa.kubeconfig");
    token_kubeconfig(fleet.hub(), &hub_sa, &hub_kubeconfig).await;
    let dir = scratch.join("rbac-kubeconfigs");
    let admins = members_as_the_chart(&fleet, &member_docs, &member_sa, &dir).await;

    // --- the controller, in-process, as the chart runs it ---------------------------------------
    let config = as_the_chart_runs_it(&hub_docs, hub_kubeconfig, &dir, "rbac-test")
        .cleanup_on_remove(true)
        .rescan_interval(Duration::from_secs(5))
        .build()
        .expect("a valid configuration");
    let running = app::start(config, Extensions::default())
        .await
        .expect("controller starts");
    eventually("leader", || async {
        running.claim.may_write().then_some(())
    })
    .await;

    let walk = Walk {
        hub: hub.clone(),
        m1: admins["member-1"].clone(),
        m2: admins["member-2"].clone(),
        ns1: fleet.hub_namespace("member-1"),
        ns2: fleet.hub_namespace("member-2"),
        hub_log: log_of("hub"),
        hub_user: hub_user.clone(),
    };
    walk.every_job().await;
    exports::remove_member(&walk, &dir.join("member-2.yaml")).await;
    status::walk(&walk).await;

    // Shutdown releases the Lease.
    running.shutdown().await;
    let lease =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(hub.clone(), &lease_ns)
            .get(&lease_name)
            .await
            .expect("lease");
    assert!(
        lease.spec.and_then(|s| s.holder_identity).is_none(),
        "the Lease was released"
    );

    // --- used (audit logs) vs granted (rendered charts) -------------------------------------------
    let mut cmp = audit::Comparison::default();
    add_hub(
        &mut cmp,
        &log_of("hub"),
        &hub_user,
        &hub_docs,
        &hub_sa,
        &prefix,
    );
    let member_grants = audit::grants(&member_docs, &member_sa.0, &member_sa.1);
    for m in MEMBERS {
        let requests = audit::read(&log_of(m), &member_user);
        assert!(!requests.is_empty(), "no audited requests in {m}");
        cmp.add("member", &requests, &member_grants, str::to_string);
    }
    let table = cmp.table();
    eprintln!("\nRBAC: used (kube-apiserver audit logs) vs granted (rendered charts)\n{table}\n");

    // `fleetnet-hub check` asks each member for fixed lists of permissions (cluster-wide, and in
    // the fleet system namespace): report where those lists and the proven use disagree (the
    // lists live in src/check.rs).
    type Asked = (String, String, String, String);
    let used_member: std::collections::BTreeSet<Asked> = cmp
        .rows
        .iter()
        .filter(|((cluster, ..), row)| cluster == "member" && !row.seen.is_empty())
        .map(|((_, g, r, v, scope), _)| (g.clone(), r.clone(), v.clone(), scope.clone()))
        .collect();
    let asked_in = |list: &[(&str, &str, &str)], scope: &str| -> Vec<Asked> {
        list.iter()
            .map(|(g, r, v)| {
                (
                    g.to_string(),
                    r.to_string(),
                    v.to_string(),
                    scope.to_string(),
                )
            })
            .collect()
    };
    let asked: std::collections::BTreeSet<Asked> =
        asked_in(fleetnet_hub::check::MEMBER_PERMISSIONS, "(all)")
            .into_iter()
            .chain(asked_in(
                fleetnet_hub::check::FLEET_SYSTEM_PERMISSIONS,
                SYSTEM,
            ))
            .collect();
    assert_eq!(
        asked.difference(&used_member).collect::<Vec<_>>(),
        Vec::<&Asked>::new(),
        "`fleetnet-hub check` (src/check.rs) requires what the controller never uses"
    );
    assert_eq!(
        used_member.difference(&asked).collect::<Vec<_>>(),
        Vec::<&Asked>::new(),
        "`fleetnet-hub check` does not ask for what the controller uses"
    );

    assert_exact(&cmp, &table);

    // `fleetnet-hub check` with exactly the member chart's identity (after the audit logs were
    // read: its SelfSubjectAccessReviews are not the controller's): every permission it asks
    // for, cluster-wide and in the fleet system namespace, is granted.
    let file = dir.join("member-1.yaml");
    let kubeconfig = std::fs::read_to_string(&file).expect("member-1's kubeconfig");
    let trust = fleetnet_hub::fleet::TrustPolicy::default();
    let row =
        fleetnet_hub::check::check_member_in("member-1", &file, &kubeconfig, trust, SYSTEM).await;
    assert!(
        row.ok,
        "`fleetnet-hub check` with the chart's RBAC: {row:?}"
    );
}
