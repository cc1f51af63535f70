//! The per-member quotas: a member at its quota of exports, and an export too large.
use super::*;

fn limited(max_exports: u32, max_export_bytes: u32) -> Settings {
    Settings {
        quotas: Quotas {
            max_exports,
            max_export_bytes,
        },
        ..settings()
    }
}

fn run_standing(
    settings: &Settings,
    se: &ServiceExport,
    svc: Option<&Service>,
    ise: Option<&InternalServiceExport>,
    standing: Standing,
) -> Plan {
    let pip = PublicIpObservation::NotNeeded;
    let observation = Observation {
        standing,
        ..observation(se, svc, ise, &pip)
    };
    decide(settings, &observation)
}

fn standing(exported: usize, ahead: usize) -> Standing {
    Standing { exported, ahead }
}

/// A Service with `n` named ports: its ISE grows ~90 bytes a port.
fn with_ports(n: i32) -> Service {
    let mut svc = service();
    if let Some(spec) = svc.spec.as_mut() {
        spec.ports = Some(
            (0..n)
                .map(|i| CorePort {
                    name: Some(format!("port-{i}")),
                    port: 1000 + i,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                })
                .collect(),
        );
    }
    svc
}

#[test]
fn an_export_past_the_quota_is_told_and_nothing_is_written() {
    let settings = limited(2, 64 * 1024);
    for s in [
        standing(2, 0),
        standing(1, 1),
        standing(0, 2),
        standing(7, 0),
    ] {
        let plan = run_standing(&settings, &export(), Some(&service()), None, s);
        assert_eq!(plan.outcome, Outcome::Invalid(reason::QUOTA_EXCEEDED));
        assert_eq!(plan.hub, None, "nothing for the hub: {plan:#?}");
        assert_eq!(
            plan.metadata, None,
            "no finalizer: there is nothing to clean up"
        );
        assert!(!plan.remove_finalizer);
        assert!(plan.recheck, "looked at again for a place that frees");
        let (status, code, message) = status_of(&plan, CONDITION_VALID);
        assert_eq!((status, code), ("False", "ExportQuotaExceeded"));
        for part in [
            "member-1",
            "2 exports",
            "--max-exports-per-member",
            "ns/web",
        ] {
            assert!(message.contains(part), "{part} in {message}");
        }
        assert_eq!(event_reasons(&plan), vec!["ExportQuotaExceeded"]);
        assert_eq!(plan.writes(), 1, "the status only");
        // Told once: the same standing again writes nothing and says nothing.
        let (se, ise) = apply(&plan, export(), None);
        let again = run_standing(&settings, &se, Some(&service()), ise.as_ref(), s);
        assert_eq!(again.writes(), 0, "{again:#?}");
        assert!(again.events.is_empty());
        assert!(again.recheck);
    }
}

#[test]
fn an_export_below_the_quota_is_exported() {
    let settings = limited(2, 64 * 1024);
    for s in [standing(0, 0), standing(1, 0), standing(0, 1)] {
        let plan = run_standing(&settings, &export(), Some(&service()), None, s);
        assert_eq!(plan.outcome, Outcome::Exported);
        assert!(matches!(plan.hub, Some(HubWrite::Create(_))), "{plan:#?}");
    }
}

#[test]
fn a_waiting_export_is_exported_once_a_place_frees() {
    let settings = limited(1, 64 * 1024);
    let waiting = run_standing(&settings, &export(), Some(&service()), None, standing(1, 0));
    let (se, _) = apply(&waiting, export(), None);
    let plan = run_standing(&settings, &se, Some(&service()), None, standing(0, 0));
    assert!(matches!(plan.hub, Some(HubWrite::Create(_))), "{plan:#?}");
    let (status, code, _) = status_of(&plan, CONDITION_VALID);
    assert_eq!((status, code), ("True", reason::VALID));
}

#[test]
fn an_export_in_the_hub_is_never_withdrawn_for_the_quota() {
    let (se, ise) = converge();
    // The quota lowered below what the member has: the export stays, and still follows its
    // Service.
    let settings = limited(1, 64 * 1024);
    let plan = run_standing(
        &settings,
        &se,
        Some(&service()),
        ise.as_ref(),
        standing(5, 3),
    );
    assert_eq!(plan.writes(), 0, "{plan:#?}");
    let plan = run_standing(
        &settings,
        &se,
        Some(&port_changed()),
        ise.as_ref(),
        standing(5, 3),
    );
    assert!(
        matches!(plan.hub, Some(HubWrite::UpdateSpec(_))),
        "{plan:#?}"
    );
    // Its Service gone, it is withdrawn as ever (not a quota matter).
    let plan = run_standing(&settings, &se, None, ise.as_ref(), standing(5, 3));
    assert!(plan.unexports());
}

#[test]
fn an_ise_being_deleted_holds_its_place_until_gone() {
    let (se, ise) = converge();
    let mut leaving = ise.expect("ise");
    leaving.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run_standing(
        &limited(1, 65536),
        &se,
        Some(&service()),
        Some(&leaving),
        standing(3, 0),
    );
    assert_eq!(plan.hub, None);
    assert_ne!(plan.outcome, Outcome::Invalid(reason::QUOTA_EXCEEDED));
}

#[test]
fn a_too_large_export_is_told_and_not_written() {
    let settings = limited(1000, 2048);
    let plan = run_standing(
        &settings,
        &export(),
        Some(&with_ports(40)),
        None,
        standing(0, 0),
    );
    assert_eq!(plan.outcome, Outcome::Invalid(reason::TOO_LARGE));
    assert_eq!(plan.hub, None);
    assert_eq!(plan.metadata, None);
    let (status, code, message) = status_of(&plan, CONDITION_VALID);
    assert_eq!((status, code), ("False", "ExportTooLarge"));
    for part in ["2048 bytes", "--max-export-bytes", "member-1", "ns/web"] {
        assert!(message.contains(part), "{part} in {message}");
    }
    assert_eq!(event_reasons(&plan), vec!["ExportTooLarge"]);
    // The same Service again: nothing more.
    let (se, _) = apply(&plan, export(), None);
    let again = run_standing(&settings, &se, Some(&with_ports(40)), None, standing(0, 0));
    assert_eq!(again.writes(), 0, "{again:#?}");
    // Small enough under the same limit: exported.
    let plan = run_standing(&settings, &se, Some(&with_ports(2)), None, standing(0, 0));
    assert!(matches!(plan.hub, Some(HubWrite::Create(_))), "{plan:#?}");
}

#[test]
fn an_exported_service_grown_too_large_keeps_its_export() {
    let (se, ise) = converge();
    let settings = limited(1000, 2048);
    let plan = run_standing(
        &settings,
        &se,
        Some(&with_ports(40)),
        ise.as_ref(),
        standing(0, 0),
    );
    assert_eq!(plan.hub, None, "neither updated nor withdrawn: {plan:#?}");
    assert!(!plan.unexports());
    let (status, code, message) = status_of(&plan, CONDITION_VALID);
    assert_eq!(
        (status, code),
        ("True", "ExportTooLarge"),
        "its slices stay exported"
    );
    assert!(message.contains("stays as it was"), "{message}");
}

#[test]
fn the_size_limit_is_the_written_objects() {
    // The limit is compared with the ISE as created: at exactly its size it is written, a
    // byte less and it is not.
    let plan = run_standing(
        &settings(),
        &export(),
        Some(&service()),
        None,
        standing(0, 0),
    );
    let Some(HubWrite::Create(ise)) = &plan.hub else {
        panic!("{plan:#?}")
    };
    let mut named = (**ise).clone();
    named.metadata.name = Some(ise_name("ns", "web"));
    let size = u32::try_from(quota::written_bytes(&named)).expect("small");
    let at = run_standing(
        &limited(10, size),
        &export(),
        Some(&service()),
        None,
        standing(0, 0),
    );
    assert!(matches!(at.hub, Some(HubWrite::Create(_))));
    let below = run_standing(
        &limited(10, size - 1),
        &export(),
        Some(&service()),
        None,
        standing(0, 0),
    );
    assert_eq!(below.hub, None);
}
