use super::*;

fn kubeconfig_key(key: &str) -> bool {
    matches!(
        key,
        "users" | "user" | "name" | "token" | "clusters" | "cluster" | "server" | "apiVersion"
    )
}

const TEXT: &str = "apiVersion: v1\nclusters:\n- name: k\n  cluster:\n    server: https://a\n    # a comment\n    secret-ish: x\nusers:\n- name: a\n- name: u\n  user:\n    token SECRET-TYPO\n    certificate: |\n      token: inside\n    more: y\n";

#[test]
fn the_path_of_a_line_names_known_keys_and_list_items() {
    let path = |line| path_at(TEXT, line, &kubeconfig_key);
    assert_eq!(path(1), "apiVersion");
    assert_eq!(path(3), "clusters[#0].name");
    assert_eq!(path(5), "clusters[#0].cluster.server");
    assert_eq!(
        path(7),
        "clusters[#0].cluster.?",
        "unknown keys are not named"
    );
    assert_eq!(path(10), "users[#1].name");
    assert_eq!(
        path(12),
        "users[#1].user",
        "a line that is not a key: its parent"
    );
    assert_eq!(
        path(14),
        "users[#1].user.?",
        "block scalar text is not a key"
    );
    assert_eq!(path(15), "users[#1].user.?");
    let second = format!("{TEXT}---\nusers:\n- name: b\n");
    assert_eq!(
        path_at(&second, 18, &kubeconfig_key),
        "document 2: users[#0].name"
    );
    let marked = format!("---\n{TEXT}");
    assert_eq!(
        path_at(&marked, 6, &kubeconfig_key),
        "clusters[#0].cluster.server"
    );
}

#[test]
fn messages_never_quote_the_file() {
    for (text, secret) in [
        (
            "users:\n- name: u\n  user:\n    token SECRET-A\n    username: x\n",
            "SECRET-A",
        ),
        (
            "users:\n- name: u\n  user:\n    token: \"SECRET-B\n",
            "SECRET-B",
        ),
        (
            "users:\n- name: u\n  user:\n    token: SECRET-C\n    token: SECRET-D\n",
            "SECRET-D",
        ),
        (
            "users:\n- name: u\n  user:\n\ttoken: SECRET-E\n",
            "SECRET-E",
        ),
        ("users: [SECRET-F\n", "SECRET-F"),
        ("users:\n- name: u\n  user: {token: SECRET-G]\n", "SECRET-G"),
        (
            "users:\n  - name: u\n user:\n    token: SECRET-H\n",
            "SECRET-H",
        ),
        ("a: *SECRET-I\n", "SECRET-I"),
        ("a: !!binary SECRET-J\n", "SECRET-J"),
    ] {
        let e = serde_saphyr::from_multiple::<serde_json::Value>(text).expect_err("not valid YAML");
        let message = yaml_error(text, &e, &kubeconfig_key);
        assert!(message.starts_with("line "), "{message}");
        assert!(!message.contains(secret), "{secret} in {message}");
        assert!(!message.contains("SECRET"), "{message}");
    }
}

#[test]
fn a_typo_on_the_token_line_is_placed_by_line_column_and_path() {
    let text = "users:\n- name: u\n  user:\n    token SECRET-A\n    username: x\n";
    let e = serde_saphyr::from_multiple::<serde_json::Value>(text).expect_err("typo");
    assert!(
        e.to_string().contains("SECRET-A"),
        "the parser's own message quotes the line: {e}"
    );
    let message = yaml_error(text, &e, &kubeconfig_key);
    let place = yaml_place(text, &e, &kubeconfig_key);
    assert!((4..=5).contains(&place.line), "{place:?}");
    assert!(place.path.starts_with("users[#0].user"), "{place:?}");
    assert!(
        message.starts_with(&format!("line {}, column", place.line)),
        "{message}"
    );
}

#[test]
fn serde_messages_keep_what_the_type_expects_only() {
    #[derive(Debug, serde::Deserialize)]
    struct T {
        flag: bool,
        name: String,
    }
    let fine: T = serde_json::from_value(serde_json::json!({"flag": true, "name": "n"}))
        .expect("a valid value");
    assert!(fine.flag && fine.name == "n");
    let e = serde_json::from_value::<T>(serde_json::json!({"flag": "SECRET-1, expected x"}))
        .expect_err("wrong type");
    let message = describe_serde(&e);
    assert_eq!(message, "a value of the wrong type, expected a boolean");
    let e = serde_json::from_value::<T>(serde_json::json!({"flag": true})).expect_err("missing");
    assert_eq!(describe_serde(&e), "missing field name");
    let e =
        serde_json::from_value::<Vec<bool>>(serde_json::json!("SECRET-2")).expect_err("wrong type");
    assert!(!describe_serde(&e).contains("SECRET"));
    assert_eq!(
        describe_serde(&"custom SECRET-3 message"),
        "an invalid value"
    );
}

#[test]
fn member_config_errors_are_placed_never_quoted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("members.yaml");
    for (text, place) in [
        (
            "members:\n  alpha:\n    azureResourceGroup SECRET-RG\n    traceSamplingRatio: 1\n",
            "line 3, column 5 at members.alpha: ",
        ),
        (
            "members:\n  alpha:\n    traceSamplingRatio: SECRET-RATIO\n",
            "line 3, column 25 at members.alpha.traceSamplingRatio: a value of the wrong type",
        ),
        (
            "members:\n  Not_A_Member_SECRET:\n    traceSamplingRatio: [SECRET-LIST\n",
            "line 3, column 25 at members.?.traceSamplingRatio: ",
        ),
    ] {
        std::fs::write(&path, text).expect("write");
        let e = crate::fleet::MemberConfigFile::load(&path).expect_err("invalid");
        assert!(
            e.starts_with(&format!("invalid member config {}: ", path.display())),
            "{e}"
        );
        assert!(e.contains(place), "{place} in {e}");
        assert!(!e.contains("SECRET"), "{e}");
    }
}

#[test]
fn kube_messages_keep_their_fixed_heads_only() {
    assert_eq!(
        kube_message(
            "failed to load client key: failed to decode base64 data: Invalid symbol 36, offset 12."
        ),
        "failed to load client key: failed to decode base64 data (details withheld: they may quote the kubeconfig)"
    );
    assert_eq!(
        kube_message("failed to load current context: SECRET-CTX"),
        "failed to load current context (details withheld: they may quote the kubeconfig)"
    );
    assert_eq!(
        kube_message("cluster url is missing on selected cluster"),
        "cluster url is missing on selected cluster"
    );
    assert_eq!(
        kube_message("ServiceError: invalid tls-server-name \"SECRET-NAME\""),
        "ServiceError: invalid tls-server-name (details withheld: they may quote the kubeconfig)"
    );
    assert_eq!(
        kube_message("SECRET-UNKNOWN: whatever"),
        "invalid kubeconfig (details withheld: they may quote the kubeconfig)"
    );
    let e = kube::config::Kubeconfig::from_yaml(
        "users:\n- name: u\n  user:\n    token SECRET-T\n    username: x\n",
    )
    .expect_err("typo");
    let message = kubeconfig_error(&e, None);
    assert!(
        message.starts_with("failed to parse kubeconfig YAML: line "),
        "{message}"
    );
    assert!(
        !message.contains("SECRET") && !e.to_string().is_empty(),
        "{message}"
    );
}
