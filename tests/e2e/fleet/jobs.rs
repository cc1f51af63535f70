//! State per job: a job that cannot work (its CRD missing from the hub) is shown failing, by
//! name and with its reason, in `/members` and the metrics; the member's other jobs keep
//! working and the member is Ready; the job recovers once the CRD is there.

use super::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};

const SLICE_EXPORTS_CRD: &str = "endpointsliceexports.networking.fleet.azure.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_hub_crd_is_missing_fails_alone_and_recovers() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let crds: Api<CustomResourceDefinition> = Api::all(fleet.hub().client().await.expect("hub"));
    let mut crd = crds.get(SLICE_EXPORTS_CRD).await.expect("CRD installed");
    crds.delete(SLICE_EXPORTS_CRD, &DeleteParams::default())
        .await
        .expect("delete CRD");
    eventually("the CRD is gone", || async {
        crds.get_opt(SLICE_EXPORTS_CRD)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;

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
    let failing = r#"fleetnet_member_job_failing{member="alpha",job="endpointslice"}"#;
    let metrics = http_get_body(running.metrics_address, "/metrics").await;
    assert_eq!(sample(&metrics, failing), Some(1.0), "{metrics}");
    assert!(
        !metrics.contains(r#"job="serviceexport""#),
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
