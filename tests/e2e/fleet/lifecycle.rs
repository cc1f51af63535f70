//! Members come and go: their own namespaces, cleanup on remove (also after a restart), a quiet
//! directory not read again, no series left behind by a removed member.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_export_into_their_own_namespaces_and_come_and_go() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta", "gamma"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    // A malformed kubeconfig and a bad name next to good ones: errors for those only.
    std::fs::write(dir.join("broken.yaml"), "this: [is not a kubeconfig").expect("write");
    std::fs::write(dir.join("Not_A_Label.yaml"), "x").expect("write");
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    wait_phase(&running, "beta", Phase::Ready).await;
    wait_phase(&running, "broken", Phase::Failing).await;
    let bad_name = running.state.member("Not_A_Label").expect("tracked");
    assert!(
        bad_name
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("DNS-1123")),
        "{bad_name:?}"
    );
    let broken = running.state.member("broken").expect("tracked");
    assert!(
        broken
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("kubeconfig")),
        "{broken:?}"
    );
    wait_ready(&running).await;

    // The same ns/name from two members: two ISEs, each in its member's namespace only.
    export_and_wait(&fleet, "alpha", "shop", "cart").await;
    export_and_wait(&fleet, "beta", "shop", "cart").await;
    assert_eq!(ise_names(&fleet, "alpha").await, vec!["shop-cart"]);
    assert_eq!(ise_names(&fleet, "beta").await, vec!["shop-cart"]);
    assert!(
        ise_names(&fleet, "gamma").await.is_empty(),
        "gamma is not a member yet"
    );

    // /members and /readyz over HTTP.
    let body = http_get_body(running.health_address, "/members").await;
    assert!(
        body.contains("\"alpha\"") && body.contains("\"ready\""),
        "{body}"
    );
    assert!(
        http_get_body(running.health_address, "/readyz")
            .await
            .starts_with("ok")
    );

    // A member joins at runtime: its file appears.
    // gamma joins the way a mounted Secret presents it: `gamma.yaml -> ..data/gamma.yaml`,
    // `..data -> ..<timestamp>`.
    let gamma_kubeconfig =
        std::fs::read_to_string(fleet.member("gamma").kubeconfig_path()).expect("read");
    secret_swap(&dir, "..2026_12_02_a", "gamma.yaml", &gamma_kubeconfig);
    std::os::unix::fs::symlink("..data/gamma.yaml", dir.join("gamma.yaml")).expect("link");
    wait_phase(&running, "gamma", Phase::Ready).await;
    export_and_wait(&fleet, "gamma", "shop", "cart").await;

    // A member leaves: its watches stop; what it exported stays (no --cleanup-on-remove).
    std::fs::remove_file(dir.join("beta.yaml")).expect("remove");
    eventually("beta gone", || async {
        running.state.member("beta").is_none().then_some(())
    })
    .await;
    let beta = fleet.member("beta").client().await.expect("beta client");
    create_service(&beta, &service("shop", "after-leave", 80)).await;
    create_export(&beta, "shop", "after-leave", &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ise_names(&fleet, "beta").await,
        vec!["shop-cart"],
        "a removed member is not reconciled"
    );

    // Rotation: new content for alpha (a fresh scoped-free copy with another token order is
    // enough: the hash changes) re-engages alpha only.
    let before_alpha = running
        .state
        .member("alpha")
        .expect("alpha")
        .kubeconfig_hash;
    let before_gamma = running.state.member("gamma").expect("gamma").since;
    let rotated = std::fs::read_to_string(dir.join("alpha.yaml")).expect("read") + "\n# rotated\n";
    std::fs::write(dir.join(".alpha.new"), rotated).expect("write");
    std::fs::rename(dir.join(".alpha.new"), dir.join("alpha.yaml")).expect("swap");
    eventually("alpha re-engaged", || async {
        running
            .state
            .member("alpha")
            .filter(|m| m.kubeconfig_hash != before_alpha && m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    assert_eq!(
        running.state.member("gamma").expect("gamma").since,
        before_gamma,
        "gamma untouched by alpha's rotation"
    );
    export_and_wait(&fleet, "alpha", "shop", "after-rotation").await;

    // A Secret update: the kubelet swaps `..data` atomically; gamma alone is re-engaged.
    let before_gamma = running
        .state
        .member("gamma")
        .expect("gamma")
        .kubeconfig_hash;
    secret_swap(
        &dir,
        "..2026_12_02_b",
        "gamma.yaml",
        &format!("{gamma_kubeconfig}\n# rotated\n"),
    );
    eventually("gamma re-engaged after the symlink swap", || async {
        running
            .state
            .member("gamma")
            .filter(|m| m.kubeconfig_hash != before_gamma && m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    export_and_wait(&fleet, "gamma", "shop", "after-swap").await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_on_remove_and_leader_election() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha"]);
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", "fleetnet-system")
        .await
        .expect("ns");
    let mut cfg = config(&fleet, &dir);
    cfg.runtime.cleanup_on_remove = true;
    cfg.leader_election = Some(LeaderElection {
        namespace: "fleetnet-system".into(),
        name: "fleetnet-hub".into(),
        identity: "replica-a".into(),
        shard_members: false,
        shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
    });
    let mut standby_cfg = cfg.clone();
    standby_cfg.leader_election = Some(LeaderElection {
        namespace: "fleetnet-system".into(),
        name: "fleetnet-hub".into(),
        identity: "replica-b".into(),
        shard_members: false,
        shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
    });

    let leader = app::start(cfg, Extensions::default())
        .await
        .expect("starts");
    eventually("replica-a leads", || async {
        leader.claim.may_write().then_some(())
    })
    .await;
    let standby = app::start(standby_cfg, Extensions::default())
        .await
        .expect("standby starts");
    wait_phase(&standby, "alpha", Phase::Ready).await;
    assert!(!standby.claim.may_write(), "one leader at a time");
    export_and_wait(&fleet, "alpha", "ns1", "web").await;

    // The leader stops (releasing its lease): the standby takes over and keeps exporting.
    leader.shutdown().await;
    eventually("replica-b leads", || async {
        standby.claim.may_write().then_some(())
    })
    .await;
    export_and_wait(&fleet, "alpha", "ns1", "after-failover").await;

    // --cleanup-on-remove: the member's ISEs go, its finalizers too.
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove");
    let hub_ns = fleet.hub_namespace("alpha");
    wait_ise_gone(&hub, &hub_ns, "ns1-web").await;
    wait_ise_gone(&hub, &hub_ns, "ns1-after-failover").await;
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    eventually("finalizers removed", || {
        let api = exports(&alpha, "ns1");
        async move {
            let list = api.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|se| se.metadata.finalizers.is_none())
                .then_some(())
        }
    })
    .await;
    standby.shutdown().await;
}

/// `--cleanup-on-remove` survives a restart: a member removed while its API server is down has
/// its hub exports withdrawn and its cleanup recorded in the hub (its finalizers cannot be
/// reached); the pending cleanup shows on `/members` and in `fleetnet_member_cleanups_pending`;
/// the process restarts, the member answers again, and the new process removes the finalizers
/// from the record and deletes the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_cleanup_is_finished_after_a_restart() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, ListParams};
    let mut fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    let hub = fleet.hub().client().await.expect("hub client");
    let mut cfg = config(&fleet, &dir);
    cfg.runtime.cleanup_on_remove = true;
    cfg.runtime.rescan_interval = Duration::from_secs(2);
    let running = app::start(cfg.clone(), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    export_and_wait(&fleet, "alpha", "ns1", "web").await;

    fleet.member_mut("alpha").stop();
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove");
    wait_ise_gone(&hub, &fleet.hub_namespace("alpha"), "ns1-web").await;
    let records: Api<Secret> = Api::namespaced(hub.clone(), &cfg.runtime.records_namespace);
    let selector = ListParams::default().labels("fleetnet.azure.com/cleanup-of=fleetnet-hub");
    let error = within(
        Duration::from_secs(90),
        "the cleanup pending, recorded and shown",
        || async {
            let error = running.state.cleanups().get("alpha")?.clone()?;
            let recorded = records.list(&selector).await.ok()?.items.len() == 1;
            let metrics = http_get_body(running.metrics_address, "/metrics").await;
            let counted = sample(&metrics, "fleetnet_member_cleanups_pending") == Some(1.0);
            (recorded && counted).then_some(error)
        },
    )
    .await;
    let members: serde_json::Value =
        serde_json::from_str(&http_get_body(running.health_address, "/members").await)
            .expect("/members is JSON");
    assert_eq!(
        members["pendingCleanups"]["alpha"],
        error.as_str(),
        "{members}"
    );
    assert!(error.contains("finalizers left in place"), "{error}");
    running.shutdown().await;

    fleet.member_mut("alpha").start().await.expect("alpha back");
    let restarted = app::start(cfg, Extensions::default())
        .await
        .expect("restarts");
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    within(
        Duration::from_secs(90),
        "finalizers removed by the restarted process",
        || {
            let api = exports(&alpha, "ns1");
            async move {
                let list = api.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .all(|se| !se.has_cleanup_finalizer())
                    .then_some(())
            }
        },
    )
    .await;
    within(Duration::from_secs(30), "the record deleted", || async {
        let left = records.list(&selector).await.ok()?.items.len();
        (left == 0 && restarted.state.cleanups().is_empty()).then_some(())
    })
    .await;
    wait_phase(&restarted, "beta", Phase::Ready).await;
    restarted.shutdown().await;
}

/// A quiet fleet does not read its kubeconfig directory over and over: opening a file is an
/// inotify event too, and each rescan's own reads once started the next (a thousand members
/// cost a replica 0.3 CPU-s/s doing nothing). With the periodic rescan a minute away, a quiet
/// window of 6 s has no scan at all; a changed file still starts one at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_directory_is_not_read_again_until_something_changes() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha"]);
    let mut cfg = config(&fleet, &dir);
    cfg.runtime.rescan_interval = Duration::from_secs(60);
    let running = app::start(cfg, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    let scans = || async {
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        sample(&metrics, "fleetnet_kubeconfig_scans_total").expect("the scan counter")
    };
    let before = scans().await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let quiet = scans().await;
    assert_eq!(
        quiet,
        before,
        "scans in a quiet window of 6 s: {}",
        quiet - before
    );
    add_member(&fleet, &dir, "beta");
    wait_phase(&running, "beta", Phase::Ready).await;
    assert!(scans().await > quiet, "a new file is read");
    running.shutdown().await;
}

/// A member removed while reconciles of it wait for hub tokens: once it is gone from the
/// fleet and its reconciles have ended, `/metrics` has no series of it, and none comes back
/// (a reconcile finishing after the removal used to recreate them, the in-flight gauge at -1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_mid_reconcile_leaves_no_series_behind() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    let mut cfg = config(&fleet, &dir);
    // Slow hub writes: alpha's reconciles wait in flight for tokens.
    cfg.hub_limits.qps = 1.0;
    cfg.hub_limits.burst = 1;
    let running = app::start(cfg, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    wait_phase(&running, "beta", Phase::Ready).await;
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    namespace(&alpha, "shop").await;
    for i in 0..20 {
        let name = format!("svc-{i}");
        create_service(&alpha, &service("shop", &name, 80)).await;
        create_export(&alpha, "shop", &name, &[]).await;
    }
    eventually("a reconcile of alpha in flight", || async {
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        (sample(&metrics, r#"fleetnet_reconciles_in_flight{member="alpha"}"#) >= Some(1.0))
            .then_some(())
    })
    .await;
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove");
    eventually("alpha gone", || async {
        running.state.member("alpha").is_none().then_some(())
    })
    .await;
    let alpha_lines = |metrics: &str| -> Vec<String> {
        metrics
            .lines()
            .filter(|l| l.contains(r#"member="alpha""#))
            .map(str::to_string)
            .collect()
    };
    // Its engagement stops within the drain period (15 s); then nothing of alpha is left.
    within(Duration::from_secs(30), "alpha's series gone", || async {
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        alpha_lines(&metrics).is_empty().then_some(())
    })
    .await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        let back = alpha_lines(&metrics);
        assert!(back.is_empty(), "alpha's series came back: {back:#?}");
        let negative: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("fleetnet_reconciles_in_flight") && l.ends_with(" -1"))
            .collect();
        assert!(negative.is_empty(), "{negative:?}");
    }
    let metrics = http_get_body(running.metrics_address, "/metrics").await;
    assert!(
        sample(
            &metrics,
            r#"fleetnet_member_state{member="beta",state="ready"}"#
        ) == Some(1.0),
        "beta kept"
    );
    running.shutdown().await;
}
