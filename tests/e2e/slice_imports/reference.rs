//! fleet-networking's EndpointSliceImport controller specs, one by one, against the binary's
//! job; plus drift (an imported slice edited or deleted in the member is put back), which the
//! job watches for where the reference waits for a resync.

use super::*;

/// Specs "no matching multiclusterservice", "no valid derived service (bad label)",
/// "(not exist)" and "(deleted)": nothing is imported, the import is not touched; then the
/// derived Service appears and the import, retried, goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_derived_service_nothing_is_imported_until_there_is_one() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS, FLEET_NS]).await;
    let running = start(&fleet).await;
    create_import(&hub, &hub_ns, &import_of(&hub_ns, IMPORT, false)).await;
    // No MultiClusterService.
    nothing_imported_for(&member, Duration::from_secs(2)).await;
    // A MultiClusterService whose derived-service label is empty (tampered).
    create_mcs(&member, Some("")).await;
    nothing_imported_for(&member, Duration::from_secs(2)).await;
    // A valid label, no such Service.
    label_mcs(&member, "work-app-none").await;
    nothing_imported_for(&member, Duration::from_secs(2)).await;
    // The Service being deleted (held by a finalizer); made and deleted before it is named,
    // so that no reconcile sees it live in between.
    create_derived(&member, Some("networking.fleet.azure.com/test")).await;
    let services = Api::<Service>::namespaced(member.clone(), FLEET_NS);
    services
        .delete(DERIVED, &DeleteParams::default())
        .await
        .expect("delete derived Service");
    label_mcs(&member, DERIVED).await;
    nothing_imported_for(&member, Duration::from_secs(2)).await;
    let untouched = imports(&hub, &hub_ns).get(IMPORT).await.expect("import");
    assert_eq!(
        untouched.metadata.finalizers, None,
        "no finalizer before an import"
    );
    // The Service gone, then made again: the waiting import goes through.
    services
        .patch(
            DERIVED,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release derived Service");
    wait_gone(&services, DERIVED).await;
    create_derived(&member, None).await;
    eventually("imported once the derived Service exists", || {
        processed(&hub, &hub_ns, IMPORT)
    })
    .await;
    assert!(addresses(&member, IMPORT).await.is_some());
    running.shutdown().await;
}

/// Spec "import endpointslice" (and the hybrid-protocol one): the slice with the two labels,
/// the address type, ports and endpoints; the finalizer and the observed generation on the
/// import; one data point, a first import. Then a new generation (update), drift repaired,
/// and the import deleted: the slice deleted, the finalizer removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_is_written_kept_updated_and_withdrawn_as_the_reference_does() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS, FLEET_NS]).await;
    create_mcs(&member, Some(DERIVED)).await;
    create_derived(&member, None).await;
    let running = start(&fleet).await;
    let mut import = import_of(&hub_ns, IMPORT, false);
    create_import(&hub, &hub_ns, &import).await;
    eventually("processed", || processed(&hub, &hub_ns, IMPORT)).await;
    let slice = imported(&member).get(IMPORT).await.expect("imported slice");
    let wanted = agent_slice(IMPORT);
    assert_eq!(slice.metadata.labels, wanted.metadata.labels);
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.ports, wanted.ports);
    let addresses_of = |s: &EndpointSlice| -> Vec<Vec<String>> {
        s.endpoints
            .iter()
            .flatten()
            .map(|e| e.addresses.clone())
            .collect()
    };
    assert_eq!(addresses_of(&slice), addresses_of(&wanted));
    assert!(
        slice
            .endpoints
            .iter()
            .flatten()
            .all(
                |e| e.conditions.clone().unwrap_or_default() == Default::default()
                    && e.hostname.is_none()
                    && e.target_ref.is_none()
            ),
        "addresses only: {slice:?}"
    );
    assert_eq!(
        (observed(&running, true), observed(&running, false)),
        (1.0, 0.0)
    );

    // Hybrid protocol: a UDP port beside a TCP one.
    let mut hybrid = import_of(&hub_ns, "m2-work-app-hybrid-3c4de", false);
    hybrid.spec.ports[0].protocol = Some("UDP".into());
    hybrid.spec.ports[0].name = Some("udp".into());
    hybrid.spec.ports[0].port = Some(82);
    create_import(&hub, &hub_ns, &hybrid).await;
    eventually("hybrid processed", || {
        processed(&hub, &hub_ns, "m2-work-app-hybrid-3c4de")
    })
    .await;
    let ports = imported(&member)
        .get("m2-work-app-hybrid-3c4de")
        .await
        .expect("hybrid slice")
        .ports
        .unwrap_or_default();
    assert_eq!(ports[0].protocol.as_deref(), Some("UDP"));
    assert_eq!(ports[1].protocol.as_deref(), Some("TCP"));

    // Spec "update imported endpointslice": a new generation from the hub.
    import = imports(&hub, &hub_ns).get(IMPORT).await.expect("import");
    import.spec.endpoints[0].addresses = vec!["3.4.5.6".into()];
    import.spec.endpoint_slice_reference.generation = 2;
    imports(&hub, &hub_ns)
        .replace(IMPORT, &PostParams::default(), &import)
        .await
        .expect("update import");
    eventually("updated", || async {
        let a = addresses(&member, IMPORT).await?;
        (a[0] == ["3.4.5.6"]).then_some(())
    })
    .await;
    eventually("generation 2 observed", || processed(&hub, &hub_ns, IMPORT)).await;
    assert_eq!(observed(&running, false), 1.0, "once per generation");

    // Drift: edited, stripped of its labels, deleted: put back each time.
    imported(&member)
        .patch(
            IMPORT,
            &PatchParams::default(),
            &Patch::Merge(&json!({"endpoints": [{"addresses": ["9.9.9.9"]}]})),
        )
        .await
        .expect("edit slice");
    eventually("edit undone", || async {
        (addresses(&member, IMPORT).await?[0] == ["3.4.5.6"]).then_some(())
    })
    .await;
    imported(&member)
        .delete(IMPORT, &DeleteParams::default())
        .await
        .expect("delete slice");
    eventually("deleted slice put back", || async {
        addresses(&member, IMPORT).await.map(|_| ())
    })
    .await;
    assert_eq!(
        observed(&running, false),
        1.0,
        "drift is not a new generation"
    );

    // Withdrawn by the hub.
    delete_import(&hub, &hub_ns, IMPORT).await;
    wait_gone(&imported(&member), IMPORT).await;
    wait_gone(&imports(&hub, &hub_ns), IMPORT).await;
    assert!(
        imported(&member)
            .get_opt("m2-work-app-hybrid-3c4de")
            .await
            .expect("get")
            .is_some()
    );
    running.shutdown().await;
}

/// Specs "update imported endpointslice" and "deleted endpointsliceimport", from what an
/// agent left: its slice is adopted (updated in place, never created again) and, once the
/// import is deleted, removed with the finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_slice_is_adopted_and_a_deleted_import_unimported() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS, FLEET_NS]).await;
    create_mcs(&member, Some(DERIVED)).await;
    create_derived(&member, None).await;
    imported(&member)
        .create(&PostParams::default(), &agent_slice(IMPORT))
        .await
        .expect("agent's slice");
    let mut import = import_of(&hub_ns, IMPORT, true);
    import.spec.endpoints[0].addresses = vec!["3.4.5.6".into()];
    create_import(&hub, &hub_ns, &import).await;
    let creates_before = requests(&member, "endpointslices", "POST").await;
    let running = start(&fleet).await;
    eventually("adopted and updated", || async {
        (addresses(&member, IMPORT).await?[0] == ["3.4.5.6"]).then_some(())
    })
    .await;
    eventually("processed", || processed(&hub, &hub_ns, IMPORT)).await;
    assert_eq!(
        requests(&member, "endpointslices", "POST").await,
        creates_before,
        "the agent's slice is updated, not created again"
    );
    delete_import(&hub, &hub_ns, IMPORT).await;
    wait_gone(&imported(&member), IMPORT).await;
    wait_gone(&imports(&hub, &hub_ns), IMPORT).await;
    running.shutdown().await;
}
