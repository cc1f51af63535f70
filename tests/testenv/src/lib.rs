//! The multi-cluster test substrate: one hub and N member Kubernetes clusters, each a REAL
//! `kube-apiserver` on 127.0.0.1 (TLS, RBAC, bearer-token admin), all backed by ONE etcd with a
//! distinct `--etcd-prefix` per cluster.
//!
//! Used by every integration test, by the benchmark and by `fleetnet-hub sandbox`.
//! Every process it starts is ended by PID when the [`Fleet`] drops (also on panic) and, should
//! the test process itself be killed, by the kernel (`PR_SET_PDEATHSIG`).

mod binaries;
mod cluster;
mod etcd;
mod fleet;
mod kubeconfig;
mod pool;
mod process;
mod rbac;
mod sa_keys;
pub mod tokens;

pub use binaries::Binaries;
pub use cluster::{Cluster, client_from_kubeconfig};
pub use fleet::{DEFAULT_HUB_NAMESPACE_PREFIX, Fleet, FleetBuilder, ensure_namespace};
pub use process::free_port;
pub use rbac::{ScopedIdentity, load_cluster_role, load_role};

use std::path::{Path, PathBuf};

/// Resources whose writes are fleetnet-hub's, as the apiservers count them in
/// `apiserver_request_total` (the apiservers also write their own leases: not these).
pub const COUNTED_RESOURCES: [&str; 3] = ["serviceexports", "internalserviceexports", "events"];
/// `verb` label values of writes in `apiserver_request_total` (upper case; server-side apply is
/// `APPLY`, a collection delete `DELETECOLLECTION`).
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// Everything that can go wrong while starting or driving the substrate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("test binaries: {0}")]
    Binaries(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cluster {cluster}: {message}")]
    Cluster { cluster: String, message: String },
    #[error("cluster {cluster}: {step}: {source}")]
    Kube {
        cluster: String,
        step: String,
        #[source]
        source: kube::Error,
    },
    #[error("{path}: {message}")]
    Manifest { path: PathBuf, message: String },
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The repository root: found at run time from the package being run (cargo's
/// `CARGO_MANIFEST_DIR`, else the working directory) up to the directory holding
/// `charts/fleetnet-hub`; the compile-time location of this crate (`tests/testenv`) only as the
/// last resort, since a build cache shared by two checkouts would point into the other one.
pub fn repo_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok());
    let found = start.and_then(|dir| {
        dir.ancestors()
            .find(|d| d.join("charts/fleetnet-hub").is_dir())
            .map(Path::to_path_buf)
    });
    found.unwrap_or_else(|| {
        let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        built.canonicalize().unwrap_or(built)
    })
}

/// Where the chart keeps the CRDs generated from the Rust types.
pub fn chart_crds_dir() -> PathBuf {
    repo_root().join("charts/fleetnet-hub/crds")
}
