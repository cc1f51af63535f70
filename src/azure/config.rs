//! Configuration of the process-wide Azure client. The CLI maps its flags onto [`AzureConfig`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use azure_core::Url;

/// Azure public cloud Resource Manager endpoint.
pub const AZURE_PUBLIC_CLOUD_ARM: &str = "https://management.azure.com";
/// Azure public cloud Entra ID (AAD) authority host.
pub const AZURE_PUBLIC_CLOUD_AUTHORITY: &str = "https://login.microsoftonline.com";
/// The environment variable the Azure SDKs and AKS's workload identity webhook set to the
/// authority host of the pod's cloud (sovereign clouds: not the public one).
pub const AZURE_AUTHORITY_HOST_ENV: &str = "AZURE_AUTHORITY_HOST";

/// The authority host: the flag when given, else `AZURE_AUTHORITY_HOST` (what the workload
/// identity webhook injects, so a pod in a sovereign cloud needs no flag), else the public
/// cloud's. An empty value counts as not given.
pub fn authority_host_of(flag: Option<&str>, env: Option<&str>) -> String {
    [flag, env]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|v| !v.is_empty())
        .unwrap_or(AZURE_PUBLIC_CLOUD_AUTHORITY)
        .to_owned()
}

/// The instance metadata service's managed identity token endpoint (Azure VMs / AKS nodes).
pub const IMDS_TOKEN_ENDPOINT: &str = "http://169.254.169.254/metadata/identity/oauth2/token";

/// A configuration field is missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid Azure configuration: {field} = {value:?} is not a valid URL: {reason}")]
    InvalidUrl {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("invalid Azure configuration: {field} is required for the {credential:?} credential")]
    Missing {
        field: &'static str,
        credential: CredentialKind,
    },
    #[error("invalid Azure configuration: {field} {reason}")]
    Invalid { field: &'static str, reason: String },
}

pub(super) fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// How the process authenticates to Azure Resource Manager (`--azure-credential`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CredentialKind {
    /// AKS workload identity: a federated (projected service account) token file exchanged at
    /// `{authority_host}/{tenant_id}/oauth2/v2.0/token`. Needs `tenant_id`, `client_id`,
    /// `federated_token_file`. The file is re-read whenever a new token is needed (kubelet
    /// rotates it).
    #[default]
    WorkloadIdentity,
    /// Managed identity through the instance metadata service. System-assigned when
    /// `client_id` is `None`, user-assigned (e.g. the AKS kubelet identity) otherwise.
    ManagedIdentity,
    /// Service principal with a client secret. Needs `tenant_id`, `client_id`, `client_secret`.
    ClientSecret,
    /// `az account get-access-token` (development only).
    AzureCli,
}

/// A client secret: its `Debug` is `"<redacted>"`, so a printed [`AzureConfig`] never shows it.
#[derive(Clone)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt("<redacted>", f)
    }
}

impl std::ops::Deref for Secret {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Secret {
    fn from(secret: &str) -> Self {
        Self(secret.to_owned())
    }
}

/// Everything the shared Azure client needs. Plain fields; [`AzureConfig::validate`] checks them.
#[derive(Clone, Debug)]
pub struct AzureConfig {
    /// Azure Resource Manager endpoint (sovereign clouds, tests). Default: public cloud.
    pub arm_endpoint: String,
    /// Token scope requested for ARM. `None`: `{arm_endpoint}/.default`.
    pub arm_scope: Option<String>,
    /// Entra ID authority host (token endpoint). Default: public cloud.
    pub authority_host: String,
    /// Which credential to build.
    pub credential: CredentialKind,
    /// Entra ID tenant (workload identity, client secret).
    pub tenant_id: Option<String>,
    /// Application / managed identity client id.
    pub client_id: Option<String>,
    /// Client secret (client secret credential).
    pub client_secret: Option<Secret>,
    /// Projected service account token (workload identity).
    pub federated_token_file: Option<PathBuf>,
    /// Managed identity token endpoint. Default: the instance metadata service.
    pub managed_identity_endpoint: String,
    /// Subscription used for members that do not name their own.
    pub default_subscription_id: Option<String>,
    /// Sustained ARM requests per second, shared by every member of the process.
    pub arm_qps: f64,
    /// Requests allowed in a burst above `arm_qps`.
    pub arm_burst: u32,
    /// ARM requests in flight at once, process-wide.
    pub max_concurrency: usize,
    /// How long a resource group's listed public IPs are served from cache.
    pub cache_ttl: Duration,
    /// A lookup whose IP is not in a fresh cached list re-lists the group at most once per this.
    pub miss_refresh_interval: Duration,
    /// Deadline for one ARM HTTP request (connect + response + body), and for token requests.
    pub request_timeout: Duration,
    /// Retries of one ARM request after 429 / 5xx / transport errors before giving up.
    pub max_retries: u32,
    /// First backoff between retries (doubles each retry, with jitter) when ARM gives no
    /// `Retry-After`.
    pub retry_base_delay: Duration,
    /// Longest single wait this process does in-line before a retry. A `Retry-After` longer than
    /// this is not slept on: the lookup fails with `Throttled { retry_after }` at once and the
    /// reconciler requeues.
    pub max_retry_wait: Duration,
    /// Resource groups whose public IP lists are kept at once, per subscription; the least
    /// recently used is dropped to make room (a group unused for `cache_ttl` is dropped anyway).
    pub max_cached_groups: usize,
    /// Public IPs kept per resource group. A group with more is listed up to this many (and a
    /// warning says so); an address past them is not found until the next LIST.
    pub max_public_ips_per_group: usize,
}

impl Default for AzureConfig {
    fn default() -> Self {
        Self {
            arm_endpoint: AZURE_PUBLIC_CLOUD_ARM.to_owned(),
            arm_scope: None,
            authority_host: AZURE_PUBLIC_CLOUD_AUTHORITY.to_owned(),
            credential: CredentialKind::default(),
            tenant_id: None,
            client_id: None,
            client_secret: None,
            federated_token_file: None,
            managed_identity_endpoint: IMDS_TOKEN_ENDPOINT.to_owned(),
            default_subscription_id: None,
            arm_qps: 10.0,
            arm_burst: 20,
            max_concurrency: 8,
            cache_ttl: Duration::from_secs(30),
            miss_refresh_interval: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            max_retries: 3,
            retry_base_delay: Duration::from_millis(500),
            max_retry_wait: Duration::from_secs(10),
            // 256 groups x 1,000 public IPs x ~250 bytes: ~64 MiB at worst per subscription.
            max_cached_groups: 256,
            max_public_ips_per_group: 1000,
        }
    }
}

pub(crate) fn parse_http_url(field: &'static str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value).map_err(|e| ConfigError::InvalidUrl {
        field,
        value: value.to_owned(),
        reason: e.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(ConfigError::InvalidUrl {
            field,
            value: value.to_owned(),
            reason: "expected an http(s) URL with a host".to_owned(),
        });
    }
    Ok(url)
}

/// Bearer tokens and client secrets travel to these endpoints: plain http only on loopback
/// (a local test server), never across a network.
fn require_https_off_loopback(field: &'static str, value: &str) -> Result<(), ConfigError> {
    let url = parse_http_url(field, value)?;
    let loopback = crate::config::is_loopback_host(url.host_str().unwrap_or_default());
    if url.scheme() == "https" || loopback {
        Ok(())
    } else {
        Err(ConfigError::InvalidUrl {
            field,
            value: value.to_owned(),
            reason: "must be https (http only on loopback)".to_owned(),
        })
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

impl AzureConfig {
    /// Checks every field; the error names the offending field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        require_https_off_loopback("arm_endpoint", &self.arm_endpoint)?;
        require_https_off_loopback("authority_host", &self.authority_host)?;
        if self.arm_scope.as_ref().is_some_and(|s| s.trim().is_empty()) {
            return Err(invalid("arm_scope", "must not be empty when set"));
        }
        self.validate_credential()?;
        if let Some(tenant) = &self.tenant_id
            && tenant.contains(['/', '?', '#'])
        {
            let reason = format!("{tenant:?} is not a tenant id or domain");
            return Err(invalid("tenant_id", reason));
        }
        if let Some(sub) = &self.default_subscription_id {
            check_subscription(sub).map_err(|reason| invalid("default_subscription_id", reason))?;
        }
        crate::policy::bucket(self.arm_qps, self.arm_burst).map_err(|e| match e {
            "burst must be at least 1" => invalid("arm_burst", "must be greater than zero"),
            e => invalid("arm_qps", format!("{e}, got {}", self.arm_qps)),
        })?;
        for (field, positive) in [
            ("max_concurrency", self.max_concurrency > 0),
            ("cache_ttl", !self.cache_ttl.is_zero()),
            ("request_timeout", !self.request_timeout.is_zero()),
            ("retry_base_delay", !self.retry_base_delay.is_zero()),
            ("max_cached_groups", self.max_cached_groups > 0),
            (
                "max_public_ips_per_group",
                self.max_public_ips_per_group > 0,
            ),
        ] {
            if !positive {
                return Err(invalid(field, "must be greater than zero"));
            }
        }
        if self.miss_refresh_interval > self.cache_ttl {
            let (miss, ttl) = (self.miss_refresh_interval, self.cache_ttl);
            return Err(invalid(
                "miss_refresh_interval",
                format!("{miss:?} is longer than cache_ttl {ttl:?}"),
            ));
        }
        Ok(())
    }

    /// The fields the chosen credential needs.
    fn validate_credential(&self) -> Result<(), ConfigError> {
        let require = |field: &'static str, value: Option<&str>| match value {
            Some(v) if !v.trim().is_empty() => Ok(()),
            _ => Err(ConfigError::Missing {
                field,
                credential: self.credential,
            }),
        };
        match self.credential {
            CredentialKind::WorkloadIdentity => {
                require("tenant_id", self.tenant_id.as_deref())?;
                require("client_id", self.client_id.as_deref())?;
                let file = self.federated_token_file.as_ref();
                let file = file.map(|p| p.to_string_lossy());
                require("federated_token_file", file.as_deref())
            }
            CredentialKind::ClientSecret => {
                require("tenant_id", self.tenant_id.as_deref())?;
                require("client_id", self.client_id.as_deref())?;
                require("client_secret", self.client_secret.as_deref())
            }
            CredentialKind::ManagedIdentity => {
                parse_http_url("managed_identity_endpoint", &self.managed_identity_endpoint)
                    .map(drop)
            }
            CredentialKind::AzureCli => Ok(()),
        }
    }

    /// The scope requested from the token endpoint for ARM.
    pub(crate) fn scope(&self) -> String {
        match &self.arm_scope {
            Some(scope) => scope.clone(),
            None => format!("{}/.default", self.arm_endpoint.trim_end_matches('/')),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_authority_host_is_the_flag_else_the_webhooks_env_else_the_public_cloud() {
        let gov = "https://login.microsoftonline.us/";
        let cn = "https://login.chinacloudapi.cn";
        assert_eq!(
            super::authority_host_of(Some(cn), Some(gov)),
            cn,
            "the flag wins"
        );
        assert_eq!(super::authority_host_of(None, Some(gov)), gov);
        assert_eq!(super::authority_host_of(Some(""), Some(gov)), gov);
        assert_eq!(
            super::authority_host_of(None, Some(" ")),
            super::AZURE_PUBLIC_CLOUD_AUTHORITY
        );
        assert_eq!(
            super::authority_host_of(None, None),
            super::AZURE_PUBLIC_CLOUD_AUTHORITY
        );
    }

    use super::*;

    fn secret_config() -> AzureConfig {
        AzureConfig {
            credential: CredentialKind::ClientSecret,
            tenant_id: Some("tenant".into()),
            client_id: Some("client".into()),
            client_secret: Some("hunter2".into()),
            ..AzureConfig::default()
        }
    }

    #[test]
    fn debug_redacts_the_secret() {
        let text = format!("{:?}", secret_config());
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains(r#"client_secret: Some("<redacted>")"#),
            "{text}"
        );
    }

    /// The error of `secret_config()` changed by `change`.
    fn error_of(change: impl FnOnce(&mut AzureConfig)) -> String {
        let mut c = secret_config();
        change(&mut c);
        c.validate()
            .map_or_else(|e| e.to_string(), |()| "valid".into())
    }

    #[test]
    fn validate_names_the_missing_field() {
        assert!(secret_config().validate().is_ok());
        let err = AzureConfig::default().validate().unwrap_err().to_string();
        assert!(
            err.contains("tenant_id"),
            "{err}: workload identity without tenant"
        );
        type Change = fn(&mut AzureConfig);
        let cases: [(Change, &str); 8] = [
            (|c| c.client_secret = None, "client_secret"),
            (|c| c.arm_endpoint = "not a url".into(), "arm_endpoint"),
            (|c| c.arm_qps = 0.0, "arm_qps"),
            (|c| c.arm_burst = 0, "arm_burst"),
            (
                |c| c.miss_refresh_interval = Duration::from_secs(60),
                "miss_refresh_interval",
            ),
            (
                |c| c.default_subscription_id = Some("a/b".into()),
                "default_subscription_id",
            ),
            (|c| c.max_cached_groups = 0, "max_cached_groups"),
            (
                |c| c.max_public_ips_per_group = 0,
                "max_public_ips_per_group",
            ),
        ];
        for (change, field) in cases {
            let err = error_of(change);
            assert!(err.contains(field), "{err}");
        }
        for (arm, authority, ok) in [
            ("http://arm.example.com", "https://login.example.com", false),
            ("https://arm.example.com", "http://10.0.0.5:8080", false),
            ("http://127.0.0.1:8080", "http://localhost:9090", true),
            ("http://[::1]:8080", "https://login.example.com", true),
        ] {
            let err = error_of(|c| {
                c.arm_endpoint = arm.into();
                c.authority_host = authority.into();
            });
            let want = if ok { "valid" } else { "must be https" };
            assert!(err.contains(want), "{arm} {authority}: {err}");
        }
    }

    #[test]
    fn scope_follows_the_endpoint() {
        let mut c = AzureConfig::default();
        assert_eq!(c.scope(), "https://management.azure.com/.default");
        c.arm_endpoint = "https://management.usgovcloudapi.net/".into();
        assert_eq!(c.scope(), "https://management.usgovcloudapi.net/.default");
        c.arm_scope = Some("https://management.core.chinacloudapi.cn/.default".into());
        assert_eq!(
            c.scope(),
            "https://management.core.chinacloudapi.cn/.default"
        );
    }
}
