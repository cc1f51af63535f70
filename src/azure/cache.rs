//! Per-resource-group cache of listed public IPs: TTL, single-flight, rate-limited miss
//! refresh, and a short hold-down of errors (so a failing ARM is not asked again by every
//! reconcile of every member).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::fleet::AzureStats;
use crate::export::{LookupError, PublicIp};

/// Public IPs of one resource group, keyed by normalised address.
pub(crate) type IpIndex = HashMap<String, PublicIp>;

/// Lists one resource group. The production one calls ARM; unit tests fake it.
#[async_trait::async_trait]
pub(crate) trait GroupLister: Send + Sync + 'static {
    async fn list(&self, resource_group: &str) -> Result<IpIndex, LookupError>;
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
}

type Flight = Shared<BoxFuture<'static, Result<Arc<Snapshot>, LookupError>>>;

#[derive(Default)]
struct GroupState {
    snapshot: Option<Arc<Snapshot>>,
    in_flight: Option<(u64, Flight)>,
    generation: u64,
    last_started: Option<Instant>,
    /// A failed LIST is answered to later lookups until this instant, without asking ARM.
    error_until: Option<(Instant, LookupError)>,
}

impl GroupState {
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
    stats: Arc<AzureStats>,
    groups: Mutex<HashMap<String, Arc<Mutex<GroupState>>>>,
}

enum Plan {
    Answer(Option<PublicIp>),
    Fail(LookupError),
    Wait(u64, Flight),
}

impl<L: GroupLister> GroupCache<L> {
    pub(crate) fn new(
        lister: Arc<L>,
        ttl: Duration,
        miss_refresh_interval: Duration,
        stats: Arc<AzureStats>,
    ) -> Self {
        Self {
            lister,
            ttl,
            miss_refresh_interval,
            stats,
            groups: Mutex::new(HashMap::new()),
        }
    }

    fn group(&self, key: &str) -> Arc<Mutex<GroupState>> {
        self.groups
            .lock()
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// The public IP with address `ip` in `resource_group`, from cache when the cache can answer.
    pub(crate) async fn find(
        &self,
        resource_group: &str,
        ip: &str,
    ) -> Result<Option<PublicIp>, LookupError> {
        // Resource group names are case-insensitive in ARM.
        let group = self.group(&resource_group.to_ascii_lowercase());
        let ip = normalize_ip(ip);
        let (generation, flight) = match self.plan(&group, resource_group, &ip) {
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

    fn plan(&self, group: &Arc<Mutex<GroupState>>, resource_group: &str, ip: &str) -> Plan {
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
            if recently {
                return Plan::Answer(None);
            }
        } else if let Some((until, error)) = &state.error_until
            && now < *until
        {
            return Plan::Fail(error.clone());
        }
        self.start(group, &mut state, resource_group, now)
    }

    fn start(
        &self,
        group: &Arc<Mutex<GroupState>>,
        state: &mut GroupState,
        resource_group: &str,
        now: Instant,
    ) -> Plan {
        state.generation += 1;
        let generation = state.generation;
        state.last_started = Some(now);
        self.stats.list_calls.fetch_add(1, Relaxed);

        let lister = Arc::clone(&self.lister);
        let task_group = Arc::clone(group);
        let rg = resource_group.to_owned();
        let hold = self.miss_refresh_interval;
        // Spawned, so a reconcile that gives up waiting does not cancel the LIST for the rest.
        // The LIST is a child of the lookup that started it, whoever else waits for it.
        let span = tracing::info_span!(
            parent: &tracing::Span::current(),
            "azure.arm.list_public_ips",
            azure.resource_group = %rg,
        );
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                let result = lister.list(&rg).await;
                let done = Instant::now();
                let mut state = task_group.lock();
                let result = match result {
                    Ok(by_ip) => {
                        let snapshot = Arc::new(Snapshot {
                            by_ip,
                            fetched_at: done,
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Default)]
    struct FakeLister {
        calls: AtomicU64,
        delay: Duration,
        /// IPs present from the n-th call on (0-based).
        appears_at_call: HashMap<String, u64>,
        fail: Mutex<Option<LookupError>>,
    }

    #[async_trait::async_trait]
    impl GroupLister for FakeLister {
        async fn list(&self, resource_group: &str) -> Result<IpIndex, LookupError> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            if let Some(error) = self.fail.lock().clone() {
                return Err(error);
            }
            Ok(self
                .appears_at_call
                .iter()
                .filter(|(_, from)| call >= **from)
                .map(|(ip, _)| {
                    (
                        normalize_ip(ip),
                        PublicIp {
                            id: format!("/rg/{resource_group}/ip/{ip}"),
                            dns_label_configured: false,
                        },
                    )
                })
                .collect())
        }
    }

    /// A cache over a fake whose LIST takes `delay_ms` and holds each `(ip, from_call)` from
    /// that call on (0-based).
    fn cache(
        appears: &[(&str, u64)],
        delay_ms: u64,
        ttl_ms: u64,
        miss_ms: u64,
    ) -> (Arc<FakeLister>, GroupCache<FakeLister>) {
        let lister = Arc::new(FakeLister {
            delay: Duration::from_millis(delay_ms),
            appears_at_call: appears.iter().map(|(ip, n)| (ip.to_string(), *n)).collect(),
            ..FakeLister::default()
        });
        let cache = GroupCache::new(
            Arc::clone(&lister),
            Duration::from_millis(ttl_ms),
            Duration::from_millis(miss_ms),
            Arc::new(AzureStats::default()),
        );
        (lister, cache)
    }

    impl FakeLister {
        fn calls(&self) -> u64 {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn ips_are_normalised() {
        assert_eq!(normalize_ip(" 10.0.0.1 "), "10.0.0.1");
        assert_eq!(normalize_ip("2001:DB8:0:0::1"), "2001:db8::1");
        assert_eq!(normalize_ip("not-an-ip"), "not-an-ip");
    }

    #[tokio::test]
    async fn concurrent_first_lookups_share_one_list() {
        let (lister, cache) = cache(&[("10.0.0.1", 0)], 50, 10_000, 1_000);
        let cache = Arc::new(cache);
        let lookups = (0..64).map(|_| {
            let cache = Arc::clone(&cache);
            async move { cache.find("RG", "10.0.0.1").await }
        });
        for result in futures::future::join_all(lookups).await {
            assert!(result.unwrap().is_some());
        }
        assert_eq!(lister.calls(), 1);
        // Case-insensitive group key, and now a cache hit.
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        assert_eq!(lister.calls(), 1);
        let stats = cache.stats.snapshot();
        assert_eq!((stats.cache_misses, stats.cache_hits), (64, 1));
    }

    #[tokio::test]
    async fn miss_refreshes_at_most_once_per_interval() {
        let (lister, cache) = cache(&[("10.0.0.1", 0), ("10.0.0.2", 2)], 0, 10_000, 200);
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some()); // call 0
        // Within the interval: answered None from cache, no LIST.
        for _ in 0..20 {
            assert!(cache.find("rg", "10.0.0.2").await.unwrap().is_none());
        }
        assert_eq!(lister.calls(), 1);
        tokio::time::sleep(Duration::from_millis(220)).await;
        assert!(cache.find("rg", "10.0.0.2").await.unwrap().is_none()); // call 1, still absent
        assert!(cache.find("rg", "10.0.0.2").await.unwrap().is_none()); // from cache
        assert_eq!(lister.calls(), 2);
        tokio::time::sleep(Duration::from_millis(220)).await;
        assert!(cache.find("rg", "10.0.0.2").await.unwrap().is_some()); // call 2
        assert_eq!(lister.calls(), 3);
    }

    #[tokio::test]
    async fn ttl_expiry_relists_and_errors_are_held_down() {
        let (lister, cache) = cache(&[("10.0.0.1", 0)], 0, 100, 100);
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        assert_eq!(lister.calls(), 1);
        tokio::time::sleep(Duration::from_millis(120)).await;
        *lister.fail.lock() = Some(LookupError::Failed {
            resource_group: "rg".into(),
            message: "boom".into(),
        });
        assert!(cache.find("rg", "10.0.0.1").await.is_err());
        assert_eq!(lister.calls(), 2);
        // Held down: the error is repeated without a LIST.
        assert!(cache.find("rg", "10.0.0.1").await.is_err());
        assert_eq!(lister.calls(), 2);
        *lister.fail.lock() = None;
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        assert_eq!(lister.calls(), 3);
    }

    #[tokio::test]
    async fn a_hit_does_not_wait_behind_a_miss_refresh() {
        let (lister, cache) = cache(&[("10.0.0.1", 0)], 300, 10_000, 10);
        let cache = Arc::new(cache);
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let miss = tokio::spawn({
            let cache = Arc::clone(&cache);
            async move { cache.find("rg", "10.0.0.2").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = Instant::now();
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        assert!(started.elapsed() < Duration::from_millis(100));
        assert_eq!(miss.await.unwrap().unwrap(), None);
        assert_eq!(lister.calls(), 2);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_does_not_cancel_the_list() {
        let (lister, cache) = cache(&[("10.0.0.1", 0)], 100, 10_000, 1_000);
        let quick =
            tokio::time::timeout(Duration::from_millis(10), cache.find("rg", "10.0.0.1")).await;
        assert!(quick.is_err(), "gave up before the LIST finished");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(cache.find("rg", "10.0.0.1").await.unwrap().is_some());
        assert_eq!(lister.calls(), 1);
    }
}
