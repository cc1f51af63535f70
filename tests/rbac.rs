//! RBAC proven minimal: every request the controller makes, recorded server-side by the real
//! kube-apiservers' audit logs, compared with what the rendered charts grant. The test fails when
//! the charts grant a verb the controller never uses, or the controller uses one they do not grant
//! (or the apiserver answers 403).
//!
//! The controller runs in-process (`app::start`) with exactly the charts' identities: the hub
//! chart's ServiceAccount bound by its rendered Roles, the member chart's ServiceAccount bound by
//! its rendered ClusterRole, each with a bound (TokenRequest) token. The workload walks every path
//! that calls the API: export, a Service change, the hub's conflict verdict copied back, a weight
//! annotation (0: unexport; removed: export again, a repeated Event created anew), the Service
//! deleted (NotFound: live reads, ISE deleted), a ServiceExport deleted (unexport, finalizer
//! removed), a dangling ISE removed, leader election on a Lease (get, create, renew, release) and
//! `--cleanup-on-remove` with a member's kubeconfig removed.

#[path = "support/audit.rs"]
mod audit;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fleetnet_hub::api::{InternalServiceExport, WEIGHT_ANNOTATION};
use fleetnet_hub::app::{self, AppConfig, Extensions, LeaderElection};
use fleetnet_hub::client::Limits;
use fleetnet_hub::fleet::RuntimeConfig;
use fleetnet_testenv::{Fleet, ScopedIdentity};
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

const RELEASE: &str = "fleetnet-hub";
const RELEASE_NS: &str = "fleetnet-system";
const MEMBERS: [&str; 2] = ["member-1", "member-2"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// helm as tests/chart.sh finds it: `FLEETNET_HELM`, else the one tests/testenv/install.sh built.
fn helm() -> PathBuf {
    if let Ok(h) = std::env::var("FLEETNET_HELM") {
        return h.into();
    }
    let out = Command::new("bash")
        .arg(repo().join("tests/testenv/install.sh"))
        .arg("helm")
        .output()
        .expect("run tests/testenv/install.sh helm");
    assert!(
        out.status.success(),
        "install.sh helm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("helm directory").trim()).join("helm")
}

/// The Kubernetes version the substrate runs (tests/testenv/versions.env), for `--kube-version`.
fn kube_version() -> String {
    let env = std::fs::read_to_string(repo().join("tests/testenv/versions.env")).expect("versions");
    env.lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_VERSION="))
        .expect("KUBERNETES_VERSION")
        .trim()
        .to_string()
}

/// `helm template` of a chart, as the non-null documents.
fn render(release: &str, chart: &str, args: &[&str]) -> Vec<Value> {
    let out = Command::new(helm())
        .args(["template", "--kube-version", &kube_version(), release])
        .arg(repo().join(chart))
        .args(["--namespace", RELEASE_NS])
        .args(args)
        .output()
        .expect("run helm template");
    assert!(
        out.status.success(),
        "helm template {chart} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&String::from_utf8_lossy(&out.stdout))
        .expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
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
    let identity = ScopedIdentity {
        namespace: sa.0.clone(),
        name: sa.1.clone(),
        cluster_role: None,
        role: None,
        role_namespaces: vec![],
    };
    cluster
        .issue_scoped_kubeconfig(&identity, path)
        .await
        .unwrap_or_else(|e| panic!("token for {}/{}: {e}", sa.0, sa.1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_rbac_is_exactly_what_the_controller_uses() {
    // --- the charts, rendered as a release in the test's members --------------------------------
    let members_value = format!("members={{{}}}", MEMBERS.join(","));
    // As the controller runs below: with --cleanup-on-remove (its records need the Secrets rule).
    let cleanup = "controller.cleanupOnRemove=true";
    let hub_docs = render(
        RELEASE,
        "charts/fleetnet-hub",
        &["--set", &members_value, "--set", cleanup],
    );
    let member_docs = render("fleetnet-hub-member", "charts/fleetnet-hub-member", &[]);
    let hub_sa = service_account(&hub_docs);
    let member_sa = service_account(&member_docs);
    let hub_user = format!("system:serviceaccount:{}:{}", hub_sa.0, hub_sa.1);
    let member_user = format!("system:serviceaccount:{}:{}", member_sa.0, member_sa.1);
    let lease_name = deployment_flag(&hub_docs, "leader-election-id");
    let lease_ns = deployment_flag(&hub_docs, "leader-election-namespace");
    let prefix = deployment_flag(&hub_docs, "hub-namespace-prefix");

    // --- a hub and two members, each auditing the controller's users ------------------------------
    let audit_dir = tempfile::tempdir().expect("tempdir");
    let policy = audit_dir.path().join("policy.yaml");
    std::fs::write(&policy, audit::policy(&[&hub_user, &member_user])).expect("policy");
    let log_of = |cluster: &str| audit_dir.path().join(format!("{cluster}.audit.log"));
    let mut builder = Fleet::builder().members(MEMBERS);
    for cluster in std::iter::once("hub").chain(MEMBERS) {
        builder = builder.apiserver_args(
            cluster,
            [
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", log_of(cluster).display()),
                "--audit-log-mode=blocking".to_string(),
            ],
        );
    }
    let fleet = builder.start().await.expect("fleet");
    init_test_logs();

    // --- the charts' RBAC applied, and tokens for their ServiceAccounts ---------------------------
    let hub = fleet.hub().client().await.expect("hub admin");
    fleetnet_testenv::ensure_namespace(&hub, "hub", RELEASE_NS)
        .await
        .expect("release namespace");
    assert!(apply_rbac(&hub, &hub_docs).await > 0);
    let scratch = fleet.scratch_dir().to_path_buf();
    let hub_kubeconfig = scratch.join("hub-sa.kubeconfig");
    token_kubeconfig(fleet.hub(), &hub_sa, &hub_kubeconfig).await;
    let dir = scratch.join("rbac-kubeconfigs");
    std::fs::create_dir_all(&dir).expect("kubeconfig dir");
    let mut admins = std::collections::BTreeMap::new();
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member admin");
        fleetnet_testenv::ensure_namespace(&client, m, RELEASE_NS)
            .await
            .expect("release namespace");
        assert!(apply_rbac(&client, &member_docs).await > 0);
        let staged = scratch.join(format!("{m}.staged"));
        token_kubeconfig(fleet.member(m), &member_sa, &staged).await;
        std::fs::rename(&staged, dir.join(format!("{m}.yaml"))).expect("place kubeconfig");
        admins.insert(m, client);
    }

    // --- the controller, in-process, as the chart runs it ---------------------------------------
    let config = AppConfig {
        hub_kubeconfig: Some(hub_kubeconfig),
        hub_limits: Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        },
        runtime: RuntimeConfig {
            kubeconfig_dir: dir.clone(),
            namespace_prefix: prefix.clone(),
            member_limits: Limits {
                qps: 200.0,
                burst: 400,
                ..Limits::default()
            },
            member_sync_timeout: Duration::from_secs(20),
            cleanup_on_remove: true,
            records_namespace: lease_ns.clone(),
            records_prefix: lease_name.clone(),
            traffic_manager: false,
            rescan_interval: Duration::from_secs(5),
            instance: "rbac-test".into(),
            trust: Default::default(),
            controllers: Default::default(),
            quotas: Default::default(),
        },
        leader_election: Some(LeaderElection {
            namespace: lease_ns.clone(),
            name: lease_name.clone(),
            identity: "rbac-test".into(),
            shard_members: false,
            shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
        }),
        metrics_bind_address: "127.0.0.1:0".into(),
        health_probe_bind_address: "127.0.0.1:0".into(),
    };
    let running = app::start(config, Extensions::default())
        .await
        .expect("controller starts");
    eventually("leader", || async {
        running.claim.may_write().then_some(())
    })
    .await;

    let m1 = &admins["member-1"];
    let m2 = &admins["member-2"];
    let ns1 = fleet.hub_namespace("member-1");
    let ns2 = fleet.hub_namespace("member-2");
    namespace(m1, "shop").await;
    namespace(m2, "web").await;

    // Export: member-1 shop/cart and shop/pay, member-2 web/app.
    for (client, ns, name) in [
        (m1, "shop", "cart"),
        (m1, "shop", "pay"),
        (m2, "web", "app"),
    ] {
        create_service(client, &service(ns, name, 80)).await;
        create_export(client, ns, name, &[]).await;
    }
    wait_ise(&hub, &ns1, "shop-cart", |_| true).await;
    wait_ise(&hub, &ns1, "shop-pay", |_| true).await;
    wait_ise(&hub, &ns2, "web-app", |_| true).await;
    wait_condition(m1, "shop", "cart", "Valid", "True", "ServiceIsValid").await;

    // A Service change: the ISE's spec is patched.
    Api::<Service>::namespaced(m1.clone(), "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"ports": [{"name": "http", "port": 8080}]}})),
        )
        .await
        .expect("change port");
    wait_ise(&hub, &ns1, "shop-cart", |i| {
        i.spec.ports.first().is_some_and(|p| p.port == 8080)
    })
    .await;

    // The hub's verdict (as fleet-networking's hub controller writes it) is copied back.
    ises(&hub, &ns1)
        .patch_status(
            "shop-cart",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [{
                "type": "Conflict", "status": "False", "reason": "NoConflictFound",
                "message": "service shop/cart is exported without conflict",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
            }]}})),
        )
        .await
        .expect("hub verdict");
    wait_condition(m1, "shop", "cart", "Conflict", "False", "NoConflictFound").await;

    // An EndpointSlice of the exported Service: exported, updated, then withdrawn when it is no
    // longer the Service's (live reads of the slice and its export before the withdrawal).
    let cart_slices = slices(m1, "shop");
    cart_slices
        .create(
            &PostParams::default(),
            &endpoint_slice("shop", "cart-1", "cart", &["10.0.0.1"]),
        )
        .await
        .expect("create slice");
    wait_slice_export(&hub, &ns1, "shop", "cart-1", |_| true).await;
    cart_slices
        .patch(
            "cart-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}}
            ]})),
        )
        .await
        .expect("add an endpoint");
    wait_slice_export(&hub, &ns1, "shop", "cart-1", |e| {
        e.spec.endpoints.len() == 2
    })
    .await;
    cart_slices
        .patch(
            "cart-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"kubernetes.io/service-name": null}}})),
        )
        .await
        .expect("unlabel");
    wait_slice_unexported(&hub, &ns1, "shop", "cart-1").await;
    eventually("cart-1's unique name removed", || {
        let api = cart_slices.clone();
        async move {
            let s = api.get("cart-1").await.ok()?;
            unique_name_of(&s).is_none().then_some(())
        }
    })
    .await;

    // Weight 0 unexports; removing the annotation exports again (the same Events again: the
    // recorder patches their series).
    let weight = |w: Value| json!({"metadata": {"annotations": {WEIGHT_ANNOTATION: w}}});
    exports(m1, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&weight(json!("0"))),
        )
        .await
        .expect("weight 0");
    wait_ise_gone(&hub, &ns1, "shop-cart").await;
    exports(m1, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&weight(Value::Null)),
        )
        .await
        .expect("weight removed");
    wait_ise(&hub, &ns1, "shop-cart", |_| true).await;
    wait_condition(m1, "shop", "cart", "Valid", "True", "ServiceIsValid").await;

    // The Service deleted: NotFound, the ISE goes.
    Api::<Service>::namespaced(m1.clone(), "shop")
        .delete("cart", &DeleteParams::default())
        .await
        .expect("delete service");
    wait_condition(m1, "shop", "cart", "Valid", "False", "ServiceNotFound").await;
    wait_ise_gone(&hub, &ns1, "shop-cart").await;

    // A ServiceExport deleted: unexport, then the finalizer goes and so does the export.
    exports(m1, "shop")
        .delete("pay", &DeleteParams::default())
        .await
        .expect("delete export");
    wait_ise_gone(&hub, &ns1, "shop-pay").await;
    eventually("shop/pay gone", || {
        let api = exports(m1, "shop");
        async move {
            api.get_opt("pay")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        }
    })
    .await;

    // A dangling ISE (member-1's, no ServiceExport behind it) is removed.
    let ghost: InternalServiceExport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "InternalServiceExport",
        "metadata": {"name": "shop-ghost", "namespace": ns1},
        "spec": {
            "ports": [{"port": 80, "protocol": "TCP"}],
            "serviceReference": {
                "clusterId": "member-1", "kind": "Service", "namespace": "shop", "name": "ghost",
                "resourceVersion": "1", "generation": 1, "uid": "00000000-0000-0000-0000-00000000beef",
                "namespacedName": "shop/ghost"
            }
        }
    }))
    .expect("ISE");
    ises(&hub, &ns1)
        .create(&PostParams::default(), &ghost)
        .await
        .expect("create dangling ISE");
    wait_ise_gone(&hub, &ns1, "shop-ghost").await;

    // --cleanup-on-remove: member-2's kubeconfig removed; its ISE goes, its finalizer too.
    std::fs::remove_file(dir.join("member-2.yaml")).expect("remove member-2");
    wait_ise_gone(&hub, &ns2, "web-app").await;
    eventually("web/app finalizer removed", || {
        let api = exports(m2, "web");
        async move {
            let se = api.get_opt("app").await.ok().flatten()?;
            se.metadata
                .finalizers
                .unwrap_or_default()
                .is_empty()
                .then_some(())
        }
    })
    .await;

    // Shutdown releases the Lease.
    running.shutdown().await;
    let lease =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(hub.clone(), &lease_ns)
            .get(&lease_name)
            .await
            .expect("lease");
    assert!(
        lease.spec.and_then(|s| s.holder_identity).is_none(),
        "the Lease was released"
    );

    // --- used (audit logs) vs granted (rendered charts) -------------------------------------------
    let mut cmp = audit::Comparison::default();
    let hub_requests = audit::read(&log_of("hub"), &hub_user);
    assert!(!hub_requests.is_empty(), "no audited hub requests");
    let hub_grants = audit::grants(&hub_docs, &hub_sa.0, &hub_sa.1);
    let hub_class = |ns: &str| match ns.strip_prefix(prefix.as_str()) {
        Some(_) => format!("{prefix}*"),
        None => ns.to_string(),
    };
    cmp.add("hub", &hub_requests, &hub_grants, hub_class);
    let member_grants = audit::grants(&member_docs, &member_sa.0, &member_sa.1);
    for m in MEMBERS {
        let requests = audit::read(&log_of(m), &member_user);
        assert!(!requests.is_empty(), "no audited requests in {m}");
        cmp.add("member", &requests, &member_grants, str::to_string);
    }
    let table = cmp.table();
    eprintln!("\nRBAC: used (kube-apiserver audit logs) vs granted (rendered charts)\n{table}\n");

    // `fleetnet-hub check` asks each member for a fixed list of permissions: report where that
    // list and the proven use disagree (the list lives in src/check.rs).
    let used_member: std::collections::BTreeSet<(String, String, String)> = cmp
        .rows
        .iter()
        .filter(|((cluster, ..), row)| cluster == "member" && !row.seen.is_empty())
        .map(|((_, g, r, v, _), _)| (g.clone(), r.clone(), v.clone()))
        .collect();
    let asked: std::collections::BTreeSet<(String, String, String)> =
        fleetnet_hub::check::MEMBER_PERMISSIONS
            .iter()
            .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
            .collect();
    assert_eq!(
        asked.difference(&used_member).collect::<Vec<_>>(),
        Vec::<&(String, String, String)>::new(),
        "`fleetnet-hub check` (src/check.rs MEMBER_PERMISSIONS) requires what the controller never uses"
    );
    assert_eq!(
        used_member.difference(&asked).collect::<Vec<_>>(),
        Vec::<&(String, String, String)>::new(),
        "`fleetnet-hub check` does not ask for what the controller uses"
    );

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

// --- the rendered rules, against a list kept here (#40 item 9) -------------------------------------

/// One rendered rule: where it applies (`ClusterRole` or `Role <namespace>`), API group, resource,
/// resourceNames and verbs (both sorted).
type Rule = (String, String, String, Vec<String>, Vec<String>);

/// Every (group, resource) of every rule of the rendered Roles and ClusterRoles, one row each.
fn rendered_rules(docs: &[Value]) -> std::collections::BTreeSet<Rule> {
    let strings = |v: &Value| -> Vec<String> {
        let mut s: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        s.sort();
        s
    };
    let mut rows = std::collections::BTreeSet::new();
    for d in of_kind(docs, "Role")
        .into_iter()
        .chain(of_kind(docs, "ClusterRole"))
    {
        let scope = match d["kind"].as_str() {
            Some("Role") => format!("Role {}", d["metadata"]["namespace"].as_str().unwrap_or("")),
            _ => "ClusterRole".to_string(),
        };
        for rule in d["rules"].as_array().expect("rules") {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    rows.insert((
                        scope.clone(),
                        group.clone(),
                        resource,
                        strings(&rule["resourceNames"]),
                        strings(&rule["verbs"]),
                    ));
                }
            }
        }
    }
    rows
}

fn rule(scope: &str, group: &str, resource: &str, names: &[&str], verbs: &[&str]) -> Rule {
    let mut names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut verbs: Vec<String> = verbs.iter().map(|s| s.to_string()).collect();
    names.sort();
    verbs.sort();
    (scope.into(), group.into(), resource.into(), names, verbs)
}

/// No `*` anywhere (group, resource, verb, name), and exactly the rules listed here: a chart
/// change that widens a grant (a verb, a resource, a name dropped from resourceNames, a Role
/// turned ClusterRole) fails until this list is changed with it. The list is what the binary
/// calls (grep `Api::` in src/): the audit-log test above proves the chart grants are used.
#[test]
fn rendered_rbac_has_no_wildcard_and_exactly_the_listed_rules() {
    const ISE: &str = "internalserviceexports";
    const ESE: &str = "endpointsliceexports";
    const NET: &str = "networking.fleet.azure.com";
    let hub_rw = ["get", "list", "watch", "create", "patch", "delete"];
    let members_value = format!("members={{{}}}", MEMBERS.join(","));
    let per_member = |rules: &mut Vec<Rule>| {
        for m in MEMBERS {
            let scope = format!("Role fleet-member-{m}");
            rules.push(rule(&scope, NET, ISE, &[], &hub_rw));
            rules.push(rule(&scope, NET, ESE, &[], &hub_rw));
        }
    };
    let release = format!("Role {RELEASE_NS}");
    // Cleanup records, as src/fleet/cleanup.rs record_name names them: <id>-cleanup-<member>-
    // <first 8 hex digits of sha256(member)>. The audit-log test above proves the binary deletes
    // exactly these with this grant (a 403 or an unused grant fails it).
    assert_eq!(
        MEMBERS,
        ["member-1", "member-2"],
        "the names below are of these members"
    );
    let records = [
        "fleetnet-hub-cleanup-member-1-9811fb1b",
        "fleetnet-hub-cleanup-member-2-24641ec7",
    ];

    // Leader election (the default) with --cleanup-on-remove.
    let mut want = vec![
        rule(&release, "", "secrets", &[], &["create", "list"]),
        rule(&release, "", "secrets", &records, &["delete"]),
        rule(
            &release,
            "coordination.k8s.io",
            "leases",
            &[RELEASE],
            &["get", "update"],
        ),
        rule(&release, "coordination.k8s.io", "leases", &[], &["create"]),
    ];
    per_member(&mut want);
    let leader = render(
        RELEASE,
        "charts/fleetnet-hub",
        &[
            "--set",
            &members_value,
            "--set",
            "controller.cleanupOnRemove=true",
        ],
    );
    // Sharded: the replicas' announcement Leases are named after their pods (plus a random
    // suffix), and abandoned ones are deleted by any replica: no name to list.
    let mut want_sharded = vec![rule(
        &release,
        "coordination.k8s.io",
        "leases",
        &[],
        &["list", "create", "update", "delete"],
    )];
    per_member(&mut want_sharded);
    let sharded = render(
        RELEASE,
        "charts/fleetnet-hub",
        &[
            "--set",
            &members_value,
            "--set",
            "leaderElection.shardMembers=true",
            "--set",
            "replicaCount=3",
        ],
    );
    // The member side: one ClusterRole, since ServiceExports, Services and EndpointSlices are
    // watched in every namespace of a member.
    let want_member = vec![
        rule(
            "ClusterRole",
            NET,
            "serviceexports",
            &[],
            &["get", "list", "watch", "patch"],
        ),
        rule("ClusterRole", NET, "serviceexports/status", &[], &["patch"]),
        rule(
            "ClusterRole",
            "",
            "services",
            &[],
            &["get", "list", "watch"],
        ),
        rule("ClusterRole", "events.k8s.io", "events", &[], &["create"]),
        rule(
            "ClusterRole",
            "discovery.k8s.io",
            "endpointslices",
            &[],
            &["get", "list", "watch", "patch"],
        ),
    ];
    let member = render("fleetnet-hub-member", "charts/fleetnet-hub-member", &[]);

    for (what, docs, want) in [
        ("hub, leader election + cleanup", &leader, want),
        ("hub, sharded", &sharded, want_sharded),
        ("member", &member, want_member),
    ] {
        let got = rendered_rules(docs);
        let wildcards: Vec<&Rule> = got
            .iter()
            .filter(|(_, g, r, names, verbs)| {
                g == "*"
                    || r == "*"
                    || r.ends_with("/*")
                    || names.iter().chain(verbs).any(|s| s == "*")
            })
            .collect();
        assert!(wildcards.is_empty(), "{what}: wildcards in {wildcards:#?}");
        let want: std::collections::BTreeSet<Rule> = want.into_iter().collect();
        assert_eq!(
            got.difference(&want).collect::<Vec<_>>(),
            Vec::<&Rule>::new(),
            "{what}: rendered but not in the list"
        );
        assert_eq!(
            want.difference(&got).collect::<Vec<_>>(),
            Vec::<&Rule>::new(),
            "{what}: listed but not rendered"
        );
        if what.starts_with("hub") {
            assert!(
                of_kind(docs, "ClusterRole").is_empty()
                    && of_kind(docs, "ClusterRoleBinding").is_empty(),
                "{what}: nothing cluster-scoped in the hub"
            );
        }
    }
}
