//! Leader election on one Lease in the hub ([`super::lease`]'s state machine): every replica
//! keeps its watches warm; only the holder writes.
//!
//! - A renew attempt is bounded by what is left of the hold.
//! - The hold is a local deadline ([`lease::hold_after`]): the write fence
//!   ([`super::Fence`]) closes at that instant by the clock alone, before anyone else
//!   may take the lease.
//! - Lease requests go through their own client and budget, never behind members' writes.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fence::Hold;
use super::lease::{self, LeaseConfig, Observed, Record, Written};

/// Runs the election until `shutdown`. `hold` carries the write fence's deadline, which every
/// [`super::Claim`] reads too (for what only needs to know: re-list on gaining it). On
/// shutdown a held lease is released so a standby takes over without waiting it out.
pub async fn run(
    api: Api<Lease>,
    cfg: LeaseConfig,
    hold: watch::Sender<Hold>,
    shutdown: CancellationToken,
) {
    let mut observed: Option<Observed> = None;
    let mut leading = false;
    loop {
        let start = Instant::now();
        let budget = lease::attempt_budget(*hold.borrow(), start, &cfg);
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = tokio::time::timeout(budget, acquire_or_renew(&api, &cfg, &mut observed)) => r,
        };
        match attempt {
            Ok(Ok(true)) => {
                hold.send_replace(lease::hold_after(start, &cfg));
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
        if valid != leading {
            tracing::info!(lease = %cfg.name, identity = %cfg.identity, leading = valid, "leadership changed");
            leading = valid;
        }
        // Wake at the next retry, or sooner when the hold runs out (the fence closes by the
        // clock anyway; this marks the hold given up and logs the change).
        let wake = match *hold.borrow() {
            Hold::Until(t) => (Instant::now() + cfg.retry_period).min(t),
            _ => Instant::now() + cfg.retry_period,
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
    // The fence closes before the lease is given up.
    hold.send_replace(Hold::Never);
    if leading {
        release(&api, &cfg).await;
    }
}

/// Gives the lease up (holder cleared), within a renew deadline.
async fn release(api: &Api<Lease>, cfg: &LeaseConfig) {
    let release = async {
        let current = api.get_opt(&cfg.name).await?;
        let observed = current.as_ref().map(|l| {
            Observed::update(
                None,
                Record::of(&l.spec.clone().unwrap_or_default()),
                Instant::now(),
            )
        });
        let step = lease::step(observed.as_ref(), &cfg.identity, false, Instant::now());
        lease::write(
            api,
            cfg,
            &cfg.name,
            &BTreeMap::new(),
            step,
            current.as_ref(),
        )
        .await
    };
    match tokio::time::timeout(cfg.renew_deadline, release).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(lease = %cfg.name, error = %e, "could not release the lease")
        }
        Err(_) => {
            tracing::warn!(lease = %cfg.name, "releasing the lease did not answer in time")
        }
    }
}

/// Reads the lease, then takes or renews it when [`lease::step`] says so; whether it is held.
async fn acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let current = api.get_opt(&cfg.name).await?;
    let now = Instant::now();
    *observed = current.as_ref().map(|l| {
        Observed::update(
            observed.take(),
            Record::of(&l.spec.clone().unwrap_or_default()),
            now,
        )
    });
    let step = lease::step(observed.as_ref(), &cfg.identity, true, now);
    let no_labels = BTreeMap::new();
    let written = lease::write(api, cfg, &cfg.name, &no_labels, step, current.as_ref()).await?;
    Ok(matches!(written, Written::Done(_)))
}
