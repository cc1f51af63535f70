//! RBAC proven minimal: every request the controller makes, recorded server-side by the real
//! kube-apiservers' audit logs, compared with what the rendered charts grant. The test fails when
//! the charts grant a verb the controller never uses, or the controller uses one they do not grant
//! (or the apiserver answers 403).
//!
//! The controller runs in-process (`app::start`) with every job and exactly the charts'
//! identities: the hub chart's ServiceAccount bound by its rendered Roles, the member chart's
//! ServiceAccount bound by its rendered ClusterRole (and its Role in the fleet system namespace),
//! each with a bound (TokenRequest) token. The workload walks every path that calls the API, one
//! function per job: the export jobs (`exports`), the ServiceImport jobs (`imports`), the
//! MultiClusterService job (`multicluster`), the EndpointSliceImport job (`slice_imports`), the
//! membership job (`membership`: heartbeats, then a leave); leader election on a Lease (get,
//! create, renew, release) and `--cleanup-on-remove` with a member's kubeconfig removed.

mod exports;
mod imports;
mod listed;
mod membership;
mod multicluster;
mod slice_imports;
mod status;
mod used;

use crate::support;
use crate::support::audit;
use crate::support::chart::{RELEASE_NS, of_kind, render};

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleetnet_hub::api::{InternalServiceExport, WEIGHT_ANNOTATION};
use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::client::Limits;
use fleetnet_hub::config::{Config, LeaderElection};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

const RELEASE: &str = "fleetnet-hub";
const MEMBERS: [&str; 2] = ["member-1", "member-2"];
/// The members' fleet system namespace (the member chart's `fleetSystemNamespace` default and the
/// controller's `--fleet-system-namespace` default).
const SYSTEM: &str = "fleet-system";

/// What the workloads walk with: admin clients of the hub and the members, the members' hub
/// namespaces, and the hub's audit log with the controller's user there.
struct Walk {
    hub: kube::Client,
    m1: kube::Client,
    m2: kube::Client,
    ns1: String,
    ns2: String,
    hub_log: PathBuf,
    hub_user: String,
}

/// Server-side applies the rendered identity and RBAC objects (nothing else) to a cluster.
async fn apply_rbac(client: &kube::Client, docs: &[Value]) -> usize {
    let pp = PatchParams::apply("rbac-test").force();
    let mut applied = 0;
    for d in docs {
        let name = d["metadata"]["name"].as_str().expect("name");
        let ns = d["metadata"]["namespace"].as_str().unwrap_or(RELEASE_NS);
        let patch = Patch::Apply(d);
        let result = match d["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            "Role" => Api::<Role>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            "RoleBinding" => Api::<RoleBinding>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            _ => continue,
        };
        result.unwrap_or_else(|e| panic!("apply {} {name}: {e}", d["kind"]));
        applied += 1;
    }
    applied
}

/// `system:serviceaccount:<ns>:<name>` of the one ServiceAccount a rendering holds.
fn service_account(docs: &[Value]) -> (String, String) {
    let sas = of_kind(docs, "ServiceAccount");
    assert_eq!(sas.len(), 1, "one ServiceAccount rendered");
    let m = &sas[0]["metadata"];
    (
        m["namespace"].as_str().expect("namespace").to_string(),
        m["name"].as_str().expect("name").to_string(),
    )
}

/// The value of `--<flag>=` in the rendered Deployment's args.
fn deployment_flag(docs: &[Value], flag: &str) -> String {
    let deploy = of_kind(docs, "Deployment");
    let args = deploy[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args");
    let prefix = format!("--{flag}=");
    args.iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("rendered Deployment has no {prefix}"))
        .to_string()
}

/// Issues a 1 h bound token for the ServiceAccount (what `kubectl create token --duration=1h`
/// does) and writes its kubeconfig to `path`.
async fn token_kubeconfig(cluster: &fleetnet_testenv::Cluster, sa: &(String, String), path: &Path) {
    let identity = fleetnet_testenv::ScopedIdentity::bare(&sa.0, &sa.1);
    cluster
        .issue_scoped_kubeconfig(&identity, path)
        .await
        .unwrap_or_else(|e| panic!("token for {}/{}: {e}", sa.0, sa.1));
}
