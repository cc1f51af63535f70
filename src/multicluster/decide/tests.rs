//! Every branch of the decision, without a cluster.

use super::*;
use crate::api::ServicePort;
use crate::api::{ClusterStatus, MultiClusterServiceStatus, ServiceImportStatus};
use k8s_openapi::api::core::v1::{ServiceSpec, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn mcs(labels: &[(&str, &str)], finalized: bool) -> MultiClusterService {
    let mut mcs = MultiClusterService::default();
    mcs.metadata.name = Some("my-mcs".into());
    mcs.metadata.namespace = Some("my-ns".into());
    mcs.metadata.uid = Some("uid-1".into());
    mcs.metadata.generation = Some(2);
    mcs.metadata.resource_version = Some("10".into());
    if finalized {
        mcs.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    mcs.metadata.labels = (!labels.is_empty()).then_some(labels);
    mcs.spec.service_import.name = "my-svc".into();
    mcs
}

fn with_status(
    mut mcs: MultiClusterService,
    status: &str,
    reason: &str,
    ip: Option<&str>,
) -> MultiClusterService {
    mcs.status = Some(MultiClusterServiceStatus {
        conditions: vec![Condition {
            type_: CONDITION_VALID.into(),
            status: status.into(),
            reason: reason.into(),
            message: "whatever".into(),
            observed_generation: Some(2),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        }],
        load_balancer: ip.map(lb),
    });
    mcs
}

fn lb(ip: &str) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: Some(vec![LoadBalancerIngress {
            ip: Some(ip.into()),
            ..Default::default()
        }]),
    }
}

fn import(owner: Option<OwnerReference>, clusters: &[&str]) -> ServiceImport {
    let mut si = ServiceImport::default();
    si.metadata.name = Some("my-svc".into());
    si.metadata.namespace = Some("my-ns".into());
    si.metadata.resource_version = Some("5".into());
    si.metadata.owner_references = owner.map(|o| vec![o]);
    si.status = Some(ServiceImportStatus {
        clusters: clusters
            .iter()
            .map(|c| ClusterStatus {
                cluster: c.to_string(),
            })
            .collect(),
        ports: vec![ServicePort {
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            port: 8080,
            ..Default::default()
        }],
        ..Default::default()
    });
    si
}

fn ours(mcs: &MultiClusterService) -> Option<OwnerReference> {
    Some(owner_reference(mcs))
}

fn derived(ip: Option<&str>) -> Service {
    let mut svc = Service::default();
    svc.metadata.name = Some("my-ns-my-mcs".into());
    svc.metadata.namespace = Some("fleet-system".into());
    svc.metadata.resource_version = Some("7".into());
    svc.metadata.labels = Some(BTreeMap::from([
        (MCS_NAME_LABEL.to_string(), "my-mcs".to_string()),
        (MCS_NAMESPACE_LABEL.to_string(), "my-ns".to_string()),
    ]));
    svc.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![KubeServicePort {
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            port: 8080,
            target_port: Some(IntOrString::Int(8080)),
            node_port: Some(31000),
            ..Default::default()
        }]),
        ..Default::default()
    });
    svc.status = ip.map(|ip| ServiceStatus {
        load_balancer: Some(lb(ip)),
        ..Default::default()
    });
    svc
}

fn plan(mcs: &MultiClusterService, si: Option<&ServiceImport>, svc: Option<&Service>) -> Plan {
    decide(&Observation {
        mcs,
        import: si,
        service: svc,
    })
}

fn reasons(plan: &Plan) -> Vec<&str> {
    plan.events.iter().map(|e| e.reason).collect()
}

const IMPORT_LABEL: (&str, &str) = (SERVICE_IMPORT_LABEL, "my-svc");
const DERIVED_LABEL: (&str, &str) = (DERIVED_SERVICE_LABEL, "my-ns-my-mcs");

#[test]
fn a_new_mcs_gets_its_finalizer_and_label_in_one_patch_before_its_import() {
    let mcs = mcs(&[], false);
    let p = plan(&mcs, None, None);
    let Write::Metadata(meta) = &p.writes[0] else {
        panic!("metadata first: {p:?}")
    };
    assert!(meta.add_finalizer);
    assert_eq!(meta.labels[SERVICE_IMPORT_LABEL], Some("my-svc".into()));
    assert_eq!(
        p.writes[1],
        Write::CreateServiceImport {
            name: "my-svc".into(),
            owner: owner_reference(&mcs)
        }
    );
    let Write::Status(status) = &p.writes[2] else {
        panic!("then the status: {p:?}")
    };
    assert_eq!(status.condition.status, "Unknown");
    assert_eq!(status.condition.reason, REASON_UNKNOWN);
    assert_eq!(status.condition.message, MESSAGE_UNKNOWN);
    assert_eq!(status.condition.observed_generation, Some(2));
    assert_eq!(p.writes.len(), 3);
    assert_eq!(p.outcome, Outcome::Pending);
    assert_eq!(
        p.events[0].note,
        "Importing my-svc service and updated my-mcs status"
    );
}

#[test]
fn a_pending_import_that_is_converged_writes_nothing() {
    let mcs = with_status(mcs(&[IMPORT_LABEL], true), "Unknown", REASON_UNKNOWN, None);
    let si = import(ours(&mcs), &[]);
    let p = plan(&mcs, Some(&si), None);
    assert!(p.writes.is_empty(), "{p:?}");
    assert!(p.events.is_empty());
    assert_eq!(p.outcome, Outcome::Pending);
}

#[test]
fn an_import_without_clusters_deletes_the_derived_service_then_its_label() {
    let mcs = with_status(
        mcs(&[IMPORT_LABEL, DERIVED_LABEL], true),
        "True",
        REASON_FOUND,
        Some("10.0.0.1"),
    );
    let si = import(ours(&mcs), &[]);
    let p = plan(&mcs, Some(&si), Some(&derived(Some("10.0.0.1"))));
    assert!(
        matches!(&p.writes[0], Write::Status(s) if s.load_balancer == LoadBalancerStatus::default())
    );
    assert_eq!(p.writes[1], Write::DeleteService("my-ns-my-mcs".into()));
    let Write::Metadata(meta) = &p.writes[2] else {
        panic!("{p:?}")
    };
    assert_eq!(meta.labels[DERIVED_SERVICE_LABEL], None);
    assert!(p.withdraws());
}

#[test]
fn a_valid_import_gets_its_label_then_the_derived_service_then_the_status() {
    let mcs = with_status(mcs(&[IMPORT_LABEL], true), "Unknown", REASON_UNKNOWN, None);
    let si = import(ours(&mcs), &["member1", "member2"]);
    let p = plan(&mcs, Some(&si), None);
    let Write::Metadata(meta) = &p.writes[0] else {
        panic!("{p:?}")
    };
    assert_eq!(
        meta.labels[DERIVED_SERVICE_LABEL],
        Some("my-ns-my-mcs".into())
    );
    let Write::CreateService(svc) = &p.writes[1] else {
        panic!("{p:?}")
    };
    assert_eq!(svc.name, "my-ns-my-mcs");
    assert_eq!(svc.labels[MCS_NAME_LABEL], "my-mcs");
    assert_eq!(svc.labels[MCS_NAMESPACE_LABEL], "my-ns");
    assert_eq!(svc.ports[0].port, 8080);
    assert!(svc.annotations.is_empty());
    let Write::Status(status) = &p.writes[2] else {
        panic!("{p:?}")
    };
    assert_eq!(status.condition.status, "True");
    assert_eq!(status.condition.message, MESSAGE_FOUND);
    assert_eq!(reasons(&p), ["FoundValidService", "SuccessfulUpdateStatus"]);
    assert_eq!(p.events[0].note, "Found valid service my-svc and importing");
    assert_eq!(
        p.events[1].note,
        "Imported my-svc service and updated my-mcs status"
    );
    assert_eq!(p.outcome, Outcome::Imported);
}

#[test]
fn an_imported_mcs_as_the_server_keeps_it_writes_nothing_until_its_load_balancer_changes() {
    let mcs = with_status(
        mcs(&[IMPORT_LABEL, DERIVED_LABEL], true),
        "True",
        REASON_FOUND,
        Some("10.0.0.1"),
    );
    let si = import(ours(&mcs), &["member1"]);
    let mut svc = derived(Some("10.0.0.1"));
    // Defaults and an allocation of the server's are no change.
    if let Some(ports) = svc.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        ports[0].target_port = Some(IntOrString::Int(8080));
    }
    let p = plan(&mcs, Some(&si), Some(&svc));
    assert!(p.writes.is_empty(), "{p:?}");
    assert!(p.events.is_empty());
    assert_eq!(p.outcome, Outcome::Unchanged);
    let p = plan(&mcs, Some(&si), Some(&derived(Some("10.0.0.2"))));
    assert!(matches!(&p.writes[..], [Write::Status(s)] if s.load_balancer == lb("10.0.0.2")));
    assert_eq!(reasons(&p), ["FoundValidService", "SuccessfulUpdateStatus"]);
}

#[test]
fn a_changed_port_updates_the_service_keeping_its_node_port() {
    let mcs = with_status(
        mcs(&[IMPORT_LABEL, DERIVED_LABEL], true),
        "True",
        REASON_FOUND,
        None,
    );
    let mut si = import(ours(&mcs), &["member1"]);
    if let Some(s) = si.status.as_mut() {
        s.ports[0].target_port = Some(IntOrString::String("web".into()));
    }
    let p = plan(&mcs, Some(&si), Some(&derived(None)));
    let Write::UpdateService(svc) = &p.writes[0] else {
        panic!("{p:?}")
    };
    assert_eq!(svc.resource_version.as_deref(), Some("7"));
    assert_eq!(svc.ports[0].node_port, Some(31000));
    assert_eq!(
        svc.ports[0].target_port,
        Some(IntOrString::String("web".into()))
    );
}

#[test]
fn the_internal_load_balancer_annotation_is_mapped_only_when_true() {
    for (value, internal) in [
        ("true", true),
        ("1", true),
        ("false", false),
        ("yes", false),
    ] {
        let mut mcs = mcs(&[IMPORT_LABEL, DERIVED_LABEL], true);
        mcs.metadata.annotations = Some(BTreeMap::from([(
            INTERNAL_LB_ANNOTATION.to_string(),
            value.to_string(),
        )]));
        let si = import(ours(&mcs), &["member1"]);
        let p = plan(&mcs, Some(&si), None);
        let created = p.writes.iter().find_map(|w| match w {
            Write::CreateService(s) => Some(s),
            _ => None,
        });
        let annotated = created
            .expect("created")
            .annotations
            .get(SERVICE_INTERNAL_LB_ANNOTATION)
            .is_some_and(|v| v == "true");
        assert_eq!(annotated, internal, "{value}");
    }
}

#[test]
fn a_renamed_import_deletes_the_old_one_before_the_label_moves() {
    let mut mcs = mcs(&[(SERVICE_IMPORT_LABEL, "old-svc")], true);
    mcs.spec.service_import.name = "my-svc".into();
    let p = plan(&mcs, None, None);
    assert_eq!(p.writes[0], Write::DeleteServiceImport("old-svc".into()));
    assert!(
        matches!(&p.writes[1], Write::Metadata(m) if m.labels[SERVICE_IMPORT_LABEL] == Some("my-svc".into()) && !m.add_finalizer)
    );
    assert!(matches!(&p.writes[2], Write::CreateServiceImport { .. }));
}

#[test]
fn an_import_owned_by_another_mcs_is_left_alone_and_looked_at_again_in_5_s() {
    let mcs = mcs(&[IMPORT_LABEL, DERIVED_LABEL], true);
    let mut other = owner_reference(&mcs);
    other.name = "another-mcs".into();
    other.uid = "12345".into();
    let si = import(Some(other), &["member1"]);
    let p = plan(&mcs, Some(&si), None);
    assert_eq!(p.outcome, Outcome::OwnedByOther);
    assert_eq!(p.requeue, Some(RETRY));
    assert!(matches!(&p.writes[0], Write::Status(s) if s.condition.reason == REASON_UNKNOWN));
    assert_eq!(p.writes[1], Write::DeleteService("my-ns-my-mcs".into()));
    assert!(
        !p.writes
            .iter()
            .any(|w| matches!(w, Write::OwnServiceImport { .. }))
    );
}

#[test]
fn an_import_controlled_by_something_else_is_refused_after_the_label() {
    let mcs = mcs(&[], true);
    let mut owner = owner_reference(&mcs);
    owner.api_version = "apps/v1".into();
    owner.kind = "Deployment".into();
    let p = plan(&mcs, Some(&import(Some(owner), &["m1"])), None);
    assert!(p.refused.is_some());
    assert!(matches!(&p.writes[..], [Write::Metadata(_)]));
}

#[test]
fn an_import_without_our_reference_or_with_an_old_uid_is_owned() {
    let mcs = mcs(&[IMPORT_LABEL], true);
    let mut stale = owner_reference(&mcs);
    stale.uid = "old".into();
    for owner in [None, Some(stale)] {
        let p = plan(&mcs, Some(&import(owner, &[])), None);
        let Write::OwnServiceImport {
            owner_references, ..
        } = &p.writes[0]
        else {
            panic!("{p:?}")
        };
        assert_eq!(owner_references, &[owner_reference(&mcs)]);
    }
}

#[test]
fn deletion_deletes_service_and_import_then_removes_the_finalizer() {
    let mut mcs = mcs(&[IMPORT_LABEL, DERIVED_LABEL], true);
    mcs.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let p = plan(&mcs, None, None);
    assert_eq!(
        p.writes,
        [
            Write::DeleteService("my-ns-my-mcs".into()),
            Write::DeleteServiceImport("my-svc".into()),
            Write::RemoveFinalizer
        ]
    );
    assert_eq!(p.events[0].reason, "UnimportedService");
    assert_eq!(p.events[0].note, "Unimported service my-ns/my-svc");
    assert!(!p.withdraws());
    mcs.metadata.labels = None;
    let p = plan(&mcs, None, None);
    assert_eq!(p.writes, [Write::RemoveFinalizer]);
    assert_eq!(p.events[0].note, "Unimported service <nil>");
    mcs.metadata.finalizers = None;
    assert_eq!(plan(&mcs, None, None).outcome, Outcome::Skipped);
}
