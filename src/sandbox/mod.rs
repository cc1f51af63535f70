//! `fleetnet-hub sandbox`: a local hub and two members on real apiservers (the test
//! substrate), the controller running against them, one sample export (Service + its
//! EndpointSlice) per member, and member-2 importing it through a MultiClusterService.

mod imports;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use crate::api::{EndpointSliceExport, InternalServiceExport, ServiceExport, ServiceExportVersion};
use crate::app::{self, Extensions};
use crate::config::Config;

const MEMBERS: [&str; 2] = ["member-1", "member-2"];

/// Runs until Ctrl-C; everything started is stopped and removed on exit.
pub async fn run() -> Result<(), String> {
    eprintln!(
        "starting a hub and two member clusters (real kube-apiserver + etcd; the first run builds them, which takes minutes)..."
    );
    // The CRDs from the Rust types, not the chart's files: the binary may run far from the
    // source tree.
    let fleet = fleetnet_testenv::Fleet::builder()
        .members(MEMBERS)
        .crds(crate::api::crd_files().into_iter().map(|(_, crd)| crd))
        .fresh()
        .start()
        .await
        .map_err(|e| format!("starting the local clusters: {e}"))?;
    let running = app::start(config(&fleet)?, Extensions::default())
        .await
        .map_err(|e| e.to_string())?;
    let hub = fleet.hub().client().await.map_err(|e| e.to_string())?;
    let mirror = tokio::spawn(mirror_export_namespaces(hub.clone()));

    for member in MEMBERS {
        let client = fleet
            .member(member)
            .client()
            .await
            .map_err(|e| e.to_string())?;
        create_sample(&client, member).await?;
    }
    for member in MEMBERS {
        let ise = wait_for_ise(&hub, &fleet.hub_namespace(member), "demo-hello").await?;
        println!(
            "--- InternalServiceExport {}/demo-hello (from {member})",
            fleet.hub_namespace(member)
        );
        println!("{}", serde_saphyr::to_string(&ise.spec).unwrap_or_default());
    }
    let hub_namespaces = MEMBERS.iter().map(|m| fleet.hub_namespace(m)).collect();
    let verdicts = tokio::spawn(stand_in_verdicts(hub.clone(), hub_namespaces));
    for (i, member) in MEMBERS.into_iter().enumerate() {
        let client = fleet
            .member(member)
            .client()
            .await
            .map_err(|e| e.to_string())?;
        create_sample_slice(&client, member, i).await?;
    }
    for member in MEMBERS {
        let ns = fleet.hub_namespace(member);
        let ese = wait_for_slice_export(&hub, &ns, &format!("hello-{member}")).await?;
        println!(
            "--- EndpointSliceExport {ns}/{} (from {member}'s EndpointSlice demo/hello-{member})",
            ese.metadata.name.as_deref().unwrap_or_default()
        );
        println!("{}", serde_saphyr::to_string(&ese.spec).unwrap_or_default());
    }
    let import_stand_in = imports::show_import_loop(&fleet, &hub, &MEMBERS).await?;
    print_banner(&fleet, &running);
    app::wait_for_signal().await;
    eprintln!("stopping...");
    mirror.abort();
    verdicts.abort();
    import_stand_in.abort();
    running.shutdown().await;
    drop(fleet);
    Ok(())
}

/// What the sandbox serves, once it is up: the clusters' kubeconfigs and the process's endpoints.
fn print_banner(fleet: &fleetnet_testenv::Fleet, running: &app::Running) {
    println!("fleetnet-hub sandbox is running.");
    println!(
        "  hub:       kubectl --kubeconfig {} get internalserviceexports,endpointsliceexports,internalserviceimports,endpointsliceimports -A",
        fleet.hub().kubeconfig_path().display()
    );
    for m in fleet.members() {
        println!(
            "  {:<10} kubectl --kubeconfig {} get serviceexports,multiclusterservices,serviceimports,services,endpointslices -A",
            format!("{}:", m.name()),
            m.kubeconfig_path().display()
        );
    }
    println!("  health:    http://{}/members", running.health_address);
    println!("  metrics:   http://{}/metrics", running.metrics_address);
    println!(
        "Add a member kubeconfig to {} to engage it; Ctrl-C (or SIGTERM) stops everything.",
        fleet.member_kubeconfig_dir().display()
    );
}

/// The controller's configuration against the local clusters: the flags' defaults (no Azure,
/// no leader election), ephemeral ports.
fn config(fleet: &fleetnet_testenv::Fleet) -> Result<Config, String> {
    let hub = fleet.hub().kubeconfig_path().to_path_buf();
    Config::builder(Some(hub), fleet.member_kubeconfig_dir())
        .namespace_prefix(fleetnet_testenv::DEFAULT_HUB_NAMESPACE_PREFIX)
        .records("default", crate::config::DEFAULT_LEADER_ELECTION_ID)
        .instance("sandbox")
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
        .build()
        .map_err(|e| e.to_string())
}

async fn create_sample(client: &kube::Client, member: &str) -> Result<(), String> {
    fleetnet_testenv::ensure_namespace(client, member, "demo")
        .await
        .map_err(|e| e.to_string())?;
    let svc = Service {
        metadata: ObjectMeta {
            name: Some("hello".into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = |r: Result<_, kube::Error>, what: &str| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(format!("{member}: create {what}: {e}")),
    };
    created(
        Api::<Service>::namespaced(client.clone(), "demo")
            .create(&PostParams::default(), &svc)
            .await
            .map(|_| ()),
        "Service demo/hello",
    )?;
    let se = ServiceExport::new("demo", "hello", ServiceExportVersion::V1Beta1);
    created(
        Api::<ServiceExport>::namespaced_with(
            client.clone(),
            "demo",
            &ServiceExportVersion::V1Beta1,
        )
        .create(&PostParams::default(), &se)
        .await
        .map(|_| ()),
        "ServiceExport demo/hello",
    )
}

/// The demo Service's endpoints, as the member's EndpointSlice controller would write them for
/// two ready Pods (there are none: nothing else writes it).
async fn create_sample_slice(client: &kube::Client, member: &str, i: usize) -> Result<(), String> {
    let name = format!("hello-{member}");
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name, "namespace": "demo",
            "labels": {
                "kubernetes.io/service-name": "hello",
                "endpointslice.kubernetes.io/managed-by": "sandbox.fleetnet-hub"
            }
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [format!("10.244.{i}.10")], "conditions": {"ready": true}},
            {"addresses": [format!("10.244.{i}.11")], "conditions": {"ready": true}}
        ],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))
    .map_err(|e| format!("{member}: the sample EndpointSlice: {e}"))?;
    match Api::<EndpointSlice>::namespaced(client.clone(), "demo")
        .create(&PostParams::default(), &slice)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(format!("{member}: create EndpointSlice demo/{name}: {e}")),
    }
}

/// How long the sandbox waits for a hub controller's Conflict verdict before writing its own.
const VERDICT_GRACE: Duration = Duration::from_secs(5);

/// Stands in for fleet-networking's hub controllers when none runs against the sandbox hub:
/// an ISE without a `Conflict` condition after [`VERDICT_GRACE`] gets `Conflict=False`, the
/// verdict they give exports that agree (the demo exports do). Slices are exported only for
/// Services without conflict. Runs until aborted.
async fn stand_in_verdicts(hub: kube::Client, namespaces: Vec<String>) {
    let mut announced = false;
    loop {
        tokio::time::sleep(VERDICT_GRACE).await;
        for ns in &namespaces {
            let api: Api<InternalServiceExport> = Api::namespaced(hub.clone(), ns);
            let Ok(list) = api.list(&Default::default()).await else {
                continue;
            };
            for ise in list.items {
                let judged = crate::api::find_condition(ise.conditions(), "Conflict").is_some();
                let Some(name) = ise.metadata.name.as_deref().filter(|_| !judged) else {
                    continue;
                };
                if !announced {
                    println!(
                        "(no hub controller gave a Conflict verdict within {VERDICT_GRACE:?}: the sandbox writes Conflict=False, as fleet-networking's would for these exports)"
                    );
                    announced = true;
                }
                let verdict = serde_json::json!({"status": {"conditions": [{
                    "type": "Conflict", "status": "False", "reason": "NoConflictFound",
                    "message": "verdict written by fleetnet-hub sandbox (no hub controller running)",
                    "lastTransitionTime": jiff::Timestamp::now().to_string(),
                    "observedGeneration": ise.metadata.generation.unwrap_or(1)
                }]}});
                let _ = api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&verdict))
                    .await;
            }
        }
    }
}

async fn wait_for_slice_export(
    hub: &kube::Client,
    ns: &str,
    slice: &str,
) -> Result<EndpointSliceExport, String> {
    let api: Api<EndpointSliceExport> = Api::namespaced(hub.clone(), ns);
    for _ in 0..600 {
        if let Ok(list) = api.list(&Default::default()).await
            && let Some(e) = list
                .items
                .into_iter()
                .find(|e| e.spec.endpoint_slice_reference.name == slice)
        {
            return Ok(e);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "no EndpointSliceExport of demo/{slice} in {ns} within 60 s"
    ))
}

async fn wait_for_ise(
    hub: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<InternalServiceExport, String> {
    let api: Api<InternalServiceExport> = Api::namespaced(hub.clone(), ns);
    for _ in 0..600 {
        if let Ok(Some(ise)) = api.get_opt(name).await {
            return Ok(ise);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "InternalServiceExport {ns}/{name} did not appear within 60 s"
    ))
}

/// What fleet's placement does in a real fleet: every exported Service's namespace exists on
/// the hub (fleet-networking's hub controllers create ServiceImports there and loop on
/// `namespaces "<ns>" not found` otherwise). Runs until aborted.
pub async fn mirror_export_namespaces(hub: kube::Client) {
    let ises: Api<InternalServiceExport> = Api::all(hub.clone());
    let mut made = BTreeSet::new();
    let mut events = watcher(ises, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let ise = match event {
            Ok(ise) => ise,
            Err(e) => {
                tracing::debug!(error = %e, "sandbox: watching InternalServiceExports");
                continue;
            }
        };
        let ns = ise.spec.service_reference.namespace;
        if ns.is_empty() || made.contains(&ns) {
            continue;
        }
        match fleetnet_testenv::ensure_namespace(&hub, "hub", &ns).await {
            Ok(()) => {
                tracing::info!(namespace = %ns, "sandbox: exported Service's namespace present on the hub");
                made.insert(ns);
            }
            Err(e) => {
                tracing::warn!(namespace = %ns, error = %e, "sandbox: cannot create namespace on the hub")
            }
        }
    }
}
