//! What the ServiceExport's status says of a decision: its conditions, each set only when it
//! changes, and the Events that tell of a change; the hub's conflict verdict copied.

use super::{EventKind, EventSpec, Plan, Subject, reason};
use crate::api::{
    CONDITION_CONFLICT, ConditionSpec, InternalServiceExport, ServiceExport, condition_matches,
    find_condition,
};

/// The `Conflict` condition: the hub's verdict copied, in the ServiceExport's own
/// generation; or re-armed (pending) when there is no verdict for the current export.
pub(super) fn conflict_condition(
    plan: &mut Plan,
    subject: &Subject<'_>,
    own_ise: Option<&InternalServiceExport>,
) {
    let (se, name) = (subject.se, subject.name);
    let hub_conflict = own_ise.and_then(|ise| find_condition(ise.conditions(), CONDITION_CONFLICT));
    let current_conflict = find_condition(se.conditions(), CONDITION_CONFLICT);
    if let Some(hub) = hub_conflict {
        let verdict = ConditionSpec {
            type_: CONDITION_CONFLICT.into(),
            status: hub.status.clone(),
            reason: hub.reason.clone(),
            message: hub.message.clone(),
            observed_generation: subject.generation,
        };
        match verdict_event(name, &hub.status) {
            Some(event) => set_and_tell(plan, se, verdict, event),
            None => {
                set_if_changed(plan, se, verdict);
            }
        }
    } else if current_conflict.is_none() || own_ise.is_none() {
        // No verdict yet, or a verdict about an export that no longer exists: re-arm.
        let pending = ConditionSpec::new(
            CONDITION_CONFLICT,
            "Unknown",
            reason::PENDING_CONFLICT_RESOLUTION,
            format!(
                "service {}/{name} is pending export conflict resolution",
                subject.ns
            ),
            subject.generation,
        );
        let event = EventSpec::new(
            EventKind::Normal,
            "PendingExportConflictResolution",
            format!("Service {name} is pending export conflict resolution"),
        );
        set_and_tell(plan, se, pending, event);
    }
}

/// The event fleet-networking records when it copies the hub's verdict to the export.
fn verdict_event(name: &str, status: &str) -> Option<EventSpec> {
    match status {
        "True" => Some(EventSpec::new(
            EventKind::Warning,
            "ServiceExportConflictFound",
            format!("Service {name} is in conflict with other exported services"),
        )),
        "False" => Some(EventSpec::new(
            EventKind::Normal,
            "NoServiceExportConflictFound",
            format!("Service {name} is exported without conflict"),
        )),
        _ => None,
    }
}

/// Sets `want` and, only when that changes the export, records `event`.
pub(super) fn set_and_tell(
    plan: &mut Plan,
    se: &ServiceExport,
    want: ConditionSpec,
    event: EventSpec,
) {
    if set_if_changed(plan, se, want) {
        plan.events.push(event);
    }
}

/// Adds `want` to the plan's conditions unless the export already carries it. True if added.
pub(super) fn set_if_changed(plan: &mut Plan, se: &ServiceExport, want: ConditionSpec) -> bool {
    if condition_matches(find_condition(se.conditions(), &want.type_), &want) {
        return false;
    }
    plan.conditions.push(want);
    true
}
