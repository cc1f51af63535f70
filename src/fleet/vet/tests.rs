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
        e.matches("users[u].<a key that does not look like a field name> (not a kubeconfig field")
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
    let e = vet("users: [\"SECRET-UNCLOSED", FILE, TrustPolicy::default()).expect_err("not YAML");
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
