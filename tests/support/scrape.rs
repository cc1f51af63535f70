//! Reading fleetnet-hub's Prometheus text.

use std::time::{Duration, Instant};

use super::*;

/// Waits until every member in `members` has an `exported` reconcile and none in flight, and
/// that has held for 1 s (read from the metrics a test's exporters report to).
pub async fn reconciles_settled(metrics: &fleetnet_hub::metrics::Metrics, members: &[&str]) {
    let mut quiet_since: Option<Instant> = None;
    eventually("reconciles settled", || {
        let text = metrics.encode();
        let done = members.iter().all(|m| {
            let exported =
                format!("fleetnet_reconcile_total{{member=\"{m}\",outcome=\"exported\"}}");
            let idle = format!("fleetnet_reconciles_in_flight{{member=\"{m}\"}} 0");
            text.lines().any(|l| l.starts_with(&exported)) && text.lines().any(|l| l == idle)
        });
        let ready = match (done, quiet_since) {
            (false, _) => {
                quiet_since = None;
                false
            }
            (true, None) => {
                quiet_since = Some(Instant::now());
                false
            }
            (true, Some(t)) => t.elapsed() >= Duration::from_secs(1),
        };
        async move { ready.then_some(()) }
    })
    .await;
}

/// The value of the sample `series` (name and labels exactly as encoded).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Like [`sample`], panicking with the whole text when the series is missing.
pub fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

/// Sum of the samples of `name` whose labels contain every one of `labels`.
pub fn sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Requests the apiserver behind `client` counted for `resource` with `verb` (`POST`, `PUT`,
/// `PATCH`, `DELETE`, `GET`, …), any response code, from its own `apiserver_request_total`.
pub async fn apiserver_requests(client: &kube::Client, resource: &str, verb: &str) -> f64 {
    let text = apiserver_metrics(client).await;
    let resource = format!("resource=\"{resource}\"");
    let verb = format!("verb=\"{verb}\"");
    sum(&text, "apiserver_request_total", &[&resource, &verb])
}

/// The `/metrics` text of the apiserver behind `client`.
pub async fn apiserver_metrics(client: &kube::Client) -> String {
    client
        .request_text(
            http::Request::get("/metrics")
                .body(vec![])
                .expect("request"),
        )
        .await
        .expect("apiserver metrics")
}
