//! Leader election on a `coordination.k8s.io/v1` Lease in the hub, with client-go's semantics:
//! every replica keeps its watches warm; only the holder writes.
//!
//! - Expiry is judged by the local time at which this replica last saw the lease record
//!   change, never by comparing another host's `renewTime` with the local clock.
//! - A renew attempt is bounded by what is left of the renew deadline.
//! - The hold is a local deadline (start of the last successful renew + renew deadline, which is
//!   shorter than the lease duration): the write fence ([`crate::client::Fence`]) closes at that
//!   instant by the clock alone, before anyone else may take the lease.
//! - Lease requests go through their own client and budget, never behind members' writes.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Hold;

/// Lease timing, as client-go's defaults.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (pod name + a random suffix).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// The parts of a lease record whose change proves its holder alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) holder: String,
    pub(super) renew_time: Option<String>,
    pub(super) acquire_time: Option<String>,
    pub(super) transitions: i32,
    pub(super) duration_secs: i32,
}

impl Record {
    pub(super) fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions.unwrap_or(0),
            duration_secs: spec.lease_duration_seconds.unwrap_or(0),
        }
    }
}

/// What this replica saw of the lease and when (its own monotonic clock).
#[derive(Debug, Clone)]
pub(super) struct Observed {
    pub(super) record: Record,
    pub(super) at: Instant,
}

/// Whether `identity` may write the lease now: it holds it, nobody does, or the record has
/// not changed for a whole lease duration since this replica first saw it that way.
fn may_take(observed: &Observed, identity: &str, now: Instant) -> bool {
    let r = &observed.record;
    let duration = Duration::from_secs(u64::try_from(r.duration_secs).unwrap_or(0));
    r.holder == identity || r.holder.is_empty() || now >= observed.at + duration
}

/// Runs the election until `shutdown`. `hold` carries the write fence's deadline; `leader`
/// follows whether the hold is valid (for what only needs to know: re-list on gaining it).
/// On shutdown a held lease is released so a standby takes over without waiting it out.
pub async fn run(
    api: Api<Lease>,
    cfg: LeaseConfig,
    leader: watch::Sender<bool>,
    hold: watch::Sender<Hold>,
    shutdown: CancellationToken,
) {
    let mut observed: Option<Observed> = None;
    loop {
        let start = Instant::now();
        let held_until = match *hold.borrow() {
            Hold::Until(t) if t > start => Some(t),
            _ => None,
        };
        // A holder may spend only what is left of its renew deadline; a candidate, a whole one.
        let budget = held_until.map_or(cfg.renew_deadline, |t| t - start);
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = tokio::time::timeout(budget, try_acquire_or_renew(&api, &cfg, &mut observed)) => r,
        };
        match attempt {
            Ok(Ok(true)) => {
                hold.send_replace(Hold::Until(start + cfg.renew_deadline));
            }
            Ok(Ok(false)) => {
                hold.send_replace(Hold::Never);
            }
            Ok(Err(e)) => tracing::warn!(lease = %cfg.name, error = %e, "lease update failed"),
            Err(_) => {
                tracing::warn!(lease = %cfg.name, budget = ?budget, "lease update did not answer in time")
            }
        }
        let valid = hold.borrow().valid_at(Instant::now());
        if !valid && !matches!(*hold.borrow(), Hold::Never) {
            hold.send_replace(Hold::Never);
        }
        if valid != *leader.borrow() {
            tracing::info!(lease = %cfg.name, identity = %cfg.identity, leading = valid, "leadership changed");
            leader.send_replace(valid);
        }
        // Wake at the next retry, or sooner when the hold runs out (the fence closes by the
        // clock anyway; this keeps `leader` honest too).
        let wake = match *hold.borrow() {
            Hold::Until(t) => (Instant::now() + cfg.retry_period).min(t),
            _ => Instant::now() + cfg.retry_period,
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
    let was_leading = leader.send_replace(false);
    hold.send_replace(Hold::Never);
    if was_leading
        && let Err(e) = tokio::time::timeout(cfg.renew_deadline, release(&api, &cfg))
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
    {
        tracing::warn!(lease = %cfg.name, error = %e, "could not release the lease");
    }
}

pub(super) async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(
            i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(i32::MAX),
        ),
        acquire_time: acquired.or(Some(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(spec(0, None)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let current = lease.spec.clone().unwrap_or_default();
    let record = Record::of(&current);
    let seen_now = Instant::now();
    let observation = match observed.take() {
        Some(o) if o.record == record => o,
        _ => Observed {
            record,
            at: seen_now,
        },
    };
    let take = may_take(&observation, &cfg.identity, seen_now);
    let mine = observation.record.holder == cfg.identity;
    *observed = Some(observation);
    if !take {
        return Ok(false);
    }
    let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!mine);
    let acquired = if mine {
        current.acquire_time.clone()
    } else {
        None
    };
    lease.spec = Some(spec(transitions, acquired));
    // `replace` carries the resourceVersion read: two candidates cannot both win.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

pub(super) async fn release(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    api.replace(&cfg.name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(holder: &str, secs: i32, at: Instant) -> Observed {
        Observed {
            record: Record {
                holder: holder.into(),
                renew_time: Some("2026-12-03T00:00:00Z".into()),
                acquire_time: None,
                transitions: 0,
                duration_secs: secs,
            },
            at,
        }
    }

    #[test]
    fn expiry_is_judged_by_local_observation_time_only() {
        let t0 = Instant::now();
        let o = observed("other", 15, t0);
        assert!(!may_take(&o, "me", t0), "fresh record of another holder");
        assert!(!may_take(&o, "me", t0 + Duration::from_secs(14)));
        assert!(may_take(&o, "me", t0 + Duration::from_secs(15)));
        // The renewTime in the record plays no part: a skewed holder clock changes nothing.
        let mut skewed = o.clone();
        skewed.record.renew_time = Some("1999-01-01T00:00:00Z".into());
        assert!(!may_take(&skewed, "me", t0 + Duration::from_secs(1)));
        assert!(
            may_take(&observed("me", 15, t0), "me", t0),
            "own lease: renew"
        );
        assert!(may_take(&observed("", 1, t0), "me", t0), "released");
    }
}
