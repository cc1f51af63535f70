//! The agent still writing an export's ISE: the export is left to it ([`Plan::left_to`]).
use super::*;
use crate::controller::writers::OtherWriter;

fn agent() -> OtherWriter {
    OtherWriter {
        manager: "member-net-controller-manager",
        time: now(),
    }
}

#[test]
fn an_update_of_another_writers_ise_writes_nothing_and_says_why() {
    let (se, ise) = converge();
    let plan = run(&settings(), &se, Some(&port_changed()), ise.as_ref());
    assert!(matches!(plan.hub, Some(HubWrite::UpdateSpec(_))));
    let held = plan.left_to(Some(agent()));
    assert_eq!(held.writes(), 0, "{held:#?}");
    assert!(held.events.is_empty());
    assert_eq!(held.exported_since, None);
    assert_eq!(held.held, Some(agent()));
    assert_eq!(held.outcome.label(), "serviceexport:other_writer");
}

#[test]
fn without_another_writer_or_an_update_the_plan_stands() {
    let (se, ise) = converge();
    let update = run(&settings(), &se, Some(&port_changed()), ise.as_ref());
    assert_eq!(update.clone().left_to(None), update);
    // Converged: nothing to leave to anyone.
    let converged = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert_eq!(converged.clone().left_to(Some(agent())), converged);
    // A withdrawal and a creation are not a second writer's business.
    let gone = run(&settings(), &se, None, ise.as_ref());
    assert_eq!(gone.clone().left_to(Some(agent())), gone);
    let fresh = run(&settings(), &export(), Some(&service()), None);
    assert_eq!(fresh.clone().left_to(Some(agent())), fresh);
}
