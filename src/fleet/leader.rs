//! Leader election on a `coordination.k8s.io/v1` Lease in the hub, client-go style: every
//! replica keeps its watches warm; only the holder writes. Losing the lease stops writes at once.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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

/// Runs the election until `shutdown`; `leader` follows whether this replica holds the lease.
/// On shutdown a held lease is released so a standby takes over without waiting it out.
pub async fn run(
    api: Api<Lease>,
    cfg: LeaseConfig,
    leader: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let mut last_renew: Option<tokio::time::Instant> = None;
    loop {
        let held = match try_acquire_or_renew(&api, &cfg).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %e, "lease update failed");
                false
            }
        };
        let now = tokio::time::Instant::now();
        if held {
            last_renew = Some(now);
        }
        // Keep leading through short API hiccups, but never past the renew deadline.
        let leading = held
            || last_renew
                .is_some_and(|t| *leader.borrow() && now.duration_since(t) < cfg.renew_deadline);
        if leading != *leader.borrow() {
            tracing::info!(lease = %cfg.name, identity = %cfg.identity, leading, "leadership changed");
            leader.send_replace(leading);
        }
        if !leading {
            last_renew = None;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(cfg.retry_period) => {}
        }
    }
    let was_leading = leader.send_replace(false);
    if was_leading && let Err(e) = release(&api, &cfg).await {
        tracing::warn!(lease = %cfg.name, error = %e, "could not release the lease");
    }
}

async fn try_acquire_or_renew(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
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
    let holder = current.holder_identity.clone().unwrap_or_default();
    let mine = holder == cfg.identity;
    let expired = current.renew_time.as_ref().is_none_or(|t| {
        let duration =
            jiff::SignedDuration::from_secs(i64::from(current.lease_duration_seconds.unwrap_or(0)));
        t.0.checked_add(duration).map_or(true, |end| end < now)
    });
    if !mine && !holder.is_empty() && !expired {
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

async fn release(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<(), kube::Error> {
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
