//! fleet-networking's own integration specs of `pkg/controllers/member/serviceimport` and
//! `pkg/controllers/member/internalserviceimport`, spec by spec, against the binary's jobs.

use super::*;

/// serviceimport: "should create InternalServiceImport with expected specs": the finalizer,
/// the copy `<ns>-<name>` with `FromMetaObjects`' fields, the copy brought up to date when
/// the ServiceImport changes, both gone when it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_import_is_copied_to_the_hub_updated_and_deleted_with_it() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, selected("serviceimport")).await;

    create_import(&member, NS, "service-import-name").await;
    let si = wait_finalized(&member, NS, "service-import-name").await;
    let copy = format!("{NS}-service-import-name");
    wait_reference(&hub, &hub_ns, &copy, &expected_reference(&si)).await;

    // Updated: a label changes the version, which the copy follows.
    imports(&member, NS)
        .patch(
            "service-import-name",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"fake-key": "fake-value"}}})),
        )
        .await
        .expect("label the ServiceImport");
    let updated = imports(&member, NS)
        .get("service-import-name")
        .await
        .expect("get");
    wait_reference(&hub, &hub_ns, &copy, &expected_reference(&updated)).await;

    // Deleted: the copy goes first, then the finalizer, then the ServiceImport.
    delete_import(&member, NS, "service-import-name").await;
    eventually("no ServiceImport left", || async {
        let left = imports(&member, NS).list(&Default::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    let left = internals(&hub, &hub_ns)
        .list(&Default::default())
        .await
        .expect("list copies");
    assert!(left.items.is_empty(), "copies left: {:?}", left.items);
    running.shutdown().await;
}

/// internalserviceimport: "Should remove dangling internalServiceImport" and "Reporting back
/// serviceImport status from the fleet to the member cluster", the half selected alone: a copy
/// named as the spec names it (not `<ns>-<name>`) whose ServiceImport is missing is deleted;
/// one whose ServiceImport exists has its status reflected, each time the hub changes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_the_back_half_reflects_the_verdict_and_deletes_a_dangling_copy() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, selected("internalserviceimport")).await;

    // Dangling: no ServiceImport my-ns/my-svc.
    create_internal(&hub, &hub_ns, "my-svc", (NS, "my-svc"), None).await;
    wait_no_internal(&hub, &hub_ns, "my-svc").await;

    // Handled: the verdict reflected, and again when the hub changes it.
    create_import(&member, NS, "my-svc").await;
    let status = verdict("ClusterSetIP");
    create_internal(
        &hub,
        &hub_ns,
        "my-svc",
        (NS, "my-svc"),
        Some(status.clone()),
    )
    .await;
    wait_status(&member, NS, "my-svc", &status).await;
    let headless = verdict("Headless");
    set_hub_status(&hub, &hub_ns, "my-svc", headless.clone()).await;
    wait_status(&member, NS, "my-svc", &headless).await;

    // The forward half does not run: no finalizer, no `<ns>-<name>` copy.
    let si = imports(&member, NS).get("my-svc").await.expect("get");
    assert_eq!(si.metadata.finalizers, None);
    let copy = format!("{NS}-my-svc");
    assert!(
        internals(&hub, &hub_ns)
            .get_opt(&copy)
            .await
            .expect("get")
            .is_none()
    );

    // The ServiceImport deleted (no finalizer holds it): its copy is dangling, and goes.
    delete_import(&member, NS, "my-svc").await;
    wait_no_internal(&hub, &hub_ns, "my-svc").await;
    running.shutdown().await;
}

/// Both halves (`serviceimport`): the hub's verdict on the copy reaches the ServiceImport; a
/// copy deleted in the hub is made again; the deletion cleans up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_halves_reflect_the_verdict_and_make_a_deleted_copy_again() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, selected("serviceimport,internalserviceimport")).await;

    create_import(&member, NS, "web").await;
    let copy = format!("{NS}-web");
    let si = wait_finalized(&member, NS, "web").await;
    wait_reference(&hub, &hub_ns, &copy, &expected_reference(&si)).await;
    let status = verdict("ClusterSetIP");
    set_hub_status(&hub, &hub_ns, &copy, status.clone()).await;
    wait_status(&member, NS, "web", &status).await;
    // The status write changed the ServiceImport's version, which the copy follows.
    let reflected = imports(&member, NS).get("web").await.expect("get");
    wait_reference(&hub, &hub_ns, &copy, &expected_reference(&reflected)).await;

    internals(&hub, &hub_ns)
        .delete(&copy, &DeleteParams::default())
        .await
        .expect("delete the copy");
    // Made again; its status is empty until the hub decides again, and so the ServiceImport's
    // becomes (as the reference copies it), a write the copy's reference follows.
    wait_status(&member, NS, "web", &json!({})).await;
    let si = imports(&member, NS).get("web").await.expect("get");
    wait_reference(&hub, &hub_ns, &copy, &expected_reference(&si)).await;

    delete_import(&member, NS, "web").await;
    wait_no_internal(&hub, &hub_ns, &copy).await;
    eventually("the ServiceImport gone", || async {
        imports(&member, NS)
            .get_opt("web")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    running.shutdown().await;
}
