//! Whether a cluster serves what the jobs use: `GET /apis/<group>/<version>` for each
//! group/version, then the resources in its list. A group/version not served (404) or a
//! resource missing from it is a CRD not installed, named.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Resource;

use super::problem::{Category, Problem, api_status, classify};
use crate::api::{
    EndpointSliceExport, EndpointSliceImport, GROUP, InternalMemberCluster, InternalServiceExport,
    InternalServiceImport, MultiClusterService, ServiceImport,
};

/// How long one discovery request may take before the cluster counts as not answering.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);

/// `(apiVersion, plural)` of what the jobs read and write in the hub.
pub fn hub_resources() -> Vec<(String, String)> {
    let status = crate::status::resource();
    vec![
        of::<InternalServiceExport>(),
        of::<EndpointSliceExport>(),
        of::<InternalServiceImport>(),
        of::<EndpointSliceImport>(),
        of::<InternalMemberCluster>(),
        (status.api_version, status.plural),
    ]
}

/// `(apiVersion, plural)` of what the jobs read and write in a member, beside the
/// ServiceExport (whose version is the member's: [`service_export_version`]).
pub fn member_resources() -> Vec<(String, String)> {
    vec![of::<ServiceImport>(), of::<MultiClusterService>()]
}

fn of<K: Resource<DynamicType = ()>>() -> (String, String) {
    (
        K::api_version(&()).into_owned(),
        K::plural(&()).into_owned(),
    )
}

/// Each of `resources` is served, else the first problem: the cluster does not answer, refuses
/// the credentials, or lacks a CRD (named).
pub async fn all_served(
    client: &kube::Client,
    resources: &[(String, String)],
) -> Result<(), Problem> {
    let mut by_version: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (version, plural) in resources {
        by_version.entry(version).or_default().push(plural);
    }
    for (version, plurals) in by_version {
        let served = served_in(client, version).await?;
        let missing: Vec<String> = plurals
            .iter()
            .filter(|p| !served.iter().any(|s| s == *p))
            .map(|p| format!("{p}.{}", group_of(version)))
            .collect();
        if !missing.is_empty() {
            return Err(Problem::new(
                Category::CrdMissing,
                format!(
                    "{version} does not serve {}: install the CRD",
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// The ServiceExport version a member serves (`v1beta1` preferred, as `run` does).
pub async fn service_export_version(client: &kube::Client) -> Result<&'static str, Problem> {
    for version in ["v1beta1", "v1alpha1"] {
        match served_in(client, &format!("{GROUP}/{version}")).await {
            Ok(served) if served.iter().any(|s| s == "serviceexports") => return Ok(version),
            Ok(_) => {}
            Err(p) if p.category == Category::CrdMissing => {}
            Err(p) => return Err(p),
        }
    }
    Err(Problem::new(
        Category::CrdMissing,
        format!(
            "serviceexports.{GROUP} is served in neither {GROUP}/v1beta1 nor v1alpha1: install the ServiceExport CRD"
        ),
    ))
}

/// The resources `apiVersion` serves; a 404 is a [`Category::CrdMissing`] naming it.
async fn served_in(client: &kube::Client, version: &str) -> Result<Vec<String>, Problem> {
    let doing = format!("GET /apis/{version}");
    let answer = tokio::time::timeout(DISCOVERY_TIMEOUT, client.list_api_group_resources(version));
    match answer.await {
        Ok(Ok(list)) => Ok(list.resources.into_iter().map(|r| r.name).collect()),
        Ok(Err(e)) if api_status(&e) == Some(404) => Err(Problem::new(
            Category::CrdMissing,
            format!("{version} is not served (404): install its CRDs"),
        )),
        Ok(Err(e)) => Err(classify(&doing, &e)),
        Err(_) => Err(Problem::new(
            Category::Unreachable,
            format!("{doing}: no answer within {DISCOVERY_TIMEOUT:?}"),
        )),
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_resources_are_the_jobs_types() {
        let hub = hub_resources();
        for (version, plural) in [
            (
                "networking.fleet.azure.com/v1alpha1",
                "internalserviceexports",
            ),
            (
                "networking.fleet.azure.com/v1alpha1",
                "endpointsliceimports",
            ),
            ("fleetnet.azure.com/v1alpha1", "memberstatuses"),
        ] {
            assert!(
                hub.iter().any(|(v, p)| v == version && p == plural),
                "{version} {plural}: {hub:?}"
            );
        }
        assert!(
            hub.iter()
                .any(|(v, _)| v.starts_with("cluster.kubernetes-fleet.io/"))
        );
        assert_eq!(
            group_of("fleetnet.azure.com/v1alpha1"),
            "fleetnet.azure.com"
        );
    }
}
