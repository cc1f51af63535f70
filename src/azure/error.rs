//! Errors of the Azure client. Lookup failures are reported through
//! [`crate::export::LookupError`]; these are about building the client.

use super::config::CredentialKind;

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
    #[error("building the ARM client for endpoint {endpoint}: {message}")]
    Client { endpoint: String, message: String },
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
