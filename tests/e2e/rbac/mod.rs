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
//! `inventory` does the same with the values that serve fleet's inventory
//! (`controller.memberInventory=true`, `rbac.hubAccess=clusterWide`).

mod exports;
mod imports;
mod inventory;
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

impl Walk {
    /// Every job's workload: the export jobs, the ServiceImport jobs, the MultiClusterService
    /// job, the EndpointSliceImport job, the membership job (member-1's leave last).
    async fn every_job(&self) {
        exports::walk(self).await;
        imports::walk(self).await;
        multicluster::walk(self).await;
        slice_imports::walk(self).await;
        membership::walk(self).await;
    }
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

/// A hub and [`MEMBERS`], each apiserver auditing `users`' requests into
/// `<audit dir>/<cluster>.audit.log` ([`audit_log`]); the audit directory is returned with the
/// fleet (it must outlive it).
async fn audited_fleet(users: &[&str]) -> (Fleet, tempfile::TempDir) {
    let audit_dir = tempfile::tempdir().expect("tempdir");
    let policy = audit_dir.path().join("policy.yaml");
    std::fs::write(&policy, audit::policy(users)).expect("policy");
    let mut builder = Fleet::builder().members(MEMBERS);
    for cluster in std::iter::once("hub").chain(MEMBERS) {
        builder = builder.apiserver_args(
            cluster,
            [
                format!("--audit-policy-file={}", policy.display()),
                format!(
                    "--audit-log-path={}",
                    audit_log(&audit_dir, cluster).display()
                ),
                "--audit-log-mode=blocking".to_string(),
            ],
        );
    }
    (builder.start().await.expect("fleet"), audit_dir)
}

fn audit_log(audit_dir: &tempfile::TempDir, cluster: &str) -> PathBuf {
    audit_dir.path().join(format!("{cluster}.audit.log"))
}

/// In each member: the release and fleet system namespaces, the member chart's RBAC applied,
/// and a kubeconfig of its ServiceAccount in `dir` (`<member>.yaml`). Returns admin clients of
/// the members.
async fn members_as_the_chart(
    fleet: &Fleet,
    member_docs: &[Value],
    member_sa: &(String, String),
    dir: &Path,
) -> std::collections::BTreeMap<&'static str, kube::Client> {
    std::fs::create_dir_all(dir).expect("kubeconfig dir");
    let mut admins = std::collections::BTreeMap::new();
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member admin");
        for ns in [RELEASE_NS, SYSTEM] {
            fleetnet_testenv::ensure_namespace(&client, m, ns)
                .await
                .expect("namespace");
        }
        assert!(apply_rbac(&client, member_docs).await > 0);
        let staged = dir.with_extension(format!("{m}.staged"));
        token_kubeconfig(fleet.member(m), member_sa, &staged).await;
        std::fs::rename(&staged, dir.join(format!("{m}.yaml"))).expect("place kubeconfig");
        admins.insert(m, client);
    }
    admins
}

/// The hub's audited requests of `user` against what `docs` grant its ServiceAccount, hub
/// namespaces (`<prefix>*`) as one scope.
fn add_hub(
    cmp: &mut audit::Comparison,
    log: &Path,
    user: &str,
    docs: &[Value],
    sa: &(String, String),
    prefix: &str,
) {
    let requests = audit::read(log, user);
    assert!(!requests.is_empty(), "no audited hub requests");
    let grants = audit::grants(docs, &sa.0, &sa.1);
    let class = |ns: &str| match ns.strip_prefix(prefix) {
        Some(_) => format!("{prefix}*"),
        None => ns.to_string(),
    };
    cmp.add("hub", &requests, &grants, class);
}

/// Nothing refused (403), nothing used that is not granted, nothing granted that is not used.
fn assert_exact(cmp: &audit::Comparison, table: &str) {
    let denied: Vec<String> = cmp
        .denied
        .iter()
        .map(|(c, r)| format!("{c}: {r:?}"))
        .collect();
    assert!(
        denied.is_empty(),
        "the apiserver refused requests (403):\n{}\n{table}",
        denied.join("\n")
    );
    let ungranted = cmp.ungranted();
    assert!(
        ungranted.is_empty(),
        "used but not granted by the charts: {ungranted:?}\n{table}"
    );
    let unused = cmp.unused();
    assert!(
        unused.is_empty(),
        "granted by the charts but never used by the controller: {unused:?}\n{table}"
    );
}

/// The controller's configuration as the chart `docs` runs it (its flags: hub namespace prefix,
/// records and leader Lease, member Secrets' namespace), as the chart's ServiceAccount
/// (`hub_kubeconfig`), members from `dir`, budgets generous enough that no workload waits.
fn as_the_chart_runs_it(
    docs: &[Value],
    hub_kubeconfig: PathBuf,
    dir: &Path,
    instance: &str,
) -> fleetnet_hub::config::ConfigBuilder {
    let generous = Limits {
        qps: 200.0,
        burst: 400,
        ..Limits::default()
    };
    let (lease_ns, lease_name) = (
        deployment_flag(docs, "leader-election-namespace"),
        deployment_flag(docs, "leader-election-id"),
    );
    Config::builder(Some(hub_kubeconfig), dir)
        .namespace_prefix(deployment_flag(docs, "hub-namespace-prefix"))
        .hub_limits(generous.clone())
        .member_limits(generous)
        .member_sync_timeout(Duration::from_secs(20))
        .records(&lease_ns, &lease_name)
        .member_secrets_namespace(Some(deployment_flag(docs, "member-secrets-namespace")))
        .instance(instance)
        .leader_election(Some(LeaderElection {
            namespace: lease_ns,
            name: lease_name,
            identity: instance.into(),
            shard_members: false,
            shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
        }))
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
}
