//! Written by lease holders only: a paused replica writes nothing before it holds again, a
//! stopped one releases its leases and few members move, a removed member is cleaned by its
//! owner only.

use super::*;

/// The substrate of the audited test: the fleet, the hub, where the audit logs are.
struct Env {
    fleet: Fleet,
    hub: kube::Client,
    audit: tempfile::TempDir,
}

impl Env {
    async fn start(replica_names: &[&str]) -> Self {
        let audit = tempfile::tempdir().expect("tempdir");
        let users: Vec<String> = replica_names.iter().map(|n| user(n)).collect();
        let fleet = audited(
            Fleet::builder().members(MEMBERS).quiet(),
            audit.path(),
            &MEMBERS,
            &users,
        )
        .start()
        .await
        .expect("fleet starts");
        let hub = fleet.hub().client().await.expect("hub client");
        Self { fleet, hub, audit }
    }

    /// A Service and its ServiceExport `shop/<name>` in `member`; waits for its ISE.
    async fn export(&self, member: &str, name: &str) {
        let client = self.fleet.member(member).client().await.expect("member");
        namespace(&client, "shop").await;
        create_service(&client, &service("shop", name, 80)).await;
        create_export(&client, "shop", name, &[]).await;
        let ns = self.fleet.hub_namespace(member);
        wait_ise(&self.hub, &ns, &format!("shop-{name}"), |_| true).await;
    }

    /// Every audited write received at or after `since`.
    fn writes_since(&self, since: jiff::Timestamp) -> Vec<Write> {
        let clusters: Vec<&str> = std::iter::once("hub").chain(MEMBERS).collect();
        writes(self.audit.path(), &clusters)
            .into_iter()
            .filter(|w| w.at >= since)
            .collect()
    }

    fn member_of(&self, w: &Write) -> Option<String> {
        w.member(&self.fleet.hub_namespace(""))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_stopped_and_removed_members_are_written_by_lease_holders_only() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    let names = ["replica-a", "replica-b", "replica-c"];
    let env = Env::start(&names).await;
    let mut replicas = vec![];
    for name in names {
        let access = identity(&env.fleet, name, &MEMBERS).await;
        // replica-a, the one paused, writes slowly to members and to the hub: when it is
        // paused, member writes wait for its tokens and ISE creates for the shared hub
        // bucket's, and would go the moment it wakes unless the fence stopped them then.
        let slow: &[&str] = if name == "replica-a" {
            &[
                "--kube-api-qps",
                "2",
                "--kube-api-burst",
                "2",
                "--hub-api-qps",
                "1",
                "--hub-api-burst",
                "1",
            ]
        } else {
            &[]
        };
        replicas.push(replica(
            name,
            &access,
            &[&["--cleanup-on-remove"], slow].concat(),
        ));
    }
    let all: Vec<&Replica> = replicas.iter().collect();
    let three = settled(&env.hub, &all, &MEMBERS).await;
    for m in MEMBERS {
        env.export(m, "cart").await;
    }
    println!("sharding (audited): 3 replicas {three:?}");

    paused_replica_writes_nothing_before_it_holds_again(&env, &all, &three).await;
    let remaining = removed_member_is_cleaned_by_its_owner_only(&env, &all).await;
    let mut replicas = replicas;
    let stopped = replicas.pop().expect("replica-c");
    let survivors: Vec<&Replica> = replicas.iter().collect();
    graceful_stop_releases_and_moves_few(&env, stopped, &survivors, &remaining).await;
}

/// SIGSTOP replica-a for twice the lease duration: its members go to the others and export
/// there (0 ISE deletes); after SIGCONT, none of its writes reaches an apiserver before the
/// apiserver accepted its write of that member's Lease.
async fn paused_replica_writes_nothing_before_it_holds_again(
    env: &Env,
    all: &[&Replica],
    three: &std::collections::BTreeMap<String, String>,
) {
    let (paused, others) = (all[0], &all[1..]);
    let theirs = owned_by(three, paused, &MEMBERS);
    assert!(
        !theirs.is_empty(),
        "{} owns no member: {three:?}",
        paused.name
    );
    let deletes = ise_deletes(&env.hub).await;
    // A burst of exports for its members: their writes queue behind its 2 qps.
    let burst: Vec<String> = (0..BURST).map(|i| format!("burst-{i}")).collect();
    for m in &theirs {
        let client = env.fleet.member(m).client().await.expect("member");
        for name in &burst {
            create_service(&client, &service("shop", name, 80)).await;
            create_export(&client, "shop", name, &[]).await;
        }
    }
    let paused_at = jiff::Timestamp::now();
    paused.pause();
    let t = Instant::now();
    // The others take its members over and export them (while it is still paused).
    let during = settled(&env.hub, others, &MEMBERS).await;
    for m in &theirs {
        env.export(m, "during").await;
        for name in &burst {
            let ise = format!("shop-{name}");
            wait_ise(&env.hub, &env.fleet.hub_namespace(m), &ise, |_| true).await;
        }
    }
    let took_over = t.elapsed();
    // Work for its old members lands the moment it wakes: it would race the new owners for
    // it, and without a valid hold its writes would reach the apiservers.
    let mut late = vec![];
    for m in &theirs {
        let client = env.fleet.member(m).client().await.expect("member");
        create_service(&client, &service("shop", "late", 80)).await;
        late.push(client);
    }
    tokio::time::sleep((2 * LEASE_DURATION).saturating_sub(t.elapsed())).await;
    paused.resume();
    let resumed = jiff::Timestamp::now();
    for client in &late {
        create_export(client, "shop", "late", &[]).await;
    }
    for m in &theirs {
        wait_ise(&env.hub, &env.fleet.hub_namespace(m), "shop-late", |_| true).await;
    }
    println!(
        "sharding: {} paused {:?}; its members {theirs:?} taken over and exported within {took_over:?}",
        paused.name,
        t.elapsed()
    );
    for w in env.writes_since(paused_at) {
        if w.resource == "internalserviceexports" && w.name == "shop-during" {
            let owner = &during[&env.member_of(&w).expect("member")];
            assert_eq!(
                Some(&w.user),
                all.iter()
                    .find(|r| &r.name == owner)
                    .and_then(|r| r.access.user.as_ref()),
                "{w:?} not by the new owner {owner}"
            );
        }
    }

    // Back: it joins again, takes its share, and exports a new Service of one of its members.
    let back = settled(&env.hub, all, &MEMBERS).await;
    let mine = owned_by(&back, paused, &MEMBERS);
    let first = mine
        .first()
        .expect("the resumed replica owns members again");
    env.export(first, "back").await;
    let user = paused.access.user.clone().expect("audited");
    let mut holding = BTreeSet::new();
    let mut checked = 0;
    // Writes that passed the fence just before SIGSTOP but had not left the process (the
    // fence is asked above hyper, which still has to put the request on the connection): they
    // go out on SIGCONT. No client-side fence closes that window; such a write must be one the
    // apiserver refused (its resourceVersion precondition: 409 seen), and only the few in flight.
    let mut in_flight = vec![];
    for w in env
        .writes_since(resumed)
        .into_iter()
        .filter(|w| w.user == user)
    {
        if w.resource == "leases" {
            // Its shards (taken, or a refused attempt: 409), or its announcement.
            holding.extend(MEMBERS.iter().copied().filter(|m| w.holds_shard_of(m)));
            continue;
        }
        let member = env
            .member_of(&w)
            .unwrap_or_else(|| panic!("a write for no member: {w:?}"));
        if !holding.contains(member.as_str()) {
            assert!(
                w.code >= 400,
                "{} wrote {w:?} after SIGCONT before holding {member}'s lease again, and it was accepted",
                paused.name
            );
            in_flight.push(w);
            continue;
        }
        checked += 1;
    }
    println!(
        "sharding: after SIGCONT {} holds {mine:?}; {checked} writes, each after its lease; {} in flight at SIGSTOP, refused: {in_flight:?}",
        paused.name,
        in_flight.len()
    );
    assert!(
        in_flight.len() <= 2,
        "{} writes before holding the lease again: {in_flight:?}",
        in_flight.len()
    );
    assert!(
        checked > 0,
        "the resumed replica's export was not seen in the audit logs"
    );
    assert_eq!(ise_deletes(&env.hub).await, deletes, "no ISE deleted");
}

/// A member's kubeconfig removed (from every replica) with `--cleanup-on-remove`: its ISEs
/// go, its ServiceExports lose the finalizer, and every write for it comes from its owner.
/// Returns the members left.
async fn removed_member_is_cleaned_by_its_owner_only(
    env: &Env,
    all: &[&Replica],
) -> Vec<&'static str> {
    let owners = settled(&env.hub, all, &MEMBERS).await;
    // Of the members a replica at full speed owns, the one with the most ISEs: the slow
    // replica (all[0]: 1 hub write a second) would take 18 s for the 18 ISEs of a member it
    // exported a burst for, most of the 30 s a wait below allows, which measures its budget.
    let mut removed = None;
    for m in MEMBERS.iter().filter(|m| owners[**m] != all[0].name) {
        let ns = env.fleet.hub_namespace(m);
        let count = ises(&env.hub, &ns)
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .len();
        if removed.is_none_or(|(_, most)| count > most) {
            removed = Some((*m, count));
        }
    }
    let (removed, before) = removed.expect("a member owned by a replica at full speed");
    let owner = all
        .iter()
        .find(|r| r.name == owners[removed])
        .expect("owner");
    let ns = env.fleet.hub_namespace(removed);
    let ises = ises(&env.hub, &ns);
    assert!(before > 0, "{removed} exports nothing");
    let since = jiff::Timestamp::now();
    let t = Instant::now();
    for r in all {
        std::fs::remove_file(r.access.kubeconfig_dir.join(format!("{removed}.yaml")))
            .expect("remove kubeconfig");
    }
    eventually(&format!("{removed}'s ISEs cleaned"), || async {
        let left = ises.list(&Default::default()).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    let member = env.fleet.member(removed).client().await.expect("member");
    eventually(&format!("{removed}'s finalizers removed"), || async {
        let list = exports(&member, "shop")
            .list(&Default::default())
            .await
            .ok()?;
        list.items
            .iter()
            .all(|se| !se.has_cleanup_finalizer())
            .then_some(())
    })
    .await;
    let cleaned = t.elapsed();
    let user = owner.access.user.clone().expect("audited");
    let for_it: Vec<Write> = env
        .writes_since(since)
        .into_iter()
        .filter(|w| env.member_of(w).as_deref() == Some(removed))
        .collect();
    for w in &for_it {
        assert_eq!(
            w.user, user,
            "{w:?}: a write for {removed} not by its owner {}",
            owner.name
        );
    }
    let deleted = for_it
        .iter()
        .filter(|w| w.resource == "internalserviceexports" && w.verb == "delete")
        .count();
    println!(
        "sharding: {removed} removed; its owner {} deleted {deleted} of {before} ISEs; {} writes for it, all by the owner; cleaned in {cleaned:?}",
        owner.name,
        for_it.len()
    );
    assert!(deleted >= before, "{deleted} ISE deletes for {before} ISEs");
    MEMBERS.iter().copied().filter(|m| *m != removed).collect()
}

/// SIGTERM one replica (3 -> 2): it exits by itself having released its member Leases and
/// withdrawn its announcement; at most ceil(members/3) + 1 members move; every member is owned
/// and exporting again; no ISE deleted.
async fn graceful_stop_releases_and_moves_few(
    env: &Env,
    mut stopped: Replica,
    survivors: &[&Replica],
    members: &[&str],
) {
    let mut all = survivors.to_vec();
    all.push(&stopped);
    let before = settled(&env.hub, &all, members).await;
    let held = owned_by(&before, &stopped, members);
    let deletes = ise_deletes(&env.hub).await;
    let took = stopped.terminate();
    let holders = holders(&env.hub, members).await;
    assert!(
        holders.values().all(|h| !stopped.is(h)),
        "{} exited still holding shard leases: {holders:?}",
        stopped.name
    );
    assert!(
        announced(&env.hub).await.iter().all(|h| !stopped.is(h)),
        "{} left its announcement",
        stopped.name
    );
    let after = settled(&env.hub, survivors, members).await;
    let moved = members.iter().filter(|m| before[**m] != after[**m]).count();
    println!(
        "sharding: {} stopped by SIGTERM in {took:?} (held {held:?}); {moved} of {} members moved: {after:?}",
        stopped.name,
        members.len()
    );
    assert!(
        moved <= members.len().div_ceil(3) + 1,
        "{moved} members moved when a replica left"
    );
    for m in &held {
        env.export(m, "after").await;
    }
    for m in members {
        wait_ise(&env.hub, &env.fleet.hub_namespace(m), "shop-cart", |_| true).await;
    }
    assert_eq!(
        ise_deletes(&env.hub).await,
        deletes,
        "no ISE deleted by the scale-down"
    );
}
