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

/// A proxy URL as it may be printed: `http://host:port` (or `http://host`), without user info
/// (the proxy's credentials), path, query or fragment; `<not a URL>` when it cannot be read as
/// one.
pub fn printable_proxy(proxy: &str) -> String {
    const NOT_A_URL: &str = "<not a URL>";
    let before = proxy.split(['?', '#']).next().unwrap_or_default();
    let Ok(uri) = before.parse::<http::Uri>() else {
        return NOT_A_URL.into();
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return NOT_A_URL.into();
    };
    match authority.port_u16() {
        Some(port) => format!("{scheme}://{}:{port}", authority.host()),
        None => format!("{scheme}://{}", authority.host()),
    }
}

/// A member's server URL as it may be printed: scheme, host, port and path, without user info,
/// query or fragment (where a secret could sit); `<not a URL>` when it cannot be read as one.
pub fn printable_server(server: &str) -> String {
    const NOT_A_URL: &str = "<not a URL>";
    let before = server.split(['?', '#']).next().unwrap_or_default();
    let Ok(uri) = before.parse::<http::Uri>() else {
        return NOT_A_URL.into();
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return NOT_A_URL.into();
    };
    let host = authority.as_str().rsplit('@').next().unwrap_or_default();
    format!("{scheme}://{host}{}", uri.path())
}

/// `localhost`, 127.0.0.0/8 or ::1, as written: a name is not resolved (it could resolve
/// anywhere).
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t";
    const FILE: &str = "/kubeconfigs/m.yaml";

    /// One cluster `k` at `server` with `cluster_extra`, one user `u` with `users`.
    fn text_at(server: &str, users: &str, cluster_extra: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    server: {server}\n{cluster_extra}users:\n- name: u\n  user:\n{users}"
        )
    }

    fn text(users: &str, cluster_extra: &str) -> String {
        text_at("https://10.0.0.1", users, cluster_extra)
    }

    fn refused(text: &str) -> String {
        vet(text, FILE, TrustPolicy::default()).expect_err("refused")
    }

    /// The refusal `e` names every one of `places` and none of `values`.
    fn names(e: &str, places: &[&str], values: &[&str]) {
        for place in places {
            assert!(e.contains(place), "{place} in {e}");
        }
        for value in values {
            assert!(!e.contains(value), "{value} leaked into {e}");
        }
    }

    #[test]
    fn inline_credentials_pass() {
        let k = text(
            "    token: s3cr3t-token\n",
            &format!(
                "    certificate-authority-data: {CA}\n    tls-server-name: api.member\n    disable-compression: true\n    insecure-skip-tls-verify: false\n"
            ),
        );
        let vetted = vet(&k, FILE, TrustPolicy::default()).expect("accepted");
        assert!(!vetted.tls_verify_disabled);
        let cluster = vetted.kubeconfig.clusters[0]
            .cluster
            .as_ref()
            .expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1"));
        let k = text(
            "    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n    username: u\n    password: p\n",
            "",
        );
        assert!(vet(&k, FILE, TrustPolicy::default()).is_ok());
        // Explicit nulls are absent fields, as kube reads them.
        let k = text("    token: t\n    tokenFile: null\n", "    proxy-url: ~\n");
        assert!(vet(&k, FILE, TrustPolicy::default()).is_ok());
    }

    #[test]
    fn files_plugins_and_insecure_tls_are_refused_by_name_never_by_value() {
        let k = text(
            "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n    client-certificate: /etc/c.crt\n    client-key: /etc/c.key\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"curl evil\"]\n",
            "    certificate-authority: /etc/ca.crt\n    insecure-skip-tls-verify: true\n",
        );
        let places = [
            FILE,
            "users[u].tokenFile",
            "users[u].client-certificate",
            "users[u].client-key",
            "users[u].exec",
            "clusters[k].certificate-authority",
            "clusters[k].insecure-skip-tls-verify",
            "--allow-member-exec-plugins",
            "--allow-insecure-member-tls",
        ];
        let values = ["/var/run/secrets", "/etc/c.key", "curl evil", "/etc/ca.crt"];
        names(&refused(&k), &places, &values);
    }

    #[test]
    fn opt_ins_allow_exec_and_insecure_tls_and_say_so() {
        let k = text(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: kubelogin\n",
            "    insecure-skip-tls-verify: true\n",
        );
        let policy = TrustPolicy {
            allow_exec: true,
            allow_insecure_tls: true,
            ..TrustPolicy::default()
        };
        let vetted = vet(&k, FILE, policy).expect("allowed by the operator");
        assert!(vetted.tls_verify_disabled);
        let exec = vetted.kubeconfig.auth_infos[0]
            .auth_info
            .as_ref()
            .and_then(|u| u.exec.as_ref())
            .expect("exec kept");
        assert_eq!(exec.interactive_mode, Some(ExecInteractiveMode::Never));
        let k = text("    auth-provider:\n      name: gcp\n", "");
        assert!(
            vet(&k, FILE, policy)
                .expect_err("never")
                .contains("users[u].auth-provider")
        );
    }

    #[test]
    fn plain_http_only_to_loopback() {
        for server in [
            "http://10.0.0.1:8080",
            "http://member.example.com",
            "http://0.0.0.0:6443",
            "http://127.0.0.1.example.com",
        ] {
            let e = refused(&text_at(server, "    token: SECRET-TOKEN\n", ""));
            assert!(
                e.contains(&format!(
                    "kubeconfig refused ({FILE}): clusters[k].server (plain http"
                )) && e.contains("clear text"),
                "{server}: {e}"
            );
            assert!(!e.contains(server) && !e.contains("SECRET-TOKEN"), "{e}");
        }
        let loopback = TrustPolicy {
            allow_plain_http_loopback: true,
            ..TrustPolicy::default()
        };
        for server in [
            "http://127.0.0.1:8080",
            "http://127.1.2.3",
            "http://[::1]:8080",
            "http://localhost:8080",
        ] {
            let k = text_at(server, "    token: t\n", "");
            assert!(vet(&k, FILE, loopback).is_ok(), "{server}");
            let e = vet(&k, FILE, TrustPolicy::default()).expect_err("not without the opt-in");
            assert!(
                e.contains("clusters[k].server (plain http, even to loopback")
                    && e.contains("--allow-plain-http-loopback-members"),
                "{server}: {e}"
            );
        }
        let k = text_at("https://member.example.com", "    token: t\n", "");
        assert!(vet(&k, FILE, TrustPolicy::default()).is_ok());
        for (server, why) in [
            (
                "https://user:SECRET-PW@member.example.com",
                "credentials in the URL",
            ),
            (
                "https://member.example.com/?token=SECRET-PW",
                "a query string (?...) in the server URL",
            ),
            (
                "https://member.example.com/#SECRET-PW",
                "a fragment (#...) in the server URL",
            ),
            ("member.example.com:6443", "not an https:// URL"),
            ("ftp://member.example.com", "not an https:// URL"),
            ("[1, 2]", "a URL expected"),
        ] {
            let e = refused(&text_at(server, "    token: t\n", ""));
            assert!(
                e.contains("clusters[k].server") && e.contains(why),
                "{server}: {e}"
            );
            assert!(!e.contains("SECRET-PW"), "{e}");
        }
    }

    #[test]
    fn a_printed_server_has_no_user_info_query_or_fragment() {
        for (server, printed) in [
            ("https://10.0.0.1", "https://10.0.0.1/"),
            ("https://10.0.0.1:6443/base", "https://10.0.0.1:6443/base"),
            (
                "https://u:SECRET@h.example.com:443/p?token=SECRET#SECRET",
                "https://h.example.com:443/p",
            ),
            ("https://h/?token=SECRET", "https://h/"),
            ("https://h#SECRET", "https://h/"),
            ("not a url SECRET", "<not a URL>"),
            ("SECRET", "<not a URL>"),
        ] {
            assert_eq!(printable_server(server), printed, "{server}");
        }
    }

    #[test]
    fn proxy_url_is_refused_by_the_vetting_itself() {
        let e = refused(&text(
            "    token: t\n",
            "    proxy-url: http://proxy.example.com:3128\n",
        ));
        assert!(
            e.contains(&format!(
                "kubeconfig refused ({FILE}): clusters[k].proxy-url (proxies are not supported"
            )) && e.contains("--allow-member-proxy"),
            "{e}"
        );
        assert!(
            !e.contains("proxy.example.com") && !e.contains("http-proxy"),
            "{e}"
        );
    }

    const PROXY_ALLOWED: TrustPolicy = TrustPolicy {
        allow_exec: false,
        allow_insecure_tls: false,
        allow_plain_http_loopback: false,
        allow_proxy: true,
    };

    #[test]
    fn an_http_proxy_is_accepted_with_the_opt_in_and_its_credentials_never_shown() {
        for proxy in [
            "http://proxy.example.com:3128",
            "http://proxy.example.com:3128/",
            "http://user:SECRET-PROXY-PW@10.0.0.9:8080",
            "http://[fd00::1]:3128",
            "http://proxy.example.com",
        ] {
            let k = text("    token: t\n", &format!("    proxy-url: {proxy}\n"));
            let vetted = vet(&k, FILE, PROXY_ALLOWED).expect(proxy);
            let cluster = vetted.kubeconfig.clusters[0]
                .cluster
                .as_ref()
                .expect("cluster");
            // Used as written: the client takes its credentials from it.
            assert_eq!(cluster.proxy_url.as_deref(), Some(proxy));
            let debug = format!("{vetted:?}");
            assert!(
                !debug.contains("SECRET") && !debug.contains("proxy.example"),
                "{debug}"
            );
            // Without the opt-in, refused as before, and not quoted.
            let e = vet(&k, FILE, TrustPolicy::default()).expect_err(proxy);
            assert!(
                e.contains("clusters[k].proxy-url (proxies are not supported"),
                "{e}"
            );
            assert!(!e.contains("SECRET") && !e.contains(proxy), "{e}");
        }
    }

    #[test]
    fn only_http_proxies_are_accepted_and_a_refused_one_is_never_quoted() {
        for (proxy, why) in [
            (
                "https://user:SECRET-PROXY-PW@proxy.example.com:3128",
                "only an http:// proxy (HTTP CONNECT) is accepted; https:// and socks5://",
            ),
            (
                "socks5://user:SECRET-PROXY-PW@proxy.example.com:1080",
                "only an http:// proxy (HTTP CONNECT) is accepted; https:// and socks5://",
            ),
            (
                "socks5h://proxy.example.com:1080",
                "only an http:// proxy (HTTP CONNECT) is accepted",
            ),
            (
                "proxy.example.com:3128",
                "only an http:// proxy (HTTP CONNECT) is accepted",
            ),
            ("ftp://proxy.example.com", "not an http:// URL"),
            (
                "http://user:SECRET-PROXY-PW@proxy.example.com:3128/path",
                "no path",
            ),
            (
                "http://proxy.example.com:3128/?SECRET-PROXY-PW",
                "no query or fragment",
            ),
            (
                "http://proxy.example.com:3128#SECRET-PROXY-PW",
                "no query or fragment",
            ),
            ("not a url SECRET-PROXY-PW", "not a URL"),
            ("[1, 2]", "a URL expected"),
            ("\"\"", "not a URL"),
        ] {
            let k = text("    token: t\n", &format!("    proxy-url: {proxy}\n"));
            let e = vet(&k, FILE, PROXY_ALLOWED).expect_err(proxy);
            assert!(
                e.contains("clusters[k].proxy-url (") && e.contains(why),
                "{proxy}: {e}"
            );
            assert!(
                !e.contains("SECRET") && !e.contains("proxy.example"),
                "{proxy}: {e}"
            );
        }
    }

    #[test]
    fn a_printed_proxy_is_scheme_host_and_port_only() {
        for (proxy, printed) in [
            (
                "http://proxy.example.com:3128",
                "http://proxy.example.com:3128",
            ),
            (
                "http://user:SECRET@proxy.example.com:3128/",
                "http://proxy.example.com:3128",
            ),
            ("http://user:SECRET@10.0.0.9", "http://10.0.0.9"),
            ("http://[fd00::1]:3128", "http://[fd00::1]:3128"),
            ("http://h:1/p?SECRET#SECRET", "http://h:1"),
            ("SECRET", "<not a URL>"),
        ] {
            assert_eq!(printable_proxy(proxy), printed, "{proxy}");
        }
    }

    #[test]
    fn impersonation_is_refused() {
        let e = refused(&text(
            "    token: t\n    as: system:admin\n    as-groups: [system:masters]\n",
            "",
        ));
        let places = [
            "users[u].as (impersonation",
            "users[u].as-groups (impersonation",
        ];
        names(&e, &places, &["system:masters"]);
    }

    #[test]
    fn every_unknown_field_is_refused_where_it_is() {
        let k = format!(
            "{}\nfutureTopLevel: SECRET-1\npreferences:\n  colors: true\n  pager: SECRET-2\n---\ncontexts:\n- name: d\n  context: {{cluster: k, user: u, hook: SECRET-4}}\n  note: SECRET-5\n",
            text(
                "    token: t\n    token-command: SECRET-3\n",
                "    proxy-from-env: true\n"
            )
        );
        let places = [
            "futureTopLevel (not a kubeconfig field",
            "preferences.pager (not a kubeconfig field",
            "users[u].token-command (not a kubeconfig field",
            "clusters[k].proxy-from-env (not a kubeconfig field",
            "contexts[d].hook (not a kubeconfig field",
            "contexts[d].note (not a kubeconfig field",
        ];
        names(&refused(&k), &places, &["SECRET"]);
        // A value pasted where a key goes is not written out.
        let k = text(
            "    token: t\n    eyJhbGciOiJSUzI1NiIsImtpZCI6IlNFQ1JFVCJ9.SECRET: x\n    0123456789abcdef0123456789abcdef0123456789abcdefSECRET: y\n",
            "",
        );
        let e = refused(&k);
        assert_eq!(
            e.matches(
                "users[u].<a key that does not look like a field name> (not a kubeconfig field"
            )
            .count(),
            2,
            "{e}"
        );
        names(&e, &[], &["SECRET", "eyJ", "0123"]);
    }

    #[test]
    fn shapes_kube_would_not_expect_are_refused_or_invalid_never_quoted() {
        let e = refused("apiVersion: v1\nusers: \"SECRET-YAML\"\n");
        assert!(
            e.contains("users (a list expected)") && !e.contains("SECRET"),
            "{e}"
        );
        let e = refused("- SECRET-LIST\n");
        assert!(
            e.contains("the document (a mapping expected)") && !e.contains("SECRET"),
            "{e}"
        );
        let e = vet("clusters:\n- name: k\n  cluster: {server: https://a, disable-compression: \"SECRET-TYPE\"}\n", FILE, TrustPolicy::default())
            .expect_err("a string where kube wants a bool");
        assert!(
            e.starts_with(&format!("invalid kubeconfig ({FILE})")) && !e.contains("SECRET"),
            "{e}"
        );
        let e =
            vet("users: [\"SECRET-UNCLOSED", FILE, TrustPolicy::default()).expect_err("not YAML");
        assert!(
            e.starts_with(&format!("invalid kubeconfig ({FILE})")) && !e.contains("SECRET"),
            "{e}"
        );
    }

    #[test]
    fn parse_errors_are_told_by_line_column_and_path_never_quoted() {
        let good = text("    token: SECRET-OK\n", "");
        let with_token_line = |line: &str| good.replace("    token: SECRET-OK", line);
        for (case, k, place) in [
            (
                "typo on the token line",
                with_token_line("    token SECRET-TYPO\n    username: u"),
                "users[#0].user",
            ),
            (
                "unclosed quote",
                with_token_line("    token: \"SECRET-QUOTE"),
                "line ",
            ),
            (
                "duplicate key",
                with_token_line("    token: SECRET-DUP-1\n    token: SECRET-DUP-2"),
                "users[#0].user.token",
            ),
            ("tab", with_token_line("\ttoken: SECRET-TAB"), "line "),
            (
                "bad indentation",
                with_token_line("      token: SECRET-INDENT\n    username: u"),
                "line ",
            ),
            (
                "flow typo",
                with_token_line("    token: {SECRET-FLOW"),
                "line ",
            ),
            (
                "wrong type",
                good.replace(
                    "    server: https://10.0.0.1\n",
                    "    server: https://10.0.0.1\n    disable-compression: SECRET-TYPE\n",
                ),
                "at clusters[#0].cluster.disable-compression: a value of the wrong type, expected a boolean",
            ),
        ] {
            let e = vet(&k, FILE, TrustPolicy::default()).expect_err(case);
            println!("{case}: {e}");
            assert!(
                e.starts_with(&format!("invalid kubeconfig ({FILE}): ")),
                "{case}: {e}"
            );
            assert!(e.contains(place), "{case}: {place} in {e}");
            assert!(!e.contains("SECRET"), "{case}: {e}");
        }
    }

    #[test]
    fn every_document_is_vetted_and_merged_as_kube_would() {
        let second = "---\nclusters:\n- name: k2\n  cluster:\n    server: https://10.0.0.2\n    certificate-authority: /etc/ca.crt\n";
        let e = refused(&(text("    token: t\n", "") + "\n" + second));
        assert!(
            e.contains("clusters[k2].certificate-authority (a file path"),
            "{e}"
        );
        let second = "---\nclusters:\n- name: k2\n  cluster:\n    server: https://10.0.0.2\n";
        let vetted = vet(
            &(text("    token: t\n", "") + "\n" + second),
            FILE,
            TrustPolicy::default(),
        )
        .expect("accepted");
        let names: Vec<&str> = vetted
            .kubeconfig
            .clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["k", "k2"]);
    }
}
