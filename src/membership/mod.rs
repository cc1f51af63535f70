//! The membership job (`internalmembercluster`), on the controller kit: fleet-networking's
//! member InternalMemberCluster controller (`pkg/controllers/member/internalmembercluster/
//! v1beta1`), run from the hub for both networking agents at once. Observe → decide (pure) →
//! act.
//!
//! `Join`: every heartbeat period (±5 %), one status write carries each networking agent's
//! entry (`Joined=True`, `AgentJoined`, the heartbeat), only after the member's API server
//! answered. `Leave`: the member's MultiClusterServices, then its ServiceExports, deleted and
//! waited for, then `Joined=False`, `AgentLeft`. The state is the object's spec: a replica that
//! takes the member over, or a restart, simply continues.

mod act;
mod context;
pub mod decide;
mod error;
mod reconcile;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

pub use decide::{NAME, Outcome};
pub use error::{Error, Step};

use crate::api::{AgentTypes, InternalMemberCluster};
use crate::controller::hub_tap::{Followed, HubTap};
use crate::controller::own_writes::OwnWrites;
use crate::controller::pace::Pace;
use crate::controller::runner::{Runner, beside};
use crate::controller::streaks::Streaks;
use crate::controller::views::{View, WatchHealth};
use crate::controller::{Job, MemberInputs, Running};
use context::Context;

/// The InternalMemberClusters of the member's hub namespace (fleet names the one there after
/// the member).
const MEMBER_CLUSTERS: View = View::hub(0, "InternalMemberClusters");

/// The membership job, as the registry lists it.
pub struct MembershipJob;

/// What the membership job needs of a member beyond the kit's inputs.
pub trait Needs {
    /// Which networking agents it reports for (`--agent-types`).
    fn agent_types(&self) -> AgentTypes;
    /// The replica's watch of the hub's InternalMemberClusters ([`hub_tap`]).
    fn hub_member_clusters(&self) -> &HubTap<InternalMemberCluster, InternalMemberCluster>;
}

/// The replica's watch of the hub's InternalMemberClusters, kept whole but for their managed
/// fields (fleet's agents' field ownership, a few KiB per member read by nobody: a status
/// update without it leaves it as it is); `read`: the job runs.
pub fn hub_tap(
    hub: &kube::Client,
    read: bool,
) -> HubTap<InternalMemberCluster, InternalMemberCluster> {
    HubTap::new(hub, crate::controller::tap::whole, read)
}

impl<S: Needs> Job<S> for MembershipJob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        let hub: Api<InternalMemberCluster> =
            Api::namespaced(inputs.hub_client.clone(), &inputs.hub_namespace);
        let health = Arc::new(WatchHealth::new(
            &inputs.member,
            NAME,
            inputs.observer.clone(),
        ));
        let synced = health.synced(None, &[MEMBER_CLUSTERS]);
        let (view, followed) = inputs
            .shared
            .hub_member_clusters()
            .subscribe(&inputs.hub_namespace);
        let pace = Arc::new(Pace::new(inputs.concurrency));
        let triggers = triggers(followed, &health);
        let triggers = pace.clone().take_from(triggers);
        let ctx = Arc::new(Context {
            member: inputs.member.clone(),
            member_client: inputs.member_client.clone(),
            hub,
            hub_namespace: inputs.hub_namespace.clone(),
            agents: inputs.shared.agent_types(),
            claim: inputs.claim.clone(),
            observer: inputs.observer.clone(),
            views: synced.clone(),
            failures: Streaks::default(),
            waiting: Streaks::default(),
            left: Default::default(),
            own: OwnWrites::default(),
            heartbeats: Default::default(),
            se_version: Default::default(),
        });
        let reconciles = Runner::over(&pace, view, ctx).paced(
            inputs.claim.clone(),
            shutdown.cancelled_owned(),
            reconcile::reconcile,
            reconcile::error_policy,
        );
        Running::new(beside(reconciles, triggers), synced)
    }
}

/// The view's events (of the replica's watch), each object it shows with a new generation handed on as a trigger: only a
/// changed spec triggers, as the reference's predicate has it (our own status writes, and the
/// other agents', come back through the watch too).
fn triggers(
    followed: Followed<InternalMemberCluster>,
    health: &Arc<WatchHealth>,
) -> BoxStream<'static, ObjectRef<InternalMemberCluster>> {
    let mut generations = HashMap::new();
    followed
        .inspect(health.inspector(MEMBER_CLUSTERS))
        .filter_map(move |event| {
            let key = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let changed = generations.insert(o.name_any(), o.metadata.generation)
                        != Some(o.metadata.generation);
                    changed.then(|| ObjectRef::new(&o.name_any()).within(&namespace_of(&o)))
                }
                Ok(watcher::Event::Delete(o)) => {
                    generations.remove(&o.name_any());
                    None
                }
                _ => None,
            };
            futures::future::ready(key)
        })
        .boxed()
}

fn namespace_of(o: &InternalMemberCluster) -> String {
    o.namespace().unwrap_or_default()
}
