//! Members sharded across replicas on a fixed set of shard Leases, so that coordination costs
//! the same for 6 members or 5,000 (as Argo CD shards clusters):
//!
//! - members map onto `count` shards by a stable hash of their name ([`shard_of`]);
//! - each replica announces itself with a Lease of its own (`<prefix>-replica-<identity>`,
//!   label [`REPLICA_LABEL`]), renewed every retry period and deleted on shutdown;
//! - each round a replica lists the leases of its prefix once (label [`LEASE_LABEL`]:
//!   announcements and shards), sees the replicas whose announcement changed within a lease
//!   duration as live (its own clock only, as for leader election), and assigns the shards that
//!   have members over them ([`assign`]: rendezvous hashing, loads bounded in members);
//! - it then writes, concurrently and each within what is left of its hold, only the shard
//!   Leases (`<prefix>-shard-<n>`) it renews, takes or gives up: one request each, carrying
//!   the resourceVersion it last saw, so two replicas never both win;
//! - a member is engaged only while its shard is held here, and every write for it is fenced
//!   by that hold's deadline; a shard is fenced before its Lease is given up.
//!
//! Requests per retry period: 2 per replica (list, announcement) + 1 per held shard.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fence::{Fence, Hold};
use super::lease::{self, LeaseConfig, Observed, Record, Step, Written, name_part};
use super::placement::{assign, shard_of};

/// Label of the replicas' announcement leases; its value is the lease name prefix.
pub const REPLICA_LABEL: &str = "fleetnet.azure.com/replica-of";
/// Label of every lease of the sharding (announcements and shards); value: the prefix.
pub const LEASE_LABEL: &str = "fleetnet.azure.com/lease-of";
/// Shards when `--shards` is not given: 24 renewals per retry period in all, whatever the
/// fleet's size; divisible by 2, 3, 4, 6 and 8 replicas, so that their shares can be even.
pub const DEFAULT_SHARDS: u16 = 24;

/// The Lease name of shard `shard` under `prefix`.
pub fn shard_lease(prefix: &str, shard: u16) -> String {
    format!("{prefix}-shard-{shard}")
}

/// What this replica keeps about one shard's Lease.
struct ShardLease {
    /// The record as last seen (listed or written), and since when.
    observed: Option<Observed>,
    /// The object last seen: its resourceVersion makes the next write conditional.
    last: Option<Lease>,
    hold: watch::Sender<Hold>,
}

impl ShardLease {
    fn new() -> Self {
        Self {
            observed: None,
            last: None,
            hold: watch::channel(Hold::Never).0,
        }
    }

    fn held_at(&self, now: Instant) -> bool {
        self.hold.borrow().valid_at(now)
    }

    /// This replica holds it, or held it and has not given it up yet.
    fn claimed(&self) -> bool {
        !matches!(*self.hold.borrow(), Hold::Never)
    }

    fn holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .map(|o| o.record.holder.as_str())
            .filter(|h| !h.is_empty())
    }

    /// What was seen of the lease (`None`: it does not exist), at `now`.
    fn see(&mut self, lease: Option<Lease>, now: Instant) {
        self.observed = lease.as_ref().map(|l| {
            let record = Record::of(&l.spec.clone().unwrap_or_default());
            Observed::update(self.observed.take(), record, now)
        });
        self.last = lease;
    }
}

struct State {
    /// Members the kubeconfig directory declares.
    wanted: BTreeSet<String>,
    shards: Vec<ShardLease>,
    /// Announcement lease name → what was seen of it.
    replicas: BTreeMap<String, Observed>,
    /// This replica's announcement as last written or listed.
    announcement: Option<Lease>,
    /// Shard leases of this prefix beyond `shards` (left by an earlier `--shards`) → what was
    /// seen of them.
    strays: BTreeMap<String, Observed>,
}

/// Which members this replica owns; shared by the shard loop and the fleet loop.
pub struct Shards {
    /// Where the leases live, their timing, and (`name`) the prefix of every lease name.
    cfg: LeaseConfig,
    state: Mutex<State>,
    /// Bumped whenever the set of shards held here changes.
    changed: watch::Sender<u64>,
}

impl Shards {
    /// `count` shards (at least 1).
    pub fn new(cfg: LeaseConfig, count: u16) -> Self {
        let shards = (0..count.max(1)).map(|_| ShardLease::new()).collect();
        Self {
            cfg,
            state: Mutex::new(State {
                wanted: BTreeSet::new(),
                shards,
                replicas: BTreeMap::new(),
                announcement: None,
                strays: BTreeMap::new(),
            }),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    fn count(&self) -> u16 {
        u16::try_from(self.lock().shards.len()).unwrap_or(u16::MAX)
    }

    /// The members the directory declares now.
    pub fn set_wanted(&self, members: impl IntoIterator<Item = String>) {
        self.lock().wanted = members.into_iter().collect();
    }

    /// Whether this replica holds `member`'s shard now.
    pub fn owns(&self, member: &str) -> bool {
        let shard = usize::from(shard_of(member, self.count()));
        self.lock().shards[shard].held_at(Instant::now())
    }

    /// The write fence of `member`: open only while this replica holds its shard.
    pub fn fence(&self, member: &str) -> Fence {
        let shard = usize::from(shard_of(member, self.count()));
        Fence::new(self.lock().shards[shard].hold.subscribe())
    }

    /// Every declared member's holder (its shard's) as last seen (empty: none).
    pub fn owners(&self) -> BTreeMap<String, String> {
        let count = self.count();
        let state = self.lock();
        state
            .wanted
            .iter()
            .map(|m| {
                let shard = &state.shards[usize::from(shard_of(m, count))];
                (m.clone(), shard.holder().unwrap_or_default().to_string())
            })
            .collect()
    }

    /// Notified when the shards held here change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    fn announcement_name(&self) -> String {
        format!(
            "{}-replica-{}",
            self.cfg.name,
            name_part(&self.cfg.identity)
        )
    }

    fn labels(&self, announcement: bool) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(LEASE_LABEL.to_string(), self.cfg.name.clone())]);
        if announcement {
            labels.insert(REPLICA_LABEL.to_string(), self.cfg.name.clone());
        }
        labels
    }

    /// The earliest expiry, as seen from here, of a lease another replica holds (a shard or
    /// an announcement) that has not expired yet.
    fn next_foreign_expiry(&self) -> Option<Instant> {
        let now = Instant::now();
        let state = self.lock();
        let own = self.announcement_name();
        let shards = state.shards.iter().filter_map(|s| s.observed.as_ref());
        let announcements = state
            .replicas
            .iter()
            .filter(|(name, _)| **name != own)
            .map(|(_, o)| o);
        shards
            .chain(announcements)
            .filter(|o| o.record.holder != self.cfg.identity)
            .filter_map(Observed::expires_at)
            .filter(|at| *at > now)
            .min()
    }

    fn held_shards(&self) -> BTreeSet<usize> {
        let now = Instant::now();
        let state = self.lock();
        (0..state.shards.len())
            .filter(|s| state.shards[*s].held_at(now))
            .collect()
    }
}

/// Past a foreign lease's expiry, how long before the round that takes it over.
const EXPIRY_MARGIN: Duration = Duration::from_millis(50);

/// Rounds a replica only announces itself and observes before it takes shards.
const OBSERVING_ROUNDS: u32 = 1;

/// Runs the shard loop until `shutdown`, then gives up every shard it holds (fence first) and
/// withdraws its announcement.
pub async fn run(api: Api<Lease>, shards: std::sync::Arc<Shards>, shutdown: CancellationToken) {
    let cfg = shards.cfg.clone();
    // The first round only announces and looks: replicas started together see each other
    // before anyone takes a shard, instead of one taking all and shedding most a round later
    // (a storm of engagements started and stopped at once).
    let mut looking = OBSERVING_ROUNDS;
    loop {
        let before = shards.held_shards();
        tokio::select! {
            _ = shutdown.cancelled() => break,
            () = round(&api, &shards, looking == 0) => {}
        }
        looking = looking.saturating_sub(1);
        if shards.held_shards() != before {
            shards.changed.send_modify(|n| *n += 1);
        }
        // A lease of another replica that runs out before the next round is looked at the
        // moment it does: its members are taken over a retry period sooner.
        let next = Instant::now() + cfg.retry_period;
        let wake = shards
            .next_foreign_expiry()
            .map_or(next, |at| next.min(at.max(Instant::now()) + EXPIRY_MARGIN));
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
    let claimed: Vec<usize> = {
        let state = shards.lock();
        let claimed = (0..state.shards.len()).filter(|s| state.shards[*s].claimed());
        claimed.collect()
    };
    let releases = claimed
        .into_iter()
        .map(|s| write_shard(&api, &shards, s, Step::Release));
    let _ = tokio::time::timeout(cfg.renew_deadline, join_all(releases)).await;
    let (name, params) = (shards.announcement_name(), DeleteParams::default());
    let _ = tokio::time::timeout(cfg.renew_deadline, api.delete(&name, &params)).await;
}

/// One round: the announcement and the renewals of held shards at once; then one list, and
/// from it the shards to take and to give up. The list comes after this replica's own writes,
/// so what it shows of them is never older than what they answered.
async fn round(api: &Api<Lease>, shards: &Shards, may_take: bool) {
    let cfg = &shards.cfg;
    let renewals: Vec<usize> = {
        let state = shards.lock();
        let mine = |s: &ShardLease| s.claimed() && s.holder() == Some(cfg.identity.as_str());
        (0..state.shards.len())
            .filter(|s| mine(&state.shards[*s]))
            .collect()
    };
    let renew = renewals
        .iter()
        .map(|s| write_shard(api, shards, *s, Step::Renew));
    tokio::join!(announce(api, shards), join_all(renew));
    let selector = format!("{LEASE_LABEL}={}", cfg.name);
    let params = ListParams::default().labels(&selector);
    let listed = match tokio::time::timeout(cfg.renew_deadline, api.list(&params)).await {
        Ok(Ok(list)) => list.items,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "listing the shard leases failed; renewing only");
            return;
        }
        Err(_) => {
            tracing::warn!("listing the shard leases did not answer in time; renewing only");
            return;
        }
    };
    // What was renewed above is not written twice; a shard the list shows as ours that was
    // not renewed (its fence closed on a lost answer) is renewed now, taking it back.
    let Plan { steps, abandoned } = plan(shards, listed);
    let writes = steps
        .into_iter()
        .filter(|(_, step)| may_take || *step != Step::Acquire)
        .filter(|(s, step)| *step != Step::Wait && !(*step == Step::Renew && renewals.contains(s)))
        .map(|(s, step)| write_shard(api, shards, s, step));
    let collections = abandoned
        .into_iter()
        .map(|(name, rv)| lease::delete_abandoned(api, name, rv));
    tokio::join!(join_all(writes), join_all(collections));
}

/// What a round does after its list.
struct Plan {
    /// Each shard's next step.
    steps: Vec<(usize, Step)>,
    /// Leases nobody renews any more (announcements of replicas that crashed, shard leases of
    /// an earlier `--shards`): name and the resourceVersion a delete is conditional on.
    abandoned: Vec<(String, String)>,
}

/// Records what was listed, decides each shard's next step, and finds the abandoned leases.
fn plan(shards: &Shards, listed: Vec<Lease>) -> Plan {
    let cfg = &shards.cfg;
    let now = Instant::now();
    let count = shards.count();
    let shard_names: BTreeMap<String, usize> = (0..count)
        .map(|s| (shard_lease(&cfg.name, s), usize::from(s)))
        .collect();
    let own_announcement = shards.announcement_name();
    let mut state = shards.lock();
    let mut found: Vec<Option<Lease>> = vec![None; state.shards.len()];
    let mut replicas = BTreeMap::new();
    let mut strays = BTreeMap::new();
    let mut abandoned = Vec::new();
    let stray_prefix = format!("{}-shard-", cfg.name);
    for l in listed {
        let Some(name) = l.metadata.name.clone() else {
            continue;
        };
        let record = Record::of(&l.spec.clone().unwrap_or_default());
        let seen = if let Some(&s) = shard_names.get(&name) {
            found[s] = Some(l);
            continue;
        } else if l
            .metadata
            .labels
            .as_ref()
            .is_some_and(|m| m.get(REPLICA_LABEL) == Some(&cfg.name))
        {
            let seen = Observed::update(state.replicas.remove(&name), record, now);
            replicas.insert(name.clone(), seen.clone());
            if name == own_announcement {
                state.announcement = Some(l);
                continue;
            }
            seen
        } else if name.starts_with(&stray_prefix) {
            let seen = Observed::update(state.strays.remove(&name), record, now);
            strays.insert(name.clone(), seen.clone());
            seen
        } else {
            continue;
        };
        if seen.abandoned(now, cfg.lease_duration) {
            abandoned.push((name, l.metadata.resource_version.unwrap_or_default()));
        }
    }
    state.replicas = replicas;
    state.strays = strays;
    for (shard, lease) in state.shards.iter_mut().zip(found) {
        shard.see(lease, now);
    }
    let mut live: BTreeSet<&str> = state
        .replicas
        .values()
        .filter_map(|o| o.live_holder(now))
        .collect();
    live.insert(cfg.identity.as_str());
    let mut weights = vec![0usize; state.shards.len()];
    for m in &state.wanted {
        weights[usize::from(shard_of(m, count))] += 1;
    }
    let holders: Vec<Option<&str>> = state.shards.iter().map(ShardLease::holder).collect();
    let owners = assign(&weights, &live, &holders);
    let steps = owners
        .iter()
        .enumerate()
        .map(|(s, owner)| {
            let want = *owner == Some(cfg.identity.as_str());
            let shard = &state.shards[s];
            (
                s,
                lease::step(shard.observed.as_ref(), &cfg.identity, want, now),
            )
        })
        .collect();
    Plan { steps, abandoned }
}

/// Performs `step` on shard `s` within what is left of its hold, and moves the hold with the
/// answer. Giving up closes the fence first.
async fn write_shard(api: &Api<Lease>, shards: &Shards, s: usize, step: Step) {
    let cfg = &shards.cfg;
    let name = shard_lease(&cfg.name, u16::try_from(s).unwrap_or(0));
    let start = Instant::now();
    let (current, budget) = {
        let state = shards.lock();
        let shard = &state.shards[s];
        if step == Step::Release {
            shard.hold.send_replace(Hold::Never);
            tracing::info!(shard = s, "shard assigned to another replica: giving it up");
        }
        let budget = lease::attempt_budget(*shard.hold.borrow(), start, cfg);
        (shard.last.clone(), budget)
    };
    let labels = shards.labels(false);
    let write = lease::write(api, cfg, &name, &labels, step, current.as_ref());
    let answer = tokio::time::timeout(budget, write).await;
    let mut state = shards.lock();
    let shard = &mut state.shards[s];
    match answer {
        Ok(Ok(Written::Done(l))) => {
            shard.see(Some(*l), Instant::now());
            if step != Step::Release {
                if !shard.claimed() {
                    tracing::info!(shard = s, "shard taken");
                }
                shard.hold.send_replace(lease::hold_after(start, cfg));
            }
        }
        // Somebody else wrote it: not ours, whatever we thought.
        Ok(Ok(Written::Lost)) => {
            if shard.claimed() {
                tracing::warn!(shard = s, "shard lease written by another replica: fenced");
            }
            shard.hold.send_replace(Hold::Never);
            shard.last = None;
        }
        Ok(Ok(Written::Nothing)) => {}
        // The hold stays until its own deadline: the fence closes by the clock.
        Ok(Err(e)) => tracing::warn!(lease = %name, error = %e, "shard lease write failed"),
        Err(_) => {
            tracing::warn!(lease = %name, budget = ?budget, "shard lease write did not answer in time")
        }
    }
}

/// Creates or renews this replica's announcement (one request).
async fn announce(api: &Api<Lease>, shards: &Shards) {
    let cfg = &shards.cfg;
    let name = shards.announcement_name();
    let current = shards.lock().announcement.clone();
    let step = if current.is_some() {
        Step::Renew
    } else {
        Step::Acquire
    };
    let labels = shards.labels(true);
    let write = lease::write(api, cfg, &name, &labels, step, current.as_ref());
    let answer = tokio::time::timeout(cfg.retry_period.max(cfg.renew_deadline / 2), write).await;
    let mut state = shards.lock();
    match answer {
        Ok(Ok(Written::Done(l))) => state.announcement = Some(*l),
        // Stale or gone: the next list shows it as it is (or not at all: then it is created).
        Ok(Ok(_)) => state.announcement = None,
        Ok(Err(e)) => tracing::warn!(lease = %name, error = %e, "replica announcement failed"),
        Err(_) => tracing::warn!(lease = %name, "replica announcement did not answer in time"),
    }
}

#[cfg(test)]
#[path = "shard/tests.rs"]
mod tests;
