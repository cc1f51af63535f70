//! Proves the test substrate: real apiservers for a hub and two members, CRDs installed, status
//! subresource, finalizers and deletionTimestamp, watches, and an outage with data kept.

use std::time::Duration;

use fleetnet_hub::api::{ServiceExport, ServiceExportVersion};
use fleetnet_testenv::Fleet;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn substrate_runs_real_clusters_with_crds_finalizers_watches_and_restarts() {
    let mut fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet starts");

    // Every cluster answers, with its own identity and the namespaces of the layout.
    let hub = fleet.hub().client().await.expect("hub client");
    for m in ["alpha", "beta"] {
        let ns = Api::<Namespace>::all(hub.clone())
            .get(&fleet.hub_namespace(m))
            .await;
        assert!(ns.is_ok(), "hub namespace for {m}: {ns:?}");
        let kubeconfig = fleet.member_kubeconfig_dir().join(format!("{m}.yaml"));
        assert!(kubeconfig.is_file(), "{} missing", kubeconfig.display());
    }
    let version = hub.apiserver_version().await.expect("version");
    assert_eq!(version.git_version, "v1.36.2");

    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    let services: Api<Service> = Api::namespaced(alpha.clone(), "default");
    let svc = services
        .create(
            &PostParams::default(),
            &Service {
                metadata: ObjectMeta {
                    name: Some("web".into()),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    ports: Some(vec![ServicePort {
                        port: 80,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .expect("create service");
    let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    assert!(
        cluster_ip.starts_with("10.96."),
        "ClusterIP allocated from the range: {cluster_ip}"
    );

    // The members are isolated clusters: beta has no such Service.
    let beta = fleet.member("beta").client().await.expect("beta client");
    assert!(
        Api::<Service>::namespaced(beta, "default")
            .get_opt("web")
            .await
            .expect("get")
            .is_none()
    );

    let exports: Api<ServiceExport> =
        Api::namespaced_with(alpha.clone(), "default", &ServiceExportVersion::V1Beta1);
    let mut events = watcher(
        exports.clone(),
        watcher::Config::default().fields("metadata.name=web"),
    )
    .applied_objects()
    .boxed();
    exports
        .create(
            &PostParams::default(),
            &ServiceExport::new("default", "web", ServiceExportVersion::V1Beta1),
        )
        .await
        .expect("create ServiceExport");
    let seen = tokio::time::timeout(Duration::from_secs(20), events.try_next())
        .await
        .expect("watch event in time")
        .expect("watch ok")
        .expect("an object");
    assert_eq!(seen.metadata.name.as_deref(), Some("web"));

    // Status subresource.
    let status = serde_json::json!({"status": {"conditions": [{
        "type": "Valid", "status": "True", "reason": "ServiceIsValid", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
    }]}});
    let patched = exports
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch status");
    assert_eq!(patched.conditions().len(), 1);
    // The same object read through v1alpha1: both versions are served from one storage.
    let alpha_v1: Api<ServiceExport> =
        Api::namespaced_with(alpha.clone(), "default", &ServiceExportVersion::V1Alpha1);
    assert_eq!(
        alpha_v1
            .get("web")
            .await
            .expect("v1alpha1 get")
            .conditions()
            .len(),
        1
    );

    // Finalizer holds deletion; the watch sees the deletionTimestamp.
    let fin = serde_json::json!({"metadata": {"finalizers": ["networking.fleet.azure.com/svc-export-cleanup"]}});
    exports
        .patch("web", &PatchParams::default(), &Patch::Merge(&fin))
        .await
        .expect("add finalizer");
    exports
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    let deleting = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match events.try_next().await {
                Ok(Some(se)) if se.metadata.deletion_timestamp.is_some() => return se,
                Ok(Some(_)) => continue,
                other => panic!("watch ended: {other:?}"),
            }
        }
    })
    .await
    .expect("deletionTimestamp seen through the watch");
    assert!(deleting.metadata.finalizers.is_some());
    assert!(
        exports.get_opt("web").await.expect("get").is_some(),
        "held by the finalizer"
    );

    // Member outage with data kept: same port, object still there, still held.
    fleet.member_mut("alpha").stop();
    assert!(exports.get("web").await.is_err(), "apiserver is down");
    fleet
        .member_mut("alpha")
        .start()
        .await
        .expect("restart alpha");
    let after = exports
        .get("web")
        .await
        .expect("object survives the restart");
    assert!(after.metadata.deletion_timestamp.is_some());

    let clear = serde_json::json!({"metadata": {"finalizers": null}});
    exports
        .patch("web", &PatchParams::default(), &Patch::Merge(&clear))
        .await
        .expect("remove finalizer");
    tokio::time::timeout(Duration::from_secs(20), async {
        while exports.get_opt("web").await.expect("get").is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("object gone once the finalizer is removed");
    fleet.print_report(Duration::ZERO);
}

/// A cluster of a dropped fleet is taken by the next fleet that asks for the same CRDs, with
/// nothing of the first left in it (a namespace stuck terminating, an object held by its
/// finalizer, the hub's member namespace); one whose CRDs a test changed is not taken again.
/// The CRDs here carry an annotation no other test's do, so no other test takes these clusters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fleets_clusters_come_back_empty_to_the_next_fleet() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Vec<CustomResourceDefinition> = fleetnet_hub::api::crd_files()
        .into_iter()
        .map(|(_, mut crd)| {
            crd.metadata.annotations =
                Some([("fleetnet.test/pool".to_string(), "substrate".to_string())].into());
            crd
        })
        .collect();
    let start = || {
        Fleet::builder()
            .members(["solo"])
            .crds(crds.clone())
            .quiet()
            .start()
    };

    let first = start().await.expect("first fleet");
    let servers = (first.hub().server(), first.member("solo").server());
    let member = first.member("solo").client().await.expect("member client");
    let namespaces: Api<Namespace> = Api::all(member.clone());
    crate::support::namespace(&member, "left").await;
    let exports: Api<ServiceExport> =
        Api::namespaced_with(member.clone(), "left", &ServiceExportVersion::V1Beta1);
    let mut held = ServiceExport::new("left", "web", ServiceExportVersion::V1Beta1);
    held.metadata.finalizers = Some(vec!["networking.fleet.azure.com/svc-export-cleanup".into()]);
    exports
        .create(&PostParams::default(), &held)
        .await
        .expect("export");
    exports
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete export");
    // No namespace controller runs: the namespace stays Terminating.
    namespaces
        .delete("left", &DeleteParams::default())
        .await
        .expect("delete namespace");
    drop(first);

    let second = start().await.expect("second fleet");
    assert_eq!(
        (second.hub().server(), second.member("solo").server()),
        servers,
        "the clusters of the first fleet were taken again"
    );
    let member = second.member("solo").client().await.expect("member client");
    assert!(
        Api::<Namespace>::all(member.clone())
            .get_opt("left")
            .await
            .expect("get namespace")
            .is_none(),
        "the first fleet's namespace is gone"
    );
    let hub = second.hub().client().await.expect("hub client");
    Api::<Namespace>::all(hub.clone())
        .get(&second.hub_namespace("solo"))
        .await
        .expect("the member's hub namespace is made again");
    // The CRDs are still served: a ServiceExport can be made at once.
    crate::support::namespace(&member, "again").await;
    Api::<ServiceExport>::namespaced_with(member.clone(), "again", &ServiceExportVersion::V1Beta1)
        .create(
            &PostParams::default(),
            &ServiceExport::new("again", "web", ServiceExportVersion::V1Beta1),
        )
        .await
        .expect("export again");

    // A CRD changed by a test: that cluster is not the one it was, and is not taken again.
    let changed = serde_json::json!({"metadata": {"labels": {"changed": "yes"}}});
    Api::<CustomResourceDefinition>::all(member)
        .patch(
            "serviceexports.networking.fleet.azure.com",
            &PatchParams::default(),
            &Patch::Merge(&changed),
        )
        .await
        .expect("change a CRD");
    drop(second);
    let third = start().await.expect("third fleet");
    assert_eq!(third.hub().server(), servers.0, "the hub is taken again");
    assert_ne!(
        third.member("solo").server(),
        servers.1,
        "the member whose CRD changed is not"
    );

    // An apiserver left paused (SIGSTOP) answers nothing: not taken again either.
    let paused_hub = third.hub().pid().expect("the hub runs");
    crate::support::signal(paused_hub, "-STOP");
    let member_server = third.member("solo").server();
    drop(third);
    let fourth = start().await.expect("fourth fleet");
    assert_ne!(fourth.hub().server(), servers.0, "the paused hub is not");
    assert_eq!(
        fourth.member("solo").server(),
        member_server,
        "the member is taken again"
    );
}
