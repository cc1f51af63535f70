//! Conflicts on the hub: the loser of a hub-name collision takes over when the winner goes;
//! a terminating ISE's verdict is not reflected.

use super::*;

// ---------------------------------------------------------------------------------------------
// 5. Hub-name collisions.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collision_loser_takes_over_when_the_winner_goes() {
    const M: &str = "m1";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    for ns in ["a", "a-b"] {
        namespace(&member, ns).await;
    }
    let running = started_in_process(&fleet, M).await;

    // The winner: a-b/c, exported first.
    create_service(&member, &service("a-b", "c", 80)).await;
    create_export(&member, "a-b", "c", &[]).await;
    let winner = wait_ise(&hub, &hub_ns, "a-b-c", |i| {
        i.spec.service_reference.namespaced_name == "a-b/c"
    })
    .await;
    // The loser: a/b-c, same hub name.
    create_service(&member, &service("a", "b-c", 81)).await;
    create_export(&member, "a", "b-c", &[]).await;
    wait_condition(
        &member,
        "a",
        "b-c",
        CONDITION_VALID,
        "False",
        "ServiceExportNameCollision",
    )
    .await;
    let ise = ises(&hub, &hub_ns).get("a-b-c").await.expect("ISE");
    assert_eq!(ise.spec.service_reference.namespaced_name, "a-b/c");
    assert_eq!(
        ise.metadata.uid, winner.metadata.uid,
        "the winner's ISE stands"
    );

    // The winner goes; the test does not touch the loser.
    let deleted = Instant::now();
    exports(&member, "a-b")
        .delete("c", &DeleteParams::default())
        .await
        .expect("delete the winner");
    let ise = within(Duration::from_secs(60), "a-b-c carries a/b-c", || {
        let api = ises(&hub, &hub_ns);
        async move {
            api.get_opt("a-b-c").await.ok().flatten().filter(|i| {
                i.spec.service_reference.namespaced_name == "a/b-c"
                    && i.metadata.deletion_timestamp.is_none()
            })
        }
    })
    .await;
    let took = deleted.elapsed();
    assert_eq!(
        ise.spec.ports[0].port, 81,
        "the loser's Service is exported"
    );
    let se = within(Duration::from_secs(60), "a/b-c Valid=True", || {
        let api = exports(&member, "a");
        async move {
            api.get_opt("b-c").await.ok().flatten().filter(|se| {
                condition(se, CONDITION_VALID)
                    .is_some_and(|(s, r, _)| s == "True" && r == "ServiceIsValid")
            })
        }
    })
    .await;
    println!(
        "[restart] the loser took over {took:?} after the winner's deletion; loser {:?}",
        condition(&se, CONDITION_VALID)
    );
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 8. A terminating ISE's verdict.
// ---------------------------------------------------------------------------------------------

fn verdict(status: &str, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"status": {"conditions": [{
        "type": CONDITION_CONFLICT, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}})
}

async fn write_verdict(hub: &kube::Client, hub_ns: &str, name: &str, body: &serde_json::Value) {
    ises(hub, hub_ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .expect("hub verdict");
}

/// Asserts, every 200 ms for `period`, that held's Conflict stays Unknown (pending).
async fn stays_pending(
    se_api: &Api<fleetnet_hub::api::ServiceExport>,
    period: Duration,
    why: &str,
) {
    let until = Instant::now() + period;
    while Instant::now() < until {
        let se = se_api.get("held").await.expect("ServiceExport");
        let pending = ("Unknown".into(), "ServicePendingConflictResolution".into());
        assert_eq!(conflict_of(&se), pending, "{why}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn conflict_of(se: &fleetnet_hub::api::ServiceExport) -> (String, String) {
    condition(se, CONDITION_CONFLICT)
        .map(|(s, r, _)| (s, r))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_ise_is_not_reflected_as_a_verdict() {
    const M: &str = "m1";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let running = started_in_process(&fleet, M).await;
    create_pairs(&member, NS, vec!["held".into()]).await;
    let first = wait_ise(&hub, &hub_ns, "work-held", |_| true).await;
    let api = ises(&hub, &hub_ns);
    api.patch(
        "work-held",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": [HOLD_FINALIZER]}})),
    )
    .await
    .expect("hold finalizer");

    // Control: a verdict on a live ISE is copied.
    write_verdict(
        &hub,
        &hub_ns,
        "work-held",
        &verdict("True", "ConflictFound", "work/held is in conflict (test)"),
    )
    .await;
    wait_condition(
        &member,
        NS,
        "held",
        CONDITION_CONFLICT,
        "True",
        "ConflictFound",
    )
    .await;

    // The ISE is deleted (held by the finalizer), then a new verdict lands on it.
    api.delete("work-held", &DeleteParams::default())
        .await
        .expect("delete ISE");
    let terminating = api.get("work-held").await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    write_verdict(
        &hub,
        &hub_ns,
        "work-held",
        &verdict(
            "False",
            "NoConflictFound",
            "work/held has no conflict (test)",
        ),
    )
    .await;
    let written = Instant::now();
    let se_api = exports(&member, NS);
    let mut seen = BTreeSet::new();
    loop {
        let se = se_api.get("held").await.expect("ServiceExport");
        let c = conflict_of(&se);
        seen.insert(c.clone());
        assert_ne!(
            c.0, "False",
            "the terminating ISE's verdict was copied to the ServiceExport (seen {seen:?})"
        );
        if c == ("Unknown".into(), "ServicePendingConflictResolution".into()) {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(30),
            "Conflict not Unknown within 30 s while the ISE terminates: seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "[restart] Conflict Unknown {:?} after the terminating ISE's verdict; seen {seen:?}",
        written.elapsed()
    );
    // And it stays so while the ISE is held.
    stays_pending(&se_api, Duration::from_secs(3), "while the ISE terminates").await;
    let still = api.get("work-held").await.expect("held");
    assert!(still.metadata.deletion_timestamp.is_some());
    assert_eq!(still.metadata.uid, first.metadata.uid, "still the held ISE");

    // Released: the ISE goes, the product creates a new one; Conflict stays Unknown until the
    // hub speaks about the new one.
    api.patch(
        "work-held",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release finalizer");
    let released = Instant::now();
    let second = within(Duration::from_secs(60), "a new ISE", || {
        let api = api.clone();
        let old = first.metadata.uid.clone();
        async move {
            api.get_opt("work-held")
                .await
                .ok()
                .flatten()
                .filter(|i| i.metadata.uid != old && i.metadata.deletion_timestamp.is_none())
        }
    })
    .await;
    println!(
        "[restart] new ISE {:?} after the release",
        released.elapsed()
    );
    stays_pending(
        &se_api,
        Duration::from_secs(2),
        "no verdict on the new ISE yet",
    )
    .await;
    assert!(second.conditions().is_empty());
    write_verdict(
        &hub,
        &hub_ns,
        "work-held",
        &verdict(
            "False",
            "NoConflictFound",
            "work/held has no conflict (test)",
        ),
    )
    .await;
    wait_condition(
        &member,
        NS,
        "held",
        CONDITION_CONFLICT,
        "False",
        "NoConflictFound",
    )
    .await;
    running.shutdown().await;
}
