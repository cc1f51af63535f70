//! Where a member is declared: a file of the kubeconfig directory, a hub Secret or fleet's
//! inventory (a MemberCluster). Logs,
//! `/members` and errors name it; a file is named by its path alone, as it always was.

use std::path::{Path, PathBuf};

/// The place that declares a member. Ordered (files first, then Secrets) so that a refusal
/// naming several places says the same whatever order they were found in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// A file of the kubeconfig directory.
    File(PathBuf),
    /// A labelled Secret in the hub (`fleetnet.azure.com/member-kubeconfig: "true"`).
    Secret { namespace: String, name: String },
    /// fleet's inventory: a MemberCluster, its connection from its ClusterProfile and its
    /// token from the Secret named after the profile.
    MemberCluster(String),
}

impl Place {
    /// The file, for a member of the kubeconfig directory.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Place::File(path) => Some(path),
            Place::Secret { .. } | Place::MemberCluster(_) => None,
        }
    }

    /// The place with its kind, for a sentence naming places of different kinds
    /// (`file /k/a.yaml`, `Secret ns/a`).
    pub fn described(&self) -> String {
        match self {
            Place::File(path) => format!("file {}", path.display()),
            Place::Secret { .. } | Place::MemberCluster(_) => self.to_string(),
        }
    }
}

impl Default for Place {
    fn default() -> Self {
        Place::File(PathBuf::new())
    }
}

/// A file is its path (today's strings in logs and errors); a Secret `Secret <ns>/<name>`.
impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::File(path) => write!(f, "{}", path.display()),
            Place::Secret { namespace, name } => write!(f, "Secret {namespace}/{name}"),
            Place::MemberCluster(name) => write!(f, "MemberCluster {name}"),
        }
    }
}

/// The refusal of member `name`, declared by every one of `places` (two or more, sorted):
/// files alone are told as they always were, places of several kinds each with its kind.
pub fn declared_twice(name: &str, places: &[Place]) -> String {
    let all_files = places.iter().all(|p| p.path().is_some());
    let mut told: Vec<String> = places
        .iter()
        .map(|p| match all_files {
            true => p.to_string(),
            false => p.described(),
        })
        .collect();
    let last = told.pop().unwrap_or_default();
    let kind = if all_files { "files " } else { "" };
    match told.len() {
        0 | 1 => format!(
            "{kind}{} and {last} both declare member {name:?}: remove or rename one",
            told.first().map(String::as_str).unwrap_or_default()
        ),
        _ => format!(
            "{kind}{} and {last} all declare member {name:?}: keep one, remove or rename the others",
            told.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str) -> Place {
        Place::Secret {
            namespace: "fleetnet-system".into(),
            name: name.into(),
        }
    }

    #[test]
    fn places_are_told_with_their_kind_only_when_kinds_mix() {
        let file = Place::File("/k/alpha.yaml".into());
        assert_eq!(file.to_string(), "/k/alpha.yaml");
        assert_eq!(secret("a").to_string(), "Secret fleetnet-system/a");
        assert_eq!(
            declared_twice("alpha", &[file.clone(), Place::File("/k/alpha.yml".into())]),
            "files /k/alpha.yaml and /k/alpha.yml both declare member \"alpha\": remove or rename one"
        );
        assert_eq!(
            declared_twice("alpha", &[file, secret("a")]),
            "file /k/alpha.yaml and Secret fleetnet-system/a both declare member \"alpha\": remove or rename one"
        );
        assert_eq!(
            declared_twice(
                "alpha",
                &[secret("a"), Place::MemberCluster("alpha".into())]
            ),
            "Secret fleetnet-system/a and MemberCluster alpha both declare member \"alpha\": remove or rename one"
        );
        let three = declared_twice("alpha", &[secret("a"), secret("b"), secret("c")]);
        assert!(
            three.starts_with("Secret fleetnet-system/a, Secret fleetnet-system/b and Secret fleetnet-system/c all declare"),
            "{three}"
        );
    }

    #[test]
    fn files_sort_before_secrets() {
        let mut places = [secret("a"), Place::File("/k/z.yaml".into())];
        places.sort();
        assert!(places[0].path().is_some());
    }
}
