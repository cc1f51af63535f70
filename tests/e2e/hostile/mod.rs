//! A member is not trusted: the real binary with real members and hostile ones
//! (`tests/support/hostile.rs`). Each hostile member costs only itself: it shows `failing` on
//! `/members` with a reason that names what it exceeded and quotes nothing it sent, the real
//! member's exports still reach the hub, the process's peak RSS stays far below the chart's
//! 512 MiB limit, nothing panics and the process stays live. The environment's proxy (with
//! credentials) is set for every run: members connect directly and its credentials appear
//! nowhere.

mod bounded;
mod proxy;

use crate::support;
use crate::support::hostile;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;
use hostile::{HostileMember, Mode};
use support::*;

/// The environment's proxy: for Azure and OTLP only. Nothing listens on port 1, so a member
/// connection through it would fail.
const ENV_PROXY: &str = "http://proxyuser:proxy-secret-4711@127.0.0.1:1";
/// The hostile members' bearer token.
const TOKEN: &str = "hostile-token-secret-0815";
/// Peak RSS the process must stay under, whatever a member sends (the chart's limit is 512 MiB).
const RSS_LIMIT_KIB: u64 = 300 << 10;
/// How long a hostile member may take to show failing (the trickle needs its 30 s deadline).
const FAILS_WITHIN: Duration = Duration::from_secs(150);

/// A `fleetnet-hub run` child; killed when dropped.
struct Hub {
    child: tokio::process::Child,
    health: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Hub {
    fn spawn(fleet: &Fleet, dir: &Path) -> Self {
        Self::spawn_with(fleet, dir, "fleetnet-hub-hostile.log", &[])
    }

    /// A run with `extra` flags, logging into `log` (a file of the fleet's scratch directory).
    fn spawn_with(fleet: &Fleet, dir: &Path, log: &str, extra: &[&str]) -> Self {
        let port = || std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (health, metrics) = (port(), port());
        let log = fleet.scratch_dir().join(log);
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let args = [
            "run".to_string(),
            "--hub-kubeconfig".into(),
            fleet.hub().kubeconfig_path().display().to_string(),
            "--kubeconfig-dir".into(),
            dir.display().to_string(),
            "--metrics-bind-address".into(),
            metrics.to_string(),
            "--health-probe-bind-address".into(),
            health.to_string(),
            "--kube-api-qps".into(),
            "200".into(),
            "--kube-api-burst".into(),
            "400".into(),
        ];
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .args(args)
            .args(extra)
            .env("RUST_LOG", "info")
            .env("POD_NAME", "hostile-test")
            .env("HTTPS_PROXY", ENV_PROXY)
            .env("https_proxy", ENV_PROXY)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fleetnet-hub");
        Self {
            child,
            health,
            metrics,
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn assert_live(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "fleetnet-hub exited with {status}; log:\n{}",
                self.log_tail()
            );
        }
    }

    /// `/members` as JSON (`Null` when it does not answer).
    async fn members(&self) -> serde_json::Value {
        let get = tokio::time::timeout(Duration::from_secs(5), http_get(self.health, "/members"));
        match get.await {
            Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
            _ => serde_json::Value::Null,
        }
    }

    /// Peak RSS (VmHWM) so far, KiB.
    fn peak_rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    /// Waits until `member` shows `failing` with a last error containing `reason`; returns it.
    async fn wait_failing(&mut self, member: &str, reason: &str) -> String {
        let deadline = Instant::now() + FAILS_WITHIN;
        loop {
            self.assert_live();
            let members = self.members().await;
            let m = &members["members"][member];
            let error = m["last_error"].as_str().unwrap_or_default().to_string();
            if m["phase"] == "failing" && error.contains(reason) {
                return error;
            }
            assert!(
                Instant::now() < deadline,
                "{member} not failing with {reason:?} within {FAILS_WITHIN:?}: {m}\nlog:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A kubeconfig directory with the fleet's `real` members and the `hostile` ones.
fn member_dir(fleet: &Fleet, real: &[&str], hostile: &[(&str, &HostileMember)]) -> PathBuf {
    let dir = fleet.scratch_dir().join("kubeconfigs-hostile");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for m in real {
        let to = dir.join(format!("{m}.yaml"));
        std::fs::copy(fleet.member(m).kubeconfig_path(), to).expect("copy kubeconfig");
    }
    for (name, member) in hostile {
        let to = dir.join(format!("{name}.yaml"));
        std::fs::write(to, member.kubeconfig(name, TOKEN)).expect("write kubeconfig");
    }
    dir
}

/// Creates `ns/name` Service + ServiceExport in `member` and waits for its ISE in the hub.
async fn export_and_wait(fleet: &Fleet, hub: &kube::Client, member: &str, ns: &str, name: &str) {
    let client = fleet.member(member).client().await.expect("member client");
    namespace(&client, ns).await;
    create_service(&client, &service(ns, name, 80)).await;
    create_export(&client, ns, name, &[]).await;
    let ise = format!("{ns}-{name}");
    within(Duration::from_secs(90), &format!("ISE {ise}"), || async {
        ises(hub, &fleet.hub_namespace(member))
            .get_opt(&ise)
            .await
            .ok()
            .flatten()
            .filter(|i| i.spec.service_reference.cluster_id == member)
    })
    .await;
}

/// What must never be in any output: the proxy's and the members' credentials, and what the
/// hostile members sent (their filler and padding).
fn assert_nothing_leaked(what: &str, text: &str) {
    for secret in [
        "proxy-secret-4711",
        "proxyuser",
        TOKEN,
        "aaaaaaaaaaaaaaaa",
        "pppppppppppppppp",
    ] {
        assert!(
            !text.contains(secret),
            "{what} contains {secret:?}:\n{text}"
        );
    }
}

fn assert_no_panic(hub: &Hub) {
    let log = hub.log_text();
    assert!(
        !log.contains("panicked"),
        "a panic in the log:\n{}",
        hub.log_tail()
    );
}

/// Runs `fleetnet-hub check` on `dir` with `extra` flags (the environment's proxy set);
/// returns stdout and stderr together.
async fn check_output(dir: &Path, extra: &[&str]) -> String {
    let check = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(["check", "--kubeconfig-dir"])
        .arg(dir)
        .args(extra)
        .env("HTTPS_PROXY", ENV_PROXY)
        .env("https_proxy", ENV_PROXY)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .kill_on_drop(true)
        .output();
    let check = tokio::time::timeout(Duration::from_secs(120), check)
        .await
        .expect("check ends")
        .expect("check runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    )
}
