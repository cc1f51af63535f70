//! A restart changes nothing: a converged fleet restarted makes no write and no Event; a
//! kill in the middle of exporting deletes no ISE and leaves one per export; quick
//! create/delete leaves nothing behind.

use super::*;

// ---------------------------------------------------------------------------------------------
// 1. A converged fleet restarted: no write, no event.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converged_fleet_restarted_gracefully_then_killed_makes_no_write_and_no_event() {
    const MEMBERS: [&str; 3] = ["m1", "m2", "m3"];
    const EXPORTS: usize = 100;
    let fleet = Fleet::builder()
        .members(MEMBERS)
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let counted = Counted::new(&fleet).await;
    let mut clients = vec![];
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member client");
        namespace(&client, NS).await;
        clients.push(client);
    }
    let created = Instant::now();
    futures::future::join_all(
        clients
            .iter()
            .map(|c| create_pairs(c, NS, names("svc", 0..EXPORTS))),
    )
    .await;
    println!(
        "[restart] created {} Service+ServiceExport pairs in {:?}",
        EXPORTS * MEMBERS.len(),
        created.elapsed()
    );

    let dir = kubeconfig_dir(&fleet, "restart-kubeconfigs", &MEMBERS);
    let mut process = HubProcess::spawn(&fleet, &dir, FAST_HUB, "first");
    let ready = process.wait_ready(&MEMBERS, Duration::from_secs(90)).await;
    println!("[restart] first process ready after {ready:?}");
    let started = Instant::now();
    for (m, client) in MEMBERS.iter().zip(&clients) {
        wait_converged(
            &hub,
            &fleet.hub_namespace(m),
            client,
            EXPORTS,
            Duration::from_secs(180),
        )
        .await;
    }
    println!(
        "[restart] {} exports converged {:?} after the process was ready",
        EXPORTS * MEMBERS.len(),
        started.elapsed()
    );
    let mut verbs = BTreeSet::new();
    for (cluster, client) in &counted.clusters {
        let seen = apiserver_verbs(client).await;
        println!("[restart] verb labels of apiserver_request_total on {cluster}: {seen:?}");
        verbs.extend(seen);
    }
    assert!(
        verbs.contains("POST") && verbs.iter().any(|v| WRITE_VERBS.contains(&v.as_str())),
        "unexpected verb spellings: {verbs:?}"
    );

    let converged = counted.settled(Duration::from_secs(2)).await;
    for (cluster, writes) in &converged {
        println!("[restart] {cluster} writes while exporting: {writes:?}");
    }
    assert!(
        total(&converged["hub"], "internalserviceexports", "POST")
            >= (EXPORTS * MEMBERS.len()) as u64,
        "the counting sees the product's ISE creations: {converged:?}"
    );

    /// Starts the hub again as `label`, waits for its reconcile of every export and 5 s more,
    /// and adds to `failures` each cluster that saw writes or Events since `before`.
    async fn restarted(
        fleet: &Fleet,
        dir: &Path,
        counted: &Counted,
        before: &BTreeMap<String, Writes>,
        label: &str,
        failures: &mut Vec<String>,
    ) -> HubProcess {
        let mut process = HubProcess::spawn(fleet, dir, FAST_HUB, label);
        let ready = process.wait_ready(&MEMBERS, Duration::from_secs(90)).await;
        let reconciled = process
            .wait_reconciled(&MEMBERS, EXPORTS, Duration::from_secs(60))
            .await;
        println!("[restart] {label}: ready after {ready:?}; reconciles {reconciled}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = counted.snapshot().await;
        for (cluster, (writes, events, detail)) in delta(before, &after) {
            let line = format!("{label}: {cluster}: {writes} writes, {events} events {detail:?}");
            println!("[restart] {line}");
            if writes + events > 0 {
                failures.push(line);
            }
        }
        process
    }

    let mut failures = vec![];
    let status = process.terminate().await;
    assert!(
        status.success(),
        "SIGTERM ends the process cleanly: {status}"
    );
    let process = restarted(
        &fleet,
        &dir,
        &counted,
        &converged,
        "after-sigterm",
        &mut failures,
    )
    .await;
    let before_kill = counted.snapshot().await;
    process.kill().await;
    let process = restarted(
        &fleet,
        &dir,
        &counted,
        &before_kill,
        "after-sigkill",
        &mut failures,
    )
    .await;
    let _ = process.terminate().await;
    assert!(
        failures.is_empty(),
        "a restart of a converged fleet wrote:\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 2. kill -9 in the middle of exporting.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_9_during_creation_deletes_no_ise_and_leaves_one_per_export() {
    const M: &str = "m1";
    const FIRST: usize = 50;
    const MORE: usize = 100;
    // A slow hub budget keeps the second batch in flight long enough to be killed midway.
    const SLOW_HUB: u32 = 8;
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let counted = Counted::new(&fleet).await;
    let at_start = counted.snapshot().await;

    create_pairs(&member, NS, names("old", 0..FIRST)).await;
    let dir = kubeconfig_dir(&fleet, "restart-kubeconfigs", &[M]);
    let mut process = HubProcess::spawn(&fleet, &dir, SLOW_HUB, "before-kill");
    process.wait_ready(&[M], Duration::from_secs(90)).await;
    wait_converged(&hub, &hub_ns, &member, FIRST, Duration::from_secs(90)).await;

    // The second batch, created concurrently while the process exports it.
    let creating = {
        let member = member.clone();
        tokio::spawn(async move { create_pairs(&member, NS, names("new", 0..MORE)).await })
    };
    let started = Instant::now();
    let seen = within(Duration::from_secs(90), "30 new ISEs", || {
        let hub = &hub;
        let hub_ns = &hub_ns;
        async move {
            let n = list_ises(hub, hub_ns)
                .await
                .iter()
                .filter(|i| {
                    i.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("work-new-"))
                })
                .count();
            (n >= 30).then_some(n)
        }
    })
    .await;
    process.kill().await;
    let at_kill = list_ises(&hub, &hub_ns).await.len();
    println!(
        "[restart] kill -9 after {:?}: {seen} new ISEs seen, {at_kill} ISEs in the hub",
        started.elapsed()
    );
    assert!(
        at_kill < FIRST + MORE,
        "the kill came after everything was exported ({at_kill} ISEs): nothing was interrupted"
    );
    creating.await.expect("second batch created");

    let mut process = HubProcess::spawn(&fleet, &dir, SLOW_HUB, "after-kill");
    process.wait_ready(&[M], Duration::from_secs(90)).await;
    let restarted = Instant::now();
    wait_converged(
        &hub,
        &hub_ns,
        &member,
        FIRST + MORE,
        Duration::from_secs(90),
    )
    .await;
    println!(
        "[restart] converged {:?} after the restart",
        restarted.elapsed()
    );
    let end = counted.settled(Duration::from_secs(2)).await;
    let _ = process.terminate().await;

    let deletes = total(&end["hub"], "internalserviceexports", "DELETE")
        + total(&end["hub"], "internalserviceexports", "DELETECOLLECTION")
        - total(&at_start["hub"], "internalserviceexports", "DELETE")
        - total(
            &at_start["hub"],
            "internalserviceexports",
            "DELETECOLLECTION",
        );
    let creates = total(&end["hub"], "internalserviceexports", "POST")
        - total(&at_start["hub"], "internalserviceexports", "POST");
    println!("[restart] hub: {creates} ISE creations (POST), {deletes} ISE deletions");
    assert_eq!(deletes, 0, "no ISE is ever deleted");

    let ses = list_exports(&member, NS).await;
    let want: BTreeSet<String> = ses
        .iter()
        .map(|se| format!("{NS}-{}", se.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(want.len(), FIRST + MORE);
    let all_ises = list_ises(&hub, &hub_ns).await;
    let have: Vec<String> = all_ises
        .iter()
        .filter_map(|i| i.metadata.name.clone())
        .collect();
    let have_set: BTreeSet<String> = have.iter().cloned().collect();
    assert_eq!(have.len(), have_set.len());
    assert_eq!(
        have_set.difference(&want).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "ISEs without a ServiceExport"
    );
    assert_eq!(
        want.difference(&have_set).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "ServiceExports without an ISE"
    );
    for ise in &all_ises {
        let name = ise.metadata.name.as_deref().unwrap_or_default();
        let reference = &ise.spec.service_reference;
        assert_eq!(reference.cluster_id, M, "{name}");
        assert_eq!(
            format!("{NS}-{}", reference.name),
            name,
            "{name} carries {}",
            reference.namespaced_name
        );
        assert_eq!(
            reference.namespaced_name,
            format!("{NS}/{}", reference.name)
        );
        assert!(
            ise.metadata.deletion_timestamp.is_none(),
            "{name} terminating"
        );
    }
    let invalid: Vec<_> = ses
        .iter()
        .filter(|se| !is_valid(se))
        .map(|se| (se.metadata.name.clone(), condition(se, CONDITION_VALID)))
        .collect();
    assert!(invalid.is_empty(), "not Valid=True: {invalid:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. Created and deleted at once.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_create_then_delete_leaves_no_ise_and_no_finalizer() {
    const M: &str = "m1";
    const N: usize = 50;
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let quick = names("quick", 0..N);
    futures::stream::iter(quick.clone())
        .for_each_concurrent(16, |name| {
            let member = member.clone();
            async move {
                create_service(&member, &service(NS, &name, 80)).await;
            }
        })
        .await;
    let running = started_in_process(&fleet, M).await;

    let started = Instant::now();
    futures::stream::iter(quick.clone())
        .for_each_concurrent(10, |name| {
            let member = member.clone();
            async move {
                create_export(&member, NS, &name, &[]).await;
                exports(&member, NS)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .expect("delete ServiceExport");
            }
        })
        .await;
    println!(
        "[restart] {N} ServiceExports created and deleted in {:?}",
        started.elapsed()
    );
    let gone = loop {
        let left = list_exports(&member, NS).await;
        if left.is_empty() {
            break started.elapsed();
        }
        let stuck: Vec<_> = left
            .iter()
            .map(|se| (se.metadata.name.clone(), se.metadata.finalizers.clone()))
            .collect();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ServiceExports still there after 60 s (stuck on a finalizer?): {stuck:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("[restart] all {N} ServiceExports gone {gone:?} after the first was created");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left: Vec<String> = list_ises(&hub, &hub_ns)
        .await
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .filter(|n| n.starts_with("work-quick-"))
        .collect();
    let reconciles = sum(
        &running.metrics.encode(),
        "fleetnet_reconcile_total",
        &[&format!("member=\"{M}\"")],
    );
    println!("[restart] {reconciles} reconciles; ISEs left: {left:?}");
    assert!(
        left.is_empty(),
        "ISEs left behind by deleted exports: {left:?}"
    );
    running.shutdown().await;
}
