//! [`AzureFleet`]: the process-wide credential, ARM client and request budget, handing out
//! per-subscription lookups to the member reconcilers, and the counters of it all.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use azure_core::auth::TokenCredential;
use azure_core::{ClientOptions, HttpClient, RetryOptions, TransportOptions};
use azure_mgmt_network::package_2024_03::Client as NetworkClient;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::cache::{Bounds, GroupCache};
use super::config::{AzureConfig, ConfigError, CredentialKind, invalid, parse_http_url};
use super::credential;
use super::http::{StackClient, classify, stack};
use super::lookup::{ArmLister, SubscriptionPublicIps};
use super::scope::MemberPublicIps;
use crate::export::PublicIpLookup;
use crate::policy::{ClientStats, Policy, RetryLimits};

/// Token requests in flight at once. Credentials cache their tokens, so a handful is plenty.
const TOKEN_CONCURRENCY: usize = 4;

/// Building the process-wide client, or binding a member to a subscription, failed.
#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("building the HTTP transport for Azure: {0}")]
    Transport(String),
    #[error("building the {kind:?} Azure credential: {message}")]
    Credential {
        kind: CredentialKind,
        message: String,
    },
    #[error(
        "member has no Azure subscription and no default subscription is configured (default_subscription_id)"
    )]
    NoSubscription,
    #[error("invalid Azure subscription id {subscription:?}: {reason}")]
    InvalidSubscription {
        subscription: String,
        reason: String,
    },
}

/// Process-wide counters of the Azure client, shared by every member. Monotonic.
#[derive(Debug, Default)]
pub struct AzureStats {
    pub(crate) list_calls: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) groups_evicted: AtomicU64,
    pub(crate) truncated_lists: AtomicU64,
    /// The ARM stack.
    arm: Arc<ClientStats>,
    /// The token stack (credential requests to Entra ID / IMDS).
    token: Arc<ClientStats>,
}

/// A copy of the counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AzureStatsSnapshot {
    /// Public IP LIST operations started against ARM (one per cache refresh; all its pages and
    /// retries count once).
    pub list_calls: u64,
    /// HTTP requests sent to ARM (every page, every retry).
    pub arm_requests: u64,
    /// Lookups answered from the cache without waiting for ARM (found or known-absent).
    pub cache_hits: u64,
    /// Lookups that had to wait for a LIST (started one or joined the one in flight).
    pub cache_misses: u64,
    /// ARM requests re-sent after 429 / 408 / 5xx / timeout / transport error.
    pub retries: u64,
    /// 429 responses received from ARM.
    pub throttled: u64,
    /// Total time ARM requests waited for the shared rate limiter (token and slot).
    pub limiter_wait: Duration,
    /// The token stack's counters.
    pub token: TokenStatsSnapshot,
    /// Resource groups dropped from the cache: unused for a TTL, or the least recently used
    /// when `max_cached_groups` were kept.
    pub groups_evicted: u64,
    /// LISTs cut at `max_public_ips_per_group`.
    pub truncated_lists: u64,
}

/// A copy of the token stack's counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenStatsSnapshot {
    /// HTTP requests sent to the token endpoint (Entra ID or IMDS), every retry included.
    pub requests: u64,
    /// Token requests re-sent after 429 / 408 / 5xx / timeout / transport error.
    pub retries: u64,
    /// 429 responses received from the token endpoint.
    pub throttled: u64,
}

impl AzureStats {
    /// The counters now.
    pub fn snapshot(&self) -> AzureStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AzureStatsSnapshot {
            list_calls: get(&self.list_calls),
            arm_requests: self.arm.requests(),
            cache_hits: get(&self.cache_hits),
            cache_misses: get(&self.cache_misses),
            retries: self.arm.retries(),
            throttled: self.arm.throttled(),
            limiter_wait: self.arm.waited(),
            token: TokenStatsSnapshot {
                requests: self.token.requests(),
                retries: self.token.retries(),
                throttled: self.token.throttled(),
            },
            groups_evicted: get(&self.groups_evicted),
            truncated_lists: get(&self.truncated_lists),
        }
    }
}

/// Subscription ids go into the ARM URL path: GUID-like characters only.
pub(crate) fn check_subscription(subscription: &str) -> Result<(), String> {
    match subscription {
        "" => Err("must not be empty".to_owned()),
        s if s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') => Ok(()),
        s => Err(format!(
            "{s:?} may contain only ASCII letters, digits and '-'"
        )),
    }
}

/// One per process. Holds the ONE credential, the ONE ARM network client (the SDK client is
/// per endpoint; the subscription is a per-call argument), the global request budget, and one
/// cached [`SubscriptionPublicIps`] per subscription, shared by all members in it.
pub struct AzureFleet {
    config: AzureConfig,
    credential: Arc<dyn TokenCredential>,
    client: NetworkClient,
    stats: Arc<AzureStats>,
    subscriptions: Mutex<HashMap<String, Arc<SubscriptionPublicIps>>>,
}

impl std::fmt::Debug for AzureFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureFleet")
            .field("config", &self.config)
            .field("stats", &self.stats.snapshot())
            .finish_non_exhaustive()
    }
}

impl AzureFleet {
    /// Validates `config` and builds the credential and client. Does no network I/O (the
    /// first token is fetched by the first lookup) and needs no runtime; lookups run on Tokio.
    pub fn new(config: AzureConfig) -> Result<Self, AzureError> {
        config.validate()?;
        let endpoint = parse_http_url("arm_endpoint", &config.arm_endpoint)?;

        // azure_core 0.21's default transport sets `pool_max_idle_per_host(0)` (no connection
        // reuse); ours pools. Deadlines are the stacks' per-attempt timeouts, not reqwest's.
        let http = reqwest::Client::builder()
            .connect_timeout(config.request_timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| AzureError::Transport(e.to_string()))?;

        let stats = Arc::new(AzureStats::default());
        let policy = |stats: &Arc<ClientStats>, slots: usize| Policy {
            classify,
            retry: RetryLimits {
                max_retries: config.max_retries,
                base_delay: config.retry_base_delay,
                max_wait: config.max_retry_wait,
            },
            bucket: None,
            own_buckets: vec![],
            slots: Arc::new(Semaphore::new(slots)),
            timeout: config.request_timeout,
            stats: Arc::clone(stats),
            trace: false,
        };
        // Not the ARM budget: a token is what lets ARM requests go at all.
        let tokens: Arc<dyn HttpClient> = Arc::new(StackClient {
            arm: None,
            service: stack(http.clone(), policy(&stats.token, TOKEN_CONCURRENCY)),
        });
        let credential = credential::build(&config, tokens)?;
        // The process-wide ARM budget, shared by every member and subscription.
        let bucket = crate::policy::bucket(config.arm_qps, config.arm_burst)
            .map_err(|e| invalid("arm_qps", e))?;
        let arm = Policy {
            bucket: Some(bucket),
            ..policy(&stats.arm, config.max_concurrency)
        };
        let arm: Arc<dyn HttpClient> = Arc::new(StackClient {
            arm: Some(endpoint.clone()),
            service: stack(http, arm),
        });
        // ONE retry loop: the SDK's is switched off, ours is the stack's retry layer.
        let options = ClientOptions::new(TransportOptions::new(arm)).retry(RetryOptions::none());
        let client = NetworkClient::new(
            endpoint,
            Arc::clone(&credential),
            vec![config.scope()],
            options,
        );

        Ok(Self {
            config,
            credential,
            client,
            stats,
            subscriptions: Mutex::new(HashMap::new()),
        })
    }

    /// A member's lookups: in its `subscription` (or the default subscription when `None`),
    /// only in `default_resource_group` and `allowed_resource_groups`, each LIST it starts
    /// waiting in the member's own line for the ARM budget. Members of one subscription share
    /// its cache.
    pub fn member(
        &self,
        member: &str,
        subscription: Option<&str>,
        default_resource_group: &str,
        allowed_resource_groups: &[String],
    ) -> Result<Arc<MemberPublicIps>, AzureError> {
        let subscription = self.subscription(subscription)?;
        Ok(Arc::new(MemberPublicIps::new(
            member,
            default_resource_group,
            allowed_resource_groups,
            subscription,
        )))
    }

    /// Unscoped lookups in `subscription` (or the default subscription when `None`): any group,
    /// no member's line. For tools and tests; members get [`Self::member`].
    /// Callers in the same subscription get the same instance (one cache per subscription).
    pub fn for_member(
        &self,
        subscription: Option<&str>,
    ) -> Result<Arc<dyn PublicIpLookup>, AzureError> {
        Ok(self.subscription(subscription)?)
    }

    /// Like [`Self::for_member`], with the concrete type.
    pub fn subscription(
        &self,
        subscription: Option<&str>,
    ) -> Result<Arc<SubscriptionPublicIps>, AzureError> {
        let subscription = subscription
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .or(self.config.default_subscription_id.as_deref())
            .ok_or(AzureError::NoSubscription)?;
        check_subscription(subscription).map_err(|reason| AzureError::InvalidSubscription {
            subscription: subscription.to_owned(),
            reason,
        })?;
        let key = subscription.to_ascii_lowercase();
        let mut subscriptions = self.subscriptions.lock();
        let lookup = subscriptions.entry(key).or_insert_with(|| {
            let lister = ArmLister {
                client: self.client.public_ip_addresses_client(),
                subscription: subscription.to_owned(),
                credential: Arc::clone(&self.credential),
            };
            let bounds = Bounds {
                ttl: self.config.cache_ttl,
                miss_refresh_interval: self.config.miss_refresh_interval,
                max_groups: self.config.max_cached_groups,
                max_ips: self.config.max_public_ips_per_group,
            };
            let cache = GroupCache::new(Arc::new(lister), bounds, Arc::clone(&self.stats));
            Arc::new(SubscriptionPublicIps {
                subscription: subscription.to_owned(),
                cache,
            })
        });
        Ok(Arc::clone(lookup))
    }

    /// Number of distinct subscriptions bound so far.
    pub fn subscription_count(&self) -> usize {
        self.subscriptions.lock().len()
    }

    /// The process-wide counters now.
    pub fn stats(&self) -> AzureStatsSnapshot {
        self.stats.snapshot()
    }

    /// The live counters, for a metrics collector to read whenever it scrapes.
    pub fn stats_handle(&self) -> Arc<AzureStats> {
        Arc::clone(&self.stats)
    }
}
