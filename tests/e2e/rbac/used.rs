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
    let audit_dir = tempfile::tempdir().expect("tempdir");
    let policy = audit_dir.path().join("policy.yaml");
    std::fs::write(&policy, audit::policy(&[&hub_user, &member_user])).expect("policy");
    let log_of = |cluster: &str| audit_dir.path().join(format!("{cluster}.audit.log"));
    let mut builder = Fleet::builder().members(MEMBERS);
    for cluster in std::iter::once("hub").chain(MEMBERS) {
        builder = builder.apiserver_args(
            cluster,
            [
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", log_of(cluster).display()),
                "--audit-log-mode=blocking".to_string(),
            ],
        );
    }
    let fleet = builder.start().await.expect("fleet");
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
    std::fs::create_dir_all(&dir).expect("kubeconfig dir");
    let mut admins = std::collections::BTreeMap::new();
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member admin");
        fleetnet_testenv::ensure_namespace(&client, m, RELEASE_NS)
            .await
            .expect("release namespace");
        assert!(apply_rbac(&client, &member_docs).await > 0);
        let staged = scratch.join(format!("{m}.staged"));
        token_kubeconfig(fleet.member(m), &member_sa, &staged).await;
        std::fs::rename(&staged, dir.join(format!("{m}.yaml"))).expect("place kubeconfig");
        admins.insert(m, client);
    }

    // --- the controller, in-process, as the chart runs it ---------------------------------------
    let generous = Limits {
        qps: 200.0,
        burst: 400,
        ..Limits::default()
    };
    let config = Config::builder(Some(hub_kubeconfig), &dir)
        .namespace_prefix(&prefix)
        .hub_limits(generous.clone())
        .member_limits(generous)
        .member_sync_timeout(Duration::from_secs(20))
        .cleanup_on_remove(true)
        .records(&lease_ns, &lease_name)
        .rescan_interval(Duration::from_secs(5))
        .instance("rbac-test")
        .leader_election(Some(LeaderElection {
            namespace: lease_ns.clone(),
            name: lease_name.clone(),
            identity: "rbac-test".into(),
            shard_members: false,
            shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
        }))
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
        .build()
        .expect("a valid configuration");
    let running = app::start(config, Extensions::default())
        .await
        .expect("controller starts");
    eventually("leader", || async {
        running.claim.may_write().then_some(())
    })
    .await;

    let m1 = &admins["member-1"];
    let m2 = &admins["member-2"];
    let ns1 = fleet.hub_namespace("member-1");
    let ns2 = fleet.hub_namespace("member-2");
    namespace(m1, "shop").await;
    namespace(m2, "web").await;

    // Export: member-1 shop/cart and shop/pay, member-2 web/app.
    for (client, ns, name) in [
        (m1, "shop", "cart"),
        (m1, "shop", "pay"),
        (m2, "web", "app"),
    ] {
        create_service(client, &service(ns, name, 80)).await;
        create_export(client, ns, name, &[]).await;
    }
    wait_ise(&hub, &ns1, "shop-cart", |_| true).await;
    wait_ise(&hub, &ns1, "shop-pay", |_| true).await;
    wait_ise(&hub, &ns2, "web-app", |_| true).await;
    wait_condition(m1, "shop", "cart", "Valid", "True", "ServiceIsValid").await;

    // A Service change: the ISE's spec is patched.
    Api::<Service>::namespaced(m1.clone(), "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"ports": [{"name": "http", "port": 8080}]}})),
        )
        .await
        .expect("change port");
    wait_ise(&hub, &ns1, "shop-cart", |i| {
        i.spec.ports.first().is_some_and(|p| p.port == 8080)
    })
    .await;

    // The hub's verdict (as fleet-networking's hub controller writes it) is copied back.
    ises(&hub, &ns1)
        .patch_status(
            "shop-cart",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [{
                "type": "Conflict", "status": "False", "reason": "NoConflictFound",
                "message": "service shop/cart is exported without conflict",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
            }]}})),
        )
        .await
        .expect("hub verdict");
    wait_condition(m1, "shop", "cart", "Conflict", "False", "NoConflictFound").await;

    // An EndpointSlice of the exported Service: exported, updated, then withdrawn when it is no
    // longer the Service's (live reads of the slice and its export before the withdrawal).
    let cart_slices = slices(m1, "shop");
    cart_slices
        .create(
            &PostParams::default(),
            &endpoint_slice("shop", "cart-1", "cart", &["10.0.0.1"]),
        )
        .await
        .expect("create slice");
    wait_slice_export(&hub, &ns1, "shop", "cart-1", |_| true).await;
    cart_slices
        .patch(
            "cart-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}}
            ]})),
        )
        .await
        .expect("add an endpoint");
    wait_slice_export(&hub, &ns1, "shop", "cart-1", |e| {
        e.spec.endpoints.len() == 2
    })
    .await;
    cart_slices
        .patch(
            "cart-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"kubernetes.io/service-name": null}}})),
        )
        .await
        .expect("unlabel");
    wait_slice_unexported(&hub, &ns1, "shop", "cart-1").await;
    eventually("cart-1's unique name removed", || {
        let api = cart_slices.clone();
        async move {
            let s = api.get("cart-1").await.ok()?;
            unique_name_of(&s).is_none().then_some(())
        }
    })
    .await;

    // Weight 0 unexports; removing the annotation exports again (the same Events again: the
    // recorder patches their series).
    let weight = |w: Value| json!({"metadata": {"annotations": {WEIGHT_ANNOTATION: w}}});
    exports(m1, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&weight(json!("0"))),
        )
        .await
        .expect("weight 0");
    wait_ise_gone(&hub, &ns1, "shop-cart").await;
    exports(m1, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&weight(Value::Null)),
        )
        .await
        .expect("weight removed");
    wait_ise(&hub, &ns1, "shop-cart", |_| true).await;
    wait_condition(m1, "shop", "cart", "Valid", "True", "ServiceIsValid").await;

    // The Service deleted: NotFound, the ISE goes.
    Api::<Service>::namespaced(m1.clone(), "shop")
        .delete("cart", &DeleteParams::default())
        .await
        .expect("delete service");
    wait_condition(m1, "shop", "cart", "Valid", "False", "ServiceNotFound").await;
    wait_ise_gone(&hub, &ns1, "shop-cart").await;

    // A ServiceExport deleted: unexport, then the finalizer goes and so does the export.
    exports(m1, "shop")
        .delete("pay", &DeleteParams::default())
        .await
        .expect("delete export");
    wait_ise_gone(&hub, &ns1, "shop-pay").await;
    eventually("shop/pay gone", || {
        let api = exports(m1, "shop");
        async move {
            api.get_opt("pay")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        }
    })
    .await;

    // A dangling ISE (member-1's, no ServiceExport behind it) is removed.
    let ghost: InternalServiceExport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "InternalServiceExport",
        "metadata": {"name": "shop-ghost", "namespace": ns1},
        "spec": {
            "ports": [{"port": 80, "protocol": "TCP"}],
            "serviceReference": {
                "clusterId": "member-1", "kind": "Service", "namespace": "shop", "name": "ghost",
                "resourceVersion": "1", "generation": 1, "uid": "00000000-0000-0000-0000-00000000beef",
                "namespacedName": "shop/ghost"
            }
        }
    }))
    .expect("ISE");
    ises(&hub, &ns1)
        .create(&PostParams::default(), &ghost)
        .await
        .expect("create dangling ISE");
    wait_ise_gone(&hub, &ns1, "shop-ghost").await;

    // --cleanup-on-remove: member-2's kubeconfig removed; its ISE goes, its finalizer too.
    std::fs::remove_file(dir.join("member-2.yaml")).expect("remove member-2");
    wait_ise_gone(&hub, &ns2, "web-app").await;
    eventually("web/app finalizer removed", || {
        let api = exports(m2, "web");
        async move {
            let se = api.get_opt("app").await.ok().flatten()?;
            se.metadata
                .finalizers
                .unwrap_or_default()
                .is_empty()
                .then_some(())
        }
    })
    .await;

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
    let hub_requests = audit::read(&log_of("hub"), &hub_user);
    assert!(!hub_requests.is_empty(), "no audited hub requests");
    let hub_grants = audit::grants(&hub_docs, &hub_sa.0, &hub_sa.1);
    let hub_class = |ns: &str| match ns.strip_prefix(prefix.as_str()) {
        Some(_) => format!("{prefix}*"),
        None => ns.to_string(),
    };
    cmp.add("hub", &hub_requests, &hub_grants, hub_class);
    let member_grants = audit::grants(&member_docs, &member_sa.0, &member_sa.1);
    for m in MEMBERS {
        let requests = audit::read(&log_of(m), &member_user);
        assert!(!requests.is_empty(), "no audited requests in {m}");
        cmp.add("member", &requests, &member_grants, str::to_string);
    }
    let table = cmp.table();
    eprintln!("\nRBAC: used (kube-apiserver audit logs) vs granted (rendered charts)\n{table}\n");

    // `fleetnet-hub check` asks each member for a fixed list of permissions: report where that
    // list and the proven use disagree (the list lives in src/check.rs).
    let used_member: std::collections::BTreeSet<(String, String, String)> = cmp
        .rows
        .iter()
        .filter(|((cluster, ..), row)| cluster == "member" && !row.seen.is_empty())
        .map(|((_, g, r, v, _), _)| (g.clone(), r.clone(), v.clone()))
        .collect();
    let asked: std::collections::BTreeSet<(String, String, String)> =
        fleetnet_hub::check::MEMBER_PERMISSIONS
            .iter()
            .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
            .collect();
    assert_eq!(
        asked.difference(&used_member).collect::<Vec<_>>(),
        Vec::<&(String, String, String)>::new(),
        "`fleetnet-hub check` (src/check.rs MEMBER_PERMISSIONS) requires what the controller never uses"
    );
    assert_eq!(
        used_member.difference(&asked).collect::<Vec<_>>(),
        Vec::<&(String, String, String)>::new(),
        "`fleetnet-hub check` does not ask for what the controller uses"
    );

    let denied: Vec<String> = cmp
        .denied
        .iter()
        .map(|(c, r)| format!("{c}: {r:?}"))
        .collect();
    assert!(
        denied.is_empty(),
        "the apiserver refused requests (403):\n{}\n{table}",
        denied.join("\n")
    );
    let ungranted = cmp.ungranted();
    assert!(
        ungranted.is_empty(),
        "used but not granted by the charts: {ungranted:?}\n{table}"
    );
    let unused = cmp.unused();
    assert!(
        unused.is_empty(),
        "granted by the charts but never used by the controller: {unused:?}\n{table}"
    );
}
