//! What arrives late: a public IP listed after the Service, a member's apiserver back after
//! 20 s down.

use super::*;

// ---------------------------------------------------------------------------------------------
// 6. A public IP listed late.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_ip_that_appears_later_reaches_the_ise_without_a_service_change() {
    const M: &str = "east";
    const SUB: &str = "00000000-0000-0000-0000-0000000000e1";
    const RG: &str = "mc_east";
    const IP: &str = "20.0.0.9";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    let arm = FakeArm::start().await;
    // The group exists, the address is not in it yet.
    arm.set_ips(SUB, RG, vec![FakeIp::new("pip-other", "20.0.0.1")]);

    let config_path = fleet.scratch_dir().join("members.yaml");
    std::fs::write(
        &config_path,
        format!("members:\n  {M}:\n    azureSubscriptionId: {SUB}\n    azureResourceGroup: {RG}\n"),
    )
    .expect("member config");
    let azure = AzureFleet::new(AzureConfig {
        cache_ttl: Duration::from_secs(2),
        miss_refresh_interval: Duration::from_secs(1),
        ..arm::client_secret_config(&arm)
    })
    .expect("azure client");
    let counters = azure.stats_handle();
    let dir = kubeconfig_dir(&fleet, "restart-kubeconfigs", &[M]);
    let config = config_builder(&fleet, &dir)
        .member_config(Some(config_path.clone()))
        .traffic_manager(true)
        .build()
        .expect("member config parses");
    let members = AzureMembers::new(
        azure,
        config.runtime.member_config.clone(),
        "unused-default-rg".into(),
    );
    let running = app::start(
        config,
        Extensions {
            azure: Some(Arc::new(members)),
            azure_counters: Some(Arc::new(move || counters.snapshot())),
            ..Default::default()
        },
    )
    .await
    .expect("starts");
    wait_app_ready(&running, &[M]).await;

    // A LoadBalancer with its ingress IP, then its export.
    namespace(&member, "web").await;
    let mut svc = service("web", "front", 80);
    svc.spec.as_mut().expect("spec").type_ = Some("LoadBalancer".into());
    create_service(&member, &svc).await;
    let svc = assign_ingress(&member, "web", "front", IP).await;
    create_export(&member, "web", "front", &[]).await;
    wait_ise(&hub, &hub_ns, "web-front", |_| true).await;
    // The ingress IP was seen and looked up (not found): the export stands without it.
    within(
        Duration::from_secs(30),
        "the ingress IP looked up",
        || async { (arm.list_operations(SUB, RG) >= 1).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ise = ises(&hub, &hub_ns).get("web-front").await.expect("ISE");
    assert_eq!(ise.spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(
        ise.spec.public_ip_resource_id, None,
        "the address is not listed yet"
    );
    let se_version = exports(&member, "web")
        .get("front")
        .await
        .expect("ServiceExport")
        .metadata
        .resource_version;

    tokio::time::sleep(Duration::from_secs(20)).await;
    let lists_before = arm.list_operations(SUB, RG);
    arm.add_ip(SUB, RG, FakeIp::new("pip-front", IP));
    let added = Instant::now();
    let ise = within(
        Duration::from_secs(90),
        "publicIPResourceID on the ISE",
        || {
            let api = ises(&hub, &hub_ns);
            async move {
                api.get_opt("web-front")
                    .await
                    .ok()
                    .flatten()
                    .filter(|i| i.spec.public_ip_resource_id.is_some())
            }
        },
    )
    .await;
    println!(
        "[restart] public IP reached the ISE {:?} after it was listed ({} LISTs before, {} after)",
        added.elapsed(),
        lists_before,
        arm.list_operations(SUB, RG)
    );
    assert_eq!(
        ise.spec.public_ip_resource_id.as_deref(),
        Some(
            format!(
                "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/publicIPAddresses/pip-front"
            )
            .as_str()
        )
    );
    // Nobody changed the Service; the ServiceExport's spec/metadata neither.
    let now = Api::<Service>::namespaced(member.clone(), "web")
        .get("front")
        .await
        .expect("Service");
    assert_eq!(now.metadata.resource_version, svc.metadata.resource_version);
    let se = exports(&member, "web")
        .get("front")
        .await
        .expect("ServiceExport");
    println!(
        "[restart] ServiceExport resourceVersion {:?} -> {:?} (status only, if at all)",
        se_version, se.metadata.resource_version
    );
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 7. A member's apiserver down for 20 s.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_apiserver_down_20s_is_ready_within_10s_of_its_return() {
    let mut fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    let beta = fleet.member("beta").client().await.expect("beta client");
    for c in [&alpha, &beta] {
        namespace(c, NS).await;
    }
    let running = app::start(
        app_config(
            &fleet,
            &kubeconfig_dir(&fleet, "restart-kubeconfigs", &["alpha", "beta"]),
        ),
        Extensions::default(),
    )
    .await
    .expect("starts");
    wait_app_ready(&running, &["alpha", "beta"]).await;
    create_pairs(&alpha, NS, vec!["before".into()]).await;
    create_pairs(&beta, NS, vec!["before".into()]).await;
    wait_ise(&hub, &fleet.hub_namespace("alpha"), "work-before", |_| true).await;
    wait_ise(&hub, &fleet.hub_namespace("beta"), "work-before", |_| true).await;

    fleet.member_mut("alpha").stop();
    let stopped = Instant::now();
    // beta keeps exporting while alpha is down.
    create_pairs(&beta, NS, vec!["during".into()]).await;
    wait_ise(&hub, &fleet.hub_namespace("beta"), "work-during", |_| true).await;
    println!(
        "[restart] beta exported {:?} into alpha's outage",
        stopped.elapsed()
    );
    let mut phases = BTreeSet::new();
    while stopped.elapsed() < Duration::from_secs(20) {
        if let Some(s) = running.state.member("alpha") {
            phases.insert(s.phase.as_str());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("[restart] alpha's phases during the outage: {phases:?}");

    fleet.member_mut("alpha").start().await.expect("alpha back");
    let back = Instant::now();
    // The apiserver serves again: a new export right away (retried should it refuse at first).
    let mut refusals = 0;
    loop {
        let svc = Api::<Service>::namespaced(alpha.clone(), NS)
            .create(&PostParams::default(), &service(NS, "after", 80))
            .await;
        match svc {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => break,
            Err(e) => {
                refusals += 1;
                assert!(
                    back.elapsed() < Duration::from_secs(30),
                    "create Service: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    loop {
        let se = fleetnet_hub::api::ServiceExport::new(NS, "after", Default::default());
        match exports(&alpha, NS)
            .create(&PostParams::default(), &se)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => break,
            Err(e) => {
                refusals += 1;
                assert!(
                    back.elapsed() < Duration::from_secs(30),
                    "create ServiceExport: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    if refusals > 0 {
        println!("[restart] alpha refused {refusals} creations right after its return");
    }
    let created_after = back.elapsed();
    // Both measured from the return, independently; observed for up to 60 s so that a late
    // recovery is reported with its time.
    let hub_api = ises(&hub, &fleet.hub_namespace("alpha"));
    let (mut ready_after, mut exported_after) = (None, None);
    while back.elapsed() < Duration::from_secs(60)
        && (ready_after.is_none() || exported_after.is_none())
    {
        if ready_after.is_none()
            && running
                .state
                .member("alpha")
                .is_some_and(|m| m.phase == Phase::Ready)
        {
            ready_after = Some(back.elapsed());
        }
        if exported_after.is_none() && matches!(hub_api.get_opt("work-after").await, Ok(Some(_))) {
            exported_after = Some(back.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown().await;
    let report = format!(
        "after alpha's return: export created at {created_after:?}, ready at {ready_after:?}, \
         exported at {exported_after:?} (None: not within 60 s)"
    );
    println!("[restart] {report}");
    let limit = Duration::from_secs(10);
    assert!(
        ready_after.is_some_and(|t| t <= limit) && exported_after.is_some_and(|t| t <= limit),
        "alpha not served within {limit:?} of its apiserver's return: {report}"
    );
}
