//! The hub, as `run` would use it: the same client (`--hub-kubeconfig`, else the in-cluster
//! configuration), the CRDs the jobs write, and the identity's permissions: in the release
//! namespace (Leases, member and cleanup Secrets) and in each member's hub namespace.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use super::access::{self, Permission};
use super::problem::{Category, Problem, classify};
use super::served;
use crate::fleet::registry::MemberSource;
use crate::fleet::sources::secrets;

/// How `run` uses the hub: its flags, as `check` takes them.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// `--hub-kubeconfig`; the in-cluster configuration when `None`.
    pub kubeconfig: Option<PathBuf>,
    /// `--hub-namespace-prefix`.
    pub namespace_prefix: String,
    /// The member Secrets' namespace with `--member-secrets`; `None` without.
    pub member_secrets_namespace: Option<String>,
    /// The namespace of the Leases and cleanup records (`--leader-election-namespace`).
    pub records_namespace: String,
    /// The Leases `run` takes.
    pub leases: Leases,
    /// `--cleanup-on-remove`: its records are Secrets of the release namespace.
    pub cleanup_on_remove: bool,
}

/// The Leases of the replicas' coordination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Leases {
    /// One replica, no election.
    #[default]
    None,
    /// `--leader-elect`: the Lease of this name.
    Leader(String),
    /// `--shard-members`: shard Leases.
    Shards,
}

/// The hub's verdict. `server` is printable; `problem` never quotes the kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HubCheck {
    pub server: String,
    pub ok: bool,
    pub category: Category,
    pub problem: String,
}

impl HubCheck {
    fn of(server: &str, verdict: Result<(), Problem>) -> Self {
        let (category, problem) = match verdict {
            Ok(()) => (Category::Ok, "ok".to_string()),
            Err(p) => (p.category, p.detail),
        };
        Self {
            server: server.into(),
            ok: category == Category::Ok,
            category,
            problem,
        }
    }
}

/// The hub client `run` would build, its server, or why there is none.
pub async fn connect(options: &HubOptions) -> Result<(kube::Client, String), HubCheck> {
    let fence = crate::client::Fence::open();
    let limits = crate::client::Limits::default();
    let path = options.kubeconfig.as_deref();
    match crate::app::hub_client("hub", path, 1, &limits, Arc::default(), fence).await {
        Ok((client, server)) => Ok((client, crate::client::printable_server(&server))),
        Err(e) => Err(HubCheck::of(
            "-",
            Err(Problem::new(Category::Kubeconfig, e.to_string())),
        )),
    }
}

/// Checks the hub before any member: served CRDs, then the release namespace's permissions.
pub async fn check(client: &kube::Client, server: &str, options: &HubOptions) -> HubCheck {
    let verdict = async {
        served::all_served(client, &served::hub_resources()).await?;
        let missing = access::missing(client, release_permissions(options)).await?;
        match access::denied(" in the hub", &missing) {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    };
    HubCheck::of(server, verdict.await)
}

/// The hub's permissions in the hub namespace of each of `members`, added to `hub`'s verdict
/// (a hub already failing keeps its first problem).
pub async fn check_member_namespaces(
    client: &kube::Client,
    hub: &mut HubCheck,
    options: &HubOptions,
    members: &[String],
) {
    if !hub.ok {
        return;
    }
    let wanted: Vec<Permission> = members
        .iter()
        .flat_map(|m| access::hub_member_permissions(&format!("{}{m}", options.namespace_prefix)))
        .collect();
    let verdict = match access::missing(client, wanted).await {
        Ok(missing) => access::denied(" in the hub", &missing).map_or(Ok(()), Err),
        Err(problem) => Err(problem),
    };
    *hub = HubCheck::of(&hub.server, verdict);
}

/// What `run` does in the release namespace with these options.
fn release_permissions(options: &HubOptions) -> Vec<Permission> {
    let ns = options.records_namespace.as_str();
    let mut wanted = vec![];
    if let Some(secrets_ns) = &options.member_secrets_namespace {
        for verb in ["list", "watch"] {
            wanted.push(Permission::new(("", "secrets", verb), Some(secrets_ns)));
        }
    }
    if options.cleanup_on_remove {
        for verb in ["create", "list"] {
            wanted.push(Permission::new(("", "secrets", verb), Some(ns)));
        }
    }
    let lease = |verb| Permission::new(("coordination.k8s.io", "leases", verb), Some(ns));
    match &options.leases {
        Leases::None => {}
        Leases::Leader(name) => {
            wanted.push(lease("get").named(name));
            wanted.push(lease("update").named(name));
            wanted.push(lease("create"));
        }
        Leases::Shards => wanted.extend(["list", "create", "update", "delete"].map(lease)),
    }
    wanted
}

/// The members declared by labelled Secrets in `namespace`, as `run` reads them.
pub async fn member_secrets(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<(String, MemberSource)>, Problem> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&secrets::selector());
    let doing = format!("list member Secrets in {namespace}");
    let listed = tokio::time::timeout(served::DISCOVERY_TIMEOUT, api.list(&params))
        .await
        .map_err(|_| Problem::new(Category::Unreachable, format!("{doing}: no answer in time")))?
        .map_err(|e| classify(&doing, &e))?;
    Ok(listed.items.iter().filter_map(secrets::member_of).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_permissions_follow_the_options() {
        let mut options = HubOptions {
            records_namespace: "rel".into(),
            ..Default::default()
        };
        assert!(release_permissions(&options).is_empty());
        options.member_secrets_namespace = Some("sec".into());
        options.cleanup_on_remove = true;
        options.leases = Leases::Leader("lead".into());
        let told: Vec<String> = release_permissions(&options)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            told,
            [
                "list secrets in sec",
                "watch secrets in sec",
                "create secrets in rel",
                "list secrets in rel",
                "get coordination.k8s.io/leases lead in rel",
                "update coordination.k8s.io/leases lead in rel",
                "create coordination.k8s.io/leases in rel",
            ]
        );
    }
}
