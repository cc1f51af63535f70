//! Clusters kept running from one fleet to the next within one process.
//!
//! Starting a kube-apiserver and installing its CRDs costs ~1.4 CPU-seconds, and a test suite
//! starts several hundred: most of what the tests cost. A fleet's cluster is instead taken from
//! here when one with the same CRDs is idle, and given back when the fleet drops. It comes back
//! as it was when it was first ready: every etcd key written since then is deleted, below the
//! apiserver (no finalizer, no namespace that never finishes terminating). A cluster whose
//! first-ready keys were changed or deleted (a test edited a CRD, removed a built-in object) is
//! not reused but killed; so is one that is not running any more, or was started with flags of
//! its own. Each cluster of the pool has its own `--etcd-prefix` in the pool's one etcd.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::etcd::{Etcd, EtcdKeys};
use crate::{Error, Result, io_err};

/// Idle clusters kept at most; one given back beyond that is killed (each holds ~150 MiB).
const MAX_IDLE: usize = 12;

/// How long a cluster given back rests before it is cleared: what the last test left running
/// in its runtime (a controller's tasks end when the runtime drops, just after the fleet) must
/// have stopped writing.
const REST: Duration = Duration::from_secs(1);

/// Keys the apiserver itself rewrites while it runs: a change to one of these does not stop a
/// cluster from being reused. Relative to the prefix. Its identity and peer Leases are renewed
/// every few seconds; the allocation ranges (ClusterIPs, NodePorts) change with every Service a
/// test makes, and one left marked after its Service is cleared only narrows what is free until
/// the apiserver's repair loop frees it.
const REWRITTEN_BY_THE_APISERVER: [&str; 3] =
    ["/leases/kube-system/", "/peerserverleases/", "/ranges/"];

/// What a pooled cluster was when it was first ready: every key under its prefix and the
/// revision it had then, and which CRDs it serves.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    crds: u64,
    prefix: String,
    first_ready: HashMap<String, i64>,
}

/// A cluster given back, resting until [`REST`] has passed.
#[derive(Debug)]
struct Idle {
    cluster: Cluster,
    ticket: Ticket,
    since: Instant,
}

struct Pool {
    root: PathBuf,
    etcd: Etcd,
    idle: Mutex<Vec<Idle>>,
    created: AtomicUsize,
}

/// Whether fleets may take clusters from the pool (`FLEETNET_TEST_FRESH_CLUSTERS=1`: never, to
/// tell a pooling problem from a product one).
pub(crate) fn enabled() -> bool {
    std::env::var_os("FLEETNET_TEST_FRESH_CLUSTERS").is_none_or(|v| v.is_empty() || v == "0")
}

fn pool() -> Result<&'static Pool> {
    static POOL: OnceLock<std::result::Result<Pool, String>> = OnceLock::new();
    POOL.get_or_init(|| start_pool().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|message| Error::Cluster {
            cluster: "pool".into(),
            message: message.clone(),
        })
}

fn start_pool() -> Result<Pool> {
    let binaries = crate::Binaries::locate()?;
    remove_left_by_dead_processes();
    let root = tempfile::Builder::new()
        .prefix(&format!("fleetnet-pool-{}-", std::process::id()))
        .tempdir()
        .map_err(io_err("create the cluster pool's directory"))?
        .keep();
    remove_at_exit(&root);
    crate::sa_keys::write_sa_keys(&root)?;
    let etcd = Etcd::start(&binaries.etcd(), &root)?;
    Ok(Pool {
        root,
        etcd,
        idle: Mutex::new(Vec::new()),
        created: AtomicUsize::new(0),
    })
}

/// The pool's directory (etcd's data, each cluster's certificates and log) is removed when the
/// process exits; its processes die with it (`PR_SET_PDEATHSIG`).
fn remove_at_exit(root: &Path) {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove() {
        if let Some(root) = ROOT.get() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
    if ROOT.set(root.to_path_buf()).is_ok() {
        // SAFETY: registers a plain function with no arguments, run once at exit.
        unsafe {
            libc::atexit(remove);
        }
    }
}

/// A process killed before its exit handlers ran leaves its pool's directory behind (etcd's
/// data, ~100 MB): removed by the next process that starts a pool.
fn remove_left_by_dead_processes() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("fleetnet-pool-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The fingerprint of a set of CRDs: clusters are reused only for the same set.
pub(crate) fn crds_key(
    crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut texts: Vec<String> = crds
        .iter()
        .map(|c| serde_json::to_string(c).unwrap_or_default())
        .collect();
    texts.sort();
    let mut hasher = std::hash::DefaultHasher::new();
    texts.hash(&mut hasher);
    hasher.finish()
}

/// A new cluster of the pool (not yet spawned), backed by the pool's etcd.
pub(crate) fn new_cluster() -> Result<Cluster> {
    let pool = pool()?;
    let binaries = crate::Binaries::locate()?;
    let name = format!("pool-{}", pool.created.fetch_add(1, Ordering::Relaxed) + 1);
    Cluster::new(
        &name,
        &pool.root,
        &binaries.kube_apiserver(),
        &pool.etcd.client_url,
        pool.root.join(format!("{name}.kubeconfig")),
        &pool.root,
        Vec::new(),
    )
}

/// Records what `cluster`, ready and with its CRDs installed, holds now: what it comes back to.
pub(crate) async fn ticket(cluster: &Cluster, crds: u64) -> Result<Ticket> {
    let pool = pool()?;
    let prefix = format!("{}/", cluster.etcd_prefix());
    let first_ready = EtcdKeys::new(&pool.etcd.client_url)
        .revisions(&prefix)
        .await?
        .into_iter()
        .collect();
    Ok(Ticket {
        crds,
        prefix,
        first_ready,
    })
}

/// An idle cluster serving exactly the CRDs `crds`, cleared back to its first-ready state, if
/// there is one.
pub(crate) async fn take(crds: u64) -> Result<Option<(Cluster, Ticket)>> {
    let pool = pool()?;
    loop {
        let found = {
            let mut idle = pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.iter()
                .position(|i| i.ticket.crds == crds)
                .map(|at| idle.remove(at))
        };
        let Some(mut idle) = found else {
            return Ok(None);
        };
        tokio::time::sleep(REST.saturating_sub(idle.since.elapsed())).await;
        let cleared = if idle.cluster.answers_ready(Duration::from_secs(2)).await {
            clear(pool, &idle.ticket).await
        } else {
            Err("its apiserver does not answer /readyz".to_string())
        };
        match cleared {
            Ok(()) => return Ok(Some((idle.cluster, idle.ticket))),
            Err(reason) => {
                eprintln!(
                    "[testenv] cluster {} not reused: {reason}",
                    idle.cluster.etcd_prefix()
                );
                discard(&mut idle.cluster);
            }
        }
    }
}

/// Takes `cluster` back when it still runs; kills it otherwise. The fleet's kubeconfig goes with
/// the fleet's directory: an idle cluster keeps one of its own.
pub(crate) fn give_back(mut cluster: Cluster, ticket: Ticket) {
    let Ok(pool) = pool() else {
        return discard(&mut cluster);
    };
    let own_kubeconfig = cluster.dir().join("admin.kubeconfig");
    let name = cluster.name().to_string();
    if !cluster.is_running() || cluster.assign(&name, own_kubeconfig).is_err() {
        return discard(&mut cluster);
    }
    let mut idle = pool.idle.lock().unwrap_or_else(|p| p.into_inner());
    idle.push(Idle {
        cluster,
        ticket,
        since: Instant::now(),
    });
    if idle.len() > MAX_IDLE {
        let mut oldest = idle.remove(0);
        drop(idle);
        discard(&mut oldest.cluster);
    }
}

fn discard(cluster: &mut Cluster) {
    cluster.kill();
    let _ = std::fs::remove_dir_all(cluster.dir());
}

/// Deletes every key written since the cluster was first ready, unless one of those it had
/// then was changed or deleted: then the cluster is not its first-ready self any more.
async fn clear(pool: &Pool, ticket: &Ticket) -> std::result::Result<(), String> {
    let keys = EtcdKeys::new(&pool.etcd.client_url);
    let now = keys
        .revisions(&ticket.prefix)
        .await
        .map_err(|e| e.to_string())?;
    let stale = plan_clear(&ticket.prefix, &ticket.first_ready, &now)?;
    for key in stale {
        keys.delete(&key).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Which keys to delete to bring a cluster back to `first_ready`, or why it cannot be.
pub(crate) fn plan_clear(
    prefix: &str,
    first_ready: &HashMap<String, i64>,
    now: &[(String, i64)],
) -> std::result::Result<Vec<String>, String> {
    let rewritten = |key: &str| {
        let relative = key
            .strip_prefix(prefix.trim_end_matches('/'))
            .unwrap_or(key);
        REWRITTEN_BY_THE_APISERVER
            .iter()
            .any(|p| relative.starts_with(p))
    };
    let mut stale = vec![];
    for (key, revision) in now {
        match first_ready.get(key) {
            None => stale.push(key.clone()),
            Some(was) if was != revision && !rewritten(key) => {
                return Err(format!("{key} was changed"));
            }
            Some(_) => {}
        }
    }
    let present: std::collections::HashSet<&String> = now.iter().map(|(k, _)| k).collect();
    if let Some(gone) = first_ready
        .keys()
        .find(|k| !present.contains(k) && !rewritten(k))
    {
        return Err(format!("{gone} was deleted"));
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_ready() -> HashMap<String, i64> {
        [
            ("/pool-1/namespaces/default", 5),
            ("/pool-1/leases/kube-system/apiserver-abc", 7),
            (
                "/pool-1/apiextensions.k8s.io/customresourcedefinitions/a.b",
                9,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn now(extra: &[(&str, i64)]) -> Vec<(String, i64)> {
        let mut keys: Vec<(String, i64)> = first_ready().into_iter().collect();
        keys.extend(extra.iter().map(|(k, v)| (k.to_string(), *v)));
        keys
    }

    #[test]
    fn what_a_test_wrote_is_deleted_and_the_apiservers_own_lease_may_move() {
        let mut keys = now(&[
            ("/pool-1/namespaces/demo", 20),
            ("/pool-1/services/specs/demo/web", 21),
        ]);
        for (k, v) in &mut keys {
            if k.contains("/leases/") {
                *v = 30;
            }
        }
        let mut stale = plan_clear("/pool-1/", &first_ready(), &keys).expect("clearable");
        stale.sort();
        assert_eq!(
            stale,
            ["/pool-1/namespaces/demo", "/pool-1/services/specs/demo/web"]
        );
    }

    #[test]
    fn a_changed_or_deleted_first_ready_key_stops_reuse() {
        let mut changed = now(&[]);
        for (k, v) in &mut changed {
            if k.ends_with("a.b") {
                *v = 40;
            }
        }
        let err = plan_clear("/pool-1/", &first_ready(), &changed).unwrap_err();
        assert!(
            err.contains("customresourcedefinitions/a.b was changed"),
            "{err}"
        );

        let deleted: Vec<(String, i64)> = now(&[])
            .into_iter()
            .filter(|(k, _)| !k.ends_with("default"))
            .collect();
        let err = plan_clear("/pool-1/", &first_ready(), &deleted).unwrap_err();
        assert!(err.contains("namespaces/default was deleted"), "{err}");
    }

    #[test]
    fn a_cluster_untouched_has_nothing_to_delete() {
        assert!(
            plan_clear("/pool-1/", &first_ready(), &now(&[]))
                .expect("clearable")
                .is_empty()
        );
    }
}
