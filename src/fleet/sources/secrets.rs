//! Members from hub Secrets: every Secret of one namespace (the release namespace by default,
//! `--member-secrets-namespace`) labelled [`MEMBER_LABEL`]`: "true"` declares one member, named
//! by its [`MEMBER_NAME_LABEL`] label or else by the Secret's own name, its kubeconfig in the data
//! key [`KUBECONFIG_KEY`] (the convention of Argo CD's cluster Secrets). They are watched through
//! the hub client with that label selector: a Secret added, changed or removed starts a rescan.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::fleet::registry::{
    MAX_KUBECONFIG_BYTES, MemberSource, Place, source_at, validate_member_name,
};

/// The label that makes a Secret a member's: `fleetnet.azure.com/member-kubeconfig: "true"`.
pub const MEMBER_LABEL: &str = "fleetnet.azure.com/member-kubeconfig";
/// The label naming the member (a member name is a DNS-1123 label: it fits a label value);
/// without it the member is named after the Secret.
pub const MEMBER_NAME_LABEL: &str = "fleetnet.azure.com/member-name";
/// The data key of the member's kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// The label selector of member Secrets.
pub fn selector() -> String {
    format!("{MEMBER_LABEL}=true")
}

/// The member a Secret declares and its source; `None` for a Secret without a name or being
/// deleted (its member is leaving). Whatever the Secret holds, no panic: a bad name, a missing
/// key, an oversized or non-UTF-8 kubeconfig is that member's refusal, naming the Secret,
/// never its content.
pub fn member_of(secret: &Secret) -> Option<(String, MemberSource)> {
    let meta = &secret.metadata;
    let secret_name = meta.name.clone()?;
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let place = Place::Secret {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: secret_name.clone(),
    };
    let member = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(MEMBER_NAME_LABEL))
        .cloned()
        .unwrap_or(secret_name);
    let kubeconfig = validate_member_name(&member)
        .map_err(|e| format!("{place}: {e}"))
        .and_then(|()| kubeconfig_of(secret, &place));
    Some((member, source_at(place, kubeconfig)))
}

/// The kubeconfig text of a member Secret, within [`MAX_KUBECONFIG_BYTES`].
fn kubeconfig_of(secret: &Secret, place: &Place) -> Result<String, String> {
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(KUBECONFIG_KEY)) else {
        return Err(format!(
            "{place} has no data key {KUBECONFIG_KEY:?}: refused"
        ));
    };
    let len = bytes.0.len();
    if len as u64 > MAX_KUBECONFIG_BYTES {
        return Err(format!(
            "{place}: its kubeconfig is {len} bytes, over the {MAX_KUBECONFIG_BYTES}-byte limit of a member kubeconfig: refused"
        ));
    }
    String::from_utf8(bytes.0.clone())
        .map_err(|_| format!("{place}: its kubeconfig is not UTF-8 text: refused"))
}

/// What the watch has seen: every member Secret by its name, once listed.
#[derive(Default)]
struct View {
    /// The first list completed (or was refused for good: nothing can have come from it).
    listed: bool,
    secrets: BTreeMap<String, (String, MemberSource)>,
    /// A (re)list in progress: it replaces `secrets` when done.
    relisting: Option<BTreeMap<String, (String, MemberSource)>>,
}

/// The member Secrets of one namespace, watched until shutdown.
pub struct SecretSource {
    view: Arc<Mutex<View>>,
}

impl SecretSource {
    /// Starts watching the member Secrets of `namespace` through `hub`; every change sends
    /// on `rescan` (the engagement loop's trigger).
    pub fn start(
        hub: kube::Client,
        namespace: &str,
        rescan: mpsc::Sender<()>,
        shutdown: CancellationToken,
    ) -> Self {
        let view = Arc::new(Mutex::new(View::default()));
        let api: Api<Secret> = Api::namespaced(hub, namespace);
        tokio::spawn(watch(
            api,
            namespace.to_string(),
            view.clone(),
            rescan,
            shutdown,
        ));
        Self { view }
    }

    /// Every member Secret, one entry per Secret; `None` until the first list.
    pub fn members(&self) -> Option<Vec<(String, MemberSource)>> {
        let view = self.view.lock();
        view.listed
            .then(|| view.secrets.values().cloned().collect())
    }
}

async fn watch(
    api: Api<Secret>,
    namespace: String,
    view: Arc<Mutex<View>>,
    rescan: mpsc::Sender<()>,
    shutdown: CancellationToken,
) {
    let config = watcher::Config::default().labels(&selector());
    let mut events = watcher(api, config).default_backoff().boxed();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        let Some(event) = event else { return };
        let changed = match event {
            Ok(event) => apply(&mut view.lock(), event),
            Err(e) => failed(&mut view.lock(), &namespace, &e),
        };
        if changed {
            let _ = rescan.try_send(());
        }
    }
}

/// Applies one watch event to the view; whether a rescan is due: its members changed (a
/// Secret's other fields, a relist that finds what was there, start nothing), or this is the
/// first list, found empty or not: every source has answered from then on, which the replica's
/// hub watches wait for before they list (a hub list before the members are known would cost a
/// LIST per member), and members that left may be stopped.
fn apply(view: &mut View, event: watcher::Event<Secret>) -> bool {
    let name = |s: &Secret| s.metadata.name.clone().unwrap_or_default();
    match event {
        watcher::Event::Init => {
            view.relisting = Some(BTreeMap::new());
            false
        }
        watcher::Event::InitApply(s) => {
            if let (Some(relisting), Some(member)) = (view.relisting.as_mut(), member_of(&s)) {
                relisting.insert(name(&s), member);
            }
            false
        }
        watcher::Event::InitDone => {
            let listed = view.relisting.take().unwrap_or_default();
            let first = !view.listed;
            view.listed = true;
            let changed = first || listed != view.secrets;
            view.secrets = listed;
            changed
        }
        watcher::Event::Apply(s) => {
            let member = member_of(&s);
            let before = match member.clone() {
                Some(member) => view.secrets.insert(name(&s), member),
                None => view.secrets.remove(&name(&s)),
            };
            before != member
        }
        watcher::Event::Delete(s) => view.secrets.remove(&name(&s)).is_some(),
    }
}

/// A failed list or watch: retried with backoff, the last view kept. A first list refused
/// (403: the Role lacks `list`/`watch` on Secrets) counts as an empty list, since nothing can
/// have been served from it: the other sources' members must still be stopped when they leave.
/// Whether a rescan is due (that first refusal, as a first list).
fn failed(view: &mut View, namespace: &str, e: &watcher::Error) -> bool {
    let forbidden = matches!(
        e,
        watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 403
    );
    tracing::warn!(namespace, error = %e, "cannot watch the member Secrets; retrying, members from Secrets as last seen");
    if forbidden && !view.listed {
        tracing::error!(
            namespace,
            "member Secrets: list forbidden; no members from Secrets until the hub Role allows list and watch on secrets (or --member-secrets=false)"
        );
        view.listed = true;
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(name: &str, labels: &[(&str, &str)], data: Option<&[u8]>) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("fleetnet-system".into());
        s.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s.data =
            data.map(|d| BTreeMap::from([(KUBECONFIG_KEY.to_string(), ByteString(d.to_vec()))]));
        s
    }

    #[test]
    fn a_secret_names_its_member_by_label_else_by_its_own_name() {
        let (member, source) = member_of(&secret("alpha", &[], Some(b"k"))).expect("member");
        assert_eq!(member, "alpha");
        assert_eq!(source.kubeconfig.as_deref(), Ok("k"));
        assert_eq!(source.place.to_string(), "Secret fleetnet-system/alpha");
        let labelled = secret(
            "fleetnet-member-beta",
            &[(MEMBER_NAME_LABEL, "beta")],
            Some(b"k"),
        );
        let (member, same) = member_of(&labelled).expect("member");
        assert_eq!(member, "beta");
        assert_eq!(
            same.hash, source.hash,
            "the content's hash, whatever the place"
        );
    }

    #[test]
    fn a_bad_secret_is_its_members_refusal_naming_the_secret_never_its_content() {
        let cases: [(Secret, &str); 4] = [
            (
                secret("Bad_Name", &[], Some(b"SECRET")),
                "invalid member name",
            ),
            (secret("a", &[], None), "has no data key \"kubeconfig\""),
            (secret("b", &[], Some(&[0xff, 0xfe])), "not UTF-8"),
            (
                secret(
                    "c",
                    &[],
                    Some(&vec![b'x'; MAX_KUBECONFIG_BYTES as usize + 1]),
                ),
                "1048577 bytes, over the 1048576-byte limit",
            ),
        ];
        for (s, told) in cases {
            let (_, source) = member_of(&s).expect("a member, refused");
            let e = source.kubeconfig.expect_err("refused");
            assert!(
                e.contains(told) && e.contains("Secret fleetnet-system/"),
                "{e}"
            );
            assert!(!e.contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn the_view_replaces_its_members_at_each_list_and_follows_changes() {
        let mut empty = View::default();
        apply(&mut empty, watcher::Event::Init);
        assert!(
            apply(&mut empty, watcher::Event::InitDone),
            "nothing found, but the first list: every source has answered"
        );
        assert!(empty.listed);
        let mut view = View::default();
        assert!(!apply(&mut view, watcher::Event::Init));
        apply(
            &mut view,
            watcher::Event::InitApply(secret("a", &[], Some(b"1"))),
        );
        assert!(!view.listed, "not before the list is done");
        assert!(apply(&mut view, watcher::Event::InitDone));
        assert_eq!(view.secrets.len(), 1);
        assert!(apply(
            &mut view,
            watcher::Event::Apply(secret("b", &[], Some(b"2")))
        ));
        let mut deleting = secret("a", &[], Some(b"1"));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        apply(&mut view, watcher::Event::Apply(deleting));
        assert_eq!(view.secrets.keys().collect::<Vec<_>>(), ["b"]);
        // A relist drops what is gone.
        apply(&mut view, watcher::Event::Init);
        apply(
            &mut view,
            watcher::Event::InitApply(secret("c", &[], Some(b"3"))),
        );
        assert_eq!(
            view.secrets.len(),
            1,
            "the old view until the relist is done"
        );
        assert!(apply(&mut view, watcher::Event::InitDone));
        assert_eq!(view.secrets.keys().collect::<Vec<_>>(), ["c"]);
        apply(&mut view, watcher::Event::Init);
        apply(
            &mut view,
            watcher::Event::InitApply(secret("c", &[], Some(b"3"))),
        );
        assert!(
            !apply(&mut view, watcher::Event::InitDone),
            "a relist finding the same: no rescan"
        );
        assert!(apply(
            &mut view,
            watcher::Event::Delete(secret("c", &[], None))
        ));
        assert!(view.secrets.is_empty());
    }
}
