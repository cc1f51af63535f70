//! After `helm uninstall` and the drain: every kind the controller writes listed on the hub and
//! on each member, none of it left; every object the user made still there, and deletable.

use super::*;

use fleetnet_hub::api::{
    EndpointSliceExport, EndpointSliceImport, InternalServiceExport, InternalServiceImport,
    MultiClusterService, ServiceImport,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Ours by name: finalizers, labels and annotations of the controller.
const OURS: [&str; 2] = ["networking.fleet.azure.com/", "fleetnet.azure.com/"];

fn ours(keys: impl IntoIterator<Item = String>) -> Vec<String> {
    keys.into_iter()
        .filter(|k| OURS.iter().any(|p| k.starts_with(p)))
        .collect()
}

async fn all<K>(api: &Api<K>) -> Vec<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default()).await.expect("list").items
}

/// The metadata of objects left, for a failure's message.
fn metas<K: kube::Resource>(objects: &[K]) -> Vec<&kube::api::ObjectMeta> {
    objects.iter().map(|o| o.meta()).collect()
}

/// Nothing of the controller on the hub (its objects, the release's Leases, records, CRD, and
/// what helm installed) nor on any member (finalizers, conditions, labels, annotations, the
/// ServiceImports, derived Services and imported slices it made).
pub async fn nothing_of_the_controller_left(fleet: &Fleet, hub: &kube::Client) {
    for m in MEMBERS {
        let ns = format!("fleet-member-{m}");
        let left = all(&Api::<InternalServiceExport>::namespaced(hub.clone(), &ns)).await;
        assert!(left.is_empty(), "{ns}: ISEs {:?}", metas(&left));
        let left = all(&Api::<EndpointSliceExport>::namespaced(hub.clone(), &ns)).await;
        assert!(left.is_empty(), "{ns}: ESEs {:?}", metas(&left));
        let left = all(&Api::<InternalServiceImport>::namespaced(hub.clone(), &ns)).await;
        assert!(left.is_empty(), "{ns}: ISIs {:?}", metas(&left));
        for esi in all(&Api::<EndpointSliceImport>::namespaced(hub.clone(), &ns)).await {
            let m = &esi.metadata;
            assert!(
                m.finalizers
                    .iter()
                    .flatten()
                    .all(|f| !f.starts_with(OURS[0])),
                "{m:?}"
            );
            assert!(
                ours(m.annotations.clone().unwrap_or_default().into_keys()).is_empty(),
                "{m:?}"
            );
        }
        assert!(
            all(&Api::<Role>::namespaced(hub.clone(), &ns))
                .await
                .is_empty(),
            "{ns}: Roles"
        );
    }
    // Deleted by `--delete-crds`; the apiserver removes a CRD once its own finalizer is done.
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let crd = crds
        .get_opt("memberstatuses.fleetnet.azure.com")
        .await
        .expect("get");
    assert!(
        crd.as_ref()
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
        "MemberStatus CRD not deleted: {crd:?}"
    );
    within(
        Duration::from_secs(30),
        "the MemberStatus CRD gone",
        || async {
            crds.get_opt("memberstatuses.fleetnet.azure.com")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    let leases = all(&Api::<Lease>::namespaced(hub.clone(), NS)).await;
    assert!(
        leases.is_empty(),
        "Leases left: {:?}",
        leases.iter().map(|l| &l.metadata.name).collect::<Vec<_>>()
    );
    let secrets: Vec<Option<String>> = all(&Api::<Secret>::namespaced(hub.clone(), NS))
        .await
        .into_iter()
        .map(|s| s.metadata.name)
        .collect();
    assert_eq!(
        secrets,
        [Some(KUBECONFIGS_SECRET.to_string())],
        "only the user's Secret is left"
    );
    assert!(
        all(&Api::<Deployment>::namespaced(hub.clone(), NS))
            .await
            .is_empty()
    );
    assert!(
        Api::<ServiceAccount>::namespaced(hub.clone(), NS)
            .get_opt(RELEASE)
            .await
            .expect("get")
            .is_none()
    );
    let helm_made = |l: &Option<BTreeMap<String, String>>| {
        l.as_ref()
            .and_then(|l| l.get("app.kubernetes.io/instance"))
            .map(String::as_str)
            == Some(RELEASE)
    };
    assert!(
        all(&Api::<ClusterRole>::all(hub.clone()))
            .await
            .iter()
            .all(|r| !helm_made(&r.metadata.labels))
    );
    assert!(
        all(&Api::<ClusterRoleBinding>::all(hub.clone()))
            .await
            .iter()
            .all(|r| !helm_made(&r.metadata.labels))
    );
    assert!(
        all(&Api::<RoleBinding>::all(hub.clone()))
            .await
            .iter()
            .all(|r| !helm_made(&r.metadata.labels))
    );

    for m in MEMBERS {
        let member = fleet.member(m).client().await.expect("member client");
        for se in all(&exports(&member, APP)).await {
            assert!(
                ours(se.metadata.finalizers.clone().unwrap_or_default()).is_empty(),
                "{m}: {se:?}"
            );
            assert!(
                se.conditions()
                    .iter()
                    .all(|c| c.type_ != "Valid" && c.type_ != "Conflict"),
                "{m}: {se:?}"
            );
        }
        for mcs in all(&Api::<MultiClusterService>::all(member.clone())).await {
            let meta = &mcs.metadata;
            assert!(
                ours(meta.finalizers.clone().unwrap_or_default()).is_empty(),
                "{m}: {meta:?}"
            );
            assert!(
                ours(meta.labels.clone().unwrap_or_default().into_keys()).is_empty(),
                "{m}: {meta:?}"
            );
            assert!(
                mcs.conditions().iter().all(|c| c.type_ != "Valid"),
                "{m}: {mcs:?}"
            );
        }
        let imports = all(&Api::<ServiceImport>::all(member.clone())).await;
        let names: Vec<Option<String>> = imports.iter().map(|i| i.metadata.name.clone()).collect();
        let expected: Vec<Option<String>> = if m == "member-1" {
            vec![Some("db".into())]
        } else {
            vec![]
        };
        assert_eq!(
            names, expected,
            "{m}: only the user's ServiceImport is left"
        );
        for i in &imports {
            assert!(
                ours(i.metadata.finalizers.clone().unwrap_or_default()).is_empty(),
                "{m}: {i:?}"
            );
        }
        assert!(
            all(&Api::<Service>::namespaced(member.clone(), SYSTEM))
                .await
                .is_empty(),
            "{m}: derived Services"
        );
        assert!(
            all(&Api::<EndpointSlice>::namespaced(member.clone(), SYSTEM))
                .await
                .is_empty(),
            "{m}: imported slices"
        );
        for s in all(&Api::<EndpointSlice>::all(member.clone())).await {
            assert!(
                ours(
                    s.metadata
                        .annotations
                        .clone()
                        .unwrap_or_default()
                        .into_keys()
                )
                .is_empty(),
                "{m}: {s:?}"
            );
        }
    }
}

/// Every object the user made is still there.
pub async fn every_user_object_kept(fleet: &Fleet, hub: &kube::Client) {
    assert!(
        Api::<Secret>::namespaced(hub.clone(), NS)
            .get_opt(KUBECONFIGS_SECRET)
            .await
            .expect("get")
            .is_some()
    );
    for m in MEMBERS {
        let member = fleet.member(m).client().await.expect("member client");
        assert!(
            present(Api::<Service>::namespaced(member.clone(), APP), "cart").await,
            "{m}"
        );
        assert!(present(exports(&member, APP), "cart").await, "{m}");
        assert!(present(slices(&member, APP), "cart-1").await, "{m}");
    }
    let member = fleet
        .member("member-1")
        .client()
        .await
        .expect("member client");
    assert!(
        Api::<MultiClusterService>::namespaced(member.clone(), APP)
            .get_opt("cart")
            .await
            .expect("get")
            .is_some()
    );
    assert!(
        Api::<ServiceImport>::namespaced(member, APP)
            .get_opt("db")
            .await
            .expect("get")
            .is_some()
    );
}

/// ServiceExports and MultiClusterServices go when their user deletes them (no finalizer of
/// ours holds them).
pub async fn user_objects_deletable(fleet: &Fleet) {
    let member = fleet
        .member("member-1")
        .client()
        .await
        .expect("member client");
    let ses = exports(&member, APP);
    ses.delete("cart", &Default::default())
        .await
        .expect("delete ServiceExport");
    let mcses = Api::<MultiClusterService>::namespaced(member.clone(), APP);
    mcses
        .delete("cart", &Default::default())
        .await
        .expect("delete MCS");
    within(
        Duration::from_secs(10),
        "the ServiceExport and the MCS gone",
        || async {
            let se = ses.get_opt("cart").await.ok()?;
            let mcs = mcses.get_opt("cart").await.ok()?;
            (se.is_none() && mcs.is_none()).then_some(())
        },
    )
    .await;
}

/// Whether `api` holds `name` now.
async fn present<K>(api: Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get").is_some()
}
