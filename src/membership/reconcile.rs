//! One reconcile of the member's InternalMemberCluster: observe (the view, or our own write
//! while the view is behind it, or a live read after a 409) → [`decide`] → act (probe the
//! member, write the status; on leave, clean up first); how failures are requeued.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::act;
use super::context::Context;
use super::decide::{Cleanup, Observation, Outcome, Plan, decide, period};
use super::error::Error;
use crate::api::InternalMemberCluster;
use crate::controller::runner::Action;

/// How soon a leave looks again at what it deleted and is not gone yet (the reference polls).
const LEAVE_POLL: Duration = Duration::from_secs(1);

/// How many times a leave that makes no progress looks again each [`LEAVE_POLL`] before it
/// backs off (as the reference's wait gives up and its controller backs off): an object whose
/// finalizer nobody removes costs the member two lists per 5 minutes, not per second. A pass
/// that finds fewer objects than the one before starts the count again: a large leave draining
/// at the member's request budget (100 exports take longer than 15 s) never backs off.
const LEAVE_POLLS: u32 = 15;

/// When a leave that has waited `waits` times in a row looks again.
fn leave_poll(waits: u32) -> Duration {
    match waits.checked_sub(LEAVE_POLLS) {
        None | Some(0) => LEAVE_POLL,
        Some(over) => crate::controller::backoff(over, rand::random::<f64>()).max(LEAVE_POLL),
    }
}

/// How soon a member whose API server did not answer is probed again (at most: its heartbeat
/// period when shorter), so its heartbeat resumes soon after it answers again.
const UNREACHABLE_RETRY: Duration = Duration::from_secs(5);

/// Reconciles one InternalMemberCluster of the view: one trace per call, a root span
/// `reconcile_internalmembercluster`.
pub(super) async fn reconcile(
    imc: Arc<InternalMemberCluster>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = imc.name_any();
    let span = crate::controller::reconcile_span!(
        "reconcile_internalmembercluster", %ctx.member, %ctx.hub_namespace,
        fleet.internalmembercluster.name = %name, requeue
    );
    let key = ObjectRef::new(&name).within(&ctx.hub_namespace);
    let work = observe_decide_act(&ctx, imc);
    let observer = ctx.observer.as_ref();
    crate::controller::reported(span, observer, &ctx.member, &ctx.failures, &key, work).await
}

async fn observe_decide_act(
    ctx: &Context,
    viewed: Arc<InternalMemberCluster>,
) -> Result<(Outcome, Action), Error> {
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        return Ok((Outcome::Skipped, Action::await_change()));
    }
    let name = viewed.name_any();
    let rv = viewed.metadata.resource_version.clone();
    let mut imc = ctx.own.over(&name, rv.as_deref()).unwrap_or(viewed);
    let mut rereads = 0;
    loop {
        let result = match plan(ctx, &imc) {
            Plan::Invalid => {
                tracing::error!(state = %imc.spec.state, "cluster is of an invalid state");
                return Ok((Outcome::InvalidState, Action::await_change()));
            }
            Plan::Join {
                status,
                next,
                others,
            } => join(ctx, &imc, status, next, &others).await,
            Plan::Leave { cleanup, status } => {
                for step in cleanup {
                    let left = act::clean(ctx, step).await?;
                    if left > 0 {
                        let waits = waited(ctx, &name, step, left);
                        return Ok((Outcome::Leaving, Action::requeue(leave_poll(waits))));
                    }
                }
                ctx.waiting.clear(&name);
                ctx.left.lock().remove(&name);
                match status {
                    None => Ok((Outcome::Gone, Action::await_change())),
                    Some(status) => act::write_status(ctx, &imc, status)
                        .await
                        .map(|_| (Outcome::Left, Action::await_change())),
                }
            }
        };
        match result {
            Err(e) if e.stale_view() && rereads < crate::controller::REREADS => {
                rereads += 1;
                tracing::debug!(error = %e, "changed since read; reading live");
                match act::read_live(ctx, &name).await? {
                    Some(live) => imc = Arc::new(live),
                    None => return Ok((Outcome::Gone, Action::await_change())),
                }
            }
            result => return result,
        }
    }
}

/// Counts one more wait of the leave of `name`, whose `step` found `left` objects not gone:
/// the count starts again when the pass before was of another step or found more.
fn waited(ctx: &Context, name: &str, step: Cleanup, left: usize) -> u32 {
    let before = ctx.left.lock().insert(name.to_string(), (step, left));
    if progressed(before, (step, left)) {
        ctx.waiting.clear(&name.to_string());
    }
    ctx.waiting.bump(name.to_string())
}

/// Whether a leave's pass that found `now` made progress since the pass that found `before`.
fn progressed(before: Option<(Cleanup, usize)>, now: (Cleanup, usize)) -> bool {
    before.is_none_or(|(step, left)| step != now.0 || now.1 < left)
}

/// What the decision reads about `imc` now.
fn plan(ctx: &Context, imc: &InternalMemberCluster) -> Plan {
    let ours = ctx
        .heartbeats
        .lock()
        .get(&imc.name_any())
        .cloned()
        .unwrap_or_default();
    decide(&Observation {
        imc,
        agents: ctx.agents,
        now: Timestamp::now(),
        jitter: rand::random::<f64>(),
        ours: &ours,
    })
}

/// `Join`: reports another writer, then (when the decision writes) probes the member and
/// writes the heartbeat.
async fn join(
    ctx: &Context,
    imc: &InternalMemberCluster,
    status: Option<crate::api::InternalMemberClusterStatus>,
    next: Duration,
    others: &[&'static str],
) -> Result<(Outcome, Action), Error> {
    if !others.is_empty() {
        tracing::warn!(
            member = %ctx.member,
            agent_types = ?others,
            "another writer heartbeats for this member's networking agents (is the member's \
             fleet-networking agent still running?); its entries are left as it writes them"
        );
    }
    let outcome = |wrote| match (others.is_empty(), wrote) {
        (false, _) => Outcome::OtherWriter,
        (true, true) => Outcome::Heartbeat,
        (true, false) => Outcome::Joined,
    };
    let Some(status) = status else {
        return Ok((outcome(false), Action::requeue(next)));
    };
    act::probe(ctx, imc).await?;
    act::write_status(ctx, imc, status).await?;
    Ok((outcome(true), Action::requeue(next)))
}

/// Requeues a failed reconcile: a member that did not answer is probed again soon (its
/// heartbeat resumes as soon as it answers); anything else after the kit's backoff, but never
/// later than a heartbeat period (a hub back after an outage gets the heartbeat within one),
/// nor sooner than a server asked.
pub(super) fn error_policy(
    imc: Arc<InternalMemberCluster>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let period = period(&imc);
    if let Error::Unreachable { .. } = error {
        return Action::requeue(UNREACHABLE_RETRY.min(period));
    }
    let key = ObjectRef::new(&imc.name_any()).within(&ctx.hub_namespace);
    if crate::ownership::refused(error) {
        return crate::controller::failed(error, &ctx.failures, key);
    }
    let failures = ctx.failures.bump(key);
    Action::requeue(retry_delay(failures, rand::random::<f64>(), period, error))
}

/// The kit's backoff after `failures` in a row, at most `period`, at least what the server
/// asked for (capped as the kit caps it).
fn retry_delay(failures: u32, jitter: f64, period: Duration, error: &Error) -> Duration {
    let asked = crate::controller::Failure::retry_after(error)
        .unwrap_or_default()
        .min(crate::controller::MAX_BACKOFF);
    crate::controller::backoff(failures, jitter)
        .min(period)
        .max(asked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leave_that_drains_is_progress_and_one_stuck_is_not() {
        use Cleanup::{MultiClusterServices as Mcs, ServiceExports as Ses};
        assert!(progressed(None, (Ses, 100)));
        assert!(progressed(Some((Ses, 100)), (Ses, 99)));
        assert!(progressed(Some((Mcs, 1)), (Ses, 100)));
        assert!(!progressed(Some((Ses, 7)), (Ses, 7)));
        assert!(!progressed(Some((Ses, 7)), (Ses, 8)));
    }

    #[test]
    fn a_leave_polls_each_second_then_backs_off_to_five_minutes() {
        assert_eq!(leave_poll(1), LEAVE_POLL);
        assert_eq!(leave_poll(LEAVE_POLLS), LEAVE_POLL);
        assert!(leave_poll(LEAVE_POLLS + 4) >= Duration::from_secs(4));
        assert!(leave_poll(LEAVE_POLLS + 30) <= crate::controller::MAX_BACKOFF);
    }

    #[test]
    fn a_failed_heartbeat_is_retried_within_a_period_but_not_before_the_server_asked() {
        use crate::controller::reconcile_tests::refusal;
        use crate::controller::{ApiFailure, backoff};
        let failed = |retry_after| {
            Error::from(ApiFailure::of(
                "m1",
                "ns",
                "m1",
                super::super::Step::UpdateStatus,
            )(refusal(503, retry_after)))
        };
        let period = Duration::from_secs(60);
        assert_eq!(retry_delay(2, 0.5, period, &failed(0)), backoff(2, 0.5));
        assert_eq!(retry_delay(20, 0.5, period, &failed(0)), period);
        assert_eq!(
            retry_delay(1, 0.5, period, &failed(90)),
            Duration::from_secs(90)
        );
    }
}
