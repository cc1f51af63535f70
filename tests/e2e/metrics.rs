//! Metrics after a real run: two members exporting on real apiservers, their exporters
//! reporting to one `Metrics`; scraped through `Metrics::encode()` and the `/metrics`
//! endpoint, then one member removed and its series checked gone.

use crate::support;
use crate::support::otlp;

use std::sync::Arc;
use std::time::Duration;

use fleetnet_hub::azure::TokenStatsSnapshot;
use fleetnet_hub::fleet::FleetState;
use fleetnet_hub::metrics::{AzureCounters, Metrics};
use support::*;

const MEMBERS: [&str; 2] = ["alpha", "beta"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_of_two_exporting_members_and_removal() {
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let metrics = Arc::new(Metrics::with_detail(
        fleetnet_hub::metrics::MetricsDetail::Member,
    ));
    let state = Arc::new(FleetState::default());
    metrics.set_fleet_state(state.clone());
    metrics.set_azure_source(Arc::new(|| AzureCounters {
        list_calls: 2,
        arm_requests: 3,
        cache_hits: 5,
        cache_misses: 2,
        retries: 1,
        throttled: 1,
        limiter_wait: Duration::from_millis(1500),
        token: TokenStatsSnapshot {
            requests: 4,
            retries: 1,
            throttled: 0,
        },
        ..Default::default()
    }));

    let mut exporters = vec![];
    for member in MEMBERS {
        state.engage(member, "0123456789ab");
        let client = fleet.member(member).client().await.expect("member client");
        namespace(&client, "shop").await;
        let exporter = otlp::start_observed(&fleet, member, metrics.clone()).await;
        metrics.register_member(member, exporter.member_stats.clone());
        state.record(member, fleetnet_hub::fleet::Event::Synced);
        create_service(&client, &service("shop", "cart", 80)).await;
        create_export(&client, "shop", "cart", &[]).await;
        exporters.push(exporter);
    }
    // In the product one hub client serves every member; here the first member's stands in.
    metrics.set_hub_client(exporters[0].hub_stats.clone());
    for member in MEMBERS {
        wait_ise(&hub, &fleet.hub_namespace(member), "shop-cart", |_| true).await;
    }
    // Settled: exported for both, nothing in flight for a second.
    reconciles_settled(&metrics, &MEMBERS).await;

    let text = metrics.encode();
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    let now = jiff::Timestamp::now().as_second() as f64;
    for m in MEMBERS {
        let exported = value(
            &text,
            &format!(r#"fleetnet_reconcile_total{{member="{m}",outcome="exported"}}"#),
        );
        assert!(exported >= 1.0, "{m}: exported {exported}");
        let reconciles = sum(
            &text,
            "fleetnet_reconcile_total",
            &[&format!(r#"member="{m}""#)],
        );
        let durations = value(
            &text,
            &format!(r#"fleetnet_reconcile_duration_seconds_count{{member="{m}"}}"#),
        );
        assert_eq!(reconciles, durations, "{m}: one duration per reconcile");
        assert!(
            value(
                &text,
                &format!(r#"fleetnet_reconcile_duration_seconds_sum{{member="{m}"}}"#)
            ) > 0.0
        );
        assert_eq!(
            value(
                &text,
                &format!(r#"fleetnet_reconciles_in_flight{{member="{m}"}}"#)
            ),
            0.0
        );
        // Phase gauge: 1 for ready, 0 for the three others.
        assert_eq!(
            value(
                &text,
                &format!(r#"fleetnet_member_state{{member="{m}",state="ready"}}"#)
            ),
            1.0
        );
        assert_eq!(
            sum(
                &text,
                "fleetnet_member_state",
                &[&format!(r#"member="{m}""#)]
            ),
            1.0
        );
        for p in ["connecting", "syncing", "failing"] {
            assert_eq!(
                value(
                    &text,
                    &format!(r#"fleetnet_member_state{{member="{m}",state="{p}"}}"#)
                ),
                0.0
            );
        }
        let synced = value(
            &text,
            &format!(r#"fleetnet_member_last_sync_timestamp_seconds{{member="{m}"}}"#),
        );
        assert!(
            (now - synced).abs() < 600.0,
            "{m}: last sync {synced} vs now {now}"
        );
        // Member client: the status patch, lists and watches.
        let member = format!(r#"client="member",member="{m}""#);
        assert!(
            sum(
                &text,
                "fleetnet_api_requests_total",
                &[&member, r#"verb="patch""#, r#"code="200""#]
            ) >= 1.0
        );
        assert!(
            sum(
                &text,
                "fleetnet_api_requests_total",
                &[&member, r#"verb="list""#]
            ) >= 2.0
        );
        assert!(
            sum(
                &text,
                "fleetnet_api_requests_total",
                &[&member, r#"verb="watch""#]
            ) >= 2.0
        );
        assert!(
            sample(
                &text,
                &format!("fleetnet_rate_limiter_wait_seconds_total{{{member}}}")
            )
            .is_some()
        );
    }
    // The hub client, shared by every member: `client="hub"`, no member label.
    let hub = r#"client="hub""#;
    let creates = r#"fleetnet_api_requests_total{client="hub",verb="create",resource="internalserviceexports",code="201"}"#;
    assert!(value(&text, creates) >= 1.0, "{creates} in\n{text}");
    assert!(
        sample(
            &text,
            &format!("fleetnet_rate_limiter_wait_seconds_total{{{hub}}}")
        )
        .is_some()
    );
    assert!(value(&text, r#"fleetnet_ise_writes_total{op="create"}"#) >= 2.0);
    let exports = value(&text, "fleetnet_export_latency_seconds_count");
    assert!(exports >= 2.0, "export latency count {exports}");
    let export_sum = value(&text, "fleetnet_export_latency_seconds_sum");
    // Measured from exportedSince to the reconcile's decision time: 0 when the reconcile that
    // first saw the Service also wrote the ISE.
    assert!(
        (0.0..60.0 * exports).contains(&export_sum),
        "plausible latencies: {export_sum}"
    );
    assert_eq!(
        value(
            &text,
            r#"fleetnet_export_latency_seconds_bucket{le="600.0"}"#
        ),
        exports
    );
    assert!(
        sample(
            &text,
            r#"fleetnet_export_latency_seconds_bucket{le="0.05"}"#
        )
        .is_some()
    );
    for (series, want) in [
        ("fleetnet_azure_list_calls_total", 2.0),
        ("fleetnet_azure_arm_requests_total", 3.0),
        ("fleetnet_azure_cache_hits_total", 5.0),
        ("fleetnet_azure_cache_misses_total", 2.0),
        ("fleetnet_azure_retries_total", 1.0),
        ("fleetnet_azure_throttled_total", 1.0),
        ("fleetnet_azure_limiter_wait_seconds_total", 1.5),
        ("fleetnet_azure_token_requests_total", 4.0),
        ("fleetnet_azure_token_retries_total", 1.0),
        ("fleetnet_azure_token_throttled_total", 0.0),
    ] {
        assert_eq!(value(&text, series), want, "{series}");
    }
    // Bounded cardinality: no object name is a label value.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !l.contains("cart") && !l.contains("shop"),
            "object name in a label: {l}"
        );
    }

    // The HTTP endpoint serves the same families.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let render = {
        let metrics = metrics.clone();
        Arc::new(move || metrics.encode())
    };
    let addr = fleetnet_hub::http::serve_metrics("127.0.0.1:0", render, shutdown.clone())
        .await
        .expect("metrics endpoint");
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape /metrics");
    assert!(response.status().is_success());
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let scraped = response.text().await.expect("body");
    for m in MEMBERS {
        assert!(
            sample(
                &scraped,
                &format!(r#"fleetnet_reconcile_total{{member="{m}",outcome="exported"}}"#)
            )
            .is_some(),
            "/metrics has {m}'s reconciles"
        );
    }
    shutdown.cancel();

    // Removal: alpha's exporter stops, then every alpha series goes (FleetState still has it).
    let mut exporters = exporters.into_iter();
    let alpha = exporters.next().expect("alpha");
    alpha.stop().await;
    let before = text
        .lines()
        .filter(|l| l.contains(r#"member="alpha""#))
        .count();
    assert!(before >= 10, "alpha had series: {before}");
    metrics.remove_member("alpha");
    let after = metrics.encode();
    let left: Vec<&str> = after.lines().filter(|l| l.contains("alpha")).collect();
    assert!(
        left.is_empty(),
        "alpha series left after remove_member: {left:#?}"
    );
    assert!(state.member("alpha").is_some(), "FleetState untouched");
    assert!(
        sample(
            &after,
            r#"fleetnet_reconcile_total{member="beta",outcome="exported"}"#
        )
        .is_some(),
        "beta kept"
    );
    assert!(
        sample(
            &after,
            r#"fleetnet_member_state{member="beta",state="ready"}"#
        ) == Some(1.0)
    );
    assert!(
        value(&after, r#"fleetnet_ise_writes_total{op="create"}"#) >= 2.0,
        "fleet-wide kept"
    );
    assert_eq!(metrics.members(), vec!["beta".to_string()]);
    eprintln!(
        "metrics: {} series lines before removal, {} alpha lines removed; reconciles alpha={} beta={}",
        text.lines().filter(|l| !l.starts_with('#')).count(),
        before,
        sum(&text, "fleetnet_reconcile_total", &[r#"member="alpha""#]),
        sum(&text, "fleetnet_reconcile_total", &[r#"member="beta""#]),
    );
    for e in exporters {
        e.stop().await;
    }
}

/// The series of the `/metrics` text whose labels name `member`, by family (the name before
/// `{`, histogram suffixes kept).
fn member_series_by_family(text: &str, member: &str) -> std::collections::BTreeMap<String, usize> {
    let label = format!("member=\"{member}\"");
    let mut families = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
    {
        let name = line.split('{').next().unwrap_or(line).to_string();
        *families.entry(name).or_default() += 1;
    }
    families
}

/// The whole process with every job for one member that exports a Service, at `detail`;
/// returns the member's series on `/metrics` by family once its reconciles settled.
async fn member_series_at(
    fleet: &fleetnet_testenv::Fleet,
    hub: &kube::Client,
    detail: fleetnet_hub::metrics::MetricsDetail,
    name: &str,
) -> std::collections::BTreeMap<String, usize> {
    let dir = kubeconfig_dir(fleet, &format!("series-{detail:?}"), &["alpha"]);
    let config = config_builder(fleet, &dir)
        .metrics_detail(detail)
        .build()
        .expect("config");
    let running = fleetnet_hub::app::start(config, fleetnet_hub::app::Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", fleetnet_hub::fleet::Phase::Ready).await;
    let member = fleet.member("alpha").client().await.expect("member client");
    create_service(&member, &service("shop", name, 80)).await;
    create_export(&member, "shop", name, &[]).await;
    let ise = format!("shop-{name}");
    wait_ise(hub, &fleet.hub_namespace("alpha"), &ise, |_| true).await;
    // Settled: nothing in flight, and the same series for 2 s.
    let mut last = None;
    let families = eventually("series settled", || {
        let metrics = running.metrics.clone();
        let previous = last.clone();
        let now = member_series_by_family(&metrics.encode(), "alpha");
        let idle = metrics
            .encode()
            .lines()
            .any(|l| l == r#"fleetnet_reconciles_in_flight{member="alpha"} 0"#);
        last = Some(now.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            (idle && previous.as_ref() == Some(&now)).then_some(now)
        }
    })
    .await;
    let (status, body) = http_get(running.metrics_address, "/metrics").await;
    assert_eq!(status, 200);
    let scraped = member_series_by_family(&body, "alpha");
    running.shutdown().await;
    assert_eq!(
        scraped.values().sum::<usize>(),
        families.values().sum::<usize>(),
        "/metrics serves what Metrics encodes: {scraped:?} / {families:?}"
    );
    scraped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_every_job_has_at_most_15_series_by_default_and_the_rest_with_member_detail()
{
    use fleetnet_hub::metrics::MetricsDetail;
    let (fleet, hub) = quiet_fleet(["alpha"]).await;
    let member = fleet.member("alpha").client().await.expect("member client");
    namespace(&member, "shop").await;
    let mut totals = vec![];
    for (detail, name) in [
        (MetricsDetail::Fleet, "cart"),
        (MetricsDetail::Member, "till"),
    ] {
        let families = member_series_at(&fleet, &hub, detail, name).await;
        let total: usize = families.values().sum();
        eprintln!("metrics series of one member, {detail:?}: {total} {families:#?}");
        totals.push((detail, total, families));
    }
    let (_, fleet_total, fleet_families) = &totals[0];
    let (_, member_total, member_families) = &totals[1];
    assert!(
        *fleet_total <= 15,
        "at most 15 series per member by default, got {fleet_total}: {fleet_families:#?}"
    );
    assert!(
        member_total > fleet_total,
        "--metrics-detail=member adds series: {member_families:#?}"
    );
    for family in [
        "fleetnet_reconcile_duration_seconds_bucket",
        "fleetnet_reconcile_total",
        "fleetnet_api_requests_total",
    ] {
        assert!(
            member_families.get(family) > fleet_families.get(family),
            "{family} is broken down by member with the detail: {member_families:#?}"
        );
    }
}
