//! The one token credential of the process, chosen by [`CredentialKind`].
//!
//! Client secret and Azure CLI are azure_identity 0.21's own credentials. Two are ours, because
//! azure_identity 0.21 falls short for a long-running AKS pod:
//! - its `WorkloadIdentityCredential` reads the federated token file once, at construction;
//!   kubelet rotates that projected token (typically hourly), so after the first rotation the
//!   process could no longer get tokens. [`FederatedTokenFileCredential`] re-reads the file for
//!   every exchange, using azure_identity's `federated_credentials_flow`.
//! - its public managed identity credential is system-assigned only; AKS nodes usually carry a
//!   user-assigned (kubelet) identity. [`ManagedIdentityCredential`] speaks the IMDS token
//!   protocol with an optional `client_id`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use azure_core::auth::{AccessToken, Secret, TokenCredential};
use azure_core::error::{Error, ErrorKind, ResultExt};
use azure_core::{HttpClient, Method, Request, Url};
use azure_identity::{AzureCliCredential, ClientSecretCredential, federated_credentials_flow};
use time::OffsetDateTime;

use super::config::{AzureConfig, CredentialKind, parse_http_url};
use super::error::AzureError;

/// Tokens are renewed this long before they expire.
const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// Builds the credential named by `config.credential`. `config` must have passed `validate()`.
pub(crate) fn build(
    config: &AzureConfig,
    http: Arc<dyn HttpClient>,
) -> Result<Arc<dyn TokenCredential>, AzureError> {
    let kind = config.credential;
    let fail = |message: String| AzureError::Credential { kind, message };
    let field = |value: Option<&str>, name: &str| {
        value
            .filter(|v| !v.trim().is_empty())
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("{name} is required")))
    };
    let authority = parse_http_url("authority_host", &config.authority_host)
        .map_err(|e| fail(e.to_string()))?;
    Ok(match kind {
        CredentialKind::ClientSecret => Arc::new(ClientSecretCredential::new(
            http,
            authority,
            field(config.tenant_id.as_deref(), "tenant_id")?,
            field(config.client_id.as_deref(), "client_id")?,
            field(config.client_secret.as_deref(), "client_secret")?,
        )),
        CredentialKind::WorkloadIdentity => Arc::new(Cached::new(FederatedTokenFileCredential {
            http,
            authority_host: authority,
            tenant_id: field(config.tenant_id.as_deref(), "tenant_id")?,
            client_id: field(config.client_id.as_deref(), "client_id")?,
            token_file: config
                .federated_token_file
                .clone()
                .ok_or_else(|| fail("federated_token_file is required".to_owned()))?,
        })),
        CredentialKind::ManagedIdentity => Arc::new(Cached::new(ManagedIdentityCredential {
            http,
            endpoint: parse_http_url(
                "managed_identity_endpoint",
                &config.managed_identity_endpoint,
            )
            .map_err(|e| fail(e.to_string()))?,
            client_id: config.client_id.clone().filter(|v| !v.trim().is_empty()),
        })),
        CredentialKind::AzureCli => Arc::new(AzureCliCredential::new()),
    })
}

/// Fetches a new token for a scope; [`Cached`] keeps it until shortly before it expires.
#[async_trait::async_trait]
trait Fetch: Send + Sync + std::fmt::Debug {
    async fn fetch(&self, scopes: &[&str]) -> azure_core::Result<AccessToken>;
}

/// A [`Fetch`] with a per-scope token cache; the mutex makes concurrent callers share one
/// token request.
#[derive(Debug)]
struct Cached<F> {
    source: F,
    tokens: tokio::sync::Mutex<HashMap<Vec<String>, AccessToken>>,
}

impl<F> Cached<F> {
    fn new(source: F) -> Self {
        Self {
            source,
            tokens: Default::default(),
        }
    }
}

#[async_trait::async_trait]
impl<F: Fetch> TokenCredential for Cached<F> {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let key: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        let mut tokens = self.tokens.lock().await;
        if let Some(token) = tokens.get(&key)
            && token.expires_on > OffsetDateTime::now_utc() + REFRESH_MARGIN
        {
            return Ok(token.clone());
        }
        let token = self.source.fetch(scopes).await?;
        tokens.insert(key, token.clone());
        Ok(token)
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        self.tokens.lock().await.clear();
        Ok(())
    }
}

/// Workload identity: exchanges the (re-read) projected service account token for an access token.
#[derive(Debug)]
pub(crate) struct FederatedTokenFileCredential {
    http: Arc<dyn HttpClient>,
    authority_host: Url,
    tenant_id: String,
    client_id: String,
    token_file: PathBuf,
}

#[async_trait::async_trait]
impl Fetch for FederatedTokenFileCredential {
    async fn fetch(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let assertion = tokio::fs::read_to_string(&self.token_file)
            .await
            .with_context(ErrorKind::Credential, || {
                format!(
                    "reading the federated token file {}",
                    self.token_file.display()
                )
            })?;
        let assertion = assertion.trim();
        if assertion.is_empty() {
            return Err(Error::with_message(ErrorKind::Credential, || {
                format!(
                    "federated token file {} is empty",
                    self.token_file.display()
                )
            }));
        }
        let response = federated_credentials_flow::perform(
            self.http.clone(),
            &self.client_id,
            assertion,
            scopes,
            &self.tenant_id,
            &self.authority_host,
        )
        .await
        .with_context(ErrorKind::Credential, || {
            format!(
                "exchanging the federated token for tenant {} at {}",
                self.tenant_id, self.authority_host
            )
        })?;
        Ok(AccessToken::new(
            response.access_token().clone(),
            OffsetDateTime::now_utc() + Duration::from_secs(response.expires_in),
        ))
    }
}

/// Managed identity through the instance metadata service (system- or user-assigned).
#[derive(Debug)]
pub(crate) struct ManagedIdentityCredential {
    http: Arc<dyn HttpClient>,
    endpoint: Url,
    client_id: Option<String>,
}

#[async_trait::async_trait]
impl Fetch for ManagedIdentityCredential {
    async fn fetch(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let [scope] = scopes else {
            return Err(Error::message(
                ErrorKind::Credential,
                "managed identity tokens are requested for exactly one scope",
            ));
        };
        let resource = scope.strip_suffix("/.default").unwrap_or(scope);
        let mut url = self.endpoint.clone();
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("api-version", "2018-02-01");
            query.append_pair("resource", resource);
            if let Some(client_id) = &self.client_id {
                query.append_pair("client_id", client_id);
            }
        }
        let mut request = Request::new(url, Method::Get);
        request.insert_header("metadata", "true");
        let response = self
            .http
            .execute_request(&request)
            .await
            .with_context(ErrorKind::Credential, || {
                format!("requesting a managed identity token from {}", self.endpoint)
            })?;
        let (status, _, body) = response.deconstruct();
        let body = body.collect().await?;
        if !status.is_success() {
            let reason = oauth_reason(&body);
            return Err(Error::with_message(ErrorKind::Credential, || {
                format!(
                    "managed identity endpoint {} answered HTTP {}: {reason}",
                    self.endpoint,
                    u16::from(status),
                )
            }));
        }
        imds_token(&body)
    }
}

/// Only the OAuth error fields: the body itself is never echoed (it may carry anything).
fn oauth_reason(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .map(|v| {
            ["error", "error_description"]
                .iter()
                .filter_map(|k| v.get(*k).and_then(|e| e.as_str()))
                .map(|e| e.chars().take(200).collect::<String>())
                .collect::<Vec<_>>()
                .join(": ")
        })
        .filter(|r| !r.is_empty())
        .map(|r| super::redact::credentials(&r))
        .unwrap_or_else(|| format!("{} bytes, not an OAuth error", body.len()))
}

/// The token of an IMDS answer, which sends numbers as strings (both are accepted).
fn imds_token(body: &[u8]) -> azure_core::Result<AccessToken> {
    let fail = |what: &'static str| Error::message(ErrorKind::Credential, what);
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| fail("managed identity token response is not JSON"))?;
    let token = value.get("access_token").and_then(|t| t.as_str());
    let token = token.ok_or_else(|| fail("managed identity token response has no access_token"))?;
    let number = |key: &str| {
        let v = value.get(key)?;
        v.as_i64().or_else(|| v.as_str()?.parse().ok())
    };
    let expires_on = match (number("expires_on"), number("expires_in")) {
        (Some(at), _) => OffsetDateTime::from_unix_timestamp(at).ok(),
        (None, Some(secs)) => {
            Some(OffsetDateTime::now_utc() + Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
        }
        (None, None) => None,
    };
    let expires_on = expires_on.ok_or_else(|| {
        fail("managed identity token response has no usable expires_on / expires_in")
    })?;
    Ok(AccessToken::new(Secret::new(token.to_owned()), expires_on))
}
