//! fleet-networking's integration specs of its member EndpointSliceExport controller
//! (`pkg/controllers/member/endpointsliceexport/controller_integration_test.go`), against that
//! job alone (`--controllers endpointsliceexport`), as its suite runs that controller alone.

use super::*;

const EXPORT: &str = "app-endpointsliceexport";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpointsliceexport_controller() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let only = Controllers::parse("endpointsliceexport").expect("a known job");
    let running = start_jobs(&fleet, M, only).await;
    let s = Suite {
        hub,
        member,
        hub_ns,
        _fleet: fleet,
        running,
    };
    should_remove_dangling_endpointsliceexport(&s).await;
    should_remove_unlinked_endpointsliceexport(&s).await;
    should_keep_linked_endpointsliceexport(&s).await;
    s.running.shutdown().await;
}

/// The specs' export: of `app-endpointslice`, by a UID that is not the slice's.
async fn create_spec_export(s: &Suite, uid: &str, generation: i64) {
    let mut e = export_template(EXPORT, &managed_slice(), now_seconds());
    e.spec.endpoint_slice_reference = ExportedObjectReference {
        cluster_id: M.into(),
        kind: "EndpointSlice".into(),
        namespace: NS.into(),
        name: SLICE.into(),
        resource_version: generation.to_string(),
        generation,
        uid: uid.into(),
        exported_since: Some(Time(now_seconds())),
        ..Default::default()
    };
    slice_exports(&s.hub, &s.hub_ns)
        .create(&PostParams::default(), &e)
        .await
        .expect("create the EndpointSliceExport");
}

async fn export_is_gone(s: &Suite) -> Check {
    match slice_exports(&s.hub, &s.hub_ns).get_opt(EXPORT).await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err("the export is still there".into()),
        Err(e) => Err(e.to_string()),
    }
}

async fn export_is_there(s: &Suite) -> Check {
    match slice_exports(&s.hub, &s.hub_ns).get_opt(EXPORT).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the export is gone".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Context "dangling endpointsliceexport": its slice does not exist.
async fn should_remove_dangling_endpointsliceexport(s: &Suite) {
    create_spec_export(s, "0", 0).await;
    eventually_ok("the dangling export removed", || export_is_gone(s)).await;
}

/// Context "unlinked endpointsliceexport": its slice (of no Service) carries no unique name.
async fn should_remove_unlinked_endpointsliceexport(s: &Suite) {
    create_slice(&s.member, &slice_of(SLICE, false, "IPv4", ALT_IPV4)).await;
    create_spec_export(s, "1", 1).await;
    eventually_ok("the unlinked export removed", || export_is_gone(s)).await;
    delete_slice(s, SLICE).await;
}

/// Context "linked endpointsliceexport": its slice's unique name names it.
async fn should_keep_linked_endpointsliceexport(s: &Suite) {
    let mut slice = slice_of(SLICE, false, "IPv4", ALT_IPV4);
    slice.metadata.annotations = Some(
        [(
            fleetnet_hub::api::UNIQUE_NAME_ANNOTATION.to_string(),
            EXPORT.to_string(),
        )]
        .into(),
    );
    create_slice(&s.member, &slice).await;
    create_spec_export(s, "1", 1).await;
    eventually_ok("the linked export kept", || export_is_there(s)).await;
    consistently_ok("the linked export kept", || export_is_there(s)).await;
    let _ = slice_exports(&s.hub, &s.hub_ns)
        .delete(EXPORT, &DeleteParams::default())
        .await;
    eventually_ok("the export deleted", || export_is_gone(s)).await;
    delete_slice(s, SLICE).await;
}
