//! A member's hub namespace from the member config (`hubNamespace`), when it is not
//! `<prefix><member>`: its exports land there, and a changed setting moves the member.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_writes_into_the_hub_namespace_its_settings_name() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", "team-alpha")
        .await
        .expect("namespace");
    let settings = fleet.scratch_dir().join("members.yaml");
    std::fs::write(
        &settings,
        "members:\n  alpha:\n    hubNamespace: team-alpha\n",
    )
    .expect("write");
    let dir = member_dir(&fleet, &["alpha"]);
    let config = config_builder(&fleet, &dir)
        .member_config(Some(settings.clone()))
        .rescan_interval(Duration::from_secs(1))
        .build()
        .expect("config");
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;

    let member = fleet.member("alpha").client().await.expect("member client");
    namespace(&member, "shop").await;
    create_service(&member, &service("shop", "cart", 80)).await;
    create_export(&member, "shop", "cart", &[]).await;
    wait_ise(&hub, "team-alpha", "shop-cart", |i| {
        i.spec.service_reference.cluster_id == "alpha"
    })
    .await;
    assert!(
        ise_names(&fleet, "alpha").await.is_empty(),
        "nothing in the default namespace"
    );

    // The setting removed: the member is re-engaged into `<prefix><member>`.
    std::fs::write(&settings, "members: {}\n").expect("write");
    wait_ise(&hub, &fleet.hub_namespace("alpha"), "shop-cart", |i| {
        i.spec.service_reference.cluster_id == "alpha"
    })
    .await;
    running.shutdown().await;
}
