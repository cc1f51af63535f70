//! Describe "endpointslice controller (unexport endpointslice)": a slice the reference's
//! controller exported (its export in the hub, then its annotations) that may no longer be.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpointslice_controller_unexport_endpointslice() {
    let s = Suite::start().await;
    should_remove_exported_dangling_endpointslice(&s).await;
    should_remove_exported_endpointslice_from_unexported_service(&s).await;
    should_remove_exported_endpointslice_from_invalid_service(&s).await;
    should_remove_exported_endpointslice_from_conflicted_exported_service(&s).await;
    should_remove_exported_but_deleted_endpointslice(&s).await;
    s.running.shutdown().await;
}

/// The BeforeEach of these specs: `slice` created, its export made in the hub, then (after
/// the ServiceExport, if any) its annotations added.
async fn exported_by_the_reference(
    s: &Suite,
    slice: EndpointSlice,
    conditions: Option<&[(&str, &str, &str)]>,
) {
    let start = now_seconds();
    let created = create_slice(&s.member, &slice).await;
    create_reference_export(s, &created, start).await;
    if let Some(conditions) = conditions {
        service_export(&s.member, conditions).await;
    }
    annotate_as_exported(s, start, &[]).await;
}

/// Context "exported dangling endpointslice (endpointslice with no associated service)".
async fn should_remove_exported_dangling_endpointslice(s: &Suite) {
    exported_by_the_reference(s, slice_of(SLICE, false, "IPv4", IPV4), None).await;
    removed(s).await;
    delete_slice(s, SLICE).await;
}

/// Context "exported endpointslice from unexported service".
async fn should_remove_exported_endpointslice_from_unexported_service(s: &Suite) {
    exported_by_the_reference(s, managed_slice(), None).await;
    removed(s).await;
    delete_slice(s, SLICE).await;
}

/// Context "exported endpointslice with invalid exported service".
async fn should_remove_exported_endpointslice_from_invalid_service(s: &Suite) {
    exported_by_the_reference(s, managed_slice(), Some(&[INVALID_NOT_FOUND])).await;
    removed(s).await;
    delete_slice(s, SLICE).await;
    delete_service_export(s).await;
}

/// Context "exported endpointslice with conflicted exported service".
async fn should_remove_exported_endpointslice_from_conflicted_exported_service(s: &Suite) {
    exported_by_the_reference(s, managed_slice(), Some(&[CONFLICTED])).await;
    removed(s).await;
    delete_slice(s, SLICE).await;
    delete_service_export(s).await;
}

/// Context "exported but deleted endpointslice": annotated (and held by a finalizer) while its
/// ServiceExport has no verdict, then the verdict, then deleted.
async fn should_remove_exported_but_deleted_endpointslice(s: &Suite) {
    let start = now_seconds();
    let created = create_slice(&s.member, &managed_slice()).await;
    create_reference_export(s, &created, start).await;
    create_export(&s.member, NS, SVC, &[]).await;

    annotate_as_exported(s, start, &["networking.fleet.azure.com/test"]).await;
    set_conditions(&s.member, &[VALID, NO_CONFLICT]).await;
    slices(&s.member, NS)
        .delete(SLICE, &DeleteParams::default())
        .await
        .expect("delete the slice");
    eventually_ok("not exported", || is_not_exported(&s.hub, &s.hub_ns)).await;

    delete_service_export(s).await;
    slices(&s.member, NS)
        .patch(
            SLICE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("remove the finalizer");
    wait_gone(&slices(&s.member, NS), SLICE).await;
}
