//! What an identity really did, as the apiserver saw it, against what RBAC grants it.
//!
//! The record is the kube-apiserver's own audit log (`--audit-log-path` with a policy at level
//! `Metadata` for the watched users; JSON lines), so nothing in the client can hide a request.
//! The grants are read from rendered Role / ClusterRole / (Cluster)RoleBinding manifests, and
//! matched the way the RBAC authorizer matches: group, resource[/subresource], verb, namespace
//! (a ClusterRole bound cluster-wide covers every namespace and cluster scope) and resourceNames
//! (which never match a request without a name: create, list, watch, deletecollection).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

/// An audit policy that records `users` at level Metadata (who, verb, object, response code;
/// no bodies) and nothing else.
pub fn policy(users: &[&str]) -> String {
    let users: Vec<String> = users.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n  - level: Metadata\n    users: [{}]\n  - level: None\n",
        users.join(", ")
    )
}

/// One request of the audited user.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub verb: String,
    /// `""` for the core group.
    pub group: String,
    /// `resource` or `resource/subresource`; empty for a non-resource request.
    pub resource: String,
    /// `""` at cluster scope (e.g. a list or watch across all namespaces).
    pub namespace: String,
    pub name: String,
    /// The path of a non-resource request (`/version`, `/apis/<group>`), else empty.
    pub path: String,
    pub code: u16,
}

impl Request {
    fn is_resource(&self) -> bool {
        self.path.is_empty()
    }
}

/// The requests `user` made, one per audit ID (the last stage logged: `ResponseComplete`, or
/// `ResponseStarted` for a watch still open when the log was read).
pub fn read(path: &Path, user: &str) -> Vec<Request> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read audit log {}: {e}", path.display()));
    let mut by_id: BTreeMap<String, Request> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let ev: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {line}"));
        if ev["user"]["username"].as_str() != Some(user) {
            continue;
        }
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let object = &ev["objectRef"];
        let resource = match (object["resource"].as_str(), object["subresource"].as_str()) {
            (Some(r), Some(sub)) if !sub.is_empty() => format!("{r}/{sub}"),
            (Some(r), _) => r.to_string(),
            (None, _) => String::new(),
        };
        let path = if object.is_object() {
            String::new()
        } else {
            s(&ev["requestURI"])
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let request = Request {
            verb: s(&ev["verb"]),
            group: s(&object["apiGroup"]),
            resource,
            namespace: s(&object["namespace"]),
            name: s(&object["name"]),
            path,
            code: ev["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        };
        by_id.insert(s(&ev["auditID"]), request);
    }
    by_id.into_values().collect()
}

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// A Role (or a ClusterRole bound by a RoleBinding) in this namespace.
    Namespace(String),
    /// A ClusterRole bound by a ClusterRoleBinding: every namespace and cluster scope.
    Everywhere,
}

/// One verb on one resource, granted to the subject by one binding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub scope: Scope,
    pub names: Vec<String>,
    /// `Role <ns>/<name>` or `ClusterRole <name>`.
    pub source: String,
}

impl Grant {
    /// Whether the RBAC authorizer would allow `r` by this grant.
    pub fn covers(&self, r: &Request) -> bool {
        let scope = match &self.scope {
            Scope::Everywhere => true,
            Scope::Namespace(ns) => *ns == r.namespace,
        };
        let nameless = matches!(
            r.verb.as_str(),
            "create" | "list" | "watch" | "deletecollection"
        ) && !r.resource.contains('/');
        let name = self.names.is_empty()
            || (!nameless && !r.name.is_empty() && self.names.contains(&r.name));
        r.is_resource()
            && self.group == r.group
            && self.resource == r.resource
            && self.verb == r.verb
            && scope
            && name
    }
}

/// Every grant the rendered manifests `docs` give the ServiceAccount `sa_namespace/sa_name`.
/// Panics on a binding of the subject that refers to a role the manifests do not render.
pub fn grants(docs: &[Value], sa_namespace: &str, sa_name: &str) -> Vec<Grant> {
    let kind = |d: &Value| d["kind"].as_str().unwrap_or_default().to_string();
    let meta = |d: &Value, k: &str| d["metadata"][k].as_str().unwrap_or_default().to_string();
    let roles: BTreeMap<(String, String), &Value> = docs
        .iter()
        .filter(|d| kind(d) == "Role")
        .map(|d| ((meta(d, "namespace"), meta(d, "name")), &d["rules"]))
        .collect();
    let cluster_roles: BTreeMap<String, &Value> = docs
        .iter()
        .filter(|d| kind(d) == "ClusterRole")
        .map(|d| (meta(d, "name"), &d["rules"]))
        .collect();
    let binds_subject = |d: &Value| {
        d["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa_name && s["namespace"] == sa_namespace
        })
    };
    let mut out = vec![];
    for b in docs.iter().filter(|d| binds_subject(d)) {
        let ref_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
        let ref_name = b["roleRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (rules, scope, source) = match (kind(b).as_str(), ref_kind) {
            ("RoleBinding", "Role") => {
                let ns = meta(b, "namespace");
                let rules = roles
                    .get(&(ns.clone(), ref_name.clone()))
                    .unwrap_or_else(|| {
                        panic!(
                            "RoleBinding {ns}/{} refers to Role {ref_name}, not rendered",
                            meta(b, "name")
                        )
                    });
                (
                    *rules,
                    Scope::Namespace(ns.clone()),
                    format!("Role {ns}/{ref_name}"),
                )
            }
            ("RoleBinding", "ClusterRole") => {
                let ns = meta(b, "namespace");
                let rules = cluster_roles
                    .get(&ref_name)
                    .unwrap_or_else(|| panic!("ClusterRole {ref_name} not rendered"));
                (
                    *rules,
                    Scope::Namespace(ns.clone()),
                    format!("ClusterRole {ref_name} (RoleBinding in {ns})"),
                )
            }
            ("ClusterRoleBinding", "ClusterRole") => {
                let rules = cluster_roles
                    .get(&ref_name)
                    .unwrap_or_else(|| panic!("ClusterRole {ref_name} not rendered"));
                (*rules, Scope::Everywhere, format!("ClusterRole {ref_name}"))
            }
            _ => continue,
        };
        for rule in rules.as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            let names = list("resourceNames");
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        out.push(Grant {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            scope: scope.clone(),
                            names: names.clone(),
                            source: source.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// One line of the used-vs-granted table.
#[derive(Debug, Default)]
pub struct Row {
    /// Namespaces the uses were seen in (`(cluster)` for cluster scope), with counts.
    pub seen: BTreeMap<String, usize>,
    /// Uses that were only implied: a `list` counted because the same view was watched.
    pub implied: usize,
    pub codes: BTreeSet<u16>,
    pub granted_by: BTreeSet<String>,
}

impl Row {
    fn used(&self) -> bool {
        !self.seen.is_empty()
    }
}

/// `(cluster, group, resource, verb, scope)`: the row's key.
pub type Key = (String, String, String, String, String);

/// The comparison of one or more clusters' requests with their grants.
#[derive(Debug, Default)]
pub struct Comparison {
    pub rows: BTreeMap<Key, Row>,
    /// `(cluster, verb, path)` → response codes of non-resource requests (discovery,
    /// `/version`): allowed to every authenticated user by the apiserver's default roles
    /// (`system:discovery`, `system:public-info-viewer`), never by the charts.
    pub non_resource: BTreeMap<(String, String, String), BTreeSet<u16>>,
    /// Requests the apiserver refused with 403.
    pub denied: Vec<(String, Request)>,
}

impl Comparison {
    /// Adds one cluster. `class` names a namespace's row (e.g. every member hub namespace
    /// as `fleet-member-*`, since each gets the same Role); a grant everywhere is `(all)`.
    pub fn add(
        &mut self,
        cluster: &str,
        requests: &[Request],
        grants: &[Grant],
        class: impl Fn(&str) -> String,
    ) {
        let scope_label = |g: &Grant| {
            let scope = match &g.scope {
                Scope::Everywhere => "(all)".to_string(),
                Scope::Namespace(ns) => class(ns),
            };
            if g.names.is_empty() {
                scope
            } else {
                format!("{scope} name={}", g.names.join(","))
            }
        };
        let key = |g: &Grant| -> Key {
            (
                cluster.to_string(),
                g.group.clone(),
                g.resource.clone(),
                g.verb.clone(),
                scope_label(g),
            )
        };
        for g in grants {
            self.rows
                .entry(key(g))
                .or_default()
                .granted_by
                .insert(g.source.clone());
        }
        // A watch implies the list of the same view (a watcher lists first; a streaming list
        // is a watch): the pair is used when the controller watches.
        let implied: Vec<Request> = requests
            .iter()
            .filter(|r| r.verb == "watch" && r.is_resource())
            .map(|r| Request {
                verb: "list".into(),
                ..r.clone()
            })
            .collect();
        let all = requests
            .iter()
            .map(|r| (r, false))
            .chain(implied.iter().map(|r| (r, true)));
        for (r, is_implied) in all {
            if r.code == 403 && !is_implied {
                self.denied.push((cluster.to_string(), r.clone()));
            }
            if !r.is_resource() {
                self.non_resource
                    .entry((cluster.to_string(), r.verb.clone(), r.path.clone()))
                    .or_default()
                    .insert(r.code);
                continue;
            }
            let seen_in = if r.namespace.is_empty() {
                "(cluster)".to_string()
            } else {
                r.namespace.clone()
            };
            let covering: Vec<Key> = grants.iter().filter(|g| g.covers(r)).map(key).collect();
            let keys = if covering.is_empty() {
                let ns = if r.namespace.is_empty() {
                    "(cluster)".to_string()
                } else {
                    class(&r.namespace)
                };
                vec![(
                    cluster.to_string(),
                    r.group.clone(),
                    r.resource.clone(),
                    r.verb.clone(),
                    ns,
                )]
            } else {
                covering
            };
            for k in keys {
                let row = self.rows.entry(k).or_default();
                if is_implied {
                    row.implied += 1;
                    row.seen.entry(seen_in.clone()).or_insert(0);
                } else {
                    *row.seen.entry(seen_in.clone()).or_insert(0) += 1;
                    row.codes.insert(r.code);
                }
            }
        }
    }

    /// Granted but never used.
    pub fn unused(&self) -> Vec<&Key> {
        self.rows
            .iter()
            .filter(|(_, r)| !r.granted_by.is_empty() && !r.used())
            .map(|(k, _)| k)
            .collect()
    }

    /// Used but not granted.
    pub fn ungranted(&self) -> Vec<&Key> {
        self.rows
            .iter()
            .filter(|(_, r)| r.granted_by.is_empty() && r.used())
            .map(|(k, _)| k)
            .collect()
    }

    /// The table, one line per (cluster, verb, resource, scope).
    pub fn table(&self) -> String {
        let mut lines = vec![[
            "cluster".to_string(),
            "verb".into(),
            "resource".into(),
            "scope".into(),
            "used (requests by namespace; codes)".into(),
            "granted by".into(),
            "verdict".into(),
        ]];
        for ((cluster, group, resource, verb, scope), row) in &self.rows {
            let resource = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let mut used: Vec<String> = row
                .seen
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(ns, n)| format!("{ns}×{n}"))
                .collect();
            if row.implied > 0 && used.is_empty() {
                used.push(format!("implied by watch×{}", row.implied));
            }
            let codes: Vec<String> = row.codes.iter().map(u16::to_string).collect();
            let used = if used.is_empty() {
                "-".to_string()
            } else {
                format!("{}; {}", used.join(" "), codes.join(","))
            };
            let granted = if row.granted_by.is_empty() {
                "-".to_string()
            } else {
                row.granted_by
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" + ")
            };
            let verdict = match (row.used(), !row.granted_by.is_empty()) {
                (true, true) => "ok",
                (false, true) => "GRANTED, NEVER USED",
                (true, false) => "USED, NOT GRANTED",
                (false, false) => "?",
            };
            lines.push([
                cluster.clone(),
                verb.clone(),
                resource,
                scope.clone(),
                used,
                granted,
                verdict.into(),
            ]);
        }
        for ((cluster, verb, path), codes) in &self.non_resource {
            let codes: Vec<String> = codes.iter().map(u16::to_string).collect();
            lines.push([
                cluster.clone(),
                verb.clone(),
                format!("(non-resource) {path}"),
                "-".into(),
                codes.join(","),
                "apiserver default (system:discovery / system:public-info-viewer)".into(),
                if codes.iter().any(|c| c == "403") {
                    "DENIED".into()
                } else {
                    "ok (not chart RBAC)".into()
                },
            ]);
        }
        let widths: Vec<usize> = (0..7)
            .map(|i| {
                lines
                    .iter()
                    .map(|l| l[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        lines
            .iter()
            .map(|l| {
                l.iter()
                    .zip(&widths)
                    .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                    .collect::<Vec<_>>()
                    .join(" | ")
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(verb: &str, resource: &str, ns: &str, name: &str) -> Request {
        Request {
            verb: verb.into(),
            group: "coordination.k8s.io".into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            path: String::new(),
            code: 200,
        }
    }

    #[test]
    fn resource_names_match_like_rbac() {
        let g = Grant {
            group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            verb: "get".into(),
            scope: Scope::Namespace("ns".into()),
            names: vec!["l".into()],
            source: "Role ns/r".into(),
        };
        assert!(g.covers(&req("get", "leases", "ns", "l")));
        assert!(!g.covers(&req("get", "leases", "ns", "other")));
        assert!(!g.covers(&req("get", "leases", "other-ns", "l")));
        let create = Grant {
            verb: "create".into(),
            ..g.clone()
        };
        // A create is authorized without a name: resourceNames never match it.
        assert!(!create.covers(&req("create", "leases", "ns", "l")));
    }
}
