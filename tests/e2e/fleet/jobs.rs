//! State per job: a job that cannot work (its CRD missing from the hub) is shown failing, by
//! name and with its reason, in `/members` and the metrics; the member's other jobs keep
//! working and the member is Ready; the job recovers once the CRD is there.

use super::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};

const SLICE_EXPORTS_CRD: &str = "endpointsliceexports.networking.fleet.azure.com";

/// Deletes CRD `name` and waits until it is gone.
async fn delete_crd(crds: &Api<CustomResourceDefinition>, name: &str) {
    crds.delete(name, &DeleteParams::default())
        .await
        .expect("delete CRD");
    eventually("the CRD is gone", || async {
        crds.get_opt(name)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_hub_crd_is_missing_fails_alone_and_recovers() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let crds: Api<CustomResourceDefinition> = Api::all(fleet.hub().client().await.expect("hub"));
    let mut crd = crds.get(SLICE_EXPORTS_CRD).await.expect("CRD installed");
    delete_crd(&crds, SLICE_EXPORTS_CRD).await;

    let dir = member_dir(&fleet, &["alpha"]);
    let config = config_builder(&fleet, &dir)
        .member_sync_timeout(Duration::from_secs(3))
        .build()
        .expect("config");
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    eventually("the endpointslice job shows failing", || async {
        let alpha = running.state.member("alpha")?;
        let job = alpha.jobs.get("endpointslice")?;
        (job.phase == fleetnet_hub::fleet::JobPhase::Failing).then_some(())
    })
    .await;
    let alpha = running.state.member("alpha").expect("alpha");
    assert_eq!(alpha.phase, Phase::Ready, "{alpha:?}");
    assert_eq!(
        alpha.jobs["serviceexport"].phase,
        fleetnet_hub::fleet::JobPhase::Ready,
        "{alpha:?}"
    );
    let members = http_get_body(running.health_address, "/members").await;
    assert!(
        members.contains("\"endpointslice\"") && members.contains("\"failing\""),
        "{members}"
    );
    let failing = r#"fleetnet_member_job_failing{member="alpha",controller="endpointslice"}"#;
    let metrics = http_get_body(running.metrics_address, "/metrics").await;
    assert_eq!(sample(&metrics, failing), Some(1.0), "{metrics}");
    assert!(
        !metrics.contains(r#"controller="serviceexport""#),
        "a working job has no series"
    );
    // The other job works meanwhile.
    export_and_wait(&fleet, "alpha", "shop", "cart").await;

    crd.metadata.resource_version = None;
    crd.metadata.uid = None;
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("CRD again");
    eventually("the endpointslice job recovers", || async {
        let job = running
            .state
            .member("alpha")?
            .jobs
            .get("endpointslice")?
            .clone();
        (job.phase == fleetnet_hub::fleet::JobPhase::Ready).then_some(())
    })
    .await;
    let metrics = http_get_body(running.metrics_address, "/metrics").await;
    assert_eq!(sample(&metrics, failing), None, "{metrics}");
    running.shutdown().await;
}

/// A member without the import side's CRDs (an export-only member, as most are today): the jobs
/// that need them show failing as not served, the member is Ready as soon as its other jobs
/// have listed (not after `--member-sync-timeout`), and its exports work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_the_import_crds_is_ready_and_exports() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let member = fleet.member("alpha").client().await.expect("member");
    let crds: Api<CustomResourceDefinition> = Api::all(member.clone());
    for crd in [
        "serviceimports.networking.fleet.azure.com",
        "multiclusterservices.networking.fleet.azure.com",
    ] {
        delete_crd(&crds, crd).await;
    }
    let dir = member_dir(&fleet, &["alpha"]);
    let config = config_builder(&fleet, &dir)
        .member_sync_timeout(Duration::from_secs(120))
        .build()
        .expect("config");
    let started = Instant::now();
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "ready without waiting for the sync timeout: {:?}",
        started.elapsed()
    );
    let alpha = running.state.member("alpha").expect("alpha");
    for job in ["serviceimport", "multiclusterservice"] {
        let status = &alpha.jobs[job];
        assert_eq!(
            status.phase,
            fleetnet_hub::fleet::JobPhase::Failing,
            "{alpha:?}"
        );
        let error = status.last_error.as_deref().unwrap_or_default();
        assert!(error.contains("not served"), "{job}: {error}");
    }
    assert_eq!(
        alpha.jobs["serviceexport"].phase,
        fleetnet_hub::fleet::JobPhase::Ready,
        "{alpha:?}"
    );
    export_and_wait(&fleet, "alpha", "shop", "cart").await;
    running.shutdown().await;
}
