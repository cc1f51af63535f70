//! Every job is in the shipped dashboard and alerts: a real Prometheus scrapes the series the
//! product's `Metrics` encodes for one member on which every job (`Controllers::names()`)
//! reconciles and fails; for each job, a dashboard panel must return its outcomes, and a panel
//! and an alert its failing series. A query that filters one job out (as the `exported|unexported`
//! panel once hid the EndpointSlice job) or a job added to the registry without its place in
//! the monitoring fails this test.

use super::*;

use std::sync::Arc;

use fleetnet_hub::controller::{ReconcileObserver, Reconciled};
use fleetnet_hub::fleet::{Controllers, Event, FleetState};
use fleetnet_hub::metrics::Metrics;

/// The member the synthetic series belong to.
const MEMBER: &str = "every-job";

/// The product's metrics for `MEMBER`, every job failing hub-side (the member stays Ready),
/// and a task that records one more reconcile of every job (and one error) each 200 ms, so that
/// rates are not zero.
fn every_job_metrics() -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::new());
    let state = Arc::new(FleetState::default());
    state.engage(MEMBER, "0123456789ab");
    state.jobs_started(MEMBER, Controllers::names());
    state.record(MEMBER, Event::Synced);
    for job in Controllers::names() {
        state.job_failed(MEMBER, job, "watch: 404", false);
    }
    metrics.set_fleet_state(state);
    let m = metrics.clone();
    tokio::spawn(async move {
        loop {
            for job in Controllers::names() {
                m.reconcile_started(MEMBER);
                m.reconciled(
                    MEMBER,
                    Reconciled::of(job, "probe"),
                    Duration::from_millis(5),
                );
            }
            m.reconcile_started(MEMBER);
            m.reconciled(
                MEMBER,
                Reconciled::Failed("probe"),
                Duration::from_millis(5),
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    metrics
}

/// Serves `metrics` as `/metrics` (Prometheus text) on an ephemeral port.
async fn serve(metrics: Arc<Metrics>) -> std::net::SocketAddr {
    serve_http(move || {
        let body = metrics.encode_prometheus();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            fleetnet_hub::metrics::PROMETHEUS_CONTENT_TYPE,
            body.len()
        )
    })
    .await
}

/// The jobs among `names` whose name a result series carries: as an outcome's prefix
/// (`<job>:<outcome>`) or as the `controller` label.
fn jobs_in(result: &[Value], names: &[&str]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for series in result {
        let metric = &series["metric"];
        for job in names {
            let outcome = metric["outcome"].as_str().unwrap_or_default();
            if outcome.starts_with(&format!("{job}:")) || metric["controller"] == *job {
                found.insert((*job).to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_in_the_dashboard_and_the_alerts_on_a_real_prometheus() {
    let rendered = render_chart(MONITORING_ON);
    let (default_rules, _) = rendered_rules();
    let board = dashboard(&rendered);
    let job = one(&rendered, "Service")["metadata"]["name"]
        .as_str()
        .expect("metrics Service name")
        .to_string();
    let names: Vec<&str> = Controllers::names().collect();
    assert_eq!(names.len(), 8, "the registry's jobs: {names:?}");

    let addr = serve(every_job_metrics()).await;
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: ['{addr}']\n"
    );
    let prom = Prometheus::start(&config).await;
    let up = format!("count_over_time(up{{job=\"{job}\"}}[5m]) >= 5");
    eventually("5 scrapes", || {
        let (prom, up) = (&prom, &up);
        async move { (!prom.query(up).await.ok()?.is_empty()).then_some(()) }
    })
    .await;

    // Panels: every variable as "all", rate windows as 1m.
    let mut outcomes = BTreeSet::new();
    let mut failing_on_board = BTreeSet::new();
    for q in panel_queries(&board) {
        let expr = q
            .expr
            .replace("$__rate_interval", "1m")
            .replace("$job", &job)
            .replace("$member", ".*");
        let result = prom.query(&expr).await.unwrap_or_else(|e| {
            panic!("panel {:?}: {e}: {expr}", q.panel);
        });
        let found = jobs_in(&result, &names);
        let failing = result.iter().any(|s| s["metric"]["controller"].is_string());
        match failing {
            true => failing_on_board.extend(found),
            false => outcomes.extend(found),
        }
    }
    let mut failing_alerted = BTreeSet::new();
    for (alert, expr) in alerts(&default_rules) {
        let ast = prom.parse(&expr).await.expect("alert parses");
        let lhs = without_threshold(&ast, &expr).unwrap_or(expr);
        let result = prom
            .query(&lhs)
            .await
            .unwrap_or_else(|e| panic!("alert {alert}: {e}"));
        if result.iter().any(|s| s["metric"]["controller"].is_string()) {
            failing_alerted.extend(jobs_in(&result, &names));
        }
    }
    let all: BTreeSet<String> = names.iter().map(|n| (*n).to_string()).collect();
    let missing = |seen: &BTreeSet<String>| all.difference(seen).cloned().collect::<Vec<_>>();
    assert!(
        missing(&outcomes).is_empty(),
        "jobs whose outcomes no dashboard panel shows: {:?}",
        missing(&outcomes)
    );
    assert!(
        missing(&failing_on_board).is_empty(),
        "jobs whose failing series no dashboard panel shows: {:?}",
        missing(&failing_on_board)
    );
    assert!(
        missing(&failing_alerted).is_empty(),
        "jobs whose failing series no alert reads: {:?}",
        missing(&failing_alerted)
    );
}
