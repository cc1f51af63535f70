//! What `--metrics-detail` keeps per member: the default (`fleet`) and `member`.

use super::*;
use crate::client::ClientStats;

/// Series of `text` whose labels name `member`.
fn member_series<'a>(text: &'a str, member: &str) -> Vec<&'a str> {
    let label = format!("member=\"{member}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
        .collect()
}

/// A member of every job's outcomes: exported, a slice job's, an import job's, an error.
fn busy_member(detail: MetricsDetail) -> Metrics {
    let m = Metrics::with_detail(detail);
    m.register_member("a", Arc::new(ClientStats::default()));
    let fleet = Arc::new(FleetState::default());
    fleet.engage("a", "h");
    fleet.record("a", crate::fleet::Event::Synced);
    m.set_fleet_state(fleet);
    let outcomes = [
        Reconciled::of("serviceexport", "other_writer"),
        Reconciled::of("endpointslice", "exported"),
        Reconciled::of("endpointsliceexport", "unchanged"),
        Reconciled::of("serviceimport", "imported"),
        Reconciled::of("internalserviceimport", "reflected"),
        Reconciled::of("endpointsliceimport", "imported"),
        Reconciled::of("multiclusterservice", "derived"),
        Reconciled::of("internalmembercluster", "joined"),
        Reconciled::Failed("patch_serviceexport_status"),
    ];
    for outcome in outcomes {
        m.reconcile_started("a");
        m.reconciled("a", outcome, Duration::from_millis(20));
    }
    m
}

#[test]
fn by_default_a_member_has_its_outcomes_as_ok_or_error_and_the_fleet_has_them_all() {
    let m = busy_member(MetricsDetail::Fleet);
    let text = m.encode();
    let mine = member_series(&text, "a");
    assert!(
        mine.len() <= 15,
        "{} series of a:\n{}",
        mine.len(),
        mine.join("\n")
    );
    for want in [
        r#"fleetnet_reconcile_total{member="a",outcome="ok"} 8"#,
        r#"fleetnet_reconcile_total{member="a",outcome="error:patch_serviceexport_status"} 1"#,
        r#"fleetnet_reconcile_outcomes_total{outcome="endpointslice:exported"} 1"#,
        r#"fleetnet_reconcile_outcomes_total{outcome="internalmembercluster:joined"} 1"#,
        r#"fleetnet_reconcile_outcomes_total{outcome="error:patch_serviceexport_status"} 1"#,
        "fleetnet_reconcile_duration_seconds_count 9",
        r#"fleetnet_reconciles_in_flight{member="a"} 0"#,
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    assert!(
        !text.contains("fleetnet_reconcile_duration_seconds_count{member"),
        "{text}"
    );
    m.remove_member("a");
    assert!(member_series(&m.encode(), "a").is_empty());
}

#[test]
fn with_member_detail_outcomes_durations_are_by_member() {
    let m = busy_member(MetricsDetail::Member);
    let text = m.encode();
    for want in [
        r#"fleetnet_reconcile_total{member="a",outcome="endpointslice:exported"} 1"#,
        r#"fleetnet_reconcile_total{member="a",outcome="serviceexport:other_writer"} 1"#,
        r#"fleetnet_reconcile_duration_seconds_count{member="a"} 9"#,
        r#"fleetnet_reconcile_outcomes_total{outcome="endpointslice:exported"} 1"#,
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    assert!(member_series(&text, "a").len() > 15);
    m.remove_member("a");
    assert!(member_series(&m.encode(), "a").is_empty());
}
