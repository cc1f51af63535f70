//! Vetting of member kubeconfigs. Whoever can write one member's kubeconfig must not be able to
//! run code in fleetnet-hub's pod, read its files (the hub's ServiceAccount token, the Azure
//! federated token), send its credentials in clear text or quietly turn off TLS.
//!
//! An allowlist: kube's `Kubeconfig` keeps what it does not know aside and may act on fields a
//! later kube version adds, so the text is read as plain YAML values and every field of every
//! document is looked at. A field is inline data known to be safe, allowed by an explicit
//! operator opt-in ([`TrustPolicy`]), or refused, named by its place (`clusters[k].proxy-url`)
//! and never by its value. The client is then built from those same values, so what is vetted
//! is what is used. Pure: nothing here connects anywhere or reads a file.

use std::net::IpAddr;

use kube::config::{ExecInteractiveMode, Kubeconfig};
use serde_json::{Map, Value};

pub mod parse_error;

/// What member kubeconfigs may use beyond inline credentials; all off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrustPolicy {
    /// `exec` credential plugins (e.g. kubelogin for Entra ID), run as fleetnet-hub's user.
    pub allow_exec: bool,
    /// `insecure-skip-tls-verify: true`; such members are flagged on `/members`, in `check`
    /// and in `fleetnet_member_tls_verify_disabled`.
    pub allow_insecure_tls: bool,
    /// A `server` over plain `http://` to a loopback host (tests, a local sandbox, a sidecar
    /// tunnel): the credentials cross no network, but nothing is encrypted or authenticated.
    pub allow_plain_http_loopback: bool,
    /// A cluster's own `proxy-url` over `http://` (an HTTP CONNECT proxy; TLS to the member
    /// stays end to end). Shown as `http://host:port`, never with its credentials.
    pub allow_proxy: bool,
}

/// A member kubeconfig that passed vetting, with what the operator allowed it to use.
pub struct Vetted {
    pub kubeconfig: Kubeconfig,
    /// Some cluster entry disables TLS verification (allowed by the policy).
    pub tls_verify_disabled: bool,
}

/// Never the kubeconfig: it holds credentials.
impl std::fmt::Debug for Vetted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vetted")
            .field("tls_verify_disabled", &self.tls_verify_disabled)
            .finish_non_exhaustive()
    }
}

/// How one field is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Inline data that kube sends only to the member's server, or keeps to itself.
    Safe,
    /// `server`: https (plain http to a loopback host only with
    /// [`TrustPolicy::allow_plain_http_loopback`]), nothing secret in the URL.
    Server,
    /// `insecure-skip-tls-verify`: `true` only with [`TrustPolicy::allow_insecure_tls`].
    InsecureTls,
    /// `exec`: only with [`TrustPolicy::allow_exec`].
    Exec,
    /// `proxy-url`: an `http://` proxy only with [`TrustPolicy::allow_proxy`].
    Proxy,
    /// Never, and why (with what to use instead).
    Refused(&'static str),
}

const FILE_PATH: &str =
    "a file path: only inline token and client-certificate-data/client-key-data are accepted";
const IMPERSONATION: &str =
    "impersonation is not accepted: fleetnet-hub acts as the credential's own identity";

/// Fields of a `clusters[].cluster`.
fn cluster_rule(field: &str) -> Option<Rule> {
    Some(match field {
        "server" => Rule::Server,
        // Extensions are opaque data that kube hands to an exec plugin only (itself an opt-in).
        "certificate-authority-data" | "tls-server-name" | "disable-compression" | "extensions" => {
            Rule::Safe
        }
        "insecure-skip-tls-verify" => Rule::InsecureTls,
        "certificate-authority" => {
            Rule::Refused("a file path: only certificate-authority-data is accepted")
        }
        "proxy-url" => Rule::Proxy,
        _ => return None,
    })
}

/// Fields of a `users[].user`.
fn user_rule(field: &str) -> Option<Rule> {
    Some(match field {
        "token"
        | "client-certificate-data"
        | "client-key-data"
        | "username"
        | "password"
        | "extensions" => Rule::Safe,
        "exec" => Rule::Exec,
        "tokenFile" | "token-file" | "client-certificate" | "client-key" => {
            Rule::Refused(FILE_PATH)
        }
        "auth-provider" => {
            Rule::Refused("auth-provider plugins are not supported; use an inline token")
        }
        "as" | "as-uid" | "as-groups" | "as-user-extra" => Rule::Refused(IMPERSONATION),
        _ => return None,
    })
}

/// Fields of a `contexts[].context`.
fn context_rule(field: &str) -> Option<Rule> {
    matches!(field, "cluster" | "user" | "namespace" | "extensions").then_some(Rule::Safe)
}

/// Keys of a document, besides the three lists of named entries.
fn top_level_rule(field: &str) -> Option<Rule> {
    matches!(
        field,
        "apiVersion" | "kind" | "current-context" | "extensions"
    )
    .then_some(Rule::Safe)
}

/// Fields of `preferences` (kubectl's colours; nothing kube acts on).
fn preferences_rule(field: &str) -> Option<Rule> {
    matches!(field, "colors" | "extensions").then_some(Rule::Safe)
}

const UNKNOWN: &str = "not a kubeconfig field fleetnet-hub knows to be safe";

/// Accepts the kubeconfig `text` (from `origin`, its file) if every field of every document
/// keeps to `policy`; otherwise names every refused field (entry and field, never a value) and
/// `origin`.
pub fn vet(text: &str, origin: &str, policy: TrustPolicy) -> Result<Vetted, String> {
    // Told by line, column and field path only: the parser's own message quotes the line,
    // which may be the token's.
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| {
        format!(
            "invalid kubeconfig ({origin}): {}",
            parse_error::yaml_error(text, &e, &known_key)
        )
    })?;
    let mut findings = Findings::default();
    for document in &documents {
        findings.document(document, policy);
    }
    let documents_len = documents.len();
    if !findings.refused.is_empty() {
        return Err(format!(
            "kubeconfig refused ({origin}): {}",
            findings.refused.join("; ")
        ));
    }
    let mut kubeconfig = Kubeconfig::default();
    for (i, document) in documents.into_iter().enumerate() {
        let next = typed(document, i, documents_len, text)
            .map_err(|e| format!("invalid kubeconfig ({origin}): {e}"))?;
        kubeconfig = kubeconfig.merge(next).map_err(|e| {
            format!(
                "invalid kubeconfig ({origin}): {}",
                parse_error::kube_message(&e.to_string())
            )
        })?;
    }
    // Nobody is at a terminal: an interactive plugin would share the process's stdin, and
    // write its stderr, whatever it holds, straight into the pod's log.
    for user in kubeconfig
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        if let Some(exec) = &mut user.exec {
            exec.interactive_mode = Some(ExecInteractiveMode::Never);
        }
    }
    Ok(Vetted {
        kubeconfig,
        tls_verify_disabled: findings.tls_verify_disabled,
    })
}

/// Document `index` (of `count`) of `text` as kube's type; a value kube cannot take is named
/// by its field path (and its line in `text` when the parser can place it), never quoted.
fn typed(document: Value, index: usize, count: usize, text: &str) -> Result<Kubeconfig, String> {
    serde_path_to_error::deserialize(document).map_err(|e| {
        let mut path = String::new();
        for segment in e.path().iter() {
            use serde_path_to_error::Segment;
            match segment {
                Segment::Seq { index } => path.push_str(&format!("[#{index}]")),
                Segment::Map { key } | Segment::Enum { variant: key } => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(if known_key(key) { key } else { "?" });
                }
                Segment::Unknown => path.push_str(".?"),
            }
        }
        if count > 1 {
            path = format!("document {}: {path}", index + 1);
        }
        // The same text read as kube's type directly: the parser knows the line.
        let line = serde_saphyr::from_multiple::<Kubeconfig>(text)
            .err()
            .and_then(|e| e.location())
            .filter(|at| at.line() > 0)
            .map(|at| format!("line {}, column {} ", at.line(), at.column()))
            .unwrap_or_default();
        format!(
            "{line}at {path}: {}",
            parse_error::describe_serde(e.inner())
        )
    })
}

/// Every key a kubeconfig may hold (refused ones too): safe to name in an error, unlike the
/// keys and values of a file that holds other things.
fn known_key(key: &str) -> bool {
    cluster_rule(key).is_some()
        || user_rule(key).is_some()
        || context_rule(key).is_some()
        || top_level_rule(key).is_some()
        || preferences_rule(key).is_some()
        || matches!(
            key,
            "clusters"
                | "users"
                | "contexts"
                | "preferences"
                | "name"
                | "cluster"
                | "user"
                | "context"
                // exec and auth-provider
                | "command"
                | "args"
                | "env"
                | "value"
                | "installHint"
                | "provideClusterInfo"
                | "interactiveMode"
                | "config"
        )
}

/// A key as a refusal names it: a known one, or one that looks like a field name (a typo, a
/// field of a later kube); anything else (a value pasted where a key goes, a long token-like
/// string) is not written out.
fn shown(key: &str) -> &str {
    let field_like = key.len() <= 40
        && key.starts_with(|c: char| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    match known_key(key) || field_like {
        true => key,
        false => "<a key that does not look like a field name>",
    }
}

/// What the walk over the documents found.
#[derive(Debug, Default)]
struct Findings {
    /// `<place> (<why>)`, in document order.
    refused: Vec<String>,
    tls_verify_disabled: bool,
}

impl Findings {
    fn refuse(&mut self, place: &str, why: &str) {
        self.refused.push(format!("{place} ({why})"));
    }

    fn document(&mut self, document: &Value, policy: TrustPolicy) {
        let Value::Object(keys) = document else {
            self.refuse("the document", "a mapping expected");
            return;
        };
        for (key, value) in keys {
            match key.as_str() {
                "clusters" => self.entries(value, "clusters", "cluster", cluster_rule, policy),
                "users" => self.entries(value, "users", "user", user_rule, policy),
                "contexts" => self.entries(value, "contexts", "context", context_rule, policy),
                "preferences" => self.fields(value, "preferences", preferences_rule, policy),
                _ => self.field("", key, value, top_level_rule(key), policy),
            }
        }
    }

    /// A list of named entries, e.g. `clusters: [{name, cluster: {...}}]`.
    fn entries(
        &mut self,
        list: &Value,
        list_name: &str,
        inner: &str,
        rule: fn(&str) -> Option<Rule>,
        policy: TrustPolicy,
    ) {
        let entries = match list {
            Value::Null => return,
            Value::Array(entries) => entries,
            _ => return self.refuse(list_name, "a list expected"),
        };
        for (i, entry) in entries.iter().enumerate() {
            let Value::Object(keys) = entry else {
                self.refuse(&format!("{list_name}[#{i}]"), "a mapping expected");
                continue;
            };
            let label = match keys.get("name") {
                Some(Value::String(name)) => name.clone(),
                _ => format!("#{i}"),
            };
            let at = format!("{list_name}[{label}]");
            for (key, value) in keys {
                match key.as_str() {
                    "name" => {}
                    // Named as users have always seen them: `users[u].exec`.
                    k if k == inner => self.fields(value, &at, rule, policy),
                    _ => self.refuse(
                        &format!("{at}.{}", shown(key)),
                        &format!("{UNKNOWN}: an entry has only name and {inner}"),
                    ),
                }
            }
        }
    }

    /// The fields of one mapping at `at`, each by `rule`.
    fn fields(
        &mut self,
        map: &Value,
        at: &str,
        rule: fn(&str) -> Option<Rule>,
        policy: TrustPolicy,
    ) {
        let fields: &Map<String, Value> = match map {
            Value::Null => return,
            Value::Object(fields) => fields,
            _ => return self.refuse(at, "a mapping expected"),
        };
        for (key, value) in fields {
            self.field(at, key, value, rule(key), policy);
        }
    }

    /// One field `key` of the mapping at `at` (empty: the document).
    fn field(
        &mut self,
        at: &str,
        key: &str,
        value: &Value,
        rule: Option<Rule>,
        policy: TrustPolicy,
    ) {
        // An explicit null is what kube reads as absent.
        if value.is_null() {
            return;
        }
        let place = match at {
            "" => shown(key).to_string(),
            _ => format!("{at}.{}", shown(key)),
        };
        match rule {
            None => self.refuse(&place, UNKNOWN),
            Some(Rule::Safe) => {}
            Some(Rule::Refused(why)) => self.refuse(&place, why),
            Some(Rule::Server) => {
                if let Err(why) = server_allowed(value, policy) {
                    self.refuse(&place, why);
                }
            }
            Some(Rule::InsecureTls) => {
                if value == &Value::Bool(true) {
                    if policy.allow_insecure_tls {
                        self.tls_verify_disabled = true;
                    } else {
                        self.refuse(
                            &place,
                            "TLS verification cannot be disabled without --allow-insecure-member-tls",
                        );
                    }
                }
            }
            Some(Rule::Proxy) => {
                if let Err(why) = proxy_allowed(value, policy) {
                    self.refuse(&place, why);
                }
            }
            Some(Rule::Exec) => {
                if !policy.allow_exec {
                    self.refuse(
                        &place,
                        "runs a program in fleetnet-hub's pod; allow with --allow-member-exec-plugins",
                    );
                }
            }
        }
    }
}

/// A member's `server`: https; plain http only to a loopback host and only when the operator
/// allows it (the credentials would otherwise cross the network in clear text); nothing in
/// the URL that may be a secret (user info, a query string, a fragment), since the URL is
/// printed on `/members`, in `check` and in logs.
fn server_allowed(server: &Value, policy: TrustPolicy) -> Result<(), &'static str> {
    let Value::String(server) = server else {
        return Err("a URL expected");
    };
    // Checked on the text: the URI parser drops a fragment without a word.
    if server.contains('#') {
        return Err("a fragment (#...) in the server URL is not accepted: it may hold a secret");
    }
    let uri: http::Uri = server.parse().map_err(|_| "not a URL")?;
    let Some(authority) = uri.authority() else {
        return Err("not an https:// URL");
    };
    if authority.as_str().contains('@') {
        return Err("credentials in the URL are not accepted; use token");
    }
    if uri.query().is_some() {
        return Err(
            "a query string (?...) in the server URL is not accepted: it may hold a secret; use token",
        );
    }
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback(authority.host()) && policy.allow_plain_http_loopback => Ok(()),
        Some("http") if is_loopback(authority.host()) => Err(
            "plain http, even to loopback, is not accepted without --allow-plain-http-loopback-members; use https",
        ),
        Some("http") => Err(
            "plain http to a host that is not loopback would send the credentials in clear text; use https",
        ),
        _ => Err("not an https:// URL"),
    }
}

/// A cluster's `proxy-url`: only with [`TrustPolicy::allow_proxy`], and only `http://host:port`
/// (an HTTP CONNECT proxy: the member's TLS goes through it end to end), user info allowed (sent
/// as `Proxy-Authorization: Basic`), nothing else that would be dropped or misread (a path, a
/// query, a fragment). Never quoted: it may hold the proxy's password.
fn proxy_allowed(proxy: &Value, policy: TrustPolicy) -> Result<(), &'static str> {
    if !policy.allow_proxy {
        return Err(
            "proxies are not supported without --allow-member-proxy: the member's server must be reachable directly",
        );
    }
    let Value::String(proxy) = proxy else {
        return Err("a URL expected");
    };
    if proxy.contains(['#', '?']) {
        return Err("only http://host:port is accepted: no query or fragment");
    }
    let uri: http::Uri = proxy.parse().map_err(|_| "not a URL")?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https" | "socks5" | "socks5h" | "socks4" | "socks4a") => {
            return Err(
                "only an http:// proxy (HTTP CONNECT) is accepted; https:// and socks5:// proxies are not supported",
            );
        }
        _ => return Err("not an http:// URL: only an http:// proxy (HTTP CONNECT) is accepted"),
    }
    let Some(authority) = uri.authority() else {
        return Err("not an http:// URL: only an http:// proxy (HTTP CONNECT) is accepted");
    };
    if authority.host().is_empty() {
        return Err("no proxy host: only http://host:port is accepted");
    }
    if !matches!(uri.path(), "" | "/") {
        return Err("only http://host:port is accepted: no path");
    }
    Ok(())
}

/// `localhost`, 127.0.0.0/8 or ::1, as written: a name is not resolved (it could resolve
/// anywhere).
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests;
