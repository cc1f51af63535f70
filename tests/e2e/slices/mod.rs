//! Issue #25: the member's EndpointSlices reach the hub as EndpointSliceExports without any
//! member agent, exactly as fleet-networking's member EndpointSlice and EndpointSliceExport
//! controllers write them; against real apiservers.
//!
//! Most tests run only the EndpointSlice exporter (`--controllers endpointslice`) and set the
//! ServiceExports' Valid/Conflict conditions by hand, as fleet-networking's own tests of that
//! controller do; one runs both exporters with the hub's verdict written onto the ISE.
//! Writes are counted server-side, from each apiserver's `apiserver_request_total`.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleetnet_hub::api::EndpointSliceExport;
use fleetnet_hub::app::{self, Extensions, Running};
use fleetnet_hub::fleet::{Controllers, Phase};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const M: &str = "m1";
const NS: &str = "work";

fn slices_only() -> Controllers {
    Controllers {
        service_exports: false,
        endpoint_slices: true,
    }
}

/// A fleet of member `M` with namespace `NS`: the fleet, a hub client, a client of `M`, and
/// `M`'s namespace in the hub.
async fn one_member() -> (Fleet, kube::Client, kube::Client, String) {
    let fleet = Fleet::builder().members([M]).start().await.expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let member = fleet.member(M).client().await.expect("member client");
    let hub_ns = fleet.hub_namespace(M);
    namespace(&member, NS).await;
    (fleet, hub, member, hub_ns)
}

async fn start_in_process(fleet: &Fleet, controllers: Controllers) -> Running {
    init_test_logs();
    let mut config = app_config(fleet, &kubeconfig_dir(fleet, "slices-kubeconfigs", &[M]));
    config.runtime.controllers = controllers;
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    within(Duration::from_secs(60), "member ready", || async {
        let ready = running
            .state
            .member(M)
            .is_some_and(|s| s.phase == Phase::Ready);
        (ready && running.state.ready()).then_some(())
    })
    .await;
    running
}

/// A ServiceExport `NS/name` whose status says `Valid=valid`, `Conflict=conflict`, as the
/// ServiceExport exporter and the hub would have set them.
async fn export_with(member: &kube::Client, name: &str, valid: &str, conflict: &str) {
    let api = exports(member, NS);
    if api.get_opt(name).await.expect("get export").is_none() {
        create_export(member, NS, name, &[]).await;
    }
    set_verdict(member, name, valid, conflict).await;
}

async fn set_verdict(member: &kube::Client, name: &str, valid: &str, conflict: &str) {
    let condition = |type_: &str, status: &str| {
        json!({"type": type_, "status": status, "reason": "Test", "message": "",
               "lastTransitionTime": "2026-12-05T00:00:00Z"})
    };
    exports(member, NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [
                condition("Valid", valid), condition("Conflict", conflict)
            ]}})),
        )
        .await
        .expect("set ServiceExport conditions");
}

async fn create_slice(member: &kube::Client, slice: &EndpointSlice) -> EndpointSlice {
    slices(member, NS)
        .create(&PostParams::default(), slice)
        .await
        .expect("create EndpointSlice")
}

async fn get_slice(member: &kube::Client, name: &str) -> EndpointSlice {
    slices(member, NS).get(name).await.expect("get slice")
}

async fn set_endpoints(member: &kube::Client, name: &str, addresses: &[&str]) {
    let endpoints: Vec<_> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    slices(member, NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "endpoints": endpoints })),
        )
        .await
        .expect("patch endpoints");
}

async fn set_unique_name(member: &kube::Client, name: &str, unique: &str) {
    slices(member, NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                fleetnet_hub::api::UNIQUE_NAME_ANNOTATION: unique
            }}})),
        )
        .await
        .expect("set unique name");
}

/// Waits until the slice carries no unique name.
async fn wait_unnamed(member: &kube::Client, name: &str) {
    let api = slices(member, NS);
    eventually(&format!("{NS}/{name} without a unique name"), || {
        let api = api.clone();
        async move {
            let s = api.get_opt(name).await.ok()??;
            unique_name_of(&s).is_none().then_some(())
        }
    })
    .await;
}

/// Requests an apiserver counted for `resource` with `verb`, any response code.
async fn requests(client: &kube::Client, resource: &str, verb: &str) -> f64 {
    let text = client
        .request_text(
            http::Request::get("/metrics")
                .body(vec![])
                .expect("request"),
        )
        .await
        .expect("apiserver metrics");
    let resource = format!("resource=\"{resource}\"");
    let verb = format!("verb=\"{verb}\"");
    sum(&text, "apiserver_request_total", &[&resource, &verb])
}

/// Writes an apiserver counted for `resource` (POST, PUT, PATCH, DELETE), any response code.
async fn writes(client: &kube::Client, resource: &str) -> f64 {
    let mut total = 0.0;
    for verb in ["POST", "PUT", "PATCH", "DELETE"] {
        total += requests(client, resource, verb).await;
    }
    total
}

async fn ese_deletes(hub: &kube::Client) -> f64 {
    requests(hub, "endpointsliceexports", "DELETE").await
}

/// Slice writes in the member plus export writes in the hub.
async fn slice_writes(member: &kube::Client, hub: &kube::Client) -> f64 {
    writes(member, "endpointslices").await + writes(hub, "endpointsliceexports").await
}

/// The slice writes once they have not moved for `quiet`.
async fn settled_writes(member: &kube::Client, hub: &kube::Client, quiet: Duration) -> f64 {
    let mut last = slice_writes(member, hub).await;
    let mut since = Instant::now();
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = slice_writes(member, hub).await;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "slice writes never settled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slices_follow_every_branch_of_the_reference_controllers() {
    let (fleet, hub, member, hub_ns) = one_member().await;
    let running = start_in_process(&fleet, slices_only()).await;

    // Never exported: IPv6, no Service label, a Service without ServiceExport, an invalid and
    // a conflicted ServiceExport.
    export_with(&member, "web", "True", "False").await;
    export_with(&member, "bad", "False", "False").await;
    export_with(&member, "fight", "True", "True").await;
    let mut v6 = endpoint_slice(NS, "web-v6", "web", &["fd00::1"]);
    v6.address_type = "IPv6".into();
    let mut unlabelled = endpoint_slice(NS, "loose", "web", &["10.0.9.1"]);
    unlabelled.metadata.labels = None;
    for s in [
        v6,
        unlabelled,
        endpoint_slice(NS, "nope-1", "nope", &["10.0.9.2"]),
        endpoint_slice(NS, "bad-1", "bad", &["10.0.9.3"]),
        endpoint_slice(NS, "fight-1", "fight", &["10.0.9.4"]),
    ] {
        create_slice(&member, &s).await;
    }

    // Exported: ready addresses only, named `<member>-<ns>-<name>-<5>`, every reference field.
    let mut web1 = endpoint_slice(NS, "web-1", "web", &["10.0.0.1", "10.0.0.2"]);
    web1.endpoints.get_or_insert_with(Vec::new).push(
        serde_json::from_value(json!({"addresses": ["10.0.0.3"], "conditions": {"ready": false}}))
            .expect("endpoint"),
    );
    create_slice(&member, &web1).await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
    let slice = get_slice(&member, "web-1").await;
    let unique = unique_name_of(&slice).expect("a unique name");
    assert!(unique.starts_with("m1-work-web-1-"), "{unique}");
    assert_eq!(unique.len(), "m1-work-web-1-".len() + 5, "{unique}");
    assert_eq!(ese.metadata.name.as_deref(), Some(unique.as_str()));
    assert_eq!(exported_addresses(&ese), ["10.0.0.1", "10.0.0.2"]);
    let r = &ese.spec.endpoint_slice_reference;
    assert_eq!(r.cluster_id, M);
    assert_eq!(r.kind, "EndpointSlice");
    assert_eq!(r.namespaced_name, "work/web-1");
    assert_eq!(Some(&r.uid), slice.metadata.uid.as_ref());
    assert_eq!(
        Some(&r.resource_version),
        slice.metadata.resource_version.as_ref()
    );
    assert_eq!(Some(r.generation), slice.metadata.generation);
    assert!(r.exported_since.is_some());
    assert_eq!(ese.spec.address_type, "IPv4");
    assert_eq!(ese.spec.owner_service_reference.namespaced_name, "work/web");
    assert_eq!(ese.spec.ports[0].port, Some(80));
    let after_export = settled_writes(&member, &hub, Duration::from_secs(2)).await;

    for skipped in ["web-v6", "loose", "nope-1", "bad-1", "fight-1"] {
        assert!(
            exports_of_slice(&hub, &hub_ns, NS, skipped)
                .await
                .is_empty(),
            "{skipped} exported"
        );
        assert_eq!(
            unique_name_of(&get_slice(&member, skipped).await),
            None,
            "{skipped} named"
        );
    }

    // An endpoint change: one hub write, nothing in the member.
    let hub_before = writes(&hub, "endpointsliceexports").await;
    set_endpoints(&member, "web-1", &["10.0.0.1", "10.0.0.2", "10.0.0.4"]).await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        exported_addresses(e).len() == 3
    })
    .await;
    let after_change = settled_writes(&member, &hub, Duration::from_secs(2)).await;
    // `set_endpoints` itself is one member write.
    assert_eq!(
        after_change - after_export,
        2.0,
        "an endpoint change costs one hub write"
    );
    assert_eq!(writes(&hub, "endpointsliceexports").await - hub_before, 1.0);
    assert_ne!(
        ese.spec.endpoint_slice_reference.exported_since, None,
        "exportedSince kept"
    );

    // A tampered name: a new one, and the export under the old name goes.
    set_unique_name(&member, "web-1", "Not_A_DNS_Name").await;
    let ese = wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        e.metadata.name.as_deref() != Some(unique.as_str())
    })
    .await;
    let renamed = ese.metadata.name.clone().expect("name");
    assert!(renamed.starts_with("m1-work-web-1-"), "{renamed}");
    eventually("web-1 annotated with its new name", || async {
        (unique_name_of(&get_slice(&member, "web-1").await).as_deref() == Some(renamed.as_str()))
            .then_some(())
    })
    .await;

    // A name another slice's export holds: web-2 given web-1's name gets its own.
    create_slice(&member, &endpoint_slice(NS, "web-2", "web", &["10.0.1.1"])).await;
    wait_slice_export(&hub, &hub_ns, NS, "web-2", |_| true).await;
    set_unique_name(&member, "web-2", &renamed).await;
    eventually("web-2 renamed away from web-1's name", || async {
        let name = unique_name_of(&get_slice(&member, "web-2").await)?;
        (name != renamed && name.starts_with("m1-work-web-2-")).then_some(())
    })
    .await;
    let web2 = wait_slice_export(&hub, &hub_ns, NS, "web-2", |_| true).await;
    let web1 = wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
    assert_eq!(web1.metadata.name.as_deref(), Some(renamed.as_str()));
    assert_ne!(web2.metadata.name, web1.metadata.name);

    // Orphans: an export of a slice that does not exist, and a second export of web-1 under a
    // name web-1 does not carry; both go. Another member's namespace is never looked at.
    let mut ghost = web1.clone();
    ghost.metadata = Default::default();
    ghost.metadata.name = Some("m1-work-ghost-aaaaa".into());
    ghost.spec.endpoint_slice_reference.name = "ghost".into();
    ghost.spec.endpoint_slice_reference.namespaced_name = "work/ghost".into();
    ghost.spec.endpoint_slice_reference.uid = "00000000-0000-0000-0000-00000000beef".into();
    let mut copy = web1.clone();
    copy.metadata = Default::default();
    copy.metadata.name = Some("m1-work-web-1-zzzzz".into());
    for e in [&ghost, &copy] {
        slice_exports(&hub, &hub_ns)
            .create(&PostParams::default(), e)
            .await
            .expect("hand-made export");
    }
    wait_gone(&slice_exports(&hub, &hub_ns), "m1-work-ghost-aaaaa").await;
    wait_gone(&slice_exports(&hub, &hub_ns), "m1-work-web-1-zzzzz").await;
    wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        e.metadata.name.as_deref() == Some(renamed.as_str())
    })
    .await;

    // Unexport when the ServiceExport is conflicted, invalid; export again once it is not.
    for (valid, conflict) in [("True", "True"), ("False", "False")] {
        set_verdict(&member, "web", valid, conflict).await;
        wait_slice_unexported(&hub, &hub_ns, NS, "web-1").await;
        wait_slice_unexported(&hub, &hub_ns, NS, "web-2").await;
        wait_unnamed(&member, "web-1").await;
        wait_unnamed(&member, "web-2").await;
        set_verdict(&member, "web", "True", "False").await;
        wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
        wait_slice_export(&hub, &hub_ns, NS, "web-2", |_| true).await;
    }

    // The slice deleted: its export goes.
    slices(&member, NS)
        .delete("web-2", &DeleteParams::default())
        .await
        .expect("delete web-2");
    wait_slice_unexported(&hub, &hub_ns, NS, "web-2").await;

    // The ServiceExport deleted: web-1 withdrawn, its name removed.
    exports(&member, NS)
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete ServiceExport");
    wait_slice_unexported(&hub, &hub_ns, NS, "web-1").await;
    wait_unnamed(&member, "web-1").await;

    // A quiet minute's worth (a few seconds here): nothing written.
    let settled = settled_writes(&member, &hub, Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        slice_writes(&member, &hub).await,
        settled,
        "writes while quiet"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_exporters_a_service_and_its_slice_reach_the_hub() {
    let (fleet, hub, member, hub_ns) = one_member().await;
    let running = start_in_process(&fleet, Controllers::default()).await;

    create_service(&member, &service(NS, "api", 80)).await;
    create_export(&member, NS, "api", &[]).await;
    create_slice(&member, &endpoint_slice(NS, "api-1", "api", &["10.1.0.1"])).await;
    wait_ise(&hub, &hub_ns, "work-api", |_| true).await;
    // Valid but pending the hub's verdict: not exported yet.
    wait_condition(
        &member,
        NS,
        "api",
        "Conflict",
        "Unknown",
        "ServicePendingConflictResolution",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        exports_of_slice(&hub, &hub_ns, NS, "api-1")
            .await
            .is_empty()
    );

    // The hub's verdict, as fleet-networking's hub controller writes it onto the ISE.
    ises(&hub, &hub_ns)
        .patch_status(
            "work-api",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [{
                "type": "Conflict", "status": "False", "reason": "NoConflictFound",
                "message": "no conflict", "lastTransitionTime": "2026-12-05T00:00:00Z",
                "observedGeneration": 1
            }]}})),
        )
        .await
        .expect("hub verdict");
    let ese = wait_slice_export(&hub, &hub_ns, NS, "api-1", |_| true).await;
    assert_eq!(exported_addresses(&ese), ["10.1.0.1"]);
    assert_eq!(ese.spec.owner_service_reference.name, "api");
    running.shutdown().await;
}

/// The binary, with its health port, killed when dropped.
struct Process {
    child: Child,
    health: std::net::SocketAddr,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn spawn(fleet: &Fleet, dir: &Path, hub_qps: u32) -> Self {
        let port = free_port();
        let health: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let child = Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .arg("run")
            .arg("--hub-kubeconfig")
            .arg(fleet.hub().kubeconfig_path())
            .arg("--kubeconfig-dir")
            .arg(dir)
            .args(["--controllers", "endpointslice"])
            .args(["--health-probe-bind-address", &health.to_string()])
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .args(["--kube-api-qps", "200", "--kube-api-burst", "400"])
            .args(["--hub-api-qps", &hub_qps.to_string()])
            .args(["--hub-api-burst", &hub_qps.to_string()])
            .env("RUST_LOG", "warn")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn fleetnet-hub");
        Self { child, health }
    }

    async fn wait_ready(&self) {
        let health = self.health;
        within(Duration::from_secs(60), "process ready", || async move {
            let ok = tokio::net::TcpStream::connect(health).await.is_ok()
                && http_get(health, "/readyz").await.0 == 200;
            ok.then_some(())
        })
        .await;
    }

    fn kill(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    fn terminate(&mut self) {
        signal(self.child.id(), "-TERM");
        let _ = self.child.wait();
    }
}

/// Every slice `web-<i>` exported exactly once under the name it carries.
async fn one_export_each(
    member: &kube::Client,
    hub: &kube::Client,
    hub_ns: &str,
    n: usize,
) -> Option<String> {
    let all: Vec<EndpointSliceExport> = slice_exports(hub, hub_ns)
        .list(&Default::default())
        .await
        .ok()?
        .items;
    if all.len() != n {
        return Some(format!("{} exports, want {n}", all.len()));
    }
    for i in 0..n {
        let name = format!("web-{i}");
        let slice = slices(member, NS).get(&name).await.ok()?;
        let unique = unique_name_of(&slice)?;
        let mine: Vec<_> = all
            .iter()
            .filter(|e| e.spec.endpoint_slice_reference.name == name)
            .collect();
        if mine.len() != 1 || mine[0].metadata.name.as_deref() != Some(unique.as_str()) {
            return Some(format!("{name}: {} exports", mine.len()));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_writes_nothing_and_a_kill_minus_9_loses_and_doubles_nothing() {
    const FIRST: usize = 20;
    const ALL: usize = 60;
    let (fleet, hub, member, hub_ns) = one_member().await;
    let dir = kubeconfig_dir(&fleet, "slices-kubeconfigs", &[M]);
    export_with(&member, "web", "True", "False").await;
    for i in 0..FIRST {
        create_slice(
            &member,
            &endpoint_slice(NS, &format!("web-{i}"), "web", &["10.0.0.1", "10.0.0.2"]),
        )
        .await;
    }
    let mut first = Process::spawn(&fleet, &dir, 100);
    first.wait_ready().await;
    within(Duration::from_secs(60), "first slices exported", || async {
        one_export_each(&member, &hub, &hub_ns, FIRST)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let converged = settled_writes(&member, &hub, Duration::from_secs(2)).await;

    // SIGTERM, then a new process: nothing to write. Then kill -9, and again.
    first.terminate();
    for restart in ["after SIGTERM", "after kill -9"] {
        let mut process = Process::spawn(&fleet, &dir, 100);
        process.wait_ready().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            slice_writes(&member, &hub).await,
            converged,
            "writes on a converged fleet {restart}"
        );
        process.kill();
    }

    // kill -9 while exporting: the hub budget (2/s) keeps the new slices waiting in line.
    let deletes_before = ese_deletes(&hub).await;
    let mut slow = Process::spawn(&fleet, &dir, 2);
    slow.wait_ready().await;
    for i in FIRST..ALL {
        create_slice(
            &member,
            &endpoint_slice(NS, &format!("web-{i}"), "web", &["10.0.0.1"]),
        )
        .await;
    }
    within(
        Duration::from_secs(60),
        "a few new slices exported",
        || async {
            let n = slice_exports(&hub, &hub_ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .len();
            (n >= FIRST + 4).then_some(())
        },
    )
    .await;
    slow.kill();
    let at_kill = slice_exports(&hub, &hub_ns)
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .len();
    assert!(
        at_kill < ALL,
        "the kill interrupted nothing ({at_kill} exports)"
    );
    let restarted = Process::spawn(&fleet, &dir, 100);
    restarted.wait_ready().await;
    within(
        Duration::from_secs(90),
        "every slice exported once",
        || async {
            one_export_each(&member, &hub, &hub_ns, ALL)
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    settled_writes(&member, &hub, Duration::from_secs(2)).await;
    assert_eq!(
        one_export_each(&member, &hub, &hub_ns, ALL).await,
        None,
        "after settling"
    );
    assert_eq!(ese_deletes(&hub).await, deletes_before, "exports deleted");
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_down_and_back_keeps_its_exports_and_catches_up() {
    let (mut fleet, hub, member, hub_ns) = one_member().await;
    let running = start_in_process(&fleet, slices_only()).await;
    export_with(&member, "web", "True", "False").await;
    create_slice(&member, &endpoint_slice(NS, "web-1", "web", &["10.0.0.1"])).await;
    wait_slice_export(&hub, &hub_ns, NS, "web-1", |_| true).await;
    let deletes_before = ese_deletes(&hub).await;

    fleet.member_mut(M).stop();
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(
        !exports_of_slice(&hub, &hub_ns, NS, "web-1")
            .await
            .is_empty(),
        "withdrawn while the member was unreachable"
    );
    fleet.member_mut(M).start().await.expect("member back");
    let member = fleet.member(M).client().await.expect("member client");
    let back = Instant::now();
    set_endpoints(&member, "web-1", &["10.0.0.1", "10.0.0.9"]).await;
    wait_slice_export(&hub, &hub_ns, NS, "web-1", |e| {
        exported_addresses(e) == ["10.0.0.1", "10.0.0.9"]
    })
    .await;
    println!(
        "[slices] change after the member's return exported in {:?}",
        back.elapsed()
    );
    assert_eq!(ese_deletes(&hub).await, deletes_before);
    running.shutdown().await;
}
