//! The real binary, started and stopped (gracefully or with `kill -9`) by the tests.

use super::*;

// ---------------------------------------------------------------------------------------------
// The real binary.
// ---------------------------------------------------------------------------------------------

/// A `fleetnet-hub run` child process; killed (SIGKILL) if dropped, e.g. when a test panics.
pub(super) struct HubProcess {
    child: tokio::process::Child,
    health: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl HubProcess {
    /// Starts the binary on fresh ports, with raised member budgets and `hub_qps` (burst twice
    /// that) for the hub.
    pub(super) fn spawn(fleet: &Fleet, dir: &Path, hub_qps: u32, label: &str) -> Self {
        let health: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let log = fleet
            .scratch_dir()
            .join(format!("fleetnet-hub-{label}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let hub_kubeconfig = fleet.hub().kubeconfig_path().display().to_string();
        let dir = dir.display().to_string();
        let (metrics_arg, health_arg) = (metrics.to_string(), health.to_string());
        let (hub_qps_arg, hub_burst_arg) = (hub_qps.to_string(), (2 * hub_qps).to_string());
        let args = [
            "run",
            "--hub-kubeconfig",
            &hub_kubeconfig,
            "--kubeconfig-dir",
            &dir,
            "--metrics-bind-address",
            &metrics_arg,
            "--health-probe-bind-address",
            &health_arg,
            "--kube-api-qps",
            "200",
            "--kube-api-burst",
            "400",
            "--hub-api-qps",
            &hub_qps_arg,
            "--hub-api-burst",
            &hub_burst_arg,
        ];
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .args(args)
            .env("RUST_LOG", "info")
            .env("POD_NAME", format!("restart-test-{label}"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("FLEETNET_TRACE_SAMPLING")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fleetnet-hub");
        println!(
            "[restart] started fleetnet-hub ({label}) pid {:?}, log {}",
            child.id(),
            log.display()
        );
        Self {
            child,
            health,
            metrics,
            log,
        }
    }

    pub(super) fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub(super) fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "fleetnet-hub exited with {status}; log:\n{}",
                self.log_tail(40)
            );
        }
    }

    /// `/readyz` answers 200 and `/members` shows every one of `members` `ready`.
    pub(super) async fn wait_ready(&mut self, members: &[&str], limit: Duration) -> Duration {
        let started = Instant::now();
        let deadline = started + limit;
        loop {
            self.assert_running();
            let ready = matches!(http_get(self.health, "/readyz").await, Some((200, _)));
            let members_ready = match http_get(self.health, "/members").await {
                Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .is_some_and(|v| {
                        members
                            .iter()
                            .all(|m| v["members"][*m]["phase"].as_str() == Some("ready"))
                    }),
                _ => false,
            };
            if ready && members_ready {
                return started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "fleetnet-hub not ready within {limit:?}; /members: {:?}\nlog:\n{}",
                http_get(self.health, "/members").await,
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The process's own Prometheus text.
    pub(super) async fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Waits (up to `limit`, without failing) until this process has reconciled at least
    /// `exports` ServiceExports of each member and none is in flight; returns what it saw.
    pub(super) async fn wait_reconciled(
        &self,
        members: &[&str],
        exports: usize,
        limit: Duration,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.metrics_text().await;
            let counts: Vec<(String, f64, f64)> = members
                .iter()
                .map(|m| {
                    let done = sum(
                        &text,
                        "fleetnet_reconcile_total",
                        &[&format!("member=\"{m}\"")],
                    );
                    let in_flight = sum(
                        &text,
                        "fleetnet_reconciles_in_flight",
                        &[&format!("member=\"{m}\"")],
                    );
                    (m.to_string(), done, in_flight)
                })
                .collect();
            let all = counts
                .iter()
                .all(|(_, done, in_flight)| *done >= exports as f64 && *in_flight == 0.0);
            if all || Instant::now() >= deadline {
                return format!("{counts:?}{}", if all { "" } else { " (not all reached)" });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM, then waits for the exit.
    pub(super) async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running");
        signal(pid, "-TERM");
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "fleetnet-hub did not exit within 40 s of SIGTERM; log:\n{}",
                    self.log_tail(40)
                )
            })
            .expect("wait");
        println!("[restart] SIGTERM: fleetnet-hub exited with {status}");
        if !status.success() {
            println!("log:\n{}", self.log_tail(40));
        }
        status
    }

    /// SIGKILL (`kill -9`), then reaps it.
    pub(super) async fn kill(mut self) {
        self.child.start_kill().expect("kill -9");
        let status = self.child.wait().await.expect("wait");
        println!("[restart] SIGKILL: fleetnet-hub ended with {status}");
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- fleetnet-hub log {} (tail) ---\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
        // kill_on_drop sends SIGKILL; reap it if it is already gone.
        let _ = self.child.start_kill();
        let _ = self.child.try_wait();
    }
}
