//! [`AzureFleet`]: the process-wide credential, ARM client and request budget, handing out
//! per-subscription lookups to the member reconcilers. The top of `azure/`: it assembles the
//! credential, the request stacks, the caches and the member scopes below it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use azure_core::auth::TokenCredential;
use azure_core::{ClientOptions, HttpClient, RetryOptions, TransportOptions};
use azure_mgmt_network::package_2024_03::Client as NetworkClient;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::cache::{Bounds, GroupCache};
use super::config::{AzureConfig, check_subscription, invalid, parse_http_url};
use super::credential;
use super::error::AzureError;
use super::http::{StackClient, classify, stack};
use super::lookup::{ArmLister, SubscriptionPublicIps};
use super::scope::MemberPublicIps;
use super::stats::{AzureStats, AzureStatsSnapshot};
use crate::export::PublicIpLookup;
use crate::policy::{ClientStats, Policy, RetryLimits};

/// Token requests in flight at once. Credentials cache their tokens, so a handful is plenty.
const TOKEN_CONCURRENCY: usize = 4;

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
