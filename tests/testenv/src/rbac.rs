//! Least-privilege identities: a ServiceAccount bound to exactly the rules the product ships,
//! with a kubeconfig carrying a token issued by the TokenRequest API.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::cluster::Cluster;
use crate::fleet::ensure_namespace;
use crate::kubeconfig::write_token_kubeconfig;
use crate::{Error, Result, io_err};

/// Reads a ClusterRole manifest (one YAML document).
pub fn load_cluster_role(path: &Path) -> Result<ClusterRole> {
    load_manifest(path)
}

/// Reads a Role manifest (one YAML document); its namespace is set where it is bound.
pub fn load_role(path: &Path) -> Result<Role> {
    load_manifest(path)
}

fn load_manifest<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(io_err(format!("read {}", path.display())))?;
    serde_saphyr::from_str(&text).map_err(|e| Error::Manifest {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// What a scoped identity may do: cluster-wide rules, and/or a Role bound in each namespace.
#[derive(Debug, Clone)]
pub struct ScopedIdentity {
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// Name of the ServiceAccount (also the name of its roles and bindings).
    pub name: String,
    /// Bound cluster-wide with a ClusterRoleBinding.
    pub cluster_role: Option<ClusterRole>,
    /// Bound with a RoleBinding in each of `role_namespaces`.
    pub role: Option<Role>,
    /// Where `role` is bound.
    pub role_namespaces: Vec<String>,
}

impl ScopedIdentity {
    /// The ServiceAccount `namespace/name` with no roles of its own: what RBAC applied by other
    /// means (a chart) grants it, or nothing.
    pub fn bare(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            cluster_role: None,
            role: None,
            role_namespaces: vec![],
        }
    }
}

impl Cluster {
    /// Creates the ServiceAccount and its RBAC, requests a token (1 h) and writes a kubeconfig
    /// for it at `path`. Returns `path`.
    pub async fn issue_scoped_kubeconfig(
        &self,
        identity: &ScopedIdentity,
        path: &Path,
    ) -> Result<PathBuf> {
        let client = self.client().await?;
        let cluster = self.name().to_string();
        let err = |step: String| {
            let cluster = cluster.clone();
            move |source| Error::Kube {
                cluster,
                step,
                source,
            }
        };
        let ns = &identity.namespace;
        let name = &identity.name;
        ensure_namespace(&client, &cluster, ns).await?;
        let apply = PatchParams::apply("fleetnet-testenv").force();
        let sa = ServiceAccount {
            metadata: meta(name, Some(ns)),
            ..Default::default()
        };
        Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .patch(
                name,
                &apply,
                &Patch::Apply(&typed(&sa, "v1", "ServiceAccount")),
            )
            .await
            .map_err(err(format!("apply ServiceAccount {ns}/{name}")))?;
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: name.clone(),
            namespace: Some(ns.clone()),
            ..Default::default()
        };
        if let Some(role) = &identity.cluster_role {
            let mut role = role.clone();
            role.metadata = meta(name, None);
            Api::<ClusterRole>::all(client.clone())
                .patch(
                    name,
                    &apply,
                    &Patch::Apply(&typed(&role, "rbac.authorization.k8s.io/v1", "ClusterRole")),
                )
                .await
                .map_err(err(format!("apply ClusterRole {name}")))?;
            let binding = ClusterRoleBinding {
                metadata: meta(name, None),
                role_ref: role_ref("ClusterRole", name),
                subjects: Some(vec![subject.clone()]),
            };
            Api::<ClusterRoleBinding>::all(client.clone())
                .patch(
                    name,
                    &apply,
                    &Patch::Apply(&typed(
                        &binding,
                        "rbac.authorization.k8s.io/v1",
                        "ClusterRoleBinding",
                    )),
                )
                .await
                .map_err(err(format!("apply ClusterRoleBinding {name}")))?;
        }
        if let Some(role) = &identity.role {
            for target in &identity.role_namespaces {
                ensure_namespace(&client, &cluster, target).await?;
                let mut role = role.clone();
                role.metadata = meta(name, Some(target));
                Api::<Role>::namespaced(client.clone(), target)
                    .patch(
                        name,
                        &apply,
                        &Patch::Apply(&typed(&role, "rbac.authorization.k8s.io/v1", "Role")),
                    )
                    .await
                    .map_err(err(format!("apply Role {target}/{name}")))?;
                let binding = RoleBinding {
                    metadata: meta(name, Some(target)),
                    role_ref: role_ref("Role", name),
                    subjects: Some(vec![subject.clone()]),
                };
                Api::<RoleBinding>::namespaced(client.clone(), target)
                    .patch(
                        name,
                        &apply,
                        &Patch::Apply(&typed(
                            &binding,
                            "rbac.authorization.k8s.io/v1",
                            "RoleBinding",
                        )),
                    )
                    .await
                    .map_err(err(format!("apply RoleBinding {target}/{name}")))?;
            }
        }
        let request = TokenRequest {
            metadata: ObjectMeta::default(),
            spec: Some(TokenRequestSpec {
                audiences: None,
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            status: None,
        };
        let issued: TokenRequest = Api::<ServiceAccount>::namespaced(client, ns)
            .create_subresource("token", name, &PostParams::default(), &request)
            .await
            .map_err(err(format!("TokenRequest for {ns}/{name}")))?;
        let token = issued.status.and_then(|s| s.token).unwrap_or_default();
        write_token_kubeconfig(
            path,
            self.name(),
            &self.server(),
            &self.ca_pem()?,
            name,
            &token,
        )?;
        Ok(path.to_path_buf())
    }
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
    }
}

/// Server-side apply needs apiVersion/kind in the body.
fn typed<T: serde::Serialize>(obj: &T, api_version: &str, kind: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
    }
    v
}
