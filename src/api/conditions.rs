//! `metav1.Condition` helpers with the semantics of apimachinery's `meta.SetStatusCondition`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// ServiceExport condition: is the Service valid for export.
pub const CONDITION_VALID: &str = "Valid";
/// ServiceExport / InternalServiceExport condition: export conflict resolution on the hub.
pub const CONDITION_CONFLICT: &str = "Conflict";

/// A condition as decided, without its transition time (which only the writer knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSpec {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub observed_generation: Option<i64>,
}

impl ConditionSpec {
    /// A condition of `type_` with `status`, `reason` and `message`, for `observed_generation`.
    pub fn new(
        type_: &str,
        status: &str,
        reason: &str,
        message: String,
        observed_generation: Option<i64>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation,
        }
    }
}

/// The condition of `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Same status, reason, message and observed generation: writing `want` would change nothing.
pub fn condition_matches(current: Option<&Condition>, want: &ConditionSpec) -> bool {
    current.is_some_and(|c| {
        c.status == want.status
            && c.reason == want.reason
            && c.message == want.message
            && c.observed_generation == want.observed_generation
    })
}

/// Sets `want` in `conditions`; `lastTransitionTime` moves to `now` only when the status changes.
pub fn set_condition(conditions: &mut Vec<Condition>, want: &ConditionSpec, now: Time) {
    match conditions.iter_mut().find(|c| c.type_ == want.type_) {
        Some(c) => {
            if c.status != want.status {
                c.last_transition_time = now;
            }
            c.status.clone_from(&want.status);
            c.reason.clone_from(&want.reason);
            c.message.clone_from(&want.message);
            c.observed_generation = want.observed_generation;
        }
        None => conditions.push(Condition {
            type_: want.type_.clone(),
            status: want.status.clone(),
            reason: want.reason.clone(),
            message: want.message.clone(),
            observed_generation: want.observed_generation,
            last_transition_time: now,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(status: &str, message: &str) -> ConditionSpec {
        ConditionSpec {
            type_: CONDITION_VALID.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            observed_generation: Some(1),
        }
    }

    fn at(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).expect("valid timestamp"))
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut conds = vec![];
        set_condition(&mut conds, &spec("True", "a"), at(10));
        set_condition(&mut conds, &spec("True", "b"), at(20));
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].message, "b");
        assert_eq!(conds[0].last_transition_time, at(10));
        set_condition(&mut conds, &spec("False", "b"), at(30));
        assert_eq!(conds[0].last_transition_time, at(30));
    }

    #[test]
    fn matches_compares_message_and_generation() {
        let mut conds = vec![];
        set_condition(&mut conds, &spec("True", "a"), at(10));
        assert!(condition_matches(
            find_condition(&conds, CONDITION_VALID),
            &spec("True", "a")
        ));
        assert!(!condition_matches(
            find_condition(&conds, CONDITION_VALID),
            &spec("True", "b")
        ));
        let mut other_gen = spec("True", "a");
        other_gen.observed_generation = Some(2);
        assert!(!condition_matches(
            find_condition(&conds, CONDITION_VALID),
            &other_gen
        ));
        assert!(!condition_matches(None, &spec("True", "a")));
    }
}
