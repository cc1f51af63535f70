//! What an identity may do, asked of its own API server (SelfSubjectAccessReview), and what
//! the jobs need: in each member, and in the hub (the chart's per-member Role, read from the
//! very file the chart renders, and the release namespace's Leases and Secrets).

use futures::{StreamExt, stream};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, PostParams};

use super::problem::{Category, Problem, classify};

/// The chart's Role in each member's hub namespace: exactly what the jobs do there.
const HUB_MEMBER_ROLE: &str = include_str!("../../charts/fleetnet-hub/files/hub-member-role.yaml");

/// Reviews asked at once: a fleet's worth of hub namespaces stays quick without a burst.
const AT_ONCE: usize = 8;

/// One permission: `verb` on `group`/`resource` (`resource/subresource`), in `namespace` or
/// cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
    /// One object by name (a rule with `resourceNames` allows no other).
    pub name: Option<String>,
}

impl Permission {
    /// `(group, resource, verb)` in `namespace` (cluster-wide when `None`).
    pub fn new((group, resource, verb): (&str, &str, &str), namespace: Option<&str>) -> Permission {
        Permission {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: namespace.map(str::to_string),
            name: None,
        }
    }

    /// The permission on the object `name` only.
    pub fn named(mut self, name: &str) -> Permission {
        self.name = Some(name.into());
        self
    }
}

/// `patch networking.fleet.azure.com/serviceexports in ns`, `get services` (the core group).
impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.group.as_str() {
            "" => write!(f, "{} {}", self.verb, self.resource)?,
            group => write!(f, "{} {group}/{}", self.verb, self.resource)?,
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => Ok(()),
        }
    }
}

/// What the jobs do in each member's hub namespace `namespace`: the rules of the chart's Role.
pub fn hub_member_permissions(namespace: &str) -> Vec<Permission> {
    // Compiled in from the chart and unit-tested: it parses.
    let role: Role = serde_saphyr::from_str(HUB_MEMBER_ROLE).unwrap_or_default();
    let mut wanted = vec![];
    for rule in role.rules.unwrap_or_default() {
        let groups = rule.api_groups.unwrap_or_default();
        let resources = rule.resources.unwrap_or_default();
        for group in &groups {
            for resource in &resources {
                for verb in &rule.verbs {
                    wanted.push(Permission::new((group, resource, verb), Some(namespace)));
                }
            }
        }
    }
    wanted
}

/// Those of `wanted` the client's identity may not do; a review that cannot be asked is the
/// problem (unreachable, authentication, …).
pub async fn missing(
    client: &kube::Client,
    wanted: Vec<Permission>,
) -> Result<Vec<Permission>, Problem> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answers: Vec<_> = stream::iter(wanted)
        .map(|p| {
            let api = api.clone();
            async move {
                let allowed = allowed(&api, &p).await;
                (p, allowed)
            }
        })
        .buffered(AT_ONCE)
        .collect()
        .await;
    let mut missing = vec![];
    for (permission, allowed) in answers {
        if !allowed? {
            missing.push(permission);
        }
    }
    Ok(missing)
}

async fn allowed(
    api: &Api<SelfSubjectAccessReview>,
    permission: &Permission,
) -> Result<bool, Problem> {
    let (resource, subresource) = match permission.resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (permission.resource.clone(), None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(permission.group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(permission.verb.clone()),
                namespace: permission.namespace.clone(),
                name: permission.name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) => Ok(answer.status.is_some_and(|s| s.allowed)),
        Err(e) => Err(classify("create SelfSubjectAccessReview", &e)),
    }
}

/// The RBAC problem of `missing` permissions (none: no problem), at most 20 of them named.
pub fn denied(place: &str, missing: &[Permission]) -> Option<Problem> {
    if missing.is_empty() {
        return None;
    }
    const NAMED: usize = 20;
    let mut named: Vec<String> = missing.iter().take(NAMED).map(|p| p.to_string()).collect();
    if missing.len() > NAMED {
        named.push(format!("and {} more", missing.len() - NAMED));
    }
    Some(Problem::new(
        Category::Rbac,
        format!(
            "missing RBAC{place}: {} (grant them to this identity)",
            named.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_hub_role_is_read_and_told() {
        let wanted = hub_member_permissions("fleet-member-a");
        let create = Permission::new(
            (
                "networking.fleet.azure.com",
                "internalserviceexports",
                "create",
            ),
            Some("fleet-member-a"),
        );
        assert!(wanted.contains(&create), "{wanted:?}");
        assert!(
            wanted
                .iter()
                .any(|p| p.resource == "internalmemberclusters/status")
        );
        assert!(wanted.iter().any(|p| p.resource == "memberstatuses"));
        assert_eq!(
            create.to_string(),
            "create networking.fleet.azure.com/internalserviceexports in fleet-member-a"
        );
        assert_eq!(
            Permission::new(("", "services", "get"), None).to_string(),
            "get services"
        );
        let many: Vec<_> = wanted.iter().cloned().cycle().take(25).collect();
        let problem = denied(" in the hub", &many).expect("denied");
        assert_eq!(problem.category, Category::Rbac);
        assert!(problem.detail.contains("and 5 more"), "{problem:?}");
        assert_eq!(denied("", &[]), None);
    }
}
