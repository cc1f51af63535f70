//! One watch per member kind: every job that reads a kind shares the member's one watch of it
//! (`src/member_watches.rs`, the ServiceExport feed), and a kind no running job reads is not
//! watched at all. Counted server-side (`apiserver_request_total`).

use super::*;

use fleetnet_hub::fleet::Controllers;

/// The member kinds the jobs read, as the apiserver names them.
const KINDS: [&str; 5] = [
    "services",
    "endpointslices",
    "serviceexports",
    "multiclusterservices",
    "serviceimports",
];

/// The LISTs and WATCHes of each of [`KINDS`] the member's apiserver has answered.
async fn reads(member: &kube::Client) -> Vec<(&'static str, f64, f64)> {
    let mut reads = Vec::new();
    for kind in KINDS {
        let lists = apiserver_requests(member, kind, "LIST").await;
        let watches = apiserver_requests(member, kind, "WATCH").await;
        reads.push((kind, lists, watches));
    }
    reads
}

/// What the process added to `before`: `(kind, LISTs, WATCHes)`.
fn added(
    before: &[(&'static str, f64, f64)],
    after: &[(&'static str, f64, f64)],
) -> Vec<(&'static str, f64, f64)> {
    before
        .iter()
        .zip(after)
        .map(|((kind, l0, w0), (_, l1, w1))| (*kind, l1 - l0, w1 - w0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_kind_is_listed_once_with_every_job_on() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let member = fleet.member("alpha").client().await.expect("member");
    let before = reads(&member).await;
    let running = start_jobs(&fleet, "alpha", Controllers::default()).await;
    let after = reads(&member).await;
    for (kind, lists, watches) in added(&before, &after) {
        assert_eq!(lists, 1.0, "{kind}: one LIST for every job that reads it");
        // A watch is counted when it ends: an open one may not be yet.
        assert!(watches <= 1.0, "{kind}: one watch, not {watches}");
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_no_running_job_reads_is_not_watched() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let member = fleet.member("alpha").client().await.expect("member");
    let before = reads(&member).await;
    // The membership job reads none of the kinds; the ServiceImport job reads ServiceImports
    // alone.
    let jobs = Controllers::parse("internalmembercluster,serviceimport").expect("known jobs");
    let running = start_jobs(&fleet, "alpha", jobs).await;
    let after = reads(&member).await;
    for (kind, lists, watches) in added(&before, &after) {
        let read = f64::from(u8::from(kind == "serviceimports"));
        assert_eq!(lists, read, "{kind}: LISTs");
        // A watch is counted when it ends: an open one may not be yet.
        assert!(watches <= read, "{kind}: {watches} watches");
    }
    running.shutdown().await;
}
