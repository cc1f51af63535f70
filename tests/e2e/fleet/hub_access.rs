//! The chart's hub access for members it does not list (`rbac.hubAccess`, issue #42): rendered
//! as the controller needs it; the inventory's reads with `controller.memberInventory`. The
//! rendering applied and used by the controller: [`super::inventory`]'s test runs on it.

use super::*;

use serde_json::{Value, json};
use support::chart::{RELEASE_NS, of_kind, render_chart};

/// The hub Role's rules as the chart ships them (files/hub-member-role.yaml).
fn member_role_rules() -> Value {
    let path = repo().join("charts/fleetnet-hub/files/hub-member-role.yaml");
    let text = std::fs::read_to_string(path).expect("hub-member-role.yaml");
    let role: Value = serde_saphyr::from_str(&text).expect("a Role");
    role["rules"].clone()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    of_kind(objects, kind)
        .into_iter()
        .find(|o| o["metadata"]["name"] == name)
}

fn args(objects: &[Value]) -> Vec<String> {
    let deployment = of_kind(objects, "Deployment")[0];
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    serde_json::from_value(args.clone()).expect("args")
}

/// The ServiceAccount a binding grants to.
fn bound_to_the_controller(binding: &Value, role_kind: &str, role: &str) {
    assert_eq!(binding["roleRef"]["kind"], role_kind, "{binding}");
    assert_eq!(binding["roleRef"]["name"], role, "{binding}");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "fleetnet-hub", "namespace": RELEASE_NS}])
    );
}

#[test]
fn the_chart_grants_hub_writes_cluster_wide_and_the_inventorys_reads_only_when_asked() {
    let default = render_chart(&[]);
    for name in ["fleetnet-hub-hub-writes", "fleetnet-hub-inventory"] {
        assert!(
            named(&default, "ClusterRole", name).is_none(),
            "{name} by default"
        );
    }
    assert!(
        !args(&default)
            .iter()
            .any(|a| a.starts_with("--member-inventory"))
    );

    let rendered = render_chart(&[
        "--set",
        "rbac.hubAccess=clusterWide",
        "--set",
        "controller.memberInventory=true",
    ]);
    let writes = named(&rendered, "ClusterRole", "fleetnet-hub-hub-writes").expect("rendered");
    assert_eq!(
        writes["rules"],
        member_role_rules(),
        "the per-member Role's rules, verbatim"
    );
    let binding = named(&rendered, "ClusterRoleBinding", "fleetnet-hub-hub-writes").expect("bound");
    bound_to_the_controller(binding, "ClusterRole", "fleetnet-hub-hub-writes");

    let reads = named(&rendered, "ClusterRole", "fleetnet-hub-inventory").expect("rendered");
    assert_eq!(
        reads["rules"],
        json!([
            {"apiGroups": ["cluster.kubernetes-fleet.io"], "resources": ["memberclusters"], "verbs": ["list", "watch"]},
            {"apiGroups": ["cluster.kubernetes-fleet.io"], "resources": ["internalmemberclusters"], "verbs": ["get"]},
        ])
    );
    let binding = named(&rendered, "ClusterRoleBinding", "fleetnet-hub-inventory").expect("bound");
    bound_to_the_controller(binding, "ClusterRole", "fleetnet-hub-inventory");
    let roles: Vec<&Value> = of_kind(&rendered, "Role")
        .into_iter()
        .filter(|r| r["metadata"]["name"] == "fleetnet-hub-inventory")
        .collect();
    let rules_in = |ns: &str| {
        let role = roles.iter().find(|r| r["metadata"]["namespace"] == ns);
        role.map(|r| r["rules"].clone())
    };
    assert_eq!(
        rules_in("fleet-system"),
        Some(
            json!([{"apiGroups": ["multicluster.x-k8s.io"], "resources": ["clusterprofiles"], "verbs": ["list", "watch"]}])
        )
    );
    // The token Secrets are read in the release namespace, where the member Secrets' Role
    // (on by default) grants the same list and watch: not granted twice.
    assert_eq!(
        rules_in(RELEASE_NS),
        None,
        "granted by the member Secrets' Role"
    );
    let release_role = of_kind(&rendered, "Role")
        .into_iter()
        .find(|r| {
            r["metadata"]["name"] == "fleetnet-hub" && r["metadata"]["namespace"] == RELEASE_NS
        })
        .expect("the release namespace's Role");
    let secrets_read =
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]});
    assert!(
        release_role["rules"]
            .as_array()
            .is_some_and(|rules| rules.contains(&secrets_read)),
        "{release_role}"
    );
    let without_member_secrets = render_chart(&[
        "--set",
        "rbac.hubAccess=clusterWide",
        "--set",
        "controller.memberInventory=true",
        "--set",
        "controller.memberSecrets=false",
    ]);
    let own = of_kind(&without_member_secrets, "Role")
        .into_iter()
        .find(|r| {
            r["metadata"]["name"] == "fleetnet-hub-inventory"
                && r["metadata"]["namespace"] == RELEASE_NS
        })
        .expect("the inventory's own Secrets Role without member Secrets");
    assert_eq!(own["rules"], json!([secrets_read]));
    let args = args(&rendered);
    for flag in [
        "--member-inventory=true",
        "--inventory-profile-namespace=fleet-system",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag}: {args:?}");
    }
}

#[test]
fn an_unknown_hub_access_is_refused_by_the_schema() {
    let out = std::process::Command::new(support::chart::helm())
        .args(["template", "x"])
        .arg(repo().join("charts/fleetnet-hub"))
        .args(["--set", "rbac.hubAccess=everything"])
        .output()
        .expect("helm");
    assert!(!out.status.success(), "rendered");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hubAccess"), "{err}");
}
