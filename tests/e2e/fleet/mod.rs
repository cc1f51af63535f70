//! The multi-member runtime on real apiservers: several members at once, members joining,
//! leaving and rotating their kubeconfig, member and hub outages, a malformed kubeconfig.

mod hub_access;
mod hub_namespace;
pub(crate) mod inventory;
mod jobs;
mod lifecycle;
mod outages;
mod rotation;
mod serving;
mod sources;
mod status;
mod watches;

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetnet_hub::app::{self, Extensions, Running};
use fleetnet_hub::config::{Config, LeaderElection};
use fleetnet_hub::fleet::Phase;
use fleetnet_testenv::Fleet;
use support::*;

async fn http_get_body(addr: std::net::SocketAddr, path: &str) -> String {
    http_get(addr, path).await.1
}

fn config(fleet: &Fleet, dir: &Path) -> Config {
    app_config(fleet, dir)
}

/// A kubeconfig directory of our own, seeded with some of the fleet's members.
fn member_dir(fleet: &Fleet, members: &[&str]) -> PathBuf {
    kubeconfig_dir(fleet, &format!("kubeconfigs-{}", rand_suffix()), members)
}

fn rand_suffix() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Writes `file` into a new timestamped directory and points `..data` at it atomically.
fn secret_swap(dir: &Path, version: &str, file: &str, content: &str) {
    std::fs::create_dir(dir.join(version)).expect("mkdir");
    std::fs::write(dir.join(version).join(file), content).expect("write");
    std::os::unix::fs::symlink(version, dir.join("..data_tmp")).expect("link");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
}

async fn wait_ready(running: &Running) {
    eventually("process ready", || async {
        running.state.ready().then_some(())
    })
    .await;
}

/// A hub, members `alpha` and `beta` in the kubeconfig directory, and the controller running.
async fn alpha_and_beta() -> (Fleet, Running) {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    (fleet, running)
}

/// Creates `ns/name` Service + ServiceExport in `member` and waits for the ISE in the hub.
async fn export_and_wait(fleet: &Fleet, member: &str, ns: &str, name: &str) -> Duration {
    let client = fleet.member(member).client().await.expect("member client");
    namespace(&client, ns).await;
    let started = Instant::now();
    create_service(&client, &service(ns, name, 80)).await;
    create_export(&client, ns, name, &[]).await;
    let hub = fleet.hub().client().await.expect("hub client");
    wait_ise(
        &hub,
        &fleet.hub_namespace(member),
        &format!("{ns}-{name}"),
        |i| i.spec.service_reference.cluster_id == member,
    )
    .await;
    started.elapsed()
}

async fn ise_names(fleet: &Fleet, member: &str) -> Vec<String> {
    let hub = fleet.hub().client().await.expect("hub client");
    let mut names: Vec<String> = ises(&hub, &fleet.hub_namespace(member))
        .list(&Default::default())
        .await
        .expect("list ISEs")
        .items
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .collect();
    names.sort();
    names
}
