//! The fleet-size benchmark's figures ([`Report`]) and how they are written out (markdown):
//! what `fleet_size` measured, apart from how it measures it.

use std::time::Duration;

use fleetnet_bench::{ChurnReport, WRITE_VERBS};
use serde::Serialize;

use crate::heartbeats::Intervals;

use crate::replicas::{p50_max, secs};

/// Ownership is settled when every name is ready on exactly one replica and no replica's set
/// of ready names has changed for this long (the replicas spread the members after the start:
/// the quiet window is to show what happens after that).
pub(crate) const SETTLE: Duration = Duration::from_secs(15);
/// After every ISE is on the hub, how long to wait at most for settled ownership before the
/// quiet window starts anyway (members that keep moving between replicas never settle; the
/// quiet window then shows their hand-offs).
pub(crate) const READY_GRACE: Duration = Duration::from_secs(120);
/// Request rates listed in the table, per apiserver kind.
const TOP: usize = 6;

/// Figures of one run; durations in seconds, memory in KiB.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub members: usize,
    pub member_servers: usize,
    pub exports_per_member: usize,
    pub ises: usize,
    pub replicas: usize,
    pub sharded: bool,
    pub hub_qps: f64,
    pub hub_burst: u32,
    pub kube_qps: f64,
    pub kube_burst: u32,
    /// Substrate start (hub + K apiservers, CRDs).
    pub substrate_s: f64,
    /// Hub namespaces, kubeconfig files, exports.
    pub setup_s: f64,
    /// Replicas start → the last of the N × E ISEs first seen on the hub.
    pub convergence_s: f64,
    /// Replicas start → every name `ready` on a replica's `/members` (polled every 0.5 s);
    /// `None` when not within [`READY_GRACE`] after the ISEs.
    pub members_ready_s: Option<f64>,
    /// The most names seen `ready` (on some replica) at once until the quiet window.
    pub members_ready_max: usize,
    /// Replicas start → the last change of the replicas' ready sets before ownership settled
    /// ([`SETTLE`]); `None` when not within [`READY_GRACE`] after the ISEs.
    pub settled_s: Option<f64>,
    /// See the module doc; 0 when within the burst.
    pub budget_bound_s: f64,
    pub bound_ratio: Option<f64>,
    /// Hand-offs from the start to the quiet window.
    pub handoffs_before_quiet: usize,
    pub handoffs_quiet: usize,
    pub replica: Vec<ReplicaFigures>,
    /// Sum of the replicas' RSS / N.
    pub rss_per_member_converged_kib: f64,
    pub rss_per_member_after_quiet_kib: f64,
    /// The binary running no member (`fleetnet-hub run` on an empty kubeconfig directory,
    /// after 3 s), when it could be read.
    pub replica_idle_kib: Option<u64>,
    /// (Sum of the replicas' RSS after the quiet window - R × idle) / N.
    pub rss_per_member_marginal_kib: Option<f64>,
    /// The substrate alone (no replica).
    pub baseline: Traffic,
    /// Replicas start → the quiet window (the cold start: where its requests went).
    pub cold: Traffic,
    pub quiet: Traffic,
    pub failover: Option<Failover>,
    /// After the quiet window, with `--churn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub churn: Option<ChurnReport>,
    /// The hub's ISE DELETEs from the replicas' start to the end (must be 0).
    pub ise_deletes: u64,
    /// With `--member-secrets`: the rotation, a member added, `status`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<crate::secrets_fleet::SecretsReport>,
    /// The membership job in the quiet window.
    pub heartbeats: Heartbeats,
}

/// The InternalMemberCluster of the hub's resource: its status writes are the heartbeats.
pub(crate) const IMC_STATUS: &str = "internalmemberclusters/status";

/// The membership job's heartbeats in the quiet window, and what else was written.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Heartbeats {
    /// `spec.heartbeatPeriodSeconds` of every InternalMemberCluster.
    pub period_s: f64,
    /// InternalMemberCluster status writes the hub counted in the quiet window.
    pub imc_status_writes: u64,
    /// `imc_status_writes / (members × window / period)`: 1.00 up to where in the window the
    /// members' beats fall (a member beats 0, 1 or 2 times in one period's window).
    pub per_member_per_period: f64,
    /// New heartbeats (both agents' entries at once) a watch saw in the window.
    pub beats_seen: usize,
    /// `imc_status_writes / beats_seen`: must be exactly 1.00 (no write without a heartbeat,
    /// no heartbeat in two writes).
    pub writes_per_beat: f64,
    /// The hub's requests/s in the quiet window less the heartbeats.
    pub hub_per_s_less_heartbeats: f64,
    /// Writes in the quiet window besides Lease PUTs and the heartbeats: (apiserver, rate).
    pub other_writes: Vec<(String, Rate)>,
    /// A member's consecutive heartbeats, seen by a watch of the InternalMemberClusters, both
    /// in the quiet window: how far apart, in periods (a window of one period has few; one of
    /// several periods shows the steady state).
    pub intervals: Intervals,
}

impl Heartbeats {
    /// The heartbeat figures of `quiet` for `members` members heartbeating every `period_s`.
    pub fn of(
        quiet: &Traffic,
        members: usize,
        period_s: f64,
        beats_seen: usize,
        intervals: Intervals,
    ) -> Self {
        let is_write = |r: &Rate| WRITE_VERBS.contains(&r.verb.as_str());
        let writes: u64 = quiet
            .hub
            .iter()
            .filter(|r| r.resource == IMC_STATUS && is_write(r))
            .map(|r| r.count)
            .sum();
        let periods = members as f64 * quiet.window_s / period_s.max(1e-9);
        let other_writes = [("hub", &quiet.hub), ("members", &quiet.members)]
            .into_iter()
            .flat_map(|(kind, rates)| {
                rates
                    .iter()
                    .filter(|r| is_write(r))
                    .filter(|r| !(r.resource == "leases" && r.verb == "PUT"))
                    .filter(move |r| !(kind == "hub" && r.resource == IMC_STATUS))
                    .map(move |r| (kind.to_string(), r.clone()))
            })
            .collect();
        Self {
            period_s,
            imc_status_writes: writes,
            per_member_per_period: writes as f64 / periods.max(1e-9),
            beats_seen,
            writes_per_beat: writes as f64 / beats_seen.max(1) as f64,
            hub_per_s_less_heartbeats: quiet.hub_per_s - writes as f64 / quiet.window_s.max(1e-9),
            other_writes,
            intervals,
        }
    }

    /// The writes besides heartbeats, counted.
    pub fn other_write_count(&self) -> u64 {
        self.other_writes.iter().map(|(_, r)| r.count).sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicaFigures {
    pub name: String,
    /// Members `ready` on its `/members` at convergence.
    pub members_ready: usize,
    pub rss_converged_kib: u64,
    pub rss_after_quiet_kib: u64,
    /// CPU seconds from its start to convergence.
    pub cpu_to_converged_s: f64,
    /// CPU seconds per second in the quiet window.
    pub cpu_per_s_quiet: f64,
    pub handoffs_quiet: usize,
    /// jemalloc's live objects and the pages it holds, after the quiet window (KiB): what of
    /// the RSS is live heap, and what the allocator keeps beside it (fragmentation, free pages).
    pub allocated_after_quiet_kib: Option<u64>,
    pub resident_after_quiet_kib: Option<u64>,
}

/// Requests the apiservers counted in a window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Traffic {
    pub window_s: f64,
    pub hub_per_s: f64,
    /// All member apiservers together.
    pub members_per_s: f64,
    /// By resource and verb, busiest first.
    pub hub: Vec<Rate>,
    pub members: Vec<Rate>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    pub resource: String,
    pub verb: String,
    pub count: u64,
    /// Of those, answered 409.
    pub conflicts: u64,
    pub per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    pub killed: String,
    /// Members it ran.
    pub orphaned: usize,
    /// Shard Leases the killed replica held (sharded replicas).
    pub shards_held: usize,
    /// Kill → every one of them held by a surviving replica (None: not within the timeout).
    pub leases_taken_s: Option<f64>,
    /// Kill → ready on a surviving replica, per orphan (that was, within the failover timeout),
    /// sorted.
    pub takeover_s: Vec<f64>,
    /// Every orphan ready elsewhere and every orphan's probe ISE seen within the timeout.
    pub complete: bool,
    pub timeout_s: f64,
    /// The orphan on whose apiserver the probe export was created, and that apiserver.
    pub probe_member: String,
    pub probe_server: String,
    /// Kill → the probe's ISE in the hub namespace of `probe_member`.
    pub probe_ise_s: f64,
    /// The same for every orphan of that apiserver (sorted; those seen within the timeout).
    pub probe_orphans_s: Vec<f64>,
    pub probe_orphans: usize,
    /// The same for the names of that apiserver whose replica lived (seen by the end, sorted).
    pub probe_others_s: Vec<f64>,
    pub probe_others: usize,
}

fn durations(secs: &[f64]) -> Vec<Duration> {
    secs.iter().map(|s| Duration::from_secs_f64(*s)).collect()
}

/// A latency in milliseconds, or `-` when there is none.
pub fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1} ms"))
}

pub(crate) fn mib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

/// The report as markdown tables.
pub fn markdown(r: &Report) -> String {
    let mut out = figures(r);
    heartbeat_rows(&mut out, r);
    churn_row(&mut out, r);
    if let Some(secrets) = &r.secrets {
        out.push_str(&crate::secrets_fleet::markdown(secrets));
    }
    failover_rows(&mut out, r);
    replica_table(&mut out, r);
    traffic_tables(&mut out, r);
    out
}

/// The run's figures: size, convergence, budget bound, memory per member, the quiet window.
fn figures(r: &Report) -> String {
    format!(
        "### Fleet size: {members} member names on {servers} apiservers, {exports} exports each ({ises} ISEs), {replicas} replica{s}{sharded}\n\n\
         | figure | value |\n|---|---|\n\
         | substrate up (hub + {servers} apiservers); setup (namespaces, kubeconfigs, exports) | {substrate} ; {setup} |\n\
         | replicas start → all {ises} ISEs on the hub | {convergence} |\n\
         | replicas start → every name ready on a replica (`/members`) | {ready} |\n\
         | replicas start → ownership settled (each name ready on exactly one replica; last change before {settle} without one) | {settled} |\n\
         | budget bound ({share} members × ({exports} creates + 1 heartbeat + 2 MemberStatus) + 5 LISTs hub requests, {qps} qps / {burst} burst per replica) ; ratio | {bound} ; {ratio} |\n\
         | RSS per member (Σ replicas / {members}): at convergence / after the quiet window | {rss0} / {rss1} |\n\
         | RSS per member less the replicas' own ((Σ − {replicas} × {idle} idle) / {members}), after the quiet window | {marginal} |\n\
         | quiet window | {window} |\n\
         | hub requests/s in the quiet window (substrate alone) | {hub:.1} ({hub0:.1}) |\n\
         | member apiserver requests/s, all {servers} (substrate alone) | {mem:.1} ({mem0:.1}) |\n\
         | hand-offs in the quiet window (before it) | {handoffs} ({handoffs0}) |\n\
         | ISE DELETEs on the hub, whole run | {deletes} |\n",
        members = r.members,
        servers = r.member_servers,
        exports = r.exports_per_member,
        ises = r.ises,
        replicas = r.replicas,
        s = if r.replicas == 1 { "" } else { "s" },
        sharded = if r.sharded { " (--shard-members)" } else { "" },
        substrate = secs(Duration::from_secs_f64(r.substrate_s)),
        setup = secs(Duration::from_secs_f64(r.setup_s)),
        convergence = secs(Duration::from_secs_f64(r.convergence_s)),
        ready = match r.members_ready_s {
            Some(t) => secs(Duration::from_secs_f64(t)),
            None => format!(
                "not within {} of the ISEs (at most {}/{} at once)",
                secs(READY_GRACE),
                r.members_ready_max,
                r.members
            ),
        },
        settle = secs(SETTLE),
        settled = match r.settled_s {
            Some(t) => secs(Duration::from_secs_f64(t)),
            None => format!("not within {} of the ISEs", secs(READY_GRACE)),
        },
        share = r.members.div_ceil(r.replicas.max(1)),
        qps = r.hub_qps,
        burst = r.hub_burst,
        bound = secs(Duration::from_secs_f64(r.budget_bound_s)),
        ratio = r
            .bound_ratio
            .map_or("- (within the burst)".into(), |x| format!("{x:.2}")),
        rss0 = mib(r.rss_per_member_converged_kib),
        rss1 = mib(r.rss_per_member_after_quiet_kib),
        idle = r.replica_idle_kib.map_or("?".into(), |k| mib(k as f64)),
        marginal = r.rss_per_member_marginal_kib.map_or("-".into(), mib),
        window = secs(Duration::from_secs_f64(r.quiet.window_s)),
        hub = r.quiet.hub_per_s,
        hub0 = r.baseline.hub_per_s,
        mem = r.quiet.members_per_s,
        mem0 = r.baseline.members_per_s,
        handoffs = r.handoffs_quiet,
        handoffs0 = r.handoffs_before_quiet,
        deletes = if r.ise_deletes == 0 {
            "0 ✓".to_string()
        } else {
            format!("{} ✗", r.ise_deletes)
        },
    )
}

/// The heartbeats of the quiet window, and the writes besides them.
fn heartbeat_rows(out: &mut String, r: &Report) {
    let h = &r.heartbeats;
    let i = &h.intervals;
    let others = if h.other_writes.is_empty() {
        "0 ✓".to_string()
    } else {
        let listed: Vec<String> = h
            .other_writes
            .iter()
            .map(|(kind, w)| format!("{kind} {} {} × {}", w.resource, w.verb, w.count))
            .collect();
        format!("{} ✗ ({})", h.other_write_count(), listed.join(", "))
    };
    *out += &format!(
        "| heartbeats in the quiet window: InternalMemberCluster status writes (period {period}) ; per member per period | {writes} ; {per:.2} |\n\
         | InternalMemberCluster status writes per new heartbeat seen (both agents' entries) | {writes} / {beats} = {per_beat:.2} {ok} |\n\
         | a member's heartbeat → its next, both in the quiet window, in periods: mean / min / max (intervals) | {mean:.3} / {min:.3} / {max:.3} ({n}) |\n\
         | hub requests/s in the quiet window less the heartbeats ; with them | {less:.1} ; {hub:.1} |\n\
         | writes in the quiet window besides heartbeats and Lease PUTs (hub and members) | {others} |\n",
        period = secs(Duration::from_secs_f64(h.period_s)),
        writes = h.imc_status_writes,
        per = h.per_member_per_period,
        beats = h.beats_seen,
        per_beat = h.writes_per_beat,
        // The window's ends are read by the scrape and the watch a moment apart: a beat at
        // an end may count on one side only.
        ok = if h.beats_seen > 0 && (h.writes_per_beat - 1.0).abs() < 0.005 {
            "✓"
        } else {
            "✗"
        },
        mean = i.mean,
        min = i.min,
        max = i.max,
        n = i.count,
        less = h.hub_per_s_less_heartbeats,
        hub = r.quiet.hub_per_s,
    );
}

/// The churn's latencies, when there was churn.
fn churn_row(out: &mut String, r: &Report) {
    if let Some(c) = &r.churn {
        *out += &format!(
            "| churn after the quiet window: {rate} Service changes/s for {duration}, each awaited in the ISE of every name of its apiserver: p50 / p99 / max ({seen} of {awaited} seen) | {p50} / {p99} / {max} |\n",
            rate = c.rate,
            duration = secs(Duration::from_secs_f64(c.duration_s)),
            seen = c.reflected,
            awaited = c.awaited,
            p50 = ms(c.quantile_ms(0.5)),
            p99 = ms(c.quantile_ms(0.99)),
            max = ms(c.quantile_ms(1.0)),
        );
    }
}

/// The failover's timings, when there was one.
fn failover_rows(out: &mut String, r: &Report) {
    if let Some(f) = &r.failover {
        *out += &format!(
            "| failover: kill -9 of {killed}, running {orphaned} members | |\n\
             | kill → every shard Lease it held ({shards}) held by a survivor | {leases} |\n\
             | kill → every orphan ready on a surviving replica, p50 / max (orphans ready elsewhere{within}) | {takeover} ({taken}/{orphaned}) |\n\
             | kill → probe export's ISE for {member} (on {server}) | {probe} |\n\
             | kill → probe ISE for the {n} orphans of {server}, p50 / max (seen) | {orphans} ({seen}/{n}) |\n\
             | kill → probe ISE for the {others} names of {server} that kept their replica, p50 / max | {control} |\n",
            killed = f.killed,
            orphaned = f.orphaned,
            shards = f.shards_held,
            leases = match f.leases_taken_s {
                Some(s) => secs(Duration::from_secs_f64(s)),
                None => "not within the timeout".to_string(),
            },
            takeover = p50_max(&durations(&f.takeover_s)),
            taken = f.takeover_s.len(),
            within = if f.complete {
                String::new()
            } else {
                format!(
                    " within {}: INCOMPLETE",
                    secs(Duration::from_secs_f64(f.timeout_s))
                )
            },
            seen = f.probe_orphans_s.len(),
            member = f.probe_member,
            server = f.probe_server,
            probe = if f.probe_ise_s.is_nan() {
                "not seen".to_string()
            } else {
                secs(Duration::from_secs_f64(f.probe_ise_s))
            },
            n = f.probe_orphans,
            orphans = p50_max(&durations(&f.probe_orphans_s)),
            others = f.probe_others,
            control = p50_max(&durations(&f.probe_others_s)),
        );
    }
}

/// One row per replica: members, memory, CPU, hand-offs.
fn replica_table(out: &mut String, r: &Report) {
    *out += "\n| replica | members ready at convergence | RSS at convergence | RSS after quiet | allocator after quiet: live / held | CPU s start → convergence | CPU s/s in quiet | hand-offs in quiet |\n|---|---|---|---|---|---|---|---|\n";
    for p in &r.replica {
        let kib = |k: Option<u64>| k.map_or("?".into(), |k| mib(k as f64));
        *out += &format!(
            "| {} | {} | {} | {} | {} / {} | {:.1} | {:.3} | {} |\n",
            p.name,
            p.members_ready,
            mib(p.rss_converged_kib as f64),
            mib(p.rss_after_quiet_kib as f64),
            kib(p.allocated_after_quiet_kib),
            kib(p.resident_after_quiet_kib),
            p.cpu_to_converged_s,
            p.cpu_per_s_quiet,
            p.handoffs_quiet
        );
    }
}

/// The busiest requests in the quiet window (against the substrate alone) and in the cold
/// start.
fn traffic_tables(out: &mut String, r: &Report) {
    *out += "\n| apiserver | resource | verb | requests/s in the quiet window | substrate alone |\n|---|---|---|---|---|\n";
    for (kind, quiet, base) in [
        ("hub", &r.quiet.hub, &r.baseline.hub),
        ("members (all)", &r.quiet.members, &r.baseline.members),
    ] {
        for q in quiet.iter().take(TOP) {
            let b = base
                .iter()
                .find(|b| b.resource == q.resource && b.verb == q.verb)
                .map_or(0.0, |b| b.per_s);
            *out += &format!(
                "| {kind} | {} | {} | {:.2} | {:.2} |\n",
                q.resource, q.verb, q.per_s, b
            );
        }
    }
    *out += &format!(
        "\n| apiserver | resource | verb | requests in the cold start (replicas start → quiet window, {}) | of which 409 |\n|---|---|---|---|---|\n",
        secs(Duration::from_secs_f64(r.cold.window_s))
    );
    for (kind, cold) in [("hub", &r.cold.hub), ("members (all)", &r.cold.members)] {
        for c in cold.iter().take(TOP) {
            *out += &format!(
                "| {kind} | {} | {} | {} | {} |\n",
                c.resource, c.verb, c.count, c.conflicts
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(resource: &str, verb: &str, count: u64) -> Rate {
        Rate {
            resource: resource.into(),
            verb: verb.into(),
            count,
            conflicts: 0,
            per_s: count as f64 / 60.0,
        }
    }

    #[test]
    fn heartbeats_are_the_imc_status_writes_and_the_rest_is_listed() {
        let quiet = Traffic {
            window_s: 60.0,
            hub_per_s: (1000.0 + 30.0 + 120.0) / 60.0,
            members_per_s: 0.0,
            hub: vec![
                rate(IMC_STATUS, "PUT", 1000),
                rate("leases", "PUT", 120),
                rate("internalserviceexports", "LIST", 30),
            ],
            members: vec![rate("events", "POST", 2), rate("/version", "GET", 1000)],
        };
        let h = Heartbeats::of(&quiet, 1000, 60.0, 1000, Intervals::default());
        assert_eq!(h.imc_status_writes, 1000);
        assert_eq!(h.per_member_per_period, 1.0);
        assert_eq!(h.writes_per_beat, 1.0);
        assert!((h.hub_per_s_less_heartbeats - 150.0 / 60.0).abs() < 1e-9);
        assert_eq!(h.other_write_count(), 2);
        assert_eq!(h.other_writes[0].0, "members");
        // A 120 s period: a 60 s window is half of one, so two writes per member per period.
        let h = Heartbeats::of(&quiet, 1000, 120.0, 1000, Intervals::default());
        assert_eq!(h.per_member_per_period, 2.0);
    }
}
