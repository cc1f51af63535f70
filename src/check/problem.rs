//! What is wrong with a cluster, in the words an operator acts on: one [`Category`] per
//! problem, found from the typed error (kube's, hyper's, rustls's, the client stack's) and
//! never from the kubeconfig's text, so nothing of a credential can reach the report.

use std::error::Error as StdError;

use crate::policy::TimedOut;

/// The kind of a problem; its [`Category::as_str`] is the stable `category` of
/// `check --output json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Nothing wrong.
    Ok,
    /// The kubeconfig (or in-cluster configuration) is refused or cannot make a client; no
    /// connection was tried.
    Kubeconfig,
    /// No connection: refused, timed out, the name does not resolve, no answer in time.
    Unreachable,
    /// The TLS handshake failed: unknown CA, a certificate for another name, expired.
    Tls,
    /// The server refused the credentials (401), or none could be obtained.
    Authentication,
    /// The identity may not do what the jobs do (403, or a SelfSubjectAccessReview denial).
    Rbac,
    /// A group/version or resource the jobs use is not served (its CRD is not installed).
    CrdMissing,
    /// Anything else (the detail says what).
    Other,
}

impl Category {
    /// The stable name (`ok`, `kubeconfig`, `unreachable`, `tls`, `authentication`, `rbac`,
    /// `crd_missing`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Ok => "ok",
            Category::Kubeconfig => "kubeconfig",
            Category::Unreachable => "unreachable",
            Category::Tls => "tls",
            Category::Authentication => "authentication",
            Category::Rbac => "rbac",
            Category::CrdMissing => "crd_missing",
            Category::Other => "other",
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A problem: its category and a sentence saying what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub category: Category,
    pub detail: String,
}

impl Problem {
    /// A problem of `category` told by `detail`.
    pub fn new(category: Category, detail: impl Into<String>) -> Self {
        Self {
            category,
            detail: detail.into(),
        }
    }
}

/// The HTTP status of an API error anywhere in `error`'s chain.
pub fn api_status(error: &(dyn StdError + 'static)) -> Option<u16> {
    chain(error).find_map(|e| match e.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    })
}

/// The problem of a request that failed with `error`, while doing `doing` (`list
/// networking.fleet.azure.com/v1alpha1`). The first cause that tells a category wins, from
/// the outside in: the server's answer, then TLS, then the connection; the connector's
/// catch-all ("cannot connect") only when no cause says more (a TLS refusal travels inside
/// it).
pub fn classify(doing: &str, error: &(dyn StdError + 'static)) -> Problem {
    chain(error)
        .find_map(|cause| {
            of_kube(doing, cause)
                .or_else(|| of_tls(cause))
                .or_else(|| of_io(cause))
        })
        .or_else(|| chain(error).find_map(|cause| of_transport(doing, cause)))
        .unwrap_or_else(|| Problem::new(Category::Other, format!("{doing} failed: {error}")))
}

/// `error` and its sources, each `io::Error`'s inner error too (`io::Error::source` skips it,
/// and rustls's errors travel inside one).
fn chain<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    let mut next = Some(error);
    // Bounded: a cyclic or endless chain from outside must not hang the check.
    std::iter::from_fn(move || {
        let current = next?;
        next = match current.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|e| e as &(dyn StdError + 'static)),
            None => current.source(),
        };
        Some(current)
    })
    .take(32)
}

fn of_kube(doing: &str, cause: &(dyn StdError + 'static)) -> Option<Problem> {
    match cause.downcast_ref::<kube::Error>()? {
        kube::Error::Api(status) => Some(of_status(doing, status.code, &status.message)),
        kube::Error::Auth(_) => Some(Problem::new(
            Category::Authentication,
            "no credentials could be obtained (token file, exec plugin or auth provider failed)",
        )),
        kube::Error::InferConfig(_) | kube::Error::InferKubeconfig(_) => Some(Problem::new(
            Category::Kubeconfig,
            "the configuration cannot be used",
        )),
        _ => None,
    }
}

/// The problem of an answer with HTTP `code`: 401, 403 and 404 are an operator's to fix.
pub fn of_status(doing: &str, code: u16, message: &str) -> Problem {
    // The server's message names the user and the request, never a credential.
    let message: String = message.chars().take(300).collect();
    match code {
        401 => Problem::new(
            Category::Authentication,
            format!(
                "{doing}: the server refused the credentials (401 Unauthorized): renew the token or certificate"
            ),
        ),
        403 => Problem::new(
            Category::Rbac,
            format!("{doing}: forbidden (403): {message}: grant it to this identity"),
        ),
        404 => Problem::new(
            Category::CrdMissing,
            format!("{doing}: not served (404): install its CRD"),
        ),
        _ => Problem::new(
            Category::Other,
            format!("{doing}: the server answered {code}: {message}"),
        ),
    }
}

fn of_tls(cause: &(dyn StdError + 'static)) -> Option<Problem> {
    use rustls::CertificateError as C;
    let what = match cause.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(certificate) => match certificate {
            C::UnknownIssuer => {
                "the server's certificate is signed by an unknown CA: fix certificate-authority(-data)"
                    .to_string()
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "the server's certificate is not valid for the server's name ({certificate}): use a name it holds or reissue it"
            ),
            C::Expired | C::ExpiredContext { .. } => {
                format!("the server's certificate has expired ({certificate}): renew it")
            }
            C::NotValidYet | C::NotValidYetContext { .. } => format!(
                "the server's certificate is not valid yet ({certificate}): check the clocks"
            ),
            C::Revoked => "the server's certificate is revoked".to_string(),
            C::BadSignature => "the server's certificate does not verify against the configured CA (a CA of the same name, not the one that signed it): fix certificate-authority(-data)".to_string(),
            other => format!("the server's certificate is refused: {other}"),
        },
        other => format!("TLS handshake failed: {other}"),
    };
    Some(Problem::new(Category::Tls, what))
}

fn of_io(cause: &(dyn StdError + 'static)) -> Option<Problem> {
    use std::io::ErrorKind as K;
    let io = cause.downcast_ref::<std::io::Error>()?;
    let what = match io.kind() {
        K::ConnectionRefused => "connection refused: is the API server running, at this address?",
        K::TimedOut => "connecting timed out: is the API server reachable from here?",
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            "the connection was closed by the server or a middlebox"
        }
        K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => {
            "no route to the API server"
        }
        _ => return None,
    };
    Some(Problem::new(Category::Unreachable, what))
}

/// A connection that failed for a reason told above by nothing more typed (a name that does not
/// resolve is one: the resolver's error carries no kind), or our own request deadline.
fn of_transport(doing: &str, cause: &(dyn StdError + 'static)) -> Option<Problem> {
    if let Some(timed_out) = cause.downcast_ref::<TimedOut>() {
        return Some(Problem::new(
            Category::Unreachable,
            format!("{doing}: no answer within {:?}", timed_out.after),
        ));
    }
    if cause
        .downcast_ref::<tokio::time::error::Elapsed>()
        .is_some()
    {
        return Some(Problem::new(
            Category::Unreachable,
            format!("{doing}: no answer in time"),
        ));
    }
    let legacy = cause.downcast_ref::<hyper_util::client::legacy::Error>()?;
    legacy.is_connect().then(|| {
        // The connector's own words ("dns error: failed to lookup address information: …"):
        // the host name is the server's, shown in the report anyway; no credential is in a
        // connection's error.
        let mut words = vec![];
        let mut next = legacy.source();
        while let Some(e) = next.filter(|_| words.len() < 4) {
            words.push(e.to_string());
            next = e.source();
        }
        Problem::new(
            Category::Unreachable,
            format!("cannot connect: {}", words.join(": ")),
        )
    })
}

#[cfg(test)]
mod tests;
