//! Every branch of fleet-networking's EndpointSlice and EndpointSliceExport controllers, and
//! both exporters together with the hub's verdict on the ISE.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slices_follow_every_branch_of_the_reference_controllers() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, slices_only()).await;

    // Never exported: IPv6, no Service label, a Service without ServiceExport, an invalid and
    // a conflicted ServiceExport.
    export_with(&member, "web", "True", "False").await;
    export_with(&member, "bad", "False", "False").await;
    export_with(&member, "fight", "True", "True").await;
    let mut v6 = endpoint_slice(NS, "web-v6", "web", &["fd00::1"]);
    v6.address_type = "IPv6".into();
    let mut unlabelled = endpoint_slice(NS, "loose", "web", &["10.0.9.1"]);
    unlabelled.metadata.labels = None;
    for s in [
        v6,
        unlabelled,
        endpoint_slice(NS, "nope-1", "nope", &["10.0.9.2"]),
        endpoint_slice(NS, "bad-1", "bad", &["10.0.9.3"]),
        endpoint_slice(NS, "fight-1", "fight", &["10.0.9.4"]),
    ] {
        create_slice(&member, &s).await;
    }

    // Exported: ready addresses only, named `<member>-<ns>-<name>-<5>`, every reference field.
    let mut web1 = endpoint_slice(NS, "web-1", "web", &["10.0.0.1", "10.0.0.2"]);
    web1.endpoints.get_or_insert_with(Vec::new).push(
        serde_json::from_value(json!({"addresses": ["10.0.0.3"], "conditions": {"ready": false}}))
            .expect("endpoint"),
    );
    create_slice(&member, &web1).await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
    let slice = get_slice(&member, "web-1").await;
    let unique = unique_name_of(&slice).expect("a unique name");
    assert!(unique.starts_with("m1-work-web-1-"), "{unique}");
    assert_eq!(unique.len(), "m1-work-web-1-".len() + 5, "{unique}");
    assert_eq!(ese.metadata.name.as_deref(), Some(unique.as_str()));
    assert_eq!(exported_addresses(&ese), ["10.0.0.1", "10.0.0.2"]);
    let r = &ese.spec.endpoint_slice_reference;
    assert_eq!(r.cluster_id, M);
    // The reference's client leaves TypeMeta empty: so does its export's reference.
    assert_eq!((r.kind.as_str(), r.api_version.as_deref()), ("", None));
    assert_eq!(r.namespaced_name, "work/web-1");
    assert_eq!(Some(&r.uid), slice.metadata.uid.as_ref());
    assert_eq!(
        Some(&r.resource_version),
        slice.metadata.resource_version.as_ref()
    );
    assert_eq!(Some(r.generation), slice.metadata.generation);
    assert!(r.exported_since.is_some());
    assert_eq!(ese.spec.address_type, "IPv4");
    assert_eq!(ese.spec.owner_service_reference.namespaced_name, "work/web");
    assert_eq!(ese.spec.ports[0].port, Some(80));
    let after_export = settled_writes(&member, &hub, Duration::from_secs(2)).await;

    for skipped in ["web-v6", "loose", "nope-1", "bad-1", "fight-1"] {
        assert!(
            exports_of_slice(&hub, &hub_ns, NS, skipped)
                .await
                .is_empty(),
            "{skipped} exported"
        );
        assert_eq!(
            unique_name_of(&get_slice(&member, skipped).await),
            None,
            "{skipped} named"
        );
    }

    // An endpoint change: one hub write, nothing in the member.
    let hub_before = writes(&hub, "endpointsliceexports").await;
    set_endpoints(&member, "web-1", &["10.0.0.1", "10.0.0.2", "10.0.0.4"]).await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        exported_addresses(e).len() == 3
    })
    .await;
    let after_change = settled_writes(&member, &hub, Duration::from_secs(2)).await;
    // `set_endpoints` itself is one member write; the new generation is stamped on the slice
    // (the reference's last-seen annotations), then the export follows.
    assert_eq!(
        after_change - after_export,
        3.0,
        "an endpoint change costs one member and one hub write"
    );
    assert_eq!(writes(&hub, "endpointsliceexports").await - hub_before, 1.0);
    assert_ne!(
        ese.spec.endpoint_slice_reference.exported_since, None,
        "exportedSince kept"
    );

    // A tampered name: a new one, and the export under the old name goes.
    set_unique_name(&member, "web-1", "Not_A_DNS_Name").await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        e.metadata.name.as_deref() != Some(unique.as_str())
    })
    .await;
    let renamed = ese.metadata.name.clone().expect("name");
    assert!(renamed.starts_with("m1-work-web-1-"), "{renamed}");
    eventually("web-1 annotated with its new name", || async {
        (unique_name_of(&get_slice(&member, "web-1").await).as_deref() == Some(renamed.as_str()))
            .then_some(())
    })
    .await;

    // A name another slice's export holds: web-2 given web-1's name gets its own.
    create_slice(&member, &endpoint_slice(NS, "web-2", "web", &["10.0.1.1"])).await;
    wait_slice_export(&hub, &hub_ns, NS, "web-2", |_| true).await;
    set_unique_name(&member, "web-2", &renamed).await;
    eventually("web-2 renamed away from web-1's name", || async {
        let name = unique_name_of(&get_slice(&member, "web-2").await)?;
        (name != renamed && name.starts_with("m1-work-web-2-")).then_some(())
    })
    .await;
    let web2 = wait_slice_export(&hub, &hub_ns, NS, "web-2", |_| true).await;
    let web1 = wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
    assert_eq!(web1.metadata.name.as_deref(), Some(renamed.as_str()));
    assert_ne!(web2.metadata.name, web1.metadata.name);

    // Orphans: an export of a slice that does not exist, and a second export of web-1 under a
    // name web-1 does not carry; both go. Another member's namespace is never looked at.
    let mut ghost = web1.clone();
    ghost.metadata = Default::default();
    ghost.metadata.name = Some("m1-work-ghost-aaaaa".into());
    ghost.spec.endpoint_slice_reference.name = "ghost".into();
    ghost.spec.endpoint_slice_reference.namespaced_name = "work/ghost".into();
    ghost.spec.endpoint_slice_reference.uid = "00000000-0000-0000-0000-00000000beef".into();
    let mut copy = web1.clone();
    copy.metadata = Default::default();
    copy.metadata.name = Some("m1-work-web-1-zzzzz".into());
    for e in [&ghost, &copy] {
        slice_exports(&hub, &hub_ns)
            .create(&PostParams::default(), e)
            .await
            .expect("hand-made export");
    }
    wait_gone(&slice_exports(&hub, &hub_ns), "m1-work-ghost-aaaaa").await;
    wait_gone(&slice_exports(&hub, &hub_ns), "m1-work-web-1-zzzzz").await;
    wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        e.metadata.name.as_deref() == Some(renamed.as_str())
    })
    .await;

    // Unexport when the ServiceExport is conflicted, invalid; export again once it is not.
    for (valid, conflict) in [("True", "True"), ("False", "False")] {
        set_verdict(&member, "web", valid, conflict).await;
        wait_slice_unexported(&hub, &hub_ns, NS, "web-1").await;
        wait_slice_unexported(&hub, &hub_ns, NS, "web-2").await;
        wait_unnamed(&member, "web-1").await;
        wait_unnamed(&member, "web-2").await;
        set_verdict(&member, "web", "True", "False").await;
        wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
        wait_slice_export(&hub, &hub_ns, NS, "web-2", |_| true).await;
    }

    // The slice deleted: its export goes.
    slices(&member, NS)
        .delete("web-2", &DeleteParams::default())
        .await
        .expect("delete web-2");
    wait_slice_unexported(&hub, &hub_ns, NS, "web-2").await;

    // The ServiceExport deleted: web-1 withdrawn, its name removed.
    exports(&member, NS)
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete ServiceExport");
    wait_slice_unexported(&hub, &hub_ns, NS, "web-1").await;
    wait_unnamed(&member, "web-1").await;

    // A quiet minute's worth (a few seconds here): nothing written.
    let settled = settled_writes(&member, &hub, Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        slice_writes(&member, &hub).await,
        settled,
        "writes while quiet"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_exporters_a_service_and_its_slice_reach_the_hub() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, Controllers::default()).await;

    create_service(&member, &service(NS, "api", 80)).await;
    create_export(&member, NS, "api", &[]).await;
    create_slice(&member, &endpoint_slice(NS, "api-1", "api", &["10.1.0.1"])).await;
    wait_ise(&hub, &hub_ns, "work-api", |_| true).await;
    // Valid but pending the hub's verdict: not exported yet.
    wait_condition(
        &member,
        NS,
        "api",
        "Conflict",
        "Unknown",
        "ServicePendingConflictResolution",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        exports_of_slice(&hub, &hub_ns, NS, "api-1")
            .await
            .is_empty()
    );

    // The hub's verdict, as fleet-networking's hub controller writes it onto the ISE.
    ises(&hub, &hub_ns)
        .patch_status(
            "work-api",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [{
                "type": "Conflict", "status": "False", "reason": "NoConflictFound",
                "message": "no conflict", "lastTransitionTime": "2026-12-05T00:00:00Z",
                "observedGeneration": 1
            }]}})),
        )
        .await
        .expect("hub verdict");
    let ese = wait_slice_export(&hub, &hub_ns, NS, "api-1", |_| true).await;
    assert_eq!(exported_addresses(&ese), ["10.1.0.1"]);
    assert_eq!(ese.spec.owner_service_reference.name, "api");
    running.shutdown().await;
}
