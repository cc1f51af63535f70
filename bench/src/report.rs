use super::*;

// ---------------------------------------------------------------------------------------------
// Output: markdown and SVG.
// ---------------------------------------------------------------------------------------------

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub(crate) fn check(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// The run's figures as markdown tables.
pub fn markdown(r: &Report) -> String {
    let fresh = (r.members * r.exports) as f64;
    let mut out = String::new();
    heading(&mut out, r);
    convergence_rows(&mut out, r);
    write_rows(&mut out, r, fresh);
    rss_rows(&mut out, r);
    cpu_rows(&mut out, r);
    churn_rows(&mut out, r);
    tables(&mut out, r, fresh);
    out
}

/// The heading: the run's size and budgets, what is measured where, the table's head.
fn heading(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "### {} members × {} exports\n\nBudgets: hub {} qps / {} burst (shared); each member {} qps / {} burst, its Events {} qps / {} burst; {} reconciles at once per member.\n",
        r.members,
        r.exports,
        r.hub_qps,
        r.hub_burst,
        r.kube_qps,
        r.kube_burst,
        r.event_qps,
        r.event_burst,
        r.reconcile_concurrency
    );
    let _ = writeln!(
        out,
        "Controller in-process (`fleetnet_hub::app::start`); RSS and CPU are this process (controller + \
         benchmark harness); the hub's and members' kube-apiservers and the shared etcd are separate \
         processes, not included. Writes and 409s counted server-side from each apiserver's \
         `apiserver_request_total`.\n"
    );
    let _ = writeln!(out, "| figure | value | target |");
    let _ = writeln!(out, "|---|---|---|");
}

/// How long the cold start took, against the token-bucket bounds.
fn convergence_rows(out: &mut String, r: &Report) {
    let ratio = |bound: f64| {
        if bound > 0.0 {
            r.convergence_s / bound
        } else {
            f64::NAN
        }
    };
    let _ = writeln!(
        out,
        "| cold convergence (controller start → all ISEs + Valid=True) | {:.2} s | |",
        r.convergence_s
    );
    let _ = writeln!(
        out,
        "| cold start's Events all created (after the exports, at the Events budget) | {:.2} s | |",
        r.events_done_s
    );
    let product = Limits::default();
    let defaults = r.hub_qps == 100.0
        && r.hub_burst == 200
        && r.kube_qps == product.qps
        && r.kube_burst == product.burst
        && r.event_qps == product.event_qps
        && r.event_burst == product.event_burst
        && r.reconcile_concurrency == product.reconcile_concurrency;
    let target = |ratio: f64| {
        if defaults {
            format!("≤ 1.15 (default budgets): {}", check(ratio <= 1.15))
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        out,
        "| token-bucket bound, minimum requests (per member: 2 PATCHes per export + 2 LISTs; hub: 1 POST per export + 1 LIST per member; Events have their own budget) | {:.2} s | |",
        r.ideal_bound_s
    );
    let _ = writeln!(
        out,
        "| convergence ÷ that bound | {:.2} | {} |",
        ratio(r.ideal_bound_s),
        target(ratio(r.ideal_bound_s))
    );
    let _ = writeln!(
        out,
        "| token-bucket bound, requests actually made (hub {} / busiest member {}; binding: {}) | {:.2} s | |",
        r.hub_requests, r.member_requests_max, r.binding_client, r.budget_bound_s
    );
    let _ = writeln!(
        out,
        "| convergence ÷ that bound | {:.2} | |",
        ratio(r.budget_bound_s)
    );
}

/// Writes and Events per fresh export, 409s, and writes in the quiet period.
fn write_rows(out: &mut String, r: &Report, fresh: f64) {
    let writes = total_excluding_events(&r.cold_writes) as f64 / fresh;
    let _ = writeln!(
        out,
        "| writes per fresh export (ServiceExport + ISE, server-side) | {writes:.2} | 3: {} |",
        check((writes - 3.0).abs() < 1e-9)
    );
    let refused: u64 = r
        .cold_writes
        .iter()
        .filter(|w| w.resource != "events")
        .map(|w| w.conflicts)
        .sum();
    if refused > 0 {
        let _ = writeln!(
            out,
            "| of which answered 409 (per fresh export) | {refused} ({:.2}) | |",
            refused as f64 / fresh
        );
    }
    let _ = writeln!(
        out,
        "| events per fresh export | {:.2} | |",
        count_of(&r.cold_writes, "events", None) as f64 / fresh
    );
    let _ = writeln!(
        out,
        "| 409 responses (cold start / whole run) | {} / {} | 0: {} |",
        r.cold_409,
        r.run_409,
        check(r.run_409 == 0)
    );
    if r.quiet_s > 0.0 {
        let quiet: u64 = r.quiet_writes.iter().map(|w| w.count).sum();
        let _ = writeln!(
            out,
            "| writes (incl. events) in {:.0} s quiet after convergence | {quiet} | 0: {} |",
            r.quiet_s,
            check(quiet == 0)
        );
    }
}

/// The process's memory: idle, per member, at the end.
fn rss_rows(out: &mut String, r: &Report) {
    let per_member = mib(r.rss.per_member_kib(r.members) as u64);
    let _ = writeln!(
        out,
        "| RSS: harness before any controller | {:.1} MiB | |",
        mib(r.rss.harness_kib)
    );
    let _ = writeln!(
        out,
        "| RSS: controller idle, no member (this process, harness included) | {:.1} MiB | {} |",
        mib(r.rss.idle_kib),
        if r.rss.binary_idle_kib.is_some() {
            "(target judged on the binary, below)".to_string()
        } else {
            format!("≤ 15 MiB: {}", check(mib(r.rss.idle_kib) <= 15.0))
        }
    );
    if let Some(kib) = r.rss.binary_idle_kib {
        let _ = writeln!(
            out,
            "| RSS: shipped `fleetnet-hub run` binary idle, no member (own process) | {:.1} MiB | ≤ 15 MiB: {} |",
            mib(kib),
            check(mib(kib) <= 15.0)
        );
    }
    let _ = writeln!(
        out,
        "| RSS: + harness watches, before controller start | {:.1} MiB | |",
        mib(r.rss.with_watches_kib)
    );
    let _ = writeln!(
        out,
        "| RSS: after convergence (total) | {:.1} MiB | |",
        mib(r.rss.converged_kib)
    );
    let _ = writeln!(
        out,
        "| RSS per member ((converged − idle) / members) | {per_member:.2} MiB | {} |",
        if r.exports == 250 {
            format!("≤ 5 MiB at 250 Services: {}", check(per_member <= 5.0))
        } else {
            "(the target is for 250 Services per member)".to_string()
        }
    );
    let _ = writeln!(
        out,
        "| RSS at the end / peak | {:.1} / {:.1} MiB | |",
        mib(r.rss.end_kib),
        mib(r.rss.peak_kib)
    );
    if let (Some(idle), Some(end), Some(live)) = (
        r.rss.idle_trimmed_kib,
        r.rss.end_trimmed_kib,
        r.rss.live_per_member_kib(r.members),
    ) {
        let _ = writeln!(
            out,
            "| diagnostic, after glibc `malloc_trim(0)`: idle / end / per member ((end − idle) / members) | {:.1} / {:.1} / {:.2} MiB | |",
            mib(idle),
            mib(end),
            mib(live as u64)
        );
    }
}

/// CPU time of this process, and of the machine during the cold start.
fn cpu_rows(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "| CPU s: cold start / quiet / churn / whole run (of which /metrics scraping) | {:.2} / {:.2} / {:.2} / {:.2} ({:.2}) | |",
        r.cpu.cold_s, r.cpu.quiet_s, r.cpu.churn_s, r.cpu.total_s, r.cpu.scrape_s
    );
    if r.cpu.cold_machine_total_s > 0.0 {
        let busy = r.cpu.cold_machine_busy_s;
        let _ = writeln!(
            out,
            "| machine CPU during the cold start: busy / available (all cores) → busy share; of the busy, this process / the rest (apiservers, etcd) | {busy:.1} / {:.1} s → {:.0} %; {:.1} / {:.1} s | |",
            r.cpu.cold_machine_total_s,
            100.0 * busy / r.cpu.cold_machine_total_s,
            r.cpu.cold_s,
            (busy - r.cpu.cold_s).max(0.0),
        );
    }
}

/// The churn's latencies and writes, when there was churn.
fn churn_rows(out: &mut String, r: &Report) {
    if let Some(c) = &r.churn {
        let q = |x| c.quantile_ms(x).map_or("-".into(), |v| format!("{v:.0}"));
        let p99 = c.quantile_ms(0.99);
        // The targets: p99 under 100 ms at 10 changes/s, under 250 ms at 100/s.
        let target_ms = if c.rate >= 100.0 { 250.0 } else { 100.0 };
        let _ = writeln!(
            out,
            "| churn: {} changes at {}/s: reflected / failed | {} / {} | |",
            c.changes, c.rate, c.reflected, c.failed
        );
        let _ = writeln!(
            out,
            "| churn latency p50 / p90 / p99 / max (Service PATCH sent → ISE with the port seen) | {} / {} / {} / {} ms | p99 < {target_ms} ms: {} |",
            q(0.5),
            q(0.9),
            q(0.99),
            q(1.0),
            check(p99.is_some_and(|v| v < target_ms) && c.reflected == c.changes)
        );
        let per_change =
            c.writes.iter().map(|w| w.count).sum::<u64>() as f64 / c.changes.max(1) as f64;
        let _ = writeln!(
            out,
            "| churn: writes per change (incl. events) / 409s | {per_change:.2} / {} | |",
            c.conflicts_409
        );
    }
}

/// The substrate's timings, then the writes by resource and verb and the controller's own requests.
fn tables(out: &mut String, r: &Report, fresh: f64) {
    let _ = writeln!(
        out,
        "| substrate start / object creation | {:.1} s / {:.1} s | |",
        r.substrate_start_s, r.create_s
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Cold-start writes by resource and verb (server-side):\n"
    );
    out.push_str(&writes_table(&r.cold_writes, fresh, "per export"));
    if r.quiet_s > 0.0 && !r.quiet_writes.is_empty() {
        let _ = writeln!(out, "\nWrites in the quiet period:\n");
        out.push_str(&writes_table(&r.quiet_writes, fresh, "per export"));
    }
    if let Some(c) = &r.churn
        && !c.writes.is_empty()
    {
        let _ = writeln!(out, "\nWrites during churn:\n");
        out.push_str(&writes_table(
            &c.writes,
            c.changes.max(1) as f64,
            "per change",
        ));
    }
    if !r.controller_requests.is_empty() {
        let _ = writeln!(
            out,
            "\nThe controller's own requests until convergence (its client counters, members summed):\n"
        );
        let _ = writeln!(out, "| client | verb | resource | code | requests |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for c in &r.controller_requests {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                c.client, c.verb, c.resource, c.code, c.count
            );
        }
    }
    let _ = writeln!(
        out,
        "\n`verb` labels seen in the hub's apiserver_request_total: {}",
        r.verbs_seen.join(", ")
    );
}

pub(crate) fn writes_table(writes: &[WriteCount], per: f64, per_label: &str) -> String {
    let mut out = format!(
        "| resource | verb | writes | of which 409 | {per_label} |\n|---|---|---|---|---|\n"
    );
    for w in writes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} |",
            w.resource,
            w.verb,
            w.count,
            w.conflicts,
            w.count as f64 / per
        );
    }
    out
}

/// RSS per member, and the live heap per member when measured.
pub(crate) fn per_member(r: &Report) -> String {
    let mut out = format!("{:.2} MiB", mib(r.rss.per_member_kib(r.members) as u64));
    if let Some(live) = r.rss.live_per_member_kib(r.members) {
        let _ = write!(out, " (live {:.2})", mib(live as u64));
    }
    out
}

/// One line per run.
pub fn summary_markdown(reports: &[Report]) -> String {
    let mut out = String::from(
        "| members × exports | budgets hub / member (qps) | convergence | bound: min requests / made | ratio to min-requests bound | writes/export | events/export | 409s | quiet writes | RSS idle | RSS converged | RSS/member | CPU s (run) | churn p50/p99/max |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let fresh = (r.members * r.exports) as f64;
        let churn = r.churn.as_ref().map_or("-".to_string(), |c| {
            let q = |x| c.quantile_ms(x).map_or("-".into(), |v| format!("{v:.0}"));
            format!("{} / {} / {} ms", q(0.5), q(0.99), q(1.0))
        });
        let quiet = if r.quiet_s > 0.0 {
            format!(
                "{} in {:.0} s",
                r.quiet_writes.iter().map(|w| w.count).sum::<u64>(),
                r.quiet_s
            )
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "| {} × {} | {} / {} | {:.1} s | {:.1} / {:.1} s | {:.2} | {:.2} | {:.2} | {} | {} | {:.1} MiB | {:.1} MiB | {} | {:.1} | {} |",
            r.members,
            r.exports,
            r.hub_qps,
            r.kube_qps,
            r.convergence_s,
            r.ideal_bound_s,
            r.budget_bound_s,
            r.convergence_s / r.ideal_bound_s.max(f64::MIN_POSITIVE),
            total_excluding_events(&r.cold_writes) as f64 / fresh,
            count_of(&r.cold_writes, "events", None) as f64 / fresh,
            r.run_409,
            quiet,
            mib(r.rss.idle_kib),
            mib(r.rss.converged_kib),
            per_member(r),
            r.cpu.total_s,
            churn
        );
    }
    out
}
