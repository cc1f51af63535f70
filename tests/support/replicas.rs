//! Replicas of the real `fleetnet-hub` binary sharding members (`--shard-members`), and what
//! the apiservers saw of them.
//!
//! - [`Replica`]: one process (its health and metrics ports), stopped, paused, resumed or
//!   killed on demand; killed when dropped.
//! - Ownership as the hub records it (the holders of the members' shard Leases) and as the
//!   replicas run it (`/members`), and a wait until both agree and hold still.
//! - Server-side attribution: each replica may get an identity of its own (a ServiceAccount in
//!   the hub and in every member, its own hub kubeconfig and kubeconfig directory), and every
//!   apiserver audits those users ([`audit_args`], [`writes`]), so a write is tied to the
//!   replica that sent it and to the instant the apiserver received it, whatever the process
//!   counted or lost.

use super::{KillOnDrop, free_port, signal};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetnet_testenv::{Fleet, FleetBuilder, ScopedIdentity};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

use crate::support::{every_resource, http_get};

/// `--leader-election-id`: the prefix of every lease name.
pub const PREFIX: &str = "fleetnet-hub";
/// Where the leases live (`--leader-election-namespace`).
pub const LEASE_NS: &str = "default";
/// The lease duration the binary uses.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// `--shards` of every replica: 17 puts the tests' six members (m1..m6) in six shards of their
/// own (a unit test of `ownership::placement` checks it), so ownership moves member by member.
pub const SHARDS: u16 = 17;

/// The Lease name of `member`'s shard.
pub fn shard_lease_of(member: &str) -> String {
    let shard = fleetnet_hub::ownership::placement::shard_of(member, SHARDS);
    fleetnet_hub::ownership::shard::shard_lease(PREFIX, shard)
}

/// How a replica reaches the clusters.
#[derive(Debug, Clone)]
pub struct Access {
    pub hub_kubeconfig: PathBuf,
    pub kubeconfig_dir: PathBuf,
    /// The apiservers' name for it (audit logs), when it has an identity of its own.
    pub user: Option<String>,
}

impl Access {
    /// The fleet's admin credentials, shared by every replica.
    pub fn admin(fleet: &Fleet) -> Self {
        Self {
            hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
            kubeconfig_dir: fleet.member_kubeconfig_dir(),
            user: None,
        }
    }
}

/// A replica process, killed when dropped.
pub struct Replica {
    pub name: String,
    pub access: Access,
    child: KillOnDrop,
    pub health: u16,
    pub metrics: u16,
}

/// Starts replica `name` (its pod name) with `access` and `extra` flags (member budget:
/// 100 qps, burst 200, unless `extra` sets `--kube-api-qps`).
pub fn replica(name: &str, access: &Access, extra: &[&str]) -> Replica {
    let (health, metrics) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(["run", "--hub-kubeconfig"])
        .arg(&access.hub_kubeconfig)
        .arg("--kubeconfig-dir")
        .arg(&access.kubeconfig_dir)
        .args([
            "--shard-members",
            "--leader-election-namespace",
            LEASE_NS,
            "--leader-election-id",
            PREFIX,
            "--shards",
            &SHARDS.to_string(),
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health}"),
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics}"),
            // member_writes counts each member's requests by verb.
            "--metrics-detail=member",
        ])
        .args(extra)
        .args(if extra.contains(&"--kube-api-qps") {
            &[][..]
        } else {
            &["--kube-api-qps", "100", "--kube-api-burst", "200"][..]
        })
        .env("POD_NAME", name)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(KillOnDrop)
        .expect("start a replica");
    Replica {
        name: name.to_string(),
        access: access.clone(),
        child,
        health,
        metrics,
    }
}

impl Replica {
    /// SIGSTOP: the process freezes, its sockets stay open. Never query a paused replica's
    /// HTTP endpoints (the connection is accepted and never answered).
    pub fn pause(&self) {
        signal(self.child.id(), "-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.child.id(), "-CONT");
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the process to exit by itself (what a pod's grace period
    /// allows: 30 s). Returns how long it took.
    pub fn terminate(&mut self) -> Duration {
        signal(self.child.id(), "-TERM");
        let sent = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "{} exited with {status}", self.name);
                return sent.elapsed();
            }
            assert!(
                sent.elapsed() < Duration::from_secs(30),
                "{} still running 30 s after SIGTERM",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path` on the health port, once it listens (a replica just started may not yet:
    /// up to 30 s).
    async fn get(&self, path: &str) -> String {
        let addr = ([127, 0, 0, 1], self.health).into();
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(addr).await.is_err() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        http_get(addr, path).await.1
    }

    /// The members this replica runs (engaged and ready), from its `/members`.
    pub async fn engaged(&self) -> BTreeSet<String> {
        let v: serde_json::Value =
            serde_json::from_str(&self.get("/members").await).unwrap_or_default();
        v["members"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(_, s)| s["phase"] == "ready")
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether this replica's last hub probe was answered, from its `/members`.
    pub async fn hub_reachable(&self) -> Option<bool> {
        let v: serde_json::Value = serde_json::from_str(&self.get("/members").await).ok()?;
        v["hubReachable"].as_bool()
    }

    /// Member-side writes its own clients counted, per member.
    pub async fn member_writes(&self) -> BTreeMap<String, f64> {
        let text = http_get(([127, 0, 0, 1], self.metrics).into(), "/metrics")
            .await
            .1;
        let mut out = BTreeMap::new();
        for line in text.lines().filter(|l| {
            l.starts_with("fleetnet_api_requests_total{")
                && l.contains("client=\"member\"")
                && (l.contains("verb=\"patch\"") || l.contains("verb=\"create\""))
                && !l.contains("code=\"none\"")
        }) {
            let member = line
                .split("member=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default()
                .to_string();
            let n: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *out.entry(member).or_insert(0.0) += n;
        }
        out
    }

    /// Whether a lease holder identity (`<pod name>_<suffix>`) is this replica.
    pub fn is(&self, holder: &str) -> bool {
        holder.starts_with(&format!("{}_", self.name))
    }
}

fn leases(hub: &kube::Client) -> Api<Lease> {
    Api::namespaced(hub.clone(), LEASE_NS)
}

/// Member (of `members`) → holder of its shard Lease (empty holders left out).
pub async fn holders(hub: &kube::Client, members: &[&str]) -> BTreeMap<String, String> {
    let shards: BTreeMap<String, String> = leases(hub)
        .list(&ListParams::default())
        .await
        .expect("list leases")
        .items
        .into_iter()
        .filter_map(|l| {
            let holder = l.spec?.holder_identity.unwrap_or_default();
            (!holder.is_empty()).then_some((l.metadata.name?, holder))
        })
        .collect();
    members
        .iter()
        .filter_map(|m| Some((m.to_string(), shards.get(&shard_lease_of(m))?.clone())))
        .collect()
}

/// The holders of the replicas' announcements.
pub async fn announced(hub: &kube::Client) -> Vec<String> {
    leases(hub)
        .list(&ListParams::default().labels(&format!("fleetnet.azure.com/replica-of={PREFIX}")))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|l| l.spec?.holder_identity)
                .collect()
        })
        .unwrap_or_default()
}

/// Who runs each member now, when that is consistent: every one of `members` engaged by
/// exactly one of `replicas`, the one its lease names.
pub async fn ownership(
    hub: &kube::Client,
    replicas: &[&Replica],
    members: &[&str],
) -> Option<BTreeMap<String, String>> {
    let holders = holders(hub, members).await;
    if members.iter().any(|m| !holders.contains_key(*m)) {
        return None;
    }
    let mut seen = BTreeMap::new();
    for r in replicas {
        for m in r.engaged().await {
            if seen.insert(m.clone(), r.name.clone()).is_some() || !r.is(holders.get(&m)?) {
                return None;
            }
        }
    }
    let all = members.iter().all(|m| seen.contains_key(*m)) && seen.len() == members.len();
    all.then_some(seen)
}

/// Waits until every one of `replicas` has announced itself and the ownership is consistent
/// and stable over a few retry periods; member → replica name.
pub async fn settled(
    hub: &kube::Client,
    replicas: &[&Replica],
    members: &[&str],
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "ownership did not settle in 120 s"
        );
        let names = announced(hub).await;
        let all = replicas.iter().all(|r| names.iter().any(|n| r.is(n)));
        if all && let Some(first) = ownership(hub, replicas, members).await {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if ownership(hub, replicas, members).await.as_ref() == Some(&first) {
                return first;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Server-side count of the hub's requests whose `apiserver_request_total` labels contain
/// every one of `labels`.
pub async fn hub_requests(hub: &kube::Client, labels: &[&str]) -> f64 {
    let text = crate::support::apiserver_metrics(hub).await;
    crate::support::sum(&text, "apiserver_request_total", labels)
}

/// Server-side count of ISE deletes on the hub.
pub async fn ise_deletes(hub: &kube::Client) -> f64 {
    let labels = ["resource=\"internalserviceexports\"", "verb=\"DELETE\""];
    hub_requests(hub, &labels).await
}

/// Every shard Lease's `leaseTransitions`, summed: it grows by one each time a shard changes
/// hands (a first take counts none).
pub async fn shard_transitions(hub: &kube::Client) -> i32 {
    leases(hub)
        .list(&ListParams::default())
        .await
        .expect("list leases")
        .items
        .into_iter()
        .filter(|l| {
            l.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{PREFIX}-shard-")))
        })
        .filter_map(|l| l.spec?.lease_transitions)
        .sum()
}

// --- identities and audit -----------------------------------------------------------------------

/// The apiservers' name for the ServiceAccount `name` of [`identity`].
pub fn user(name: &str) -> String {
    format!("system:serviceaccount:{LEASE_NS}:{name}")
}

/// Where cluster `cluster`'s audit log is kept.
pub fn audit_log(dir: &Path, cluster: &str) -> PathBuf {
    dir.join(format!("{cluster}.audit.log"))
}

/// `builder` with the hub and every one of `members` auditing `users` (level Metadata) into
/// [`audit_log`]`(dir, cluster)`.
pub fn audited(
    mut builder: FleetBuilder,
    dir: &Path,
    members: &[&str],
    users: &[String],
) -> FleetBuilder {
    let policy = dir.join("audit-policy.yaml");
    let quoted: Vec<String> = users.iter().map(|u| format!("\"{u}\"")).collect();
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n  - level: Metadata\n    users: [{}]\n  - level: None\n",
            quoted.join(", ")
        ),
    )
    .expect("audit policy");
    for cluster in std::iter::once("hub").chain(members.iter().copied()) {
        builder = builder.apiserver_args(
            cluster,
            [
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit_log(dir, cluster).display()),
                "--audit-log-mode=blocking".to_string(),
            ],
        );
    }
    builder
}

/// A ServiceAccount `name` allowed everything, in the hub and in every one of `members`; its
/// hub kubeconfig and a kubeconfig directory of its own.
pub async fn identity(fleet: &Fleet, name: &str, members: &[&str]) -> Access {
    let id = ScopedIdentity {
        namespace: LEASE_NS.into(),
        name: name.into(),
        cluster_role: Some(every_resource(&["*"])),
        role: None,
        role_namespaces: vec![],
    };
    let root = fleet.scratch_dir().join(format!("identity-{name}"));
    let kubeconfig_dir = root.join("kubeconfigs");
    std::fs::create_dir_all(&kubeconfig_dir).expect("kubeconfig dir");
    let hub_kubeconfig = fleet
        .hub()
        .issue_scoped_kubeconfig(&id, &root.join("hub.kubeconfig"))
        .await
        .expect("hub identity");
    for m in members {
        fleet
            .member(m)
            .issue_scoped_kubeconfig(&id, &kubeconfig_dir.join(format!("{m}.yaml")))
            .await
            .expect("member identity");
    }
    Access {
        hub_kubeconfig,
        kubeconfig_dir,
        user: Some(user(name)),
    }
}

/// One write (anything but get, list, watch) an audited user made.
#[derive(Debug, Clone)]
pub struct Write {
    /// `hub` or the member's name.
    pub cluster: String,
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    /// When the apiserver received it.
    pub at: jiff::Timestamp,
}

impl Write {
    /// The member this write is for: a write to the member's cluster or to its hub namespace
    /// (`<prefix><member>`). `None`: a Lease, or anything else.
    pub fn member(&self, namespace_prefix: &str) -> Option<String> {
        if self.cluster != "hub" {
            return Some(self.cluster.clone());
        }
        if self.resource == "leases" {
            return None;
        }
        self.namespace
            .strip_prefix(namespace_prefix)
            .map(str::to_string)
    }

    /// A write of `member`'s shard Lease the apiserver accepted (acquire or renew).
    pub fn holds_shard_of(&self, member: &str) -> bool {
        self.cluster == "hub"
            && self.resource == "leases"
            && self.name == shard_lease_of(member)
            && (200..300).contains(&self.code)
    }
}

/// Every write of the audited users in `clusters`' logs, in the order received.
pub fn writes(dir: &Path, clusters: &[&str]) -> Vec<Write> {
    let mut out = vec![];
    for cluster in clusters {
        let path = audit_log(dir, cluster);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        // The last line may be half written: only whole JSON lines count.
        for ev in text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            let verb = s(&ev["verb"]);
            if matches!(verb.as_str(), "get" | "list" | "watch")
                || ev["stage"] != "ResponseComplete"
            {
                continue;
            }
            let Ok(at) = s(&ev["requestReceivedTimestamp"]).parse() else {
                continue;
            };
            let object = &ev["objectRef"];
            out.push(Write {
                cluster: cluster.to_string(),
                user: s(&ev["user"]["username"]),
                verb,
                resource: s(&object["resource"]),
                namespace: s(&object["namespace"]),
                name: s(&object["name"]),
                code: ev["responseStatus"]["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
                at,
            });
        }
    }
    out.sort_by_key(|w| w.at);
    out
}
