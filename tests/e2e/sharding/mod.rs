//! Members sharded across replicas of the real binary (`--shard-members`), on real apiservers:
//! every member owned by exactly one replica (its member Lease) and written only by it; a
//! replica killed with SIGKILL has its members taken over within the lease duration + 5 s
//! with no ISE deleted; a third replica takes at most ceil(members/3) + 1 members. A replica
//! paused (SIGSTOP) for twice the lease duration writes nothing after SIGCONT before it holds a
//! lease again; a replica stopped gracefully (SIGTERM) releases its leases and few members
//! move; a member removed with `--cleanup-on-remove` is cleaned by its owner only. Writes are
//! attributed server-side: each replica has its own identity and the apiservers audit them.

use crate::support;
use crate::support::replicas;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;
use replicas::*;
use support::*;

const MEMBERS: [&str; 6] = ["m1", "m2", "m3", "m4", "m5", "m6"];

/// One test of this file at a time: each runs a hub, members and two or three replicas, and
/// together they would load two cores until member probes time out, which measures the machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Exports created for the paused replica's members just before it is paused.
const BURST: usize = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_sharded_written_by_owners_only_and_fail_over() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let admin = Access::admin(&fleet);

    // Two replicas, then a third: few members move.
    let a = replica("replica-a", &admin, &[]);
    let b = replica("replica-b", &admin, &[]);
    let two = settled(&hub, &[&a, &b], &MEMBERS).await;
    let c = replica("replica-c", &admin, &[]);
    let three = settled(&hub, &[&a, &b, &c], &MEMBERS).await;
    let moved = MEMBERS.iter().filter(|m| two[**m] != three[**m]).count();
    println!("sharding: 2 replicas {two:?}; 3 replicas {three:?}; {moved} moved");
    assert!(
        moved <= MEMBERS.len().div_ceil(3) + 1,
        "{moved} members moved when a third replica came"
    );

    // Every member exports, written only by its owner.
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member client");
        namespace(&client, "shop").await;
        create_service(&client, &service("shop", "cart", 80)).await;
        create_export(&client, "shop", "cart", &[]).await;
    }
    for m in MEMBERS {
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-cart", |_| true).await;
    }
    let replicas = [&a, &b, &c];
    for r in replicas {
        let writes = r.member_writes().await;
        for (member, n) in &writes {
            if *n > 0.0 {
                assert_eq!(
                    three.get(member),
                    Some(&r.name),
                    "{} wrote {n} times to {member}, owned by {:?}",
                    r.name,
                    three.get(member)
                );
            }
        }
    }
    let deletes_before = ise_deletes(&hub).await;

    // SIGKILL the owner of m1: its members move to the others and export again.
    let victim_name = three["m1"].clone();
    let (mut victim, survivors): (Vec<Replica>, Vec<Replica>) =
        [a, b, c].into_iter().partition(|r| r.name == victim_name);
    let orphans: Vec<String> = three
        .iter()
        .filter(|(_, o)| **o == victim_name)
        .map(|(m, _)| m.clone())
        .collect();
    let mut victim = victim.pop().expect("victim");
    victim.kill();
    let killed = Instant::now();
    let survivors: Vec<&Replica> = survivors.iter().collect();
    let took_over = loop {
        let holders = holders(&hub, &MEMBERS).await;
        if holders.len() == MEMBERS.len() && holders.values().all(|h| !victim.is(h)) {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(90), "no failover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    settled(&hub, &survivors, &MEMBERS).await;
    for m in &orphans {
        let client = fleet.member(m).client().await.expect("member client");
        create_service(&client, &service("shop", "after", 80)).await;
        create_export(&client, "shop", "after", &[]).await;
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-after", |_| true).await;
    }
    let exported = killed.elapsed();
    println!(
        "sharding: {victim_name} killed; its {} members owned again after {took_over:?}, a new export of each in the hub after {exported:?}",
        orphans.len()
    );
    assert!(
        took_over < LEASE_DURATION + Duration::from_secs(5),
        "failover took {took_over:?}"
    );
    assert_eq!(
        ise_deletes(&hub).await,
        deletes_before,
        "no ISE deleted by the failover"
    );
    for m in MEMBERS {
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-cart", |_| true).await;
    }

    // The killed replica never deletes its announcement: the survivors collect it once nobody
    // has renewed it for two lease durations, and keep their own.
    let collected = loop {
        let announced = announced(&hub).await;
        if !announced.iter().any(|h| victim.is(h)) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < 2 * LEASE_DURATION + Duration::from_secs(30),
            "the announcement of {victim_name}, killed, is still there: {announced:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let announced = announced(&hub).await;
    for r in &survivors {
        assert!(
            announced.iter().any(|h| r.is(h)),
            "{} lost its announcement: {announced:?}",
            r.name
        );
    }
    println!("sharding: the announcement of {victim_name} collected {collected:?} after the kill");
}

/// 300 member names on one member API server (each name its own kubeconfig and hub namespace,
/// as 300 clusters would be) over 3 replicas: every member owned by exactly one; then a quiet
/// minute in which no shard changes hands and the hub, counting for itself, serves the Lease
/// traffic of the three within a bound that does not depend on the member count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_members_stay_put_and_coordination_stays_constant() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    const NAMES: usize = 300;
    const QUIET: Duration = Duration::from_secs(60);
    let (fleet, hub) = quiet_fleet(["m1"]).await;
    let dir = fleet.scratch_dir().join("fleet-of-300");
    std::fs::create_dir_all(&dir).expect("kubeconfig dir");
    let kubeconfig =
        std::fs::read(fleet.member_kubeconfig_dir().join("m1.yaml")).expect("m1 kubeconfig");
    let names: Vec<String> = (0..NAMES).map(|i| format!("f{i:03}")).collect();
    for name in &names {
        std::fs::write(dir.join(format!("{name}.yaml")), &kubeconfig).expect("kubeconfig");
        fleetnet_testenv::ensure_namespace(&hub, "hub", &fleet.hub_namespace(name))
            .await
            .expect("hub namespace");
    }
    let access = Access {
        kubeconfig_dir: dir,
        ..Access::admin(&fleet)
    };
    let replicas: Vec<Replica> = ["replica-a", "replica-b", "replica-c"]
        .iter()
        .map(|name| replica(name, &access, &[]))
        .collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let members: Vec<&str> = names.iter().map(String::as_str).collect();
    let started = Instant::now();
    let before = settled(&hub, &all, &members).await;
    let engaged = started.elapsed();

    let transitions = shard_transitions(&hub).await;
    let leases = ["resource=\"leases\""];
    let (lease_requests, requests) = (
        hub_requests(&hub, &leases).await,
        hub_requests(&hub, &[]).await,
    );
    let quiet = Instant::now();
    tokio::time::sleep(QUIET).await;
    let secs = quiet.elapsed().as_secs_f64();
    let lease_rate = (hub_requests(&hub, &leases).await - lease_requests) / secs;
    let hub_rate = (hub_requests(&hub, &[]).await - requests) / secs;
    let after = ownership(&hub, &all, &members).await;
    let per_replica: Vec<usize> = all
        .iter()
        .map(|r| before.values().filter(|o| **o == r.name).count())
        .collect();
    println!(
        "sharding: {NAMES} members on 3 replicas ({per_replica:?}) engaged in {engaged:?}; quiet {secs:.0} s: hub {hub_rate:.1} requests/s, {lease_rate:.1} of them Leases; {} shard hand-offs",
        shard_transitions(&hub).await - transitions
    );
    assert_eq!(
        after.as_ref(),
        Some(&before),
        "members changed owner while nothing changed"
    );
    assert_eq!(
        shard_transitions(&hub).await,
        transitions,
        "shards changed hands while nothing changed"
    );
    // 3 × (list + announcement) + one renewal per shard (17), every 2 s: 11.5/s, whatever the
    // number of members.
    assert!(
        lease_rate <= 13.0,
        "{lease_rate:.1} Lease requests/s for 3 replicas"
    );
}

/// Two replicas on a hub budget of 1 request/s, one of them with a backlog of ISE creates: the
/// hub stays reachable for both (reads go before writes); when the other is killed (SIGKILL), its
/// members are synced on the survivor within seconds of the takeover despite the backlog, and
/// a new export of one of them reaches the hub within the lease duration + a few tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_traffic_never_waits_behind_a_backlog_of_writes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    const BACKLOG: usize = 30;
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let admin = Access::admin(&fleet);
    let budget = ["--hub-api-qps", "1", "--hub-api-burst", "1"];
    let a = replica("replica-a", &admin, &budget);
    let mut b = replica("replica-b", &admin, &budget);
    let owners = settled(&hub, &[&a, &b], &MEMBERS).await;
    let of = |r: &Replica| owned_by(&owners, r, &MEMBERS);
    let (busy, orphans) = (of(&a)[0], of(&b));
    // The backlog: BACKLOG ISE creates for one of a's members, at 1/s.
    let client = fleet.member(busy).client().await.expect("member");
    namespace(&client, "shop").await;
    for i in 0..BACKLOG {
        create_service(&client, &service("shop", &format!("bulk-{i}"), 80)).await;
        create_export(&client, "shop", &format!("bulk-{i}"), &[]).await;
    }
    for m in &orphans {
        let client = fleet.member(m).client().await.expect("member");
        namespace(&client, "shop").await;
        create_service(&client, &service("shop", "after", 80)).await;
    }
    b.kill();
    let killed = Instant::now();
    let mut unreachable = 0;
    let took_over = loop {
        if a.hub_reachable().await != Some(true) {
            unreachable += 1;
        }
        let holders = holders(&hub, &MEMBERS).await;
        if orphans
            .iter()
            .all(|m| holders.get(*m).is_some_and(|h| a.is(h)))
        {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "no takeover");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let synced = loop {
        if a.hub_reachable().await != Some(true) {
            unreachable += 1;
        }
        let engaged = a.engaged().await;
        if orphans.iter().all(|m| engaged.contains(*m)) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(90),
            "orphans not synced"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for m in &orphans {
        let client = fleet.member(m).client().await.expect("member");
        create_export(&client, "shop", "after", &[]).await;
    }
    for m in &orphans {
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-after", |_| true).await;
    }
    let exported = killed.elapsed();
    let backlog_left = BACKLOG
        - ises(&hub, &fleet.hub_namespace(busy))
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .len();
    println!(
        "sharding (hub budget 1/s, {BACKLOG} creates queued): {} orphans owned after {took_over:?}, synced after {synced:?}, new exports in the hub after {exported:?} with {backlog_left} creates still queued; hub unreachable in {unreachable} probes",
        orphans.len()
    );
    assert_eq!(
        unreachable, 0,
        "the hub was reported unreachable behind our own queue"
    );
    assert!(
        synced < took_over + Duration::from_secs(10),
        "handed-over members synced {:?} after the takeover",
        synced - took_over
    );
    assert!(
        exported < LEASE_DURATION + Duration::from_secs(15),
        "new exports of the orphans took {exported:?}"
    );
}

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

fn owned_by<'a>(
    owners: &std::collections::BTreeMap<String, String>,
    r: &Replica,
    among: &[&'a str],
) -> Vec<&'a str> {
    among
        .iter()
        .copied()
        .filter(|m| owners.get(*m) == Some(&r.name))
        .collect()
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
        assert!(
            holding.contains(member.as_str()),
            "{} wrote {w:?} after SIGCONT before holding {member}'s lease again",
            paused.name
        );
        checked += 1;
    }
    println!(
        "sharding: after SIGCONT {} holds {mine:?}; {checked} writes, each after its lease",
        paused.name
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
    let removed = MEMBERS[MEMBERS.len() - 1];
    let owner = all
        .iter()
        .find(|r| r.name == owners[removed])
        .expect("owner");
    let ns = env.fleet.hub_namespace(removed);
    let ises = ises(&env.hub, &ns);
    let before = ises
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .len();
    assert!(before > 0, "{removed} exports nothing");
    let since = jiff::Timestamp::now();
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
        "sharding: {removed} removed; its owner {} deleted {deleted} of {before} ISEs; {} writes for it, all by the owner",
        owner.name,
        for_it.len()
    );
    assert!(deleted >= before, "{deleted} ISE deletes for {before} ISEs");
    MEMBERS[..MEMBERS.len() - 1].to_vec()
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
