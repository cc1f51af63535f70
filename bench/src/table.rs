//! `fleetnet-bench --table` (issue #27): the figures that compare with the member agents, in one
//! table, each row a `--fleet-size` run of the shipped binary (one replica, no kill -9) with
//! churn after its quiet window:
//!
//! - 5 × 100 and 10 × 250: one member name per apiserver, 10 Service changes/s for 30 s (the
//!   agents' side-by-side: p50 / p99 17 / 30 ms at 5 × 100);
//! - 1,000 × 10: 100 names per apiserver, so a change is 100 ISE updates; 0.5 changes/s for
//!   60 s is 50 hub writes/s, half the hub budget (10 changes/s would be 10 times that budget).
//!
//! Per row: change → hub ISE latency p50 / p99 (one per change and name), the replica's CPU in
//! the quiet window per member, its RSS per member less the idle binary's.

use std::time::Duration;

use fleetnet_bench::Churn;
use serde::Serialize;

use crate::fleet_size::{self, Config, Report, ms};

/// One size to measure.
struct Size {
    members: usize,
    servers: usize,
    exports: usize,
    churn: Churn,
    /// Issue #27's memory target per member, KiB.
    rss_target_kib: Option<f64>,
}

fn sizes() -> [Size; 3] {
    let churn = |rate, secs| Churn {
        rate,
        duration: Duration::from_secs(secs),
    };
    [
        Size {
            members: 5,
            servers: 5,
            exports: 100,
            churn: churn(10.0, 30),
            rss_target_kib: None,
        },
        Size {
            members: 10,
            servers: 10,
            exports: 250,
            churn: churn(10.0, 30),
            rss_target_kib: Some(2048.0),
        },
        Size {
            members: 1000,
            servers: 10,
            exports: 10,
            churn: churn(0.5, 60),
            rss_target_kib: Some(300.0),
        },
    ]
}

/// One row: the run's report and its issue target.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub report: Report,
    pub rss_target_kib: Option<f64>,
}

/// Runs every size with `template`'s binary, budgets and quiet window.
pub async fn run(template: &Config) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    for size in sizes() {
        eprintln!(
            "[table] {} × {} on {} apiservers",
            size.members, size.exports, size.servers
        );
        let config = Config {
            members: size.members,
            member_servers: size.servers,
            exports: size.exports,
            replicas: 1,
            failover: false,
            churn: Some(size.churn),
            ..template.clone()
        };
        rows.push(Row {
            report: fleet_size::run(&config).await?,
            rss_target_kib: size.rss_target_kib,
        });
    }
    Ok(rows)
}

/// Idle CPU-seconds per second per member, in thousandths (mCPU).
fn idle_mcpu_per_member(r: &Report) -> Option<f64> {
    let cpu: f64 = r.replica.iter().map(|f| f.cpu_per_s_quiet).sum();
    (r.members > 0).then(|| cpu * 1000.0 / r.members as f64)
}

pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "### fleetnet-hub against issue #27's figures (one replica of the binary)\n\n\
         | members × exports (apiservers) | churn | change → hub ISE p50 / p99 (seen of awaited) | idle CPU per member (quiet window) | idle CPU, whole replica | RSS per member less the idle binary | target |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let r = &row.report;
        let churn = r.churn.as_ref();
        let latency = churn.map_or("-".into(), |c| {
            format!(
                "{} / {} ({} of {})",
                ms(c.quantile_ms(0.5)),
                ms(c.quantile_ms(0.99)),
                c.reflected,
                c.awaited
            )
        });
        let whole: f64 = r.replica.iter().map(|f| f.cpu_per_s_quiet).sum();
        out += &format!(
            "| {} × {} ({}) | {} | {} | {} | {:.3} CPU-s/s | {} | {} |\n",
            r.members,
            r.exports_per_member,
            r.member_servers,
            churn.map_or("-".into(), |c| format!(
                "{}/s for {:.0} s",
                c.rate, c.duration_s
            )),
            latency,
            idle_mcpu_per_member(r).map_or("-".into(), |m| format!("{m:.3} mCPU")),
            whole,
            r.rss_per_member_marginal_kib
                .map_or("-".into(), |k| format!("{k:.0} KiB")),
            row.rss_target_kib
                .map_or("latency ≤ 17 / 30 ms".into(), |t| {
                    let met = r.rss_per_member_marginal_kib.is_some_and(|k| k <= t);
                    format!("≤ {t:.0} KiB {}", if met { "✓" } else { "✗" })
                }),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sizes_are_the_issues_and_the_big_one_stays_within_half_the_hub_budget() {
        let sizes = sizes();
        let shape: Vec<(usize, usize)> = sizes.iter().map(|s| (s.members, s.exports)).collect();
        assert_eq!(shape, [(5, 100), (10, 250), (1000, 10)]);
        for s in &sizes {
            let names_per_server = s.members.div_ceil(s.servers) as f64;
            // Hub writes per second the churn asks for (default hub budget: 100/s).
            assert!(s.churn.rate * names_per_server <= 50.0, "{}", s.members);
        }
    }
}
