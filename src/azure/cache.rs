//! Per-resource-group cache of listed public IPs: TTL, single-flight, rate-limited miss
//! refresh, and a short hold-down of errors (so a failing ARM is not asked again by every
//! reconcile of every member).
//!
//! Bounded: a group unused for a TTL is evicted (not kept and refreshed), at most `max_groups`
//! groups are kept (the least recently used goes first), and a group's index holds at most
//! `max_ips` public IPs (its LIST stops there and says so).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::http::ARM_TURN;
use super::stats::AzureStats;
use crate::export::{LookupError, PublicIp};
use crate::policy::Turn;

/// Public IPs of one resource group, keyed by normalised address.
pub(crate) type IpIndex = HashMap<String, PublicIp>;

/// One resource group's public IPs as listed, at most the cap asked for.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    pub by_ip: IpIndex,
    /// The group holds more public IPs than the cap: the LIST stopped at it.
    pub truncated: bool,
}

/// Lists one resource group, keeping at most `max_ips` public IPs. The production one calls
/// ARM; unit tests fake it.
#[async_trait::async_trait]
pub(crate) trait GroupLister: Send + Sync + 'static {
    async fn list(&self, resource_group: &str, max_ips: usize) -> Result<Listed, LookupError>;
}

/// The bounds of one cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// How long a LIST is served, and how long an unused group is kept.
    pub ttl: Duration,
    /// A miss re-lists a group at most once per this.
    pub miss_refresh_interval: Duration,
    /// Groups kept at once; the least recently used is evicted to make room.
    pub max_groups: usize,
    /// Public IPs kept per group.
    pub max_ips: usize,
}

/// `"10.0.0.1"`, `"2001:db8::1"` in canonical form, so ARM's and Kubernetes' spellings match.
pub(crate) fn normalize_ip(ip: &str) -> String {
    let ip = ip.trim();
    ip.parse::<IpAddr>()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| ip.to_owned())
}

#[derive(Debug)]
struct Snapshot {
    by_ip: IpIndex,
    fetched_at: Instant,
    /// Only the first `max_ips` of the group: a miss is not worth a re-list before the TTL.
    truncated: bool,
}

type Flight = Shared<BoxFuture<'static, Result<Arc<Snapshot>, LookupError>>>;

struct GroupState {
    /// Last lookup of this group: the least recently used group is evicted first.
    last_used: Instant,
    snapshot: Option<Arc<Snapshot>>,
    in_flight: Option<(u64, Flight)>,
    generation: u64,
    last_started: Option<Instant>,
    /// A failed LIST is answered to later lookups until this instant, without asking ARM.
    error_until: Option<(Instant, LookupError)>,
}

impl GroupState {
    fn new(now: Instant) -> Self {
        Self {
            last_used: now,
            snapshot: None,
            in_flight: None,
            generation: 0,
            last_started: None,
            error_until: None,
        }
    }

    /// Nothing in flight, unused for a TTL, its list stale and its error hold-down over:
    /// keeping it would only hold memory.
    fn expired(&self, now: Instant, ttl: Duration) -> bool {
        let stale = |at: Instant| now.saturating_duration_since(at) >= ttl;
        self.in_flight.is_none()
            && stale(self.last_used)
            && self.snapshot.as_ref().is_none_or(|s| stale(s.fetched_at))
            && self
                .error_until
                .as_ref()
                .is_none_or(|(until, _)| now >= *until)
    }

    /// Forgets the LIST of `generation` once it is over (a newer one may be in flight).
    fn landed(&mut self, generation: u64) {
        if self
            .in_flight
            .as_ref()
            .is_some_and(|(g, _)| *g == generation)
        {
            self.in_flight = None;
        }
    }
}

pub(crate) struct GroupCache<L> {
    lister: Arc<L>,
    ttl: Duration,
    miss_refresh_interval: Duration,
    max_groups: usize,
    max_ips: usize,
    stats: Arc<AzureStats>,
    groups: Mutex<Groups>,
}

/// The groups kept, and when expired ones were last swept out.
struct Groups {
    by_name: HashMap<String, Arc<Mutex<GroupState>>>,
    swept: Instant,
}

enum Plan {
    Answer(Option<PublicIp>),
    Fail(LookupError),
    Wait(u64, Flight),
}

impl<L: GroupLister> GroupCache<L> {
    pub(crate) fn new(lister: Arc<L>, bounds: Bounds, stats: Arc<AzureStats>) -> Self {
        Self {
            lister,
            ttl: bounds.ttl,
            miss_refresh_interval: bounds.miss_refresh_interval,
            // Zero would mean "keep nothing": at least the group being looked up is kept.
            max_groups: bounds.max_groups.max(1),
            max_ips: bounds.max_ips.max(1),
            stats,
            groups: Mutex::new(Groups {
                by_name: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    /// The group's state, marked used now; a new group makes room for itself first.
    fn group(&self, key: &str, now: Instant) -> Arc<Mutex<GroupState>> {
        let mut groups = self.groups.lock();
        // Expired groups go at most once per TTL, whether or not new ones come.
        if now.saturating_duration_since(groups.swept) >= self.ttl {
            groups.swept = now;
            self.evict(&mut groups.by_name, now, usize::MAX);
        }
        if let Some(group) = groups.by_name.get(key) {
            let group = Arc::clone(group);
            group.lock().last_used = now;
            return group;
        }
        self.evict(&mut groups.by_name, now, self.max_groups - 1);
        let group = Arc::new(Mutex::new(GroupState::new(now)));
        groups.by_name.insert(key.to_owned(), Arc::clone(&group));
        group
    }

    /// Drops the expired groups, then the least recently used ones until at most `keep` are
    /// left. A group evicted with a LIST in flight still answers that LIST's waiters.
    fn evict(
        &self,
        groups: &mut HashMap<String, Arc<Mutex<GroupState>>>,
        now: Instant,
        keep: usize,
    ) {
        let before = groups.len();
        groups.retain(|_, group| !group.lock().expired(now, self.ttl));
        if groups.len() > keep {
            let mut by_use: Vec<(Instant, String)> = groups
                .iter()
                .map(|(name, group)| (group.lock().last_used, name.clone()))
                .collect();
            by_use.sort();
            let excess = groups.len() - keep;
            for (_, name) in by_use.into_iter().take(excess) {
                groups.remove(&name);
            }
        }
        let evicted = u64::try_from(before - groups.len()).unwrap_or(u64::MAX);
        self.stats.groups_evicted.fetch_add(evicted, Relaxed);
    }

    /// Groups kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.groups.lock().by_name.len()
    }

    /// The public IP with address `ip` in `resource_group`, from cache when the cache can answer.
    /// A LIST this lookup starts waits for ARM tokens in `turn`'s line (its member's), so one
    /// member's many LISTs hold one place in the shared budget's line.
    pub(crate) async fn find(
        &self,
        resource_group: &str,
        ip: &str,
        turn: Option<&Turn>,
    ) -> Result<Option<PublicIp>, LookupError> {
        // Resource group names are case-insensitive in ARM.
        let group = self.group(&resource_group.to_ascii_lowercase(), Instant::now());
        let ip = normalize_ip(ip);
        let (generation, flight) = match self.plan(&group, resource_group, &ip, turn) {
            Plan::Answer(answer) => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                tracing::Span::current().record("azure.cache", "hit");
                return Ok(answer);
            }
            Plan::Fail(error) => return Err(error),
            Plan::Wait(generation, flight) => {
                self.stats.cache_misses.fetch_add(1, Relaxed);
                tracing::Span::current().record("azure.cache", "miss");
                (generation, flight)
            }
        };
        let result = flight.await;
        // Normally the LIST task has already cleared it; this covers a task that died.
        group.lock().landed(generation);
        result.map(|snapshot| snapshot.by_ip.get(&ip).cloned())
    }

    fn plan(
        &self,
        group: &Arc<Mutex<GroupState>>,
        resource_group: &str,
        ip: &str,
        turn: Option<&Turn>,
    ) -> Plan {
        let now = Instant::now();
        let mut state = group.lock();
        let fresh = state
            .snapshot
            .as_ref()
            .filter(|s| now.duration_since(s.fetched_at) < self.ttl)
            .cloned();
        // A hit never waits, not even behind a refresh in flight.
        if let Some(found) = fresh.as_ref().and_then(|s| s.by_ip.get(ip)) {
            return Plan::Answer(Some(found.clone()));
        }
        if let Some((generation, flight)) = &state.in_flight {
            return Plan::Wait(*generation, flight.clone());
        }
        if fresh.is_some() {
            // A miss (e.g. a new LoadBalancer whose IP is newer than the list): re-list, but
            // at most once per miss_refresh_interval per group.
            let recently = state
                .last_started
                .is_some_and(|t| now.duration_since(t) < self.miss_refresh_interval);
            // A list cut at the cap would most likely miss again: wait for the TTL.
            let truncated = fresh.as_ref().is_some_and(|s| s.truncated);
            if recently || truncated {
                return Plan::Answer(None);
            }
        } else if let Some((until, error)) = &state.error_until
            && now < *until
        {
            return Plan::Fail(error.clone());
        }
        self.start(group, &mut state, resource_group, now, turn)
    }

    fn start(
        &self,
        group: &Arc<Mutex<GroupState>>,
        state: &mut GroupState,
        resource_group: &str,
        now: Instant,
        turn: Option<&Turn>,
    ) -> Plan {
        state.generation += 1;
        let generation = state.generation;
        state.last_started = Some(now);
        self.stats.list_calls.fetch_add(1, Relaxed);

        let lister = Arc::clone(&self.lister);
        let task_group = Arc::clone(group);
        let rg = resource_group.to_owned();
        let hold = self.miss_refresh_interval;
        let (max_ips, stats) = (self.max_ips, Arc::clone(&self.stats));
        let turn = turn.cloned();
        // Spawned, so a reconcile that gives up waiting does not cancel the LIST for the rest.
        // The LIST is a child of the lookup that started it, whoever else waits for it.
        let span = tracing::info_span!(
            parent: &tracing::Span::current(),
            "azure.arm.list_public_ips",
            azure.resource_group = %rg,
        );
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                // The ARM client reads the turn from the task (the SDK carries no extensions).
                let result = match turn {
                    Some(turn) => ARM_TURN.scope(turn, lister.list(&rg, max_ips)).await,
                    None => lister.list(&rg, max_ips).await,
                };
                let done = Instant::now();
                let mut state = task_group.lock();
                let result = match result {
                    Ok(listed) => {
                        if listed.truncated {
                            stats.truncated_lists.fetch_add(1, Relaxed);
                            tracing::warn!(
                                azure.resource_group = ?rg,
                                kept = listed.by_ip.len(),
                                "resource group has more public IPs than are kept per group; lookups of the others find nothing until the next LIST"
                            );
                        }
                        let snapshot = Arc::new(Snapshot {
                            by_ip: listed.by_ip,
                            fetched_at: done,
                            truncated: listed.truncated,
                        });
                        state.snapshot = Some(Arc::clone(&snapshot));
                        state.error_until = None;
                        Ok(snapshot)
                    }
                    Err(error) => {
                        let hold = match &error {
                            LookupError::Throttled {
                                retry_after: Some(after),
                                ..
                            } => hold.max(*after),
                            _ => hold,
                        };
                        state.error_until = Some((done + hold, error.clone()));
                        Err(error)
                    }
                };
                state.landed(generation);
                result
            },
            span,
        ));
        let rg = resource_group.to_owned();
        let flight: Flight = async move {
            match task.await {
                Ok(result) => result,
                Err(join) => Err(LookupError::Failed {
                    resource_group: rg,
                    message: format!("the LIST task ended abnormally: {join}"),
                }),
            }
        }
        .boxed()
        .shared();
        state.in_flight = Some((generation, flight.clone()));
        Plan::Wait(generation, flight)
    }
}

#[cfg(test)]
mod tests;
