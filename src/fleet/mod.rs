//! The multi-member runtime: the sources of members, the kubeconfig directory and labelled hub
//! Secrets (`sources`, `registry`), their vetting (`vet`), a
//! member admitted once as a [`Member`] value (`admission`), the loop that engages and stops
//! members to match the directory (`engagement`), one engagement per member with its
//! API-server probe (`member`) for the members this replica owns ([`crate::ownership`]), the
//! removal of a member that left with its durable record (`removal`, `--cleanup-on-remove`), typed errors (`error`), and the state the
//! health endpoints show (`state`).
//!
//! `fleet` starts and stops members; it knows nothing of ServiceExport conditions.

mod admission;
mod engagement;
mod error;
mod member;
pub mod registry;
pub(crate) mod removal;
mod settings;
pub mod sources;
pub mod state;
pub mod vet;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;

pub use crate::jobs::Controllers;
pub use admission::Member;
pub use engagement::run;
pub use error::Error;
pub use member::{MemberClient, member_client};
pub use removal::Cleanups;
pub use settings::{MemberConfig, MemberConfigFile, MemberSettings};
pub use state::{Event, FleetState, JobPhase, JobStatus, MemberStatus, Phase};
pub use vet::TrustPolicy;

use crate::client::{ClientStats, Limits};
use crate::controller::{ReconcileObserver, Reconciled};
use crate::export::PublicIpAccess;

/// The fleet's part of the process's one configuration, built only by its builder
/// (`Config::builder`, one floor up).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    pub kubeconfig_dir: PathBuf,
    /// Hub namespace of member `m` is `<prefix><m>`.
    pub namespace_prefix: String,
    /// Each member's own limiter (one per engagement, never shared).
    pub member_limits: Limits,
    /// How long a member's first sync may take before it is marked failing.
    pub member_sync_timeout: Duration,
    /// On removal: delete the member's ISEs and its ServiceExports' finalizers.
    pub cleanup_on_remove: bool,
    /// Where pending cleanups are recorded in the hub (Secrets): the release namespace, and
    /// the prefix of their names (`--leader-election-id`).
    pub records_namespace: String,
    pub records_prefix: String,
    pub traffic_manager: bool,
    /// Safety net besides the directory watch.
    pub rescan_interval: Duration,
    /// Where member Secrets are read (`--member-secrets-namespace`); `None`: members come
    /// from the kubeconfig directory alone (`--member-secrets=false`).
    pub member_secrets_namespace: Option<String>,
    /// Members from fleet's inventory (`--member-inventory`): the namespace of its
    /// ClusterProfiles (`--inventory-profile-namespace`); `None`: off.
    pub member_inventory: Option<String>,
    /// This replica's name (Events' reporting instance).
    pub instance: String,
    /// What member kubeconfigs may use beyond inline credentials.
    pub trust: TrustPolicy,
    /// Which exporters run for every member.
    pub controllers: Controllers,
    /// What each member may write to the hub (`--max-exports-per-member`, `--max-export-bytes`).
    pub quotas: crate::export::Quotas,
    /// Where a member's derived Services and imported EndpointSlices live
    /// (`--fleet-system-namespace`).
    pub fleet_system_namespace: String,
    /// Which networking agents the membership job reports for (`--agent-types`).
    pub agent_types: crate::api::AgentTypes,
    /// Per-member settings (`--member-config`), read again at every rescan.
    pub member_config: Arc<MemberConfig>,
}

/// Notified when a member engagement starts and when a member leaves (metrics series).
pub trait MemberHooks: Send + Sync + 'static {
    /// A new engagement of `member` with its client's counters.
    fn member_engaged(&self, member: &str, stats: Arc<ClientStats>);
    /// `member` left the fleet: drop everything kept about it.
    fn member_left(&self, member: &str);
}

/// Hooks that do nothing.
#[derive(Debug, Default)]
pub struct NoHooks;

impl MemberHooks for NoHooks {
    fn member_engaged(&self, _: &str, _: Arc<ClientStats>) {}
    fn member_left(&self, _: &str) {}
}

/// Per-member Azure access: the lookup for the member's subscription, its default resource
/// group and the other groups it may read.
pub trait MemberAzure: Send + Sync + 'static {
    fn for_member(&self, member: &str) -> PublicIpAccess;
    /// Changes when the member's Azure settings change: the member is then re-engaged.
    fn settings_key(&self, member: &str) -> String;
}

/// What the runtime shares with every member.
pub struct Shared {
    pub config: RuntimeConfig,
    /// One hub client (one hub limiter) for the whole fleet; members only get scoped APIs.
    pub hub_client: kube::Client,
    /// The members' views of `hub_client`, one client for all ([`crate::client::HubViews`]).
    pub hub_views: crate::client::HubViews,
    /// The replica's watches of the hub, every member's namespace in them ([`crate::hub_watches`]).
    pub hub_watches: crate::hub_watches::HubWatches,
    pub state: Arc<FleetState>,
    pub observer: Arc<dyn ReconcileObserver>,
    pub hooks: Arc<dyn MemberHooks>,
    pub azure: Option<Arc<dyn MemberAzure>>,
    /// Who writes: the fence of every member client's writes, and (sharded) the members this
    /// replica owns, each with its own fence.
    pub ownership: crate::ownership::Ownership,
    /// Removed members whose cleanup is recorded or running: they keep their shards (and
    /// their cleanup is fenced by them) until it is done.
    pub cleanups: parking_lot::Mutex<Cleanups>,
    /// Members connecting and listing at once ([`ENGAGING_AT_ONCE`]).
    pub engaging: Arc<tokio::sync::Semaphore>,
}

/// How many members connect, discover and list at once. A thousand starting together would
/// otherwise share the CPU a thousand ways (TLS handshakes, first lists), each finishing late;
/// in turns, the first are reconciling within a second. A slot is held until the member's own
/// watches have listed (not the hub's, which waits in the hub budget's line), at most
/// [`ENGAGING_SLOT`].
pub const ENGAGING_AT_ONCE: usize = 32;

/// The longest a member's first attempt holds an engaging slot: a member whose server hangs
/// does not hold up the others.
const ENGAGING_SLOT: Duration = Duration::from_secs(5);

/// The longest an attempt after failures holds one: failing members retry every 15 s at
/// most, and would otherwise keep many slots.
const RETRY_ENGAGING_SLOT: Duration = Duration::from_secs(1);

impl Shared {
    /// The cleanup records, written through `member`'s fence.
    fn records(&self, member: &str) -> Api<k8s_openapi::api::core::v1::Secret> {
        let client = crate::client::member_view(&self.hub_client, self.ownership.fence_of(member));
        Api::namespaced(client, &self.config.records_namespace)
    }

    fn observer_for(self: &Arc<Self>) -> Arc<dyn ReconcileObserver> {
        Arc::new(StateObserver {
            inner: self.observer.clone(),
            state: self.state.clone(),
        })
    }
}

/// Keeps a member's phase honest from what its controller reports.
struct StateObserver {
    inner: Arc<dyn ReconcileObserver>,
    state: Arc<FleetState>,
}

impl ReconcileObserver for StateObserver {
    fn reconcile_started(&self, member: &str) {
        self.inner.reconcile_started(member);
    }
    fn reconciled(&self, member: &str, outcome: Reconciled, took: Duration) {
        // A member recovering from a watch failure proves it with a successful reconcile.
        if !matches!(outcome, Reconciled::Failed(_)) {
            self.state.record(member, Event::Recovered(None));
        }
        self.inner.reconciled(member, outcome, took);
    }
    fn hub_write(&self, member: &str, op: &'static str) {
        self.inner.hub_write(member, op);
    }
    fn slice_write(&self, member: &str, op: &'static str) {
        self.inner.slice_write(member, op);
    }
    fn export_latency(&self, member: &str, latency: Duration) {
        self.inner.export_latency(member, latency);
    }
    fn conflict_reflected(&self, member: &str, latency: Duration) {
        self.inner.conflict_reflected(member, latency);
    }
    fn slice_import_duration(&self, origin: &str, member: &str, first: bool, took: Duration) {
        self.inner
            .slice_import_duration(origin, member, first, took);
    }
    fn watch_failed(&self, member: &str, job: &'static str, member_side: bool, error: &str) {
        self.state.job_failed(member, job, error, member_side);
        self.inner.watch_failed(member, job, member_side, error);
    }
    fn watches_recovered(&self, member: &str, job: &'static str) {
        self.state.job_ready(member, job);
        self.inner.watches_recovered(member, job);
    }
    fn other_writer(
        &self,
        member: &str,
        job: &'static str,
        object: &str,
        writer: &crate::controller::writers::OtherWriter,
    ) {
        let told = format!("{} wrote {object} at {}", writer.manager, writer.time);
        self.state.job_other_writer(member, job, told);
        self.inner.other_writer(member, job, object, writer);
    }
}

/// Whether `client`'s API server answers (`/version`) within `within`; else why not.
pub(crate) async fn answers(client: &kube::Client, within: Duration) -> Result<(), String> {
    match tokio::time::timeout(within, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}
