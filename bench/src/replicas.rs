//! Replicas of the shipped `fleetnet-hub` binary, for `--failover` and `--fleet-size`: started
//! against a substrate hub and a directory of member kubeconfigs, stderr to a file of their
//! own, health endpoints on 127.0.0.1, killed with SIGKILL when dropped (and by the kernel,
//! should this process die first).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use fleetnet_bench::quantile;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

// glibc's prctl(2), declared here rather than through a crate of bindings for one call.
unsafe extern "C" {
    fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
    fn kill(pid: std::ffi::c_int, signal: std::ffi::c_int) -> std::ffi::c_int;
}
const SIGTERM: std::ffi::c_int = 15;
const PR_SET_PDEATHSIG: std::ffi::c_int = 1;
const SIGKILL: std::ffi::c_int = 9;

/// How the replicas run: the same for every replica but its name.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The `fleetnet-hub` binary.
    pub binary: PathBuf,
    pub hub_kubeconfig: PathBuf,
    /// `--kubeconfig-dir`: one file per member.
    pub kubeconfig_dir: PathBuf,
    /// Where each replica's stderr goes (`<name>.log`).
    pub log_dir: PathBuf,
    /// `--shard-members` with its Leases in `lease_namespace`, named after `lease_prefix`.
    pub shard: Option<Sharding>,
    /// More flags (budgets).
    pub args: Vec<String>,
    /// `RUST_LOG` of the replicas.
    pub rust_log: String,
}

#[derive(Debug, Clone)]
pub struct Sharding {
    pub lease_namespace: String,
    pub lease_prefix: String,
}

/// A replica process; killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Replica {
    pub name: String,
    pub child: Child,
    pub pid: u32,
    /// Its health endpoints (`/members`).
    pub health: String,
    /// Its `/metrics`.
    pub metrics: String,
    /// Its stderr.
    pub log: PathBuf,
}

impl Spec {
    /// Starts the replica `name` (its `POD_NAME`).
    pub fn start(&self, name: &str) -> anyhow::Result<Replica> {
        anyhow::ensure!(
            self.binary.is_file(),
            "no fleetnet-hub binary at {} (build it: cargo build --release -p fleetnet-hub, or pass --binary)",
            self.binary.display()
        );
        let log = self.log_dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let health = format!("127.0.0.1:{}", listen_port()?);
        let metrics = format!("127.0.0.1:{}", listen_port()?);
        let mut cmd = Command::new(&self.binary);
        cmd.args(["run", "--hub-kubeconfig"])
            .arg(&self.hub_kubeconfig)
            .arg("--kubeconfig-dir")
            .arg(&self.kubeconfig_dir)
            .args(["--health-probe-bind-address", health.as_str()])
            .args(["--metrics-bind-address", metrics.as_str()])
            .args(&self.args)
            .env("POD_NAME", name)
            .env("RUST_LOG", &self.rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        if let Some(s) = &self.shard {
            cmd.args(["--shard-members", "--leader-election-namespace"])
                .arg(&s.lease_namespace)
                .arg("--leader-election-id")
                .arg(&s.lease_prefix);
        }
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let pid = child.id().context("the replica has no pid")?;
        Ok(Replica {
            name: name.to_string(),
            child,
            pid,
            health,
            metrics,
            log,
        })
    }
}

/// The kernel kills the process `cmd` starts should this process die first (as the
/// substrate's).
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Replica {
    /// An error when the process has exited, with the end of its log.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            bail!(
                "replica {} exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            );
        }
        Ok(())
    }

    /// SIGKILL, and reaped.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child
            .start_kill()
            .with_context(|| format!("kill -9 {}", self.name))?;
        let _ = self.child.wait().await;
        Ok(())
    }

    /// VmRSS in KiB (0 when unreadable).
    pub fn rss_kib(&self) -> u64 {
        fleetnet_bench::status_kib_of(&format!("/proc/{}/status", self.pid), "VmRSS").unwrap_or(0)
    }

    /// User + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> f64 {
        fleetnet_bench::cpu_seconds_of(&format!("/proc/{}/stat", self.pid)).unwrap_or(0.0)
    }

    /// Lines of its stderr so far that contain `needle`.
    pub fn log_lines_with(&self, needle: &str) -> usize {
        count_lines_with(
            &std::fs::read_to_string(&self.log).unwrap_or_default(),
            needle,
        )
    }

    /// Member → phase, from its `GET /members` (the members it runs).
    pub async fn members(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let body = http_get(&self.health, "/members")
            .await
            .with_context(|| format!("GET /members of {}", self.name))?;
        phases(&body).with_context(|| format!("/members of {}", self.name))
    }
}

impl Replica {
    /// Its `GET /members`, whole.
    pub async fn members_json(&self) -> anyhow::Result<serde_json::Value> {
        let body = http_get(&self.health, "/members")
            .await
            .with_context(|| format!("GET /members of {}", self.name))?;
        serde_json::from_str(&body).with_context(|| format!("/members of {}", self.name))
    }

    /// Its `GET /metrics` (OpenMetrics text).
    pub async fn scrape(&self) -> anyhow::Result<String> {
        http_get(&self.metrics, "/metrics")
            .await
            .with_context(|| format!("GET /metrics of {}", self.name))
    }

    /// SIGTERM, and reaped (a graceful stop: it gives up its Leases).
    pub async fn terminate(mut self) -> anyhow::Result<()> {
        let pid = nix_pid(self.pid)?;
        // SAFETY: kill(2) on a child this process started and has not reaped.
        if unsafe { kill(pid, SIGTERM) } != 0 {
            return Err(std::io::Error::last_os_error())
                .context(format!("kill -TERM {}", self.name));
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        Ok(())
    }
}

fn nix_pid(pid: u32) -> anyhow::Result<std::ffi::c_int> {
    std::ffi::c_int::try_from(pid).context("pid out of range")
}

/// Member → phase of a `/members` answer: `{"members": {name: {"phase": "ready", …}}}`.
pub fn phases(body: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let value: serde_json::Value = serde_json::from_str(body)?;
    let members = value
        .get("members")
        .and_then(|m| m.as_object())
        .context("no `members` object")?;
    Ok(members
        .iter()
        .map(|(name, status)| {
            let phase = status.get("phase").and_then(|p| p.as_str()).unwrap_or("");
            (name.clone(), phase.to_string())
        })
        .collect())
}

pub fn count_lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// The body of `GET path` on `addr` (HTTP/1.0: the server closes, no chunking), 200 only.
async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut answer = vec![];
        stream.read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .context("no answer within 10 s")??;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .context("no end of the headers")?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(status.split_whitespace().nth(1) == Some("200"), "{status}");
    Ok(body.to_string())
}

/// Listening ports are picked below Linux's ephemeral range, as the substrate's are: an
/// ephemeral port can be taken by an outgoing connection between the pick and the bind.
const LISTEN_PORTS: std::ops::Range<u16> = 33000..34000;

/// A port on 127.0.0.1 that was free a moment ago, never the same twice in one process.
pub(crate) fn listen_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    for _ in 0..LISTEN_PORTS.len() {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % LISTEN_PORTS.len() as u16;
        let port = LISTEN_PORTS.start + offset;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port in {LISTEN_PORTS:?}")
}

/// `fleetnet-hub` next to this executable (where cargo puts both).
pub fn default_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("fleetnet-hub")))
        .unwrap_or_else(|| Path::new("fleetnet-hub").to_path_buf())
}

pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `p50 / max` of sorted durations, or `-`.
pub fn p50_max(values: &[Duration]) -> String {
    let secs: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    match (quantile(&secs, 0.5), secs.last()) {
        (Some(p50), Some(max)) => format!("{p50:.1} s / {max:.1} s"),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_phases_and_counts_log_lines() {
        let body = r#"{"hubReachable":true,"ready":true,"members":{"m01":{"phase":"ready","lastError":null},"m02":{"phase":"syncing"}},"owners":{}}"#;
        let p = phases(body).expect("parses");
        assert_eq!(p["m01"], "ready");
        assert_eq!(p["m02"], "syncing");
        assert!(phases(r#"{"ready":true}"#).is_err());
        let log = "a member now owned by another replica: stopping it here\nother\nmember now owned by another replica\n";
        assert_eq!(
            count_lines_with(log, "member now owned by another replica"),
            2
        );
    }
}
