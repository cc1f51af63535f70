//! The replica's hub watches (`src/controller/hub_tap.rs`), on real apiservers and the real
//! binary: a replica lists and watches each hub kind its jobs read once, whatever the number of
//! members it engages (it was once per member); a replica that takes over a killed replica's
//! members has their jobs' hub views at once, with no hub LIST at all. Counted server-side, by
//! the hub's own `apiserver_request_total`.

use crate::support;
use crate::support::replicas;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use replicas::*;
use support::*;

const MEMBERS: [&str; 6] = ["m1", "m2", "m3", "m4", "m5", "m6"];

/// The hub kinds the jobs read (every job runs).
const KINDS: [&str; 5] = [
    "internalserviceexports",
    "endpointsliceexports",
    "internalserviceimports",
    "endpointsliceimports",
    "internalmemberclusters",
];

/// One test of this folder at a time: each runs a hub, six members and one or two replicas.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The hub's requests of `verb` (`LIST`, `WATCH`) per kind, so far.
async fn requests(hub: &kube::Client, verb: &str) -> BTreeMap<&'static str, f64> {
    let verb = format!("verb=\"{verb}\"");
    let mut out = BTreeMap::new();
    for kind in KINDS {
        let resource = format!("resource=\"{kind}\"");
        out.insert(kind, hub_requests(hub, &[&resource, &verb]).await);
    }
    out
}

/// `after - before`, per kind.
fn grown(
    before: &BTreeMap<&'static str, f64>,
    after: &BTreeMap<&'static str, f64>,
) -> BTreeMap<&'static str, f64> {
    KINDS
        .iter()
        .map(|k| (*k, after[k] - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// Waits until `replicas` together run every member, each with all its jobs ready.
async fn all_ready(replicas: &[&Replica], within: Duration) -> Duration {
    let start = Instant::now();
    let want: BTreeSet<String> = MEMBERS.iter().map(|m| m.to_string()).collect();
    loop {
        let mut ready = BTreeSet::new();
        for r in replicas {
            ready.extend(r.engaged().await);
        }
        if ready == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "members ready after {within:?}: {ready:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_lists_and_watches_each_hub_kind_once_for_all_its_members() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let (lists, watches) = (requests(&hub, "LIST").await, requests(&hub, "WATCH").await);
    let a = replica("replica-a", &Access::admin(&fleet), &[]);
    let took = all_ready(&[&a], Duration::from_secs(120)).await;
    // Every member's jobs synced: their hub views came from the replica's watches.
    let lists = grown(&lists, &requests(&hub, "LIST").await);
    let watches = grown(&watches, &requests(&hub, "WATCH").await);
    println!(
        "hub_tap: {} members ready after {took:?}; hub LISTs {lists:?}, WATCHes {watches:?}",
        MEMBERS.len()
    );
    for kind in KINDS {
        // One each (a second only if a watch had to list again): not one per member.
        assert!(
            (1.0..=2.0).contains(&lists[kind]),
            "{kind}: {} LISTs for {} members",
            lists[kind],
            MEMBERS.len()
        );
        assert!(
            watches[kind] <= 2.0,
            "{kind}: {} WATCHes for {} members",
            watches[kind],
            MEMBERS.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_taking_over_a_killed_ones_members_asks_the_hub_for_no_list() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let admin = Access::admin(&fleet);
    let a = replica("replica-a", &admin, &[]);
    let b = replica("replica-b", &admin, &[]);
    let owners = settled(&hub, &[&a, &b], &MEMBERS).await;
    all_ready(&[&a, &b], Duration::from_secs(120)).await;
    let lists = requests(&hub, "LIST").await;

    let victim_name = owners["m1"].clone();
    let orphans: Vec<&String> = owners
        .iter()
        .filter(|(_, o)| **o == victim_name)
        .map(|(m, _)| m)
        .collect();
    let (mut victim, survivor) = match a.name == victim_name {
        true => (a, b),
        false => (b, a),
    };
    victim.kill();
    let killed = Instant::now();
    let took = all_ready(&[&survivor], Duration::from_secs(90)).await;
    let lists = grown(&lists, &requests(&hub, "LIST").await);
    println!(
        "hub_tap: {victim_name} killed; its {} members' jobs ready on {} after {took:?} (lease {LEASE_DURATION:?}); hub LISTs since {lists:?}",
        orphans.len(),
        survivor.name
    );
    for kind in KINDS {
        assert_eq!(lists[kind], 0.0, "{kind}: listed again for the takeover");
    }
    assert!(
        killed.elapsed() >= took && took < LEASE_DURATION + Duration::from_secs(10),
        "orphans ready {took:?} after the kill"
    );
}
