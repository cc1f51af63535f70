//! The tower stack on real apiservers: the token bucket spaces requests beyond the burst,
//! watches are not throttled, one member flooding its limiter does not slow another, and a
//! throttling apiserver's 429s are retried after its `Retry-After`, each attempt counted.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetnet_hub::client::{ClientStats, Limits};
use fleetnet_testenv::{Fleet, ScopedIdentity};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_spaces_requests_beyond_the_burst_but_not_watches() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let stats = Arc::new(ClientStats::default());
    let limits = Limits {
        qps: 10.0,
        burst: 3,
        ..Limits::default()
    };
    let client = limited_client(
        "alpha",
        fleet.member("alpha").kubeconfig_path(),
        &limits,
        stats.clone(),
    )
    .await;
    let api: Api<Namespace> = Api::all(client.clone());

    // A watch is open the whole time and must not take tokens from the GETs.
    let watch = watcher(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default(),
    )
    .applied_objects();
    let watching = tokio::spawn(watch.for_each(|_| futures::future::ready(())));
    eventually("watch open", || {
        let stats = stats.clone();
        async move { (stats.count_where(|c| c.verb == "watch") > 0).then_some(()) }
    })
    .await;

    let started = Instant::now();
    let done: Vec<Duration> = futures::future::join_all((0..13).map(|_| {
        let api = api.clone();
        async move {
            api.get("default").await.expect("get namespace");
            started.elapsed()
        }
    }))
    .await;
    let mut done = done;
    done.sort();
    let total = *done.last().expect("13 requests");
    // 3 at once from the burst, then 10 more at 10/s: about 1 s. Generous lower bound only.
    eprintln!(
        "13 GETs at qps=10 burst=3: first {:?}, last {:?}, waited {:?}",
        done[0],
        total,
        stats.waited()
    );
    assert!(
        total >= Duration::from_millis(850),
        "requests beyond the burst were not spaced: {total:?}"
    );
    assert!(
        done[2] < Duration::from_millis(500),
        "the burst passed at once: {:?}",
        &done[..3]
    );
    let gaps: Vec<Duration> = done.windows(2).skip(3).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g < Duration::from_millis(400)),
        "steady spacing near 100 ms: {gaps:?}"
    );
    assert!(stats.waited() >= Duration::from_millis(500));
    watching.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_flooding_its_limiter_does_not_slow_another() {
    let fleet = Fleet::builder()
        .members(["slow", "fast"])
        .start()
        .await
        .expect("fleet");
    let slow = fleet.member("slow").client().await.expect("client");
    let fast = fleet.member("fast").client().await.expect("client");
    let hub = fleet.hub().client().await.expect("hub");
    namespace(&slow, "load").await;
    namespace(&fast, "load").await;
    let throttled = start_exporter(
        &fleet,
        "slow",
        ExporterOptions {
            member_limits: Some(Limits {
                qps: 2.0,
                burst: 1,
                ..Limits::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let normal = start_exporter(&fleet, "fast", ExporterOptions::default()).await;

    // 15 exports on the throttled member: ~3 member writes each at 2/s is many seconds of backlog.
    for i in 0..15 {
        create_service(&slow, &service("load", &format!("svc-{i}"), 80)).await;
        create_export(&slow, "load", &format!("svc-{i}"), &[]).await;
    }
    let started = Instant::now();
    create_service(&fast, &service("load", "probe", 80)).await;
    create_export(&fast, "load", "probe", &[]).await;
    wait_ise(&hub, &fleet.hub_namespace("fast"), "load-probe", |_| true).await;
    let fast_took = started.elapsed();
    let slow_done = ises(&hub, &fleet.hub_namespace("slow"))
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .len();
    eprintln!(
        "fast member exported in {fast_took:?} while the slow member had {slow_done}/15 exported"
    );
    assert!(slow_done < 15, "the slow member should still be backlogged");
    assert!(
        fast_took < Duration::from_secs(5),
        "the other member was slowed: {fast_took:?}"
    );
    assert!(throttled.member_stats.waited() > normal.member_stats.waited());
    throttled.stop().await;
    normal.stop().await;
}

/// The apiserver's own max-in-flight filter (priority and fairness off, one request at a
/// time) refuses concurrent requests with 429 and `Retry-After: 1`. It exempts
/// system:masters, so the client uses a ServiceAccount's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_requests_are_retried_after_retry_after_and_counted() {
    let fleet = Fleet::builder()
        .members(["tight"])
        .apiserver_args(
            "tight",
            [
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=1",
                "--max-mutating-requests-inflight=1",
            ],
        )
        .start()
        .await
        .expect("fleet");
    let cluster = fleet.member("tight");
    let identity = ScopedIdentity {
        namespace: "load".into(),
        name: "load-client".into(),
        cluster_role: Some(ClusterRole {
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["configmaps".into()]),
                verbs: vec!["get".into(), "list".into(), "create".into()],
                ..Default::default()
            }]),
            ..Default::default()
        }),
        role: None,
        role_namespaces: vec![],
    };
    let kubeconfig = cluster
        .issue_scoped_kubeconfig(&identity, &fleet.scratch_dir().join("load-client.yaml"))
        .await
        .expect("scoped kubeconfig");
    let stats = Arc::new(ClientStats::default());
    let limits = Limits {
        qps: 1000.0,
        burst: 1000,
        max_in_flight: 64,
        ..Limits::default()
    };
    let client = limited_client("tight", &kubeconfig, &limits, stats.clone()).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "load");

    // Concurrent reads and creates until the server has refused some (usually the first round).
    let mut slowest = Duration::ZERO;
    let mut sent = 0u64;
    for round in 0..5 {
        let started = Instant::now();
        let results = futures::future::join_all((0..20).map(|i| {
            let api = api.clone();
            async move {
                let result = if i % 2 == 0 {
                    api.list(&ListParams::default()).await.map(|_| ())
                } else {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(format!("cm-{round}-{i}")),
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    api.create(&PostParams::default(), &cm).await.map(|_| ())
                };
                (result, started.elapsed())
            }
        }))
        .await;
        sent += 20;
        for (result, took) in results {
            result.expect("every request succeeds, throttled ones after a retry");
            slowest = slowest.max(took);
        }
        if stats.count_where(|c| c.code == Some(429)) > 0 {
            break;
        }
    }
    let throttled = stats.count_where(|c| c.code == Some(429));
    let attempts = stats.count_where(|c| c.resource == "configmaps");
    eprintln!(
        "{sent} requests at max-requests-inflight=1: {throttled} answered 429, {} retries, {attempts} attempts, slowest {slowest:?}",
        stats.retries()
    );
    assert!(
        throttled > 0,
        "the apiserver never refused a request: 429s are being retried out of sight (kube's own retry layer?)"
    );
    assert_eq!(
        stats.retries(),
        throttled,
        "every 429 is retried once it is answered, and nothing else is"
    );
    assert_eq!(
        attempts,
        sent + stats.retries(),
        "each retry is a request of its own through the limiter"
    );
    assert!(
        slowest >= Duration::from_secs(1),
        "a throttled request waited for Retry-After: 1 (slowest {slowest:?})"
    );
}
