use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::{ClusterStatus, ServiceImportStatus};
use crate::controller::projection::ObjectId;
use crate::service_imports::model::SERVICE_IMPORT_FINALIZER;

fn created() -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000).expect("a time"))
}

fn import(rv: &str, finalized: bool) -> ImportView {
    ImportView {
        id: ObjectId {
            name: "svc".into(),
            namespace: "work".into(),
            uid: Some("u-1".into()),
            resource_version: Some(rv.into()),
        },
        generation: 1,
        created: Some(created()),
        deleting: false,
        finalizers: if finalized {
            vec!["other".into(), SERVICE_IMPORT_FINALIZER.into()]
        } else {
            vec!["other".into()]
        },
        status: ServiceImportStatus::default(),
    }
}

fn internal(reference: ExportedObjectReference) -> InternalView {
    InternalView {
        id: ObjectId {
            name: "work-svc".into(),
            namespace: "fleet-member-m1".into(),
            uid: Some("i-1".into()),
            resource_version: Some("9".into()),
        },
        reference,
        status: ServiceImportStatus::default(),
        writers: Default::default(),
    }
}

#[test]
fn the_internal_name_is_namespace_dash_name() {
    assert_eq!(internal_name("work", "svc"), "work-svc");
}

#[test]
fn the_finalizer_comes_first_then_the_hub_copy_with_the_references_fields() {
    assert_eq!(
        forward("m1", &import("1", false), None),
        Forward::AddFinalizer
    );
    let si = import("2", true);
    let Forward::Create(r) = forward("m1", &si, None) else {
        panic!("a create");
    };
    assert_eq!(r.cluster_id, "m1");
    assert_eq!((r.namespace.as_str(), r.name.as_str()), ("work", "svc"));
    assert_eq!(r.namespaced_name, "work/svc");
    assert_eq!((r.resource_version.as_str(), r.generation), ("2", 1));
    assert_eq!(r.uid, "u-1");
    assert_eq!(r.exported_since, Some(created()));
    assert_eq!((r.kind.as_str(), r.api_version.as_deref()), ("", None));
}

#[test]
fn a_converged_pair_needs_nothing_and_a_new_version_updates_only_what_the_reference_updates() {
    let si = import("2", true);
    let isi = internal(reference_of("m1", &si));
    assert_eq!(forward("m1", &si, Some(&isi)), Forward::Nothing);
    // An agent-made copy (kind set, another cluster ID) is adopted as it is.
    let mut adopted = isi.clone();
    adopted.reference.kind = "ServiceImport".into();
    adopted.reference.cluster_id = "agent-id".into();
    assert_eq!(forward("m1", &si, Some(&adopted)), Forward::Nothing);
    let newer = import("5", true);
    let Forward::Update(r) = forward("m1", &newer, Some(&adopted)) else {
        panic!("an update");
    };
    assert_eq!(r.resource_version, "5");
    assert_eq!(
        (r.kind.as_str(), r.cluster_id.as_str()),
        ("ServiceImport", "agent-id")
    );
}

#[test]
fn deletion_removes_the_hub_copy_then_the_finalizer_and_nothing_without_it() {
    let mut si = import("3", true);
    si.deleting = true;
    let isi = internal(reference_of("m1", &si));
    assert_eq!(forward("m1", &si, Some(&isi)), Forward::DeleteInternal);
    assert_eq!(forward("m1", &si, None), Forward::RemoveFinalizer);
    let mut released = import("4", false);
    released.deleting = true;
    assert_eq!(forward("m1", &released, Some(&isi)), Forward::Nothing);
}

#[test]
fn the_verdict_is_copied_when_it_differs_and_a_dangling_copy_is_deleted() {
    let si = import("2", true);
    let mut isi = internal(reference_of("m1", &si));
    assert_eq!(back(&isi, Some(&si)), Back::Nothing);
    isi.status.type_ = Some("ClusterSetIP".into());
    isi.status.clusters = vec![ClusterStatus {
        cluster: "m2".into(),
    }];
    assert_eq!(back(&isi, Some(&si)), Back::WriteStatus);
    let mut reflected = si.clone();
    reflected.status = isi.status.clone();
    assert_eq!(back(&isi, Some(&reflected)), Back::Nothing);
    assert_eq!(back(&isi, None), Back::DeleteInternal);
    isi.reference.name = String::new();
    assert_eq!(back(&isi, None), Back::Invalid, "never deleted on its word");
}

#[test]
fn an_empty_string_is_no_string_in_a_status() {
    let empty = ServiceImportStatus {
        type_: Some(String::new()),
        session_affinity: Some(String::new()),
        ..Default::default()
    };
    assert!(same_status(&empty, &ServiceImportStatus::default()));
}

#[test]
fn the_most_telling_step_labels_the_reconcile() {
    let r = reference_of("m1", &import("1", true));
    let done = Outcome::Unchanged
        .of_forward(&Forward::AddFinalizer)
        .of_forward(&Forward::Create(r.clone()));
    assert_eq!(done.label(), "created");
    assert_eq!(
        Outcome::Unchanged.of_forward(&Forward::Update(r)).label(),
        "updated"
    );
    assert_eq!(
        Outcome::Unchanged
            .of_forward(&Forward::DeleteInternal)
            .label(),
        "cleaned_up"
    );
}

#[test]
fn only_an_update_of_another_writers_copy_is_left_to_it() {
    use crate::controller::writers::OtherWriter;
    let agent = OtherWriter {
        manager: "member-net-controller-manager",
        time: created().0,
    };
    let si = import("2", true);
    let isi = internal(reference_of("m1", &si));
    let update = forward("m1", &import("5", true), Some(&isi));
    assert!(matches!(update, Forward::Update(_)));
    assert_eq!(left_to(&update, Some(agent)), Some(agent));
    assert_eq!(left_to(&update, None), None);
    for step in [
        Forward::Nothing,
        Forward::AddFinalizer,
        Forward::Create(reference_of("m1", &si)),
        Forward::DeleteInternal,
        Forward::RemoveFinalizer,
    ] {
        assert_eq!(left_to(&step, Some(agent)), None, "{step:?}");
    }
    assert_eq!(
        crate::controller::Outcome::reconciled(Labelled {
            job: NAME,
            outcome: Outcome::OtherWriter
        })
        .label(),
        "serviceimport:other_writer"
    );
}
