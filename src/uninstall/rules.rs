//! The pure half of the drain: what the controller leaves on each kind (the rules), and the
//! next write that takes one object back to what it would be without the controller
//! ([`next_step`]). A converged object has no next step, so a drain run twice writes nothing
//! the second time.

use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::api::{
    CLEANUP_FINALIZER, CONDITION_CONFLICT, CONDITION_VALID, LAST_SEEN_GENERATION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, UNIQUE_NAME_ANNOTATION,
};
use crate::multicluster::decide as mcs;
use crate::service_imports::SERVICE_IMPORT_FINALIZER;
use crate::slice_imports::decide as slice_imports;

/// Where a rule lists its objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    AllNamespaces,
    Namespace(String),
}

/// A kind, as discovery finds it: a core kind by its version, a fleet kind by its group (the
/// version the cluster prefers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub kind: &'static str,
}

/// Which objects of a rule are the controller's own (deleted); any other is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// Every object listed (the rule's scope and selector already say so).
    Always,
    /// Controlled (ownerReference `controller: true`) by an object of this kind.
    ControlledBy(&'static str),
    /// Named so.
    Named(String),
    /// Carrying this label with this value.
    Labelled(&'static str, String),
}

impl Owned {
    fn matches(&self, obj: &DynamicObject) -> bool {
        let meta = &obj.metadata;
        match self {
            Self::Always => true,
            Self::ControlledBy(kind) => meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == *kind),
            Self::Named(name) => meta.name.as_deref() == Some(name),
            Self::Labelled(key, value) => {
                meta.labels.as_ref().and_then(|l| l.get(*key)) == Some(value)
            }
        }
    }
}

/// What the controller leaves on the objects of one kind, and what of them is its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Treat {
    /// Its finalizer.
    pub finalizer: Option<&'static str>,
    /// The condition types it writes into `.status.conditions`.
    pub conditions: &'static [&'static str],
    /// The annotations and labels it writes.
    pub annotations: &'static [&'static str],
    pub labels: &'static [&'static str],
    /// Its own objects: deleted (once its finalizer is off); `None`: none are.
    pub delete_if: Option<Owned>,
}

const KEEP: Treat = Treat {
    finalizer: None,
    conditions: &[],
    annotations: &[],
    labels: &[],
    delete_if: None,
};

/// One kind in one scope, what to list and what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    pub scope: Scope,
    /// A label selector narrowing the list (never the only guard: [`Owned`] is checked too).
    pub selector: Option<String>,
    pub treat: Treat,
}

/// The next write for one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A merge patch of the status subresource (our conditions dropped).
    Status(Value),
    /// A merge patch of the object: our finalizer, annotations or labels dropped. Carries the
    /// resourceVersion read, so that it fails rather than drop what someone added since.
    Meta { patch: Value, finalizer: bool },
    /// Deleted (an object of our own), with its uid as a precondition.
    Delete { uid: Option<String> },
}

const CORE: &str = "";
const NETWORKING: &str = crate::api::GROUP;
pub(super) const SERVICE_EXPORT: Kind = Kind {
    group: NETWORKING,
    kind: "ServiceExport",
};

/// The member's side, in the order the drain goes: the MultiClusterServices first (their
/// ServiceImports and derived Services are theirs), the imported slices before the slices'
/// annotations.
pub fn member_rules(fleet_system_namespace: &str) -> Vec<Rule> {
    let fsn = Scope::Namespace(fleet_system_namespace.to_string());
    let mut rules = import_rules(&fsn);
    rules.extend(export_rules());
    rules
}

/// One rule for `group`/`kind` objects of `scope`, narrowed by `selector`.
fn rule(
    group: &'static str,
    kind: &'static str,
    scope: &Scope,
    selector: Option<String>,
    treat: Treat,
) -> Rule {
    Rule {
        kind: Kind { group, kind },
        scope: scope.clone(),
        selector,
        treat,
    }
}

/// The import side's and the MultiClusterService job's: MCSs, ServiceImports, derived Services
/// and imported slices in the fleet system namespace `fsn`.
fn import_rules(fsn: &Scope) -> Vec<Rule> {
    let all = Scope::AllNamespaces;
    vec![
        rule(
            NETWORKING,
            "MultiClusterService",
            &all,
            None,
            Treat {
                finalizer: Some(mcs::FINALIZER),
                conditions: &[CONDITION_VALID],
                labels: &[mcs::SERVICE_IMPORT_LABEL, mcs::DERIVED_SERVICE_LABEL],
                ..KEEP
            },
        ),
        rule(
            NETWORKING,
            "ServiceImport",
            &all,
            None,
            Treat {
                finalizer: Some(SERVICE_IMPORT_FINALIZER),
                delete_if: Some(Owned::ControlledBy("MultiClusterService")),
                ..KEEP
            },
        ),
        rule(
            CORE,
            "Service",
            fsn,
            Some(mcs::MCS_NAME_LABEL.to_string()),
            Treat {
                delete_if: Some(Owned::Always),
                ..KEEP
            },
        ),
        rule(
            "discovery.k8s.io",
            "EndpointSlice",
            fsn,
            Some(format!(
                "{}={}",
                slice_imports::MANAGED_BY_LABEL,
                slice_imports::CONTROLLER_ID
            )),
            Treat {
                delete_if: Some(Owned::Labelled(
                    slice_imports::MANAGED_BY_LABEL,
                    slice_imports::CONTROLLER_ID.to_string(),
                )),
                ..KEEP
            },
        ),
    ]
}

/// The export side's: the member's EndpointSlices' annotations and its ServiceExports.
fn export_rules() -> Vec<Rule> {
    let all = Scope::AllNamespaces;
    vec![
        rule(
            "discovery.k8s.io",
            "EndpointSlice",
            &all,
            None,
            Treat {
                annotations: &[
                    UNIQUE_NAME_ANNOTATION,
                    LAST_SEEN_GENERATION_ANNOTATION,
                    LAST_SEEN_TIMESTAMP_ANNOTATION,
                ],
                ..KEEP
            },
        ),
        rule(
            NETWORKING,
            SERVICE_EXPORT.kind,
            &all,
            None,
            Treat {
                finalizer: Some(CLEANUP_FINALIZER),
                conditions: &[CONDITION_VALID, CONDITION_CONFLICT],
                ..KEEP
            },
        ),
    ]
}

/// The hub's side of one member: what its agents write in its hub namespace.
pub fn hub_rules(hub_namespace: &str) -> Vec<Rule> {
    let ns = Scope::Namespace(hub_namespace.to_string());
    let ours = |kind| Rule {
        kind: Kind {
            group: NETWORKING,
            kind,
        },
        scope: ns.clone(),
        selector: None,
        treat: Treat {
            delete_if: Some(Owned::Always),
            ..KEEP
        },
    };
    vec![
        ours("InternalServiceExport"),
        ours("EndpointSliceExport"),
        ours("InternalServiceImport"),
        Rule {
            kind: Kind {
                group: NETWORKING,
                kind: "EndpointSliceImport",
            },
            scope: ns.clone(),
            selector: None,
            treat: Treat {
                finalizer: Some(slice_imports::CLEANUP_FINALIZER),
                annotations: &[slice_imports::LAST_OBSERVED_GENERATION_ANNOTATION],
                ..KEEP
            },
        },
        Rule {
            kind: Kind {
                group: crate::status::GROUP,
                kind: crate::status::KIND,
            },
            scope: ns,
            selector: None,
            treat: Treat {
                delete_if: Some(Owned::Labelled(
                    crate::status::MANAGED_BY_LABEL,
                    crate::status::MANAGED_BY.to_string(),
                )),
                ..KEEP
            },
        },
    ]
}

/// The process's own objects in the release namespace, gone last: the leader Lease, the shard
/// Leases and announcements, the cleanup records and their key.
pub fn process_rules(namespace: &str, id: &str) -> Vec<Rule> {
    let ns = Scope::Namespace(namespace.to_string());
    let delete = |kind, selector: Option<String>, owned| Rule {
        kind: Kind {
            group: if kind == "Lease" {
                "coordination.k8s.io"
            } else {
                CORE
            },
            kind,
        },
        scope: ns.clone(),
        selector,
        treat: Treat {
            delete_if: Some(owned),
            ..KEEP
        },
    };
    let lease_label = crate::ownership::shard::LEASE_LABEL;
    let record_label = crate::fleet::removal::records::CLEANUP_LABEL;
    vec![
        delete("Lease", None, Owned::Named(id.to_string())),
        delete(
            "Lease",
            Some(format!("{lease_label}={id}")),
            Owned::Labelled(lease_label, id.to_string()),
        ),
        delete(
            "Secret",
            Some(format!("{record_label}={id}")),
            Owned::Labelled(record_label, id.to_string()),
        ),
        delete(
            "Secret",
            None,
            Owned::Named(crate::fleet::removal::records::key_name(id)),
        ),
    ]
}

/// The next write that takes `obj` back to what it would be without the controller; `None`
/// once it is (or it is being deleted and only others' finalizers hold it).
pub fn next_step(treat: &Treat, obj: &DynamicObject) -> Option<Step> {
    let meta = &obj.metadata;
    let finalizers: Vec<&String> = meta.finalizers.iter().flatten().collect();
    let has_finalizer = treat
        .finalizer
        .is_some_and(|f| finalizers.iter().any(|x| *x == f));
    let rv = meta.resource_version.clone();
    let without_finalizer = || {
        let rest: Vec<&&String> = finalizers
            .iter()
            .filter(|f| Some(f.as_str()) != treat.finalizer)
            .collect();
        Step::Meta {
            patch: json!({"metadata": {"resourceVersion": rv, "finalizers": rest}}),
            finalizer: true,
        }
    };
    if treat.delete_if.as_ref().is_some_and(|o| o.matches(obj)) {
        return match (has_finalizer, meta.deletion_timestamp.is_some()) {
            (true, _) => Some(without_finalizer()),
            (false, true) => None,
            (false, false) => Some(Step::Delete {
                uid: meta.uid.clone(),
            }),
        };
    }
    if let Some(step) = status_step(treat, obj) {
        return Some(step);
    }
    let present = |map: &Option<std::collections::BTreeMap<String, String>>, keys: &[&str]| {
        keys.iter()
            .filter(|k| map.as_ref().is_some_and(|m| m.contains_key(**k)))
            .map(|k| (k.to_string(), Value::Null))
            .collect::<serde_json::Map<String, Value>>()
    };
    let annotations = present(&meta.annotations, treat.annotations);
    let labels = present(&meta.labels, treat.labels);
    if !annotations.is_empty() || !labels.is_empty() {
        let mut m = json!({"resourceVersion": rv});
        if !annotations.is_empty() {
            m["annotations"] = Value::Object(annotations);
        }
        if !labels.is_empty() {
            m["labels"] = Value::Object(labels);
        }
        return Some(Step::Meta {
            patch: json!({ "metadata": m }),
            finalizer: false,
        });
    }
    has_finalizer.then(without_finalizer)
}

/// Our conditions dropped from the status, the others kept as they are.
fn status_step(treat: &Treat, obj: &DynamicObject) -> Option<Step> {
    let conditions = obj.data.get("status")?.get("conditions")?.as_array()?;
    let ours = |c: &Value| {
        c.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| treat.conditions.contains(&t))
    };
    if !conditions.iter().any(ours) {
        return None;
    }
    let rest: Vec<&Value> = conditions.iter().filter(|c| !ours(c)).collect();
    Some(Step::Status(json!({
        "metadata": {"resourceVersion": obj.metadata.resource_version},
        "status": {"conditions": rest},
    })))
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
