//! Issue #11, "a restart changes nothing": the process restarted (gracefully or with
//! `kill -9`) on a converged fleet makes no write; a kill in the middle of exporting deletes no
//! ISE and leaves exactly one per export; quick create/delete leaves nothing behind; dangling
//! ISEs are removed (another member's are not); the loser of a hub-name collision takes over;
//! a public IP listed late reaches the ISE; a member back from an outage is served at once;
//! a terminating ISE's verdict is not reflected.
//!
//! Writes are counted server-side, from each apiserver's own `apiserver_request_total`.

use crate::support;

use crate::support::arm;

use std::collections::{BTreeMap, BTreeSet};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arm::{FakeArm, FakeIp};
use fleetnet_hub::api::{
    CONDITION_CONFLICT, CONDITION_VALID, ExportedObjectReference, InternalServiceExport,
    InternalServiceExportSpec, ServicePort as IsePort,
};
use fleetnet_hub::app::{self, Extensions, Running};
use fleetnet_hub::azure::AzureMembers;
use fleetnet_hub::azure::{AzureConfig, AzureFleet};
use fleetnet_hub::client::Limits;
use fleetnet_hub::config::Config;
use fleetnet_hub::fleet::Phase;
use fleetnet_testenv::{COUNTED_RESOURCES, Fleet, WRITE_VERBS};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use support::*;

/// The member namespace most tests export from.
mod binary;
mod conflicts;
mod counted;
mod leftovers;
mod recovery;
mod restarted;

use binary::HubProcess;
use counted::*;

const NS: &str = "work";
/// The test's own finalizer, to hold an ISE while it terminates.
const HOLD_FINALIZER: &str = "test.fleetnet/hold";
/// The hub budget of the binary when nothing is to be slowed down.
const FAST_HUB: u32 = 500;

// ---------------------------------------------------------------------------------------------
// Polling, configuration, object builders.
// ---------------------------------------------------------------------------------------------

/// The in-process product with raised budgets, so setup is fast.
fn app_config(fleet: &Fleet, dir: &Path) -> Config {
    init_test_logs();
    support::config_builder(fleet, dir)
        .hub_limits(Limits {
            qps: 500.0,
            burst: 1000,
            ..Limits::default()
        })
        .member_limits(Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        })
        .member_sync_timeout(Duration::from_secs(60))
        .build()
        .expect("a valid configuration")
}

/// A fleet of one member `m`: the fleet, a hub client, `m`'s namespace in the hub, a client of `m`.
async fn one_member(m: &str) -> (Fleet, kube::Client, String, kube::Client) {
    let fleet = Fleet::builder().members([m]).start().await.expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(m);
    let member = fleet.member(m).client().await.expect("member client");
    (fleet, hub, hub_ns, member)
}

/// The product, in this process, exporting `fleet`'s member `m`; ready.
async fn started_in_process(fleet: &Fleet, m: &str) -> Running {
    let config = app_config(fleet, &kubeconfig_dir(fleet, "restart-kubeconfigs", &[m]));
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_app_ready(&running, &[m]).await;
    running
}

async fn wait_app_ready(running: &Running, members: &[&str]) {
    within(Duration::from_secs(60), "process ready", || async {
        let all = members.iter().all(|m| {
            running
                .state
                .member(m)
                .is_some_and(|s| s.phase == Phase::Ready)
        });
        (all && running.state.ready()).then_some(())
    })
    .await;
}

/// Creates Service + ServiceExport `ns/<name>` for every name, 16 at a time.
async fn create_pairs(client: &kube::Client, ns: &str, names: Vec<String>) {
    futures::stream::iter(names)
        .for_each_concurrent(16, |name| {
            let client = client.clone();
            async move {
                create_service(&client, &service(ns, &name, 80)).await;
                create_export(&client, ns, &name, &[]).await;
            }
        })
        .await;
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i:03}")).collect()
}

async fn list_ises(hub: &kube::Client, hub_ns: &str) -> Vec<InternalServiceExport> {
    ises(hub, hub_ns)
        .list(&Default::default())
        .await
        .expect("list ISEs")
        .items
}

async fn list_exports(client: &kube::Client, ns: &str) -> Vec<fleetnet_hub::api::ServiceExport> {
    exports(client, ns)
        .list(&Default::default())
        .await
        .expect("list ServiceExports")
        .items
}

fn is_valid(se: &fleetnet_hub::api::ServiceExport) -> bool {
    condition(se, CONDITION_VALID).is_some_and(|(s, _, _)| s == "True")
}

/// Every ServiceExport in `ns` of `member` has its ISE, Valid=True and a Conflict condition;
/// `expected` of them. Returns a description of what is missing, or `None` when converged.
async fn unconverged(
    hub: &kube::Client,
    hub_ns: &str,
    member: &kube::Client,
    ns: &str,
    expected: usize,
) -> Option<String> {
    let ses = list_exports(member, ns).await;
    let ise_names: BTreeSet<String> = list_ises(hub, hub_ns)
        .await
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .collect();
    let mut missing = vec![];
    if ses.len() != expected {
        missing.push(format!("{} ServiceExports, expected {expected}", ses.len()));
    }
    let no_ise = ses
        .iter()
        .filter(|se| {
            !ise_names.contains(&format!(
                "{ns}-{}",
                se.metadata.name.as_deref().unwrap_or_default()
            ))
        })
        .count();
    let not_valid = ses.iter().filter(|se| !is_valid(se)).count();
    let no_conflict = ses
        .iter()
        .filter(|se| condition(se, CONDITION_CONFLICT).is_none())
        .count();
    if no_ise + not_valid + no_conflict > 0 {
        missing.push(format!(
            "{no_ise} without ISE, {not_valid} not Valid=True, {no_conflict} without Conflict"
        ));
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Waits until [`unconverged`] has nothing to say about `member`'s exports in [`NS`].
async fn wait_converged(
    hub: &kube::Client,
    hub_ns: &str,
    member: &kube::Client,
    expected: usize,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let Some(what) = unconverged(hub, hub_ns, member, NS, expected).await else {
            return started.elapsed();
        };
        assert!(
            started.elapsed() < limit,
            "{hub_ns}: not converged within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A minimal HTTP/1.1 GET: (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await.ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}
