//! Issue #15: the benchmark's measurement code (`fleetnet_bench`, what `fleetnet-bench`
//! runs) on 2 members × 20 exports, asserting counts only — never timings, which depend on the
//! machine. Writes are counted server-side by the apiservers (`apiserver_request_total`).

use std::collections::BTreeMap;
use std::time::Duration;

use fleetnet_bench::{self as bench, Churn, Config, WriteCount};

fn by_key(writes: &[WriteCount]) -> BTreeMap<(String, String), u64> {
    writes
        .iter()
        .map(|w| ((w.resource.clone(), w.verb.clone()), w.count))
        .collect()
}

fn key(resource: &str, verb: &str) -> (String, String) {
    (resource.to_string(), verb.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_exports_cost_three_writes_and_two_events_and_a_quiet_fleet_writes_nothing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
    const MEMBERS: usize = 2;
    const EXPORTS: usize = 20;
    let config = Config {
        members: MEMBERS,
        exports: EXPORTS,
        quiet: Duration::from_secs(10),
        churn: Some(Churn {
            rate: 5.0,
            duration: Duration::from_secs(2),
        }),
        converge_timeout: Duration::from_secs(60),
        idle_settle: Duration::from_secs(1),
        ..Config::default()
    };
    let report = bench::run(&config).await.expect("benchmark run");
    println!("{}", bench::markdown(&report));

    let fresh = (MEMBERS * EXPORTS) as u64;
    let expected = BTreeMap::from([
        (key("serviceexports", "PATCH"), fresh),
        (key("serviceexports/status", "PATCH"), fresh),
        (key("internalserviceexports", "POST"), fresh),
        (key("events", "POST"), 2 * fresh),
    ]);
    assert_eq!(
        by_key(&report.cold_writes),
        expected,
        "per fresh export: 1 metadata PATCH + 1 status PATCH of the ServiceExport, 1 ISE POST, 2 Events"
    );
    assert!(
        report.verbs_seen.iter().any(|v| v == "POST")
            && report.verbs_seen.iter().any(|v| v == "PATCH"),
        "the apiserver spells verbs as counted: {:?}",
        report.verbs_seen
    );
    assert_eq!(report.cold_409, 0, "409s while exporting");
    assert_eq!(
        report.quiet_writes,
        vec![],
        "writes in the quiet period after convergence"
    );
    let churn = report.churn.as_ref().expect("churn ran");
    assert_eq!(
        (churn.reflected, churn.failed),
        (churn.changes, 0),
        "every Service change reached its ISE"
    );
}
