//! Every member owned by one replica and written only by it; a replica killed has its members
//! taken over within the lease duration + 5 s, no ISE deleted; a third replica takes its share.

use super::*;

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
