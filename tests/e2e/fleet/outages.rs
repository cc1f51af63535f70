//! Outages: a member's or the hub's, a member whose apiserver hangs, an unreachable member, a
//! member whose watches are refused; each costs only itself and nothing is lost.

use super::*;

use fleetnet_hub::fleet::JobPhase;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_outage_does_not_delay_the_others_and_nothing_is_lost() {
    let (mut fleet, running) = alpha_and_beta().await;
    wait_ready(&running).await;
    let baseline = export_and_wait(&fleet, "beta", "ns1", "baseline").await;

    // alpha has an export pending when its apiserver goes away.
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    namespace(&alpha, "ns1").await;
    create_service(&alpha, &service("ns1", "during-outage", 80)).await;
    create_export(&alpha, "ns1", "during-outage", &[]).await;
    fleet.member_mut("alpha").stop();

    // beta converges in normal time while alpha is down.
    let during = export_and_wait(&fleet, "beta", "ns1", "while-alpha-down").await;
    assert!(
        during < baseline + Duration::from_secs(5),
        "beta slowed by alpha's outage: {during:?} vs {baseline:?}"
    );

    fleet.member_mut("alpha").start().await.expect("alpha back");
    let hub = fleet.hub().client().await.expect("hub client");
    wait_ise(
        &hub,
        &fleet.hub_namespace("alpha"),
        "ns1-during-outage",
        |_| true,
    )
    .await;
    // Nothing duplicated: exactly the ISEs of what alpha exports.
    assert_eq!(ise_names(&fleet, "alpha").await, vec!["ns1-during-outage"]);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_outage_and_return() {
    let mut fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_ready(&running).await;
    export_and_wait(&fleet, "alpha", "ns1", "before").await;

    fleet.hub_mut().stop();
    eventually("hub unreachable noticed", || async {
        (!running.state.hub_reachable()).then_some(())
    })
    .await;
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    create_service(&alpha, &service("ns1", "during-hub-outage", 80)).await;
    create_export(&alpha, "ns1", "during-hub-outage", &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.hub_mut().start().await.expect("hub back");
    let hub = fleet.hub().client().await.expect("hub client");
    wait_ise(
        &hub,
        &fleet.hub_namespace("alpha"),
        "ns1-during-hub-outage",
        |_| true,
    )
    .await;
    assert_eq!(
        ise_names(&fleet, "alpha").await,
        vec!["ns1-before", "ns1-during-hub-outage"]
    );
    eventually("hub reachable again", || async {
        running.state.hub_reachable().then_some(())
    })
    .await;
    running.shutdown().await;
}

/// A member whose identity may list but not watch: its views list, their watches are refused,
/// and it shows failing. Once watch is granted, kube's watcher would resume the watches without
/// a word, and with nothing to reconcile nothing else would tell the member recovered (it
/// stayed failing for good): each refused watch lists again, at once the first time, then
/// after 10 s doubling to a minute, and the end of the list after the grant shows the member
/// Ready, every job with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_watches_are_refused_after_their_lists_is_ready_once_they_are_allowed() {
    init_test_logs();
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &[]);
    let no_watch = fleetnet_testenv::ScopedIdentity {
        namespace: "default".into(),
        name: "lists-only".into(),
        cluster_role: Some(every_resource(&[
            "get", "list", "create", "update", "patch", "delete",
        ])),
        role: None,
        role_namespaces: vec![],
    };
    let alpha = fleet.member("alpha");
    alpha
        .issue_scoped_kubeconfig(&no_watch, &dir.join("alpha.yaml"))
        .await
        .expect("scoped kubeconfig");
    let admin = alpha.client().await.expect("alpha admin");
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    let refused = eventually("alpha's jobs failing on refused watches", || async {
        let m = running.state.member("alpha")?;
        let failing: Vec<&str> = m
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.phase == JobPhase::Failing
                    && j.last_error
                        .as_ref()
                        .is_some_and(|e| e.contains("forbidden"))
            })
            .map(|(job, _)| *job)
            .collect();
        (!failing.is_empty()).then_some(failing)
    })
    .await;
    println!("alpha: watches refused for {refused:?}");
    // Refused again after each list: listed again at once, then after 10 s, 20 s, … (a
    // minute at most), not after every watch backoff (2 s).
    let lists = apiserver_requests(&admin, "serviceexports", "LIST").await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    let lists = apiserver_requests(&admin, "serviceexports", "LIST").await - lists;
    println!("alpha: {lists} LISTs of ServiceExports in 25 s of refused watches");
    assert!(lists <= 3.0, "{lists} LISTs in 25 s");

    let roles = Api::<ClusterRole>::all(admin);
    let mut role = roles.get("lists-only").await.expect("the role");
    role.rules = every_resource(&["*"]).rules;
    roles
        .replace("lists-only", &Default::default(), &role)
        .await
        .expect("grant watch");
    let granted = Instant::now();
    // At the next list: within the pause the refusals have earned (20 s here).
    within(
        Duration::from_secs(75),
        "alpha and every job of it Ready",
        || async {
            let m = running.state.member("alpha")?;
            let ready =
                m.phase == Phase::Ready && m.jobs.values().all(|j| j.phase == JobPhase::Ready);
            ready.then_some(())
        },
    )
    .await;
    println!(
        "alpha Ready {:?} after watch was granted",
        granted.elapsed()
    );
    export_and_wait(&fleet, "alpha", "ns1", "web").await;
    running.shutdown().await;
}

/// Pauses a process (SIGSTOP) until dropped (SIGCONT), also when the test fails meanwhile.
struct Paused(u32);

impl Paused {
    fn new(pid: u32) -> Self {
        let paused = Self(pid);
        paused.signal("-STOP");
        paused
    }

    fn signal(&self, sig: &str) {
        signal(self.0, sig);
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.signal("-CONT");
    }
}

/// A member whose API server hangs (SIGSTOP: connections accepted, nothing answered; its watches
/// just go quiet) shows failing within the probe's period while the others keep exporting, and
/// ready again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_api_server_hangs_shows_failing_until_it_answers() {
    let (fleet, running) = alpha_and_beta().await;
    wait_phase(&running, "alpha", Phase::Ready).await;
    wait_phase(&running, "beta", Phase::Ready).await;

    let paused = Paused::new(fleet.member("beta").pid().expect("beta runs"));
    wait_phase(&running, "beta", Phase::Failing).await;
    let beta = running.state.member("beta").expect("beta");
    let error = beta.last_error.unwrap_or_default();
    assert!(error.contains("API server not answering"), "{error}");
    export_and_wait(&fleet, "alpha", "ns1", "web").await;
    assert_eq!(
        running.state.member("alpha").map(|m| m.phase),
        Some(Phase::Ready)
    );

    drop(paused);
    wait_phase(&running, "beta", Phase::Ready).await;
    export_and_wait(&fleet, "beta", "ns1", "web").await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_member_fails_alone_and_check_reports_every_member() {
    let mut fleet = Fleet::builder()
        .members(["alpha", "beta", "gamma"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    // gamma: an identity without any RBAC.
    let no_rbac = fleetnet_testenv::ScopedIdentity::bare("default", "nobody");
    fleet
        .member("gamma")
        .issue_scoped_kubeconfig(&no_rbac, &dir.join("gamma.yaml"))
        .await
        .expect("scoped kubeconfig");
    // beta is down before it is ever engaged: its first sync cannot finish.
    fleet.member_mut("beta").stop();

    let report = {
        let members = fleetnet_hub::fleet::registry::scan(&dir).expect("scan");
        let mut rows = vec![];
        for (name, src) in members {
            rows.push(
                fleetnet_hub::check::check_member(
                    &name,
                    src.place.path().expect("a file"),
                    &src.kubeconfig.expect("readable"),
                    Default::default(),
                )
                .await,
            );
        }
        rows
    };
    let table = fleetnet_hub::check::table(&report);
    eprintln!("{table}");
    assert!(
        report.iter().any(|r| r.member == "alpha" && r.ok),
        "{table}"
    );
    assert!(
        report.iter().any(|r| r.member == "beta" && !r.ok),
        "{table}"
    );
    assert!(
        report.iter().any(|r| r.member == "gamma"
            && !r.ok
            && r.problem.contains("missing RBAC")
            && r.problem.contains("serviceexports")),
        "{table}"
    );
    assert!(
        fleetnet_hub::check::run(&dir, Default::default(), Default::default())
            .await
            .is_err(),
        "check fails when a member is unusable"
    );

    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    wait_phase(&running, "beta", Phase::Failing).await;
    // A failing member does not hold readiness nor the others' work.
    wait_ready(&running).await;
    export_and_wait(&fleet, "alpha", "ns1", "web").await;
    // beta comes back and is engaged on its own retry.
    fleet.member_mut("beta").start().await.expect("beta back");
    wait_phase(&running, "beta", Phase::Ready).await;
    export_and_wait(&fleet, "beta", "ns1", "web").await;
    running.shutdown().await;
}
