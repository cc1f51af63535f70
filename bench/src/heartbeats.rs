//! The members' InternalMemberClusters in the benches (issue #44): created as fleet's hub
//! creates them (`spec.state`, `spec.heartbeatPeriodSeconds`, nothing in the status), and a
//! watch of the heartbeats the binary writes into them, so a quiet window can say how far apart
//! a member's heartbeats are, not only how many status writes the hub counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fleetnet_hub::api::{
    CLUSTER_STATE_JOIN, InternalMemberCluster, MULTI_CLUSTER_SERVICE_AGENT,
    SERVICE_EXPORT_IMPORT_AGENT,
};
use futures::StreamExt as _;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::Serialize;

/// The networking agents' entries the binary writes (`--agent-types`' default: both).
pub const AGENTS: [&str; 2] = [MULTI_CLUSTER_SERVICE_AGENT, SERVICE_EXPORT_IMPORT_AGENT];

/// Member `name`'s InternalMemberCluster in `namespace`, as fleet's hub creates it: `Join`,
/// every `period` seconds.
pub fn imc_of(namespace: &str, name: &str, period: i32) -> anyhow::Result<InternalMemberCluster> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1",
        "kind": "InternalMemberCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"state": CLUSTER_STATE_JOIN, "heartbeatPeriodSeconds": period},
    }))?)
}

/// Creates the InternalMemberCluster of each (hub namespace, member name), 16 at a time.
pub async fn create_imcs(
    hub: &kube::Client,
    members: impl Iterator<Item = (String, String)>,
    period: i32,
) -> anyhow::Result<()> {
    futures::stream::iter(members)
        .map(|(ns, name)| async move {
            let api: Api<InternalMemberCluster> = Api::namespaced(hub.clone(), &ns);
            api.create(&PostParams::default(), &imc_of(&ns, &name, period)?)
                .await?;
            anyhow::Ok(())
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// The newest heartbeat of the networking agents' entries (seconds since the epoch).
fn newest_heartbeat(imc: &InternalMemberCluster) -> Option<i64> {
    AGENTS
        .iter()
        .filter_map(|a| imc.agent_status(a)?.last_received_heartbeat.as_ref())
        .map(|t| t.0.as_second())
        .max()
}

/// Per InternalMemberCluster (namespace/name): each new heartbeat seen, with when it was seen.
#[derive(Default)]
pub struct Beats {
    seen: HashMap<String, Vec<(Instant, i64)>>,
}

impl Beats {
    fn apply(&mut self, imc: &InternalMemberCluster) {
        let Some(beat) = newest_heartbeat(imc) else {
            return;
        };
        let key = format!(
            "{}/{}",
            imc.metadata.namespace.as_deref().unwrap_or_default(),
            imc.metadata.name.as_deref().unwrap_or_default()
        );
        let beats = self.seen.entry(key).or_default();
        if beats.last().is_none_or(|(_, last)| *last != beat) {
            beats.push((Instant::now(), beat));
        }
    }

    /// New heartbeats seen within `from..=to`, over every member.
    pub fn seen_in(&self, from: Instant, to: Instant) -> usize {
        self.seen
            .values()
            .flatten()
            .filter(|(at, _)| (from..=to).contains(at))
            .count()
    }

    /// The intervals (s) between consecutive heartbeats of one member both seen within
    /// `from..=to`, over every member: the steady state only (an interval begun in the cold
    /// start spans its hand-offs and engagements).
    pub fn intervals(&self, from: Instant, to: Instant) -> Vec<f64> {
        let within = move |at: &Instant| (from..=to).contains(at);
        self.seen
            .values()
            .flat_map(|beats| {
                beats.windows(2).filter_map(move |w| {
                    let (seen_before, before) = w[0];
                    let (seen, beat) = w[1];
                    (within(&seen_before) && within(&seen)).then_some((beat - before) as f64)
                })
            })
            .collect()
    }
}

/// A watch of every InternalMemberCluster on the hub, feeding [`Beats`]; stops when dropped.
pub struct BeatWatch {
    pub beats: Arc<Mutex<Beats>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for BeatWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl BeatWatch {
    pub fn start(hub: &kube::Client) -> Self {
        let beats = Arc::new(Mutex::new(Beats::default()));
        let api: Api<InternalMemberCluster> = Api::all(hub.clone());
        let b = beats.clone();
        let task = tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(imc) => b.lock().unwrap_or_else(|p| p.into_inner()).apply(&imc),
                    Err(e) => eprintln!("[bench] InternalMemberCluster watch: {e}"),
                }
            }
        });
        Self { beats, task }
    }

    /// [`Beats::seen_in`] now.
    pub fn seen_in(&self, from: Instant, to: Instant) -> usize {
        self.beats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seen_in(from, to)
    }

    /// [`Beats::intervals`] now.
    pub fn intervals(&self, from: Instant, to: Instant) -> Vec<f64> {
        self.beats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .intervals(from, to)
    }
}

/// Heartbeat intervals in units of the period: how many, mean, least, most.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Intervals {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Intervals {
    pub fn of(intervals_s: &[f64], period_s: f64) -> Self {
        let period = period_s.max(1e-9);
        let ratios = intervals_s.iter().map(|s| s / period);
        Self {
            count: intervals_s.len(),
            mean: ratios.clone().sum::<f64>() / intervals_s.len().max(1) as f64,
            min: ratios.clone().fold(f64::INFINITY, f64::min),
            max: ratios.fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn imc(ns: &str, beat: Option<&str>) -> InternalMemberCluster {
        let mut o = imc_of(ns, "m01", 60).expect("an IMC");
        if let Some(beat) = beat {
            o.status = Some(
                serde_json::from_value(serde_json::json!({"agentStatus": [
                    {"type": MULTI_CLUSTER_SERVICE_AGENT, "lastReceivedHeartbeat": beat},
                    {"type": SERVICE_EXPORT_IMPORT_AGENT, "lastReceivedHeartbeat": beat},
                    {"type": "MemberAgent", "lastReceivedHeartbeat": "2030-01-01T00:00:00Z"},
                ]}))
                .expect("a status"),
            );
        }
        o
    }

    #[test]
    fn intervals_are_between_new_heartbeats_of_one_member_seen_in_the_window() {
        let mut beats = Beats::default();
        let t0 = Instant::now();
        beats.apply(&imc("a", None));
        beats.apply(&imc("a", Some("2026-12-07T00:00:00Z")));
        // The same heartbeat again (another field changed): no new beat.
        beats.apply(&imc("a", Some("2026-12-07T00:00:00Z")));
        beats.apply(&imc("a", Some("2026-12-07T00:01:00Z")));
        beats.apply(&imc("b", Some("2026-12-07T00:00:30Z")));
        beats.apply(&imc("b", Some("2026-12-07T00:01:29Z")));
        let t1 = Instant::now();
        let mut got = beats.intervals(t0, t1);
        got.sort_by(f64::total_cmp);
        assert_eq!(got, vec![59.0, 60.0]);
        assert_eq!(beats.seen_in(t0, t1), 4);
        assert!(
            beats
                .intervals(t1 + Duration::from_secs(1), t1 + Duration::from_secs(2))
                .is_empty()
        );
        // Only the later beat of each pair in the window: no interval.
        let b_last = beats.seen["b/m01"][1].0;
        assert!(beats.intervals(b_last, t1).is_empty());
        let i = Intervals::of(&got, 60.0);
        assert_eq!((i.count, i.min, i.max), (2, 59.0 / 60.0, 1.0));
        assert!((i.mean - 119.0 / 120.0).abs() < 1e-9);
    }
}
