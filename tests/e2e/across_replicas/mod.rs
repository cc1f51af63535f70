//! Members sharded across replicas of the real binary (`--shard-members`), on real apiservers:
//! every member owned by exactly one replica (its member Lease) and written only by it; a
//! replica killed with SIGKILL has its members taken over within the lease duration + 5 s
//! with no ISE deleted; a third replica takes at most ceil(members/3) + 1 members. A replica
//! paused (SIGSTOP) for twice the lease duration writes nothing after SIGCONT before it holds a
//! lease again; a replica stopped gracefully (SIGTERM) releases its leases and few members
//! move; a member removed with `--cleanup-on-remove` is cleaned by its owner only. Writes are
//! attributed server-side: each replica has its own identity and the apiservers audit them.

mod failover;
mod holders;
mod scale;

use crate::support;
use crate::support::replicas;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;
use replicas::*;
use support::*;

const MEMBERS: [&str; 6] = ["m1", "m2", "m3", "m4", "m5", "m6"];

/// One test of this folder at a time: each runs a hub, members and two or three replicas, and
/// together they would load two cores until member probes time out, which measures the machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Exports created for the paused replica's members just before it is paused.
const BURST: usize = 15;

fn owned_by<'a>(
    owners: &std::collections::BTreeMap<String, String>,
    r: &Replica,
    among: &[&'a str],
) -> Vec<&'a str> {
    among
        .iter()
        .copied()
        .filter(|m| owners.get(*m) == Some(&r.name))
        .collect()
}
