//! `fleetnet-hub sandbox`: a local hub and two members on real apiservers (the test
//! substrate), the controller running against them, one sample export per member.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use crate::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use crate::app::{self, AppConfig, Extensions};
use crate::client::Limits;
use crate::fleet::RuntimeConfig;

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
        .start()
        .await
        .map_err(|e| format!("starting the local clusters: {e}"))?;
    let running = app::start(app_config(&fleet), Extensions::default())
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
    println!("fleetnet-hub sandbox is running.");
    println!(
        "  hub:       kubectl --kubeconfig {} get internalserviceexports -A",
        fleet.hub().kubeconfig_path().display()
    );
    for m in fleet.members() {
        println!(
            "  {:<10} kubectl --kubeconfig {} get serviceexports -A",
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
    app::wait_for_signal().await;
    eprintln!("stopping...");
    mirror.abort();
    running.shutdown().await;
    drop(fleet);
    Ok(())
}

/// The controller's configuration against the local clusters: generous hub budget, no Azure,
/// no leader election, ephemeral ports.
fn app_config(fleet: &fleetnet_testenv::Fleet) -> AppConfig {
    AppConfig {
        hub_kubeconfig: Some(fleet.hub().kubeconfig_path().to_path_buf()),
        hub_limits: Limits {
            qps: 100.0,
            burst: 200,
            ..Limits::default()
        },
        runtime: RuntimeConfig {
            kubeconfig_dir: fleet.member_kubeconfig_dir(),
            namespace_prefix: fleetnet_testenv::DEFAULT_HUB_NAMESPACE_PREFIX.into(),
            member_limits: Limits::default(),
            member_sync_timeout: Duration::from_secs(60),
            cleanup_on_remove: false,
            records_namespace: "default".into(),
            records_prefix: "fleetnet-hub".into(),
            traffic_manager: false,
            rescan_interval: Duration::from_secs(30),
            instance: "sandbox".into(),
            trust: Default::default(),
            controllers: Default::default(),
        },
        leader_election: None,
        metrics_bind_address: "127.0.0.1:0".into(),
        health_probe_bind_address: "127.0.0.1:0".into(),
    }
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
