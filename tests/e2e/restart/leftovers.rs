//! What is left on the hub: dangling ISEs are removed (another member's are not), and only a
//! cleanup record the controller wrote itself is acted on.

use super::*;

// ---------------------------------------------------------------------------------------------
// 4. Dangling ISEs.
// ---------------------------------------------------------------------------------------------

/// An ISE as a member exporter would write it, for `cluster_id`'s `ns/name`.
fn hand_made_ise(hub_ns: &str, cluster_id: &str, ns: &str, name: &str) -> InternalServiceExport {
    InternalServiceExport {
        api_version: Some("networking.fleet.azure.com/v1alpha1".into()),
        kind: Some("InternalServiceExport".into()),
        metadata: ObjectMeta {
            name: Some(format!("{ns}-{name}")),
            namespace: Some(hub_ns.into()),
            ..Default::default()
        },
        spec: InternalServiceExportSpec {
            ports: vec![IsePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                ..Default::default()
            }],
            service_reference: ExportedObjectReference {
                cluster_id: cluster_id.into(),
                kind: "Service".into(),
                namespace: ns.into(),
                name: name.into(),
                resource_version: "12345".into(),
                generation: 0,
                uid: "00000000-0000-0000-0000-00000000abcd".into(),
                namespaced_name: format!("{ns}/{name}"),
                api_version: Some("v1".into()),
                exported_since: Some(Time(jiff::Timestamp::now())),
            },
            ..Default::default()
        },
        status: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_ise_is_removed_and_another_members_is_not() {
    const M: &str = "m1";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let running = started_in_process(&fleet, M).await;
    // A real export, to know the product is at work (and must keep it).
    create_pairs(&member, NS, vec!["real".into()]).await;
    wait_ise(&hub, &hub_ns, "work-real", |_| true).await;

    let api = ises(&hub, &hub_ns);
    let created = Instant::now();
    api.create(
        &PostParams::default(),
        &hand_made_ise(&hub_ns, M, NS, "ghost"),
    )
    .await
    .expect("create dangling ISE");
    api.create(
        &PostParams::default(),
        &hand_made_ise(&hub_ns, "someone-else", NS, "other"),
    )
    .await
    .expect("create another member's ISE");
    let gone = within(Duration::from_secs(90), "work-ghost deleted", || {
        let api = api.clone();
        async move {
            api.get_opt("work-ghost")
                .await
                .ok()
                .and_then(|o| o.is_none().then(|| created.elapsed()))
        }
    })
    .await;
    println!("[restart] dangling ISE deleted {gone:?} after it was created");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other = api.get_opt("work-other").await.expect("get");
    assert!(
        other.is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
        "another member's ISE is not ours to delete"
    );
    assert!(
        api.get_opt("work-real").await.expect("get").is_some(),
        "the real export stays"
    );
    running.shutdown().await;
}

/// Issue #40 item 8: cleanup is triggered only by a record the controller wrote itself, and a
/// removed member's credentials go once its cleanup is done. A Secret planted in the records'
/// namespace with the records' label and shape (member `beta`, which this process does not
/// run, and whose hub namespace holds an export) is ignored rescan after rescan: beta's export
/// stays. Then member alpha's kubeconfig is removed: its signed record is written, the cleanup
/// runs, and the record (alpha's kubeconfig) is deleted; the record key Secret stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_cleanup_record_is_not_acted_on_and_a_real_one_is_deleted_when_done() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ListParams;
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    let dir = kubeconfig_dir(&fleet, "restart-kubeconfigs", &["alpha"]);
    let mut config = app_config(&fleet, &dir);
    config.runtime.cleanup_on_remove = true;
    config.runtime.rescan_interval = Duration::from_secs(1);
    let records: Api<Secret> = Api::namespaced(hub.clone(), &config.runtime.records_namespace);
    let prefix = config.runtime.records_prefix.clone();

    // Beta's export, written by whatever serves beta (not this process).
    let beta_ns = fleet.hub_namespace("beta");
    ises(&hub, &beta_ns)
        .create(
            &PostParams::default(),
            &hand_made_ise(&beta_ns, "beta", NS, "web"),
        )
        .await
        .expect("beta's ISE");
    // The planted record: the records' label, name and shape, a MAC made up.
    let planted = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}-cleanup-beta-planted")),
            labels: Some([("fleetnet.azure.com/cleanup-of".to_string(), prefix.clone())].into()),
            annotations: Some(
                [("fleetnet.azure.com/member".to_string(), "beta".to_string())].into(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "mac".to_string(),
            ByteString(vec![0; 32]),
        )])),
        ..Default::default()
    };
    records
        .create(&PostParams::default(), &planted)
        .await
        .expect("plant");

    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_app_ready(&running, &["alpha"]).await;
    namespace(&alpha, NS).await;
    create_service(&alpha, &service(NS, "web", 80)).await;
    create_export(&alpha, NS, "web", &[]).await;
    let alpha_ns = fleet.hub_namespace("alpha");
    wait_ise(&hub, &alpha_ns, &format!("{NS}-web"), |_| true).await;
    // Several rescans (1 s apart) have listed the planted record by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let beta_exported = || async {
        ises(&hub, &beta_ns)
            .get_opt(&format!("{NS}-web"))
            .await
            .expect("get beta's ISE")
            .is_some()
    };
    assert!(
        beta_exported().await,
        "beta's export must not be withdrawn on a planted record"
    );
    assert!(
        running.state.cleanups().is_empty(),
        "a planted record is no pending cleanup: {:?}",
        running.state.cleanups()
    );
    let planted_name = planted.metadata.name.clone().unwrap_or_default();
    assert!(
        records.get_opt(&planted_name).await.expect("get").is_some(),
        "nothing acted on it, not even its deletion"
    );

    // Alpha removed: its record is written (signed), acted on, and deleted when done.
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove alpha");
    wait_ise_gone(&hub, &alpha_ns, &format!("{NS}-web")).await;
    let selector = ListParams::default().labels(&format!("fleetnet.azure.com/cleanup-of={prefix}"));
    within(
        Duration::from_secs(60),
        "alpha's finalizers removed and its record (its kubeconfig) deleted",
        || async {
            let left: Vec<String> = records
                .list(&selector)
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect();
            let finalized = exports(&alpha, NS)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .iter()
                .all(|se| !se.has_cleanup_finalizer());
            (left == [planted_name.clone()] && finalized && running.state.cleanups().is_empty())
                .then_some(())
        },
    )
    .await;
    let key = records
        .get_opt(&format!("{prefix}-record-key"))
        .await
        .expect("get key")
        .expect("the record key Secret was created on first need");
    assert_eq!(key.immutable, Some(true));
    assert!(beta_exported().await, "beta's export still there");
    running.shutdown().await;
}
