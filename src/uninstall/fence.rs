//! The process's fencing, respected: the drain refuses to start (and stops before the Leases
//! go) while a replica still holds one of the release's Leases — a running controller would
//! put every finalizer back. A replica stopped by SIGTERM releases its Leases; a killed one's
//! expire after their duration, and the drain can be run again then.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

use crate::ownership::shard::LEASE_LABEL;

/// The Leases of release `id` (the leader Lease, shard Leases, announcements) still held at
/// `now`, each described for the operator: name, holder, and how long it stays valid.
pub fn live_holders(leases: &[Lease], id: &str, now: Timestamp) -> Vec<String> {
    leases
        .iter()
        .filter(|l| {
            l.metadata.name.as_deref() == Some(id)
                || l.metadata.labels.as_ref().and_then(|m| m.get(LEASE_LABEL))
                    == Some(&id.to_string())
        })
        .filter_map(|l| {
            let spec = l.spec.as_ref()?;
            let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
            let renewed = spec.renew_time.as_ref().map(|t| t.0)?;
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
            let left = duration - now.duration_since(renewed).as_secs();
            (left > 0).then(|| {
                format!(
                    "Lease {} held by {holder} (valid {left}s more)",
                    l.metadata.name.as_deref().unwrap_or_default()
                )
            })
        })
        .collect()
}

/// `Ok` when no replica of release `id` holds a Lease in `namespace` now; else what holds.
pub async fn ensure_stopped(hub: &kube::Client, namespace: &str, id: &str) -> Result<(), String> {
    let api: Api<Lease> = Api::namespaced(hub.clone(), namespace);
    let leases = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("cannot list the Leases in {namespace}: {e}"))?
        .items;
    let live = live_holders(&leases, id, Timestamp::now());
    if live.is_empty() {
        return Ok(());
    }
    Err(format!(
        "a replica of {id} is still running: {}. Scale its Deployment to 0 (or `helm uninstall`) \
         and run this again once its pods are gone; a killed replica's Leases expire on their own",
        live.join("; ")
    ))
}

/// [`ensure_stopped`], asked again every second for up to `wait`.
pub async fn wait_stopped(
    hub: &kube::Client,
    namespace: &str,
    id: &str,
    wait: std::time::Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match ensure_stopped(hub, namespace, id).await {
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %e, "waiting for the replicas' Leases");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(name: &str, label: Option<&str>, holder: &str, renewed: Timestamp) -> Lease {
        let mut l = Lease::default();
        l.metadata.name = Some(name.into());
        l.metadata.labels = label.map(|v| {
            [(LEASE_LABEL.to_string(), v.to_string())]
                .into_iter()
                .collect()
        });
        l.spec = Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(15),
            ..Default::default()
        });
        l
    }

    #[test]
    fn only_the_releases_leases_held_and_unexpired_count() {
        let now: Timestamp = "2026-12-07T08:00:00Z".parse().expect("time");
        let fresh = now - jiff::SignedDuration::from_secs(5);
        let stale = now - jiff::SignedDuration::from_secs(20);
        let leases = [
            lease("hub", None, "pod-a_1", fresh),
            lease("hub-shard-3", Some("hub"), "pod-b_2", fresh),
            lease("hub-replica-x", Some("hub"), "pod-c_3", stale),
            lease("hub-shard-4", Some("hub"), "", fresh),
            lease("other", None, "pod-d_4", fresh),
            lease("other-shard-1", Some("other"), "pod-e_5", fresh),
        ];
        assert_eq!(
            live_holders(&leases, "hub", now),
            [
                "Lease hub held by pod-a_1 (valid 10s more)",
                "Lease hub-shard-3 held by pod-b_2 (valid 10s more)"
            ]
        );
        assert!(live_holders(&leases, "hub", now + jiff::SignedDuration::from_secs(15)).is_empty());
        assert!(live_holders(&[], "hub", now).is_empty());
    }
}
