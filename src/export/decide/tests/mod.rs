use super::*;
use crate::api::{
    CLEANUP_FINALIZER, CONDITION_CONFLICT, InternalServiceExportSpec, InternalServiceExportStatus,
    LAST_SEEN_RESOURCE_VERSION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExportStatus,
    ServiceExportVersion, set_condition,
};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, ServicePort as CorePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

const NOW: i64 = 1_800_000_000;

fn now() -> Timestamp {
    Timestamp::from_second(NOW).expect("valid")
}

fn settings() -> Settings {
    Settings {
        member: "member-1".into(),
        traffic_manager: false,
        default_resource_group: "rg-default".into(),
        quotas: Quotas::default(),
        allowed_resource_groups: vec!["rg-1".into()],
    }
}

fn tm_settings() -> Settings {
    Settings {
        traffic_manager: true,
        ..settings()
    }
}

fn export() -> ServiceExport {
    let mut se = ServiceExport::new("ns", "web", ServiceExportVersion::V1Beta1);
    se.metadata.generation = Some(1);
    se.metadata.uid = Some("se-uid".into());
    se
}

fn with_finalizer(mut se: ServiceExport) -> ServiceExport {
    se.metadata.finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    se
}

fn annotate(mut se: ServiceExport, key: &str, value: &str) -> ServiceExport {
    se.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    se
}

fn service() -> Service {
    Service {
        metadata: kube::api::ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("svc-uid".into()),
            resource_version: Some("100".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some("10.96.0.10".into()),
            ports: Some(vec![CorePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// `service()` at resourceVersion 102 with its port changed to 8080.
fn port_changed() -> Service {
    let mut svc = service();
    svc.metadata.resource_version = Some("102".into());
    if let Some(ports) = svc.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        ports[0].port = 8080;
    }
    svc
}

/// `service()` deleted and created again: a new UID.
fn recreated() -> Service {
    let mut svc = service();
    svc.metadata.uid = Some("svc-uid-2".into());
    svc
}

fn load_balancer(ip: Option<&str>) -> Service {
    let mut svc = service();
    if let Some(spec) = svc.spec.as_mut() {
        spec.type_ = Some("LoadBalancer".into());
    }
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: ip.map(|ip| {
                vec![LoadBalancerIngress {
                    ip: Some(ip.into()),
                    ..Default::default()
                }]
            }),
        }),
        ..Default::default()
    });
    svc
}

fn svc_annotate(mut svc: Service, key: &str, value: &str) -> Service {
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    svc
}

fn run(
    settings: &Settings,
    se: &ServiceExport,
    svc: Option<&Service>,
    ise: Option<&InternalServiceExport>,
) -> Plan {
    run_pip(settings, se, svc, ise, &PublicIpObservation::NotNeeded)
}

fn run_pip(
    settings: &Settings,
    se: &ServiceExport,
    svc: Option<&Service>,
    ise: Option<&InternalServiceExport>,
    pip: &PublicIpObservation,
) -> Plan {
    decide(settings, &observation(se, svc, ise, pip))
}

/// What a decision reads, at [`now`], with a place left under the export quota.
fn observation<'a>(
    se: &'a ServiceExport,
    svc: Option<&'a Service>,
    ise: Option<&'a InternalServiceExport>,
    pip: &'a PublicIpObservation,
) -> Observation<'a> {
    Observation {
        export: se,
        service: svc,
        ise,
        public_ip: pip,
        now: now(),
        standing: Standing::default(),
    }
}

/// What the API would hold after `act` performed `plan` (the same rules, in memory).
fn apply(
    plan: &Plan,
    mut se: ServiceExport,
    ise: Option<InternalServiceExport>,
) -> (ServiceExport, Option<InternalServiceExport>) {
    if let Some(m) = &plan.metadata {
        if m.add_finalizer {
            se.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(CLEANUP_FINALIZER.into());
        }
        if let Some(ls) = &m.last_seen {
            se = annotate(
                se,
                LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
                &ls.resource_version,
            );
            se = annotate(se, LAST_SEEN_TIMESTAMP_ANNOTATION, &ls.timestamp);
        }
    }
    let mut ise = ise;
    match &plan.hub {
        Some(HubWrite::Delete { .. }) => ise = None,
        Some(HubWrite::Create(new)) => {
            let mut new = (**new).clone();
            new.metadata.uid = Some("ise-uid".into());
            ise = Some(new);
        }
        Some(HubWrite::UpdateSpec(spec)) => {
            if let Some(i) = ise.as_mut() {
                i.spec = (**spec).clone();
            }
        }
        None => {}
    }
    if plan.remove_finalizer {
        se.metadata.finalizers = None;
    }
    if !plan.conditions.is_empty() {
        let status = se.status.get_or_insert_with(ServiceExportStatus::default);
        for c in &plan.conditions {
            set_condition(&mut status.conditions, c, Time(now()));
        }
    }
    (se, ise)
}

fn cond<'a>(plan: &'a Plan, type_: &str) -> Option<&'a ConditionSpec> {
    plan.conditions.iter().find(|c| c.type_ == type_)
}

/// `(status, reason, message)` of the plan's condition `type_`, which must be there.
fn status_of<'a>(plan: &'a Plan, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = cond(plan, type_).unwrap_or_else(|| panic!("no {type_} condition: {plan:#?}"));
    (&c.status, c.reason.as_str(), &c.message)
}

fn event_reasons(plan: &Plan) -> Vec<&'static str> {
    plan.events.iter().map(|e| e.reason).collect()
}

/// `export()` of `service()` converged, asserting the second pass writes nothing.
fn converge() -> (ServiceExport, Option<InternalServiceExport>) {
    let plan = run(&settings(), &export(), Some(&service()), None);
    let (se, ise) = apply(&plan, export(), None);
    let again = run(&settings(), &se, Some(&service()), ise.as_ref());
    assert_eq!(
        again.writes(),
        0,
        "second pass must write nothing: {again:#?}"
    );
    assert!(
        again.events.is_empty(),
        "second pass must not repeat events: {again:#?}"
    );
    (se, ise)
}

/// The hub's Conflict verdict on `ise`.
fn with_verdict(
    ise: &mut InternalServiceExport,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: i64,
) {
    ise.status = Some(InternalServiceExportStatus {
        conditions: vec![Condition {
            type_: CONDITION_CONFLICT.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(observed_generation),
            last_transition_time: Time(now()),
        }],
    });
}

/// The ISEs view keeps every field a decision reads: an ISE carrying what the view drops
/// (labels, annotations, finalizers, owners, managed fields, creation time) plans exactly as
/// the view's rebuilt ISE does, whether it is ours, foreign, the hub's verdict on it, or going.
#[test]
fn the_ise_view_decides_as_the_ise_does() {
    use crate::export::projections::IseView;
    let se = with_finalizer(export());
    let svc = service();
    let plan = run(&settings(), &se, Some(&svc), None);
    let (se, ours) = apply(&plan, se, None);
    let ours = ours.expect("an ISE written");
    let noisy = |mut ise: InternalServiceExport| {
        let meta = &mut ise.metadata;
        meta.labels = Some([("a".to_string(), "b".to_string())].into());
        meta.annotations = Some([("c".to_string(), "d".to_string())].into());
        meta.finalizers = Some(vec!["networking.fleet.azure.com/ise-cleanup".into()]);
        meta.managed_fields = Some(vec![Default::default()]);
        meta.owner_references = Some(vec![Default::default()]);
        meta.creation_timestamp = Some(Time(now()));
        meta.uid = Some("ise-uid".into());
        meta.resource_version = Some("7".into());
        ise
    };
    let mut verdict_true = ours.clone();
    with_verdict(&mut verdict_true, "True", "Conflict", "in conflict", 1);
    let mut verdict_false = ours.clone();
    with_verdict(&mut verdict_false, "False", "NoConflict", "ok", 1);
    let mut foreign = ours.clone();
    foreign.spec.service_reference.cluster_id = "member-2".into();
    foreign.spec.service_reference.namespaced_name = "ns/other".into();
    let mut going = ours.clone();
    going.metadata.deletion_timestamp = Some(Time(now()));
    let mut stale = ours.clone();
    stale.spec.service_reference.uid = "svc-uid-old".into();
    let mut compared = 0;
    for ise in [ours, verdict_true, verdict_false, foreign, going, stale].map(noisy) {
        let viewed = IseView::from(ise.clone()).to_ise();
        for svc in [Some(&svc), Some(&port_changed()), None] {
            for settings in [settings(), tm_settings()] {
                assert_eq!(
                    run(&settings, &se, svc, Some(&ise)),
                    run(&settings, &se, svc, Some(&viewed)),
                    "{ise:?}"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 6 * 3 * 2);
}

/// The ServiceExports view keeps every field a decision reads: an export carrying what the view
/// drops (labels, owners, managed fields, foreign annotations) plans exactly as the view's
/// rebuilt export does, with or without its weight and last-seen annotations, conditions,
/// finalizer or deletion.
#[test]
fn the_export_view_decides_as_the_export_does() {
    use crate::service_exports::ServiceExportView;
    let svc = service();
    let fresh = with_finalizer(export());
    let plan = run(&settings(), &fresh, Some(&svc), None);
    let (exported, ise) = apply(&plan, fresh.clone(), None);
    let noisy = |mut se: ServiceExport| {
        se = annotate(se, "kubectl.kubernetes.io/last-applied-configuration", "{}");
        let meta = &mut se.metadata;
        meta.labels = Some([("a".to_string(), "b".to_string())].into());
        meta.managed_fields = Some(vec![Default::default()]);
        meta.owner_references = Some(vec![Default::default()]);
        meta.resource_version = Some("12".into());
        se
    };
    let mut going = exported.clone();
    going.metadata.deletion_timestamp = Some(Time(now()));
    let exports = [
        export(),
        fresh,
        exported.clone(),
        annotate(exported.clone(), WEIGHT_ANNOTATION, "0"),
        annotate(exported.clone(), WEIGHT_ANNOTATION, "bad"),
        going,
    ];
    let mut compared = 0;
    for se in exports.map(noisy) {
        let viewed = ServiceExportView::from(se.clone()).to_export();
        assert_eq!(parse_weight(&se), parse_weight(&viewed));
        for svc in [Some(&svc), Some(&port_changed()), None] {
            for ise in [None, ise.as_ref()] {
                for settings in [settings(), tm_settings()] {
                    assert_eq!(
                        run(&settings, &se, svc, ise),
                        run(&settings, &viewed, svc, ise),
                        "{se:?}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 6 * 3 * 2 * 2);
}

mod lifecycle;
mod quotas;
mod traffic_manager;
mod writers;

/// The Services view keeps every field a decision reads: whatever else a Service carries
/// (fields the view drops, a second ingress, other annotations), deciding on the view's
/// rebuilt Service plans exactly what deciding on the Service itself does.
#[test]
fn the_service_view_decides_as_the_service_does() {
    use crate::export::projections::ServiceView;
    let noisy = |mut svc: Service| {
        svc.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        svc.metadata.managed_fields = Some(vec![Default::default()]);
        svc.metadata.generation = Some(3);
        svc = svc_annotate(
            svc,
            "kubectl.kubernetes.io/last-applied-configuration",
            "{}",
        );
        if let Some(spec) = svc.spec.as_mut() {
            spec.selector = Some([("app".to_string(), "web".to_string())].into());
            spec.session_affinity = Some("None".into());
            for port in spec.ports.iter_mut().flatten() {
                port.node_port = Some(30080);
                port.app_protocol = Some("http".into());
                port.target_port =
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080));
            }
        }
        if let Some(ingress) = svc
            .status
            .as_mut()
            .and_then(|s| s.load_balancer.as_mut())
            .and_then(|lb| lb.ingress.as_mut())
        {
            ingress.push(LoadBalancerIngress {
                ip: Some("20.0.0.9".into()),
                hostname: Some("lb.example".into()),
                ..Default::default()
            });
        }
        svc
    };
    let mut headless = service();
    if let Some(spec) = headless.spec.as_mut() {
        spec.cluster_ip = Some("None".into());
    }
    let mut deleting = service();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    deleting.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let services = [
        service(),
        deleting,
        port_changed(),
        headless,
        load_balancer(None),
        load_balancer(Some("20.0.0.1")),
        svc_annotate(
            load_balancer(Some("20.0.0.1")),
            AZURE_LB_INTERNAL_ANNOTATION,
            "true",
        ),
        svc_annotate(
            svc_annotate(
                load_balancer(Some("20.0.0.1")),
                AZURE_LB_RESOURCE_GROUP_ANNOTATION,
                "rg-1",
            ),
            AZURE_DNS_LABEL_ANNOTATION,
            "web",
        ),
    ];
    let found = PublicIpObservation::Found(PublicIp {
        id: "/subscriptions/s/resourceGroups/rg-1/providers/Microsoft.Network/publicIPAddresses/ip"
            .into(),
        dns_label_configured: true,
    });
    let se = with_finalizer(export());
    let mut compared = 0;
    for svc in services.map(noisy) {
        let viewed = ServiceView::from(svc.clone()).to_service();
        for settings in [settings(), tm_settings()] {
            assert_eq!(
                public_ip_query(&settings, &svc),
                public_ip_query(&settings, &viewed)
            );
            for pip in [&PublicIpObservation::NotNeeded, &found] {
                let plan = run_pip(&settings, &se, Some(&svc), None, pip);
                let (_, ise) = apply(&plan, se.clone(), None);
                for ise in [None, ise.as_ref()] {
                    assert_eq!(
                        run_pip(&settings, &se, Some(&svc), ise, pip),
                        run_pip(&settings, &se, Some(&viewed), ise, pip),
                        "{svc:?}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 8 * 2 * 2 * 2);
}
