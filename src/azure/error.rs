//! [`AzureError`]: what can fail while building the process-wide client or binding a member to a
//! subscription. Below the credential and the client, which both return it.

use super::config::{ConfigError, CredentialKind};

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
