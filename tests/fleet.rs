//! The multi-member runtime on real apiservers: several members at once, members joining,
//! leaving and rotating their kubeconfig, member and hub outages, a malformed kubeconfig.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetnet_hub::app::{self, AppConfig, Extensions, LeaderElection, Running};
use fleetnet_hub::fleet::Phase;
use fleetnet_testenv::Fleet;
use support::*;

async fn http_get_body(addr: std::net::SocketAddr, path: &str) -> String {
    http_get(addr, path).await.1
}

fn config(fleet: &Fleet, dir: &Path) -> AppConfig {
    app_config(fleet, dir)
}

/// A kubeconfig directory of our own, seeded with some of the fleet's members.
fn member_dir(fleet: &Fleet, members: &[&str]) -> PathBuf {
    let dir = fleet
        .scratch_dir()
        .join(format!("kubeconfigs-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    for m in members {
        add_member(fleet, &dir, m);
    }
    dir
}

fn rand_suffix() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn add_member(fleet: &Fleet, dir: &Path, member: &str) {
    let tmp = dir.join(format!(".{member}.tmp"));
    std::fs::copy(fleet.member(member).kubeconfig_path(), &tmp).expect("copy kubeconfig");
    std::fs::rename(&tmp, dir.join(format!("{member}.yaml"))).expect("rename kubeconfig");
}

/// Writes `file` into a new timestamped directory and points `..data` at it atomically.
fn secret_swap(dir: &Path, version: &str, file: &str, content: &str) {
    std::fs::create_dir(dir.join(version)).expect("mkdir");
    std::fs::write(dir.join(version).join(file), content).expect("write");
    std::os::unix::fs::symlink(version, dir.join("..data_tmp")).expect("link");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
}

async fn wait_ready(running: &Running) {
    eventually("process ready", || async {
        running.state.ready().then_some(())
    })
    .await;
}

/// A hub, members `alpha` and `beta` in the kubeconfig directory, and the controller running.
async fn alpha_and_beta() -> (Fleet, Running) {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    (fleet, running)
}

/// Creates `ns/name` Service + ServiceExport in `member` and waits for the ISE in the hub.
async fn export_and_wait(fleet: &Fleet, member: &str, ns: &str, name: &str) -> Duration {
    let client = fleet.member(member).client().await.expect("member client");
    namespace(&client, ns).await;
    let started = Instant::now();
    create_service(&client, &service(ns, name, 80)).await;
    create_export(&client, ns, name, &[]).await;
    let hub = fleet.hub().client().await.expect("hub client");
    wait_ise(
        &hub,
        &fleet.hub_namespace(member),
        &format!("{ns}-{name}"),
        |i| i.spec.service_reference.cluster_id == member,
    )
    .await;
    started.elapsed()
}

async fn ise_names(fleet: &Fleet, member: &str) -> Vec<String> {
    let hub = fleet.hub().client().await.expect("hub client");
    let mut names: Vec<String> = ises(&hub, &fleet.hub_namespace(member))
        .list(&Default::default())
        .await
        .expect("list ISEs")
        .items
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_export_into_their_own_namespaces_and_come_and_go() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta", "gamma"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    // A malformed kubeconfig and a bad name next to good ones: errors for those only.
    std::fs::write(dir.join("broken.yaml"), "this: [is not a kubeconfig").expect("write");
    std::fs::write(dir.join("Not_A_Label.yaml"), "x").expect("write");
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    wait_phase(&running, "beta", Phase::Ready).await;
    wait_phase(&running, "broken", Phase::Failing).await;
    let bad_name = running.state.member("Not_A_Label").expect("tracked");
    assert!(
        bad_name
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("DNS-1123")),
        "{bad_name:?}"
    );
    let broken = running.state.member("broken").expect("tracked");
    assert!(
        broken
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("kubeconfig")),
        "{broken:?}"
    );
    wait_ready(&running).await;

    // The same ns/name from two members: two ISEs, each in its member's namespace only.
    export_and_wait(&fleet, "alpha", "shop", "cart").await;
    export_and_wait(&fleet, "beta", "shop", "cart").await;
    assert_eq!(ise_names(&fleet, "alpha").await, vec!["shop-cart"]);
    assert_eq!(ise_names(&fleet, "beta").await, vec!["shop-cart"]);
    assert!(
        ise_names(&fleet, "gamma").await.is_empty(),
        "gamma is not a member yet"
    );

    // /members and /readyz over HTTP.
    let body = http_get_body(running.health_address, "/members").await;
    assert!(
        body.contains("\"alpha\"") && body.contains("\"ready\""),
        "{body}"
    );
    assert!(
        http_get_body(running.health_address, "/readyz")
            .await
            .starts_with("ok")
    );

    // A member joins at runtime: its file appears.
    // gamma joins the way a mounted Secret presents it: `gamma.yaml -> ..data/gamma.yaml`,
    // `..data -> ..<timestamp>`.
    let gamma_kubeconfig =
        std::fs::read_to_string(fleet.member("gamma").kubeconfig_path()).expect("read");
    secret_swap(&dir, "..2026_12_02_a", "gamma.yaml", &gamma_kubeconfig);
    std::os::unix::fs::symlink("..data/gamma.yaml", dir.join("gamma.yaml")).expect("link");
    wait_phase(&running, "gamma", Phase::Ready).await;
    export_and_wait(&fleet, "gamma", "shop", "cart").await;

    // A member leaves: its watches stop; what it exported stays (no --cleanup-on-remove).
    std::fs::remove_file(dir.join("beta.yaml")).expect("remove");
    eventually("beta gone", || async {
        running.state.member("beta").is_none().then_some(())
    })
    .await;
    let beta = fleet.member("beta").client().await.expect("beta client");
    create_service(&beta, &service("shop", "after-leave", 80)).await;
    create_export(&beta, "shop", "after-leave", &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ise_names(&fleet, "beta").await,
        vec!["shop-cart"],
        "a removed member is not reconciled"
    );

    // Rotation: new content for alpha (a fresh scoped-free copy with another token order is
    // enough: the hash changes) re-engages alpha only.
    let before_alpha = running
        .state
        .member("alpha")
        .expect("alpha")
        .kubeconfig_hash;
    let before_gamma = running.state.member("gamma").expect("gamma").since;
    let rotated = std::fs::read_to_string(dir.join("alpha.yaml")).expect("read") + "\n# rotated\n";
    std::fs::write(dir.join(".alpha.new"), rotated).expect("write");
    std::fs::rename(dir.join(".alpha.new"), dir.join("alpha.yaml")).expect("swap");
    eventually("alpha re-engaged", || async {
        running
            .state
            .member("alpha")
            .filter(|m| m.kubeconfig_hash != before_alpha && m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    assert_eq!(
        running.state.member("gamma").expect("gamma").since,
        before_gamma,
        "gamma untouched by alpha's rotation"
    );
    export_and_wait(&fleet, "alpha", "shop", "after-rotation").await;

    // A Secret update: the kubelet swaps `..data` atomically; gamma alone is re-engaged.
    let before_gamma = running
        .state
        .member("gamma")
        .expect("gamma")
        .kubeconfig_hash;
    secret_swap(
        &dir,
        "..2026_12_02_b",
        "gamma.yaml",
        &format!("{gamma_kubeconfig}\n# rotated\n"),
    );
    eventually("gamma re-engaged after the symlink swap", || async {
        running
            .state
            .member("gamma")
            .filter(|m| m.kubeconfig_hash != before_gamma && m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    export_and_wait(&fleet, "gamma", "shop", "after-swap").await;
    running.shutdown().await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_on_remove_and_leader_election() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha"]);
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", "fleetnet-system")
        .await
        .expect("ns");
    let mut cfg = config(&fleet, &dir);
    cfg.runtime.cleanup_on_remove = true;
    cfg.leader_election = Some(LeaderElection {
        namespace: "fleetnet-system".into(),
        name: "fleetnet-hub".into(),
        identity: "replica-a".into(),
        shard_members: false,
        shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
    });
    let mut standby_cfg = cfg.clone();
    standby_cfg.leader_election = Some(LeaderElection {
        namespace: "fleetnet-system".into(),
        name: "fleetnet-hub".into(),
        identity: "replica-b".into(),
        shard_members: false,
        shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
    });

    let leader = app::start(cfg, Extensions::default())
        .await
        .expect("starts");
    eventually("replica-a leads", || async {
        leader.claim.may_write().then_some(())
    })
    .await;
    let standby = app::start(standby_cfg, Extensions::default())
        .await
        .expect("standby starts");
    wait_phase(&standby, "alpha", Phase::Ready).await;
    assert!(!standby.claim.may_write(), "one leader at a time");
    export_and_wait(&fleet, "alpha", "ns1", "web").await;

    // The leader stops (releasing its lease): the standby takes over and keeps exporting.
    leader.shutdown().await;
    eventually("replica-b leads", || async {
        standby.claim.may_write().then_some(())
    })
    .await;
    export_and_wait(&fleet, "alpha", "ns1", "after-failover").await;

    // --cleanup-on-remove: the member's ISEs go, its finalizers too.
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove");
    let hub_ns = fleet.hub_namespace("alpha");
    wait_ise_gone(&hub, &hub_ns, "ns1-web").await;
    wait_ise_gone(&hub, &hub_ns, "ns1-after-failover").await;
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    eventually("finalizers removed", || {
        let api = exports(&alpha, "ns1");
        async move {
            let list = api.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|se| se.metadata.finalizers.is_none())
                .then_some(())
        }
    })
    .await;
    standby.shutdown().await;
}

/// `--cleanup-on-remove` survives a restart: a member removed while its API server is down has
/// its hub exports withdrawn and its cleanup recorded in the hub (its finalizers cannot be
/// reached); the pending cleanup shows on `/members` and in `fleetnet_member_cleanups_pending`;
/// the process restarts, the member answers again, and the new process removes the finalizers
/// from the record and deletes the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_cleanup_is_finished_after_a_restart() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, ListParams};
    let mut fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    let hub = fleet.hub().client().await.expect("hub client");
    let mut cfg = config(&fleet, &dir);
    cfg.runtime.cleanup_on_remove = true;
    cfg.runtime.rescan_interval = Duration::from_secs(2);
    let running = app::start(cfg.clone(), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    export_and_wait(&fleet, "alpha", "ns1", "web").await;

    fleet.member_mut("alpha").stop();
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove");
    wait_ise_gone(&hub, &fleet.hub_namespace("alpha"), "ns1-web").await;
    let records: Api<Secret> = Api::namespaced(hub.clone(), &cfg.runtime.records_namespace);
    let selector = ListParams::default().labels("fleetnet.azure.com/cleanup-of=fleetnet-hub");
    let error = within(
        Duration::from_secs(90),
        "the cleanup pending, recorded and shown",
        || async {
            let error = running.state.cleanups().get("alpha")?.clone()?;
            let recorded = records.list(&selector).await.ok()?.items.len() == 1;
            let metrics = http_get_body(running.metrics_address, "/metrics").await;
            let counted = sample(&metrics, "fleetnet_member_cleanups_pending") == Some(1.0);
            (recorded && counted).then_some(error)
        },
    )
    .await;
    let members: serde_json::Value =
        serde_json::from_str(&http_get_body(running.health_address, "/members").await)
            .expect("/members is JSON");
    assert_eq!(
        members["pendingCleanups"]["alpha"],
        error.as_str(),
        "{members}"
    );
    assert!(error.contains("finalizers left in place"), "{error}");
    running.shutdown().await;

    fleet.member_mut("alpha").start().await.expect("alpha back");
    let restarted = app::start(cfg, Extensions::default())
        .await
        .expect("restarts");
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    within(
        Duration::from_secs(90),
        "finalizers removed by the restarted process",
        || {
            let api = exports(&alpha, "ns1");
            async move {
                let list = api.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .all(|se| !se.has_cleanup_finalizer())
                    .then_some(())
            }
        },
    )
    .await;
    within(Duration::from_secs(30), "the record deleted", || async {
        let left = records.list(&selector).await.ok()?.items.len();
        (left == 0 && restarted.state.cleanups().is_empty()).then_some(())
    })
    .await;
    wait_phase(&restarted, "beta", Phase::Ready).await;
    restarted.shutdown().await;
}

/// Pauses a process (SIGSTOP) until dropped (SIGCONT), also when the test fails meanwhile.
struct Paused(String);

impl Paused {
    fn new(pid: u32) -> Self {
        let paused = Self(pid.to_string());
        paused.signal("-STOP");
        paused
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.0])
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "kill {signal} {}",
            self.0
        );
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
    let no_rbac = fleetnet_testenv::ScopedIdentity {
        namespace: "default".into(),
        name: "nobody".into(),
        cluster_role: None,
        role: None,
        role_namespaces: vec![],
    };
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
                    &src.path,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_serving_only_v1alpha1_is_read_through_v1alpha1() {
    use fleetnet_hub::api::{
        ServiceExportVersion, crd_yaml, internal_service_export_crd, service_export_crd,
    };
    let crds = tempfile::tempdir().expect("tempdir");
    let mut se = service_export_crd();
    se.spec.versions.retain(|v| v.name == "v1alpha1");
    se.spec.versions[0].storage = true;
    std::fs::write(crds.path().join("se.yaml"), crd_yaml(&se).expect("yaml")).expect("write");
    std::fs::write(
        crds.path().join("ise.yaml"),
        crd_yaml(&internal_service_export_crd()).expect("yaml"),
    )
    .expect("write");
    let fleet = Fleet::builder()
        .members(["old"])
        .crds_dir(crds.path())
        .start()
        .await
        .expect("fleet");
    let client = fleet.member("old").client().await.expect("client");
    assert_eq!(
        fleetnet_hub::api::ServiceExportVersion::discover(&client).await,
        Ok(ServiceExportVersion::V1Alpha1)
    );

    let dir = member_dir(&fleet, &["old"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_ready(&running).await;
    namespace(&client, "ns1").await;
    create_service(&client, &service("ns1", "web", 80)).await;
    let se = fleetnet_hub::api::ServiceExport::new("ns1", "web", ServiceExportVersion::V1Alpha1);
    kube::api::Api::<fleetnet_hub::api::ServiceExport>::namespaced_with(
        client.clone(),
        "ns1",
        &ServiceExportVersion::V1Alpha1,
    )
    .create(&Default::default(), &se)
    .await
    .expect("create v1alpha1 ServiceExport");
    let hub = fleet.hub().client().await.expect("hub");
    wait_ise(&hub, &fleet.hub_namespace("old"), "ns1-web", |_| true).await;
    running.shutdown().await;
}

/// A quiet fleet does not read its kubeconfig directory over and over: opening a file is an
/// inotify event too, and each rescan's own reads once started the next (a thousand members
/// cost a replica 0.3 CPU-s/s doing nothing). With the periodic rescan a minute away, a quiet
/// window of 6 s has no scan at all; a changed file still starts one at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_directory_is_not_read_again_until_something_changes() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha"]);
    let mut cfg = config(&fleet, &dir);
    cfg.runtime.rescan_interval = Duration::from_secs(60);
    let running = app::start(cfg, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    let scans = || async {
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        sample(&metrics, "fleetnet_kubeconfig_scans_total").expect("the scan counter")
    };
    let before = scans().await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let quiet = scans().await;
    assert_eq!(
        quiet,
        before,
        "scans in a quiet window of 6 s: {}",
        quiet - before
    );
    add_member(&fleet, &dir, "beta");
    wait_phase(&running, "beta", Phase::Ready).await;
    assert!(scans().await > quiet, "a new file is read");
    running.shutdown().await;
}

/// A member's watches, requests and Events travel over one HTTP/2 connection: with
/// HTTP/1.1 each watch holds a connection of its own (three to four per member, each a TLS
/// session in memory on both ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_served_over_one_connection() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    {
        // Exports to reconcile (writes and Events on the member); this client and its
        // connections are gone before the controller starts.
        let member = fleet.member("alpha").client().await.expect("member client");
        namespace(&member, "web").await;
        for name in ["a", "b"] {
            create_service(&member, &service("web", name, 80)).await;
            create_export(&member, "web", name, &[]).await;
        }
    }
    let port: u16 = fleet
        .member("alpha")
        .server()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the member's port");
    eventually("the setup client's connections closed", || async {
        (connections_to(port) == 0).then_some(())
    })
    .await;
    let dir = member_dir(&fleet, &["alpha"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    let hub = fleet.hub().client().await.expect("hub client");
    for name in ["web-a", "web-b"] {
        wait_ise(&hub, &fleet.hub_namespace("alpha"), name, |_| true).await;
    }
    assert_eq!(
        connections_to(port),
        1,
        "connections of this process to the member's API server while it is exported"
    );
    running.shutdown().await;
}

/// Established TCP connections of this process to 127.0.0.1:`port`.
fn connections_to(port: u16) -> usize {
    let sockets: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .trim_end_matches(']')
                    .to_string(),
            )
        })
        .collect();
    let table = std::fs::read_to_string("/proc/self/net/tcp").expect("tcp table");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = fields
                .get(2)
                .and_then(|remote| remote.split(':').nth(1))
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            fields.get(3) == Some(&"01")
                && remote_port == Some(port)
                && fields.get(9).is_some_and(|inode| sockets.contains(*inode))
        })
        .count()
}

/// A member removed while reconciles of it wait for hub tokens: once it is gone from the
/// fleet and its reconciles have ended, `/metrics` has no series of it, and none comes back
/// (a reconcile finishing after the removal used to recreate them, the in-flight gauge at -1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_mid_reconcile_leaves_no_series_behind() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha", "beta"]);
    let mut cfg = config(&fleet, &dir);
    // Slow hub writes: alpha's reconciles wait in flight for tokens.
    cfg.hub_limits.qps = 1.0;
    cfg.hub_limits.burst = 1;
    let running = app::start(cfg, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    wait_phase(&running, "beta", Phase::Ready).await;
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    namespace(&alpha, "shop").await;
    for i in 0..20 {
        let name = format!("svc-{i}");
        create_service(&alpha, &service("shop", &name, 80)).await;
        create_export(&alpha, "shop", &name, &[]).await;
    }
    eventually("a reconcile of alpha in flight", || async {
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        (sample(&metrics, r#"fleetnet_reconciles_in_flight{member="alpha"}"#) >= Some(1.0))
            .then_some(())
    })
    .await;
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove");
    eventually("alpha gone", || async {
        running.state.member("alpha").is_none().then_some(())
    })
    .await;
    let alpha_lines = |metrics: &str| -> Vec<String> {
        metrics
            .lines()
            .filter(|l| l.contains(r#"member="alpha""#))
            .map(str::to_string)
            .collect()
    };
    // Its engagement stops within the drain period (15 s); then nothing of alpha is left.
    within(Duration::from_secs(30), "alpha's series gone", || async {
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        alpha_lines(&metrics).is_empty().then_some(())
    })
    .await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let metrics = http_get_body(running.metrics_address, "/metrics").await;
        let back = alpha_lines(&metrics);
        assert!(back.is_empty(), "alpha's series came back: {back:#?}");
        let negative: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("fleetnet_reconciles_in_flight") && l.ends_with(" -1"))
            .collect();
        assert!(negative.is_empty(), "{negative:?}");
    }
    let metrics = http_get_body(running.metrics_address, "/metrics").await;
    assert!(
        sample(
            &metrics,
            r#"fleetnet_member_state{member="beta",state="ready"}"#
        ) == Some(1.0),
        "beta kept"
    );
    running.shutdown().await;
}
