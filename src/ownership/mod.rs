//! Who may write. One lease state machine (`lease`) in two configurations: one leader Lease
//! for the whole process (`leader`), or members sharded over shard Leases (`shard`); without
//! an election every replica writes. Either way each write asks THE [`Fence`] at send time,
//! and what else needs to know (a job before it reconciles, the fleet before it cleans up,
//! the `fleetnet_leader` gauge) asks a [`Claim`] on the same hold.

mod claim;
pub mod fence;
pub mod leader;
pub mod lease;
pub mod placement;
pub mod shard;

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use claim::Claim;
pub use fence::{Fence, Hold, refused};
use lease::LeaseConfig;
use shard::Shards;

/// How this replica takes part in writing.
#[derive(Debug, Clone)]
pub enum Mode {
    /// No election: this replica always writes, for every member.
    Alone,
    /// One Lease for the process: the holder writes for every member; standbys keep their
    /// watches warm.
    Leader(LeaseConfig),
    /// Members hashed onto `shards` shard Leases (`lease.name` is the prefix of every lease
    /// name): a replica runs and writes for the members of the shards it holds.
    Sharded { lease: LeaseConfig, shards: u16 },
}

/// Who writes what, as this replica sees it: the process's fence and, sharded, the shards.
/// Cheap to clone; every clone sees the same holds.
#[derive(Clone)]
pub struct Ownership {
    /// The leader Lease's hold; always open without an election or when sharded (each member
    /// then has its shard's).
    process: Fence,
    shards: Option<Arc<Shards>>,
    /// The namespace and name (sharded: the prefix, and the number of shards) of the Leases
    /// that give the right to write; `None` without an election.
    leases: Option<(String, String, Option<u16>)>,
}

/// The loop that keeps the holds [`Ownership`] reads: [`Election::run`] it.
pub struct Election(Run);

enum Run {
    Nothing,
    Leader(LeaseConfig, watch::Sender<Hold>),
    Shards(Arc<Shards>),
}

impl Ownership {
    /// The ownership of a replica in `mode` and the election that keeps it.
    pub fn new(mode: Mode) -> (Self, Election) {
        let leases = match &mode {
            Mode::Alone => None,
            Mode::Leader(cfg) => Some((cfg.namespace.clone(), cfg.name.clone(), None)),
            Mode::Sharded { lease, shards } => Some((
                lease.namespace.clone(),
                lease.name.clone(),
                Some((*shards).max(1)),
            )),
        };
        let (process, shards, run) = match mode {
            Mode::Alone => (Fence::open(), None, Run::Nothing),
            Mode::Leader(cfg) => {
                let (hold, rx) = watch::channel(Hold::Never);
                (Fence::new(rx), None, Run::Leader(cfg, hold))
            }
            // Each member has its shard's fence; the process-wide one stays open.
            Mode::Sharded { lease, shards } => {
                let shards = Arc::new(Shards::new(lease, shards));
                (Fence::open(), Some(shards.clone()), Run::Shards(shards))
            }
        };
        let ownership = Self {
            process,
            shards,
            leases,
        };
        (ownership, Election(run))
    }

    /// The fence of process-wide writes (the hub client's default).
    pub fn fence(&self) -> Fence {
        self.process.clone()
    }

    /// The process's claim: whether this replica writes at all (`fleetnet_leader`).
    pub fn claim(&self) -> Claim {
        Claim::of(self.process.clone())
    }

    /// Whether this replica runs `member` now (always, unless sharded).
    pub fn owns(&self, member: &str) -> bool {
        self.shards.as_ref().is_none_or(|s| s.owns(member))
    }

    /// The fence of `member`'s writes: its shard's when sharded, else the process's.
    pub fn fence_of(&self, member: &str) -> Fence {
        match &self.shards {
            Some(shards) => shards.fence(member),
            None => self.process.clone(),
        }
    }

    /// The claim on `member`'s writes, on the hold its fence reads.
    pub fn claim_of(&self, member: &str) -> Claim {
        Claim::of(self.fence_of(member))
    }

    /// Whether this replica writes for `member` now: its fence holds.
    pub fn may_write(&self, member: &str) -> bool {
        self.fence_of(member).holds_now()
    }

    /// The Lease whose holder writes for `member` (`<namespace>/<name>`: the leader Lease, or
    /// the member's shard's), the same whichever replica holds it; `None` without an election.
    pub fn lease_of(&self, member: &str) -> Option<String> {
        let (namespace, name, shards) = self.leases.as_ref()?;
        Some(match shards {
            Some(count) => format!(
                "{namespace}/{}",
                shard::shard_lease(name, placement::shard_of(member, *count))
            ),
            None => format!("{namespace}/{name}"),
        })
    }

    /// The shards, when members are sharded.
    pub fn shards(&self) -> Option<&Arc<Shards>> {
        self.shards.as_ref()
    }
}

impl Election {
    /// Whether members are sharded (the control client is sized for it).
    pub fn sharded(&self) -> bool {
        matches!(self.0, Run::Shards(_))
    }

    /// Runs the election on `api` until `shutdown`, then gives up what it holds (fence first);
    /// returns at once without one.
    pub async fn run(self, api: Api<Lease>, shutdown: CancellationToken) {
        match self.0 {
            Run::Nothing => {}
            Run::Leader(cfg, hold) => leader::run(api, cfg, hold, shutdown).await,
            Run::Shards(shards) => shard::run(api, shards, shutdown).await,
        }
    }
}
