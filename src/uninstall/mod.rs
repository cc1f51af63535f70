//! `fleetnet-hub uninstall`: the drain the runbook (docs/installation.md, "Uninstall") runs
//! once the release's replicas are stopped. For every member of every source it takes back what
//! the controller wrote, as fleet-networking's member agents do on their way out (the
//! ServiceExport and MultiClusterService controllers' cleanup paths): our finalizers, conditions,
//! labels and annotations come off the objects that stay, and what the controller made is
//! deleted — InternalServiceExports, EndpointSliceExports and InternalServiceImports in the
//! member's hub namespace, the ServiceImports an MCS controls, derived Services and imported
//! EndpointSlices in the fleet system namespace, the `MemberStatus` — then the release's own
//! Leases and cleanup records. Nothing the user made is deleted: ServiceExports,
//! MultiClusterServices, Services, the user's ServiceImports only lose what was ours on them.
//!
//! A subcommand, not a Helm pre-delete hook: a hook Job needs the image pullable and the
//! member credentials mounted at uninstall time, runs while the Deployment still runs (whose
//! replicas would put the finalizers back), and a failed hook blocks `helm uninstall`. The
//! command respects the process's fencing instead ([`fence`]): it refuses while a replica
//! holds one of the release's Leases. Every step converges (a second run writes nothing), so
//! an interrupted drain is resumed by running it again.

mod drain;
mod fence;
mod members;
pub mod rules;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

pub use drain::Tally;

/// Members drained at once.
const CONCURRENCY: usize = 8;
/// One member's drain, both sides, at most.
const PER_MEMBER: Duration = Duration::from_secs(300);
/// The CRD of our status objects (`--delete-crds`).
const STATUS_CRD: &str = "memberstatuses.fleetnet.azure.com";

/// Flags of `uninstall`: the same names and defaults as `run`'s.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// The hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, env = "FLEETNET_HUB_KUBECONFIG")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// The release namespace: its Leases, cleanup records and member Secrets (default
    /// $POD_NAMESPACE, else `default`).
    #[arg(long, env = "FLEETNET_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The release's `--leader-election-id` (the chart: the release's full name).
    #[arg(long, env = "FLEETNET_LEADER_ELECTION_ID", default_value = crate::config::DEFAULT_LEADER_ELECTION_ID)]
    pub leader_election_id: String,
    /// A directory with one kubeconfig per member, as `run` reads it.
    #[arg(long, env = "FLEETNET_KUBECONFIG_DIR")]
    pub kubeconfig_dir: Option<PathBuf>,
    /// A Secret of the release namespace holding one kubeconfig per key (the chart's
    /// `memberKubeconfigSecrets`); repeatable.
    #[arg(long = "kubeconfig-secret")]
    pub kubeconfig_secrets: Vec<String>,
    /// Read the labelled member Secrets too, as `run --member-secrets`.
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub member_secrets: bool,
    /// Their namespace (default: the release namespace).
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS_NAMESPACE")]
    pub member_secrets_namespace: Option<String>,
    #[arg(long, env = "FLEETNET_HUB_NAMESPACE_PREFIX", default_value = crate::fleet::registry::DEFAULT_NAMESPACE_PREFIX)]
    pub hub_namespace_prefix: String,
    /// `run`'s per-member settings file: a member's `hubNamespace` there is drained when no
    /// `MemberStatus` names the member's hub namespace (a member never engaged).
    #[arg(long, env = "FLEETNET_MEMBER_CONFIG")]
    pub member_config: Option<PathBuf>,
    #[arg(long, env = "FLEETNET_FLEET_SYSTEM_NAMESPACE", default_value = crate::config::DEFAULT_FLEET_SYSTEM_NAMESPACE)]
    pub fleet_system_namespace: String,
    /// How long to wait for the replicas' Leases to be released or to expire before refusing
    /// (a replica that lost its RBAC on `helm uninstall` cannot release them).
    #[arg(long, default_value_t = 30)]
    pub wait_seconds: u64,
    /// Delete the MemberStatus CRD too (Helm keeps CRDs), once no MemberStatus is left.
    #[arg(long)]
    pub delete_crds: bool,
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t)]
    pub output: crate::status::cli::Output,
    #[command(flatten)]
    pub trust: TrustFlags,
}

/// What member kubeconfigs may use, as `run`'s flags of the same names.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TrustFlags {
    #[arg(long, env = "FLEETNET_ALLOW_MEMBER_EXEC_PLUGINS")]
    pub allow_member_exec_plugins: bool,
    #[arg(long, env = "FLEETNET_ALLOW_INSECURE_MEMBER_TLS")]
    pub allow_insecure_member_tls: bool,
    #[arg(long, env = "FLEETNET_ALLOW_PLAIN_HTTP_LOOPBACK_MEMBERS")]
    pub allow_plain_http_loopback_members: bool,
    #[arg(long, env = "FLEETNET_ALLOW_MEMBER_PROXY")]
    pub allow_member_proxy: bool,
}

impl TrustFlags {
    fn policy(&self) -> crate::fleet::TrustPolicy {
        crate::fleet::TrustPolicy {
            allow_exec: self.allow_member_exec_plugins,
            allow_insecure_tls: self.allow_insecure_member_tls,
            allow_plain_http_loopback: self.allow_plain_http_loopback_members,
            allow_proxy: self.allow_member_proxy,
        }
    }
}

/// What the drain did: per member (hub and member side together), and in the release namespace.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub members: BTreeMap<String, Tally>,
    pub release: Tally,
}

impl Summary {
    /// Every error, each naming its member (or `release`) and object.
    pub fn errors(&self) -> Vec<String> {
        let members = self
            .members
            .iter()
            .flat_map(|(m, t)| t.errors.iter().map(move |e| format!("member {m}: {e}")));
        let release = self.release.errors.iter().map(|e| format!("release: {e}"));
        members.chain(release).collect()
    }

    /// One line per member and one for the release.
    pub fn table(&self) -> String {
        let line = |who: &str, t: &Tally| {
            format!(
                "{who}: removed {} finalizers, deleted {} objects, cleared {} fields, {} errors\n",
                t.finalizers,
                t.deleted,
                t.cleared,
                t.errors.len()
            )
        };
        let mut out: String = self
            .members
            .iter()
            .map(|(m, t)| line(&format!("member {m}"), t))
            .collect();
        out.push_str(&line("release", &self.release));
        for e in self.errors() {
            out.push_str(&format!("error: {e}\n"));
        }
        out
    }
}

/// Runs `uninstall`: drains, prints the summary; `Err` when anything is left.
pub async fn run(args: &Args) -> Result<(), String> {
    let hub = crate::status::cli::hub(args.hub_kubeconfig.as_deref()).await?;
    let summary = drain(&hub, args).await?;
    let out = match args.output {
        crate::status::cli::Output::Json => {
            serde_json::to_string_pretty(&summary).map_err(|e| format!("json: {e}"))?
        }
        crate::status::cli::Output::Text => summary.table(),
    };
    println!("{out}");
    match summary.errors().len() {
        0 => Ok(()),
        n => Err(format!(
            "{n} errors: the drain is not complete (run it again once they are fixed)"
        )),
    }
}

/// The drain itself, through `hub`: refused while a replica runs.
pub async fn drain(hub: &kube::Client, args: &Args) -> Result<Summary, String> {
    let namespace = crate::config::release_namespace(args.leader_election_namespace.clone());
    let id = args.leader_election_id.as_str();
    fence::wait_stopped(hub, &namespace, id, Duration::from_secs(args.wait_seconds)).await?;
    let secrets_ns = args
        .member_secrets_namespace
        .clone()
        .unwrap_or_else(|| namespace.clone());
    let hub_namespaces = configured_hub_namespaces(args.member_config.as_deref())?;
    let sources = members::Sources {
        dir: args.kubeconfig_dir.as_deref(),
        member_secrets: args.member_secrets.then_some(secrets_ns.as_str()),
        kubeconfig_secrets: &args.kubeconfig_secrets,
        namespace: &namespace,
        id,
        prefix: &args.hub_namespace_prefix,
        hub_namespaces: &hub_namespaces,
    };
    let targets = members::targets(hub, &sources).await?;
    let trust = args.trust.policy();
    let fsn = args.fleet_system_namespace.as_str();
    let members: BTreeMap<String, Tally> = futures::stream::iter(targets)
        .map(|(name, target)| async move {
            let tally = tokio::time::timeout(PER_MEMBER, member(hub, &name, target, trust, fsn))
                .await
                .unwrap_or_else(|_| Tally {
                    errors: vec![format!("not drained within {PER_MEMBER:?}")],
                    ..Default::default()
                });
            (name, tally)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    // A replica started meanwhile would put finalizers back: its Leases stay, and it is named.
    let mut release = Tally::default();
    match fence::ensure_stopped(hub, &namespace, id).await {
        Ok(()) => release = drain::apply(hub, &rules::process_rules(&namespace, id)).await,
        Err(e) => release.errors.push(e),
    }
    if args.delete_crds && release.errors.is_empty() {
        delete_status_crd(hub, &mut release).await;
    }
    Ok(Summary { members, release })
}

/// The `hubNamespace` of each member that sets one in the `--member-config` file; an unreadable
/// file stops the drain (guessing `<prefix><member>` would drain the wrong namespace).
fn configured_hub_namespaces(
    path: Option<&std::path::Path>,
) -> Result<BTreeMap<String, String>, String> {
    let Some(path) = path else {
        return Ok(BTreeMap::new());
    };
    let file = crate::fleet::MemberConfigFile::load(path)?;
    Ok(file
        .members
        .into_iter()
        .filter_map(|(name, settings)| Some((name, settings.hub_namespace?)))
        .collect())
}

/// One member: its hub namespace, then the member itself.
async fn member(
    hub: &kube::Client,
    name: &str,
    target: members::Target,
    trust: crate::fleet::TrustPolicy,
    fleet_system_namespace: &str,
) -> Tally {
    let mut tally = match &target.hub_namespace {
        Ok(ns) => drain::apply(hub, &rules::hub_rules(ns)).await,
        Err(e) => Tally {
            errors: vec![format!("hub side not drained: {e}")],
            ..Default::default()
        },
    };
    let client = match target.kubeconfig {
        Ok((kubeconfig, origin)) => crate::fleet::member_client(
            name,
            &origin,
            &kubeconfig,
            trust,
            &crate::client::Limits::default(),
            Arc::default(),
            crate::client::Fence::open(),
        )
        .await
        .map(|m| m.clients.client)
        .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match client {
        Ok(client) => {
            tally.add(drain::apply(&client, &rules::member_rules(fleet_system_namespace)).await)
        }
        Err(e) => tally.errors.push(format!("member side not drained: {e}")),
    }
    tally
}

/// `--delete-crds`: the MemberStatus CRD, once no MemberStatus is left anywhere (another
/// release of the hub may still publish some).
async fn delete_status_crd(hub: &kube::Client, tally: &mut Tally) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, DynamicObject, ListParams};
    let statuses: Api<DynamicObject> = Api::all_with(hub.clone(), &crate::status::resource());
    match statuses.list(&ListParams::default().limit(1)).await {
        Ok(l) if !l.items.is_empty() => {
            tally.errors.push(format!(
                "CRD {STATUS_CRD} kept: MemberStatus objects remain"
            ));
            return;
        }
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return,
        Err(e) => {
            tally.errors.push(format!("CRD {STATUS_CRD}: {e}"));
            return;
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    match crds.delete(STATUS_CRD, &Default::default()).await {
        Ok(_) => tally.deleted += 1,
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tally.errors.push(format!("CRD {STATUS_CRD}: {e}")),
    }
}
