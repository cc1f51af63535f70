//! Members sharded across replicas, with Kubernetes Leases as the only coordination:
//!
//! - each replica announces itself with a Lease of its own (`<prefix>-replica-<identity>`,
//!   label [`REPLICA_LABEL`]), renewed every retry period and deleted on shutdown;
//! - the live replicas are the announcements whose record changed within a lease duration, as
//!   this replica observed it (its own clock only, as for leader election);
//! - each member's owner is chosen by rendezvous hashing over the live replicas, so a replica
//!   coming or going moves only the members it wins or held;
//! - ownership itself is a Lease per member (`<prefix>-member-<member>`, holder = replica):
//!   a replica engages a member only while it holds that lease, and every write for the member
//!   is fenced by that hold's deadline. A member no longer assigned here is released at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::leader::{LeaseConfig, Observed, Record, release, try_acquire_or_renew};
use crate::client::{Fence, Hold};

/// Label of the replicas' announcement leases; its value is the lease name prefix.
pub const REPLICA_LABEL: &str = "fleetnet.azure.com/replica-of";

fn score(member: &str, replica: &str) -> u64 {
    let digest = Sha256::digest(format!("{member}\u{0}{replica}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The owner of every member, from who holds what now: each live replica keeps what it holds
/// up to its share (ceil(members / replicas), its best-scored members first); every other
/// member, in name order, goes to the replica that scores it highest among those below their
/// share (rendezvous hashing with bounded loads). A replica coming takes only its share from
/// the others; a replica going leaves only its own members to move; nobody carries more than
/// its share. Every replica computes the same answer from the same leases.
pub fn assign<'a>(
    members: &BTreeSet<String>,
    replicas: &BTreeSet<&'a str>,
    holders: &BTreeMap<String, String>,
) -> BTreeMap<String, &'a str> {
    let mut owners = BTreeMap::new();
    if replicas.is_empty() {
        return owners;
    }
    let cap = members.len().div_ceil(replicas.len());
    let mut load: BTreeMap<&'a str, usize> = BTreeMap::new();
    for replica in replicas {
        let mut kept: Vec<&String> = members
            .iter()
            .filter(|m| holders.get(*m).map(String::as_str) == Some(*replica))
            .collect();
        kept.sort_by_key(|m| std::cmp::Reverse((score(m, replica), (*m).clone())));
        for member in kept.into_iter().take(cap) {
            owners.insert(member.clone(), *replica);
        }
        load.insert(*replica, owners.values().filter(|r| *r == replica).count());
    }
    for member in members {
        if owners.contains_key(member) {
            continue;
        }
        let best = replicas
            .iter()
            .filter(|r| load.get(*r).copied().unwrap_or(0) < cap)
            .max_by_key(|r| (score(member, r), **r));
        if let Some(owner) = best {
            *load.entry(owner).or_insert(0) += 1;
            owners.insert(member.clone(), *owner);
        }
    }
    owners
}

/// A lease name part from any string: lower-case alphanumerics and '-', at most 40 characters,
/// plus a hash of the whole so two identities never collide.
fn name_part(s: &str) -> String {
    let clean: String = s
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let digest = Sha256::digest(s.as_bytes());
    format!(
        "{}-{}",
        clean.trim_matches('-'),
        super::registry::hex(&digest[..4])
    )
}

struct MemberLease {
    observed: Option<Observed>,
    hold: watch::Sender<Hold>,
    /// The holder this replica last saw (for `/members`).
    holder: String,
}

impl MemberLease {
    /// This replica holds the lease, or held it and has not released it yet.
    fn held(&self) -> bool {
        !matches!(*self.hold.borrow(), Hold::Never)
    }
}

#[derive(Default)]
struct State {
    /// Members the kubeconfig directory declares.
    wanted: BTreeSet<String>,
    members: BTreeMap<String, MemberLease>,
    /// Announcement lease name → what was seen of it.
    replicas: BTreeMap<String, Observed>,
}

/// Which members this replica owns; shared by the shard loop and the fleet loop.
pub struct Shards {
    /// Where the leases live, their timing, and (`name`) the prefix of every lease name.
    cfg: LeaseConfig,
    state: Mutex<State>,
    /// Bumped whenever the set of members held here changes.
    changed: watch::Sender<u64>,
}

impl Shards {
    pub fn new(cfg: LeaseConfig) -> Self {
        Self {
            cfg,
            state: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The members the directory declares now.
    pub fn set_wanted(&self, members: impl IntoIterator<Item = String>) {
        self.lock().wanted = members.into_iter().collect();
    }

    /// Whether this replica holds `member`'s lease now.
    pub fn owns(&self, member: &str) -> bool {
        self.lock()
            .members
            .get(member)
            .is_some_and(|m| m.hold.borrow().valid_at(Instant::now()))
    }

    /// The write fence of `member`: open only while this replica holds its lease.
    pub fn fence(&self, member: &str) -> Fence {
        Fence::new(entry(&mut self.lock(), member).hold.subscribe())
    }

    /// Every declared member's holder as last seen (empty: none).
    pub fn owners(&self) -> BTreeMap<String, String> {
        let state = self.lock();
        state
            .members
            .iter()
            .filter(|(name, _)| state.wanted.contains(*name))
            .map(|(name, m)| (name.clone(), m.holder.clone()))
            .collect()
    }

    /// Notified when the members held here change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    fn lease_config(&self, name: String) -> LeaseConfig {
        LeaseConfig {
            name,
            ..self.cfg.clone()
        }
    }

    fn announcement(&self) -> String {
        format!(
            "{}-replica-{}",
            self.cfg.name,
            name_part(&self.cfg.identity)
        )
    }

    fn member_lease(&self, member: &str) -> String {
        format!("{}-member-{member}", self.cfg.name)
    }
}

/// Runs the shard loop until `shutdown`, then releases every lease it holds and withdraws
/// its announcement.
pub async fn run(api: Api<Lease>, shards: std::sync::Arc<Shards>, shutdown: CancellationToken) {
    let cfg = shards.cfg.clone();
    loop {
        let round = async {
            announce(&api, &shards).await;
            let live = live_replicas(&api, &shards).await;
            balance(&api, &shards, &live).await;
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            () = round => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(cfg.retry_period) => {}
        }
    }
    let held: Vec<String> = {
        let state = shards.lock();
        state
            .members
            .iter()
            .filter(|(_, m)| m.held())
            .map(|(name, _)| name.clone())
            .collect()
    };
    for member in held {
        set_hold(&shards, &member, Hold::Never, "");
        let lease = shards.lease_config(shards.member_lease(&member));
        let _ = tokio::time::timeout(cfg.renew_deadline, release(&api, &lease)).await;
    }
    let _ = tokio::time::timeout(
        cfg.renew_deadline,
        api.delete(&shards.announcement(), &DeleteParams::default()),
    )
    .await;
}

/// Creates or renews this replica's announcement.
async fn announce(api: &Api<Lease>, shards: &Shards) {
    let name = shards.announcement();
    let now = MicroTime(jiff::Timestamp::now());
    let spec = LeaseSpec {
        holder_identity: Some(shards.cfg.identity.clone()),
        lease_duration_seconds: Some(
            i32::try_from(shards.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX),
        ),
        renew_time: Some(now),
        ..Default::default()
    };
    let result = match api.get_opt(&name).await {
        Ok(Some(mut lease)) => {
            lease.spec = Some(spec);
            api.replace(&name, &PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        Ok(None) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(shards.cfg.namespace.clone()),
                    labels: Some([(REPLICA_LABEL.to_string(), shards.cfg.name.clone())].into()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::warn!(lease = %name, error = %e, "replica announcement failed");
    }
}

/// The identities of the replicas seen alive (this one always included).
async fn live_replicas(api: &Api<Lease>, shards: &Shards) -> BTreeSet<String> {
    let selector = format!("{REPLICA_LABEL}={}", shards.cfg.name);
    let listed = api.list(&ListParams::default().labels(&selector)).await;
    let now = Instant::now();
    let mut live: BTreeSet<String> = [shards.cfg.identity.clone()].into();
    let mut state = shards.lock();
    match listed {
        Ok(list) => {
            let mut seen = BTreeMap::new();
            for lease in list.items {
                let (Some(name), Some(spec)) = (lease.metadata.name, lease.spec) else {
                    continue;
                };
                let record = Record::of(&spec);
                let observed = match state.replicas.remove(&name) {
                    Some(o) if o.record == record => o,
                    _ => Observed { record, at: now },
                };
                seen.insert(name, observed);
            }
            state.replicas = seen;
        }
        Err(e) => {
            tracing::warn!(error = %e, "listing replica announcements failed; using the last view")
        }
    }
    for observed in state.replicas.values() {
        let duration =
            Duration::from_secs(u64::try_from(observed.record.duration_secs).unwrap_or(0));
        let holder = &observed.record.holder;
        if !holder.is_empty() && now < observed.at + duration {
            live.insert(holder.clone());
        }
    }
    live
}

/// Acquires or renews the leases of the members assigned here; releases the others.
async fn balance(api: &Api<Lease>, shards: &Shards, live: &BTreeSet<String>) {
    let me = shards.cfg.identity.clone();
    let (wanted, known): (BTreeSet<String>, Vec<String>) = {
        let state = shards.lock();
        (
            state.wanted.clone(),
            state.members.keys().cloned().collect(),
        )
    };
    let before: BTreeSet<String> = wanted.iter().filter(|m| shards.owns(m)).cloned().collect();
    let holders: BTreeMap<String, String> = {
        let state = shards.lock();
        state
            .members
            .iter()
            .filter_map(|(m, l)| Some((m.clone(), l.observed.as_ref()?.record.holder.clone())))
            .collect()
    };
    let owners = assign(
        &wanted,
        &live.iter().map(String::as_str).collect(),
        &holders,
    );
    for member in wanted.iter() {
        let lease = shards.lease_config(shards.member_lease(member));
        if owners.get(member).copied() == Some(me.as_str()) {
            hold_assigned(api, shards, member, &lease).await;
        } else {
            leave_or_watch(api, shards, member, &lease).await;
        }
    }
    // Members that left the directory: released if held, forgotten.
    for member in known.into_iter().filter(|m| !wanted.contains(m)) {
        let held = shards
            .lock()
            .members
            .remove(&member)
            .is_some_and(|m| m.held());
        if held {
            let lease = shards.lease_config(shards.member_lease(&member));
            let _ = release(api, &lease).await;
        }
    }
    let after: BTreeSet<String> = wanted.iter().filter(|m| shards.owns(m)).cloned().collect();
    if before != after {
        shards.changed.send_modify(|n| *n += 1);
    }
}

/// A member assigned here: acquire or renew its Lease within the renew deadline; the hold
/// (and so the member's fence) follows the answer.
async fn hold_assigned(api: &Api<Lease>, shards: &Shards, member: &str, lease: &LeaseConfig) {
    let me = shards.cfg.identity.as_str();
    let start = Instant::now();
    let mut observed = shards
        .lock()
        .members
        .get_mut(member)
        .and_then(|m| m.observed.take());
    let attempt = tokio::time::timeout(
        shards.cfg.renew_deadline,
        try_acquire_or_renew(api, lease, &mut observed),
    )
    .await;
    let holder = observed
        .as_ref()
        .map(|o| o.record.holder.clone())
        .unwrap_or_default();
    match attempt {
        Ok(Ok(true)) => set_hold(
            shards,
            member,
            Hold::Until(start + shards.cfg.renew_deadline),
            me,
        ),
        Ok(Ok(false)) => set_hold(shards, member, Hold::Never, &holder),
        // Keep the hold until its own deadline: the fence closes by the clock.
        Ok(Err(e)) => tracing::warn!(member = %member, error = %e, "member lease update failed"),
        Err(_) => tracing::warn!(member = %member, "member lease update did not answer in time"),
    }
    if let Some(m) = shards.lock().members.get_mut(member) {
        m.observed = observed;
    }
}

/// A member assigned elsewhere: released at once if held here; otherwise its Lease is only
/// looked at, to show the owner and so that its age is already observed should the member
/// come here when its owner dies.
async fn leave_or_watch(api: &Api<Lease>, shards: &Shards, member: &str, lease: &LeaseConfig) {
    let held = shards
        .lock()
        .members
        .get(member)
        .is_some_and(MemberLease::held);
    if held {
        // Another replica wins this member now: stop writing at once, then hand over.
        set_hold(shards, member, Hold::Never, "");
        tracing::info!(member = %member, "member assigned to another replica: releasing it");
        if let Err(e) = release(api, lease).await {
            tracing::warn!(member = %member, error = %e, "could not release the member lease");
        }
        return;
    }
    let Ok(Some(l)) = api.get_opt(&shards.member_lease(member)).await else {
        return;
    };
    let record = Record::of(&l.spec.unwrap_or_default());
    set_hold(shards, member, Hold::Never, &record.holder.clone());
    if let Some(m) = shards.lock().members.get_mut(member)
        && !m.observed.as_ref().is_some_and(|o| o.record == record)
    {
        m.observed = Some(Observed {
            record,
            at: Instant::now(),
        });
    }
}

fn set_hold(shards: &Shards, member: &str, hold: Hold, holder: &str) {
    let mut state = shards.lock();
    let lease = entry(&mut state, member);
    lease.hold.send_replace(hold);
    lease.holder = holder.to_string();
}

/// What this replica keeps about `member`'s lease, created not held.
fn entry<'a>(state: &'a mut State, member: &str) -> &'a mut MemberLease {
    state
        .members
        .entry(member.to_string())
        .or_insert_with(|| MemberLease {
            observed: None,
            hold: watch::channel(Hold::Never).0,
            holder: String::new(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(
        members: &BTreeSet<String>,
        replicas: &[&str],
        holders: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        assign(members, &replicas.iter().copied().collect(), holders)
            .into_iter()
            .map(|(m, r)| (m, r.to_string()))
            .collect()
    }

    #[test]
    fn shares_are_bounded_and_few_members_move_when_replicas_come_and_go() {
        let none = BTreeMap::new();
        for n in [6usize, 7, 20, 60] {
            let members: BTreeSet<String> = (0..n).map(|i| format!("member-{i}")).collect();
            for seed in 0..40u32 {
                let ids: Vec<String> = ["a", "b", "c"]
                    .iter()
                    .map(|p| {
                        format!(
                            "pod-{p}_{:08x}",
                            seed.wrapping_mul(2654435761) ^ u32::from(p.as_bytes()[0])
                        )
                    })
                    .collect();
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let two = owners(&members, &ids[..2], &none);
                let three = owners(&members, &ids, &two);
                assert_eq!(three.len(), n, "every member owned");
                for r in &ids {
                    let load = three.values().filter(|o| o == r).count();
                    assert!(load <= n.div_ceil(3), "{r} carries {load} of {n}");
                }
                let moved = members.iter().filter(|m| two[*m] != three[*m]).count();
                assert!(
                    moved <= n.div_ceil(3) + 1,
                    "{moved} of {n} moved when a third came"
                );
                assert!(
                    members
                        .iter()
                        .filter(|m| two[*m] != three[*m])
                        .all(|m| three[m] == ids[2]),
                    "only the newcomer gains"
                );
                // The third goes: only its members move.
                let back = owners(&members, &ids[..2], &three);
                for m in &members {
                    if three[m] != ids[2] {
                        assert_eq!(back[m], three[m], "{m} moved needlessly");
                    }
                }
                assert_eq!(owners(&members, &ids, &three), three, "stable");
            }
        }
        assert!(assign(&BTreeSet::from(["m".to_string()]), &BTreeSet::new(), &none).is_empty());
    }

    #[test]
    fn lease_name_parts_are_valid_and_distinct() {
        let a = name_part("Pod_A.example/1_deadbeef");
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{a}"
        );
        assert_ne!(name_part("a_b"), name_part("a-b"));
        assert!(name_part(&"x".repeat(200)).len() <= 49);
    }
}
