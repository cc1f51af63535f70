//! The integration tests' kit (one binary, `tests/e2e`). Here: a substrate fleet, the hub
//! process's configuration for it and GETs to its local endpoints. In the rooms below: one
//! member's exporter and counted clients, object builders, polling, Prometheus text, free ports
//! and child test processes, the process's one log subscriber, and the fake servers (ARM, OTLP
//! receivers, hostile members, Prometheus, replicas of the binary).

pub mod arm;
pub mod audit;
pub mod chart;
pub mod hostile;
pub mod otlp;
pub mod prometheus;
pub mod replicas;
pub mod tls;

mod exporter;
mod local;
mod logs;
mod members;
mod objects;
mod scrape;
mod slices;
mod waits;

pub use exporter::*;
pub use local::*;
pub use logs::*;
pub use members::*;
pub use objects::*;
pub use scrape::*;
pub use slices::*;
pub use waits::*;

use std::time::Duration;

use fleetnet_hub::client::Limits;
use fleetnet_testenv::Fleet;

/// A fleet of `members` that prints no readiness figures, and a hub client.
pub async fn quiet_fleet<S: Into<String>>(
    members: impl IntoIterator<Item = S>,
) -> (Fleet, kube::Client) {
    let fleet = Fleet::builder()
        .members(members)
        .quiet()
        .start()
        .await
        .expect("fleet starts");
    let hub = fleet.hub().client().await.expect("hub client");
    (fleet, hub)
}

/// Waits until the running product shows `member` in `phase`.
pub async fn wait_phase(
    running: &fleetnet_hub::app::Running,
    member: &str,
    phase: fleetnet_hub::fleet::Phase,
) {
    eventually(&format!("member {member} {phase:?}"), || async {
        running
            .state
            .member(member)
            .filter(|m| m.phase == phase)
            .map(|_| ())
    })
    .await;
}

/// The whole process's configuration for `fleet`, members from `dir`, generous hub budget,
/// no leader election; tests change what they need.
pub fn app_config(fleet: &Fleet, dir: &std::path::Path) -> fleetnet_hub::app::AppConfig {
    fleetnet_hub::app::AppConfig {
        hub_kubeconfig: Some(fleet.hub().kubeconfig_path().to_path_buf()),
        hub_limits: Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        },
        runtime: fleetnet_hub::fleet::RuntimeConfig {
            kubeconfig_dir: dir.to_path_buf(),
            namespace_prefix: fleetnet_hub::fleet::registry::DEFAULT_NAMESPACE_PREFIX.into(),
            member_limits: Limits::default(),
            member_sync_timeout: Duration::from_secs(10),
            cleanup_on_remove: false,
            records_namespace: "default".into(),
            records_prefix: "fleetnet-hub".into(),
            traffic_manager: false,
            rescan_interval: Duration::from_secs(30),
            instance: "test".into(),
            trust: Default::default(),
            controllers: Default::default(),
            quotas: Default::default(),
        },
        leader_election: None,
        metrics_bind_address: "127.0.0.1:0".into(),
        health_probe_bind_address: "127.0.0.1:0".into(),
    }
}

/// `GET path` on a local HTTP endpoint: (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// How the apiserver serves a rendered object's kind, from `discovery`; panics on a kind the
/// apiserver does not serve (a chart that renders it is broken).
pub fn served_as(
    discovery: &kube::discovery::Discovery,
    obj: &kube::api::DynamicObject,
) -> (
    kube::discovery::ApiResource,
    kube::discovery::ApiCapabilities,
) {
    let types = obj.types.clone().expect("apiVersion/kind");
    let gvk = kube::api::GroupVersionKind::try_from(&types).expect("gvk");
    discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("hub does not serve {gvk:?}"))
}
