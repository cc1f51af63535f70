use super::*;
use crate::api::{MULTI_CLUSTER_SERVICE_AGENT as MCS, SERVICE_EXPORT_IMPORT_AGENT as SEI};

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).expect("a time")
}

/// An IMC of generation 3 in `state`, period 60 s, with fleet's MemberAgent entry and fields
/// other agents write, and `entries` of ours: `(type, Joined status, reason, heartbeat at)`.
fn imc(state: &str, entries: &[(&str, &str, &str, i64)]) -> InternalMemberCluster {
    let mut agent_status = vec![serde_json::json!({
        "type": "MemberAgent",
        "conditions": [{"type": "Joined", "status": "True", "reason": "MemberJoined",
                        "message": "", "observedGeneration": 3,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "lastReceivedHeartbeat": "2026-01-01T00:00:00Z"
    })];
    for (type_, status, reason, beat) in entries {
        let beat = Time(at(*beat));
        agent_status.push(serde_json::json!({
            "type": type_,
            "conditions": [{"type": "Joined", "status": status, "reason": reason,
                            "message": "", "observedGeneration": 3,
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "lastReceivedHeartbeat": beat,
        }));
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "m1", "namespace": "fleet-member-m1", "generation": 3},
        "spec": {"state": state, "heartbeatPeriodSeconds": 60},
        "status": {"agentStatus": agent_status, "properties": {"k": {"value": "v"}}},
    }))
    .expect("an IMC")
}

fn observe<'a>(
    imc: &'a InternalMemberCluster,
    now: i64,
    ours: &'a [(&'static str, Timestamp)],
) -> Observation<'a> {
    Observation {
        imc,
        agents: AgentTypes::default(),
        now: at(now),
        jitter: 0.5,
        ours,
    }
}

fn joined_at(status: &InternalMemberClusterStatus, agent: &str) -> (String, String, Option<i64>) {
    let entry = status
        .agent_status
        .iter()
        .find(|a| a.type_ == agent)
        .expect("entry");
    let c = find_condition(&entry.conditions, AGENT_JOINED).expect("Joined");
    let beat = entry
        .last_received_heartbeat
        .as_ref()
        .map(|t| t.0.as_second() - at(0).as_second());
    assert_eq!(c.observed_generation, Some(3));
    assert_eq!(c.message, "");
    (c.status.clone(), c.reason.clone(), beat)
}

#[test]
fn a_first_join_writes_both_entries_after_fleets_own_and_keeps_every_other_field() {
    let imc = imc("Join", &[]);
    let Plan::Join {
        status: Some(status),
        next,
        others,
    } = decide(&observe(&imc, 100, &[]))
    else {
        panic!("a write");
    };
    assert!(others.is_empty());
    assert_eq!(
        next,
        Duration::from_secs(60),
        "the middle of the jitter band"
    );
    let types: Vec<_> = status
        .agent_status
        .iter()
        .map(|a| a.type_.as_str())
        .collect();
    assert_eq!(types, ["MemberAgent", MCS, SEI]);
    for agent in [MCS, SEI] {
        assert_eq!(
            joined_at(&status, agent),
            ("True".into(), REASON_JOINED.into(), Some(100))
        );
    }
    let before = imc.status.as_ref().expect("status");
    assert_eq!(
        status.agent_status[0], before.agent_status[0],
        "MemberAgent untouched"
    );
    assert_eq!(status.other, before.other, "other status fields untouched");
}

#[test]
fn fresh_heartbeats_write_nothing_and_wait_for_the_oldest_to_be_due() {
    // Written 20 s ago (a restart since): the next heartbeat 40 s from now, nothing now.
    let imc = imc(
        "Join",
        &[
            (MCS, "True", REASON_JOINED, 80),
            (SEI, "True", REASON_JOINED, 80),
        ],
    );
    let plan = decide(&observe(&imc, 100, &[]));
    assert_eq!(
        plan,
        Plan::Join {
            status: None,
            next: Duration::from_secs(40),
            others: vec![]
        }
    );
    // Within the jitter band of a period: due, one write with both entries.
    let Plan::Join {
        status: Some(status),
        ..
    } = decide(&observe(&imc, 80 + 57, &[]))
    else {
        panic!("due");
    };
    assert_eq!(joined_at(&status, MCS).2, Some(137));
    assert_eq!(joined_at(&status, SEI).2, Some(137));
}

#[test]
fn a_changed_condition_is_written_at_once_with_its_heartbeat() {
    let imc = imc(
        "Join",
        &[
            (MCS, "False", REASON_LEFT, 90),
            (SEI, "True", REASON_JOINED, 90),
        ],
    );
    let Plan::Join {
        status: Some(status),
        ..
    } = decide(&observe(&imc, 100, &[]))
    else {
        panic!("a write");
    };
    assert_eq!(
        joined_at(&status, MCS),
        ("True".into(), REASON_JOINED.into(), Some(100))
    );
    // Fresh (10 s of a 60 s period): left as it was.
    assert_eq!(joined_at(&status, SEI).2, Some(90));
}

#[test]
fn jitter_stays_within_five_percent_of_the_period() {
    let period = Duration::from_secs(60);
    assert_eq!(jittered(period, 0.0), Duration::from_secs(57));
    assert_eq!(jittered(period, 0.5), period);
    assert!(jittered(period, 0.999_999) < Duration::from_secs(63));
    assert_eq!(jittered(period, 7.0), Duration::from_secs(63), "clamped");
    let mut imc = imc("Join", &[]);
    imc.spec.heartbeat_period_seconds = Some(-4);
    assert_eq!(super::period(&imc), Duration::from_secs(1));
}

#[test]
fn another_writers_heartbeat_is_told_and_its_fresh_entry_kept() {
    // We wrote both at 40; the reference agent wrote SEI at 95.
    let ours = [(MCS, at(40)), (SEI, at(40))];
    let imc = imc(
        "Join",
        &[
            (MCS, "True", REASON_JOINED, 40),
            (SEI, "True", REASON_JOINED, 95),
        ],
    );
    let Plan::Join {
        status: Some(status),
        others,
        ..
    } = decide(&observe(&imc, 100, &ours))
    else {
        panic!("MCS is due");
    };
    assert_eq!(others, [SEI]);
    assert_eq!(joined_at(&status, MCS).2, Some(100));
    assert_eq!(joined_at(&status, SEI).2, Some(95), "not overwritten");
    // A view behind our own write is not another writer.
    let behind = [(MCS, at(40)), (SEI, at(96))];
    let Plan::Join { others, .. } = decide(&observe(&imc, 100, &behind)) else {
        panic!("join");
    };
    assert!(others.is_empty());
}

#[test]
fn leave_cleans_mcs_then_exports_then_writes_agent_left_without_a_heartbeat() {
    let leaving = imc(
        "Leave",
        &[
            (MCS, "True", REASON_JOINED, 90),
            (SEI, "True", REASON_JOINED, 90),
        ],
    );
    let Plan::Leave {
        cleanup,
        status: Some(status),
    } = decide(&observe(&leaving, 100, &[]))
    else {
        panic!("leave");
    };
    assert_eq!(
        cleanup,
        [Cleanup::MultiClusterServices, Cleanup::ServiceExports]
    );
    for agent in [MCS, SEI] {
        assert_eq!(
            joined_at(&status, agent),
            ("False".into(), REASON_LEFT.into(), Some(90))
        );
    }
    // Left already: the cleanup is looked at again, nothing written.
    let left = imc(
        "Leave",
        &[
            (MCS, "False", REASON_LEFT, 90),
            (SEI, "False", REASON_LEFT, 90),
        ],
    );
    assert_eq!(
        decide(&observe(&left, 100, &[])),
        Plan::Leave {
            cleanup: vec![Cleanup::MultiClusterServices, Cleanup::ServiceExports],
            status: None
        }
    );
}

#[test]
fn one_agent_type_reports_and_cleans_only_its_own() {
    let imc = imc("Leave", &[]);
    let mut o = observe(&imc, 100, &[]);
    o.agents = AgentTypes::parse(SEI).expect("parses");
    let Plan::Leave {
        cleanup,
        status: Some(status),
    } = decide(&o)
    else {
        panic!("leave");
    };
    assert_eq!(cleanup, [Cleanup::ServiceExports]);
    let types: Vec<_> = status
        .agent_status
        .iter()
        .map(|a| a.type_.as_str())
        .collect();
    assert_eq!(types, ["MemberAgent", SEI]);
    assert_eq!(
        joined_at(&status, SEI),
        ("False".into(), REASON_LEFT.into(), None)
    );
}

#[test]
fn an_unknown_state_writes_nothing() {
    let imc = imc("Pause", &[]);
    assert_eq!(decide(&observe(&imc, 100, &[])), Plan::Invalid);
}
