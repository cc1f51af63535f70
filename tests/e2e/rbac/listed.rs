//! The rendered rules against a list kept here (#40 item 9): no wildcard, nothing more.

use super::*;

/// One rendered rule: where it applies (`ClusterRole` or `Role <namespace>`), API group, resource,
/// resourceNames and verbs (both sorted).
type Rule = (String, String, String, Vec<String>, Vec<String>);

/// Every (group, resource) of every rule of the rendered Roles and ClusterRoles, one row each.
fn rendered_rules(docs: &[Value]) -> std::collections::BTreeSet<Rule> {
    let strings = |v: &Value| -> Vec<String> {
        let mut s: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        s.sort();
        s
    };
    let mut rows = std::collections::BTreeSet::new();
    for d in of_kind(docs, "Role")
        .into_iter()
        .chain(of_kind(docs, "ClusterRole"))
    {
        let scope = match d["kind"].as_str() {
            Some("Role") => format!("Role {}", d["metadata"]["namespace"].as_str().unwrap_or("")),
            _ => "ClusterRole".to_string(),
        };
        for rule in d["rules"].as_array().expect("rules") {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    rows.insert((
                        scope.clone(),
                        group.clone(),
                        resource,
                        strings(&rule["resourceNames"]),
                        strings(&rule["verbs"]),
                    ));
                }
            }
        }
    }
    rows
}

fn rule(scope: &str, group: &str, resource: &str, names: &[&str], verbs: &[&str]) -> Rule {
    let mut names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut verbs: Vec<String> = verbs.iter().map(|s| s.to_string()).collect();
    names.sort();
    verbs.sort();
    (scope.into(), group.into(), resource.into(), names, verbs)
}

/// No `*` anywhere (group, resource, verb, name), and exactly the rules listed here: a chart
/// change that widens a grant (a verb, a resource, a name dropped from resourceNames, a Role
/// turned ClusterRole) fails until this list is changed with it. The list is what the binary
/// calls (grep `Api::` in src/): the audit-log test above proves the chart grants are used.
#[test]
fn rendered_rbac_has_no_wildcard_and_exactly_the_listed_rules() {
    const ISE: &str = "internalserviceexports";
    const ESE: &str = "endpointsliceexports";
    const ISI: &str = "internalserviceimports";
    const NET: &str = "networking.fleet.azure.com";
    let hub_rw = ["get", "create", "patch", "delete"];
    let members_value = format!("members={{{}}}", MEMBERS.join(","));
    let per_member = |rules: &mut Vec<Rule>| {
        // The five hub kinds the jobs read: one list + watch per kind for the whole replica.
        let read = ["list", "watch"];
        for kind in [ISE, ESE, ISI, "endpointsliceimports"] {
            rules.push(rule("ClusterRole", NET, kind, &[], &read));
        }
        let imcs = "internalmemberclusters";
        rules.push(rule(
            "ClusterRole",
            "cluster.kubernetes-fleet.io",
            imcs,
            &[],
            &read,
        ));
        for m in MEMBERS {
            let scope = format!("Role fleet-member-{m}");
            rules.push(rule(&scope, NET, ISE, &[], &hub_rw));
            rules.push(rule(&scope, NET, ESE, &[], &hub_rw));
            rules.push(rule(&scope, NET, ISI, &[], &hub_rw));
            let read_patch = ["get", "patch"];
            rules.push(rule(&scope, NET, "endpointsliceimports", &[], &read_patch));
            let imc = "internalmemberclusters";
            let fleet = "cluster.kubernetes-fleet.io";
            rules.push(rule(&scope, fleet, imc, &[], &["get"]));
            let status = format!("{imc}/status");
            rules.push(rule(&scope, fleet, &status, &[], &["update"]));
            // The member's MemberStatus (`crate::status`): read once, created, applied, deleted
            // with the member's cleanup.
            let own = "fleetnet.azure.com";
            let verbs = ["get", "create", "patch", "delete"];
            rules.push(rule(&scope, own, "memberstatuses", &[], &verbs));
        }
    };
    let release = format!("Role {RELEASE_NS}");
    // Cleanup records, as src/fleet/cleanup.rs record_name names them: <id>-cleanup-<member>-
    // <first 8 hex digits of sha256(member)>. The audit-log test above proves the binary deletes
    // exactly these with this grant (a 403 or an unused grant fails it).
    assert_eq!(
        MEMBERS,
        ["member-1", "member-2"],
        "the names below are of these members"
    );
    let records = [
        "fleetnet-hub-cleanup-member-1-9811fb1b",
        "fleetnet-hub-cleanup-member-2-24641ec7",
    ];

    // Leader election (the default) with --cleanup-on-remove.
    // Member Secrets (controller.memberSecrets, on by default): listed and watched by label.
    let member_secrets = rule(&release, "", "secrets", &[], &["list", "watch"]);
    let mut want = vec![
        member_secrets.clone(),
        rule(&release, "", "secrets", &[], &["create", "list"]),
        rule(&release, "", "secrets", &records, &["delete"]),
        rule(
            &release,
            "coordination.k8s.io",
            "leases",
            &[RELEASE],
            &["get", "update"],
        ),
        rule(&release, "coordination.k8s.io", "leases", &[], &["create"]),
    ];
    per_member(&mut want);
    let leader = render(
        RELEASE,
        "charts/fleetnet-hub",
        &[
            "--set",
            &members_value,
            "--set",
            "controller.cleanupOnRemove=true",
        ],
    );
    // Sharded: the replicas' announcement Leases are named after their pods (plus a random
    // suffix), and abandoned ones are deleted by any replica: no name to list.
    let mut want_sharded = vec![
        member_secrets,
        rule(
            &release,
            "coordination.k8s.io",
            "leases",
            &[],
            &["list", "create", "update", "delete"],
        ),
    ];
    per_member(&mut want_sharded);
    let sharded = render(
        RELEASE,
        "charts/fleetnet-hub",
        &[
            "--set",
            &members_value,
            "--set",
            "leaderElection.shardMembers=true",
            "--set",
            "replicaCount=3",
        ],
    );
    // The member side: one ClusterRole, since the objects read and the users' objects written
    // are in every namespace of a member; the objects fleetnet-hub owns there are written through
    // a Role in the fleet system namespace only.
    let system = format!("Role {SYSTEM}");
    let every = ["get", "list", "watch", "create", "patch", "delete"];
    let want_member = vec![
        rule(&system, "", "services", &[], &["create", "patch", "delete"]),
        rule(
            &system,
            "discovery.k8s.io",
            "endpointslices",
            &[],
            &["create", "update", "delete"],
        ),
        rule("ClusterRole", NET, "serviceimports", &[], &every),
        rule(
            "ClusterRole",
            NET,
            "serviceimports/status",
            &[],
            &["update"],
        ),
        rule(
            "ClusterRole",
            NET,
            "multiclusterservices",
            &[],
            &["get", "list", "watch", "patch", "delete"],
        ),
        rule(
            "ClusterRole",
            NET,
            "multiclusterservices/status",
            &[],
            &["patch"],
        ),
        rule(
            "ClusterRole",
            NET,
            "serviceexports",
            &[],
            &["get", "list", "watch", "patch", "delete"],
        ),
        rule("ClusterRole", NET, "serviceexports/status", &[], &["patch"]),
        rule(
            "ClusterRole",
            "",
            "services",
            &[],
            &["get", "list", "watch"],
        ),
        rule("ClusterRole", "events.k8s.io", "events", &[], &["create"]),
        rule(
            "ClusterRole",
            "discovery.k8s.io",
            "endpointslices",
            &[],
            &["get", "list", "watch", "patch"],
        ),
    ];
    let member = render("fleetnet-hub-member", "charts/fleetnet-hub-member", &[]);

    for (what, docs, want) in [
        ("hub, leader election + cleanup", &leader, want),
        ("hub, sharded", &sharded, want_sharded),
        ("member", &member, want_member),
    ] {
        let got = rendered_rules(docs);
        let wildcards: Vec<&Rule> = got
            .iter()
            .filter(|(_, g, r, names, verbs)| {
                g == "*"
                    || r == "*"
                    || r.ends_with("/*")
                    || names.iter().chain(verbs).any(|s| s == "*")
            })
            .collect();
        assert!(wildcards.is_empty(), "{what}: wildcards in {wildcards:#?}");
        let want: std::collections::BTreeSet<Rule> = want.into_iter().collect();
        assert_eq!(
            got.difference(&want).collect::<Vec<_>>(),
            Vec::<&Rule>::new(),
            "{what}: rendered but not in the list"
        );
        assert_eq!(
            want.difference(&got).collect::<Vec<_>>(),
            Vec::<&Rule>::new(),
            "{what}: listed but not rendered"
        );
        if what.starts_with("hub") {
            // Cluster-scoped in the hub: only the reader of the five kinds (its rules above).
            let names = |kind| {
                of_kind(docs, kind)
                    .iter()
                    .map(|d| {
                        d["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    })
                    .collect::<Vec<_>>()
            };
            let reader = format!("{RELEASE}-hub-reader");
            assert_eq!(names("ClusterRole"), names("ClusterRoleBinding"), "{what}");
            assert_eq!(names("ClusterRoleBinding"), [reader], "{what}");
        }
    }
}
