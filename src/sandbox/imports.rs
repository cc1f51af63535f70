//! The import loop in the sandbox: member-2 imports member-1's and its own `demo/hello` through a
//! MultiClusterService, and, while no fleet-networking hub controller runs against the sandbox
//! hub, the sandbox stands in for the two that serve imports: the ServiceImport verdict on every
//! InternalServiceImport (the clusters exporting the Service, its ports) and the
//! EndpointSliceImports (each EndpointSliceExport of an exported Service copied into the
//! namespace of every member importing it).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::api::{
    EndpointSliceExport, EndpointSliceImport, InternalServiceExport, InternalServiceImport,
    MultiClusterService,
};

/// The member that imports in the sandbox.
const IMPORTER: &str = "member-2";

/// Starts the stand-in for the hub's import controllers (returned: aborted at exit), makes the
/// importer's MultiClusterService and prints the slices imported into it from `members`.
pub(super) async fn show_import_loop(
    fleet: &fleetnet_testenv::Fleet,
    hub: &kube::Client,
    members: &[&str],
) -> Result<tokio::task::JoinHandle<()>, String> {
    let fleet_system = crate::config::DEFAULT_FLEET_SYSTEM_NAMESPACE;
    let importer = fleet
        .member(IMPORTER)
        .client()
        .await
        .map_err(|e| e.to_string())?;
    let hub_namespaces = members.iter().map(|m| fleet.hub_namespace(m)).collect();
    let stand_in = tokio::spawn(stand_in_imports(hub.clone(), hub_namespaces));
    create_importer(&importer, fleet_system).await?;
    let imported = wait_for_imported_slices(&importer, fleet_system, members.len()).await?;
    println!(
        "--- {IMPORTER}: MultiClusterService demo/hello → derived Service {fleet_system}/demo-hello, imported EndpointSlices:"
    );
    for slice in &imported {
        let addresses: Vec<&str> = slice
            .endpoints
            .iter()
            .flatten()
            .flat_map(|e| e.addresses.iter().map(String::as_str))
            .collect();
        println!(
            "  {fleet_system}/{}: {}",
            slice.metadata.name.as_deref().unwrap_or_default(),
            addresses.join(", ")
        );
    }
    Ok(stand_in)
}

/// The importer's MultiClusterService `demo/hello`, and the fleet system namespace its derived
/// Service and imported slices go to (fleet's member agent would have made it).
async fn create_importer(client: &kube::Client, fleet_system: &str) -> Result<(), String> {
    fleetnet_testenv::ensure_namespace(client, IMPORTER, fleet_system)
        .await
        .map_err(|e| e.to_string())?;
    let mcs: MultiClusterService = serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "hello", "namespace": "demo"},
        "spec": {"serviceImport": {"name": "hello"}}
    }))
    .map_err(|e| e.to_string())?;
    match Api::<MultiClusterService>::namespaced(client.clone(), "demo")
        .create(&PostParams::default(), &mcs)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(format!(
            "{IMPORTER}: create MultiClusterService demo/hello: {e}"
        )),
    }
}

/// Waits for the importer's EndpointSlices in the fleet system namespace (one per exporting
/// member's slice), up to 90 s.
async fn wait_for_imported_slices(
    client: &kube::Client,
    fleet_system: &str,
    want: usize,
) -> Result<Vec<EndpointSlice>, String> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), fleet_system);
    for _ in 0..900 {
        if let Ok(list) = api.list(&ListParams::default()).await
            && list.items.len() >= want
        {
            return Ok(list.items);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "{IMPORTER}: no {want} imported EndpointSlices in {fleet_system} within 90 s"
    ))
}

/// Stands in for fleet-networking's hub import controllers, every 2 s, until aborted.
async fn stand_in_imports(hub: kube::Client, namespaces: Vec<String>) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Err(e) = serve_imports(&hub, &namespaces).await {
            tracing::debug!(error = %e, "sandbox: standing in for the hub's import controllers");
        }
    }
}

/// One pass: every InternalServiceImport gets the verdict the exports give, and every
/// importing namespace the EndpointSliceImports of what it imports.
async fn serve_imports(hub: &kube::Client, namespaces: &[String]) -> Result<(), kube::Error> {
    let mut exporters: BTreeMap<String, Vec<InternalServiceExport>> = BTreeMap::new();
    let mut slices: BTreeMap<String, Vec<EndpointSliceExport>> = BTreeMap::new();
    for ns in namespaces {
        for ise in Api::<InternalServiceExport>::namespaced(hub.clone(), ns)
            .list(&ListParams::default())
            .await?
        {
            let service = ise.spec.service_reference.namespaced_name.clone();
            exporters.entry(service).or_default().push(ise);
        }
        for ese in Api::<EndpointSliceExport>::namespaced(hub.clone(), ns)
            .list(&ListParams::default())
            .await?
        {
            let service = ese.spec.owner_service_reference.namespaced_name.clone();
            slices.entry(service).or_default().push(ese);
        }
    }
    for ns in namespaces {
        let isis = Api::<InternalServiceImport>::namespaced(hub.clone(), ns);
        for isi in isis.list(&ListParams::default()).await? {
            let service = &isi.spec.service_import_reference.namespaced_name;
            let Some(exports) = exporters.get(service) else {
                continue;
            };
            write_verdict(&isis, &isi, exports).await?;
            for ese in slices.get(service).into_iter().flatten() {
                copy_slice(hub, ns, ese).await?;
            }
        }
    }
    Ok(())
}

/// The verdict of a Service every exporter agrees on: its clusters and ports.
async fn write_verdict(
    isis: &Api<InternalServiceImport>,
    isi: &InternalServiceImport,
    exports: &[InternalServiceExport],
) -> Result<(), kube::Error> {
    let clusters: Vec<_> = exports
        .iter()
        .map(|e| serde_json::json!({"cluster": e.spec.service_reference.cluster_id}))
        .collect();
    let status = serde_json::json!({
        "clusters": clusters, "type": "ClusterSetIP", "ports": exports[0].spec.ports,
    });
    let current = serde_json::to_value(&isi.status).unwrap_or_default();
    if current == status {
        return Ok(());
    }
    let name = isi.metadata.name.as_deref().unwrap_or_default();
    isis.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({ "status": status })),
    )
    .await
    .map(drop)
}

/// `ese` as an EndpointSliceImport of the same name in the importer's namespace `ns`.
async fn copy_slice(
    hub: &kube::Client,
    ns: &str,
    ese: &EndpointSliceExport,
) -> Result<(), kube::Error> {
    let api = Api::<EndpointSliceImport>::namespaced(hub.clone(), ns);
    let name = ese.metadata.name.clone().unwrap_or_default();
    if let Some(current) = api.get_opt(&name).await? {
        if current.spec == ese.spec {
            return Ok(());
        }
        let patch = serde_json::json!({"spec": ese.spec});
        return api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop);
    }
    let import = EndpointSliceImport {
        api_version: Some(format!("{}/v1alpha1", crate::api::GROUP)),
        kind: Some("EndpointSliceImport".into()),
        metadata: kube::api::ObjectMeta {
            name: Some(name),
            namespace: Some(ns.to_string()),
            ..Default::default()
        },
        spec: ese.spec.clone(),
    };
    api.create(&PostParams::default(), &import).await.map(drop)
}
