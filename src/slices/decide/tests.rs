use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort as SlicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;
use crate::api::{
    CONDITION_CONFLICT, CONDITION_VALID, LAST_SEEN_GENERATION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport, ServiceExportStatus, UNIQUE_NAME_ANNOTATION,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;

const NOW: &str = "2026-12-05T10:00:00Z";
/// When a stamped slice's generation was first seen.
const SEEN: &str = "2026-12-05T09:00:00Z";

fn now() -> Timestamp {
    NOW.parse().expect("timestamp")
}

fn slice() -> EndpointSlice {
    let mut s = EndpointSlice {
        address_type: "IPv4".into(),
        endpoints: Some(vec![
            endpoint(&["10.0.0.1"], None),
            endpoint(&["10.0.0.2"], Some(true)),
            endpoint(&["10.0.0.3"], Some(false)),
        ]),
        ports: Some(vec![SlicePort {
            name: Some("http".into()),
            port: Some(80),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
        ..Default::default()
    };
    s.metadata.namespace = Some("work".into());
    s.metadata.name = Some("web-abcde".into());
    s.metadata.uid = Some("slice-uid".into());
    s.metadata.resource_version = Some("42".into());
    s.metadata.generation = Some(3);
    s.metadata.labels = Some(BTreeMap::from([(
        SERVICE_NAME_LABEL.to_string(),
        "web".to_string(),
    )]));
    s
}

fn endpoint(addresses: &[&str], ready: Option<bool>) -> Endpoint {
    Endpoint {
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
        conditions: Some(EndpointConditions {
            ready,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `s` with the unique name `name` only.
fn named(mut s: EndpointSlice, name: &str) -> EndpointSlice {
    s.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(UNIQUE_NAME_ANNOTATION.into(), name.into());
    s
}

/// `s` as an export leaves it: named `name`, its generation seen at [`SEEN`].
fn stamped(s: EndpointSlice, name: &str) -> EndpointSlice {
    let generation = s.metadata.generation.unwrap_or_default().to_string();
    let mut s = named(s, name);
    let annotations = s.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(LAST_SEEN_GENERATION_ANNOTATION.into(), generation);
    annotations.insert(LAST_SEEN_TIMESTAMP_ANNOTATION.into(), SEEN.into());
    s
}

fn seen() -> Time {
    Time(SEEN.parse().expect("timestamp"))
}

fn condition(type_: &str, status: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: "R".into(),
        message: String::new(),
        last_transition_time: Time(now()),
        observed_generation: None,
    }
}

fn export(valid: &str, conflict: &str) -> ServiceExport {
    let mut se = ServiceExport::default();
    se.metadata.namespace = Some("work".into());
    se.metadata.name = Some("web".into());
    se.status = Some(ServiceExportStatus {
        conditions: vec![
            condition(CONDITION_VALID, valid),
            condition(CONDITION_CONFLICT, conflict),
        ],
    });
    se
}

/// The export `decide` would create for `slice` under `name` (exported since [`SEEN`]), as
/// the hub would hold it.
fn hub_copy(slice: &EndpointSlice, name: &str) -> EndpointSliceExport {
    let mut e = EndpointSliceExport::default();
    e.metadata.name = Some(name.into());
    e.metadata.uid = Some(format!("{name}-uid"));
    e.spec = export_spec("m1", &SliceView::from(slice.clone()), seen()).0;
    e
}

fn run(
    slice: &EndpointSlice,
    export: Option<&ServiceExport>,
    named: Option<&EndpointSliceExport>,
    referring: &[&EndpointSliceExport],
) -> Plan {
    run_halves(Halves::BOTH, slice, export, named, referring)
}

fn run_halves(
    halves: Halves,
    slice: &EndpointSlice,
    export: Option<&ServiceExport>,
    named: Option<&EndpointSliceExport>,
    referring: &[&EndpointSliceExport],
) -> Plan {
    // The default `--max-export-bytes`.
    let max_bytes = 64 * 1024;
    run_limited(halves, slice, export, named, referring, max_bytes)
}

/// The EndpointSlice controller alone (`--controllers endpointslice`).
const EXPORT_ONLY: Halves = Halves {
    export: true,
    cleanup: false,
};
/// The EndpointSliceExport controller alone (`--controllers endpointsliceexport`).
const CLEANUP_ONLY: Halves = Halves {
    export: false,
    cleanup: true,
};

fn run_limited(
    halves: Halves,
    slice: &EndpointSlice,
    export: Option<&ServiceExport>,
    named: Option<&EndpointSliceExport>,
    referring: &[&EndpointSliceExport],
    max_bytes: u32,
) -> Plan {
    let slice = SliceView::from(slice.clone());
    let export = export.cloned().map(ExportVerdict::from);
    let named = named.cloned().map(ExportView::from);
    let referring: Vec<ExportView> = referring
        .iter()
        .map(|e| ExportView::from((*e).clone()))
        .collect();
    let referring: Vec<&ExportView> = referring.iter().collect();
    decide(&Observation {
        member: "m1",
        halves,
        slice: &slice,
        export: export.as_ref(),
        named: named.as_ref(),
        referring: &referring,
        now: now(),
        suffix: "1a2b3",
        max_bytes,
    })
}

#[test]
fn a_first_export_names_the_slice_then_creates_its_export_with_ready_addresses_only() {
    let se = export("True", "False");
    let plan = run(&slice(), Some(&se), None, &[]);
    let name = "m1-work-web-abcde-1a2b3";
    // The name and the last-seen pair, in one write, before the export.
    assert_eq!(
        plan.name,
        Some(NameChange::Stamp {
            unique: Some(name.into()),
            last_seen: Some(LastSeen {
                generation: 3,
                timestamp: NOW.into()
            })
        })
    );
    let Some(HubWrite::Create(ese)) = &plan.hub else {
        panic!("expected a create: {plan:?}")
    };
    assert_eq!(ese.metadata.name.as_deref(), Some(name));
    let addresses: Vec<&str> = ese
        .spec
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().map(String::as_str))
        .collect();
    assert_eq!(addresses, ["10.0.0.1", "10.0.0.2"], "not-ready left out");
    let r = &ese.spec.endpoint_slice_reference;
    assert_eq!(
        (
            r.cluster_id.as_str(),
            r.kind.as_str(),
            r.namespaced_name.as_str()
        ),
        ("m1", "", "work/web-abcde")
    );
    assert_eq!(
        r.api_version, None,
        "the reference's client leaves TypeMeta empty"
    );
    assert_eq!(
        (r.uid.as_str(), r.resource_version.as_str(), r.generation),
        ("slice-uid", "42", 3)
    );
    assert_eq!(r.exported_since, Some(Time(now())));
    assert_eq!(ese.spec.owner_service_reference.namespaced_name, "work/web");
    assert_eq!(ese.spec.ports[0].port, Some(80));
    assert_eq!(plan.outcome, Outcome::Exported);
    assert!(!plan.withdraws());
}

#[test]
fn a_converged_slice_writes_nothing() {
    let (se, s, hub) = exported("m1-work-web-abcde-1a2b3");
    let plan = run(&s, Some(&se), Some(&hub), &[&hub]);
    assert_eq!(plan.writes(), 0, "{plan:?}");
    assert_eq!(plan.outcome, Outcome::Unchanged);
}

/// A valid ServiceExport, its Service's slice stamped with the unique name `name`, and that
/// slice's export in the hub.
fn exported(name: &str) -> (ServiceExport, EndpointSlice, EndpointSliceExport) {
    let s = stamped(slice(), name);
    let hub = hub_copy(&s, name);
    (export("True", "False"), s, hub)
}

/// The plan for a slice exported as `n-1` whose endpoints changed since: a new ready address,
/// generation 4.
fn an_endpoint_change() -> Plan {
    let (se, s, hub) = exported("n-1");
    let mut changed = s;
    changed
        .endpoints
        .get_or_insert_with(Vec::new)
        .push(endpoint(&["10.0.0.9"], Some(true)));
    changed.metadata.generation = Some(4);
    run(&changed, Some(&se), Some(&hub), &[&hub])
}

/// Reference spec "should update exported endpointslice": a new generation is stamped on the
/// slice, then the export follows with it, exported since now.
#[test]
fn an_endpoint_change_stamps_the_new_generation_then_updates_the_export() {
    let plan = an_endpoint_change();
    assert_eq!(
        plan.name,
        Some(NameChange::Stamp {
            unique: None,
            last_seen: Some(LastSeen {
                generation: 4,
                timestamp: NOW.into()
            })
        })
    );
    let Some(HubWrite::Update { name, spec }) = &plan.hub else {
        panic!("expected an update: {plan:?}")
    };
    assert_eq!(name, "n-1");
    assert_eq!(spec.endpoints.len(), 3);
    let r = &spec.endpoint_slice_reference;
    assert_eq!(
        (r.generation, r.exported_since.clone()),
        (4, Some(Time(now())))
    );
    assert_eq!(plan.writes(), 2);
    assert!(!plan.withdraws());
}

/// The last-seen pair is where `exportedSince` comes from (kept across restarts): an export
/// that says otherwise is corrected, as the reference's update does.
#[test]
fn the_export_time_is_the_slices_last_seen_timestamp() {
    let se = export("True", "False");
    let s = stamped(slice(), "n-1");
    let mut hub = hub_copy(&s, "n-1");
    hub.spec.endpoint_slice_reference.exported_since =
        Some(Time("2026-01-01T00:00:00Z".parse().expect("t")));
    let plan = run(&s, Some(&se), Some(&hub), &[&hub]);
    assert_eq!(plan.name, None);
    let Some(HubWrite::Update { spec, .. }) = &plan.hub else {
        panic!("expected an update: {plan:?}")
    };
    assert_eq!(spec.endpoint_slice_reference.exported_since, Some(seen()));
}

/// Migration from the agent: a slice it annotated and the export it wrote (TypeMeta empty) are
/// taken over without a write; so is an export an earlier version wrote with the kind set.
#[test]
fn an_agent_exported_slice_is_adopted_without_a_write() {
    let se = export("True", "False");
    let s = stamped(slice(), "n-1");
    let agent = hub_copy(&s, "n-1");
    assert_eq!(agent.spec.endpoint_slice_reference.kind, "");
    assert_eq!(run(&s, Some(&se), Some(&agent), &[&agent]).writes(), 0);
    let mut earlier = agent.clone();
    earlier.spec.endpoint_slice_reference.kind = "EndpointSlice".into();
    earlier.spec.endpoint_slice_reference.api_version = Some("discovery.k8s.io/v1".into());
    assert_eq!(run(&s, Some(&se), Some(&earlier), &[&earlier]).writes(), 0);
}

/// A slice an earlier version exported, without the last-seen pair: stamped with its export's
/// time, the export left as it is.
#[test]
fn a_slice_exported_before_the_pair_existed_is_stamped_with_its_exports_time() {
    let se = export("True", "False");
    let s = named(slice(), "n-1");
    let hub = hub_copy(&s, "n-1");
    let plan = run(&s, Some(&se), Some(&hub), &[&hub]);
    assert_eq!(
        plan.name,
        Some(NameChange::Stamp {
            unique: None,
            last_seen: Some(LastSeen {
                generation: 3,
                timestamp: SEEN.into()
            })
        })
    );
    assert_eq!(plan.hub, None);
}

/// Reference specs "should not export ipv6 endpointslice", "... dangling endpointslice",
/// "... associated with unexported service", "... with invalid exported service" (and
/// conflicted): nothing written, whichever halves run.
#[test]
fn skipped_when_not_ipv4_unlabelled_unexported_invalid_or_conflicted() {
    let good = export("True", "False");
    let mut v6 = slice();
    v6.address_type = "IPv6".into();
    let mut unlabelled = slice();
    unlabelled.metadata.labels = None;
    let invalid = export("False", "False");
    let conflicted = export("True", "True");
    let pending = export("True", "Unknown");
    let cases: [(&str, &EndpointSlice, Option<&ServiceExport>); 6] = [
        ("ipv6", &v6, Some(&good)),
        ("no label", &unlabelled, Some(&good)),
        ("no export", &slice(), None),
        ("invalid", &slice(), Some(&invalid)),
        ("conflicted", &slice(), Some(&conflicted)),
        ("pending", &slice(), Some(&pending)),
    ];
    for halves in [Halves::BOTH, EXPORT_ONLY, CLEANUP_ONLY] {
        for (what, s, se) in cases {
            let plan = run_halves(halves, s, se, None, &[]);
            assert_eq!(plan.writes(), 0, "{what}: {plan:?}");
            assert_eq!(plan.outcome, Outcome::Skipped, "{what}");
        }
    }
}

/// An annotated IPv6 slice is left as it is, as the reference leaves it.
#[test]
fn an_annotated_ipv6_slice_is_left_as_it_is() {
    let se = export("True", "False");
    let mut v6 = stamped(slice(), "n-1");
    v6.address_type = "IPv6".into();
    assert_eq!(
        run_halves(EXPORT_ONLY, &v6, Some(&se), None, &[]).writes(),
        0
    );
}

/// Reference specs "should remove exported dangling endpointslice", "... from unexported
/// service", "... from invalid service", "... from conflicted exported service", "should
/// remove exported but deleted endpointslice", "should unexport endpointslices when service
/// export becomes invalid" (and conflicted): the export its name names goes, then the
/// unique name and the last-seen pair.
#[test]
fn an_exported_slice_is_withdrawn_when_it_stops_being_exportable() {
    let s = stamped(slice(), "n-1");
    let hub = hub_copy(&s, "n-1");
    let invalid = export("False", "False");
    let conflicted = export("True", "True");
    let mut deleting = export("True", "False");
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let mut slice_deleting = s.clone();
    slice_deleting.metadata.deletion_timestamp = Some(Time(now()));
    let mut dangling = s.clone();
    dangling.metadata.labels = None;
    let good = export("True", "False");
    for halves in [Halves::BOTH, EXPORT_ONLY] {
        for (what, sl, se) in [
            ("no ServiceExport", &s, None),
            ("invalid", &s, Some(&invalid)),
            ("conflicted", &s, Some(&conflicted)),
            ("ServiceExport deleting", &s, Some(&deleting)),
            ("slice deleting", &slice_deleting, Some(&good)),
            ("no Service", &dangling, Some(&good)),
        ] {
            let plan = run_halves(halves, sl, se, Some(&hub), &[&hub]);
            assert_eq!(
                plan.delete,
                [Doomed {
                    name: "n-1".into(),
                    uid: Some("n-1-uid".into())
                }],
                "{what}"
            );
            assert_eq!(plan.name, Some(NameChange::Withdraw), "{what}");
            assert!(plan.withdraws());
            assert_eq!(plan.outcome, Outcome::Unexported);
        }
    }
}

/// The EndpointSlice controller deletes only the export its name names, and only if that
/// export is this slice's; a name it cannot use still goes.
#[test]
fn withdrawing_alone_deletes_only_the_slices_own_named_export() {
    let s = stamped(slice(), "n-1");
    let mut other = slice();
    other.metadata.uid = Some("other-uid".into());
    let theirs = hub_copy(&other, "n-1");
    let plan = run_halves(EXPORT_ONLY, &s, None, Some(&theirs), &[&theirs]);
    assert!(plan.delete.is_empty(), "not this slice's: {plan:?}");
    assert_eq!(plan.name, Some(NameChange::Withdraw));
    let tampered = named(slice(), "Not_A_Name");
    let plan = run_halves(EXPORT_ONLY, &tampered, None, None, &[]);
    assert_eq!(
        (plan.delete.len(), plan.name),
        (0, Some(NameChange::Withdraw))
    );
}

/// Reference spec "should export the endpointslice with the invalid unique name annotation
/// again with a new assigned unique name": the old export stays (the EndpointSliceExport
/// controller removes it when it runs); the pair, still of this generation, is kept.
#[test]
fn a_tampered_name_gets_a_new_one() {
    let se = export("True", "False");
    let old = stamped(slice(), "n-1");
    let hub = hub_copy(&old, "n-1");
    let mut tampered = old.clone();
    tampered
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(UNIQUE_NAME_ANNOTATION.into(), "x_y".into());
    let new_name = "m1-work-web-abcde-1a2b3";
    for halves in [EXPORT_ONLY, Halves::BOTH] {
        let plan = run_halves(halves, &tampered, Some(&se), None, &[&hub]);
        assert_eq!(
            plan.name,
            Some(NameChange::Stamp {
                unique: Some(new_name.into()),
                last_seen: None
            })
        );
        let Some(HubWrite::Create(ese)) = &plan.hub else {
            panic!("expected a create: {plan:?}")
        };
        assert_eq!(
            ese.spec.endpoint_slice_reference.exported_since,
            Some(seen())
        );
        let deleted: Vec<&str> = plan.delete.iter().map(|d| d.name.as_str()).collect();
        let expected: &[&str] = if halves.cleanup { &["n-1"] } else { &[] };
        assert_eq!(deleted, expected, "{halves:?}");
    }
}

/// Reference spec "should export the endpointslice with the used unique name annotation again
/// with a new assigned unique name".
#[test]
fn a_name_another_slices_export_holds_gets_a_new_one() {
    let se = export("True", "False");
    let mut other = slice();
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("other-uid".into());
    let theirs = hub_copy(&other, "n-1");
    let copied = stamped(slice(), "n-1");
    let plan = run(&copied, Some(&se), Some(&theirs), &[]);
    assert_eq!(
        plan.name,
        Some(NameChange::Stamp {
            unique: Some("m1-work-web-abcde-1a2b3".into()),
            last_seen: None
        })
    );
    assert!(matches!(plan.hub, Some(HubWrite::Create(_))));
    assert!(plan.delete.is_empty(), "the other slice's export stays");
}

#[test]
fn a_terminating_export_is_waited_for() {
    let se = export("True", "False");
    let s = stamped(slice(), "n-1");
    let mut hub = hub_copy(&s, "n-1");
    hub.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&s, Some(&se), Some(&hub), &[&hub]);
    assert_eq!(plan.writes(), 0);
    assert!(plan.recheck);
    assert_eq!(plan.outcome, Outcome::Waiting);
}

/// The EndpointSliceExport controller: an export whose slice is gone goes (the EndpointSlice
/// controller alone ignores a slice it cannot read).
#[test]
fn a_gone_slice_takes_its_exports_with_it_when_the_cleanup_runs() {
    let s = stamped(slice(), "n-1");
    let hub = ExportView::from(hub_copy(&s, "n-1"));
    for halves in [Halves::BOTH, CLEANUP_ONLY] {
        let plan = decide_gone(halves, &[&hub]);
        assert_eq!(plan.delete.len(), 1);
        assert!(plan.withdraws());
        assert_eq!(decide_gone(halves, &[]).writes(), 0);
    }
    assert_eq!(decide_gone(EXPORT_ONLY, &[&hub]).writes(), 0);
}

/// The EndpointSliceExport controller alone: the exports of a slice not under its unique name
/// go; nothing else is written, neither the slice nor an export.
#[test]
fn the_cleanup_alone_deletes_exports_not_under_the_slices_name() {
    let se = export("True", "False");
    let s = stamped(slice(), "n-1");
    let own = hub_copy(&s, "n-1");
    let old = hub_copy(&s, "n-0");
    let plan = run_halves(CLEANUP_ONLY, &s, Some(&se), Some(&own), &[&own, &old]);
    let deleted: Vec<&str> = plan.delete.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(deleted, ["n-0"]);
    assert_eq!((plan.name, plan.hub), (None, None));
    // A slice without a name: every export of it goes; nor is it exported.
    let plan = run_halves(CLEANUP_ONLY, &slice(), Some(&se), None, &[&own]);
    assert_eq!((plan.delete.len(), plan.name, plan.hub), (1, None, None));
}

#[test]
fn unique_names_are_dns_subdomains_even_for_long_inputs() {
    assert!(is_dns1123_subdomain("m1-work-web-1a2b3"));
    assert!(is_dns1123_subdomain("a.b-c"));
    for bad in ["", "-a", "a-", "A", "a_b", "a..b", &"a".repeat(254)] {
        assert!(!is_dns1123_subdomain(bad), "{bad}");
    }
    let mut s = slice();
    s.metadata.name = Some("x".repeat(253));
    let name = new_unique_name(&"m".repeat(100), &SliceView::from(s), "1a2b3");
    assert!(is_dns1123_subdomain(&name), "{name}");
    assert!(name.ends_with("-1a2b3"));
    // A member name that cannot be part of a DNS name: a random one.
    let odd = new_unique_name("Member_One", &SliceView::from(slice()), "1a2b3");
    assert_eq!(odd.len(), 25);
    assert!(is_dns1123_subdomain(&odd));
}

mod limits;
mod writers;
