//! Hostile answers cost only their member: bodies huge, endless, trickling or malformed, huge
//! Retry-After and events, many objects and forged names; memory stays bounded.

use super::*;

/// Six ways one answer can be too much, each its own member beside a real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_members_fail_alone_with_a_redacted_reason_and_memory_stays_bounded() {
    let (fleet, hub_client) = quiet_fleet(["alpha"]).await;
    let huge = HostileMember::start(Mode::Huge(600 << 20)).await;
    let endless = HostileMember::start(Mode::Endless).await;
    let trickle = HostileMember::start(Mode::Trickle).await;
    let malformed = HostileMember::start(Mode::Malformed).await;
    let throttling = HostileMember::start(Mode::RetryAfter("18446744073709551615")).await;
    let flood = HostileMember::start(Mode::HugeEvent(64 << 20)).await;
    let dir = member_dir(
        &fleet,
        &["alpha"],
        &[
            ("huge", &huge),
            ("endless", &endless),
            ("trickle", &trickle),
            ("malformed", &malformed),
            ("throttling", &throttling),
            ("flood", &flood),
        ],
    );
    let mut hub = Hub::spawn(&fleet, &dir);
    let started = Instant::now();

    // The real member connects directly (the environment's proxy would fail it) and exports.
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "web").await;

    let expected = [
        ("huge", "member huge: LIST services response over 16 MiB"),
        (
            "endless",
            "member endless: LIST services response over 16 MiB",
        ),
        ("malformed", "Error deserializing response"),
        ("throttling", "TooManyRequests"),
        ("flood", "member flood: WATCH services event over 4 MiB"),
        (
            "trickle",
            "member trickle: LIST services response not complete within 30s",
        ),
    ];
    for (member, reason) in expected {
        let error = hub.wait_failing(member, reason).await;
        assert_nothing_leaked(&format!("{member}'s reason"), &error);
        println!("[hostile] {member}: {error}");
    }

    // Still exporting after all of that.
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "api").await;
    let members = hub.members().await;
    assert_eq!(members["members"]["alpha"]["phase"], "ready", "{members}");
    assert_nothing_leaked("/members", &members.to_string());

    let peak = hub.peak_rss_kib();
    let (lists, largest, total) = (
        huge.requests_to("GET /api/v1/services?"),
        huge.largest.load(std::sync::atomic::Ordering::Relaxed),
        huge.sent.load(std::sync::atomic::Ordering::Relaxed),
    );
    println!(
        "[hostile] peak RSS {} MiB; huge: {lists} LISTs, {} MiB sent, {} MiB in the largest",
        peak >> 10,
        total >> 20,
        largest >> 20
    );
    assert!(peak < RSS_LIMIT_KIB, "peak RSS {peak} KiB");
    // Each answer read no further than the cap (plus what was in flight), and the failed LIST
    // tried again.
    assert!(
        largest < 64 << 20,
        "read {largest} bytes of one 600 MiB answer"
    );
    assert!(lists >= 2, "the failed LIST is tried again");
    // With backoff, and a penalty after every read over the cap: 10 s doubling, not the watch
    // backoff's 2 s (nor the shortest wait after every Init, as kube's reset did).
    let secs = started.elapsed().as_secs_f64();
    println!("[hostile] huge: {lists} LISTs in {secs:.0} s");
    assert!(
        (lists as f64) <= secs / 10.0 + 1.0,
        "{lists} LISTs in {secs:.0} s"
    );
    hub.assert_live();
    assert_no_panic(&hub);
    assert_nothing_leaked("the log", &hub.log_text());
}

/// 100,000 objects in one answer fail their member; in pages they fail it at the view's cap
/// (50,000) instead of filling memory; names with control characters break nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_objects_and_forged_names_cost_only_their_member() {
    let (fleet, hub_client) = quiet_fleet(["alpha"]).await;
    let unpaged = HostileMember::start(Mode::Objects {
        count: 100_000,
        paged: false,
    })
    .await;
    let paged = HostileMember::start(Mode::Objects {
        count: 100_000,
        paged: true,
    })
    .await;
    let forged = HostileMember::start(Mode::ControlNames).await;
    let dir = member_dir(
        &fleet,
        &["alpha"],
        &[
            ("unpaged", &unpaged),
            ("paged", &paged),
            ("forged", &forged),
        ],
    );
    let mut hub = Hub::spawn(&fleet, &dir);
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "web").await;

    let error = hub
        .wait_failing(
            "unpaged",
            "member unpaged: LIST services response over 16 MiB",
        )
        .await;
    assert_nothing_leaked("unpaged's reason", &error);
    // kube's watcher asks pages of 500: the paged member's LISTs all pass the cap.
    within(
        Duration::from_secs(120),
        "paged listed in pages",
        || async { (paged.requests_to("GET /api/v1/services?") >= 200).then_some(()) },
    )
    .await;
    assert!(
        paged
            .requests
            .lock()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/services?") && r.contains("limit=500")),
        "LISTs are paged"
    );
    // 100,000 in pages are more than one view holds: the member fails, its view cut at the cap
    // (the list is counted as it arrives, and listed again after the backoff).
    let error = hub
        .wait_failing("paged", "services: 50000 or more objects")
        .await;
    assert_nothing_leaked("paged's reason", &error);

    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "api").await;
    let peak = hub.peak_rss_kib();
    println!("[hostile] peak RSS {} MiB", peak >> 10);
    assert!(peak < RSS_LIMIT_KIB, "peak RSS {peak} KiB");
    hub.assert_live();
    assert_no_panic(&hub);
    assert_nothing_leaked("the log", &hub.log_text());

    // `check` with the same environment: the real member is reachable directly, and no
    // output names the proxy's credentials, a token or what the members sent.
    let text = check_output(&dir, &[]).await;
    let alpha_status = text
        .lines()
        .find(|l| l.starts_with("alpha "))
        .and_then(|l| l.split('|').nth(2))
        .map(str::trim);
    assert_eq!(alpha_status, Some("ok"), "alpha usable directly:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert_nothing_leaked("check", &text);

    // The forged name reached the log (escaped, inside its own line), and began no line.
    let log = hub.log_text();
    let forged_lines = log
        .lines()
        .filter(|l| l.starts_with("level=ERROR forged"))
        .count();
    println!("[hostile] log lines forged by a member's object name: {forged_lines}");
    assert_eq!(forged_lines, 0, "a member's object name began a log line");
    assert!(
        log.contains(r"\nlevel=ERROR forged"),
        "the forged name is logged, escaped (else this test proves nothing)"
    );
    assert!(
        !log.contains('\u{1b}') && !log.contains('\r') && !log.contains('\u{7}'),
        "no raw control character from a member's name in the log"
    );
}
