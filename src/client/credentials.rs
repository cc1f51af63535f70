//! A member's credentials in a cell its engagement updates: a new token or client certificate
//! takes effect for the next request and the next TLS handshake, while the member's open
//! connection and its watches go on (a re-engagement would drop every watch and list it all
//! again). [`change`] tells a rotation (only the user's inline credentials changed) from a
//! connection change (anything else: re-engage).
//!
//! Nothing here prints a credential: the cell's `Debug` shows which kinds it holds only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use http::HeaderValue;
use kube::config::{AuthInfo, Kubeconfig};
use parking_lot::RwLock;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use secrecy::ExposeSecret;

/// What a new kubeconfig of a running member changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing the connection uses (a comment, another context's entry).
    Same,
    /// Only the current user's `token` or `client-certificate-data`/`client-key-data`:
    /// rotated in place ([`Credentials::replace`]).
    Rotation,
    /// The server, CA, `tls-server-name`, proxy, namespace, kind of credential or anything
    /// else: the member is engaged again.
    Reconnect,
}

/// What `new` changes for a member connected with `old` (both vetted). Pure.
pub fn change(old: &Kubeconfig, new: &Kubeconfig) -> Change {
    let (Some(old), Some(new)) = (Connection::of(old), Connection::of(new)) else {
        return Change::Reconnect;
    };
    let rotatable = |c: &Connection| Inline::kind(&c.user).is_some();
    if old.without_credentials() != new.without_credentials()
        || !rotatable(&old)
        || Inline::kind(&old.user) != Inline::kind(&new.user)
    {
        return Change::Reconnect;
    }
    if credentials_of(&old.user) == credentials_of(&new.user) {
        Change::Same
    } else {
        Change::Rotation
    }
}

/// What the current context of a kubeconfig connects with.
struct Connection {
    context: serde_json::Value,
    cluster: serde_json::Value,
    user: AuthInfo,
}

impl Connection {
    fn of(kubeconfig: &Kubeconfig) -> Option<Self> {
        let context = current_context(kubeconfig)?;
        let cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)?
            .cluster
            .as_ref()?;
        let user = current_user(kubeconfig)?;
        Some(Self {
            context: serde_json::to_value(context).ok()?,
            cluster: serde_json::to_value(cluster).ok()?,
            user,
        })
    }

    /// Everything but the user's inline credentials, to compare (kept in memory, never shown).
    fn without_credentials(&self) -> Option<serde_json::Value> {
        let mut user = self.user.clone();
        user.token = None;
        user.client_certificate_data = None;
        user.client_key_data = None;
        Some(serde_json::json!([
            self.context,
            self.cluster,
            serde_json::to_value(user).ok()?
        ]))
    }
}

/// `kubeconfig`'s current context.
fn current_context(kubeconfig: &Kubeconfig) -> Option<&kube::config::Context> {
    let current = kubeconfig.current_context.as_deref()?;
    let named = kubeconfig.contexts.iter().find(|c| c.name == current)?;
    named.context.as_ref()
}

/// The user of `kubeconfig`'s current context.
fn current_user(kubeconfig: &Kubeconfig) -> Option<AuthInfo> {
    let context = current_context(kubeconfig)?;
    let name = context.user.as_deref()?;
    kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == name)?
        .auth_info
        .clone()
}

/// The inline credentials of `user`, to compare.
fn credentials_of(user: &AuthInfo) -> (Option<&str>, Option<&str>, Option<&str>) {
    (
        user.token.as_ref().map(|t| t.expose_secret()),
        user.client_certificate_data.as_deref(),
        user.client_key_data.as_ref().map(|k| k.expose_secret()),
    )
}

/// The inline credentials the cell holds.
struct Inline {
    bearer: Option<HeaderValue>,
    identity: Option<Arc<CertifiedKey>>,
}

impl Inline {
    /// Which inline credentials `user` has (token, client certificate), when those are all
    /// it authenticates with; `None` for an exec plugin, basic auth, files or nothing at all.
    fn kind(user: &AuthInfo) -> Option<(bool, bool)> {
        let other = user.exec.is_some()
            || user.auth_provider.is_some()
            || user.username.is_some()
            || user.password.is_some()
            || user.token_file.is_some()
            || user.client_certificate.is_some()
            || user.client_key.is_some();
        let token = user.token.is_some();
        let cert = user.client_certificate_data.is_some() || user.client_key_data.is_some();
        (!other && (token || cert)).then_some((token, cert))
    }

    /// `user`'s credentials, ready to send; the error names the field, never its value.
    fn of(user: &AuthInfo) -> Result<Self, String> {
        let bearer = match &user.token {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
                    .map_err(|_| "token: not a valid HTTP header value".to_string())?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let identity = match (&user.client_certificate_data, &user.client_key_data) {
            (Some(cert), Some(key)) => Some(certified_key(cert, key.expose_secret())?),
            (None, None) => None,
            _ => {
                return Err("client-certificate-data and client-key-data go together".to_string());
            }
        };
        Ok(Self { bearer, identity })
    }
}

/// The client certificate chain and key of base64 PEM `cert` and `key`.
fn certified_key(cert: &str, key: &str) -> Result<Arc<CertifiedKey>, String> {
    let decode = |field: &str, data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| format!("{field}: not base64"))
    };
    let certs = CertificateDer::pem_slice_iter(&decode("client-certificate-data", cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "client-certificate-data: not PEM certificates".to_string())?;
    if certs.is_empty() {
        return Err("client-certificate-data: no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(&decode("client-key-data", key)?)
        .map_err(|_| "client-key-data: not a PEM private key".to_string())?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|_| "client-key-data: not a supported private key".to_string())?;
    Ok(Arc::new(CertifiedKey::new(certs, key)))
}

/// A member's inline credentials, read by every request ([`Credentials::authorize`]) and every
/// TLS handshake ([`Credentials::resolver`]); replaced in place on rotation.
pub struct Credentials {
    bearer: RwLock<Option<HeaderValue>>,
    identity: RwLock<Option<Arc<CertifiedKey>>>,
    /// Bumped by every new client certificate: connections opened before present the old one.
    identity_generation: AtomicU64,
}

/// Never the credentials: which kinds are held only.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("bearer", &self.bearer.read().is_some())
            .field("client_certificate", &self.identity.read().is_some())
            .finish()
    }
}

impl Credentials {
    /// The cell for the current user of `kubeconfig` when it authenticates with inline
    /// credentials only; `None` otherwise (an exec plugin, basic auth: kube's own layer, as
    /// before). The error names the field at fault, never its value.
    pub fn of(kubeconfig: &Kubeconfig) -> Result<Option<Arc<Self>>, String> {
        let Some(user) = current_user(kubeconfig) else {
            return Ok(None);
        };
        if Inline::kind(&user).is_none() {
            return Ok(None);
        }
        let inline = Inline::of(&user)?;
        Ok(Some(Arc::new(Self {
            bearer: RwLock::new(inline.bearer),
            identity: RwLock::new(inline.identity),
            identity_generation: AtomicU64::new(0),
        })))
    }

    /// The next requests and TLS handshakes use the credentials of `kubeconfig`'s current
    /// user; on an error (the field named) the cell keeps the ones it has.
    pub fn replace(&self, kubeconfig: &Kubeconfig) -> Result<(), String> {
        let user = current_user(kubeconfig).ok_or("no current user")?;
        let inline = Inline::of(&user)?;
        *self.bearer.write() = inline.bearer;
        let mut identity = self.identity.write();
        let same = match (identity.as_ref(), inline.identity.as_ref()) {
            (Some(old), Some(new)) => old.cert == new.cert,
            (old, new) => old.is_none() && new.is_none(),
        };
        *identity = inline.identity;
        if !same {
            self.identity_generation.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sets the request's `Authorization` from the cell (sensitive: never printed by hyper).
    pub(super) fn authorize<B>(&self, mut req: http::Request<B>) -> http::Request<B> {
        if let Some(bearer) = self.bearer.read().clone() {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, bearer);
        }
        req
    }

    /// Which client certificate the cell holds: a connection opened under an older one
    /// presents that one ([`super::connections`] opens a new one for the next request).
    pub(super) fn identity_generation(&self) -> u64 {
        self.identity_generation.load(Ordering::Relaxed)
    }

    /// Whether the cell holds a client certificate (TLS then offers the cell's).
    pub(super) fn has_identity(&self) -> bool {
        self.identity.read().is_some()
    }
}

/// New TLS handshakes present the cell's client certificate; open connections keep theirs.
#[derive(Debug)]
pub(super) struct FromCell(pub(super) Arc<Credentials>);

impl ResolvesClientCert for FromCell {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0.identity.read().clone()
    }

    fn has_certs(&self) -> bool {
        self.0.has_identity()
    }
}

#[cfg(test)]
mod tests;
