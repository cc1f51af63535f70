//! What one fleet of the substrate costs in CPU-seconds (user + system, from /proc), which,
//! unlike wall time, holds still when other work shares the machine:
//!
//! ```text
//! cargo run -p fleetnet-testenv --example boot_cpu -- [--members N] [--rounds R] [--idle S] [-- APISERVER-FLAGS…]
//! ```
//!
//! Per round it starts etcd + hub + N members (N = 2 by default, as `Fleet::builder()`), then
//! prints for each kube-apiserver its CPU from spawn to `/readyz`, to "every CRD Established and
//! listable", and over S idle seconds (10 by default) after that; the same for etcd and for this
//! process (the clients that poll). Flags after `--` go to every apiserver (a later flag
//! overrides the substrate's own), to compare a flag's saving before making it the default.

use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;

struct Options {
    members: usize,
    rounds: usize,
    idle: Duration,
    flags: Vec<String>,
}

fn options() -> Options {
    let mut o = Options {
        members: 2,
        rounds: 3,
        idle: Duration::from_secs(10),
        flags: vec![],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |what: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} takes a number"))
        };
        match a.as_str() {
            "--members" => o.members = number("--members") as usize,
            "--rounds" => o.rounds = number("--rounds") as usize,
            "--idle" => o.idle = Duration::from_secs(number("--idle")),
            "--" => {
                o.flags = args.collect();
                break;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn self_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// CPU of the processes this one has started and reaped: the fleet's, once it has dropped.
fn children_cpu() -> Duration {
    rusage(libc::RUSAGE_CHILDREN)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage writes into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[derive(Default)]
struct Sums {
    ready: f64,
    crds: f64,
    idle: f64,
    etcd: f64,
    etcd_idle: f64,
    client: f64,
    wall: f64,
    lifetime: f64,
    stop: f64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = options();
    let names: Vec<String> = (1..=o.members).map(|i| format!("member-{i}")).collect();
    let mut sums = Sums::default();
    eprintln!("extra apiserver flags: {:?}", o.flags);
    for round in 1..=o.rounds {
        let mut builder = Fleet::builder().members(names.clone()).fresh().quiet();
        for c in std::iter::once("hub".to_string()).chain(names.iter().cloned()) {
            builder = builder.apiserver_args(&c, o.flags.clone());
        }
        let children_before = children_cpu();
        let client_before = self_cpu();
        let begun = Instant::now();
        let fleet = builder.start().await.expect("fleet starts");
        let wall = begun.elapsed().as_secs_f64();
        let client = (self_cpu() - client_before).as_secs_f64();
        let clusters: Vec<_> = std::iter::once(fleet.hub())
            .chain(fleet.members())
            .collect();
        let secs = |d: Option<Duration>| d.unwrap_or_default().as_secs_f64();
        let at_crds: Vec<f64> = clusters.iter().map(|c| secs(c.cpu_time())).collect();
        let etcd_at_crds = secs(fleet.etcd_cpu_time());
        tokio::time::sleep(o.idle).await;
        println!(
            "round {round}: fleet started in {wall:.1} s wall; this process {client:.2} cpu-s"
        );
        for (c, crds) in clusters.iter().zip(&at_crds) {
            let (ready, idle) = (secs(c.ready_cpu()), secs(c.cpu_time()) - crds);
            println!(
                "  {:<10} cpu-s: ready {ready:.2}  +CRDs {:.2} (total {crds:.2})  idle {:.0} s {idle:.2}",
                c.name(),
                crds - ready,
                o.idle.as_secs_f64()
            );
            sums.ready += ready;
            sums.crds += crds - ready;
            sums.idle += idle;
        }
        let etcd_idle = secs(fleet.etcd_cpu_time()) - etcd_at_crds;
        println!(
            "  etcd       cpu-s: at CRDs {etcd_at_crds:.2}  idle {:.0} s {etcd_idle:.2}",
            o.idle.as_secs_f64()
        );
        let stopping = Instant::now();
        drop(fleet);
        let stop = stopping.elapsed().as_secs_f64();
        let lifetime = (children_cpu() - children_before).as_secs_f64();
        println!(
            "  stop (drop) {stop:.1} s wall; every process of the fleet, start to exit: {lifetime:.2} cpu-s"
        );
        sums.lifetime += lifetime;
        sums.stop += stop;
        sums.etcd += etcd_at_crds;
        sums.etcd_idle += etcd_idle;
        sums.client += client;
        sums.wall += wall;
    }
    let per_apiserver = (o.rounds * (o.members + 1)) as f64;
    let rounds = o.rounds as f64;
    println!(
        "mean per apiserver: ready {:.2}  +CRDs {:.2}  idle/s {:.3}; per fleet: etcd {:.2} (idle/s {:.3}), client {:.2}, apiservers+etcd+client {:.2} cpu-s; wall {:.1} s; stop {:.1} s wall; lifetime of the fleet's processes {:.2} cpu-s",
        sums.ready / per_apiserver,
        sums.crds / per_apiserver,
        sums.idle / per_apiserver / o.idle.as_secs_f64(),
        sums.etcd / rounds,
        sums.etcd_idle / rounds / o.idle.as_secs_f64(),
        sums.client / rounds,
        (sums.ready + sums.crds + sums.etcd + sums.client) / rounds,
        sums.wall / rounds,
        sums.stop / rounds,
        sums.lifetime / rounds
    );
}
