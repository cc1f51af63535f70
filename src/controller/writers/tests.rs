use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

use super::{HOLD, OtherWriter, Writers, other_writer, since};

const OURS: &str = "fleetnet-hub";
const AGENT: &str = "member-net-controller-manager";

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).expect("a time")
}

fn meta(entries: &[(&str, i64)]) -> ObjectMeta {
    let entries = entries
        .iter()
        .map(|(manager, second)| ManagedFieldsEntry {
            manager: Some(manager.to_string()),
            operation: Some("Update".into()),
            time: Some(Time(at(*second))),
            ..Default::default()
        })
        .collect();
    ObjectMeta {
        managed_fields: Some(entries),
        ..Default::default()
    }
}

#[test]
fn what_the_agent_wrote_before_the_member_was_engaged_is_adopted() {
    assert_eq!(other_writer(&meta(&[(AGENT, 10)]), OURS, at(20)), None);
    assert_eq!(other_writer(&meta(&[(AGENT, 20)]), OURS, at(20)), None);
}

#[test]
fn the_agent_writing_after_the_engagement_is_another_writer() {
    let found = other_writer(&meta(&[(AGENT, 10), (OURS, 5)]), OURS, at(8));
    assert_eq!(
        found,
        Some(OtherWriter {
            manager: AGENT,
            time: at(10)
        })
    );
    let mcs = other_writer(&meta(&[("mcs-controller-manager", 30)]), OURS, at(0));
    assert_eq!(mcs.map(|o| o.manager), Some("mcs-controller-manager"));
}

#[test]
fn our_write_after_the_agents_is_the_last_one() {
    assert_eq!(
        other_writer(&meta(&[(AGENT, 10), (OURS, 12)]), OURS, at(0)),
        None
    );
    // Same second: which was last is unknown, and leaving the object alone is the safe side.
    assert!(other_writer(&meta(&[(AGENT, 12), (OURS, 12)]), OURS, at(0)).is_some());
}

#[test]
fn writers_that_are_not_the_agents_do_not_count() {
    for manager in [
        "kubectl-edit",
        "kubectl-client-side-apply",
        "hub-net-controller-manager",
        "kube-controller-manager",
    ] {
        assert_eq!(
            other_writer(&meta(&[(manager, 10)]), OURS, at(0)),
            None,
            "{manager}"
        );
    }
    let no_time = ObjectMeta {
        managed_fields: Some(vec![ManagedFieldsEntry {
            manager: Some(AGENT.into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(other_writer(&no_time, OURS, at(0)), None);
    assert_eq!(other_writer(&ObjectMeta::default(), OURS, at(0)), None);
}

#[test]
fn the_newest_agent_write_is_told() {
    let m = meta(&[(AGENT, 10), ("mcs-controller-manager", 15), (AGENT, 12)]);
    let found = other_writer(&m, OURS, at(0)).expect("another writer");
    assert_eq!(
        (found.manager, found.time),
        ("mcs-controller-manager", at(15))
    );
}

#[test]
fn a_write_holds_for_a_while_then_the_object_is_taken_over() {
    let engaged = at(0);
    let written = meta(&[(AGENT, 10)]);
    let now = at(10) + jiff::SignedDuration::try_from(HOLD).expect("hold");
    assert!(other_writer(&written, OURS, since(engaged, at(11))).is_some());
    assert!(other_writer(&written, OURS, since(engaged, now)).is_none());
    let other = other_writer(&written, OURS, engaged).expect("another writer");
    assert_eq!(other.wait(at(11)), HOLD - std::time::Duration::from_secs(1));
    assert_eq!(other.wait(now), std::time::Duration::from_secs(1));
}

#[test]
fn a_view_keeps_what_the_decision_reads() {
    let m = meta(&[(AGENT, 10), (OURS, 5), ("kubectl-edit", 30)]);
    let kept = Writers::of(&m, OURS);
    let rebuilt = ObjectMeta {
        managed_fields: kept.managed_fields(),
        ..Default::default()
    };
    assert_eq!(Writers::of(&rebuilt, OURS), kept);
    assert_eq!(kept.other_writer(at(0)), other_writer(&m, OURS, at(0)));
    assert_eq!(Writers::default().managed_fields(), None);
}
