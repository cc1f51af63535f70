//! [`AzureFleet`]: the process-wide credential, ARM client and request budget, handing out
//! per-subscription lookups to the member reconcilers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_core::auth::TokenCredential;
use azure_core::{ClientOptions, HttpClient, RetryOptions, TransportOptions};
use azure_mgmt_network::package_2024_03::Client as NetworkClient;

use super::cache::{CacheTiming, GroupCache};
use super::config::{AzureConfig, parse_http_url};
use super::credential;
use super::error::AzureError;
use super::http_client::{ArmHttpClient, TokenHttpClient};
use super::lookup::{ArmLister, SubscriptionPublicIps, as_port};
use super::stats::{AzureStats, AzureStatsSnapshot, TokenStatsSnapshot};
use super::transport::{ArmBudget, arm_stack, token_stack};
use crate::export::PublicIpLookup;

/// Subscription ids go into the ARM URL path: GUID-like characters only.
pub(crate) fn check_subscription(subscription: &str) -> Result<(), String> {
    if subscription.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if !subscription
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(format!(
            "{subscription:?} may contain only ASCII letters, digits and '-'"
        ));
    }
    Ok(())
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
        let tokens: Arc<dyn HttpClient> = Arc::new(TokenHttpClient::new(token_stack(
            http.clone(),
            &config,
            Arc::clone(&stats.token),
        )));
        let credential = credential::build(&config, tokens)?;

        let budget = ArmBudget::new(&config);
        let arm: Arc<dyn HttpClient> = Arc::new(ArmHttpClient::new(
            endpoint.clone(),
            arm_stack(http, &config, &budget, Arc::clone(&stats.arm)),
        ));
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

    /// The lookup for a member in `subscription` (or the default subscription when `None`).
    /// Members in the same subscription get the same instance (one cache per subscription).
    pub fn for_member(
        &self,
        subscription: Option<&str>,
    ) -> Result<Arc<dyn PublicIpLookup>, AzureError> {
        self.subscription(subscription).map(as_port)
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
        let mut subscriptions = self
            .subscriptions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let lookup = subscriptions.entry(key).or_insert_with(|| {
            let lister = ArmLister::new(
                self.client.public_ip_addresses_client(),
                subscription.to_owned(),
                Arc::clone(&self.credential),
            );
            let timing = CacheTiming {
                ttl: self.config.cache_ttl,
                miss_refresh_interval: self.config.miss_refresh_interval,
            };
            Arc::new(SubscriptionPublicIps::new(
                subscription.to_owned(),
                GroupCache::new(Arc::new(lister), timing, Arc::clone(&self.stats)),
            ))
        });
        Ok(Arc::clone(lookup))
    }

    /// Number of distinct subscriptions bound so far.
    pub fn subscription_count(&self) -> usize {
        self.subscriptions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// The process-wide counters now.
    pub fn stats(&self) -> AzureStatsSnapshot {
        self.stats.snapshot()
    }

    /// The token transport's counters now (requests to Entra ID / IMDS, not to ARM).
    pub fn token_stats(&self) -> TokenStatsSnapshot {
        self.stats.token_snapshot()
    }

    /// The live counters, for a metrics collector to read whenever it scrapes.
    pub fn stats_handle(&self) -> Arc<AzureStats> {
        Arc::clone(&self.stats)
    }

    /// The process's one token credential (e.g. for a readiness check).
    pub fn credential(&self) -> Arc<dyn TokenCredential> {
        Arc::clone(&self.credential)
    }

    /// The validated configuration this fleet was built from.
    pub fn config(&self) -> &AzureConfig {
        &self.config
    }
}
