//! Member kubeconfig directories as the hub reads them: `<member>.yaml`, a copy of each member's
//! admin kubeconfig.

use std::path::{Path, PathBuf};

use fleetnet_testenv::Fleet;

/// Directory `name` in the fleet's scratch directory, holding `members`' kubeconfigs (created
/// if need be; a member already there is written again).
pub fn kubeconfig_dir(fleet: &Fleet, name: &str, members: &[&str]) -> PathBuf {
    let dir = fleet.scratch_dir().join(name);
    std::fs::create_dir_all(&dir).expect("mkdir kubeconfig dir");
    for m in members {
        add_member(fleet, &dir, m);
    }
    dir
}

/// Writes `member`'s kubeconfig into `dir` in one step (a running hub never reads half of it).
pub fn add_member(fleet: &Fleet, dir: &Path, member: &str) {
    let tmp = dir.join(format!(".{member}.tmp"));
    std::fs::copy(fleet.member(member).kubeconfig_path(), &tmp).expect("copy kubeconfig");
    std::fs::rename(&tmp, dir.join(format!("{member}.yaml"))).expect("rename kubeconfig");
}

/// A fleet of the one member `member`, with `namespaces` created in it, as a job's tests start
/// from it: the fleet, a hub client, a client of the member, and its namespace in the hub.
pub async fn one_member_fleet(
    member: &str,
    namespaces: &[&str],
) -> (Fleet, kube::Client, kube::Client, String) {
    let fleet = Fleet::builder()
        .members([member])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let client = fleet.member(member).client().await.expect("member client");
    let hub_ns = fleet.hub_namespace(member);
    for ns in namespaces {
        super::namespace(&client, ns).await;
    }
    (fleet, hub, client, hub_ns)
}
