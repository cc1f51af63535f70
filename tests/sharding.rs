//! Members sharded across replicas of the real binary (`--shard-members`), on real apiservers:
//! every member owned by exactly one replica (its member Lease) and written only by it; a
//! replica killed with SIGKILL has its members taken over within the lease duration + 5 s
//! with no ISE deleted; a third replica takes at most ceil(members/3) + 1 members.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use support::*;

const MEMBERS: [&str; 6] = ["m1", "m2", "m3", "m4", "m5", "m6"];
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// A replica process, killed when dropped.
struct Replica {
    name: String,
    child: Child,
    health: u16,
    metrics: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn replica(fleet: &Fleet, dir: &Path, name: &str) -> Replica {
    let (health, metrics) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args([
            "run",
            "--hub-kubeconfig",
            &fleet.hub().kubeconfig_path().display().to_string(),
            "--kubeconfig-dir",
            &dir.display().to_string(),
            "--shard-members",
            "--leader-election-namespace",
            "default",
            "--leader-election-id",
            "fleetnet-hub",
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health}"),
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics}"),
            "--kube-api-qps",
            "100",
            "--kube-api-burst",
            "200",
        ])
        .env("POD_NAME", name)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a replica");
    Replica {
        name: name.to_string(),
        child,
        health,
        metrics,
    }
}

async fn replica_get(port: u16, path: &str) -> String {
    http_get(([127, 0, 0, 1], port).into(), path).await.1
}

/// The members a replica runs (engaged and ready), from its `/members`.
async fn engaged(r: &Replica) -> BTreeSet<String> {
    let body = replica_get(r.health, "/members").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["members"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, s)| s["phase"] == "ready")
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Member → holder of its member Lease (replica identity, `<pod>_<hex>`).
async fn holders(hub: &kube::Client) -> BTreeMap<String, String> {
    Api::<Lease>::namespaced(hub.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list leases")
        .items
        .into_iter()
        .filter_map(|l| {
            let member = l
                .metadata
                .name?
                .strip_prefix("fleetnet-hub-member-")?
                .to_string();
            let holder = l.spec?.holder_identity.unwrap_or_default();
            (!holder.is_empty()).then_some((member, holder))
        })
        .collect()
}

/// Who runs each member now, when that is consistent: every member engaged by exactly one
/// of `replicas`, the one its lease names.
async fn ownership(hub: &kube::Client, replicas: &[&Replica]) -> Option<BTreeMap<String, String>> {
    let holders = holders(hub).await;
    if holders.len() != MEMBERS.len() {
        return None;
    }
    let mut seen = BTreeMap::new();
    for r in replicas {
        for m in engaged(r).await {
            if seen.insert(m.clone(), r.name.clone()).is_some() {
                return None;
            }
            // The holder identity is `<pod name>_<suffix>`.
            if !holders.get(&m)?.starts_with(&format!("{}_", r.name)) {
                return None;
            }
        }
    }
    (seen.len() == MEMBERS.len()).then_some(seen)
}

/// Waits until every one of `replicas` has announced itself and the ownership is consistent
/// and stable over a few retry periods.
async fn settled(hub: &kube::Client, replicas: &[&Replica]) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let announced = || async {
        Api::<Lease>::namespaced(hub.clone(), "default")
            .list(&ListParams::default().labels("fleetnet.azure.com/replica-of=fleetnet-hub"))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    };
    loop {
        assert!(
            Instant::now() < deadline,
            "ownership did not settle in 90 s"
        );
        if announced().await >= replicas.len()
            && let Some(first) = ownership(hub, replicas).await
        {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if ownership(hub, replicas).await.as_ref() == Some(&first) {
                return first;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Server-side count of ISE deletes on the hub.
async fn ise_deletes(hub: &kube::Client) -> f64 {
    let text = hub
        .request_text(
            http::Request::get("/metrics")
                .body(vec![])
                .expect("request"),
        )
        .await
        .expect("hub metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"internalserviceexports\"")
                && l.contains("verb=\"DELETE\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Member-side writes a replica's clients made, per member (its own counters).
async fn member_writes(r: &Replica) -> BTreeMap<String, f64> {
    let text = replica_get(r.metrics, "/metrics").await;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| {
        l.starts_with("fleetnet_api_requests_total{")
            && l.contains("client=\"member\"")
            && (l.contains("verb=\"patch\"") || l.contains("verb=\"create\""))
            && !l.contains("code=\"none\"")
    }) {
        let member = line
            .split("member=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_default()
            .to_string();
        let n: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(member).or_insert(0.0) += n;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_sharded_written_by_owners_only_and_fail_over() {
    init_test_logs();
    let fleet = Fleet::builder()
        .members(MEMBERS)
        .quiet()
        .start()
        .await
        .expect("fleet starts");
    let hub = fleet.hub().client().await.expect("hub client");
    let dir = fleet.member_kubeconfig_dir();

    // Two replicas, then a third: few members move.
    let a = replica(&fleet, &dir, "replica-a");
    let b = replica(&fleet, &dir, "replica-b");
    let two = settled(&hub, &[&a, &b]).await;
    let c = replica(&fleet, &dir, "replica-c");
    let three = settled(&hub, &[&a, &b, &c]).await;
    let moved = MEMBERS.iter().filter(|m| two[**m] != three[**m]).count();
    println!("sharding: 2 replicas {two:?}; 3 replicas {three:?}; {moved} moved");
    assert!(
        moved <= MEMBERS.len().div_ceil(3) + 1,
        "{moved} members moved when a third replica came"
    );

    // Every member exports, written only by its owner.
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member client");
        namespace(&client, "shop").await;
        create_service(&client, &service("shop", "cart", 80)).await;
        create_export(&client, "shop", "cart", &[]).await;
    }
    for m in MEMBERS {
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-cart", |_| true).await;
    }
    let replicas = [&a, &b, &c];
    for r in replicas {
        let writes = member_writes(r).await;
        for (member, n) in &writes {
            if *n > 0.0 {
                assert_eq!(
                    three.get(member),
                    Some(&r.name),
                    "{} wrote {n} times to {member}, owned by {:?}",
                    r.name,
                    three.get(member)
                );
            }
        }
    }
    let deletes_before = ise_deletes(&hub).await;

    // SIGKILL the owner of m1: its members move to the others and export again.
    let victim_name = three["m1"].clone();
    let (mut victim, survivors): (Vec<Replica>, Vec<Replica>) =
        [a, b, c].into_iter().partition(|r| r.name == victim_name);
    let orphans: Vec<String> = three
        .iter()
        .filter(|(_, o)| **o == victim_name)
        .map(|(m, _)| m.clone())
        .collect();
    let mut victim = victim.pop().expect("victim");
    let victim_prefix = format!("{victim_name}_");
    victim.child.kill().expect("kill -9");
    let killed = Instant::now();
    drop(victim);
    let survivors: Vec<&Replica> = survivors.iter().collect();
    let took_over = loop {
        let holders = holders(&hub).await;
        if holders.len() == MEMBERS.len()
            && holders.values().all(|h| !h.starts_with(&victim_prefix))
        {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(90), "no failover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    settled(&hub, &survivors).await;
    for m in &orphans {
        let client = fleet.member(m).client().await.expect("member client");
        create_service(&client, &service("shop", "after", 80)).await;
        create_export(&client, "shop", "after", &[]).await;
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-after", |_| true).await;
    }
    let exported = killed.elapsed();
    println!(
        "sharding: {victim_name} killed; its {} members owned again after {took_over:?}, a new export of each in the hub after {exported:?}",
        orphans.len()
    );
    assert!(
        took_over < LEASE_DURATION + Duration::from_secs(5),
        "failover took {took_over:?}"
    );
    assert_eq!(
        ise_deletes(&hub).await,
        deletes_before,
        "no ISE deleted by the failover"
    );
    for m in MEMBERS {
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-cart", |_| true).await;
    }
}
