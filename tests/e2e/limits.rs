//! The tower stack on real apiservers: the token bucket spaces requests beyond the burst,
//! watches are not throttled, one member flooding its limiter does not slow another, and a
//! throttling apiserver's 429s are retried after its `Retry-After`, each attempt counted.

use crate::support;

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

/// Issue #40 item 3, on real apiservers: a member held to 2 exports and 4 KiB per exported
/// object. A Service of 60 ports is too large: `Valid=False` (`ExportTooLarge`), no ISE. Of
/// three small ServiceExports the two oldest are exported and the third gets `Valid=False`
/// (`ExportQuotaExceeded`, naming the limit, the flag and the member) and no ISE, and stays so;
/// once an exported one is deleted, the waiting one takes the freed place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_past_its_quotas_gets_a_condition_and_nothing_in_the_hub() {
    use fleetnet_hub::api::CONDITION_VALID;
    use k8s_openapi::api::core::v1::ServicePort;
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let alpha = fleet.member("alpha").client().await.expect("client");
    let hub = fleet.hub().client().await.expect("hub");
    let hub_ns = fleet.hub_namespace("alpha");
    namespace(&alpha, "q").await;
    let _exporter = start_exporter(
        &fleet,
        "alpha",
        ExporterOptions {
            quotas: fleetnet_hub::export::Quotas {
                max_exports: 2,
                max_export_bytes: 4096,
            },
            ..Default::default()
        },
    )
    .await;

    let mut big = service("q", "big", 80);
    if let Some(spec) = big.spec.as_mut() {
        spec.ports = Some(
            (0..60)
                .map(|i| ServicePort {
                    name: Some(format!("port-{i}")),
                    port: 1000 + i,
                    ..Default::default()
                })
                .collect(),
        );
    }
    create_service(&alpha, &big).await;
    create_export(&alpha, "q", "big", &[]).await;
    let se = wait_condition(
        &alpha,
        "q",
        "big",
        CONDITION_VALID,
        "False",
        "ExportTooLarge",
    )
    .await;
    let (_, _, message) = condition(&se, CONDITION_VALID).expect("condition");
    assert!(
        message.contains("4096 bytes") && message.contains("--max-export-bytes"),
        "{message}"
    );

    for name in ["a", "b", "c"] {
        create_service(&alpha, &service("q", name, 80)).await;
        create_export(&alpha, "q", name, &[]).await;
    }
    let se = wait_condition(
        &alpha,
        "q",
        "c",
        CONDITION_VALID,
        "False",
        "ExportQuotaExceeded",
    )
    .await;
    let (_, _, message) = condition(&se, CONDITION_VALID).expect("condition");
    for part in ["2 exports", "--max-exports-per-member", "alpha"] {
        assert!(message.contains(part), "{part} in {message}");
    }
    wait_ise(&hub, &hub_ns, "q-a", |_| true).await;
    wait_ise(&hub, &hub_ns, "q-b", |_| true).await;
    // It stays so: the waiting export is looked at again, and nothing more reaches the hub.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let names = |list: Vec<fleetnet_hub::api::InternalServiceExport>| -> Vec<String> {
        list.into_iter().filter_map(|i| i.metadata.name).collect()
    };
    let listed = ises(&hub, &hub_ns)
        .list(&Default::default())
        .await
        .expect("list")
        .items;
    assert_eq!(
        names(listed),
        ["q-a", "q-b"],
        "only the two oldest in the hub"
    );
    let c = exports(&alpha, "q").get("c").await.expect("c");
    assert_eq!(
        condition(&c, CONDITION_VALID).map(|(s, r, _)| (s, r)),
        Some(("False".to_string(), "ExportQuotaExceeded".to_string()))
    );
    assert!(!c.has_cleanup_finalizer(), "nothing to clean up for it");

    // A place frees: the waiting export takes it (within the rechecks' one minute at most).
    exports(&alpha, "q")
        .delete("a", &Default::default())
        .await
        .expect("delete a");
    wait_ise_gone(&hub, &hub_ns, "q-a").await;
    within(
        Duration::from_secs(90),
        "c exported in the freed place",
        || {
            let api = ises(&hub, &hub_ns);
            async move { api.get_opt("q-c").await.ok().flatten() }
        },
    )
    .await;
    wait_condition(&alpha, "q", "c", CONDITION_VALID, "True", "ServiceIsValid").await;
}
