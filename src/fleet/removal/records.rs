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
//!
//! A record is acted on only if the controller wrote it: each carries an HMAC-SHA256 of its
//! member and content, keyed by a random key the controller keeps in a Secret of its own
//! (`<prefix>-record-key`, created on first need, immutable). Whoever can create Secrets in the
//! namespace but not read them cannot compute that MAC, so a planted record is ignored (and
//! logged), never a reason to withdraw a member's exports.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use sha2::Sha256;

/// Label of the cleanup records; its value is the lease name prefix (`--leader-election-id`).
pub const CLEANUP_LABEL: &str = "fleetnet.azure.com/cleanup-of";
/// The member a record is for (names may not fit a label value).
const MEMBER_ANNOTATION: &str = "fleetnet.azure.com/member";
const KUBECONFIG_KEY: &str = "kubeconfig";
/// The record's MAC ([`RecordKey::sign`]).
const MAC_KEY: &str = "mac";
/// The key Secret's one entry.
const KEY_KEY: &str = "key";
/// Bytes of a record key (HMAC-SHA256's block is 64; its output 32).
const KEY_BYTES: usize = 32;

/// A removed member whose cleanup is not done yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub member: String,
    /// The kubeconfig it last ran with (`None`: it had no usable one; the hub side only).
    pub kubeconfig: Option<String>,
}

/// The key that proves a record was written by the controller: random, kept in the hub
/// Secret [`key_name`], never logged (its `Debug` says nothing of it).
#[derive(Clone, PartialEq, Eq)]
pub struct RecordKey([u8; KEY_BYTES]);

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordKey(..)")
    }
}

impl RecordKey {
    /// A new random key.
    pub fn generate() -> Self {
        Self(rand::random())
    }

    /// The key held in `secret` (`None`: not a key of the right size).
    fn from_secret(secret: &Secret) -> Option<Self> {
        let bytes = secret.data.as_ref()?.get(KEY_KEY)?;
        <[u8; KEY_BYTES]>::try_from(bytes.0.as_slice())
            .ok()
            .map(Self)
    }

    fn mac(&self, prefix: &str, pending: &Pending) -> Hmac<Sha256> {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            // HMAC takes a key of any length: this arm is never taken.
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        };
        // Each field length-prefixed, so no two records' fields run into the same bytes.
        let mut field = |bytes: &[u8]| {
            mac.update(&(bytes.len() as u64).to_be_bytes());
            mac.update(bytes);
        };
        field(b"fleetnet-hub cleanup record v1");
        field(prefix.as_bytes());
        field(pending.member.as_bytes());
        match &pending.kubeconfig {
            Some(k) => {
                field(b"kubeconfig");
                field(k.as_bytes());
            }
            None => field(b"none"),
        }
        mac
    }

    /// The MAC of `pending`'s record under `prefix`.
    pub fn sign(&self, prefix: &str, pending: &Pending) -> Vec<u8> {
        self.mac(prefix, pending).finalize().into_bytes().to_vec()
    }

    /// Whether `tag` is the MAC of `pending`'s record (compared in constant time).
    pub fn verify(&self, prefix: &str, pending: &Pending, tag: &[u8]) -> bool {
        self.mac(prefix, pending).verify_slice(tag).is_ok()
    }
}

/// The name of the Secret holding the record key.
pub fn key_name(prefix: &str) -> String {
    format!("{prefix}-record-key")
}

/// The key Secret as first written: immutable, so that it can be replaced only by deleting
/// it (which leaves every record unverifiable: nothing is withdrawn on them).
fn key_secret(prefix: &str, key: &RecordKey) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(key_name(prefix)),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            KEY_KEY.to_string(),
            ByteString(key.0.to_vec()),
        )])),
        immutable: Some(true),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// The record key as the hub holds it (`None`: there is none, or not one of the right shape).
/// Read by a list of that one name, with the verb the records are listed with.
async fn read_key(api: &Api<Secret>, prefix: &str) -> Result<Option<RecordKey>, kube::Error> {
    let name = key_name(prefix);
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    let listed = api.list(&params).await?;
    let found = listed
        .items
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(&name));
    Ok(found.and_then(RecordKey::from_secret))
}

/// The record key, created first if there is none (`create`, then a read of that name only:
/// whoever created it first, every replica ends with the same key).
async fn ensure_key(api: &Api<Secret>, prefix: &str) -> Result<RecordKey, RecordError> {
    let fresh = RecordKey::generate();
    match api
        .create(&PostParams::default(), &key_secret(prefix, &fresh))
        .await
    {
        Ok(_) => return Ok(fresh),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(RecordError::Api(e)),
    }
    read_key(api, prefix)
        .await?
        .ok_or_else(|| RecordError::BadKey(key_name(prefix)))
}

/// Why a record could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The key Secret exists but holds no key of the right size.
    #[error("the record key Secret {0} holds no usable key")]
    BadKey(String),
}

/// The record's name: the prefix and a name part of the member.
pub fn record_name(prefix: &str, member: &str) -> String {
    format!(
        "{prefix}-cleanup-{}",
        crate::ownership::lease::name_part(member)
    )
}

/// The record of `pending`, as written, signed with `key`.
pub fn record(prefix: &str, pending: &Pending, key: &RecordKey) -> Secret {
    let mut data = BTreeMap::from([(MAC_KEY.to_string(), ByteString(key.sign(prefix, pending)))]);
    if let Some(k) = &pending.kubeconfig {
        data.insert(
            KUBECONFIG_KEY.to_string(),
            ByteString(k.as_bytes().to_vec()),
        );
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(record_name(prefix, &pending.member)),
            labels: Some([(CLEANUP_LABEL.to_string(), prefix.to_string())].into()),
            annotations: Some([(MEMBER_ANNOTATION.to_string(), pending.member.clone())].into()),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// Why a listed Secret is not acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a record (no member named): not ours to judge.
    NotARecord,
    /// Shaped as a record, but its MAC does not verify (or there is no key to verify it with):
    /// not written by this controller.
    Unproven,
}

/// What a listed record says, once it is proven written by the controller with `key`.
pub fn read(secret: &Secret, prefix: &str, key: Option<&RecordKey>) -> Result<Pending, Refused> {
    let member = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MEMBER_ANNOTATION))
        .ok_or(Refused::NotARecord)?;
    let data = secret.data.as_ref();
    let kubeconfig = match data.and_then(|d| d.get(KUBECONFIG_KEY)) {
        Some(bytes) => Some(String::from_utf8(bytes.0.clone()).map_err(|_| Refused::Unproven)?),
        None => None,
    };
    let pending = Pending {
        member: member.clone(),
        kubeconfig,
    };
    let tag = data.and_then(|d| d.get(MAC_KEY)).ok_or(Refused::Unproven)?;
    match key {
        Some(key) if key.verify(prefix, &pending, &tag.0) => Ok(pending),
        _ => Err(Refused::Unproven),
    }
}

/// Writes the record of `pending`, signed. A Secret already at its name is replaced: the
/// controller's own record of the same removal says the same, and anything else there must
/// not keep the real record out.
pub async fn write(api: &Api<Secret>, prefix: &str, pending: &Pending) -> Result<(), RecordError> {
    let key = ensure_key(api, prefix).await?;
    let secret = record(prefix, pending, &key);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    forget(api, prefix, &pending.member).await?;
    api.create(&PostParams::default(), &secret).await?;
    Ok(())
}

/// Every pending cleanup recorded under `prefix` and proven written by the controller; any
/// other Secret with the records' label is ignored, with a warning that names it (never its
/// data).
pub async fn list(api: &Api<Secret>, prefix: &str) -> Result<Vec<Pending>, kube::Error> {
    let params = ListParams::default().labels(&format!("{CLEANUP_LABEL}={prefix}"));
    let listed = api.list(&params).await?.items;
    if listed.is_empty() {
        return Ok(vec![]);
    }
    let key = read_key(api, prefix).await?;
    Ok(listed
        .iter()
        .filter_map(|secret| match read(secret, prefix, key.as_ref()) {
            Ok(pending) => Some(pending),
            Err(Refused::NotARecord) => None,
            Err(Refused::Unproven) => {
                let name = secret.metadata.name.as_deref().unwrap_or_default();
                tracing::warn!(
                    secret = %name.escape_debug(),
                    "ignoring a cleanup record not written by this controller (its MAC does not verify): no member is cleaned up on it"
                );
                None
            }
        })
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

    fn pending() -> Pending {
        Pending {
            member: "Member_1.example".into(),
            kubeconfig: Some("apiVersion: v1\nkind: Config\n".into()),
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let key = RecordKey::generate();
        let pending = pending();
        let secret = record("fleetnet-hub", &pending, &key);
        assert_eq!(
            read(&secret, "fleetnet-hub", Some(&key)),
            Ok(pending.clone())
        );
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
        assert_eq!(read(&record("p", &bare, &key), "p", Some(&key)), Ok(bare));
        assert_eq!(
            read(&Secret::default(), "p", Some(&key)),
            Err(Refused::NotARecord),
            "not ours"
        );
    }

    #[test]
    fn sign_and_verify() {
        let key = RecordKey::generate();
        let tag = key.sign("p", &pending());
        assert_eq!(tag.len(), 32);
        assert!(key.verify("p", &pending(), &tag));
        assert_eq!(tag, key.sign("p", &pending()), "deterministic");
        assert!(
            !RecordKey::generate().verify("p", &pending(), &tag),
            "another key"
        );
        assert!(!key.verify("q", &pending(), &tag), "another prefix");
        let other_member = Pending {
            member: "member-2".into(),
            ..pending()
        };
        assert!(!key.verify("p", &other_member, &tag), "another member");
        let no_kubeconfig = Pending {
            kubeconfig: None,
            ..pending()
        };
        assert!(!key.verify("p", &no_kubeconfig, &tag));
        assert!(!key.verify("p", &pending(), &tag[..31]), "a cut tag");
        assert!(!key.verify("p", &pending(), &[]));
    }

    /// The standard construction (RFC 2104) over SHA-256, spelled out: the crate computes it.
    #[test]
    fn the_mac_is_hmac_sha256() {
        use sha2::Digest;
        let key = RecordKey([7; KEY_BYTES]);
        let mut message = Vec::new();
        for field in [&b"fleetnet-hub cleanup record v1"[..], b"p", b"m", b"none"] {
            message.extend((field.len() as u64).to_be_bytes());
            message.extend(field);
        }
        let pad = |byte: u8| {
            let mut block = [byte; 64];
            for (b, k) in block.iter_mut().zip(key.0) {
                *b ^= k;
            }
            block
        };
        let inner = sha2::Sha256::new()
            .chain_update(pad(0x36))
            .chain_update(&message)
            .finalize();
        let outer = sha2::Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize();
        let pending = Pending {
            member: "m".into(),
            kubeconfig: None,
        };
        assert_eq!(key.sign("p", &pending), outer.to_vec());
    }

    #[test]
    fn a_tampered_or_planted_record_is_refused() {
        let key = RecordKey::generate();
        let good = record("p", &pending(), &key);
        // Its kubeconfig swapped for another (one that points at a planter's server).
        let mut swapped = good.clone();
        if let Some(data) = swapped.data.as_mut() {
            data.insert(KUBECONFIG_KEY.into(), ByteString(b"server: evil".to_vec()));
        }
        assert_eq!(read(&swapped, "p", Some(&key)), Err(Refused::Unproven));
        // Its member renamed: the MAC binds the member.
        let mut renamed = good.clone();
        renamed
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(MEMBER_ANNOTATION.into(), "victim".into());
        assert_eq!(read(&renamed, "p", Some(&key)), Err(Refused::Unproven));
        // Planted: right label and shape, no MAC, or one made with another key.
        let mut planted = good.clone();
        if let Some(data) = planted.data.as_mut() {
            data.remove(MAC_KEY);
        }
        assert_eq!(read(&planted, "p", Some(&key)), Err(Refused::Unproven));
        let forged = record("p", &pending(), &RecordKey::generate());
        assert_eq!(read(&forged, "p", Some(&key)), Err(Refused::Unproven));
        // No key in the hub: nothing is proven.
        assert_eq!(read(&good, "p", None), Err(Refused::Unproven));
    }

    #[test]
    fn the_key_secret_is_immutable_and_its_key_never_printed() {
        let key = RecordKey([42; KEY_BYTES]);
        let secret = key_secret("p", &key);
        assert_eq!(secret.metadata.name.as_deref(), Some("p-record-key"));
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(RecordKey::from_secret(&secret), Some(key.clone()));
        assert_eq!(format!("{key:?}"), "RecordKey(..)");
        let mut short = secret.clone();
        if let Some(data) = short.data.as_mut() {
            data.insert(KEY_KEY.into(), ByteString(vec![1; 8]));
        }
        assert_eq!(RecordKey::from_secret(&short), None);
    }
}
