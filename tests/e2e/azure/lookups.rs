//! The shared public-IP list and its cache: pages followed, one LIST for many members and
//! lookups, a miss refreshing at most once per interval, expiry, the cap on a group.

use super::*;

#[tokio::test]
async fn paging_is_followed_and_fields_are_mapped() {
    let arm = FakeArm::start().await;
    arm.set_page_size(2);
    let mut list = ips("20.0.0", 5);
    list[4] = list[4].clone().with_label("my-service");
    arm.set_ips(SUB, RG, list);
    let fleet = fleet(config(&arm));
    let lookup = fleet.for_member(None).unwrap();

    let found = lookup
        .find_by_address(RG, "20.0.0.4")
        .await
        .unwrap()
        .expect("the IP on page 3 is found");
    assert_eq!(
        found.id,
        format!(
            "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/publicIPAddresses/pip-4"
        )
    );
    assert!(found.dns_label_configured);
    let first = lookup
        .find_by_address(RG, "20.0.0.0")
        .await
        .unwrap()
        .unwrap();
    assert!(!first.dns_label_configured);
    assert_eq!(arm.requests(&path(RG)), 3, "three pages, one LIST");
    assert_eq!(arm.list_operations(SUB, RG), 1);

    // Absent, and the last LIST is recent: answered from cache.
    assert_eq!(lookup.find_by_address(RG, "20.0.0.99").await.unwrap(), None);
    assert_eq!(arm.requests(&path(RG)), 3);
    let stats = fleet.stats();
    assert_eq!(stats.list_calls, 1);
    assert_eq!(stats.arm_requests, 3);
    assert_eq!((stats.cache_misses, stats.cache_hits), (1, 2));

    // The client-secret credential asked for the ARM scope of the configured endpoint.
    let forms = arm.token_forms();
    assert_eq!(forms.len(), 1);
    assert_eq!(forms[0]["scope"], format!("{}/.default", arm.base()));
}

#[tokio::test]
async fn hundred_members_times_fifty_services_cost_one_list() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.1.0", 50));
    arm.set_delay(Duration::from_millis(50));
    let fleet = fleet(config(&arm));
    let members: Vec<Arc<dyn PublicIpLookup>> = (0..100)
        .map(|_| fleet.for_member(Some(SUB)).unwrap())
        .collect();

    let started = Instant::now();
    for round in 0..3 {
        let lookups = members.iter().flat_map(|member| {
            (0..50).map(move |svc| {
                let member = Arc::clone(member);
                async move { member.find_by_address(RG, &format!("20.1.0.{svc}")).await }
            })
        });
        let results = futures::future::join_all(lookups).await;
        assert_eq!(results.len(), 5000);
        for result in results {
            assert!(result.unwrap().is_some());
        }
        if round < 2 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(arm.requests(&path(RG)), 1, "one LIST per TTL, not 15,000");
    let stats = fleet.stats();
    assert_eq!(stats.list_calls, 1);
    assert_eq!(stats.cache_hits + stats.cache_misses, 15_000);
    assert_eq!(
        stats.cache_misses, 5000,
        "the whole first round waited on the one LIST"
    );
    eprintln!(
        "15,000 lookups (100 members x 50 services x 3 rounds): {} LIST request(s), {} token request(s), {elapsed:?}",
        arm.requests(&path(RG)),
        arm.token_requests()
    );
}

#[tokio::test]
async fn concurrent_first_lookups_share_one_in_flight_list() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.2.0", 3));
    arm.set_delay(Duration::from_millis(300));
    let fleet = fleet(config(&arm));
    let started = Instant::now();
    let lookups = (0..32).map(|i| {
        let member = fleet.for_member(Some(SUB)).unwrap();
        async move {
            member
                .find_by_address(RG, &format!("20.2.0.{}", i % 3))
                .await
        }
    });
    for result in futures::future::join_all(lookups).await {
        assert!(result.unwrap().is_some());
    }
    let elapsed = started.elapsed();
    assert_eq!(arm.requests(&path(RG)), 1);
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    eprintln!("32 concurrent first lookups: 1 LIST, {elapsed:?}");
}

#[tokio::test]
async fn a_miss_refreshes_at_most_once_per_interval() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, vec![FakeIp::new("a", "20.3.0.1")]);
    let mut cfg = config(&arm);
    cfg.miss_refresh_interval = Duration::from_millis(300);
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();

    assert!(found(&*lookup, RG, "20.3.0.1").await);
    arm.add_ip(SUB, RG, FakeIp::new("b", "20.3.0.2"));
    for _ in 0..10 {
        assert_eq!(lookup.find_by_address(RG, "20.3.0.2").await.unwrap(), None);
    }
    assert_eq!(
        arm.requests(&path(RG)),
        1,
        "misses within the interval do not re-list"
    );

    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        found(&*lookup, RG, "20.3.0.2").await,
        "after the interval a miss re-lists and finds the new IP"
    );
    assert_eq!(arm.requests(&path(RG)), 2);

    // A never-appearing IP hammered for 1 s: at most one LIST per 300 ms.
    let started = Instant::now();
    let mut lookups = 0;
    while started.elapsed() < Duration::from_secs(1) {
        assert_eq!(lookup.find_by_address(RG, "20.3.0.99").await.unwrap(), None);
        lookups += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let relists = arm.requests(&path(RG)) - 2;
    assert!((2..=4).contains(&relists), "{relists} re-lists in 1 s");
    eprintln!("{lookups} misses for an absent IP in 1 s (interval 300 ms): {relists} LIST(s)");
}

#[tokio::test]
async fn ttl_expiry_triggers_a_new_list() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.4.0", 2));
    let mut cfg = config(&arm);
    cfg.cache_ttl = Duration::from_millis(300);
    cfg.miss_refresh_interval = Duration::from_millis(100);
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, RG, "20.4.0.0").await);
    assert!(found(&*lookup, RG, "20.4.0.1").await);
    assert_eq!(arm.requests(&path(RG)), 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(found(&*lookup, RG, "20.4.0.0").await);
    assert_eq!(arm.requests(&path(RG)), 2);
}

#[tokio::test]
async fn members_of_one_subscription_share_one_lookup_and_all_share_one_credential() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.11.0", 1));
    arm.set_ips(SUB2, RG, ips("20.11.1", 1));
    let fleet = fleet(config(&arm));

    let a = fleet.subscription(Some(SUB)).unwrap();
    let b = fleet.subscription(Some(&SUB.to_uppercase())).unwrap();
    let default = fleet.subscription(None).unwrap();
    let other = fleet.subscription(Some(SUB2)).unwrap();
    assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&a, &default));
    assert!(!Arc::ptr_eq(&a, &other));
    assert_eq!(other.subscription(), SUB2);
    let (m1, m2) = (
        fleet.for_member(Some(SUB)).unwrap(),
        fleet.for_member(Some(SUB)).unwrap(),
    );
    assert!(Arc::ptr_eq(&m1, &m2));
    assert_eq!(fleet.subscription_count(), 2);

    assert!(m1.find_by_address(RG, "20.11.0.0").await.unwrap().is_some());
    assert!(m2.find_by_address(RG, "20.11.0.0").await.unwrap().is_some());
    // The other subscription's group of the same name is a different group.
    assert_eq!(other.find_by_address(RG, "20.11.0.0").await.unwrap(), None);
    assert!(other.find_by_address(RG, "20.11.1.0").await.is_ok());
    assert_eq!(arm.requests(&path(RG)), 1);
    assert_eq!(arm.requests(&FakeArm::list_path(SUB2, RG)), 1);
    assert_eq!(
        arm.token_requests(),
        1,
        "one credential, one token, for every member"
    );

    let mut cfg = config(&arm);
    cfg.default_subscription_id = None;
    let no_default = AzureFleet::new(cfg).unwrap();
    assert!(matches!(
        no_default.for_member(None),
        Err(AzureError::NoSubscription)
    ));
    assert!(matches!(
        no_default.for_member(Some("a/../b")),
        Err(AzureError::InvalidSubscription { .. })
    ));
}

/// A group with 100,000 public IPs: the LIST stops at the cap (1,000 kept: ten pages of 100,
/// and the eleventh that shows there are more), a kept address is found, one past the cap is
/// not found (and not re-listed for), and the cut is counted.
#[tokio::test]
async fn a_group_with_100000_public_ips_is_cut_at_the_cap() {
    let arm = FakeArm::start().await;
    let huge: Vec<FakeIp> = (0..100_000u32)
        .map(|i| {
            let [_, a, b, c] = i.to_be_bytes();
            FakeIp::new(&format!("pip-{i}"), &format!("20.{a}.{b}.{c}"))
        })
        .collect();
    arm.set_ips(SUB, "rg-huge", huge);
    let mut cfg = config(&arm);
    cfg.max_public_ips_per_group = 1000;
    let fleet = fleet(cfg);
    let lookup = fleet.member("m", None, "rg-huge", &[]).unwrap();
    assert!(found(&*lookup, "rg-huge", "20.0.0.5").await);
    assert!(
        !found(&*lookup, "rg-huge", "20.1.134.159").await,
        "past the cap"
    );
    assert_eq!(arm.requests(&path("rg-huge")), 11);
    let stats = fleet.stats();
    assert_eq!(stats.truncated_lists, 1);
    assert_eq!(stats.list_calls, 1, "a miss past the cap does not re-list");
}
