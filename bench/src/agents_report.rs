//! The `--agents` report: both phases' figures and the side-by-side table.

use fleetnet_bench::{ChurnReport, WRITE_VERBS};
use serde::Serialize;

use crate::fleet_size::{self, Rate, Traffic};

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub name: String,
    pub processes: usize,
    pub ises_expected: usize,
    /// Start → all ISEs on the hub; `None` when not within the timeout.
    pub convergence_s: Option<f64>,
    /// Σ VmRSS of the processes at the end of the quiet window.
    pub rss_total_kib: u64,
    pub rss_per_member_kib: f64,
    pub rss_per_process_kib: Vec<u64>,
    /// Σ CPU seconds per second of the processes over the quiet window.
    pub cpu_per_s_quiet: f64,
    /// Start → the quiet window's start, hub + members.
    pub cold_writes: u64,
    pub cold: Traffic,
    pub quiet: Traffic,
    pub quiet_writes_per_s: f64,
    /// The same without `leases` (the agents' leader election, the apiservers' own).
    pub quiet_writes_no_leases_per_s: f64,
    /// InternalMemberCluster status writes in the quiet window.
    pub heartbeat_writes: u64,
    /// … per member per heartbeat period.
    pub heartbeat_writes_per_member_period: f64,
    pub churn: Option<ChurnReport>,
    /// Hub ISE writes from the churn's start to its end (drain included).
    pub churn_ise_writes: u64,
}

/// Both phases.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub members: usize,
    pub exports: usize,
    pub heartbeat_period_s: i32,
    /// The substrate alone.
    pub baseline: Traffic,
    pub agents: Side,
    pub hub: Side,
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else {
        "-".into()
    }
}

/// One row: what, the agents' figure, fleetnet-hub's, the ratio (when it means something).
type Row = (String, String, String, String);

/// A row of two numbers shown by `show`, with their ratio.
fn numeric(what: &str, a: f64, h: f64, show: impl Fn(f64) -> String) -> Row {
    (what.to_string(), show(a), show(h), ratio(a, h))
}

fn rows(r: &Report) -> Vec<Row> {
    let (a, h) = (&r.agents, &r.hub);
    let mib = |k: f64| format!("{:.1} MiB", k / 1024.0);
    let f2 = |v: f64| format!("{v:.2}");
    let requests = |s: &Side| s.quiet.hub_per_s + s.quiet.members_per_s;
    let secs = |v: Option<f64>| v.map_or("not converged".into(), |v| format!("{v:.2} s"));
    let latency = |s: &Side| {
        let q = |q| fleet_size::ms(s.churn.as_ref().and_then(|c| c.quantile_ms(q)));
        format!("{} / {}", q(0.5), q(0.99))
    };
    let per_change = |s: &Side| {
        let changes = s.churn.as_ref().map_or(0, |c| c.changes);
        s.churn_ise_writes as f64 / changes.max(1) as f64
    };
    let (ac, hc) = (
        a.convergence_s.unwrap_or(0.0),
        h.convergence_s.unwrap_or(0.0),
    );
    vec![
        numeric("processes", a.processes as f64, h.processes as f64, |v| {
            format!("{v:.0}")
        }),
        (
            format!("convergence (all {} ISEs)", a.ises_expected),
            secs(a.convergence_s),
            secs(h.convergence_s),
            ratio(ac, hc),
        ),
        numeric(
            "RSS total (Σ processes)",
            a.rss_total_kib as f64,
            h.rss_total_kib as f64,
            mib,
        ),
        numeric(
            "RSS per member",
            a.rss_per_member_kib,
            h.rss_per_member_kib,
            mib,
        ),
        numeric(
            "quiet CPU (CPU-s/s, Σ processes)",
            a.cpu_per_s_quiet,
            h.cpu_per_s_quiet,
            |v| format!("{v:.3}"),
        ),
        numeric(
            "quiet requests/s (hub + members)",
            requests(a),
            requests(h),
            f2,
        ),
        numeric(
            "quiet writes/s (all, Leases too)",
            a.quiet_writes_per_s,
            h.quiet_writes_per_s,
            f2,
        ),
        numeric(
            "quiet writes/s without Leases",
            a.quiet_writes_no_leases_per_s,
            h.quiet_writes_no_leases_per_s,
            f2,
        ),
        numeric(
            &format!("heartbeat writes per member per {} s", r.heartbeat_period_s),
            a.heartbeat_writes_per_member_period,
            h.heartbeat_writes_per_member_period,
            f2,
        ),
        numeric(
            "cold-start writes (start → quiet window)",
            a.cold_writes as f64,
            h.cold_writes as f64,
            |v| format!("{v:.0}"),
        ),
        (
            "change → hub ISE p50 / p99".into(),
            latency(a),
            latency(h),
            String::new(),
        ),
        numeric(
            "hub ISE writes per change",
            per_change(a),
            per_change(h),
            f2,
        ),
    ]
}

/// The side-by-side table, the substrate's own traffic and the quiet writes by resource.
pub fn markdown(r: &Report) -> String {
    let mut out = format!(
        "### Reference agents vs fleetnet-hub: {} members × {} exports, one substrate\n\n\
         | | reference agents | fleetnet-hub | agents / hub |\n|---|---|---|---|\n",
        r.members, r.exports
    );
    for (what, a, h, q) in rows(r) {
        out.push_str(&format!("| {what} | {a} | {h} | {q} |\n"));
    }
    let churn = r.agents.churn.as_ref();
    out.push_str(&format!(
        "\nSubstrate alone: {:.2} requests/s (hub + members). Quiet window {:.0} s; churn {} \
         changes/s for {:.0} s.\n",
        r.baseline.hub_per_s + r.baseline.members_per_s,
        r.agents.quiet.window_s,
        churn.map_or(0.0, |c| c.rate),
        churn.map_or(0.0, |c| c.duration_s),
    ));
    out.push_str(&quiet_writes_table(r));
    out
}

/// Quiet-window writes by resource and verb, both sides.
fn quiet_writes_table(r: &Report) -> String {
    let mut out = String::from(
        "\n| quiet writes by resource | reference agents | fleetnet-hub |\n|---|---|---|\n",
    );
    let mut keys: Vec<(String, String)> = vec![];
    let all = |s: &Side| -> Vec<Rate> {
        s.quiet
            .hub
            .iter()
            .chain(&s.quiet.members)
            .cloned()
            .collect()
    };
    let (a, h) = (all(&r.agents), all(&r.hub));
    for rate in a.iter().chain(&h) {
        let k = (rate.resource.clone(), rate.verb.clone());
        if WRITE_VERBS.contains(&k.1.as_str()) && !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.sort();
    let count = |rates: &[Rate], k: &(String, String)| -> u64 {
        rates
            .iter()
            .filter(|x| x.resource == k.0 && x.verb == k.1)
            .map(|x| x.count)
            .sum()
    };
    for k in &keys {
        out.push_str(&format!(
            "| {} {} | {} | {} |\n",
            k.1,
            k.0,
            count(&a, k),
            count(&h, k)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_is_blank_when_the_hub_figure_is_zero() {
        assert_eq!(ratio(412.0, 24.8), "16.6×");
        assert_eq!(ratio(1.0, 0.0), "-");
    }
}
