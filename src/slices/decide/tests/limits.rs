//! What a member's slice may not put into the hub: addresses that are not IPv4, exports
//! larger than `--max-export-bytes`.

use super::*;

#[test]
fn malformed_addresses_are_left_out_and_named() {
    let se = export("True", "False");
    let mut s = slice();
    s.endpoints = Some(vec![
        endpoint(&["10.0.0.1", "fe80::1"], None),
        endpoint(&["nope"], None),
    ]);
    let plan = run(&s, Some(&se), None, &[]);
    assert_eq!(plan.malformed, ["fe80::1", "nope"]);
    let Some(HubWrite::Create(ese)) = &plan.hub else {
        panic!("expected a create")
    };
    assert_eq!(ese.spec.endpoints.len(), 1);
}

/// A slice with `n` ready endpoints.
fn large(n: u32) -> EndpointSlice {
    let mut s = slice();
    s.endpoints = Some(
        (0..n)
            .map(|i| endpoint(&[&format!("10.1.{}.{}", i / 250, i % 250)], Some(true)))
            .collect(),
    );
    s
}

#[test]
fn a_slice_whose_export_is_too_large_is_not_written() {
    let se = export("True", "False");
    let plan = run_limited(Halves::BOTH, &large(200), Some(&se), None, &[], 4096);
    assert_eq!(plan.hub, None, "{plan:?}");
    assert_eq!(plan.outcome, Outcome::TooLarge);
    assert!(plan.too_large.is_some_and(|b| b > 4096), "{plan:?}");
    // Within the limit it is.
    let plan = run_limited(Halves::BOTH, &slice(), Some(&se), None, &[], 4096);
    assert!(matches!(plan.hub, Some(HubWrite::Create(_))), "{plan:?}");
    assert_eq!(plan.too_large, None);
}

#[test]
fn an_exported_slice_grown_too_large_keeps_its_export() {
    let se = export("True", "False");
    let small = stamped(slice(), "n-1");
    let hub = hub_copy(&small, "n-1");
    let grown = stamped(large(200), "n-1");
    let plan = run_limited(Halves::BOTH, &grown, Some(&se), Some(&hub), &[&hub], 4096);
    assert_eq!(plan.hub, None, "not updated: {plan:?}");
    assert!(
        plan.delete.is_empty() && !plan.withdraws(),
        "nor withdrawn: {plan:?}"
    );
    assert_eq!(plan.outcome, Outcome::TooLarge);
}
