//! `fleetnet-hub check` on real apiservers, one problem of each category (a stopped apiserver,
//! a wrong CA, a bad token, an identity without RBAC, a missing CRD), the hub checked too
//! (usable, and under an identity without RBAC), members from the hub's labelled Secrets; and
//! the process's own lines: the startup line, the WARN of a long hub outage and its end.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};

use crate::support::*;
use fleetnet_hub::app::{self, Extensions};
use fleetnet_testenv::Fleet;

const SECRETS_NS: &str = "fleetnet";

/// `text` with the value of every line `key: …` (after its indentation) replaced by `value`.
fn with_value(text: &str, key: &str, value: &str) -> String {
    text.lines()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            match line.trim_start().strip_prefix(&format!("{key}: ")) {
                Some(_) => format!("{}{key}: {value}", &line[..indent]),
                None => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the binary's `check --output json` with `args`: its exit status and report.
async fn check_json(dir: &Path, hub: &Path, args: &[&str]) -> (bool, serde_json::Value) {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(["check", "--output", "json", "--kubeconfig-dir"])
        .arg(dir)
        .arg("--hub-kubeconfig")
        .arg(hub)
        .args(["--member-secrets-namespace", SECRETS_NS])
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("POD_NAMESPACE")
        .kill_on_drop(true)
        .output();
    let run = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("check ends")
        .expect("check runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "a JSON report ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&run.stderr)
        )
    });
    (run.status.success(), report)
}

/// `member → (category, problem)` of a report.
fn rows(report: &serde_json::Value) -> BTreeMap<String, (String, String)> {
    let members = report["members"].as_array().cloned().unwrap_or_default();
    members
        .iter()
        .map(|m| {
            let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            (text("member"), (text("category"), text("problem")))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_category_from_real_apiservers_and_the_hub_too() {
    let mut fleet = Fleet::builder()
        .members(["m1", "m2"])
        .start()
        .await
        .expect("fleet");
    let dir = fleet.scratch_dir().join("check-kubeconfigs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let admin = std::fs::read_to_string(fleet.member("m1").kubeconfig_path()).expect("m1");
    std::fs::write(dir.join("good.yaml"), &admin).expect("write");
    // Another cluster's CA (testenv's CAs share a name: rustls says the signature does not verify).
    let hub_ca =
        base64::engine::general_purpose::STANDARD.encode(fleet.hub().ca_pem().expect("ca"));
    let wrong_ca = with_value(&admin, "certificate-authority-data", &hub_ca);
    std::fs::write(dir.join("wrongca.yaml"), wrong_ca).expect("write");
    let bad_token = with_value(&admin, "token", "not-a-token-of-this-cluster");
    std::fs::write(dir.join("badtoken.yaml"), &bad_token).expect("write");
    let nobody = fleetnet_testenv::ScopedIdentity::bare("default", "nobody");
    fleet
        .member("m1")
        .issue_scoped_kubeconfig(&nobody, &dir.join("norbac.yaml"))
        .await
        .expect("scoped kubeconfig");
    // m2 without the ServiceExport CRD.
    let m2 = fleet.member("m2").client().await.expect("m2");
    let crds: Api<CustomResourceDefinition> = Api::all(m2.clone());
    crds.delete(
        "serviceexports.networking.fleet.azure.com",
        &DeleteParams::default(),
    )
    .await
    .expect("CRD deleted");
    std::fs::copy(fleet.member("m2").kubeconfig_path(), dir.join("nocrd.yaml")).expect("copy");
    // A member from a labelled hub Secret.
    let hub = fleet.hub().client().await.expect("hub");
    fleetnet_testenv::ensure_namespace(&hub, "hub", SECRETS_NS)
        .await
        .expect("namespace");
    let secret =
        fleetnet_hub::fleet::sources::register::secret_for("fromsecret", SECRETS_NS, &admin);
    Api::<Secret>::namespaced(hub.clone(), SECRETS_NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("member Secret");
    for m in [
        "fromsecret",
        "good",
        "wrongca",
        "badtoken",
        "norbac",
        "nocrd",
    ] {
        fleetnet_testenv::ensure_namespace(&hub, "hub", &fleet.hub_namespace(m))
            .await
            .expect("hub namespace");
    }
    let hub_kubeconfig = fleet.hub().kubeconfig_path().to_path_buf();

    // The CRD's removal reaches discovery after a moment.
    let report = eventually("m2's ServiceExport no longer served", || async {
        let (ok, report) = check_json(&dir, &hub_kubeconfig, &[]).await;
        let nocrd = rows(&report).get("nocrd").cloned().unwrap_or_default();
        (nocrd.0 == "crd_missing").then_some((ok, report))
    })
    .await;
    let (ok, report) = report;
    eprintln!("{report:#}");
    assert!(!ok, "check fails when a member is unusable");
    assert_eq!(report["hub"]["category"], "ok", "{report:#}");
    assert_eq!(report["hub"]["ok"], true);
    let rows = rows(&report);
    let category = |m: &str| rows.get(m).map(|r| r.0.as_str()).unwrap_or("absent");
    let problem = |m: &str| rows.get(m).map(|r| r.1.clone()).unwrap_or_default();
    assert_eq!(category("good"), "ok", "{report:#}");
    assert_eq!(category("fromsecret"), "ok", "{report:#}");
    assert_eq!(category("wrongca"), "tls", "{report:#}");
    assert!(
        problem("wrongca").contains("fix certificate-authority(-data)"),
        "{report:#}"
    );
    assert_eq!(category("badtoken"), "authentication", "{report:#}");
    assert!(problem("badtoken").contains("401"), "{report:#}");
    assert_eq!(category("norbac"), "rbac", "{report:#}");
    assert!(
        problem("norbac").contains("missing RBAC")
            && problem("norbac").contains("list networking.fleet.azure.com/serviceexports"),
        "{report:#}"
    );
    assert_eq!(category("nocrd"), "crd_missing", "{report:#}");
    assert!(
        problem("nocrd").contains("serviceexports.networking.fleet.azure.com"),
        "{report:#}"
    );
    assert_eq!(report["unusable"], 4);
    let sources: Vec<&str> = report["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["source"].as_str())
        .collect();
    assert!(
        sources.contains(&"Secret fleetnet/fromsecret"),
        "{sources:?}"
    );
    let text = report.to_string();
    assert!(
        !text.contains("not-a-token-of-this-cluster"),
        "a credential in the report"
    );

    // m2 stopped: the same member is now unreachable.
    fleet.member_mut("m2").stop();
    let (_, report) = check_json(&dir, &hub_kubeconfig, &["--member-secrets=false"]).await;
    let down = self::rows(&report)
        .get("nocrd")
        .cloned()
        .unwrap_or_default();
    assert_eq!(down.0, "unreachable", "{report:#}");
    assert!(down.1.contains("connection refused"), "{report:#}");
    assert!(
        !self::rows(&report).contains_key("fromsecret"),
        "Secrets not read when off"
    );

    // The hub under an identity without RBAC: named, and the check fails.
    let hub_nobody = fleet.scratch_dir().join("hub-nobody.kubeconfig");
    fleet
        .hub()
        .issue_scoped_kubeconfig(&nobody, &hub_nobody)
        .await
        .expect("hub scoped kubeconfig");
    let (ok, report) = check_json(&dir, &hub_nobody, &[]).await;
    assert!(!ok);
    assert_eq!(report["hub"]["category"], "rbac", "{report:#}");
    let hub_problem = report["hub"]["problem"].as_str().unwrap_or_default();
    assert!(
        hub_problem.contains("list secrets in fleetnet"),
        "{report:#}"
    );
    // Without member Secrets, the per-member namespaces' rules are what is missing.
    let (_, report) = check_json(&dir, &hub_nobody, &["--member-secrets=false"]).await;
    let hub_problem = report["hub"]["problem"].as_str().unwrap_or_default();
    assert!(
        hub_problem.contains(
            "create networking.fleet.azure.com/internalserviceexports in fleet-member-good"
        ),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_line_and_a_long_hub_outage_in_the_logs() {
    let logs = capture_logs();
    let mut fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let dir = kubeconfig_dir(&fleet, "startup-kubeconfigs", &["alpha"]);
    let running = app::start(app_config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    let startup = eventually("the startup line", || async {
        logs.text()
            .lines()
            .find(|l| {
                l.contains("serving: members from 1 file(s)")
                    && l.contains(&dir.display().to_string())
            })
            .map(str::to_string)
    })
    .await;
    assert!(startup.contains(" INFO "), "{startup}");
    for part in ["jobs ", "one replica", "budgets: member ", "hub "] {
        assert!(startup.contains(part), "{part}: {startup}");
    }
    eventually("the hub reachable", || async {
        running.state.hub_reachable().then_some(())
    })
    .await;

    fleet.hub_mut().kill();
    let warned = within(
        Duration::from_secs(120),
        "a WARN of the hub's outage",
        || async {
            logs.text()
                .lines()
                .find(|l| l.contains("hub unreachable for") && l.contains(" WARN "))
                .map(str::to_string)
        },
    )
    .await;
    eprintln!("{warned}");
    fleet.hub_mut().start().await.expect("hub back");
    within(
        Duration::from_secs(60),
        "an INFO when the hub is back",
        || async {
            logs.text()
                .lines()
                .any(|l| l.contains("hub reachable again after") && l.contains(" INFO "))
                .then_some(())
        },
    )
    .await;
    running.shutdown().await;
}
