use super::*;
use crate::api::{EndpointPort as ImportedPort, ExportedEndpoint as ImportedEndpoint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const FLEET: &str = "fleet-system";

fn import() -> EndpointSliceImport {
    let mut i = EndpointSliceImport::default();
    i.metadata.name = Some("m2-work-app-ab12c".into());
    i.metadata.namespace = Some("fleet-member-m1".into());
    i.spec.address_type = "IPv4".into();
    i.spec.endpoints = vec![ImportedEndpoint {
        addresses: vec!["1.2.3.4".into()],
    }];
    i.spec.ports = vec![ImportedPort {
        name: Some("http".into()),
        port: Some(80),
        protocol: Some("TCP".into()),
        app_protocol: Some("www".into()),
    }];
    i.spec.owner_service_reference.namespace = "work".into();
    i.spec.owner_service_reference.name = "app".into();
    i.spec.endpoint_slice_reference.cluster_id = "m2".into();
    i.spec.endpoint_slice_reference.generation = 3;
    i
}

fn mcs(name: &str, derived: Option<&str>, deleting: bool) -> Arc<MultiClusterService> {
    let mut m = MultiClusterService::default();
    m.metadata.name = Some(name.into());
    m.metadata.namespace = Some("work".into());
    m.spec.service_import.name = "app".into();
    m.metadata.labels =
        derived.map(|d| BTreeMap::from([(DERIVED_SERVICE_LABEL.to_string(), d.to_string())]));
    if deleting {
        m.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    }
    Arc::new(m)
}

fn with_finalizer(mut i: EndpointSliceImport) -> EndpointSliceImport {
    i.metadata.finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    i
}

fn observed(i: &EndpointSliceImport, generation: &str) -> EndpointSliceImport {
    let mut i = with_finalizer(i.clone());
    i.metadata.annotations = Some(BTreeMap::from([(
        LAST_OBSERVED_GENERATION_ANNOTATION.to_string(),
        generation.to_string(),
    )]));
    i
}

fn decide_with(
    import: &EndpointSliceImport,
    mcses: &[Arc<MultiClusterService>],
    derived: DerivedService,
    slice: Option<&EndpointSlice>,
) -> Plan {
    decide(&Observation {
        import,
        member: "m1",
        namespace: FLEET,
        multi_cluster_services: mcses,
        derived,
        slice,
        now: Timestamp::from_second(100).expect("time"),
    })
}

#[test]
fn without_a_multiclusterservice_nothing_is_imported_and_nothing_retried() {
    let plan = decide_with(&import(), &[], DerivedService::Live, None);
    assert_eq!(plan.outcome, Outcome::NoMultiClusterService);
    assert_eq!((plan.writes(), plan.retry), (0, false));
}

#[test]
fn a_missing_bad_or_deleting_derived_service_is_retried_without_writing() {
    let cases = [
        (mcs("a", None, false), DerivedService::Live),
        (mcs("a", Some(""), false), DerivedService::Live),
        (mcs("a", Some("Bad_Name"), false), DerivedService::Live),
        (
            mcs("a", Some("work-app-1d2ef"), false),
            DerivedService::Missing,
        ),
        (
            mcs("a", Some("work-app-1d2ef"), false),
            DerivedService::Deleting,
        ),
        (mcs("a", Some("work-app-1d2ef"), true), DerivedService::Live),
    ];
    for (m, derived) in cases {
        let plan = decide_with(&import(), &[m], derived, None);
        assert_eq!(plan.outcome, Outcome::NoDerivedService);
        assert_eq!((plan.writes(), plan.retry), (0, true));
    }
}

#[test]
fn the_first_live_labelled_multiclusterservice_names_the_derived_service() {
    let all = [
        mcs("a", Some("gone"), true),
        mcs("c", Some("third"), false),
        mcs("b", Some("second"), false),
        mcs("0", None, false),
    ];
    assert_eq!(derived_service_name(&all), "second");
    assert_eq!(derived_service_name(&all[..1]), "");
}

#[test]
fn a_first_import_adds_the_finalizer_creates_the_slice_and_observes() {
    let plan = decide_with(
        &import(),
        &[mcs("a", Some("work-app-1d2ef"), false)],
        DerivedService::Live,
        None,
    );
    assert_eq!(plan.outcome, Outcome::Imported);
    assert!(plan.add_finalizer && !plan.remove_finalizer && !plan.retry);
    let Some(SliceWrite::Create(slice)) = &plan.slice else {
        panic!("creates: {plan:?}")
    };
    assert_eq!(slice.metadata.name.as_deref(), Some("m2-work-app-ab12c"));
    assert_eq!(slice.metadata.namespace.as_deref(), Some(FLEET));
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.len(), 2);
    assert_eq!(labels[SERVICE_NAME_LABEL], "work-app-1d2ef");
    assert_eq!(labels[MANAGED_BY_LABEL], CONTROLLER_ID);
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(endpoints(slice)[0].addresses, ["1.2.3.4"]);
    assert_eq!(slice.ports.as_ref().map(Vec::len), Some(1));
    assert_eq!(
        plan.observe,
        Some(Observe {
            generation: "3".into(),
            first: true,
            took: None
        })
    );
}

#[test]
fn a_converged_import_writes_nothing_even_with_server_defaults() {
    let i = observed(&import(), "3");
    let derived = "work-app-1d2ef";
    let mut slice = imported_slice(&i, derived, FLEET);
    slice.metadata.resource_version = Some("9".into());
    slice.metadata.annotations = Some(BTreeMap::from([("x".into(), "y".into())]));
    let plan = decide_with(
        &i,
        &[mcs("a", Some(derived), false)],
        DerivedService::Live,
        Some(&slice),
    );
    assert_eq!((plan.outcome, plan.writes()), (Outcome::Unchanged, 0));
    // A port without name or protocol: the server stores "" and TCP.
    let mut bare = i.clone();
    bare.spec.ports[0].name = None;
    bare.spec.ports[0].protocol = None;
    if let Some(p) = slice.ports.as_mut() {
        p[0].name = Some(String::new());
    }
    slice.endpoints.get_or_insert_default()[0].conditions = Some(Default::default());
    let plan = decide_with(
        &bare,
        &[mcs("a", Some(derived), false)],
        DerivedService::Live,
        Some(&slice),
    );
    assert_eq!(plan.writes(), 0, "{plan:?}");
}

#[test]
fn a_changed_or_tampered_slice_is_updated_keeping_what_is_not_imported() {
    let i = observed(&import(), "3");
    let derived = "work-app-1d2ef";
    let mut slice = imported_slice(&i, derived, FLEET);
    slice.metadata.resource_version = Some("9".into());
    slice.endpoints.get_or_insert_default()[0].addresses = vec!["9.9.9.9".into()];
    slice
        .metadata
        .labels
        .get_or_insert_default()
        .insert("extra".into(), "1".into());
    let plan = decide_with(
        &i,
        &[mcs("a", Some(derived), false)],
        DerivedService::Live,
        Some(&slice),
    );
    assert_eq!(plan.outcome, Outcome::Updated);
    let Some(SliceWrite::Update(next)) = &plan.slice else {
        panic!("updates: {plan:?}")
    };
    assert_eq!(next.metadata.resource_version.as_deref(), Some("9"));
    assert_eq!(endpoints(next)[0].addresses, ["1.2.3.4"]);
    assert!(
        !next
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("extra")
    );
    assert_eq!(plan.writes(), 1);
}

#[test]
fn a_new_generation_is_observed_once_and_not_as_a_first_import() {
    let mut i = observed(&import(), "2");
    i.spec.endpoint_slice_reference.exported_since =
        Some(Time(Timestamp::from_second(40).expect("t")));
    let o = observe(&i, Timestamp::from_second(100).expect("t")).expect("observed");
    assert_eq!(
        o,
        Observe {
            generation: "3".into(),
            first: false,
            took: Some(Duration::from_secs(60))
        }
    );
    // Clocks disagree: zero, which the metric counts as one second.
    let o = observe(&i, Timestamp::from_second(10).expect("t")).expect("observed");
    assert_eq!(o.took, Some(Duration::ZERO));
    assert_eq!(observe(&observed(&i, "3"), Timestamp::UNIX_EPOCH), None);
}

#[test]
fn a_deleted_import_deletes_its_slice_then_its_finalizer() {
    let mut i = with_finalizer(import());
    i.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    let slice = imported_slice(&i, "x", FLEET);
    let plan = decide_with(&i, &[], DerivedService::Missing, Some(&slice));
    assert_eq!(plan.outcome, Outcome::Unimported);
    assert_eq!(plan.slice, Some(SliceWrite::Delete));
    assert!(plan.remove_finalizer && plan.withdraws());
    // The slice already gone: only the finalizer.
    let plan = decide_with(&i, &[], DerivedService::Missing, None);
    assert_eq!((plan.slice.is_none(), plan.writes()), (true, 1));
    // Never imported (no finalizer): nothing.
    i.metadata.finalizers = None;
    let plan = decide_with(&i, &[], DerivedService::Missing, Some(&slice));
    assert_eq!((plan.outcome, plan.writes()), (Outcome::Skipped, 0));
}

#[test]
fn service_names_are_dns1035_labels() {
    assert!(is_dns1035_label("work-app-1d2ef"));
    for bad in ["", "1abc", "a_b", "Abc", "abc-", &"a".repeat(64)] {
        assert!(!is_dns1035_label(bad), "{bad}");
    }
    assert!(is_dns1035_label(&"a".repeat(63)));
}
