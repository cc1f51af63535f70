//! A member kubeconfig, a flag or an endpoint can never silently widen trust, on real
//! apiservers: refused kubeconfigs (exec, tokenFile, insecure TLS, plain http off loopback,
//! proxy-url, a field the vetting does not know, a symlink out of the directory, two files for
//! one member, an oversized file, a FIFO) never reach their server, name the field and the
//! file, and leave the other members alone; the opt-in for insecure TLS is shown per member; every write carries fleetnet-hub's
//! field manager; no secret reaches a log line, an error, `/members`, `/metrics` or `check`.

mod refused;
mod shapes;

use crate::support;
use crate::support::tls::base64;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::config::Config;
use fleetnet_hub::fleet::{Phase, TrustPolicy};
use fleetnet_testenv::Fleet;
use support::*;

const SECRETS: [&str; 7] = [
    "SECRET-EXEC-TOKEN-7f3a",
    "SECRET-FILE-CONTENT-91bc",
    "SECRET-INSECURE-TOKEN-5d2e",
    "SECRET-YAML-TOKEN-0c4f",
    "SECRET-WRONG-TOKEN-8e1d",
    "SECRET-AZURE-CLIENT-SECRET-3b9a",
    "SECRET-PLAIN-HTTP-TOKEN-6a1f",
];

/// No `(surface, text)` of `emitted` holds any of `secrets`.
fn none_leaked(emitted: &[(&str, &str)], secrets: &[&str]) {
    for (surface, text) in emitted {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret} leaked into {surface}");
        }
    }
}

/// A TCP listener standing in as a refused member's server: counts connections, answers none.
async fn decoy() -> (SocketAddr, Arc<AtomicUsize>) {
    decoy_on(std::net::Ipv4Addr::LOCALHOST.into()).await
}

/// [`decoy`] on `ip`.
async fn decoy_on(ip: std::net::IpAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (addr, count)
}

/// An address of this machine that is not loopback: the source address of its default route
/// (a UDP connect sends nothing). Without one, 0.0.0.0, which Linux connects locally.
fn non_loopback_ip() -> std::net::IpAddr {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("203.0.113.1:9").and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into())
}

/// What a test starts from: the captured logs, a fleet with one real member, a decoy server
/// that must see no connection, and a scratch directory.
struct Scene {
    logs: LogCapture,
    fleet: Fleet,
    decoy: SocketAddr,
    connections: Arc<AtomicUsize>,
    scratch: tempfile::TempDir,
}

async fn scene(member: &str) -> Scene {
    let logs = capture_logs();
    let fleet = Fleet::builder()
        .members([member])
        .start()
        .await
        .expect("fleet starts");
    let (decoy, connections) = decoy().await;
    let scratch = tempfile::tempdir().expect("tempdir");
    Scene {
        logs,
        fleet,
        decoy,
        connections,
        scratch,
    }
}

fn kubeconfig(server: &str, cluster_extra: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    server: {server}\n{cluster_extra}users:\n- name: u\n  user:\n{user}"
    )
}

fn config(fleet: &Fleet, dir: &Path, trust: TrustPolicy) -> Config {
    config_builder(fleet, dir)
        .member_sync_timeout(Duration::from_secs(60))
        .rescan_interval(Duration::from_secs(1))
        .instance("security-test")
        .trust(trust)
        .build()
        .expect("a valid configuration")
}
