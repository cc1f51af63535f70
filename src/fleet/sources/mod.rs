//! Where members come from, all watched: the kubeconfig directory (`registry::scan`), labelled
//! hub Secrets (`secrets`), fleet's inventory (`inventory`, `--member-inventory`). The engagement loop reads ONE map of them ([`Sources::desired`]):
//! every member with the place that declares it, a member declared at two places refused with
//! both named ([`crate::fleet::registry::merge`]). Every source's kubeconfig goes through the
//! same vetting when its member is engaged.

pub mod inventory;
pub mod register;
pub mod secrets;

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::registry::{self, MemberSource};

/// The members every source declares, and whether every source has been read: a source not
/// read yet (its first list pending) must not make its members look removed.
#[derive(Debug)]
pub struct Desired {
    pub members: BTreeMap<String, MemberSource>,
    /// Every source answered: members missing from `members` have left.
    pub complete: bool,
}

/// The sources of this process's members.
pub struct Sources {
    dir: PathBuf,
    secrets: Option<secrets::SecretSource>,
    inventory: Option<inventory::InventorySource>,
}

impl Sources {
    /// The directory, and the member Secrets of `secrets_namespace` (when given) watched
    /// through `hub`, and fleet's inventory (when given); a change of any sends on `rescan`.
    pub fn start(
        dir: PathBuf,
        secrets_namespace: Option<&str>,
        inventory: Option<inventory::Settings>,
        hub: &kube::Client,
        rescan: mpsc::Sender<()>,
        shutdown: CancellationToken,
    ) -> Self {
        let inventory = inventory.map(|settings| {
            inventory::InventorySource::start(hub, settings, rescan.clone(), shutdown.clone())
        });
        let secrets = secrets_namespace
            .map(|ns| secrets::SecretSource::start(hub.clone(), ns, rescan, shutdown));
        Self {
            dir,
            secrets,
            inventory,
        }
    }

    /// The directory the files come from.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Every member of every source; an unreadable directory is an error (the caller keeps
    /// the members it has).
    pub fn desired(&self) -> std::io::Result<Desired> {
        let files = registry::scan_places(&self.dir)?;
        let secrets = self.secrets.as_ref().map(|s| s.members());
        let inventory = self.inventory.as_ref().map(|i| i.members());
        let complete = !matches!(secrets, Some(None)) && !matches!(inventory, Some(None));
        Ok(Desired {
            members: registry::merge(
                files
                    .into_iter()
                    .chain(secrets.flatten().into_iter().flatten())
                    .chain(inventory.flatten().into_iter().flatten()),
            ),
            complete,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::registry::{Place, merge, source_at};

    fn file(name: &str, text: &str) -> (String, MemberSource) {
        let place = Place::File(format!("/k/{name}.yaml").into());
        (name.to_string(), source_at(place, Ok(text.to_string())))
    }

    fn secret(secret: &str, member: &str, text: &str) -> (String, MemberSource) {
        let place = Place::Secret {
            namespace: "fleetnet-system".into(),
            name: secret.into(),
        };
        (member.to_string(), source_at(place, Ok(text.to_string())))
    }

    #[test]
    fn members_of_every_source_are_one_map() {
        let merged = merge([file("alpha", "a"), secret("beta", "beta", "b")]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged["alpha"].place.to_string(), "/k/alpha.yaml");
        assert_eq!(
            merged["beta"].place.to_string(),
            "Secret fleetnet-system/beta"
        );
        assert_eq!(merged["beta"].kubeconfig.as_deref(), Ok("b"));
    }

    #[test]
    fn a_member_of_a_file_and_a_secret_is_refused_naming_both_in_any_order() {
        let both = [file("alpha", "a"), secret("member-alpha", "alpha", "b")];
        let merged = merge(both.clone());
        let e = merged["alpha"].kubeconfig.as_ref().expect_err("refused");
        assert_eq!(
            e,
            "file /k/alpha.yaml and Secret fleetnet-system/member-alpha both declare member \"alpha\": remove or rename one"
        );
        let [a, b] = both;
        let reversed = merge([b, a]);
        assert_eq!(
            reversed["alpha"], merged["alpha"],
            "the same refusal, the same hash"
        );
    }

    #[test]
    fn two_secrets_for_one_member_are_refused_naming_both() {
        let merged = merge([
            secret("one", "alpha", "a"),
            secret("two", "alpha", "a"),
            file("gamma", "g"),
        ]);
        let e = merged["alpha"].kubeconfig.as_ref().expect_err("refused");
        assert!(
            e.contains("Secret fleetnet-system/one and Secret fleetnet-system/two"),
            "{e}"
        );
        assert_eq!(
            merged["gamma"].kubeconfig.as_deref(),
            Ok("g"),
            "others unaffected"
        );
    }
}
