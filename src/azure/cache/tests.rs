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
    async fn list(&self, resource_group: &str, max_ips: usize) -> Result<Listed, LookupError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        if let Some(error) = self.fail.lock().clone() {
            return Err(error);
        }
        let by_ip: IpIndex = self
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
            .collect();
        let truncated = by_ip.len() > max_ips;
        // Kept in address order, so which are cut is known.
        let mut kept: Vec<_> = by_ip.into_iter().collect();
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        kept.truncate(max_ips);
        Ok(Listed {
            by_ip: kept.into_iter().collect(),
            truncated,
        })
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
    let bounds = Bounds {
        ttl: Duration::from_millis(ttl_ms),
        miss_refresh_interval: Duration::from_millis(miss_ms),
        max_groups: 1000,
        max_ips: 1000,
    };
    let cache = GroupCache::new(Arc::clone(&lister), bounds, Arc::new(AzureStats::default()));
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
        async move { cache.find("RG", "10.0.0.1", None).await }
    });
    for result in futures::future::join_all(lookups).await {
        assert!(result.unwrap().is_some());
    }
    assert_eq!(lister.calls(), 1);
    // Case-insensitive group key, and now a cache hit.
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    assert_eq!(lister.calls(), 1);
    let stats = cache.stats.snapshot();
    assert_eq!((stats.cache_misses, stats.cache_hits), (64, 1));
}

#[tokio::test]
async fn miss_refreshes_at_most_once_per_interval() {
    let (lister, cache) = cache(&[("10.0.0.1", 0), ("10.0.0.2", 2)], 0, 10_000, 200);
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some()); // call 0
    // Within the interval: answered None from cache, no LIST.
    for _ in 0..20 {
        assert!(cache.find("rg", "10.0.0.2", None).await.unwrap().is_none());
    }
    assert_eq!(lister.calls(), 1);
    tokio::time::sleep(Duration::from_millis(220)).await;
    assert!(cache.find("rg", "10.0.0.2", None).await.unwrap().is_none()); // call 1, still absent
    assert!(cache.find("rg", "10.0.0.2", None).await.unwrap().is_none()); // from cache
    assert_eq!(lister.calls(), 2);
    tokio::time::sleep(Duration::from_millis(220)).await;
    assert!(cache.find("rg", "10.0.0.2", None).await.unwrap().is_some()); // call 2
    assert_eq!(lister.calls(), 3);
}

#[tokio::test]
async fn ttl_expiry_relists_and_errors_are_held_down() {
    let (lister, cache) = cache(&[("10.0.0.1", 0)], 0, 100, 100);
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    assert_eq!(lister.calls(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    *lister.fail.lock() = Some(LookupError::Failed {
        resource_group: "rg".into(),
        message: "boom".into(),
    });
    assert!(cache.find("rg", "10.0.0.1", None).await.is_err());
    assert_eq!(lister.calls(), 2);
    // Held down: the error is repeated without a LIST.
    assert!(cache.find("rg", "10.0.0.1", None).await.is_err());
    assert_eq!(lister.calls(), 2);
    *lister.fail.lock() = None;
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    assert_eq!(lister.calls(), 3);
}

#[tokio::test]
async fn a_hit_does_not_wait_behind_a_miss_refresh() {
    let (lister, cache) = cache(&[("10.0.0.1", 0)], 300, 10_000, 10);
    let cache = Arc::new(cache);
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let miss = tokio::spawn({
        let cache = Arc::clone(&cache);
        async move { cache.find("rg", "10.0.0.2", None).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    assert!(started.elapsed() < Duration::from_millis(100));
    assert_eq!(miss.await.unwrap().unwrap(), None);
    assert_eq!(lister.calls(), 2);
}

#[tokio::test]
async fn a_cancelled_waiter_does_not_cancel_the_list() {
    let (lister, cache) = cache(&[("10.0.0.1", 0)], 100, 10_000, 1_000);
    let quick = tokio::time::timeout(
        Duration::from_millis(10),
        cache.find("rg", "10.0.0.1", None),
    )
    .await;
    assert!(quick.is_err(), "gave up before the LIST finished");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(cache.find("rg", "10.0.0.1", None).await.unwrap().is_some());
    assert_eq!(lister.calls(), 1);
}

/// Whether `cache` finds `ip` in `rg`; a failed lookup fails the test.
async fn found(cache: &GroupCache<FakeLister>, rg: &str, ip: &str) -> bool {
    match cache.find(rg, ip, None).await {
        Ok(found) => found.is_some(),
        Err(e) => panic!("{ip} in {rg}: {e}"),
    }
}

/// A cache with these bounds over a fake holding `ips` from its first call.
fn bounded(
    ips: &[&str],
    ttl_ms: u64,
    max_groups: usize,
    max_ips: usize,
) -> (Arc<FakeLister>, GroupCache<FakeLister>) {
    let lister = Arc::new(FakeLister {
        appears_at_call: ips.iter().map(|ip| (ip.to_string(), 0)).collect(),
        ..FakeLister::default()
    });
    let bounds = Bounds {
        ttl: Duration::from_millis(ttl_ms),
        miss_refresh_interval: Duration::from_millis(ttl_ms / 2),
        max_groups,
        max_ips,
    };
    let cache = GroupCache::new(Arc::clone(&lister), bounds, Arc::new(AzureStats::default()));
    (lister, cache)
}

#[tokio::test(start_paused = true)]
async fn unused_groups_are_evicted_after_the_ttl() {
    let (lister, cache) = bounded(&["10.0.0.1"], 1_000, 100, 100);
    for g in 0..10 {
        assert!(found(&cache, &format!("rg-{g}"), "10.0.0.1").await);
    }
    assert_eq!(cache.len(), 10);
    tokio::time::sleep(Duration::from_millis(600)).await;
    // rg-0 is used again; the others are not.
    assert!(found(&cache, "rg-0", "10.0.0.1").await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A TTL after the others' last use: the next lookup sweeps them out (no new group needed).
    assert!(found(&cache, "rg-0", "10.0.0.1").await);
    assert_eq!(cache.len(), 1, "only the group used within the TTL is kept");
    assert_eq!(cache.stats.snapshot().groups_evicted, 9);
    assert_eq!(
        lister.calls(),
        11,
        "rg-0 was re-listed once its list was stale"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(found(&cache, "rg-1", "10.0.0.1").await);
    assert_eq!(cache.len(), 1, "rg-0 went too");
}

#[tokio::test(start_paused = true)]
async fn at_most_max_groups_are_kept_least_recently_used_first_out() {
    let (lister, cache) = bounded(&["10.0.0.1"], 60_000, 3, 100);
    for g in ["a", "b", "c"] {
        assert!(found(&cache, g, "10.0.0.1").await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(found(&cache, "a", "10.0.0.1").await); // a: most recent
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(found(&cache, "d", "10.0.0.1").await); // evicts b
    assert_eq!(cache.len(), 3);
    assert_eq!(lister.calls(), 4);
    for g in ["a", "c", "d"] {
        assert!(found(&cache, g, "10.0.0.1").await);
    }
    assert_eq!(lister.calls(), 4, "a, c and d were kept");
    assert!(found(&cache, "b", "10.0.0.1").await);
    assert_eq!(lister.calls(), 5, "b was evicted and is listed again");
    assert_eq!(cache.len(), 3);
    assert_eq!(cache.stats.snapshot().groups_evicted, 2);
}

#[tokio::test(start_paused = true)]
async fn a_group_index_is_capped_and_a_miss_in_it_waits_for_the_ttl() {
    // 5 addresses, 3 kept (the fake keeps the lowest).
    let ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"];
    let (lister, cache) = bounded(&ips, 1_000, 10, 3);
    assert!(found(&cache, "big", "10.0.0.1").await);
    assert_eq!(cache.stats.snapshot().truncated_lists, 1);
    // Past the cap: not found, and no re-list on every miss (it would be cut again).
    tokio::time::sleep(Duration::from_millis(600)).await;
    for _ in 0..5 {
        assert!(!found(&cache, "big", "10.0.0.5").await);
    }
    assert_eq!(lister.calls(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!found(&cache, "big", "10.0.0.5").await);
    assert_eq!(lister.calls(), 2, "re-listed after the TTL");
}
