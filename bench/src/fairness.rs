//! `--fairness` (issue #15, target 6): one heavy member cold-starts many exports while the other,
//! light, members each carry one export whose Service keeps changing; how long a light
//! member's change takes to reach the hub while the heavy member's exports contend for the
//! shared hub budget.

use super::*;

/// What to run.
#[derive(Debug, Clone)]
pub struct FairnessConfig {
    /// Exports of the heavy member (`m01`), created before the controller starts.
    pub heavy_exports: usize,
    /// Light members (`m02`, …), one export each.
    pub light_members: usize,
    /// Changes per second over the light members, round-robin, while the heavy member converges.
    pub rate: f64,
    pub hub_limits: Limits,
    pub member_limits: Limits,
    pub converge_timeout: Duration,
    pub progress: bool,
}

/// Figures of a `--fairness` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FairnessReport {
    pub heavy_exports: usize,
    pub light_members: usize,
    pub hub_qps: f64,
    pub hub_burst: u32,
    pub kube_qps: f64,
    pub kube_burst: u32,
    pub reconcile_concurrency: u16,
    /// Controller start → the heavy member's exports all valid and on the hub.
    pub heavy_convergence_s: f64,
    /// The light members' changes: from the first to the heavy member's convergence.
    pub window_s: f64,
    /// ISE creates the hub's apiserver answered during the window, and per second.
    pub hub_creates_in_window: u64,
    pub hub_creates_per_s: f64,
    pub churn: ChurnReport,
}

/// Runs the heavy member's cold start with the light members' changes alongside.
pub async fn run_fairness(config: &FairnessConfig) -> anyhow::Result<FairnessReport> {
    anyhow::ensure!(
        config.heavy_exports > 0 && config.light_members > 0,
        "--fairness needs --exports > 0 and --members >= 2"
    );
    let p = config.progress;
    let names = member_names(config.light_members + 1);
    let (fleet, hub, members) = substrate(&names).await?;
    create_exports(config, &members, &names).await?;

    let observed = Observed::new(names.len(), config.heavy_exports + config.light_members);
    let watches = observed.spawn_watches(&hub, &members, &fleet, &names);
    observed.wait_listed(names.len() + 1).await;
    let mut scrape_cpu = 0.0;
    let bench_config = Config {
        hub_limits: config.hub_limits.clone(),
        member_limits: config.member_limits.clone(),
        ..Config::default()
    };
    let t0 = Instant::now();
    let running = app::start(
        app_config(&bench_config, &fleet, &fleet.member_kubeconfig_dir())?,
        Extensions::default(),
    )
    .await
    .context("starting the controller")?;

    wait_lights(config, &observed, names.len(), t0).await?;
    let heavy_done = || observed.lock().member_converged(0, config.heavy_exports);
    anyhow::ensure!(
        !heavy_done(),
        "{} converged before the light members did: nothing to measure (raise --exports)",
        names[0]
    );
    say(
        p,
        format!(
            "light members exported after {:.2?}; changing their Services at {}/s until {} converges",
            t0.elapsed(),
            config.rate,
            names[0]
        ),
    );
    let before = scrape(std::slice::from_ref(&hub), &mut scrape_cpu).await?;
    let window_start = Instant::now();
    let churn = churn_lights(config, &observed, &members, heavy_done).await;
    let heavy_convergence = observed
        .wait_converged(t0, config.converge_timeout, p)
        .await?;
    let window = heavy_convergence.saturating_duration_since(window_start);
    let after = scrape(std::slice::from_ref(&hub), &mut scrape_cpu).await?;
    running.shutdown().await;
    for w in watches {
        w.abort();
    }
    let creates = count_of(
        &after.writes_since(&before),
        "internalserviceexports",
        Some("POST"),
    );
    Ok(FairnessReport {
        heavy_exports: config.heavy_exports,
        light_members: config.light_members,
        hub_qps: config.hub_limits.qps,
        hub_burst: config.hub_limits.burst,
        kube_qps: config.member_limits.qps,
        kube_burst: config.member_limits.burst,
        reconcile_concurrency: config.member_limits.reconcile_concurrency,
        heavy_convergence_s: heavy_convergence.duration_since(t0).as_secs_f64(),
        window_s: window.as_secs_f64(),
        hub_creates_in_window: creates,
        hub_creates_per_s: creates as f64 / window.as_secs_f64().max(1e-3),
        churn,
    })
}

/// The heavy member's exports and one export in each light member.
async fn create_exports(
    config: &FairnessConfig,
    members: &[kube::Client],
    names: &[String],
) -> anyhow::Result<()> {
    let p = config.progress;
    create_pairs(
        members[0].clone(),
        (0..config.heavy_exports).map(service_name),
    )
    .await?;
    for light in &members[1..] {
        create_pairs(light.clone(), std::iter::once(service_name(0))).await?;
    }
    say(
        p,
        format!(
            "created {} exports in {} and 1 in each of {} light members",
            config.heavy_exports, names[0], config.light_members
        ),
    );
    Ok(())
}

/// Waits until every light member's export is on the hub (`members` names, the heavy one
/// first), `config.converge_timeout` after `t0` at most.
async fn wait_lights(
    config: &FairnessConfig,
    observed: &Observed,
    members: usize,
    t0: Instant,
) -> anyhow::Result<()> {
    let lights_converged = || {
        let state = observed.lock();
        (1..members).all(|m| state.member_converged(m, 1))
    };
    while !lights_converged() {
        anyhow::ensure!(
            t0.elapsed() < config.converge_timeout,
            "the light members' exports did not converge within {:?}",
            config.converge_timeout
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Changes the light members' Services at `config.rate` until `heavy_done`.
async fn churn_lights(
    config: &FairnessConfig,
    observed: &Observed,
    members: &[kube::Client],
    heavy_done: impl Fn() -> bool,
) -> ChurnReport {
    let targets: Vec<(usize, String)> = (1..members.len()).map(|m| (m, service_name(0))).collect();
    let churn = Churn {
        rate: config.rate,
        duration: config.converge_timeout,
    };
    run_churn(observed, members, &targets, churn, |m| vec![m], heavy_done).await
}

/// The run's figures as a markdown table.
pub fn fairness_markdown(r: &FairnessReport) -> String {
    let c = &r.churn;
    let q = |q: f64| {
        c.quantile_ms(q)
            .map_or("-".into(), |v| format!("{v:.0} ms"))
    };
    let p99_met = c.quantile_ms(0.99).is_some_and(|v| v < 1000.0) && c.reflected == c.changes;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Fairness: 1 member cold-starting {} exports, {} light members changing\n\n\
         Budgets: hub {} qps / {} burst (shared); each member {} qps / {} burst; {} reconciles at once per member.\n",
        r.heavy_exports,
        r.light_members,
        r.hub_qps,
        r.hub_burst,
        r.kube_qps,
        r.kube_burst,
        r.reconcile_concurrency
    );
    let _ = writeln!(out, "| figure | value | target |");
    let _ = writeln!(out, "|---|---|---|");
    let _ = writeln!(
        out,
        "| heavy member's cold convergence | {:.2} s | |",
        r.heavy_convergence_s
    );
    let _ = writeln!(
        out,
        "| measuring window (light members' changes) | {:.2} s | |",
        r.window_s
    );
    let _ = writeln!(
        out,
        "| hub ISE creates in the window (server-side) | {} ({:.1}/s of the hub's {} qps) | |",
        r.hub_creates_in_window, r.hub_creates_per_s, r.hub_qps
    );
    let _ = writeln!(
        out,
        "| light changes made / on the hub / failed | {} / {} / {} | all on the hub |",
        c.changes, c.reflected, c.failed
    );
    let _ = writeln!(
        out,
        "| light change → hub, p50 / p90 / p99 / max | {} / {} / {} / {} | p99 < 1 s: {} |",
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0),
        check(p99_met)
    );
    out
}
