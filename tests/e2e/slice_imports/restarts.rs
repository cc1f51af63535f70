//! Restarted: what was imported stays as it is, with no write and no second data point.

use super::*;

/// The slices settled writes once they have not moved for 2 s.
async fn settled(member: &kube::Client, hub: &kube::Client) -> f64 {
    let mut last = import_writes(member, hub).await;
    let mut since = tokio::time::Instant::now();
    let started = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = import_writes(member, hub).await;
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        } else if since.elapsed() >= Duration::from_secs(2) {
            return now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "writes never settled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_writes_nothing_and_observes_nothing_again() {
    const N: usize = 10;
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS, FLEET_NS]).await;
    create_mcs(&member, Some(DERIVED)).await;
    create_derived(&member, None).await;
    let names: Vec<String> = (0..N).map(|i| format!("m2-work-app-{i}")).collect();
    for name in &names {
        create_import(&hub, &hub_ns, &import_of(&hub_ns, name, false)).await;
    }
    let before = import_writes(&member, &hub).await;
    let first = start(&fleet).await;
    for name in &names {
        eventually("processed", || processed(&hub, &hub_ns, name)).await;
    }
    let converged = settled(&member, &hub).await;
    // Per import, as the reference: the finalizer, the slice, the annotation; none twice.
    assert_eq!(converged - before, (3 * N) as f64);
    assert_eq!(observed(&first, true), N as f64);
    first.shutdown().await;

    let second = start(&fleet).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(settled(&member, &hub).await, converged, "a restart wrote");
    assert_eq!(observed(&second, true) + observed(&second, false), 0.0);
    let text = second.metrics.encode_prometheus();
    assert!(
        sum(
            &text,
            "fleetnet_reconcile_total",
            &["outcome=\"endpointsliceimport:unchanged\""]
        ) >= N as f64,
        "every import reconciled after the restart:\n{text}"
    );
    second.shutdown().await;
}

/// Taken over from an agent that had imported everything (the slice, the finalizer, the
/// observed generation): not one write, no data point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_converged_import_is_taken_over_without_a_write() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS, FLEET_NS]).await;
    create_mcs(&member, Some(DERIVED)).await;
    create_derived(&member, None).await;
    imported(&member)
        .create(&PostParams::default(), &agent_slice(IMPORT))
        .await
        .expect("agent's slice");
    let mut import = import_of(&hub_ns, IMPORT, true);
    import.metadata.annotations = Some(
        [(
            LAST_OBSERVED_GENERATION_ANNOTATION.to_string(),
            "1".to_string(),
        )]
        .into(),
    );
    create_import(&hub, &hub_ns, &import).await;
    let before = import_writes(&member, &hub).await;
    let running = start(&fleet).await;
    eventually("reconciled", || async {
        let text = running.metrics.encode_prometheus();
        let unchanged = ["outcome=\"endpointsliceimport:unchanged\""];
        (sum(&text, "fleetnet_reconcile_total", &unchanged) >= 1.0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(import_writes(&member, &hub).await, before, "a write");
    assert_eq!(observed(&running, true) + observed(&running, false), 0.0);
    running.shutdown().await;
}
