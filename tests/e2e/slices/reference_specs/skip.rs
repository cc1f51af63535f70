//! Describe "endpointslice controller (skip endpointslice)".

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpointslice_controller_skip_endpointslice() {
    let s = Suite::start().await;
    should_not_export_ipv6_endpointslice(&s).await;
    should_not_export_dangling_endpointslice(&s).await;
    should_not_export_endpointslice_associated_with_unexported_service(&s).await;
    should_not_export_endpointslice_associated_with_invalid_exported_service(&s).await;
    should_not_export_endpointslice_associated_with_conflicted_exported_service(&s).await;
    s.running.shutdown().await;
}

/// Context "IPv6 endpointSlice".
async fn should_not_export_ipv6_endpointslice(s: &Suite) {
    create_slice(&s.member, &slice_of(SLICE, true, "IPv6", IPV6)).await;
    service_export(&s.member, &[VALID, NO_CONFLICT]).await;
    never_exported(s).await;
    delete_slice(s, SLICE).await;
    delete_service_export(s).await;
}

/// Context "dangling endpointslice (endpointslice with no associated service)".
async fn should_not_export_dangling_endpointslice(s: &Suite) {
    create_slice(&s.member, &slice_of(SLICE, false, "IPv4", IPV4)).await;
    service_export(&s.member, &[VALID, NO_CONFLICT]).await;
    never_exported(s).await;
    delete_slice(s, SLICE).await;
    delete_service_export(s).await;
}

/// Context "endpointslice associated with unexported service".
async fn should_not_export_endpointslice_associated_with_unexported_service(s: &Suite) {
    create_slice(&s.member, &managed_slice()).await;
    never_exported(s).await;
    delete_slice(s, SLICE).await;
}

/// Context "endpointslice associated with invalid exported service".
async fn should_not_export_endpointslice_associated_with_invalid_exported_service(s: &Suite) {
    create_slice(&s.member, &managed_slice()).await;
    service_export(&s.member, &[INVALID_NOT_FOUND]).await;
    never_exported(s).await;
    delete_slice(s, SLICE).await;
    delete_service_export(s).await;
}

/// Context "endpointslice associated with conflicted exported service" (its `It` is named as
/// the invalid one's there).
async fn should_not_export_endpointslice_associated_with_conflicted_exported_service(s: &Suite) {
    create_slice(&s.member, &managed_slice()).await;
    service_export(&s.member, &[CONFLICTED]).await;
    never_exported(s).await;
    delete_slice(s, SLICE).await;
    delete_service_export(s).await;
}
