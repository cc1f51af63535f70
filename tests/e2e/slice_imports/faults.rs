//! The hub or the member down and back: nothing imported is deleted meanwhile, and what changed
//! on the hub during the outage reaches the member after it.

use super::*;

/// Sets the addresses of the import's first endpoint and bumps the exported generation, as
/// the hub does when the exported slice changes.
async fn change_import(hub: &kube::Client, hub_ns: &str, address: &str, generation: i64) {
    let api = imports(hub, hub_ns);
    let mut import = api.get(IMPORT).await.expect("import");
    import.spec.endpoints[0].addresses = vec![address.into()];
    import.spec.endpoint_slice_reference.generation = generation;
    api.replace(IMPORT, &PostParams::default(), &import)
        .await
        .expect("update import");
}

async fn first_address_is(member: &kube::Client, address: &str) {
    eventually(&format!("first address {address}"), || async {
        (addresses(member, IMPORT).await?[0] == [address]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_or_member_outage_deletes_nothing_and_changes_arrive_after_it() {
    let (mut fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS, FLEET_NS]).await;
    // The apiservers' counters run from before this test (a pooled cluster's may not be 0).
    let deletes_before = requests(&member, "endpointslices", "DELETE").await;
    create_mcs(&member, Some(DERIVED)).await;
    create_derived(&member, None).await;
    create_import(&hub, &hub_ns, &import_of(&hub_ns, IMPORT, false)).await;
    let running = start(&fleet).await;
    eventually("processed", || processed(&hub, &hub_ns, IMPORT)).await;
    assert_eq!(
        requests(&member, "endpointslices", "DELETE").await - deletes_before,
        0.0
    );
    let uid = |member: kube::Client| async move {
        imported(&member)
            .get(IMPORT)
            .await
            .expect("slice")
            .metadata
            .uid
    };
    let first_uid = uid(member.clone()).await;

    fleet.hub_mut().stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    fleet.hub_mut().start().await.expect("hub back");
    let hub = fleet.hub().client().await.expect("hub client");
    assert_eq!(addresses(&member, IMPORT).await.map(|a| a.len()), Some(2));
    change_import(&hub, &hub_ns, "3.4.5.6", 2).await;
    first_address_is(&member, "3.4.5.6").await;

    fleet.member_mut(M).stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    change_import(&hub, &hub_ns, "4.5.6.7", 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.member_mut(M).start().await.expect("member back");
    let member = fleet.member(M).client().await.expect("member client");
    first_address_is(&member, "4.5.6.7").await;
    eventually("generation 3 observed", || processed(&hub, &hub_ns, IMPORT)).await;
    assert_eq!(
        requests(&member, "endpointslices", "DELETE").await,
        0.0,
        "no imported slice deleted since the member restarted"
    );
    assert_eq!(
        uid(member.clone()).await,
        first_uid,
        "the same slice throughout"
    );
    running.shutdown().await;
}
