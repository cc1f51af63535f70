use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::ApiResource;

fn object(kind: &str) -> DynamicObject {
    let ar = ApiResource {
        group: "g".into(),
        version: "v1".into(),
        api_version: "g/v1".into(),
        kind: kind.into(),
        plural: "x".into(),
    };
    let mut o = DynamicObject::new("o", &ar).within("ns");
    o.metadata.resource_version = Some("7".into());
    o.metadata.uid = Some("u-1".into());
    o
}

fn rule<'a>(rules: &'a [Rule], kind: &str) -> &'a Rule {
    rules
        .iter()
        .find(|r| r.kind.kind == kind)
        .expect("a rule for the kind")
}

/// Applies `step` as the apiserver would (for the fields the rules touch).
fn applied(mut obj: DynamicObject, step: &Step) -> DynamicObject {
    match step {
        Step::Status(patch) => obj.data["status"] = patch["status"].clone(),
        Step::Meta { patch, .. } => {
            let m = &patch["metadata"];
            if let Some(f) = m.get("finalizers") {
                obj.metadata.finalizers = serde_json::from_value(f.clone()).expect("list");
            }
            for (field, map) in [
                ("annotations", &mut obj.metadata.annotations),
                ("labels", &mut obj.metadata.labels),
            ] {
                for (k, _) in m
                    .get(field)
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    map.get_or_insert_with(Default::default).remove(k);
                }
            }
        }
        Step::Delete { .. } => unreachable!("not applied"),
    }
    obj
}

/// Every step until converged (a delete ends it).
fn steps(treat: &Treat, mut obj: DynamicObject) -> Vec<Step> {
    let mut out = vec![];
    while let Some(step) = next_step(treat, &obj) {
        out.push(step.clone());
        if matches!(step, Step::Delete { .. }) || out.len() > 5 {
            break;
        }
        obj = applied(obj, &step);
    }
    out
}

#[test]
fn a_service_export_keeps_everything_but_our_finalizer_and_conditions() {
    let rules = member_rules("fleet-system");
    let treat = &rule(&rules, "ServiceExport").treat;
    let mut se = object("ServiceExport");
    se.metadata.finalizers = Some(vec![CLEANUP_FINALIZER.into(), "user/keep".into()]);
    se.data = json!({"status": {"conditions": [
        {"type": "Valid", "status": "True"},
        {"type": "Conflict", "status": "False"},
        {"type": "Ready", "status": "True"},
    ]}});
    let steps = steps(treat, se);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(
        steps[0],
        Step::Status(json!({"metadata": {"resourceVersion": "7"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    );
    assert_eq!(
        steps[1],
        Step::Meta {
            patch: json!({"metadata": {"resourceVersion": "7", "finalizers": ["user/keep"]}}),
            finalizer: true
        }
    );
    // Deleted by its user meanwhile: the finalizer still comes off (it is never ours to delete).
    let mut deleting = object("ServiceExport");
    deleting.metadata.finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    assert!(matches!(
        next_step(treat, &deleting),
        Some(Step::Meta {
            finalizer: true,
            ..
        })
    ));
    assert_eq!(
        next_step(treat, &object("ServiceExport")),
        None,
        "converged"
    );
}

#[test]
fn a_multicluster_service_loses_our_labels_finalizer_and_condition_only() {
    let rules = member_rules("fleet-system");
    let treat = &rule(&rules, "MultiClusterService").treat;
    let mut m = object("MultiClusterService");
    m.metadata.finalizers = Some(vec![mcs::FINALIZER.into()]);
    m.metadata.labels = Some(
        [
            (mcs::SERVICE_IMPORT_LABEL.to_string(), "web".to_string()),
            (mcs::DERIVED_SERVICE_LABEL.to_string(), "ns-web".to_string()),
            ("app".to_string(), "web".to_string()),
        ]
        .into(),
    );
    m.data = json!({"status": {"conditions": [{"type": "Valid", "status": "True"}]}});
    let steps = steps(treat, m);
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(
        steps.iter().all(|s| !matches!(s, Step::Delete { .. })),
        "never deleted"
    );
    assert_eq!(
        steps[1],
        Step::Meta {
            patch: json!({"metadata": {"resourceVersion": "7", "labels": {
                mcs::SERVICE_IMPORT_LABEL: null, mcs::DERIVED_SERVICE_LABEL: null}}}),
            finalizer: false
        }
    );
}

#[test]
fn only_a_service_import_an_mcs_controls_is_deleted() {
    let rules = member_rules("fleet-system");
    let treat = &rule(&rules, "ServiceImport").treat;
    let mut users = object("ServiceImport");
    users.metadata.finalizers = Some(vec![SERVICE_IMPORT_FINALIZER.into()]);
    let steps_of_users = steps(treat, users.clone());
    assert_eq!(steps_of_users.len(), 1);
    assert!(matches!(
        steps_of_users[0],
        Step::Meta {
            finalizer: true,
            ..
        }
    ));
    let mut owned = users;
    owned.metadata.owner_references = Some(vec![OwnerReference {
        kind: "MultiClusterService".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    let steps_of_owned = steps(treat, owned.clone());
    assert_eq!(steps_of_owned.len(), 2);
    assert_eq!(
        steps_of_owned[1],
        Step::Delete {
            uid: Some("u-1".into())
        }
    );
    // An owner that is not its controller does not make it ours.
    if let Some(refs) = owned.metadata.owner_references.as_mut() {
        refs[0].controller = Some(false);
    }
    assert!(
        steps(treat, owned)
            .iter()
            .all(|s| !matches!(s, Step::Delete { .. }))
    );
}

#[test]
fn imported_slices_and_derived_services_are_deleted_other_slices_only_unannotated() {
    let rules = member_rules("fleet-system");
    let imported = &rules[3];
    assert_eq!(imported.scope, Scope::Namespace("fleet-system".into()));
    let mut slice = object("EndpointSlice");
    assert_eq!(
        next_step(&imported.treat, &slice),
        None,
        "not labelled: kept"
    );
    slice.metadata.labels = Some(
        [(
            slice_imports::MANAGED_BY_LABEL.to_string(),
            slice_imports::CONTROLLER_ID.to_string(),
        )]
        .into(),
    );
    assert!(matches!(
        next_step(&imported.treat, &slice),
        Some(Step::Delete { .. })
    ));
    let derived = &rules[2];
    assert_eq!(derived.selector.as_deref(), Some(mcs::MCS_NAME_LABEL));
    let exported = &rules[4];
    let mut user_slice = object("EndpointSlice");
    user_slice.metadata.annotations = Some(
        [
            (UNIQUE_NAME_ANNOTATION.to_string(), "m1-x".to_string()),
            ("keep".to_string(), "1".to_string()),
        ]
        .into(),
    );
    assert_eq!(
        steps(&exported.treat, user_slice),
        [Step::Meta {
            patch: json!({"metadata": {"resourceVersion": "7",
                "annotations": {UNIQUE_NAME_ANNOTATION: null}}}),
            finalizer: false
        }]
    );
}

#[test]
fn hub_objects_of_the_member_are_deleted_imports_released() {
    let rules = hub_rules("fleet-member-m1");
    for kind in [
        "InternalServiceExport",
        "EndpointSliceExport",
        "InternalServiceImport",
    ] {
        let r = rule(&rules, kind);
        assert_eq!(r.scope, Scope::Namespace("fleet-member-m1".into()));
        assert!(matches!(
            next_step(&r.treat, &object(kind)),
            Some(Step::Delete { .. })
        ));
    }
    let esi = &rule(&rules, "EndpointSliceImport").treat;
    let mut import = object("EndpointSliceImport");
    import.metadata.finalizers = Some(vec![slice_imports::CLEANUP_FINALIZER.into()]);
    assert!(
        steps(esi, import)
            .iter()
            .all(|s| !matches!(s, Step::Delete { .. })),
        "the hub controller's object: kept"
    );
    let status = &rule(&rules, "MemberStatus").treat;
    assert_eq!(
        next_step(status, &object("MemberStatus")),
        None,
        "not labelled ours"
    );
}

#[test]
fn the_release_objects_are_its_leases_and_records_only() {
    let rules = process_rules("fleetnet-system", "hub");
    let mut leader = object("Lease");
    leader.metadata.name = Some("hub".into());
    assert!(matches!(
        next_step(&rules[0].treat, &leader),
        Some(Step::Delete { .. })
    ));
    let mut other = object("Lease");
    other.metadata.name = Some("kube-scheduler".into());
    assert_eq!(next_step(&rules[0].treat, &other), None);
    assert_eq!(next_step(&rules[1].treat, &other), None);
    let mut key = object("Secret");
    key.metadata.name = Some("hub-record-key".into());
    assert!(matches!(
        next_step(&rules[3].treat, &key),
        Some(Step::Delete { .. })
    ));
    assert_eq!(
        next_step(&rules[3].treat, &object("Secret")),
        None,
        "any other Secret is kept"
    );
}
