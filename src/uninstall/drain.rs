//! The acting half of the drain: each rule's objects listed live (never a cache: nothing is
//! deleted because a view lacks it), then each taken back one write at a time
//! ([`super::rules::next_step`]) until it has no next step. A conflict re-reads the object and
//! goes on; an object gone is done.

use std::collections::BTreeMap;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
};
use kube::discovery::ApiGroup;
use serde::Serialize;

use super::rules::{Kind, Rule, Scope, Step, next_step};

/// Writes one object may take (status, metadata, finalizer, delete, plus re-reads on conflict).
const MAX_WRITES: usize = 8;

/// What the drain did on one side (a member, its hub namespace, the release namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    /// Our finalizers removed.
    pub finalizers: usize,
    /// Objects of our own deleted.
    pub deleted: usize,
    /// Conditions, annotations or labels of ours cleared from objects that stay.
    pub cleared: usize,
    /// What failed, each naming the kind and the object.
    pub errors: Vec<String>,
}

impl Tally {
    /// Adds `other`'s counts and errors.
    pub fn add(&mut self, other: Tally) {
        self.finalizers += other.finalizers;
        self.deleted += other.deleted;
        self.cleared += other.cleared;
        self.errors.extend(other.errors);
    }
}

/// Runs `rules` in order against `client`. A kind the cluster does not serve is skipped (its
/// CRD is not installed: nothing of it can be ours).
pub async fn apply(client: &kube::Client, rules: &[Rule]) -> Tally {
    let mut tally = Tally::default();
    let mut groups: BTreeMap<&'static str, Option<ApiGroup>> = BTreeMap::new();
    for rule in rules {
        let resource = match resource(client, rule.kind, &mut groups).await {
            Ok(Some(resource)) => resource,
            Ok(None) => continue,
            Err(e) => {
                tally.errors.push(e);
                continue;
            }
        };
        let api: Api<DynamicObject> = match &rule.scope {
            Scope::AllNamespaces => Api::all_with(client.clone(), &resource),
            Scope::Namespace(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        };
        let mut params = ListParams::default();
        if let Some(selector) = &rule.selector {
            params = params.labels(selector);
        }
        let listed = match api.list(&params).await {
            Ok(listed) => listed.items,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => {
                tally
                    .errors
                    .push(format!("{}: cannot list: {e}", rule.kind.kind));
                continue;
            }
        };
        for obj in listed {
            converge(client, &resource, rule, obj, &mut tally).await;
        }
    }
    tally
}

/// The resource of `kind` as `client`'s cluster serves it; `None` when it does not.
async fn resource(
    client: &kube::Client,
    kind: Kind,
    groups: &mut BTreeMap<&'static str, Option<ApiGroup>>,
) -> Result<Option<ApiResource>, String> {
    use k8s_openapi::api::{coordination::v1::Lease, core::v1, discovery::v1::EndpointSlice};
    let fixed = match (kind.group, kind.kind) {
        ("", "Service") => Some(ApiResource::erase::<v1::Service>(&())),
        ("", "Secret") => Some(ApiResource::erase::<v1::Secret>(&())),
        ("discovery.k8s.io", "EndpointSlice") => Some(ApiResource::erase::<EndpointSlice>(&())),
        ("coordination.k8s.io", "Lease") => Some(ApiResource::erase::<Lease>(&())),
        _ => None,
    };
    if fixed.is_some() {
        return Ok(fixed);
    }
    if !groups.contains_key(kind.group) {
        let group = match kube::discovery::group(client, kind.group).await {
            Ok(group) => Some(group),
            // Not served at all: none of its kinds is installed.
            Err(kube::Error::Discovery(_)) => None,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(format!("API group {}: discovery failed: {e}", kind.group)),
        };
        groups.insert(kind.group, group);
    }
    Ok(groups
        .get(kind.group)
        .and_then(Option::as_ref)
        .and_then(|g| served(g, kind.kind)))
}

/// `kind` in the group's preferred version, else in its most stable version that serves it:
/// a group's kinds need not share versions (the fleet's ServiceExport and its imports' CRDs
/// are served at different versions), and one missing from the preferred version is still
/// served, and may still hold objects of ours.
fn served(group: &ApiGroup, kind: &str) -> Option<ApiResource> {
    group
        .recommended_kind(kind)
        .or_else(|| {
            group
                .resources_by_stability()
                .into_iter()
                .find(|(r, _)| r.kind == kind)
        })
        .map(|(resource, _)| resource)
}

/// Takes one object back, write by write, counting in `tally`.
async fn converge(
    client: &kube::Client,
    resource: &ApiResource,
    rule: &Rule,
    mut obj: DynamicObject,
    tally: &mut Tally,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let ns = obj.metadata.namespace.clone();
    let api: Api<DynamicObject> = match &ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let named = format!(
        "{} {}{name}",
        rule.kind.kind,
        ns.as_deref().map(|n| format!("{n}/")).unwrap_or_default()
    );
    for _ in 0..MAX_WRITES {
        let Some(step) = next_step(&rule.treat, &obj) else {
            return;
        };
        let pp = PatchParams::default();
        let written = match &step {
            Step::Status(patch) => api.patch_status(&name, &pp, &Patch::Merge(patch)).await,
            Step::Meta { patch, .. } => api.patch(&name, &pp, &Patch::Merge(patch)).await,
            Step::Delete { uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => {
                        tally.deleted += 1;
                        return;
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match written {
            Ok(next) => {
                match step {
                    Step::Meta {
                        finalizer: true, ..
                    } => tally.finalizers += 1,
                    _ => tally.cleared += 1,
                }
                obj = next;
            }
            // Gone: nothing of ours is left on it.
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            // Changed since read: read it again and decide again.
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&name).await {
                Ok(Some(live)) => obj = live,
                Ok(None) => return,
                Err(e) => {
                    tally.errors.push(format!("{named}: cannot read: {e}"));
                    return;
                }
            },
            Err(e) => {
                tally.errors.push(format!("{named}: {e}"));
                return;
            }
        }
    }
    tally
        .errors
        .push(format!("{named}: still changing after {MAX_WRITES} writes"));
}
