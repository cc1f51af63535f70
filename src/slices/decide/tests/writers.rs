//! The agent still writing a slice's export: the slice is left to it ([`Plan::left_to`]).
use super::*;
use crate::controller::writers::OtherWriter;

fn agent() -> OtherWriter {
    OtherWriter {
        manager: "member-net-controller-manager",
        time: now(),
    }
}

#[test]
fn an_update_of_another_writers_export_writes_nothing_and_says_why() {
    let plan = an_endpoint_change();
    assert!(matches!(plan.hub, Some(HubWrite::Update { .. })));
    let held = plan.left_to(Some(agent()));
    assert_eq!(held.writes(), 0, "{held:?}");
    assert_eq!(held.held, Some(agent()));
    assert_eq!(
        crate::controller::Outcome::reconciled(held.outcome).label(),
        "endpointslice:other_writer"
    );
}

#[test]
fn without_another_writer_or_an_update_the_plan_stands() {
    let (se, s, hub) = exported("n-1");
    let converged = run(&s, Some(&se), Some(&hub), &[&hub]);
    assert_eq!(converged.clone().left_to(Some(agent())), converged);
    let first = run(&slice(), Some(&se), None, &[]);
    assert_eq!(first.clone().left_to(Some(agent())), first);
    let withdrawn = run(&s, Some(&export("False", "False")), Some(&hub), &[&hub]);
    assert_eq!(withdrawn.clone().left_to(Some(agent())), withdrawn);
}
