//! One simulated cluster: a real `kube-apiserver` process on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::kubeconfig::write_token_kubeconfig;
use crate::process::{ProcessGuard, free_port};
use crate::{Error, Result, io_err};

/// Admin identity of every substrate cluster (system:masters, via --token-auth-file).
const ADMIN_USER: &str = "admin";

/// Served by a default kube-apiserver v1.36 but used by none of the binary, its charts and its
/// tests (a test that needs one turns it on with `--runtime-config=<group/version>=true`).
const UNUSED_GROUPS: [&str; 7] = [
    "autoscaling/v2=false",
    "batch/v1=false",
    "certificates.k8s.io/v1=false",
    "node.k8s.io/v1=false",
    "resource.k8s.io/v1=false",
    "scheduling.k8s.io/v1=false",
    "storage.k8s.io/v1=false",
];

/// The admission plugins that watch [`UNUSED_GROUPS`] (RuntimeClass, PriorityClass,
/// StorageClass): with their group off their informers would never sync.
const UNUSED_ADMISSION: [&str; 4] = [
    "DefaultStorageClass",
    "PersistentVolumeClaimResize",
    "Priority",
    "RuntimeClass",
];

/// A cluster of the substrate. `stop` + `start` keep its port, certificates and etcd data, so
/// it comes back as the same cluster (an outage, not a rebuild).
#[derive(Debug)]
pub struct Cluster {
    name: String,
    etcd_prefix: String,
    dir: PathBuf,
    binary: PathBuf,
    port: u16,
    etcd_url: String,
    admin_token: String,
    kubeconfig: PathBuf,
    extra_args: Vec<String>,
    process: Option<ProcessGuard>,
    last_ready_after: Option<Duration>,
    last_ready_cpu: Option<Duration>,
}

impl Cluster {
    pub(crate) fn new(
        name: &str,
        root: &Path,
        binary: &Path,
        etcd_url: &str,
        kubeconfig: PathBuf,
        sa_key_dir: &Path,
        extra_args: Vec<String>,
    ) -> Result<Self> {
        let dir = root.join(format!("cluster-{name}"));
        std::fs::create_dir_all(dir.join("certs"))
            .map_err(io_err(format!("create {}", dir.display())))?;
        let admin_token = random_token();
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},{ADMIN_USER},admin-uid,system:masters\n"),
        )
        .map_err(io_err("write tokens.csv"))?;
        for f in ["sa.key", "sa.pub"] {
            std::fs::copy(sa_key_dir.join(f), dir.join(f)).map_err(io_err(format!("copy {f}")))?;
        }
        Ok(Self {
            name: name.to_string(),
            etcd_prefix: format!("/{name}"),
            dir,
            binary: binary.to_path_buf(),
            port: free_port()?,
            etcd_url: etcd_url.to_string(),
            admin_token,
            kubeconfig,
            extra_args,
            process: None,
            last_ready_after: None,
            last_ready_cpu: None,
        })
    }

    /// Gives a pooled cluster the name and admin kubeconfig path of the fleet that takes it,
    /// and writes that kubeconfig.
    pub(crate) fn assign(&mut self, name: &str, kubeconfig: PathBuf) -> Result<()> {
        self.name = name.to_string();
        self.kubeconfig = kubeconfig;
        write_token_kubeconfig(
            &self.kubeconfig,
            &self.name,
            &self.server(),
            &self.ca_pem()?,
            ADMIN_USER,
            &self.admin_token,
        )
    }

    /// Where its objects are in etcd (`/<name it was created with>`).
    pub(crate) fn etcd_prefix(&self) -> &str {
        &self.etcd_prefix
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster as a new value, its running process with it; this one is left without a
    /// process (what a fleet does when it drops: the pool keeps the new value).
    pub(crate) fn take_over(&mut self) -> Cluster {
        Cluster {
            name: self.name.clone(),
            etcd_prefix: self.etcd_prefix.clone(),
            dir: self.dir.clone(),
            binary: self.binary.clone(),
            port: self.port,
            etcd_url: self.etcd_url.clone(),
            admin_token: self.admin_token.clone(),
            kubeconfig: self.kubeconfig.clone(),
            extra_args: self.extra_args.clone(),
            process: self.process.take(),
            last_ready_after: self.last_ready_after,
            last_ready_cpu: self.last_ready_cpu,
        }
    }

    /// The cluster's name (`hub` or the member name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The apiserver's log (stdout and stderr, appended across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("kube-apiserver.log")
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The admin kubeconfig of this cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// PEM of the apiserver's serving certificate, which is also the kubeconfig's CA.
    pub fn ca_pem(&self) -> Result<Vec<u8>> {
        let path = self.dir.join("certs/apiserver.crt");
        std::fs::read(&path).map_err(io_err(format!("read {}", path.display())))
    }

    /// How long the last (re)start took until `/readyz` answered 200.
    pub fn ready_after(&self) -> Option<Duration> {
        self.last_ready_after
    }

    /// CPU time the apiserver process used from its (last) spawn until `/readyz` answered 200.
    pub fn ready_cpu(&self) -> Option<Duration> {
        self.last_ready_cpu
    }

    /// CPU time (user + system) the apiserver process has used so far, when it runs.
    pub fn cpu_time(&self) -> Option<Duration> {
        self.process.as_ref().and_then(ProcessGuard::cpu_time)
    }

    /// RSS of the apiserver process in KiB, when it runs.
    pub fn rss_kib(&self) -> Option<u64> {
        self.process.as_ref().and_then(ProcessGuard::rss_kib)
    }

    /// PID of the apiserver process, when it runs (tests pause it with SIGSTOP).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(ProcessGuard::pid)
    }

    /// Whether the apiserver process is running.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// A client with the admin identity.
    pub async fn client(&self) -> Result<kube::Client> {
        client_from_kubeconfig(&self.name, &self.kubeconfig).await
    }

    /// Spawns the apiserver (without waiting).
    pub(crate) fn spawn(&mut self) -> Result<()> {
        if self.process.is_some() {
            return Ok(());
        }
        let d = &self.dir;
        let mut cmd = Command::new(&self.binary);
        cmd.arg(format!("--etcd-servers={}", self.etcd_url))
            .arg(format!("--etcd-prefix={}", self.etcd_prefix))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.port))
            .arg(format!("--cert-dir={}", d.join("certs").display()))
            .arg(format!(
                "--token-auth-file={}",
                d.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=RBAC")
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!(
                "--service-account-key-file={}",
                d.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ))
            .arg("--endpoint-reconciler-type=none")
            // Off: the API groups nothing here uses (the binary, the charts, the tests), and the
            // admission plugins that watch them. Each costs every start its storage, informers
            // and OpenAPI: together 0.37 of 1.58 CPU-seconds to ready (examples/boot_cpu).
            // autoscaling/v1 stays (the core group's scale subresources need it), and so do
            // admission webhooks/policies and priority and fairness (no saving measured).
            .arg(format!("--runtime-config={}", UNUSED_GROUPS.join(",")))
            .arg(format!(
                "--disable-admission-plugins={}",
                UNUSED_ADMISSION.join(",")
            ))
            .arg("--v=0")
            .args(&self.extra_args);
        self.process = Some(ProcessGuard::spawn(
            &format!("kube-apiserver[{}]", self.name),
            cmd,
            &d.join("kube-apiserver.log"),
        )?);
        Ok(())
    }

    /// Waits for the serving certificate, writes the admin kubeconfig and waits for `/readyz`.
    /// An apiserver answers 500 and refuses connections while it comes up, and kube's client
    /// logs each such answer as an ERROR: the polls run with logging off, so that a process
    /// embedding the substrate (`fleetnet-hub sandbox`, the tests) shows no error when nothing
    /// is wrong.
    pub(crate) async fn wait_ready(&mut self, started: Instant) -> Result<()> {
        use tracing::instrument::WithSubscriber;
        let quiet = tracing::subscriber::NoSubscriber::default();
        self.poll_ready(started).with_subscriber(quiet).await
    }

    async fn poll_ready(&mut self, started: Instant) -> Result<()> {
        let deadline = started + Duration::from_secs(240);
        // The apiserver writes its self-signed certificate while starting: a half-written file
        // must not become the kubeconfig's CA for good, so the client follows the file.
        let mut trusted: Option<(Vec<u8>, kube::Client)> = None;
        let mut respawns = 0;
        loop {
            if let Err(e) = self.check_alive() {
                // The port was free when picked but taken before the apiserver bound it.
                if respawns < 3 && self.lost_its_port() {
                    respawns += 1;
                    self.port = free_port()?;
                    eprintln!(
                        "[testenv] cluster {}: port taken, starting again on {}",
                        self.name, self.port
                    );
                    trusted = None;
                    self.spawn()?;
                    continue;
                }
                return Err(e);
            }
            let pem = std::fs::read(self.dir.join("certs/apiserver.crt")).unwrap_or_default();
            let complete = String::from_utf8_lossy(&pem)
                .trim_end()
                .ends_with("-----END CERTIFICATE-----");
            if complete && trusted.as_ref().is_none_or(|(seen, _)| *seen != pem) {
                write_token_kubeconfig(
                    &self.kubeconfig,
                    &self.name,
                    &self.server(),
                    &pem,
                    ADMIN_USER,
                    &self.admin_token,
                )?;
                trusted = Some((pem, self.client().await?));
            }
            if let Some((_, client)) = &trusted
                && let Ok(req) = http::Request::get("/readyz").body(Vec::new())
                && let Ok(answer) =
                    tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await
                && matches!(answer.as_deref(), Ok("ok"))
            {
                self.last_ready_after = Some(started.elapsed());
                self.last_ready_cpu = self.cpu_time();
                return Ok(());
            }
            self.check_deadline(deadline)?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the apiserver answers `/readyz` with `ok` within `limit` (a process that exited,
    /// or one a test paused with SIGSTOP and left so, does not).
    pub(crate) async fn answers_ready(&mut self, limit: Duration) -> bool {
        use tracing::instrument::WithSubscriber;
        if self.check_alive().is_err() {
            return false;
        }
        let probe = async {
            let client = self.client().await.ok()?;
            let req = http::Request::get("/readyz").body(Vec::new()).ok()?;
            client.request_text(req).await.ok()
        };
        let quiet = tracing::subscriber::NoSubscriber::default();
        matches!(
            tokio::time::timeout(limit, probe.with_subscriber(quiet)).await,
            Ok(Some(answer)) if answer == "ok"
        )
    }

    /// Starts a stopped cluster again on the same port with its data kept, and waits for it.
    pub async fn start(&mut self) -> Result<()> {
        let started = Instant::now();
        self.spawn()?;
        self.wait_ready(started).await?;
        eprintln!(
            "[testenv] cluster {} ready after {:?} ({})",
            self.name,
            started.elapsed(),
            self.server()
        );
        Ok(())
    }

    /// Stops the apiserver (SIGTERM, then SIGKILL); the port, certificates and data stay.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
    }

    /// Kills the apiserver at once (SIGKILL): an outage from one moment to the next, where
    /// [`Cluster::stop`]'s graceful shutdown lets open connections go on for up to 10 s. The
    /// port, certificates and data stay.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    fn check_alive(&mut self) -> Result<()> {
        let log = self.log_path();
        match self.process.as_mut().map(ProcessGuard::exited) {
            None => Err(self.error("apiserver is not running".into())),
            Some(Some(status)) => {
                self.process = None;
                Err(self.error(format!(
                    "kube-apiserver exited with {status}; last lines of {}:\n{}",
                    log.display(),
                    tail(&log, 15)
                )))
            }
            Some(None) => Ok(()),
        }
    }

    fn lost_its_port(&self) -> bool {
        tail(&self.log_path(), 3).contains("address already in use")
    }

    fn check_deadline(&self, deadline: Instant) -> Result<()> {
        if Instant::now() > deadline {
            let log = self.log_path();
            return Err(self.error(format!(
                "not ready within 240 s; last lines of {}:\n{}",
                log.display(),
                tail(&log, 15)
            )));
        }
        Ok(())
    }

    fn error(&self, message: String) -> Error {
        Error::Cluster {
            cluster: self.name.clone(),
            message,
        }
    }
}

/// A kube client for the kubeconfig at `path` (its current context).
pub async fn client_from_kubeconfig(cluster: &str, path: &Path) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Cluster {
        cluster: cluster.to_string(),
        message: format!("read kubeconfig {}: {e}", path.display()),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Cluster {
            cluster: cluster.to_string(),
            message: format!("kubeconfig {}: {e}", path.display()),
        })?;
    kube::Client::try_from(config).map_err(|source| Error::Kube {
        cluster: cluster.to_string(),
        step: "build client".into(),
        source,
    })
}

fn random_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
