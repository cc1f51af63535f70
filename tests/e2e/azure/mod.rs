//! The shared Azure client against a fake ARM + token endpoint on 127.0.0.1. The product
//! path is the real azure_identity / azure_mgmt_network client pointed at the fake.

use crate::support::arm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arm::{FakeArm, FakeIp, Fault, TENANT};
use fleetnet_hub::azure::{AzureConfig, AzureError, AzureFleet, CredentialKind};
use fleetnet_hub::export::{LookupError, PublicIpLookup};

const SUB: &str = "00000000-0000-0000-0000-00000000000a";
const SUB2: &str = "00000000-0000-0000-0000-00000000000b";
const RG: &str = "MC_fleet_member_eastus";

fn config(arm: &FakeArm) -> AzureConfig {
    AzureConfig {
        default_subscription_id: Some(SUB.into()),
        ..arm::client_secret_config(arm)
    }
}

fn ips(prefix: &str, n: usize) -> Vec<FakeIp> {
    (0..n)
        .map(|i| FakeIp::new(&format!("pip-{i}"), &format!("{prefix}.{i}")))
        .collect()
}

fn fleet(config: AzureConfig) -> AzureFleet {
    AzureFleet::new(config).expect("valid config")
}

/// The lookup finds `ip` although one answer on its way takes 2 s: the 300 ms attempt
/// timeout abandoned it and a retry answered, well before the slow answer would have.
async fn found_before_the_slow_answer(lookup: &dyn PublicIpLookup, rg: &str, ip: &str) {
    let started = Instant::now();
    assert!(found(lookup, rg, ip).await);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

/// Whether `lookup` finds `ip` in `rg`; a failed lookup fails the test.
async fn found(lookup: &dyn PublicIpLookup, rg: &str, ip: &str) -> bool {
    match lookup.find_by_address(rg, ip).await {
        Ok(found) => found.is_some(),
        Err(e) => panic!("lookup of {ip} in {rg}: {e}"),
    }
}

fn path(rg: &str) -> String {
    FakeArm::list_path(SUB, rg)
}

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
async fn throttling_honours_retry_after_then_gives_throttled() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.5.0", 1));
    arm.set_ips(SUB, "rg-two", ips("20.5.1", 1));
    arm.set_ips(SUB, "rg-three", ips("20.5.2", 1));
    let mut cfg = config(&arm);
    cfg.max_retries = 1;
    cfg.max_retry_wait = Duration::from_secs(5);
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();

    // One 429 with Retry-After: 1 → waited, retried, answered.
    arm.push_faults([Fault::Throttle {
        retry_after_secs: 1,
    }]);
    assert!(found(&*lookup, RG, "20.5.0.0").await);
    let seen = arm.lists();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at - seen[0].at;
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    assert!(
        waited < Duration::from_millis(1500),
        "retried after {waited:?}"
    );
    eprintln!("429 Retry-After: 1 → retry sent {waited:?} later");

    // Retries exhausted → Throttled carrying Retry-After.
    arm.push_faults([
        Fault::Throttle {
            retry_after_secs: 1,
        },
        Fault::Throttle {
            retry_after_secs: 1,
        },
    ]);
    let started = Instant::now();
    let err = lookup
        .find_by_address("rg-two", "20.5.1.0")
        .await
        .unwrap_err();
    match &err {
        LookupError::Throttled {
            resource_group,
            retry_after,
        } => {
            assert_eq!(resource_group, "rg-two");
            assert_eq!(*retry_after, Some(Duration::from_secs(1)));
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(arm.requests(&path("rg-two")), 2, "1 try + max_retries 1");

    // A Retry-After longer than max_retry_wait is not slept on in-line.
    arm.push_faults([Fault::Throttle {
        retry_after_secs: 30,
    }]);
    let started = Instant::now();
    let err = lookup
        .find_by_address("rg-three", "20.5.2.0")
        .await
        .unwrap_err();
    assert!(
        matches!(err, LookupError::Throttled { retry_after: Some(d), .. } if d == Duration::from_secs(30)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    // …and the group is not asked again while ARM said to wait.
    let again = lookup
        .find_by_address("rg-three", "20.5.2.0")
        .await
        .unwrap_err();
    assert!(matches!(again, LookupError::Throttled { .. }), "{again:?}");
    assert_eq!(arm.requests(&path("rg-three")), 1);

    let stats = fleet.stats();
    assert_eq!(stats.throttled, 4);
    assert_eq!(stats.retries, 2);
}

#[tokio::test]
async fn server_errors_are_retried_then_failed() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.6.0", 1));
    arm.set_ips(SUB, "rg-down", ips("20.6.1", 1));
    let fleet = fleet(config(&arm)); // max_retries 3
    let lookup = fleet.for_member(None).unwrap();

    arm.push_faults([Fault::Status(503), Fault::Status(500)]);
    assert!(found(&*lookup, RG, "20.6.0.0").await);
    assert_eq!(arm.requests(&path(RG)), 3);

    arm.push_faults([500, 502, 503, 504].map(Fault::Status));
    let err = lookup
        .find_by_address("rg-down", "20.6.1.0")
        .await
        .unwrap_err();
    let LookupError::Failed {
        resource_group,
        message,
    } = &err
    else {
        panic!("expected Failed, got {err:?}");
    };
    assert_eq!(resource_group, "rg-down");
    assert!(
        message.contains("504") && message.contains("4 attempts"),
        "{message}"
    );
    assert!(message.contains(SUB), "{message}");
    assert_eq!(
        arm.requests(&path("rg-down")),
        4,
        "1 try + 3 retries, then stop"
    );
    assert_eq!(fleet.stats().retries, 5);
    assert_eq!(
        fleet.stats().arm_requests,
        arm.requests(&path(RG)) + arm.requests(&path("rg-down")),
        "every attempt the server saw was counted"
    );
    eprintln!("5xx exhausted: {err}");
}

#[tokio::test]
async fn malformed_json_is_a_failed_lookup_naming_the_group() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.7.0", 1));
    let fleet = fleet(config(&arm));
    arm.push_faults([Fault::Malformed]);
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address(RG, "20.7.0.0")
        .await
        .unwrap_err();
    assert!(matches!(err, LookupError::Failed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(RG) && text.contains("malformed"), "{text}");
    assert_eq!(
        arm.requests(&path(RG)),
        1,
        "a malformed body is not retried in-line"
    );
    eprintln!("malformed: {text}");
}

#[tokio::test]
async fn arm_requires_a_valid_bearer_token() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.8.0", 1));

    // The fake itself: no Authorization header → 401.
    let url = format!("{}{}?api-version=2024-03-01", arm.base(), path(RG));
    let raw = reqwest::get(&url).await.unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    assert!(raw.text().await.unwrap().contains("AuthenticationFailed"));

    // The product with a token ARM does not accept → Failed with the 401, not retried.
    arm.reject_tokens(true);
    let fleet = fleet(config(&arm));
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address(RG, "20.8.0.0")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LookupError::Failed { .. }), "{err:?}");
    assert!(
        text.contains("401") && text.contains("InvalidAuthenticationToken"),
        "{text}"
    );
    assert_eq!(
        arm.requests(&path(RG)),
        2,
        "the raw probe and one product request"
    );
    // The rejected token is dropped: once tokens are good again, the next LIST recovers
    // instead of re-sending the cached bad token until it expires.
    arm.reject_tokens(false);
    arm.set_ips(SUB, "rg-next", ips("20.8.1", 1));
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, "rg-next", "20.8.1.0").await);
    assert_eq!(arm.token_requests(), 2);

    // A wrong client secret: no token, no ARM request.
    let mut cfg = config(&arm);
    cfg.client_secret = Some("wrong".into());
    let err = AzureFleet::new(cfg)
        .unwrap()
        .for_member(None)
        .unwrap()
        .find_by_address("rg-other", "20.8.0.0")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    assert_eq!(arm.requests(&path("rg-other")), 0);
}

#[tokio::test]
async fn the_global_limiter_spaces_requests() {
    let arm = FakeArm::start().await;
    for g in 0..8 {
        arm.set_ips(SUB, &format!("rg-{g}"), ips(&format!("20.9.{g}"), 1));
    }
    let mut cfg = config(&arm);
    cfg.arm_qps = 10.0;
    cfg.arm_burst = 2;
    let fleet = fleet(cfg);
    // Eight members, each in its own group: eight LISTs through one budget.
    let lookups = (0..8).map(|g| {
        let member = fleet.for_member(None).unwrap();
        async move {
            member
                .find_by_address(&format!("rg-{g}"), &format!("20.9.{g}.0"))
                .await
        }
    });
    for result in futures::future::join_all(lookups).await {
        assert!(result.unwrap().is_some());
    }
    let mut at: Vec<Instant> = arm.lists().iter().map(|l| l.at).collect();
    at.sort();
    assert_eq!(at.len(), 8);
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let span = at[7] - at[0];
    // Burst of 2 at once, then one per 100 ms: 6 × 100 ms.
    assert!(
        span >= Duration::from_millis(540),
        "span {span:?}, gaps {gaps:?}"
    );
    assert!(
        span < Duration::from_millis(1200),
        "span {span:?}, gaps {gaps:?}"
    );
    for gap in &gaps[1..] {
        assert!(*gap >= Duration::from_millis(70), "gaps {gaps:?}");
    }
    let waited = fleet.stats().limiter_wait;
    assert!(
        waited >= Duration::from_millis(1500),
        "limiter wait {waited:?}"
    );
    eprintln!(
        "qps 10 burst 2, 8 requests: span {span:?}, gaps {gaps:?}, total limiter wait {waited:?}"
    );
}

#[tokio::test]
async fn the_concurrency_limit_holds() {
    let arm = FakeArm::start().await;
    for g in 0..6 {
        arm.set_ips(SUB, &format!("rg-{g}"), ips("20.10.0", 1));
    }
    arm.set_delay(Duration::from_millis(200));
    let mut cfg = config(&arm);
    cfg.max_concurrency = 2;
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    let started = Instant::now();
    let lookups = (0..6).map(|g| {
        let lookup = Arc::clone(&lookup);
        async move {
            lookup
                .find_by_address(&format!("rg-{g}"), "20.10.0.0")
                .await
        }
    });
    for result in futures::future::join_all(lookups).await {
        assert!(result.unwrap().is_some());
    }
    assert_eq!(arm.max_in_flight(), 2);
    assert!(started.elapsed() >= Duration::from_millis(590));
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

#[tokio::test]
async fn slow_responses_time_out_and_are_retried() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.12.0", 1));
    arm.set_ips(SUB, "rg-slow", ips("20.12.1", 1));
    let mut cfg = config(&arm);
    cfg.request_timeout = Duration::from_millis(300);
    cfg.max_retries = 1;
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();

    arm.push_faults([Fault::Slow(Duration::from_secs(2))]);
    found_before_the_slow_answer(&*lookup, RG, "20.12.0.0").await;
    assert_eq!(arm.requests(&path(RG)), 2);

    arm.push_faults([
        Fault::Slow(Duration::from_secs(2)),
        Fault::Slow(Duration::from_secs(2)),
    ]);
    let started = Instant::now();
    let err = lookup
        .find_by_address("rg-slow", "20.12.1.0")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn next_link_to_another_origin_is_refused() {
    let arm = FakeArm::start().await;
    let elsewhere = FakeArm::start().await;
    arm.set_page_size(1);
    arm.set_ips(SUB, RG, ips("20.13.0", 2));
    arm.set_next_link_base(elsewhere.base());
    let fleet = fleet(config(&arm));
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address(RG, "20.13.0.1")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refusing"), "{err}");
    assert!(
        elsewhere.lists().is_empty(),
        "the bearer token went nowhere else"
    );
}

#[tokio::test]
async fn workload_identity_rereads_the_rotated_token_file() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, "rg-a", ips("20.14.0", 1));
    arm.set_ips(SUB, "rg-b", ips("20.14.1", 1));
    // Shorter than the 5-minute refresh margin: every ARM request needs a fresh token.
    arm.set_token_lifetime(60);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, "projected-sa-token-1\n").unwrap();
    let cfg = AzureConfig {
        credential: CredentialKind::WorkloadIdentity,
        client_secret: None,
        federated_token_file: Some(token_file.clone()),
        ..config(&arm)
    };
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, "rg-a", "20.14.0.0").await);
    std::fs::write(&token_file, "projected-sa-token-2\n").unwrap();
    assert!(found(&*lookup, "rg-b", "20.14.1.0").await);
    let assertions: Vec<String> = arm
        .token_forms()
        .iter()
        .map(|f| f["client_assertion"].clone())
        .collect();
    assert_eq!(assertions, ["projected-sa-token-1", "projected-sa-token-2"]);
}

#[tokio::test]
async fn managed_identity_asks_imds_for_the_user_assigned_identity() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.15.0", 1));
    let cfg = AzureConfig {
        credential: CredentialKind::ManagedIdentity,
        tenant_id: None,
        client_id: Some("kubelet-identity-client-id".into()),
        client_secret: None,
        managed_identity_endpoint: arm.imds_endpoint(),
        ..config(&arm)
    };
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, RG, "20.15.0.0").await);
    assert!(found(&*lookup, RG, "20.15.0.0").await);
    let queries = arm.imds_queries();
    assert_eq!(queries.len(), 1, "the token is cached");
    assert_eq!(queries[0]["client_id"], "kubelet-identity-client-id");
    assert_eq!(queries[0]["resource"], arm.base());
}

#[tokio::test]
async fn invalid_config_and_names_are_rejected_without_network() {
    let arm = FakeArm::start().await;
    let mut cfg = config(&arm);
    cfg.client_id = None;
    let err = AzureFleet::new(cfg).unwrap_err();
    assert!(err.to_string().contains("client_id"), "{err}");

    let fleet = fleet(config(&arm));
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address("rg/../../other", "1.2.3.4")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a valid resource group name"),
        "{err}"
    );
    assert!(arm.lists().is_empty());
    assert_eq!(arm.token_requests(), 0);
}

#[tokio::test]
async fn each_retry_takes_its_own_limiter_token() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.16.0", 1));
    let mut cfg = config(&arm);
    // One token per 200 ms and no burst; backoff of a few ms: the spacing is the limiter's.
    cfg.arm_qps = 5.0;
    cfg.arm_burst = 1;
    cfg.retry_base_delay = Duration::from_millis(1);
    let fleet = fleet(cfg);
    arm.push_faults([Fault::Status(503), Fault::Status(503)]);
    assert!(
        fleet
            .for_member(None)
            .unwrap()
            .find_by_address(RG, "20.16.0.0")
            .await
            .unwrap()
            .is_some()
    );
    let seen = arm.lists();
    assert_eq!(seen.len(), 3, "1 try + 2 retries");
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(150), "gaps {gaps:?}");
    }
    let stats = fleet.stats();
    assert_eq!(stats.arm_requests, arm.requests(&path(RG)));
    assert_eq!(stats.arm_requests, 3);
    assert_eq!(stats.retries, 2);
    assert!(
        stats.limiter_wait >= Duration::from_millis(300),
        "limiter wait {:?}",
        stats.limiter_wait
    );
    let tokens = fleet.stats().token;
    assert_eq!(
        (tokens.requests, tokens.retries),
        (1, 0),
        "the token request is not an ARM request"
    );
    eprintln!(
        "503, 503, 200 at qps 5 burst 1: gaps {gaps:?}, limiter wait {:?}",
        stats.limiter_wait
    );
}

#[tokio::test]
async fn token_requests_are_retried_by_the_token_transport() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, "rg-a", ips("20.17.0", 1));
    arm.set_ips(SUB, "rg-b", ips("20.17.1", 1));
    let mut cfg = config(&arm);
    cfg.request_timeout = Duration::from_millis(500);
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    let token_path = format!("/{TENANT}/oauth2/v2.0/token");

    // Client secret: 503, then 429 with Retry-After: 0, then a token.
    arm.push_token_faults([
        Fault::Status(503),
        Fault::Throttle {
            retry_after_secs: 0,
        },
    ]);
    assert!(found(&*lookup, "rg-a", "20.17.0.0").await);
    assert_eq!(arm.requests(&token_path), 3);
    let tokens = fleet.stats().token;
    assert_eq!(
        (tokens.requests, tokens.retries, tokens.throttled),
        (3, 2, 1)
    );
    let stats = fleet.stats();
    assert_eq!(
        (stats.arm_requests, stats.retries, stats.throttled),
        (1, 0, 0),
        "token retries are not ARM retries"
    );

    // Managed identity: an IMDS answer slower than the timeout is abandoned and asked again.
    let cfg = AzureConfig {
        credential: CredentialKind::ManagedIdentity,
        tenant_id: None,
        client_id: None,
        client_secret: None,
        managed_identity_endpoint: arm.imds_endpoint(),
        request_timeout: Duration::from_millis(300),
        ..config(&arm)
    };
    let fleet = AzureFleet::new(cfg).unwrap();
    arm.push_token_faults([Fault::Slow(Duration::from_secs(2))]);
    found_before_the_slow_answer(&*fleet.for_member(None).unwrap(), "rg-b", "20.17.1.0").await;
    assert_eq!(arm.imds_queries().len(), 2);
    assert_eq!(fleet.stats().token.retries, 1);

    // A refused credential (400) is the credential's answer: not retried.
    let mut cfg = config(&arm);
    cfg.client_secret = Some("wrong".into());
    let before = arm.requests(&token_path);
    let err = AzureFleet::new(cfg)
        .unwrap()
        .for_member(None)
        .unwrap()
        .find_by_address("rg-a", "20.17.0.0")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    assert_eq!(arm.requests(&token_path), before + 1);
}

/// Where the parent test put the fake `az` (and its log) for its child.
const AZ_DIR_ENV: &str = "FLEETNET_TEST_AZ_DIR";

/// The real `AzureCliCredential` runs `az` from PATH; here that is a script printing the JSON
/// of `az account get-access-token --output json` with a token the fake ARM accepts. PATH is
/// process-wide and the other tests of this binary run alongside, so the lookup runs in a child
/// process started with the script's directory first on its PATH.
#[cfg(unix)]
#[tokio::test]
async fn azure_cli_credential_runs_az_and_sends_its_token() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("az-invocations.log");
    let script = format!(
        r#"#!/bin/sh
printf '%s\n' "$*" >> '{log}'
cat <<'JSON'
{{"accessToken": "{CLI_TOKEN}", "expiresOn": "2099-01-01 00:00:00.000000", "expires_on": 4070908800, "subscription": "{SUB}", "tenant": "{TENANT}", "tokenType": "Bearer"}}
JSON
"#,
        log = log.display()
    );
    let az = dir.path().join("az");
    std::fs::write(&az, script).unwrap();
    std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::iter::once(dir.path().to_owned())
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ))
        .collect::<Vec<_>>();
    let path = std::env::join_paths(path).unwrap();
    let out = crate::support::child_test(module_path!(), "azure_cli_credential_child")
        .env("PATH", path)
        .env(AZ_DIR_ENV, dir.path())
        .output()
        .await
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The token `az` hands out in [`azure_cli_credential_runs_az_and_sends_its_token`].
const CLI_TOKEN: &str = "token-from-the-az-script";

/// The child of [`azure_cli_credential_runs_az_and_sends_its_token`]: the fake `az` is first
/// on its PATH.
#[cfg(unix)]
#[tokio::test]
#[ignore = "run as a subprocess by azure_cli_credential_runs_az_and_sends_its_token"]
async fn azure_cli_credential_child() {
    let Some(dir) = std::env::var_os(AZ_DIR_ENV).map(std::path::PathBuf::from) else {
        eprintln!(
            "azure_cli_credential_child is started by azure_cli_credential_runs_az_and_sends_its_token"
        );
        return;
    };
    let log = dir.join("az-invocations.log");
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, "rg-a", ips("20.18.0", 1));
    arm.set_ips(SUB, "rg-b", ips("20.18.1", 1));
    arm.accept_token(CLI_TOKEN);
    let cfg = AzureConfig {
        credential: CredentialKind::AzureCli,
        tenant_id: None,
        client_id: None,
        client_secret: None,
        ..config(&arm)
    };
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    for (rg, ip) in [("rg-a", "20.18.0.0"), ("rg-b", "20.18.1.0")] {
        assert!(
            lookup.find_by_address(rg, ip).await.unwrap().is_some(),
            "{rg}"
        );
    }

    let seen = arm.lists();
    assert_eq!(seen.len(), 2);
    for list in &seen {
        assert_eq!(list.bearer.as_deref(), Some(CLI_TOKEN));
    }
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [format!(
            "account get-access-token --output json --scope {}/.default",
            arm.base()
        )],
        "az ran once; its token was cached"
    );
    assert_eq!(arm.token_requests(), 0, "no HTTP token request");
}

/// Of `a_groups` LISTs member A started (A's own line when `a_scoped`, none otherwise), how
/// many reached ARM after member B's single lookup was asked for and before B's LIST did, with
/// ARM tokens at `qps`, one at a time.
async fn a_lists_ahead_of_b(a_groups: usize, a_scoped: bool, qps: f64) -> usize {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, "rg-b", vec![FakeIp::new("pip-b", "20.18.0.1")]);
    let mut cfg = config(&arm);
    cfg.arm_qps = qps;
    cfg.arm_burst = 1;
    let fleet = Arc::new(fleet(cfg));
    let a_allowed: Vec<String> = (0..a_groups).map(|g| format!("rg-a-{g}")).collect();
    for group in a_allowed.iter().chain([&"rg-a".to_string()]) {
        arm.set_ips(SUB, group, vec![]);
    }
    let a: Arc<dyn PublicIpLookup> = match a_scoped {
        true => fleet.member("a", None, "rg-a", &a_allowed).unwrap(),
        false => fleet.for_member(None).unwrap(),
    };
    let b = fleet.member("b", None, "rg-b", &[]).unwrap();
    // The token first, so that no LIST waits for it.
    assert!(!found(&*a, "rg-a", "20.18.9.9").await);
    let before = arm.lists().len();
    let backlog: Vec<_> = a_allowed
        .iter()
        .map(|group| {
            let (a, group) = (Arc::clone(&a), group.clone());
            tokio::spawn(async move { a.find_by_address(&group, "20.18.9.9").await })
        })
        .collect();
    // A's LISTs are under way.
    let deadline = Instant::now() + Duration::from_secs(10);
    while arm.lists().len() < before + 3 {
        assert!(Instant::now() < deadline, "A's LISTs did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let asked = arm.lists().len();
    let b_started = Instant::now();
    assert!(found(&*b, "rg-b", "20.18.0.1").await);
    let b_took = b_started.elapsed();
    let lists = arm.lists();
    let b_at = lists
        .iter()
        .position(|l| l.resource_group == "rg-b")
        .expect("B's LIST reached ARM");
    let ahead = lists[asked..b_at]
        .iter()
        .filter(|l| l.resource_group.starts_with("rg-a-"))
        .count();
    for task in backlog {
        task.abort();
    }
    eprintln!(
        "member A: {a_groups} LISTs ({}), member B: 1; {ahead} of A's reached ARM between B's ask and B's LIST; B's lookup took {b_took:?} at {qps} qps",
        if a_scoped {
            "in A's own line"
        } else {
            "no line of its own"
        }
    );
    ahead
}

/// One member's 1,000 lookups in 1,000 groups hold one place in the ARM budget's line: another
/// member's single lookup waits for at most A's next token (the one A's head waits for; one
/// more may have been on the wire when B asked), not for A's backlog. Without a line of its
/// own, the same backlog is served first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_members_backlog_does_not_delay_another_members_lookup() {
    // A token every 20 ms: A's 1,000 LISTs would take 20 s; B's comes after at most two.
    let ahead = a_lists_ahead_of_b(1000, true, 50.0).await;
    assert!(ahead <= 2, "{ahead} of A's LISTs went before B's");
    let unscoped = a_lists_ahead_of_b(200, false, 200.0).await;
    assert!(
        unscoped >= 100,
        "without A's line, B waits behind A: {unscoped}"
    );
}

/// A member's lookups stay in its configured subscription and groups: a group outside them is
/// refused without a request; its own are listed in its subscription.
#[tokio::test]
async fn a_member_lookup_stays_in_its_groups() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB2, "rg-b", vec![FakeIp::new("pip-b", "20.19.0.1")]);
    arm.set_ips(SUB2, "rg-a", vec![FakeIp::new("pip-a", "20.19.0.2")]);
    arm.set_ips(SUB2, "rg-a-extra", vec![]);
    let fleet = fleet(config(&arm));
    let a = fleet
        .member("a", Some(SUB2), "rg-a", &["rg-a-extra".to_string()])
        .unwrap();
    assert_eq!(a.subscription(), SUB2);
    for group in ["rg-b", "RG-B", "rg-a/../rg-b", "rg-a-extra2"] {
        match a.find_by_address(group, "20.19.0.1").await {
            Err(LookupError::NotAllowed {
                member,
                resource_group,
            }) => assert_eq!((member.as_str(), resource_group.as_str()), ("a", group)),
            other => panic!("{group:?}: {other:?}"),
        }
    }
    // A member given no group at all: the missing setting is named.
    let none = fleet.member("none", Some(SUB2), "", &[]).unwrap();
    let err = none.find_by_address("", "20.19.0.1").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("member none has no Azure resource group"),
        "{err}"
    );
    assert!(arm.lists().is_empty(), "{:?}", arm.lists());
    assert!(found(&*a, "RG-A", "20.19.0.2").await);
    assert!(!found(&*a, "rg-a-extra", "20.19.0.2").await);
    assert_eq!(arm.list_operations(SUB2, "rg-a"), 1);
    assert_eq!(arm.list_operations(SUB2, "rg-a-extra"), 1);
    assert_eq!(arm.list_operations(SUB2, "rg-b"), 0);
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
