//! The real binary restarted, killed, or its member down and back: nothing lost, doubled or
//! written again.

use super::*;

/// The binary, with its health port, killed when dropped.
struct Process {
    child: KillOnDrop,
    health: std::net::SocketAddr,
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
            .args(["--controllers", "endpointslice,endpointsliceexport"])
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
            .map(KillOnDrop)
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
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
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
    let (mut fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, slices_only()).await;
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
