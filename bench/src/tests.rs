use super::*;
use crate::svg::nice_max;

#[test]
fn parses_apiserver_samples_with_escapes() {
    let line = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="networking.fleet.azure.com",resource="internalserviceexports",scope="resource",subresource="",verb="POST",version="v1alpha1"} 42"#;
    let (labels, value) = parse_sample(line, "apiserver_request_total").expect("parses");
    assert_eq!(value, 42.0);
    assert!(labels.contains(&("verb", "POST".into())));
    assert!(labels.contains(&("subresource", String::new())));
    let (labels, _) = parse_sample(r#"x{a="q\"u,o",b="2"} 1"#, "x").expect("escaped quote");
    assert_eq!(labels, vec![("a", "q\"u,o".into()), ("b", "2".into())]);
    assert!(
        parse_sample(
            "apiserver_request_total_other{a=\"1\"} 1",
            "apiserver_request_total"
        )
        .is_none()
    );
}

#[test]
fn counts_writes_and_conflicts_as_differences() {
    let text = |n: u64, c: u64| {
        format!(
            "apiserver_request_total{{code=\"200\",resource=\"serviceexports\",subresource=\"status\",verb=\"PATCH\"}} {n}\n\
             apiserver_request_total{{code=\"409\",resource=\"serviceexports\",subresource=\"\",verb=\"PATCH\"}} {c}\n\
             apiserver_request_total{{code=\"200\",resource=\"serviceexports\",subresource=\"\",verb=\"LIST\"}} 9\n\
             apiserver_request_total{{code=\"201\",resource=\"leases\",subresource=\"\",verb=\"PUT\"}} {n}\n"
        )
    };
    let mut before = ServerCounts::default();
    before.add_metrics_text(&text(1, 0));
    let mut after = ServerCounts::default();
    after.add_metrics_text(&text(4, 2));
    after.add_metrics_text(&text(1, 0));
    assert_eq!(
        after.writes_since(&before),
        vec![
            WriteCount {
                resource: "serviceexports".into(),
                verb: "PATCH".into(),
                count: 2,
                conflicts: 2,
            },
            WriteCount {
                resource: "serviceexports/status".into(),
                verb: "PATCH".into(),
                count: 4,
                conflicts: 0,
            },
        ]
    );
    assert_eq!(after.conflicts_since(&before), 2);
    assert!(after.verbs.contains("LIST"));
}

#[test]
fn bound_is_the_slowest_bucket() {
    let metrics = "fleetnet_api_requests_total{client=\"hub\",verb=\"create\",resource=\"internalserviceexports\",code=\"201\"} 700\n\
                   fleetnet_api_requests_total{client=\"hub\",verb=\"watch\",resource=\"internalserviceexports\",code=\"200\"} 50\n\
                   fleetnet_api_requests_total{client=\"member\",member=\"m01\",verb=\"patch\",resource=\"serviceexports\",code=\"200\"} 430\n";
    let config = Config::default();
    let (bound, which, hub, member) = budget_bound(metrics, &config);
    // hub: (700 - 200) / 100 = 5 s; member: (430 - 60) / 40 = 9.25 s.
    assert_eq!(bound, Duration::from_secs_f64(9.25));
    assert_eq!(which, "member m01");
    assert_eq!((hub, member), (700, 430));
    // Events have their own bucket, which no export waits for: (325 - 25) / 10 = 30 s is not
    // a bound on convergence.
    let with_events = format!(
        "{metrics}fleetnet_api_requests_total{{client=\"member\",member=\"m01\",verb=\"create\",resource=\"events\",code=\"201\"}} 325\n"
    );
    let (bound, which, _, member) = budget_bound(&with_events, &config);
    assert_eq!(bound, Duration::from_secs_f64(9.25));
    assert_eq!(which, "member m01");
    assert_eq!(member, 755);
    // Minimum requests of 1 x 50: member (104 - 60) / 40 = 1.1 s, hub (55 - 200) → 0.
    assert_eq!(ideal_bound(&config), Duration::from_secs_f64(1.1));
}

#[test]
fn quantiles_and_svg() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(quantile(&v, 0.5), Some(50.0));
    assert_eq!(quantile(&v, 0.99), Some(99.0));
    assert_eq!(quantile(&v, 1.0), Some(100.0));
    assert_eq!(quantile(&[], 0.5), None);
    assert_eq!(nice_max(37.0), 50.0);
    assert_eq!(nice_max(0.8), 1.0);
    let report = Report {
        members: 2,
        exports: 3,
        hub_qps: 100.0,
        hub_burst: 200,
        kube_qps: 20.0,
        kube_burst: 30,
        event_qps: 10.0,
        event_burst: 25,
        reconcile_concurrency: 16,
        substrate_start_s: 1.0,
        create_s: 1.0,
        convergence_s: 2.0,
        events_done_s: 3.0,
        budget_bound_s: 1.0,
        ideal_bound_s: 1.0,
        binding_client: "hub".into(),
        hub_requests: 1,
        member_requests_max: 1,
        controller_requests: vec![],
        cold_writes: vec![],
        cold_409: 0,
        quiet_s: 0.0,
        quiet_writes: vec![],
        quiet_409: 0,
        churn: Some(ChurnReport {
            rate: 1.0,
            changes: 3,
            reflected: 3,
            latencies_ms: vec![10.0, 20.0, 30.0],
            ..ChurnReport::default()
        }),
        run_409: 0,
        rss: Rss::default(),
        cpu: Cpu::default(),
        verbs_seen: vec![],
    };
    let mut other = report.clone();
    other.members = 4;
    let text = svg(&[report.clone(), other]);
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert_eq!(
        text.matches("<path").count(),
        2 + 4,
        "two CDFs, four sweep lines"
    );
    assert!(markdown(&report).contains("| 409 responses"));
}
