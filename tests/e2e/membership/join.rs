//! `Join`: both networking agents' entries in one write per heartbeat period; fleet's own
//! entry and fields untouched; no heartbeat while the member does not answer; nothing written
//! after a restart before the next heartbeat is due; another writer told, not fought.

use super::*;

/// fleet-networking's spec "should update internal member cluster status when a member cluster
/// joins", with fleet's MemberAgent entry present: both entries `Joined=True`, `AgentJoined`,
/// for the IMC's generation, heartbeats from now; then one status write per period.
#[tokio::test(flavor = "multi_thread")]
async fn join_reports_both_agents_in_one_write_per_period() {
    let (fleet, hub, _member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let period = 2;
    create_imc(&hub, &hub_ns, Some(period), true).await;
    let before = get_imc(&hub, &hub_ns).await;
    let started = Timestamp::now();
    let running = start(&fleet, "internalmembercluster").await;

    let imc = wait_both(&hub, &hub_ns, "True", "AgentJoined").await;
    for agent in [MCS, SEI] {
        let (_, _, _, beat) = joined(&imc, agent).expect("entry");
        let beat = beat.expect("a heartbeat");
        assert!(beat.as_second() >= started.as_second(), "{agent}: {beat}");
    }
    let types: Vec<_> = imc
        .status
        .as_ref()
        .expect("status")
        .agent_status
        .iter()
        .map(|a| a.type_.clone())
        .collect();
    assert_eq!(types, ["MemberAgent", MCS, SEI]);
    let (was, now) = (
        before.status.expect("status"),
        imc.status.clone().expect("status"),
    );
    assert_eq!(
        now.agent_status[0], was.agent_status[0],
        "MemberAgent untouched"
    );
    assert_eq!(
        now.other, was.other,
        "fleet's conditions and properties untouched"
    );

    // Both entries move together, one write per period (±5 %): 10 periods, 10 writes (±1).
    let writes = status_writes(&hub).await;
    let window = Duration::from_secs(10 * period as u64);
    tokio::time::sleep(window).await;
    let written = status_writes(&hub).await - writes;
    assert!(
        (9.0..=11.0).contains(&written),
        "{written} status writes in {window:?}"
    );
    let imc = get_imc(&hub, &hub_ns).await;
    let beat = |agent| joined(&imc, agent).and_then(|j| j.3);
    assert_eq!(beat(MCS), beat(SEI), "one write carries both heartbeats");
    let age = Timestamp::now().duration_since(beat(MCS).expect("heartbeat"));
    assert!(
        age.as_secs_f64() <= f64::from(period) + 1.5,
        "heartbeat {age:?} old"
    );
    assert_eq!(outcomes(&running, "other_writer"), 0.0);
    running.shutdown().await;
}

/// After a restart, the heartbeats written before are fresh: nothing is written until the
/// next one is due, and that one comes on time.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_writes_nothing_until_the_next_heartbeat_is_due() {
    let (fleet, hub, _member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let period = 20;
    create_imc(&hub, &hub_ns, Some(period), true).await;
    let running = start(&fleet, "internalmembercluster").await;
    let imc = wait_both(&hub, &hub_ns, "True", "AgentJoined").await;
    let first = joined(&imc, SEI).and_then(|j| j.3).expect("heartbeat");
    running.shutdown().await;

    let writes = status_writes(&hub).await;
    let running = start(&fleet, "internalmembercluster").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(status_writes(&hub).await - writes, 0.0, "a restart wrote");
    assert_eq!(outcomes(&running, "joined"), 1.0, "looked, wrote nothing");

    // The next heartbeat: a period (±5 %) after the first, not a period after the restart.
    let api = imcs(&hub, &hub_ns);
    let next = eventually("the next heartbeat", || {
        let api = api.clone();
        async move {
            let imc = api.get(M).await.ok()?;
            joined(&imc, SEI).and_then(|j| j.3).filter(|b| *b > first)
        }
    })
    .await;
    let gap = next.duration_since(first).as_secs_f64();
    assert!(
        (18.0..=23.0).contains(&gap),
        "next heartbeat {gap} s after the first"
    );
    assert_eq!(status_writes(&hub).await - writes, 1.0);
    running.shutdown().await;
}

/// A member whose API server does not answer gets no heartbeat (fleet sees it gone, as it
/// would see its agent gone); once it answers again, heartbeats resume.
#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_does_not_answer_gets_no_heartbeat_until_it_does() {
    let (mut fleet, hub, _member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let period = 2;
    create_imc(&hub, &hub_ns, Some(period), true).await;
    let running = start(&fleet, "internalmembercluster").await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;

    fleet.member_mut(M).kill();
    // A heartbeat already on its way may land: read after it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped = get_imc(&hub, &hub_ns).await;
    let beat = |imc: &InternalMemberCluster| joined(imc, SEI).and_then(|j| j.3);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let still = get_imc(&hub, &hub_ns).await;
    assert_eq!(
        beat(&still),
        beat(&stopped),
        "a heartbeat for a member that does not answer"
    );
    assert!(
        both(&still, "True", "AgentJoined"),
        "the conditions stay as they were"
    );
    let unreachable = sum(
        &running.metrics.encode(),
        "fleetnet_reconcile_total",
        &["outcome=\"error:member_unreachable\""],
    );
    assert!(unreachable >= 1.0, "the failed probe is not counted");

    fleet.member_mut(M).start().await.expect("member back");
    let api = imcs(&hub, &hub_ns);
    let last = beat(&still).expect("heartbeat");
    within(Duration::from_secs(30), "heartbeats resume", || {
        let api = api.clone();
        async move {
            let imc = api.get(M).await.ok()?;
            joined(&imc, SEI).and_then(|j| j.3).filter(|b| *b > last)
        }
    })
    .await;
    running.shutdown().await;
}

/// The reference agent still running on a member we serve (it heartbeats the
/// ServiceExportImportAgent entry itself): told (outcome `other_writer`), its entry left as
/// it writes it, ours kept beating.
#[tokio::test(flavor = "multi_thread")]
async fn another_writer_of_an_agent_entry_is_told_not_fought() {
    let (fleet, hub, _member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let period = 6;
    create_imc(&hub, &hub_ns, Some(period), true).await;
    let running = start(&fleet, "internalmembercluster").await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;
    // Let a heartbeat of ours be remembered as ours.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let api = imcs(&hub, &hub_ns);
    let mut written = None;
    for _ in 0..10 {
        // As the agent does: read, set its entry's heartbeat to now, update.
        let mut imc = api.get(M).await.expect("get");
        let now = Timestamp::from_second(Timestamp::now().as_second()).expect("now");
        let status = imc.status.as_mut().expect("status");
        let entry = status
            .agent_status
            .iter_mut()
            .find(|a| a.type_ == SEI)
            .expect("entry");
        entry.last_received_heartbeat =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        if api
            .replace_status(M, &PostParams::default(), &imc)
            .await
            .is_ok()
        {
            written = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let imc = get_imc(&hub, &hub_ns).await;
    assert_eq!(
        joined(&imc, SEI).and_then(|j| j.3),
        written,
        "the other writer's fresh heartbeat was overwritten"
    );
    let ours = joined(&imc, MCS).and_then(|j| j.3).expect("heartbeat");
    let age = Timestamp::now().duration_since(ours).as_secs_f64();
    assert!(age <= f64::from(period) + 1.5, "ours stopped: {age} s old");
    assert!(outcomes(&running, "other_writer") >= 1.0, "not told");
    running.shutdown().await;
}

/// The hub down for a while (no heartbeat can be written): once it is back, the heartbeat
/// comes within a period, not after a long backoff.
#[tokio::test(flavor = "multi_thread")]
async fn heartbeats_resume_within_a_period_once_the_hub_is_back() {
    let (mut fleet, hub, _member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let period = 3;
    create_imc(&hub, &hub_ns, Some(period), true).await;
    let running = start(&fleet, "internalmembercluster").await;
    wait_both(&hub, &hub_ns, "True", "AgentJoined").await;

    fleet.hub_mut().kill();
    tokio::time::sleep(Duration::from_secs(20)).await;
    fleet.hub_mut().start().await.expect("hub back");
    let back = Timestamp::now();
    let hub = fleet.hub().client().await.expect("hub client");
    let api = imcs(&hub, &hub_ns);
    let beat = within(
        Duration::from_secs(30),
        "a heartbeat after the outage",
        || {
            let api = api.clone();
            async move {
                let imc = api.get(M).await.ok()?;
                joined(&imc, SEI)
                    .and_then(|j| j.3)
                    .filter(|b| b.as_second() >= back.as_second())
            }
        },
    )
    .await;
    let after = beat.duration_since(back).as_secs_f64();
    assert!(
        after <= f64::from(period) + 2.0,
        "first heartbeat {after} s after the hub was back"
    );
    running.shutdown().await;
}
