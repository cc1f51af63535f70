use super::*;
#[test]
fn internal_load_balancer_needs_no_lookup_and_clears_public_ip_fields() {
    let svc = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_INTERNAL_ANNOTATION,
        "true",
    );
    assert_eq!(public_ip_query(&tm_settings(), &svc), None);
    let mut ise = InternalServiceExport {
        spec: build_spec(&tm_settings(), &svc, "ns", "web", 1),
        ..Default::default()
    };
    ise.spec.public_ip_resource_id = Some("/stale".into());
    ise.spec.is_dns_label_configured = Some(true);
    let plan = run(
        &tm_settings(),
        &with_finalizer(export()),
        Some(&svc),
        Some(&ise),
    );
    let Some(HubWrite::UpdateSpec(spec)) = &plan.hub else {
        panic!("update: {plan:#?}")
    };
    assert_eq!(spec.is_internal_load_balancer, Some(true));
    assert_eq!(spec.public_ip_resource_id, None, "stale value cleared");
    assert_eq!(spec.is_dns_label_configured, None);
}

/// A `Lookup` query of `ip` in `rg`.
fn lookup(rg: &str, ip: &str) -> Option<PublicIpQuery> {
    Some(PublicIpQuery::Lookup {
        resource_group: rg.into(),
        ip: ip.into(),
    })
}

#[test]
fn public_ip_query_uses_the_annotated_or_default_resource_group() {
    let svc = load_balancer(Some("1.2.3.4"));
    assert_eq!(
        public_ip_query(&tm_settings(), &svc),
        lookup("rg-default", "1.2.3.4")
    );
    // An allowed group, as the Service spells it (ARM folds case).
    let svc = svc_annotate(svc, AZURE_LB_RESOURCE_GROUP_ANNOTATION, "  RG-1 ");
    assert_eq!(
        public_ip_query(&tm_settings(), &svc),
        lookup("RG-1", "1.2.3.4")
    );
    let blank = svc_annotate(svc.clone(), AZURE_LB_RESOURCE_GROUP_ANNOTATION, "  ");
    assert_eq!(
        public_ip_query(&tm_settings(), &blank),
        lookup("rg-default", "1.2.3.4"),
        "a blank annotation names no group"
    );
    assert_eq!(public_ip_query(&settings(), &svc), None, "feature off");
    assert_eq!(
        public_ip_query(&tm_settings(), &load_balancer(None)),
        None,
        "no ingress yet"
    );
    assert_eq!(
        public_ip_query(&tm_settings(), &load_balancer(Some(""))),
        None,
        "empty ingress IP"
    );
    assert_eq!(
        public_ip_query(&tm_settings(), &service()),
        None,
        "not a LoadBalancer"
    );
}

#[test]
fn a_group_outside_the_allowlist_is_not_looked_up() {
    let other = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
        " mc_other_member ",
    );
    let refused = Some(PublicIpQuery::NotAllowed {
        resource_group: "mc_other_member".into(),
    });
    assert_eq!(public_ip_query(&tm_settings(), &other), refused);
    // The allowlist is the input: the same Service, with the group allowed, is looked up.
    let widened = Settings {
        allowed_resource_groups: vec!["rg-1".into(), "MC_OTHER_MEMBER".into()],
        ..tm_settings()
    };
    assert_eq!(
        public_ip_query(&widened, &other),
        lookup("mc_other_member", "1.2.3.4")
    );
    // Without any listed group only the default is allowed.
    let narrow = Settings {
        allowed_resource_groups: vec![],
        ..tm_settings()
    };
    let one = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
        "rg-1",
    );
    assert_eq!(
        public_ip_query(&narrow, &one),
        Some(PublicIpQuery::NotAllowed {
            resource_group: "rg-1".into()
        })
    );
    let default = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
        "RG-DEFAULT",
    );
    assert_eq!(
        public_ip_query(&narrow, &default),
        lookup("RG-DEFAULT", "1.2.3.4")
    );
}

/// A Service naming a group outside the member's allowlist is exported as the reference
/// exports one whose public IP cannot be found (no public IP fields, no error, no recheck),
/// with a condition and one Event naming the group and the member; whatever the observation.
#[test]
fn a_refused_group_exports_without_the_public_ip_and_says_why() {
    let svc = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
        "mc_other_member",
    );
    let se = with_finalizer(export());
    for observed in [
        PublicIpObservation::NotNeeded,
        pip(true),
        PublicIpObservation::NotFound,
        PublicIpObservation::Failed("boom".into()),
    ] {
        let plan = run_pip(&tm_settings(), &se, Some(&svc), None, &observed);
        let spec = created_spec(&plan);
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.public_ip_resource_id, None, "{observed:?}");
        assert_eq!(spec.is_dns_label_configured, None);
        assert!(plan.pending.is_none(), "{observed:?}");
        assert!(!plan.recheck, "nothing to look for again: {observed:?}");
        let (status, reason, message) = status_of(&plan, CONDITION_PUBLIC_IP_ALLOWED);
        assert_eq!((status, reason), ("False", "ResourceGroupNotAllowed"));
        assert!(
            message.contains("\"mc_other_member\"")
                && message.contains("not allowed for member member-1"),
            "{message}"
        );
        assert!(event_reasons(&plan).contains(&"PublicIPResourceGroupNotAllowed"));
        assert_eq!(status_of(&plan, CONDITION_VALID).0, "True");
    }

    // Converged: the next pass writes nothing and tells nothing.
    let plan = run(&tm_settings(), &se, Some(&svc), None);
    let (se, ise) = apply(&plan, se, None);
    let again = run(&tm_settings(), &se, Some(&svc), ise.as_ref());
    assert_eq!(again.writes(), 0, "{again:#?}");
    assert!(again.events.is_empty(), "{again:#?}");

    // The annotation goes: the condition turns True (once), and the default group is looked up.
    let fixed = load_balancer(Some("1.2.3.4"));
    let plan = run_pip(&tm_settings(), &se, Some(&fixed), ise.as_ref(), &pip(false));
    let (status, reason, _) = status_of(&plan, CONDITION_PUBLIC_IP_ALLOWED);
    assert_eq!((status, reason), ("True", "ResourceGroupAllowed"));
    assert!(created_spec(&plan).public_ip_resource_id.is_some());
    let (se, ise) = apply(&plan, se, ise);
    let again = run_pip(&tm_settings(), &se, Some(&fixed), ise.as_ref(), &pip(false));
    assert_eq!(again.writes(), 0, "{again:#?}");
    assert!(again.events.is_empty(), "{again:#?}");
}

#[test]
fn an_export_that_never_named_a_refused_group_has_no_such_condition() {
    let svc = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
        "rg-1",
    );
    let plan = run_pip(&tm_settings(), &export(), Some(&svc), None, &pip(true));
    assert!(
        cond(&plan, CONDITION_PUBLIC_IP_ALLOWED).is_none(),
        "{plan:#?}"
    );
    assert!(created_spec(&plan).public_ip_resource_id.is_some());
}

/// A group name from an annotation is quoted, escaped and cut in the message: no line
/// forging, and never longer than a condition message may be.
#[test]
fn a_hostile_group_name_is_escaped_and_cut() {
    let long = format!("rg\nINFO forged line{}", "x".repeat(300_000));
    let svc = svc_annotate(
        load_balancer(Some("1.2.3.4")),
        AZURE_LB_RESOURCE_GROUP_ANNOTATION,
        &long,
    );
    let plan = run(&tm_settings(), &export(), Some(&svc), None);
    let (_, _, message) = status_of(&plan, CONDITION_PUBLIC_IP_ALLOWED);
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains("\\nINFO forged line"), "{message}");
    assert!(message.len() < 1024, "{} bytes", message.len());
    assert!(
        plan.events
            .iter()
            .all(|e| !e.note.contains('\n') && e.note.len() < 1024)
    );
}

fn pip(dns: bool) -> PublicIpObservation {
    PublicIpObservation::Found(PublicIp {
        id: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/publicIPAddresses/ip1"
            .into(),
        dns_label_configured: dns,
    })
}

fn created_spec(plan: &Plan) -> &InternalServiceExportSpec {
    match &plan.hub {
        Some(HubWrite::Create(ise)) => &ise.spec,
        Some(HubWrite::UpdateSpec(spec)) => spec,
        other => panic!("expected a hub write, got {other:?}"),
    }
}

#[test]
fn external_load_balancer_gets_public_ip_fields() {
    let svc = load_balancer(Some("1.2.3.4"));
    let plan = run_pip(&tm_settings(), &export(), Some(&svc), None, &pip(true));
    let spec = created_spec(&plan);
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(spec.is_internal_load_balancer, None);
    assert!(
        spec.public_ip_resource_id
            .as_deref()
            .is_some_and(|id| id.ends_with("/ip1"))
    );
    assert_eq!(spec.is_dns_label_configured, Some(true));
}

#[test]
fn dns_label_rules_of_the_reference() {
    let svc = load_balancer(Some("1.2.3.4"));
    // Annotation absent: keep what the public IP says.
    let plan = run_pip(&tm_settings(), &export(), Some(&svc), None, &pip(false));
    assert_eq!(created_spec(&plan).is_dns_label_configured, None);
    // Empty: the cloud provider removes the label.
    let empty = svc_annotate(svc.clone(), AZURE_DNS_LABEL_ANNOTATION, "");
    let plan = run_pip(&tm_settings(), &export(), Some(&empty), None, &pip(true));
    assert_eq!(created_spec(&plan).is_dns_label_configured, None);
    // Set but not yet on the public IP: retry, do not export half-done.
    let set = svc_annotate(svc, AZURE_DNS_LABEL_ANNOTATION, "web");
    let plan = run_pip(&tm_settings(), &export(), Some(&set), None, &pip(false));
    assert!(plan.hub.is_none());
    assert!(plan.pending.as_deref().is_some_and(|m| m.starts_with("in the process of adding DNS to the public ip address")));
    assert!(
        plan.metadata.as_ref().is_some_and(|m| m.add_finalizer),
        "status and finalizer still progress"
    );
    let plan = run_pip(&tm_settings(), &export(), Some(&set), None, &pip(true));
    assert_eq!(created_spec(&plan).is_dns_label_configured, Some(true));
}

#[test]
fn public_ip_not_found_exports_without_the_fields_and_failure_retries() {
    let svc = load_balancer(Some("1.2.3.4"));
    let plan = run_pip(
        &tm_settings(),
        &export(),
        Some(&svc),
        None,
        &PublicIpObservation::NotFound,
    );
    assert_eq!(created_spec(&plan).public_ip_resource_id, None);
    assert!(plan.pending.is_none());
    assert!(
        plan.recheck,
        "looked up again later, without waiting for a Service edit"
    );
    let found = run_pip(&tm_settings(), &export(), Some(&svc), None, &pip(false));
    assert!(!found.recheck);
    let plan = run_pip(
        &tm_settings(),
        &export(),
        Some(&svc),
        None,
        &PublicIpObservation::Failed("throttled".into()),
    );
    assert!(plan.hub.is_none());
    assert_eq!(plan.pending.as_deref(), Some("throttled"));
}

#[test]
fn losing_the_ingress_clears_stale_public_ip_fields() {
    let svc = load_balancer(Some("1.2.3.4"));
    let plan = run_pip(&tm_settings(), &export(), Some(&svc), None, &pip(true));
    let (se, ise) = apply(&plan, export(), None);
    let plan = run(
        &tm_settings(),
        &se,
        Some(&load_balancer(None)),
        ise.as_ref(),
    );
    let spec = created_spec(&plan);
    assert_eq!(spec.public_ip_resource_id, None);
    assert_eq!(spec.is_dns_label_configured, None);
    let plan = run(&tm_settings(), &se, Some(&service()), ise.as_ref());
    assert_eq!(created_spec(&plan).type_.as_deref(), Some("ClusterIP"));
    assert_eq!(created_spec(&plan).public_ip_resource_id, None);
}

#[test]
fn weight_parsing() {
    assert_eq!(parse_weight(&export()), Ok(1));
    assert_eq!(
        parse_weight(&annotate(export(), WEIGHT_ANNOTATION, "1000")),
        Ok(1000)
    );
    assert_eq!(
        parse_weight(&annotate(export(), WEIGHT_ANNOTATION, "0")),
        Ok(0)
    );
    assert_eq!(
        parse_weight(&annotate(export(), WEIGHT_ANNOTATION, "")),
        Err("the weight annotation is not a valid integer: ".into())
    );
    assert_eq!(
        parse_weight(&annotate(export(), WEIGHT_ANNOTATION, "1001")),
        Err("the weight annotation is not in the range [0, 1000]: 1001".into())
    );
    assert_eq!(
        parse_weight(&annotate(export(), WEIGHT_ANNOTATION, "-1")),
        Err("the weight annotation is not in the range [0, 1000]: -1".into())
    );
    assert_eq!(
        parse_weight(&annotate(export(), WEIGHT_ANNOTATION, " 5")),
        Err("the weight annotation is not a valid integer:  5".into()),
        "as written, like strconv.Atoi"
    );
}

#[test]
fn outcome_labels_are_stable() {
    assert_eq!(
        Outcome::Invalid(reason::NOT_FOUND).label(),
        "invalid:ServiceNotFound"
    );
    assert_eq!(Outcome::Exported.label(), "exported");
}
