//! The trait a job implements, and what a member gives every job it runs.

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::observer::ReconcileObserver;
use super::views::{Synced, WatchHealth};

/// One job: what it watches, the pure decision, the act, for every member it runs for. It is
/// listed once in the registry (`crate::jobs`), which `--controllers` reads.
///
/// `S` is what the house's jobs share beyond the kit (a watch several jobs read, the settings
/// of each job): the registry names it, the kit does not look inside.
pub trait Job<S>: Send + Sync {
    /// Its name, as `--controllers` spells it.
    fn name(&self) -> &'static str;

    /// Builds the job for one member: the future that runs it until `shutdown` is cancelled
    /// (in-flight reconciles finish first), and the handle that tells when its watches synced.
    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running;
}

/// A job started for one member.
pub struct Running {
    /// Runs the job until its shutdown.
    pub run: BoxFuture<'static, ()>,
    /// Resolves once its watches have listed.
    pub synced: Synced,
}

impl Running {
    /// A job that runs `run` until its shutdown, its watches synced as `synced` tells.
    pub fn new(run: impl Future<Output = ()> + Send + 'static, synced: Synced) -> Self {
        Self {
            run: run.boxed(),
            synced,
        }
    }

    /// A job that does nothing but wait for its `shutdown` (another job of the member runs
    /// its work already); its watches count as synced.
    pub fn idle(shutdown: CancellationToken) -> Self {
        Self::new(shutdown.cancelled_owned(), Synced::default())
    }
}

/// What a member gives every job it runs.
pub struct MemberInputs<S> {
    /// The member's name, also its cluster ID in what the jobs write to the hub.
    pub member: String,
    /// The member's namespace in the hub: the only one its jobs write in.
    pub hub_namespace: String,
    pub member_client: kube::Client,
    /// Events go through this one (its own budget), so they never delay a job's writes.
    pub events_client: kube::Client,
    /// The member's view of the hub client; only ever used inside `hub_namespace`.
    pub hub_client: kube::Client,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub claim: crate::ownership::Claim,
    pub observer: Arc<dyn ReconcileObserver>,
    /// Reporting instance for Events (pod name).
    pub instance: String,
    /// How many of a job's reconciles of the member run at once (0: unbounded).
    pub concurrency: u16,
    /// What the jobs share beyond the kit, and the settings of each.
    pub shared: S,
}

impl<S> MemberInputs<S> {
    /// The member's objects of kind `K` in the hub (its hub namespace).
    pub fn hub_api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        kube::Api::namespaced(self.hub_client.clone(), &self.hub_namespace)
    }

    /// The health of the job `job`'s views of this member, told to the observer.
    pub(crate) fn health(&self, job: &'static str) -> Arc<WatchHealth> {
        Arc::new(WatchHealth::new(&self.member, job, self.observer.clone()))
    }
}
