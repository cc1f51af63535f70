//! Every member the release may have served, from every source `run` reads (the kubeconfig
//! directory, the labelled member Secrets), the Secrets the chart mounts (`--kubeconfig-secret`),
//! the pending cleanup records of removed members, and the `MemberStatus` objects on the hub
//! (a member known only there still has its hub side drained).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};

use crate::fleet::registry::{self, member_name, namespace_of};
use crate::fleet::removal::records;
use crate::fleet::sources::secrets;

/// A member's kubeconfig and where it was found; `Err`: why there is none usable.
pub type Kubeconfig = Result<(String, String), String>;

/// One member to drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its hub namespace; `Err`: why there is none `run` would have written in (an invalid or
    /// shared `hubNamespace`, as `run` refuses it).
    pub hub_namespace: Result<String, String>,
    /// Its kubeconfig and where it was found; `Err`: why there is none usable.
    pub kubeconfig: Kubeconfig,
}

/// Where to look.
pub struct Sources<'a> {
    pub dir: Option<&'a Path>,
    /// The namespace of the labelled member Secrets, when they are read.
    pub member_secrets: Option<&'a str>,
    /// Secrets holding one kubeconfig per key (the chart's `memberKubeconfigSecrets`).
    pub kubeconfig_secrets: &'a [String],
    /// The release namespace and `--leader-election-id` (the records).
    pub namespace: &'a str,
    pub id: &'a str,
    pub prefix: &'a str,
    /// Hub namespaces set per member (`--member-config`'s `hubNamespace`).
    pub hub_namespaces: &'a BTreeMap<String, String>,
}

/// Every member found, by name; the first usable kubeconfig of a member wins. `Err` when a
/// source that was asked for cannot be read (draining only part of the fleet silently would
/// leave the rest stuck).
pub async fn targets(
    hub: &kube::Client,
    from: &Sources<'_>,
) -> Result<BTreeMap<String, Target>, String> {
    let mut found: Vec<(String, Kubeconfig)> = vec![];
    if let Some(dir) = from.dir {
        let scanned =
            registry::scan(dir).map_err(|e| format!("kubeconfig dir {}: {e}", dir.display()))?;
        for (name, source) in scanned {
            let place = source.place.to_string();
            found.push((name, source.kubeconfig.map(|k| (k, place))));
        }
    }
    let in_release: Api<Secret> = Api::namespaced(hub.clone(), from.namespace);
    if let Some(ns) = from.member_secrets {
        let api: Api<Secret> = Api::namespaced(hub.clone(), ns);
        let params = ListParams::default().labels(&secrets::selector());
        let listed = api
            .list(&params)
            .await
            .map_err(|e| format!("member Secrets in {ns}: {e}"))?;
        for (name, source) in listed.items.iter().filter_map(secrets::member_of) {
            let place = source.place.to_string();
            found.push((name, source.kubeconfig.map(|k| (k, place))));
        }
    }
    for secret in from.kubeconfig_secrets {
        let got = in_release
            .get(secret)
            .await
            .map_err(|e| format!("Secret {}/{secret}: {e}", from.namespace))?;
        for (key, bytes) in got.data.iter().flatten() {
            let place = format!("Secret {}/{secret} key {key}", from.namespace);
            let text = String::from_utf8(bytes.0.clone())
                .map_err(|_| format!("{place}: not UTF-8"))
                .map(|k| (k, place));
            found.push((member_name(key).to_string(), text));
        }
    }
    let recorded = records::list(&in_release, from.id)
        .await
        .map_err(|e| format!("cleanup records in {}: {e}", from.namespace))?;
    for pending in recorded {
        let place = format!("the cleanup record of {}", pending.member);
        let kubeconfig = pending
            .kubeconfig
            .map(|k| (k, place))
            .ok_or_else(|| "its cleanup record holds no kubeconfig".to_string());
        found.push((pending.member, kubeconfig));
    }
    let published = published(hub).await?;
    Ok(merge(found, published, from.hub_namespaces, from.prefix))
}

/// The members a `MemberStatus` names, with the hub namespace it is in.
async fn published(hub: &kube::Client) -> Result<BTreeMap<String, String>, String> {
    let api: Api<DynamicObject> = Api::all_with(hub.clone(), &crate::status::resource());
    let params = ListParams::default().labels(&format!(
        "{}={}",
        crate::status::MANAGED_BY_LABEL,
        crate::status::MANAGED_BY
    ));
    let listed = match api.list(&params).await {
        Ok(listed) => listed.items,
        // The CRD is gone already: no member is published.
        Err(kube::Error::Api(s)) if s.code == 404 => vec![],
        Err(e) => return Err(format!("MemberStatus objects: {e}")),
    };
    Ok(listed
        .into_iter()
        .filter_map(|o| {
            let member = o
                .metadata
                .labels
                .as_ref()?
                .get(crate::status::MEMBER_LABEL)?
                .clone();
            Some((member, o.metadata.namespace?))
        })
        .collect())
}

/// One target per member name: the first usable kubeconfig, else the first refusal; its hub
/// namespace as published (where `run` wrote), else as `run` names it (`configured`, from
/// `--member-config`, else `<prefix><member>`; one invalid or shared by two members is refused
/// for them, as `run` refuses it).
pub fn merge(
    found: Vec<(String, Kubeconfig)>,
    published: BTreeMap<String, String>,
    configured: &BTreeMap<String, String>,
    prefix: &str,
) -> BTreeMap<String, Target> {
    let names: BTreeSet<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
    let named = registry::hub_namespaces(
        prefix,
        names
            .iter()
            .map(|name| (*name, configured.get(*name).map(String::as_str))),
    );
    let hub_namespace_of = |name: &str| match published.get(name) {
        Some(ns) => Ok(ns.clone()),
        None => named
            .get(name)
            .cloned()
            .unwrap_or_else(|| Ok(namespace_of(prefix, name))),
    };
    let mut targets: BTreeMap<String, Target> = BTreeMap::new();
    let no_kubeconfig = || Err("no kubeconfig found in any source".to_string());
    for (name, kubeconfig) in found {
        let hub_namespace = hub_namespace_of(&name);
        let target = targets.entry(name).or_insert_with(|| Target {
            hub_namespace,
            kubeconfig: no_kubeconfig(),
        });
        let first_refusal = target.kubeconfig == no_kubeconfig() && kubeconfig.is_err();
        if target.kubeconfig.is_err() && (kubeconfig.is_ok() || first_refusal) {
            target.kubeconfig = kubeconfig;
        }
    }
    for (name, hub_namespace) in published {
        targets.entry(name).or_insert_with(|| Target {
            hub_namespace: Ok(hub_namespace),
            kubeconfig: no_kubeconfig(),
        });
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_usable_kubeconfig_wins_and_published_members_are_kept() {
        // m1: published in custom-ns and configured elsewhere: where `run` wrote wins.
        let found = vec![
            ("m1".to_string(), Err("refused: exec".to_string())),
            (
                "m1".to_string(),
                Ok(("kc-1".to_string(), "dir".to_string())),
            ),
            (
                "m1".to_string(),
                Ok(("kc-1b".to_string(), "secret".to_string())),
            ),
            ("m2".to_string(), Err("refused: exec".to_string())),
            (
                "m4".to_string(),
                Ok(("kc-4".to_string(), "dir".to_string())),
            ),
        ];
        let published = BTreeMap::from([
            ("m1".to_string(), "custom-ns".to_string()),
            ("m3".to_string(), "fleet-member-m3".to_string()),
        ]);
        let configured = BTreeMap::from([
            ("m1".to_string(), "configured-m1".to_string()),
            ("m4".to_string(), "configured-m4".to_string()),
        ]);
        let targets = merge(found, published, &configured, "fleet-member-");
        let ns = |m: &str| targets[m].hub_namespace.clone().expect("a hub namespace");
        assert_eq!(ns("m1"), "custom-ns");
        assert_eq!(
            targets["m1"].kubeconfig,
            Ok(("kc-1".to_string(), "dir".to_string()))
        );
        assert_eq!(ns("m2"), "fleet-member-m2");
        assert_eq!(targets["m2"].kubeconfig, Err("refused: exec".to_string()));
        assert_eq!(ns("m3"), "fleet-member-m3");
        assert!(targets["m3"].kubeconfig.is_err());
        // Never published (never engaged): its configured hub namespace, not the prefix's.
        assert_eq!(ns("m4"), "configured-m4");
        assert_eq!(targets.len(), 4);
    }

    #[test]
    fn a_hub_namespace_run_would_refuse_is_refused_unless_published() {
        let kubeconfig = || Ok(("kc".to_string(), "dir".to_string()));
        let found = vec![
            ("a".to_string(), kubeconfig()),
            ("b".to_string(), kubeconfig()),
            ("c".to_string(), kubeconfig()),
            ("d".to_string(), kubeconfig()),
        ];
        // a and b share one; c's is not a namespace name; d's shared one was published.
        let configured = BTreeMap::from([
            ("a".to_string(), "shared".to_string()),
            ("b".to_string(), "shared".to_string()),
            ("c".to_string(), "Not_A_Namespace".to_string()),
            ("d".to_string(), "shared".to_string()),
        ]);
        let published = BTreeMap::from([("d".to_string(), "shared".to_string())]);
        let targets = merge(found, published, &configured, "fleet-member-");
        for (member, other) in [("a", "b"), ("b", "a")] {
            let refused = targets[member].hub_namespace.clone().expect_err("shared");
            assert!(
                refused.contains("\"shared\"") && refused.contains(other),
                "{refused}"
            );
        }
        let invalid = targets["c"].hub_namespace.clone().expect_err("invalid");
        assert!(
            invalid.contains("hubNamespace of member \"c\""),
            "{invalid}"
        );
        assert_eq!(targets["d"].hub_namespace, Ok("shared".to_string()));
    }
}
