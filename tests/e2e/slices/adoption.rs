//! Migration from the member agent: slices and exports its EndpointSlice controller made are
//! taken over as they are; and its EndpointSliceExport controller alone
//! (`--controllers endpointsliceexport`), as the reference runs it.

use fleetnet_hub::api::{LAST_SEEN_GENERATION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

/// What the agent leaves on a slice it exported as `unique`, its generation seen at `seen`.
async fn annotate_as_the_agent(
    member: &kube::Client,
    name: &str,
    unique: &str,
    seen: &str,
) -> EndpointSlice {
    let slice = get_slice(member, name).await;
    let generation = slice.metadata.generation.unwrap_or_default().to_string();
    slices(member, NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                fleetnet_hub::api::UNIQUE_NAME_ANNOTATION: unique,
                LAST_SEEN_GENERATION_ANNOTATION: generation,
                LAST_SEEN_TIMESTAMP_ANNOTATION: seen,
            }}})),
        )
        .await
        .expect("annotate as the agent")
}

/// The export the agent writes for `slice` (as annotated) under `unique`: its client leaves the
/// slice's TypeMeta empty.
fn agent_export(
    slice: &EndpointSlice,
    unique: &str,
    service: &str,
    seen: &str,
) -> EndpointSliceExport {
    let m = &slice.metadata;
    let (ns, name) = (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    );
    let addresses: Vec<String> = slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    let mut e: EndpointSliceExport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "EndpointSliceExport",
        "metadata": {"name": unique},
        "spec": {
            "addressType": "IPv4",
            "endpoints": addresses.iter().map(|a| json!({"addresses": [a]})).collect::<Vec<_>>(),
            "ports": slice.ports,
            "endpointSliceReference": {"clusterId": M, "kind": "", "namespace": ns, "name": name,
                "resourceVersion": m.resource_version, "generation": m.generation,
                "uid": m.uid, "namespacedName": format!("{ns}/{name}"), "exportedSince": seen},
            "ownerServiceReference": {"namespace": ns, "name": service,
                "namespacedName": format!("{ns}/{service}")}
        }
    }))
    .expect("an EndpointSliceExport");
    e.spec.endpoint_slice_reference.exported_since = Some(Time(seen.parse().expect("time")));
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_exported_slice_is_taken_over_without_a_write() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    export_with(&member, "web", "True", "False").await;
    let seen = "2026-12-01T08:00:00Z";
    let mut made = vec![];
    for i in 0..3 {
        let name = format!("web-{i}");
        create_slice(
            &member,
            &endpoint_slice(NS, &name, "web", &["10.0.0.1", "10.0.0.2"]),
        )
        .await;
        let unique = format!("{M}-{NS}-{name}-a{i}b{i}c");
        let slice = annotate_as_the_agent(&member, &name, &unique, seen).await;
        slice_exports(&hub, &hub_ns)
            .create(
                &PostParams::default(),
                &agent_export(&slice, &unique, "web", seen),
            )
            .await
            .expect("the agent's export");
        made.push(
            slice_exports(&hub, &hub_ns)
                .get(&unique)
                .await
                .expect("get"),
        );
    }
    let before = slice_writes(&member, &hub).await;

    let running = start_jobs(&fleet, M, slices_only()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        slice_writes(&member, &hub).await,
        before,
        "writes on taking over"
    );
    for e in &made {
        let now = slice_exports(&hub, &hub_ns)
            .get(e.metadata.name.as_deref().unwrap_or_default())
            .await
            .expect("kept");
        assert_eq!(
            now.metadata.resource_version, e.metadata.resource_version,
            "rewritten"
        );
    }

    // And it is ours now: a change is stamped and exported since it was seen.
    set_endpoints(&member, "web-0", &["10.0.0.9"]).await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-0", |e| {
        exported_addresses(e) == ["10.0.0.9"]
    })
    .await;
    let slice = get_slice(&member, "web-0").await;
    let annotations = slice.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(LAST_SEEN_GENERATION_ANNOTATION),
        slice.metadata.generation.map(|g| g.to_string()).as_ref()
    );
    let stamped: jiff::Timestamp = annotations[LAST_SEEN_TIMESTAMP_ANNOTATION]
        .parse()
        .expect("a time");
    assert!(stamped > seen.parse().expect("t"));
    assert_eq!(
        ese.spec.endpoint_slice_reference.exported_since,
        Some(Time(stamped))
    );
    assert_eq!(
        ese.spec.endpoint_slice_reference.resource_version,
        slice.metadata.resource_version.unwrap_or_default()
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpointsliceexport_job_alone_deletes_orphans_and_nothing_else() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    export_with(&member, "web", "True", "False").await;
    let seen = "2026-12-01T08:00:00Z";
    create_slice(&member, &endpoint_slice(NS, "web-1", "web", &["10.0.0.1"])).await;
    let web1 = annotate_as_the_agent(&member, "web-1", "m1-work-web-1-aaaaa", seen).await;
    let own = agent_export(&web1, "m1-work-web-1-aaaaa", "web", seen);
    let mut renamed = own.clone();
    renamed.metadata.name = Some("m1-work-web-1-zzzzz".into());
    let mut ghost = own.clone();
    ghost.metadata.name = Some("m1-work-ghost-bbbbb".into());
    ghost.spec.endpoint_slice_reference.name = "ghost".into();
    ghost.spec.endpoint_slice_reference.namespaced_name = "work/ghost".into();
    for e in [&own, &renamed, &ghost] {
        slice_exports(&hub, &hub_ns)
            .create(&PostParams::default(), e)
            .await
            .expect("an export");
    }
    // Exportable but never exported: the EndpointSlice controller's, not this job's.
    create_slice(&member, &endpoint_slice(NS, "web-2", "web", &["10.0.0.2"])).await;
    let member_writes = writes(&member, "endpointslices").await;

    let only = Controllers::parse("endpointsliceexport").expect("a known job");
    let running = start_jobs(&fleet, M, only).await;
    wait_gone(&slice_exports(&hub, &hub_ns), "m1-work-ghost-bbbbb").await;
    wait_gone(&slice_exports(&hub, &hub_ns), "m1-work-web-1-zzzzz").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let left: Vec<String> = slice_exports(&hub, &hub_ns)
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|e| e.metadata.name)
        .collect();
    assert_eq!(left, ["m1-work-web-1-aaaaa"]);
    assert_eq!(
        writes(&member, "endpointslices").await,
        member_writes,
        "slices written"
    );
    assert_eq!(unique_name_of(&get_slice(&member, "web-2").await), None);
    running.shutdown().await;
}
