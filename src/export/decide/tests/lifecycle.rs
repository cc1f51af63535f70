use super::*;
#[test]
fn deleted_export_without_finalizer_does_nothing() {
    let mut se = export();
    se.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&settings(), &se, Some(&service()), None);
    assert_eq!(plan.outcome, Outcome::Skipped);
    assert_eq!(plan.writes(), 0);
}

#[test]
fn deleted_export_with_finalizer_deletes_ise_then_drops_finalizer() {
    let (se, ise) = converge();
    let mut se = se;
    se.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert_eq!(
        plan.hub,
        Some(HubWrite::Delete {
            uid: Some("ise-uid".into())
        })
    );
    assert!(plan.remove_finalizer);
    assert!(plan.conditions.is_empty());
    assert_eq!(plan.outcome, Outcome::Unexported);
    // No ISE in the view: the view may be behind, so the name is deleted (guarded, live).
    let plan = run(&settings(), &se, Some(&service()), None);
    assert_eq!(plan.hub, Some(HubWrite::Delete { uid: None }));
    assert!(plan.remove_finalizer);
    assert!(plan.unexports());
    // An ISE already terminating is gone as far as this export is concerned.
    let mut leaving = ise.expect("ise");
    leaving.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&settings(), &se, Some(&service()), Some(&leaving));
    assert_eq!(plan.hub, None);
    assert!(plan.remove_finalizer);
}

#[test]
fn fresh_export_costs_three_writes_in_the_right_order() {
    let plan = run(&settings(), &export(), Some(&service()), None);
    assert_eq!(plan.writes(), 3, "{plan:#?}");
    let meta = plan.metadata.as_ref().expect("metadata patch");
    assert!(meta.add_finalizer, "finalizer before any hub write");
    let stamp = meta.last_seen.as_ref().expect("last-seen annotations");
    assert_eq!(stamp.resource_version, "100");
    assert_eq!(stamp.timestamp, "2027-01-15T08:00:00Z");
    assert_eq!(
        cond(&plan, CONDITION_VALID).map(|c| c.message.as_str()),
        Some("service ns/web is valid for export")
    );
    let (status, code, _) = status_of(&plan, CONDITION_CONFLICT);
    assert_eq!(
        (status, code),
        ("Unknown", reason::PENDING_CONFLICT_RESOLUTION)
    );
    assert_eq!(
        event_reasons(&plan),
        vec!["ValidServiceExport", "PendingExportConflictResolution"]
    );
    let Some(HubWrite::Create(ise)) = &plan.hub else {
        panic!("expected create: {plan:#?}")
    };
    let r = &ise.spec.service_reference;
    assert_eq!(
        (r.kind.as_str(), r.api_version.as_deref()),
        ("Service", Some("v1"))
    );
    assert_eq!(r.namespaced_name, "ns/web");
    assert_eq!(r.cluster_id, "member-1");
    assert_eq!(r.uid, "svc-uid");
    assert_eq!(r.exported_since, Some(Time(now())));
    assert_eq!(ise.spec.ports.len(), 1);
    assert_eq!(
        ise.spec.weight, None,
        "no Traffic Manager fields when the feature is off"
    );
    assert_eq!(plan.outcome, Outcome::Exported);
    assert_eq!(plan.exported_since, Some(now()));
}

#[test]
fn converged_export_writes_nothing() {
    converge();
}

#[test]
fn service_status_change_alone_writes_nothing() {
    let (se, ise) = converge();
    let mut svc = service();
    svc.metadata.resource_version = Some("101".into());
    let plan = run(&settings(), &se, Some(&svc), ise.as_ref());
    assert_eq!(plan.writes(), 0, "{plan:#?}");
}

#[test]
fn port_change_updates_ise_and_restamps() {
    let (se, ise) = converge();
    let svc = port_changed();
    let plan = run(&settings(), &se, Some(&svc), ise.as_ref());
    let Some(HubWrite::UpdateSpec(spec)) = &plan.hub else {
        panic!("expected update: {plan:#?}")
    };
    assert_eq!(spec.ports[0].port, 8080);
    assert_eq!(spec.service_reference.resource_version, "102");
    let stamp = plan
        .metadata
        .as_ref()
        .and_then(|m| m.last_seen.as_ref())
        .expect("restamped");
    assert_eq!(stamp.resource_version, "102");
    assert!(plan.conditions.is_empty());
}

#[test]
fn stored_stamp_for_the_same_resource_version_is_the_export_time() {
    let earlier = "2027-01-15T07:00:00Z";
    let se = annotate(
        annotate(
            with_finalizer(export()),
            LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
            "100",
        ),
        LAST_SEEN_TIMESTAMP_ANNOTATION,
        earlier,
    );
    let plan = run(&settings(), &se, Some(&service()), None);
    assert!(plan.metadata.is_none(), "{plan:#?}");
    assert_eq!(plan.exported_since, Some(earlier.parse().expect("ts")));
}

#[test]
fn bad_or_future_stamps_are_reset() {
    for (rv, ts) in [
        ("100", "not-a-time"),
        ("100", "2099-01-01T00:00:00Z"),
        ("99", "2027-01-15T07:00:00Z"),
    ] {
        let se = annotate(
            annotate(
                with_finalizer(export()),
                LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
                rv,
            ),
            LAST_SEEN_TIMESTAMP_ANNOTATION,
            ts,
        );
        let plan = run(&settings(), &se, Some(&service()), None);
        let stamp = plan
            .metadata
            .as_ref()
            .and_then(|m| m.last_seen.as_ref())
            .unwrap_or_else(|| panic!("reset for {rv}/{ts}"));
        assert_eq!(stamp.resource_version, "100");
        assert_eq!(plan.exported_since, Some(now()));
    }
}

#[test]
fn missing_service_unexports_and_marks_invalid_once() {
    let (se, ise) = converge();
    let plan = run(&settings(), &se, None, ise.as_ref());
    assert!(matches!(plan.hub, Some(HubWrite::Delete { .. })));
    assert!(plan.remove_finalizer);
    assert_eq!(
        status_of(&plan, CONDITION_VALID),
        ("False", reason::NOT_FOUND, "service ns/web is not found")
    );
    assert_eq!(event_reasons(&plan), vec!["ServiceNotFound"]);
    assert_eq!(plan.events[0].kind, EventKind::Warning);
    let (se, ise) = apply(&plan, se, ise);
    let again = run(&settings(), &se, None, ise.as_ref());
    assert_eq!(again.writes(), 0);
    assert!(again.events.is_empty(), "no warning on every resync");
}

#[test]
fn deleting_service_counts_as_missing() {
    let mut svc = service();
    svc.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&settings(), &export(), Some(&svc), None);
    assert_eq!(plan.outcome, Outcome::Invalid(reason::NOT_FOUND));
    assert!(!plan.remove_finalizer, "no finalizer, nothing to unexport");
    assert!(plan.hub.is_none());
}

#[test]
fn ineligible_services_are_not_exported() {
    let mut external = service();
    external.spec.as_mut().expect("spec").type_ = Some("ExternalName".into());
    let mut headless = service();
    headless.spec.as_mut().expect("spec").cluster_ip = Some("None".into());
    for svc in [external, headless] {
        let plan = run(&settings(), &with_finalizer(export()), Some(&svc), None);
        assert_eq!(
            status_of(&plan, CONDITION_VALID),
            (
                "False",
                reason::INELIGIBLE,
                "service ns/web is not eligible for export"
            )
        );
        assert_eq!(event_reasons(&plan), vec!["ServiceNotEligible"]);
        assert!(plan.remove_finalizer);
        assert_eq!(
            plan.hub,
            Some(HubWrite::Delete { uid: None }),
            "no ISE in the view: deleted by name, in case the view is behind"
        );
    }
}

#[test]
fn invalid_weight_keeps_the_export_and_reports_once() {
    let (se, ise) = converge();
    for bad in ["abc", "1001", "-1", "1.5"] {
        let se = annotate(se.clone(), WEIGHT_ANNOTATION, bad);
        let plan = run(&settings(), &se, Some(&service()), ise.as_ref());
        assert!(plan.hub.is_none(), "export kept for {bad}");
        assert!(!plan.remove_finalizer);
        let (status, code, message) = status_of(&plan, CONDITION_VALID);
        assert_eq!((status, code), ("False", reason::INVALID_WEIGHT));
        let why = if bad == "abc" || bad == "1.5" {
            format!("the weight annotation is not a valid integer: {bad}")
        } else {
            format!("the weight annotation is not in the range [0, 1000]: {bad}")
        };
        assert_eq!(
            message,
            format!("serviceExport ns/web has an invalid weight annotation, err = {why}")
        );
        assert_eq!(event_reasons(&plan), vec![reason::INVALID_WEIGHT]);
        assert_eq!(
            plan.events[0].note,
            "ServiceExport web has invalid weight value in the annotation"
        );
        assert!(!plan.recheck && plan.pending.is_none(), "no requeue");
        let (se2, ise2) = apply(&plan, se.clone(), ise.clone());
        assert_eq!(
            run(&settings(), &se2, Some(&service()), ise2.as_ref()).writes(),
            0
        );
    }
}

#[test]
fn changed_invalid_weight_updates_the_message() {
    let se = annotate(export(), WEIGHT_ANNOTATION, "abc");
    let (se, _) = apply(&run(&settings(), &se, Some(&service()), None), se, None);
    let se = annotate(se, WEIGHT_ANNOTATION, "xyz");
    let plan = run(&settings(), &se, Some(&service()), None);
    assert!(cond(&plan, CONDITION_VALID).is_some_and(|c| c.message.contains("xyz")));
}

#[test]
fn weight_zero_unexports_but_stays_valid() {
    let (mut se, ise) = converge();
    // The hub had resolved the conflict for the old export.
    let resolved = ConditionSpec {
        type_: CONDITION_CONFLICT.into(),
        status: "False".into(),
        reason: "NoConflictFound".into(),
        message: "no conflict".into(),
        observed_generation: Some(1),
    };
    set_condition(
        &mut se.status.get_or_insert_with(Default::default).conditions,
        &resolved,
        Time(now()),
    );
    let se = annotate(se, WEIGHT_ANNOTATION, "0");
    let plan = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert!(matches!(plan.hub, Some(HubWrite::Delete { .. })));
    assert!(plan.remove_finalizer);
    assert_eq!(
        status_of(&plan, CONDITION_VALID),
        (
            "True",
            reason::VALID,
            "exported service ns/web with 0 weight"
        )
    );
    assert_eq!(plan.outcome, Outcome::Unexported);
    assert_eq!(plan.events[0].kind, EventKind::Normal);
    let (se, ise) = apply(&plan, se, ise);
    assert_eq!(
        run(&settings(), &se, Some(&service()), ise.as_ref()).writes(),
        0
    );

    // Back to weight 1: exported afresh, and the stale Conflict is re-armed.
    let mut se = se;
    if let Some(a) = se.metadata.annotations.as_mut() {
        a.remove(WEIGHT_ANNOTATION);
    }
    let plan = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert!(matches!(plan.hub, Some(HubWrite::Create(_))));
    assert_eq!(
        cond(&plan, CONDITION_VALID).map(|c| c.message.as_str()),
        Some("service ns/web is valid for export")
    );
    let conflict = cond(&plan, CONDITION_CONFLICT).expect("re-armed");
    assert_eq!(conflict.status, "Unknown");
}

#[test]
fn weight_is_exported_with_traffic_manager() {
    let se = annotate(export(), WEIGHT_ANNOTATION, "42");
    let plan = run(&tm_settings(), &se, Some(&service()), None);
    let Some(HubWrite::Create(ise)) = &plan.hub else {
        panic!("create")
    };
    assert_eq!(ise.spec.weight, Some(42));
    assert_eq!(ise.spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(ise.spec.public_ip_resource_id, None);
    let plan = run(&tm_settings(), &export(), Some(&service()), None);
    let Some(HubWrite::Create(ise)) = &plan.hub else {
        panic!("create")
    };
    assert_eq!(ise.spec.weight, Some(1), "absent annotation means 1");
}

#[test]
fn uid_mismatch_unexports_and_requeues() {
    let (se, ise) = converge();
    let recreated = recreated();
    let plan = run(&settings(), &se, Some(&recreated), ise.as_ref());
    assert_eq!(
        plan.hub,
        Some(HubWrite::Delete {
            uid: Some("ise-uid".into())
        })
    );
    assert!(plan.remove_finalizer);
    assert!(plan.recheck, "looked at again with backoff, not spun on");
    let (se, ise) = apply(&plan, se, ise);
    let plan = run(&settings(), &se, Some(&recreated), ise.as_ref());
    let Some(HubWrite::Create(new)) = &plan.hub else {
        panic!("export afresh: {plan:#?}")
    };
    assert_eq!(new.spec.service_reference.uid, "svc-uid-2");
    assert!(plan.metadata.as_ref().is_some_and(|m| m.add_finalizer));
}

#[test]
fn name_collision_is_reported_not_flapped() {
    // `a-b/c` and `a/b-c` both map to `a-b-c`; the hub holds the other one's export.
    let mut se = ServiceExport::new("a", "b-c", ServiceExportVersion::V1Beta1);
    se.metadata.generation = Some(1);
    let mut svc = service();
    svc.metadata.namespace = Some("a".into());
    svc.metadata.name = Some("b-c".into());
    let mut other = InternalServiceExport::default();
    other.spec.service_reference.namespaced_name = "a-b/c".into();
    other.metadata.uid = Some("other".into());
    let plan = run(&settings(), &se, Some(&svc), Some(&other));
    assert!(
        plan.hub.is_none(),
        "never touch the other export: {plan:#?}"
    );
    let (status, code, message) = status_of(&plan, CONDITION_VALID);
    assert_eq!((status, code), ("False", reason::NAME_COLLISION));
    assert!(message.contains("a-b/c"), "{message}");
    let (se, _) = apply(&plan, se, None);
    assert_eq!(run(&settings(), &se, Some(&svc), Some(&other)).writes(), 0);
    // Even when being deleted, the other export is left alone.
    let mut se = with_finalizer(se);
    se.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&settings(), &se, Some(&svc), Some(&other));
    assert_eq!(
        plan.hub,
        Some(HubWrite::Delete { uid: None }),
        "never the other's uid: by name, and act deletes only an ISE of this very export"
    );
    assert!(plan.remove_finalizer);
}

#[test]
fn hub_conflict_verdict_is_copied_with_the_export_generation() {
    let (se, ise) = converge();
    let mut ise = ise.expect("ise");
    with_verdict(
        &mut ise,
        "False",
        "NoConflictFound",
        "service ns/web is exported without conflict",
        7,
    );
    let plan = run(&settings(), &se, Some(&service()), Some(&ise));
    assert_eq!(plan.writes(), 1, "{plan:#?}");
    let c = cond(&plan, CONDITION_CONFLICT).expect("conflict");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NoConflictFound")
    );
    assert_eq!(event_reasons(&plan), vec!["NoServiceExportConflictFound"]);
    assert_eq!(plan.events[0].kind, EventKind::Normal);
    assert_eq!(
        plan.events[0].note,
        "Service web is exported without conflict"
    );
    assert_eq!(
        c.observed_generation,
        Some(1),
        "the ServiceExport's generation, not the ISE's"
    );
    let (se, ise) = apply(&plan, se, Some(ise));
    let again = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert_eq!(again.writes(), 0, "unchanged verdict costs nothing");
    assert!(again.events.is_empty(), "no event on resync");

    // The hub finds a conflict: copied once, with a warning.
    let mut ise = ise.expect("ise");
    with_verdict(
        &mut ise,
        "True",
        "ConflictFound",
        "service ns/web is in conflict with other exported services",
        7,
    );
    let plan = run(&settings(), &se, Some(&service()), Some(&ise));
    assert_eq!(event_reasons(&plan), vec!["ServiceExportConflictFound"]);
    assert_eq!(plan.events[0].kind, EventKind::Warning);
    assert_eq!(
        plan.events[0].note,
        "Service web is in conflict with other exported services"
    );
    let (se, ise) = apply(&plan, se, Some(ise));
    let again = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert_eq!((again.writes(), again.events.len()), (0, 0));
}

#[test]
fn a_terminating_ise_is_neither_a_verdict_nor_written_over() {
    let (se, ise) = converge();
    let mut ise = ise.expect("ise");
    with_verdict(&mut ise, "True", "ConflictFound", "in conflict", 1);
    ise.metadata.deletion_timestamp = Some(Time(now()));
    // A port change while the old ISE is still terminating.
    let svc = port_changed();
    let plan = run(&settings(), &se, Some(&svc), Some(&ise));
    assert_eq!(plan.hub, None, "the name is taken until the ISE is gone");
    assert!(!plan.unexports());
    assert!(
        cond(&plan, CONDITION_CONFLICT).is_none(),
        "still pending: the terminating ISE's verdict is not copied"
    );
    assert!(plan.events.is_empty());
    // A different Service UID against a terminating ISE: nothing to delete twice.
    let recreated = recreated();
    let plan = run(&settings(), &se, Some(&recreated), Some(&ise));
    assert_eq!(plan.hub, None);
    assert!(!plan.remove_finalizer);
    // Once it is gone, exported afresh.
    let plan = run(&settings(), &se, Some(&svc), None);
    assert!(matches!(plan.hub, Some(HubWrite::Create(_))));
}

#[test]
fn a_verdict_on_a_terminating_ise_re_arms_a_copied_one() {
    let (se, ise) = converge();
    let mut ise = ise.expect("ise");
    with_verdict(&mut ise, "False", "NoConflictFound", "ok", 1);
    let (se, ise) = apply(
        &run(&settings(), &se, Some(&service()), Some(&ise)),
        se,
        Some(ise),
    );
    let mut ise = ise.expect("ise");
    ise.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&settings(), &se, Some(&service()), Some(&ise));
    let (status, code, _) = status_of(&plan, CONDITION_CONFLICT);
    assert_eq!(
        (status, code),
        ("Unknown", reason::PENDING_CONFLICT_RESOLUTION)
    );
}
