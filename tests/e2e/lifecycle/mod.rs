//! Issue #43 point 2: the release's lifecycle against a real hub apiserver, with the real helm
//! (tests/testenv/install.sh builds it): `helm install` of charts/fleetnet-hub, `helm upgrade`
//! to the next chart version with the replicas rolled one at a time, `helm rollback`, then
//! `helm uninstall` and `fleetnet-hub uninstall` (the drain the runbook names) — after which
//! nothing of the controller is left on the members or the hub, and every user object is.
//!
//! The hub has no kubelet: the Deployment's pods never run. The test runs each pod itself as a
//! process of the real binary with the Deployment's RENDERED args (as `helm get manifest` shows
//! the release), the chart's ServiceAccount token (its RBAC as the release installed it) and the
//! member ClusterRole the chart ships; only paths and ports are mapped to the test's.

mod checks;
mod flow;

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;
use kube::api::{Api, ListParams};
use support::*;

/// The release, its namespace.
const RELEASE: &str = "fleetnet-hub";
const NS: &str = "fleetnet-system";
/// The user's namespace on the members, and the fleet system namespace.
const APP: &str = "shop";
const SYSTEM: &str = "fleet-system";
/// The fleet's members.
const MEMBERS: [&str; 2] = ["member-1", "member-2"];
/// The user's Secret of member kubeconfigs, as the chart's `memberKubeconfigSecrets` names it.
const KUBECONFIGS_SECRET: &str = "member-kubeconfigs";

/// helm against the fleet's hub, with its own home (nothing of the developer's).
struct Helm {
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Helm {
    fn new(fleet: &Fleet) -> Self {
        let home = fleet.scratch_dir().join("helm-home");
        std::fs::create_dir_all(&home).expect("helm home");
        Self {
            kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
            home,
        }
    }

    /// Runs `helm <args> -n NS`; its stdout. Panics with its output on failure.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(chart::helm())
            .args(args)
            .args(["--namespace", NS, "--kubeconfig"])
            .arg(&self.kubeconfig)
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .output()
            .expect("run helm");
        assert!(
            out.status.success(),
            "helm {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The release's objects as installed now (`helm get manifest`).
    fn manifest(&self) -> Vec<serde_json::Value> {
        let text = self.run(&["get", "manifest", RELEASE]);
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_str_multiple(&text).expect("manifest parses");
        docs.into_iter().filter(|d| !d.is_null()).collect()
    }
}

/// What a pod of the release runs: the Deployment's args and the member config it mounts.
#[derive(Debug, Clone, PartialEq)]
struct Rendering {
    args: Vec<String>,
    member_config: String,
    chart: String,
}

fn rendering(manifest: &[serde_json::Value]) -> Rendering {
    let deployment = chart::one(manifest, "Deployment");
    let args: Vec<String> = serde_json::from_value(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .expect("container args");
    let member_config = chart::of_kind(manifest, "ConfigMap")
        .iter()
        .find_map(|c| c["data"]["member-config.yaml"].as_str())
        .unwrap_or_default()
        .to_string();
    let chart = deployment["metadata"]["labels"]["helm.sh/chart"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Rendering {
        args,
        member_config,
        chart,
    }
}

/// One pod of the release, run as a process; killed when dropped.
struct Pod {
    name: String,
    child: KillOnDrop,
    health: u16,
}

/// Paths of the pod's files, as the test lays them out.
struct Mounts {
    hub_kubeconfig: PathBuf,
    kubeconfig_dir: PathBuf,
    scratch: PathBuf,
}

/// Starts pod `name` with `rendering`'s args; the paths and ports inside the container mapped
/// to `mounts` and free loopback ports, nothing else changed.
fn start_pod(name: &str, rendering: &Rendering, mounts: &Mounts) -> Pod {
    let member_config = mounts.scratch.join(format!("{name}-member-config.yaml"));
    std::fs::write(&member_config, &rendering.member_config).expect("member config");
    let mapped = [
        "--kubeconfig-dir=",
        "--metrics-bind-address=",
        "--health-probe-bind-address=",
        "--member-config=",
    ];
    let mut args: Vec<String> = rendering
        .args
        .iter()
        .filter(|a| !mapped.iter().any(|m| a.starts_with(m)))
        .cloned()
        .collect();
    let health = free_port();
    args.extend([
        format!("--hub-kubeconfig={}", mounts.hub_kubeconfig.display()),
        format!("--kubeconfig-dir={}", mounts.kubeconfig_dir.display()),
        format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
        format!("--health-probe-bind-address=127.0.0.1:{health}"),
        format!("--member-config={}", member_config.display()),
    ]);
    let child = Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(&args)
        .env("POD_NAME", name)
        .env("POD_NAMESPACE", NS)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(KillOnDrop)
        .expect("start a pod");
    Pod {
        name: name.to_string(),
        child,
        health,
    }
}

impl Pod {
    /// Waits until the pod answers `/readyz` (what the Deployment's readiness probe asks).
    async fn ready(&self) {
        let addr = ([127, 0, 0, 1], self.health).into();
        eventually(&format!("{} ready", self.name), || async move {
            // Not listening yet while the process starts: not ready, not a failure.
            tokio::net::TcpStream::connect(addr).await.ok()?;
            (http_get(addr, "/readyz").await.0 == 200).then_some(())
        })
        .await;
    }

    /// SIGTERM, as the kubelet sends it; waits for a clean exit within the chart's grace.
    fn terminate(mut self) {
        signal(self.child.id(), "-TERM");
        let sent = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "{} exited with {status}", self.name);
                return;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(45),
                "{} still running 45 s after SIGTERM",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs `fleetnet-hub uninstall` (the runbook's drain) with the operator's hub kubeconfig and
/// `extra` flags; its exit success, stdout and stderr.
fn drain(fleet: &Fleet, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .arg("uninstall")
        .arg("--hub-kubeconfig")
        .arg(fleet.hub().kubeconfig_path())
        .args([
            "--leader-election-namespace",
            NS,
            "--leader-election-id",
            RELEASE,
        ])
        .args([
            "--kubeconfig-secret",
            KUBECONFIGS_SECRET,
            "--output",
            "json",
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fleetnet-hub uninstall");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kind ns/name` → resourceVersion of every object `api` lists.
async fn versions<K>(api: &Api<K>, kind: &str) -> BTreeMap<String, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list {kind}: {e}"))
        .items
        .iter()
        .map(|o| {
            let m = o.meta();
            (
                format!(
                    "{kind} {}/{}",
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap_or_default()
                ),
                m.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Writes `files` (member → kubeconfig path) into `dir` and the user's Secret on the hub.
async fn member_kubeconfigs(hub: &kube::Client, dir: &Path, files: &BTreeMap<String, PathBuf>) {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    std::fs::create_dir_all(dir).expect("kubeconfig dir");
    let mut data = BTreeMap::new();
    for (member, path) in files {
        let text = std::fs::read(path).expect("member kubeconfig");
        std::fs::write(dir.join(format!("{member}.yaml")), &text).expect("write kubeconfig");
        data.insert(format!("{member}.yaml"), ByteString(text));
    }
    let mut secret = Secret {
        data: Some(data),
        ..Default::default()
    };
    secret.metadata.name = Some(KUBECONFIGS_SECRET.into());
    Api::<Secret>::namespaced(hub.clone(), NS)
        .create(&Default::default(), &secret)
        .await
        .expect("the user's member kubeconfig Secret");
}
