//! ARM and the token endpoint failing: throttling with Retry-After, server errors, malformed
//! answers and slow ones, each retried or failed as it should.

use super::*;

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
    // Not the 30 s: anything well below it, however loaded the machine.
    assert!(started.elapsed() < Duration::from_secs(5));
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
