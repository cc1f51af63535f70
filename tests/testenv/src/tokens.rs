//! ServiceAccount tokens a test or a benchmark can revoke: each bound to a Secret of its own
//! (deleting the Secret invalidates the token, as a rotated-away credential is refused).

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::{Error, Result};

fn kube_err(cluster: &str, step: String) -> impl FnOnce(kube::Error) -> Error {
    let cluster = cluster.to_string();
    move |source| Error::Kube {
        cluster,
        step,
        source,
    }
}

/// ServiceAccount `namespace/name` in `client`'s cluster (named `cluster` in errors), its
/// namespace created if missing, bound to `cluster-admin`.
pub async fn admin_service_account(
    client: &kube::Client,
    cluster: &str,
    namespace: &str,
    name: &str,
) -> Result<()> {
    crate::ensure_namespace(client, cluster, namespace).await?;
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &sa)
        .await
        .map_err(kube_err(
            cluster,
            format!("create ServiceAccount {namespace}/{name}"),
        ))?;
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    bind_cluster_admin(client, cluster, &format!("{name}-admin"), subject).await
}

/// `subject` bound to `cluster-admin` by ClusterRoleBinding `binding`.
pub async fn bind_cluster_admin(
    client: &kube::Client,
    cluster: &str,
    binding: &str,
    subject: Subject,
) -> Result<()> {
    let object = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(binding.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "cluster-admin".into(),
        },
        subjects: Some(vec![subject]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .map_err(kube_err(
            cluster,
            format!("create ClusterRoleBinding {binding}"),
        ))?;
    Ok(())
}

/// The user's token in `kubeconfig` (a substrate cluster's, one user), if it has one.
pub fn token_in(kubeconfig: &str) -> Option<String> {
    kubeconfig
        .lines()
        .find_map(|l| l.split_once("token:"))
        .map(|(_, t)| t.trim().to_string())
}

/// `kubeconfig` (a substrate cluster's, one user) with its user's token replaced by `token`.
pub fn with_token(kubeconfig: &str, token: &str) -> String {
    kubeconfig
        .lines()
        .map(|l| match l.split_once("token:") {
            Some((indent, _)) => format!("{indent}token: {token}"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A token of ServiceAccount `namespace/account` valid `seconds`, bound to a new Secret
/// `namespace/secret`: deleting that Secret revokes it.
pub async fn bound_token(
    client: &kube::Client,
    cluster: &str,
    (namespace, account): (&str, &str),
    secret: &str,
    seconds: i64,
) -> Result<String> {
    let holder = Secret {
        metadata: ObjectMeta {
            name: Some(secret.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &holder)
        .await
        .map_err(kube_err(
            cluster,
            format!("create token holder {namespace}/{secret}"),
        ))?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: Some(secret.into()),
                uid: created.metadata.uid,
            }),
        }),
        ..Default::default()
    };
    let issued: TokenRequest = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_subresource("token", account, &PostParams::default(), &request)
        .await
        .map_err(kube_err(
            cluster,
            format!("TokenRequest bound to {namespace}/{secret}"),
        ))?;
    issued
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Cluster {
            cluster: cluster.to_string(),
            message: format!("no token issued for {namespace}/{account}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfigs_token_is_read_and_replaced() {
        let kubeconfig = "users:\n- name: u\n  user:\n    token: first\n";
        assert_eq!(token_in(kubeconfig).as_deref(), Some("first"));
        let rotated = with_token(kubeconfig, "second");
        assert_eq!(token_in(&rotated).as_deref(), Some("second"));
        assert_eq!(rotated.replace("second", "first"), kubeconfig);
        assert_eq!(token_in("users: []\n"), None);
    }
}
