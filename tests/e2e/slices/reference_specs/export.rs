//! Describe "endpointslice controller (export endpointslice or update exported endpointslice)"
//! and Describe "endpointslice controller (service export status changes)".

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpointslice_controller_export_endpointslice_or_update_exported_endpointslice() {
    let s = Suite::start().await;
    should_export_the_new_endpointslice(&s).await;
    should_update_exported_endpointslice(&s).await;
    should_export_the_endpointslice_with_the_invalid_unique_name_annotation_again_with_a_new_assigned_unique_name(&s).await;
    should_export_the_endpointslice_with_the_used_unique_name_annotation_again_with_a_new_assigned_unique_name(&s).await;
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpointslice_controller_service_export_status_changes() {
    let s = Suite::start().await;
    should_export_endpointslices_when_service_export_becomes_valid(&s).await;
    should_unexport_endpointslices_when_service_export_becomes_invalid(&s).await;
    should_unexport_endpointslices_when_service_export_becomes_conflicted(&s).await;
    s.running.shutdown().await;
}

/// The BeforeEach of most specs here: a valid ServiceExport without conflict, then the slice.
/// Returns the reference's `startTime` (one second early, for timing precision).
async fn valid_export_then_slice(s: &Suite) -> Timestamp {
    let start = now_seconds() - jiff::SignedDuration::from_secs(1);
    service_export(&s.member, &[VALID, NO_CONFLICT]).await;
    create_slice(&s.member, &managed_slice()).await;
    start
}

/// The AfterEach of these specs.
async fn clean_up(s: &Suite, slices: &[&str]) {
    for name in slices {
        delete_slice(s, name).await;
    }
    delete_service_export(s).await;
    delete_all_exports(s).await;
}

/// Context "new endpointslice for export".
async fn should_export_the_new_endpointslice(s: &Suite) {
    let start = valid_export_then_slice(s).await;
    exported(s, SLICE, start).await;
    clean_up(s, &[SLICE]).await;
}

/// Context "updated exported endpointslice".
async fn should_update_exported_endpointslice(s: &Suite) {
    let start = valid_export_then_slice(s).await;
    let (_, export, first_seen) = exported(s, SLICE, start).await;

    set_endpoint_addresses(s, &[IPV4, ALT_IPV4]).await;
    let export_name = export.metadata.name.clone().expect("a name");
    eventually_ok("the new generation stamped, the export updated", || async {
        let (slice, seen) = stamped(&s.member, SLICE, first_seen).await?;
        let export = slice_exports(&s.hub, &s.hub_ns)
            .get(&export_name)
            .await
            .map_err(|e| e.to_string())?;
        let addresses: Vec<Vec<String>> = export
            .spec
            .endpoints
            .iter()
            .map(|e| e.addresses.clone())
            .collect();
        if addresses != [vec![IPV4.to_string()], vec![ALT_IPV4.to_string()]] {
            return Err(format!("endpoints {addresses:?}"));
        }
        let want = reference_of(&slice, seen);
        match export.spec.endpoint_slice_reference == want {
            true => Ok(()),
            false => Err(format!(
                "reference {:?}, want {want:?}",
                export.spec.endpoint_slice_reference
            )),
        }
    })
    .await;
    clean_up(s, &[SLICE]).await;
}

/// Replaces the slice's endpoints (one per address, no conditions), as an Update would.
async fn set_endpoint_addresses(s: &Suite, addresses: &[&str]) {
    let endpoints: Vec<_> = addresses
        .iter()
        .map(|a| json!({"addresses": [a]}))
        .collect();
    slices(&s.member, NS)
        .patch(
            SLICE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"endpoints": endpoints})),
        )
        .await
        .expect("update the slice");
}

/// Sets the slice's unique name to `name`, as a user tampering with it.
async fn tamper(s: &Suite, name: &str) {
    set_unique_name(&s.member, SLICE, name).await;
}

/// The slice renamed away from `original`, and its new export: the reference's, since
/// `since`.
async fn exported_again(s: &Suite, original: &str, since: Timestamp) {
    let slice = get_slice(&s.member, SLICE).await;
    let renamed = unique_name_of(&slice).expect("a unique name");
    assert!(
        renamed.starts_with(&format!("{M}-{NS}-{SLICE}-")),
        "{renamed}"
    );
    assert_ne!(renamed, original);
    let export = slice_exports(&s.hub, &s.hub_ns)
        .get(&renamed)
        .await
        .expect("the new export");
    assert_eq!(
        export.spec.endpoint_slice_reference,
        reference_of(&slice, since)
    );
}

/// Context "exported endpointslice with tampered invalid unique name annotation".
async fn should_export_the_endpointslice_with_the_invalid_unique_name_annotation_again_with_a_new_assigned_unique_name(
    s: &Suite,
) {
    let start = valid_export_then_slice(s).await;
    let (_, original, seen) = exported(s, SLICE, start).await;
    tamper(s, "x_y").await;
    eventually_ok("exported again", || async {
        exports_are(&s.hub, &s.hub_ns, 2).await.map(drop)
    })
    .await;
    exported_again(
        s,
        original.metadata.name.as_deref().unwrap_or_default(),
        seen,
    )
    .await;
    clean_up(s, &[SLICE]).await;
}

/// Context "exported endpointslice with tampered used unique name annotation": the name is
/// held by another slice's export.
async fn should_export_the_endpointslice_with_the_used_unique_name_annotation_again_with_a_new_assigned_unique_name(
    s: &Suite,
) {
    let start = valid_export_then_slice(s).await;
    let mut alt = export_template(&unique_name(), &managed_slice(), Timestamp::now());
    alt.spec.endpoints[0].addresses = vec![ALT_IPV4.into()];
    alt.spec.endpoint_slice_reference = ExportedObjectReference {
        cluster_id: M.into(),
        kind: "EndpointSlice".into(),
        namespace: NS.into(),
        name: ALT_SLICE.into(),
        resource_version: "0".into(),
        generation: 1,
        uid: "1".into(),
        exported_since: Some(Time(now_seconds())),
        ..Default::default()
    };
    slice_exports(&s.hub, &s.hub_ns)
        .create(&PostParams::default(), &alt)
        .await
        .expect("the other slice's export");

    let (original, seen) = eventually_ok(
        "the slice stamped and exported beside the other",
        || async {
            let (slice, seen) = stamped(&s.member, SLICE, start).await?;
            let all = exports_are(&s.hub, &s.hub_ns, 2).await?;
            let own = all
                .iter()
                .find(|e| {
                    let r = &e.spec.endpoint_slice_reference;
                    r.name == SLICE && Some(&r.uid) == slice.metadata.uid.as_ref()
                })
                .ok_or("the slice's export not found")?;
            let want = reference_of(&slice, seen);
            if own.spec.endpoint_slice_reference != want {
                return Err(format!(
                    "reference {:?}, want {want:?}",
                    own.spec.endpoint_slice_reference
                ));
            }
            Ok((own.metadata.name.clone().unwrap_or_default(), seen))
        },
    )
    .await;
    tamper(s, &unique_name()).await;
    eventually_ok("exported again", || async {
        exports_are(&s.hub, &s.hub_ns, 3).await.map(drop)
    })
    .await;
    exported_again(s, &original, seen).await;
    clean_up(s, &[SLICE]).await;
}

/// Context "endpointslices when service export becomes valid with no conflicts".
async fn should_export_endpointslices_when_service_export_becomes_valid(s: &Suite) {
    let start = now_seconds() - jiff::SignedDuration::from_secs(1);
    create_slice(&s.member, &managed_slice()).await;
    create_slice(&s.member, &slice_of(ALT_SLICE, true, "IPv4", ALT_IPV4)).await;
    service_export(&s.member, &[VALID, NO_CONFLICT]).await;
    for name in [SLICE, ALT_SLICE] {
        eventually_ok(&format!("{name} stamped"), || async {
            stamped(&s.member, name, start).await.map(drop)
        })
        .await;
    }
    eventually_ok("both exported", || async {
        exports_are(&s.hub, &s.hub_ns, 2).await.map(drop)
    })
    .await;
    clean_up(s, &[SLICE, ALT_SLICE]).await;
}

/// The two "becomes invalid / conflicted" specs: exported, then the verdict `conditions`, then
/// every annotation gone and nothing exported.
async fn unexported_when(s: &Suite, conditions: &[(&str, &str, &str)]) {
    let start = valid_export_then_slice(s).await;
    exported(s, SLICE, start).await;
    set_conditions(&s.member, conditions).await;
    eventually_ok("every annotation removed", || async {
        let slice = slices(&s.member, NS)
            .get(SLICE)
            .await
            .map_err(|e| e.to_string())?;
        match slice.metadata.annotations.unwrap_or_default() {
            a if a.is_empty() => Ok(()),
            a => Err(format!("annotations {a:?}, want none")),
        }
    })
    .await;
    eventually_ok("not exported", || is_not_exported(&s.hub, &s.hub_ns)).await;
    clean_up(s, &[SLICE]).await;
}

/// Context "endpointslices when service export becomes invalid".
async fn should_unexport_endpointslices_when_service_export_becomes_invalid(s: &Suite) {
    unexported_when(s, &[INVALID_NOT_FOUND, NO_CONFLICT]).await;
}

/// Context "endpointslices when service export becomes conflicted".
async fn should_unexport_endpointslices_when_service_export_becomes_conflicted(s: &Suite) {
    unexported_when(s, &[VALID, CONFLICTED]).await;
}
