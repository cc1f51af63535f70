//! `--cleanup-on-remove`, durably. A member seen leaving the fleet gets a record in the hub
//! first: a Secret `<prefix>-cleanup-<member>` in the release namespace holding the kubeconfig
//! it last ran with (the only way to reach its ServiceExports' finalizers once its file is
//! gone), written by its owner through the member's fence. Whoever owns the member from then on
//! (the same replica, or after a restart or a failover another) runs the cleanup from the record
//! and deletes the record once both sides are done; until then it is retried every rescan and
//! shows on `/members` and in `fleetnet_member_cleanups_pending`. A member that comes back
//! only loses its record.
//!
//! Only a removal this process saw is recorded: a kubeconfig missing at start-up proves nothing
//! (a mount still filling), so nothing is ever withdrawn on that.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

/// Label of the cleanup records; its value is the lease name prefix (`--leader-election-id`).
pub const CLEANUP_LABEL: &str = "fleetnet.azure.com/cleanup-of";
/// The member a record is for (names may not fit a label value).
const MEMBER_ANNOTATION: &str = "fleetnet.azure.com/member";
const KUBECONFIG_KEY: &str = "kubeconfig";

/// A removed member whose cleanup is not done yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub member: String,
    /// The kubeconfig it last ran with (`None`: it had no usable one; the hub side only).
    pub kubeconfig: Option<String>,
}

/// The record's name: the prefix and a name part of the member.
pub fn record_name(prefix: &str, member: &str) -> String {
    format!("{prefix}-cleanup-{}", super::shard::name_part(member))
}

/// The record of `pending`, as written.
pub fn record(prefix: &str, pending: &Pending) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(record_name(prefix, &pending.member)),
            labels: Some([(CLEANUP_LABEL.to_string(), prefix.to_string())].into()),
            annotations: Some([(MEMBER_ANNOTATION.to_string(), pending.member.clone())].into()),
            ..Default::default()
        },
        data: pending.kubeconfig.as_ref().map(|k| {
            BTreeMap::from([(
                KUBECONFIG_KEY.to_string(),
                ByteString(k.as_bytes().to_vec()),
            )])
        }),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// What a listed record says (`None`: not one of ours, or unreadable).
pub fn read(secret: &Secret) -> Option<Pending> {
    let member = secret
        .metadata
        .annotations
        .as_ref()?
        .get(MEMBER_ANNOTATION)?;
    let kubeconfig = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .and_then(|b| String::from_utf8(b.0.clone()).ok());
    Some(Pending {
        member: member.clone(),
        kubeconfig,
    })
}

/// Writes the record of `pending` (an existing one stands: it was written for the same
/// removal).
pub async fn write(api: &Api<Secret>, prefix: &str, pending: &Pending) -> Result<(), kube::Error> {
    let secret = record(prefix, pending);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every pending cleanup recorded under `prefix`.
pub async fn list(api: &Api<Secret>, prefix: &str) -> Result<Vec<Pending>, kube::Error> {
    let params = ListParams::default().labels(&format!("{CLEANUP_LABEL}={prefix}"));
    Ok(api
        .list(&params)
        .await?
        .items
        .iter()
        .filter_map(read)
        .collect())
}

/// Deletes the record of `member`: its cleanup is done, or it came back.
pub async fn forget(api: &Api<Secret>, prefix: &str, member: &str) -> Result<(), kube::Error> {
    match api
        .delete(&record_name(prefix, member), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let pending = Pending {
            member: "Member_1.example".into(),
            kubeconfig: Some("apiVersion: v1\nkind: Config\n".into()),
        };
        let secret = record("fleetnet-hub", &pending);
        assert_eq!(read(&secret), Some(pending.clone()));
        let name = secret.metadata.name.clone().expect("name");
        assert!(
            name.starts_with("fleetnet-hub-cleanup-member-1-example-"),
            "{name}"
        );
        assert!(name.len() <= 253);
        assert_eq!(
            secret.metadata.labels.expect("labels")[CLEANUP_LABEL],
            "fleetnet-hub"
        );
        let bare = Pending {
            kubeconfig: None,
            ..pending
        };
        assert_eq!(read(&record("p", &bare)), Some(bare));
        assert_eq!(read(&Secret::default()), None, "not ours");
    }
}
