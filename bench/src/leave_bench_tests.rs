//! Unit tests of `leave_bench`: its table and its counts.

use super::*;

#[test]
fn the_table_says_whether_the_leave_was_in_time_and_what_is_left() {
    let nothing = Leftovers::default();
    let mut r = LeaveReport {
        members: 1,
        exports: EXPORTS,
        mcs: MCS,
        converge_s: 12.0,
        left_s: vec![6.5],
        before: Leftovers {
            ises: 100,
            ..Leftovers::default()
        },
        at_left: nothing.clone(),
        settled: nothing,
        member_requests: vec![WriteCount {
            resource: "serviceexports".into(),
            verb: "DELETE".into(),
            count: 100,
            conflicts: 0,
        }],
        hub_requests: vec![],
    };
    let table = leave_markdown(&r);
    assert!(table.contains("| 6.50 s / 6.50 s ✓ |"), "{table}");
    assert!(table.contains("5 s after `AgentLeft`"), "{table}");
    assert!(
        table.contains("InternalServiceImports 0, objects"),
        "{table}"
    );
    assert!(table.contains("| 100 |"), "{table}");
    assert!(
        table.contains("serviceexports DELETE 100 | 100 |"),
        "{table}"
    );
    r.left_s = vec![16.0];
    assert!(leave_markdown(&r).contains("16.00 s ✗"));
    r.left_s = vec![];
    assert!(leave_markdown(&r).contains("(0/1 left"));
}

#[test]
fn leftovers_total_every_kind() {
    let mut a = Leftovers {
        eses: 2,
        finalized: 1,
        ..Leftovers::default()
    };
    a.add(&Leftovers {
        isis: 3,
        ..Leftovers::default()
    });
    assert_eq!(a.total(), 6);
}
