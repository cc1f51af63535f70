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
