use super::*;

const EXPORTED: Reconciled = Reconciled::Done {
    job: None,
    outcome: "exported",
    reason: None,
};

fn series<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .collect()
}

#[tokio::test]
async fn drops_are_counted_by_queue_and_the_runtime_tasks_are_a_gauge() {
    let m = Metrics::new();
    m.dropped("a", "events");
    m.dropped("b", "events");
    m.dropped("a", "dangling_ises");
    let text = m.encode();
    let mut dropped = series(&text, "fleetnet_queue_dropped_total");
    dropped.sort_unstable();
    assert_eq!(
        dropped,
        vec![
            r#"fleetnet_queue_dropped_total{queue="dangling_ises"} 1"#,
            r#"fleetnet_queue_dropped_total{queue="events"} 2"#,
        ]
    );
    let tasks = series(&text, "fleetnet_runtime_tasks ");
    assert_eq!(tasks.len(), 1, "{text}");
    assert!(
        tasks[0]
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .is_some(),
        "{tasks:?}"
    );
}

#[test]
fn the_allocator_figures_the_binary_reports_are_gauges_in_bytes() {
    fn figures() -> Option<AllocatorBytes> {
        Some(AllocatorBytes {
            allocated: 7_000_000,
            resident: 9_000_000,
        })
    }
    report_allocator(figures);
    let text = Metrics::new().encode();
    let mut rows = series(&text, "fleetnet_allocator_bytes{");
    rows.sort_unstable();
    assert_eq!(
        rows,
        vec![
            r#"fleetnet_allocator_bytes{state="allocated"} 7000000"#,
            r#"fleetnet_allocator_bytes{state="resident"} 9000000"#,
        ]
    );
}

#[test]
fn observer_calls_become_series_and_removal_drops_them() {
    let m = Metrics::with_detail(MetricsDetail::Member);
    let stats = Arc::new(ClientStats::default());
    m.register_member("a", stats);
    m.register_member("b", Arc::new(ClientStats::default()));
    let fleet = Arc::new(FleetState::default());
    fleet.engage("a", "h");
    fleet.engage("b", "h");
    fleet.record("a", crate::fleet::Event::Synced);
    m.set_fleet_state(fleet);
    m.set_azure_source(Arc::new(|| AzureCounters {
        list_calls: 3,
        cache_hits: 7,
        truncated_lists: 1,
        ..Default::default()
    }));
    for member in ["a", "b"] {
        m.reconcile_started(member);
        m.reconciled(member, EXPORTED, Duration::from_millis(20));
        m.hub_write(member, "create");
        m.export_latency(member, Duration::from_millis(300));
    }
    m.reconcile_started("a");
    m.reconciled(
        "a",
        Reconciled::Failed("patch_serviceexport_status"),
        Duration::from_millis(5),
    );
    m.reconcile_started("a"); // still running
    m.watch_failed("a", "serviceexport", true, "watch failed");

    let text = m.encode();
    assert!(text.ends_with("# EOF\n"), "{text}");
    for want in [
        r#"fleetnet_reconcile_total{member="a",outcome="exported"} 1"#,
        r#"fleetnet_reconcile_total{member="a",outcome="error:patch_serviceexport_status"} 1"#,
        r#"fleetnet_reconcile_total{member="b",outcome="exported"} 1"#,
        r#"fleetnet_reconcile_duration_seconds_count{member="a"} 2"#,
        r#"fleetnet_reconciles_in_flight{member="a"} 1"#,
        r#"fleetnet_reconciles_in_flight{member="b"} 0"#,
        r#"fleetnet_controller_errors_total{member="a"} 1"#,
        r#"fleetnet_ise_writes_total{op="create"} 2"#,
        "fleetnet_export_latency_seconds_count 2",
        r#"fleetnet_member_state{member="a",state="ready"} 1"#,
        r#"fleetnet_member_state{member="a",state="connecting"} 0"#,
        r#"fleetnet_member_state{member="b",state="connecting"} 1"#,
        r#"fleetnet_rate_limiter_wait_seconds_total{client="member",member="a"} 0"#,
        r#"fleetnet_api_retries_total{client="member",member="a"} 0"#,
        "fleetnet_azure_list_calls_total 3",
        "fleetnet_azure_cache_hits_total 7",
        "fleetnet_azure_groups_evicted_total 0",
        "fleetnet_azure_truncated_lists_total 1",
        "fleetnet_azure_limiter_wait_seconds_total 0",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    assert_eq!(
        series(&text, "fleetnet_member_last_sync_timestamp_seconds").len(),
        1
    );

    m.remove_member("a");
    let text = m.encode();
    assert!(!text.contains(r#"member="a""#), "series of a left:\n{text}");
    assert!(text.contains(r#"fleetnet_reconcile_total{member="b",outcome="exported"} 1"#));
    assert_eq!(m.members(), vec!["b".to_string()]);
    // Fleet-wide series stay.
    assert!(text.contains(r#"fleetnet_ise_writes_total{op="create"} 2"#));
    // The Prometheus text format carries the same series.
    assert!(
        m.encode_prometheus()
            .contains(r#"fleetnet_reconcile_total{member="b",outcome="exported"} 1"#)
    );
}

#[test]
fn label_values_from_outside_cannot_forge_or_hide_lines() {
    let m = Metrics::with_detail(MetricsDetail::Member);
    // A member name comes from a file name: anything but '/' and NUL.
    let evil = "m\r\nfleetnet_leader 1\x1b[2K\u{9b}31m\"";
    m.register_member(evil, Arc::new(ClientStats::default()));
    let fleet = Arc::new(FleetState::default());
    fleet.engage(evil, "h");
    m.set_fleet_state(fleet);
    m.reconcile_started(evil);
    m.reconciled(evil, EXPORTED, Duration::from_millis(20));
    m.conflict_reflected(evil, Duration::from_secs(2));
    for text in [m.encode(), m.encode_prometheus()] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "a control character in\n{text}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("fleetnet_leader 1")),
            "a forged line in\n{text}"
        );
        // Escaped by us, then its backslashes and quote by the exposition format.
        let shown = r#"member="m\\r\\nfleetnet_leader 1\\x1b[2K\\u{9b}31m\"""#;
        for series in [
            "fleetnet_reconcile_total{",
            "fleetnet_reconciles_in_flight{",
            "fleetnet_member_state{",
            "fleetnet_api_retries_total{client=\"member\",",
        ] {
            assert!(
                text.contains(&format!("{series}{shown}")),
                "{series}{shown} in\n{text}"
            );
        }
        assert!(
            text.contains(r#"origin_cluster_id="m\\r\\nfleetnet_leader 1\\x1b"#),
            "{text}"
        );
    }
    m.remove_member(evil);
    assert!(!m.encode().contains("fleetnet_leader 1\\"), "removed");
}

#[test]
fn export_duration_follows_fleet_networking_rules() {
    let m = Metrics::new();
    // 0 counts as one second; 300 s is capped at 100 s; 3 s falls in the 5000 bucket.
    for took in [0, 300_000, 3_000] {
        m.conflict_reflected("east", Duration::from_millis(took));
    }
    let text = m.encode_prometheus();
    for want in [
        r#"fleet_networking_service_export_duration_milliseconds_bucket{origin_cluster_id="east",le="1000"} 1"#,
        r#"fleet_networking_service_export_duration_milliseconds_bucket{origin_cluster_id="east",le="2500"} 1"#,
        r#"fleet_networking_service_export_duration_milliseconds_bucket{origin_cluster_id="east",le="5000"} 2"#,
        r#"fleet_networking_service_export_duration_milliseconds_bucket{origin_cluster_id="east",le="50000"} 2"#,
        r#"fleet_networking_service_export_duration_milliseconds_bucket{origin_cluster_id="east",le="+Inf"} 3"#,
        r#"fleet_networking_service_export_duration_milliseconds_sum{origin_cluster_id="east"} 104000.0"#,
        r#"fleet_networking_service_export_duration_milliseconds_count{origin_cluster_id="east"} 3"#,
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    m.remove_member("east");
    assert!(!m.encode().contains("origin_cluster_id=\"east\""));
}

#[test]
fn import_duration_is_fleet_networkings_histogram_by_origin_destination_and_first() {
    let m = Metrics::new();
    m.slice_import_duration("west", "east", true, Duration::from_millis(1000));
    m.slice_import_duration("west", "east", false, Duration::from_secs(300));
    m.slice_import_duration("west", "east", true, Duration::ZERO);
    let text = m.encode_prometheus();
    let series = "fleet_networking_endpointslice_export_import_duration_milliseconds";
    assert!(
        text.contains(&format!(
            "# HELP {series} The duration of an endpointslice export"
        )),
        "{text}"
    );
    for want in [
        format!(
            r#"{series}_bucket{{origin_cluster_id="west",destination_cluster_id="east",is_first_import="true",le="1000"}} 2"#
        ),
        format!(
            r#"{series}_sum{{origin_cluster_id="west",destination_cluster_id="east",is_first_import="false"}} 100000.0"#
        ),
    ] {
        assert!(text.contains(&want), "missing {want} in\n{text}");
    }
    m.remove_member("east");
    assert!(!m.encode().contains("destination_cluster_id=\"east\""));
}

#[test]
fn no_exemplar_without_a_sampled_trace() {
    let m = Metrics::new();
    m.reconcile_started("a");
    m.reconciled("a", EXPORTED, Duration::from_millis(20));
    assert!(!m.encode().contains("trace_id"));
}
