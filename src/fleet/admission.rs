//! Admission: a member of the kubeconfig directory becomes a [`Member`] value once, when its
//! engagement starts (its hub namespace checked, its kubeconfig vetted, its per-member
//! settings looked up), and the engagement passes that value by reference from then on.

use std::sync::Arc;

use super::Error;
use super::vet::{self, TrustPolicy, Vetted};
use crate::export::PublicIpAccess;

/// A member admitted to the fleet, for one engagement (a changed kubeconfig or changed
/// settings is a new engagement, hence a new `Member`).
#[derive(Debug)]
pub struct Member {
    /// The member's name (its file's name without the extension).
    pub name: String,
    /// Where its exports go in the hub: `<prefix><name>`.
    pub hub_namespace: String,
    /// Its kubeconfig's file, named in errors.
    pub origin: String,
    /// Its connection settings, vetted against the trust policy.
    pub connection: Connection,
    /// Its Azure settings (`--member-config`), with the Traffic Manager feature on.
    pub azure: Option<PublicIpAccess>,
}

/// A member's kubeconfig that passed vetting. Kept as its text, shared with the engagement
/// (one copy per member, not two: a thousand members keep it for their whole life), and
/// parsed again for each connection attempt, which gives what the vetting gave (the text
/// does not change within an engagement).
#[derive(Clone)]
pub struct Connection {
    kubeconfig: Arc<str>,
    trust: TrustPolicy,
    /// TLS verification of this member is off (allowed by the trust policy).
    pub tls_verify_disabled: bool,
}

impl Connection {
    /// The vetted kubeconfig, parsed for a connection attempt.
    pub fn vetted(&self, origin: &str) -> Result<Vetted, Error> {
        vet::vet(&self.kubeconfig, origin, self.trust).map_err(Error::Refused)
    }
}

/// Never the kubeconfig: it holds credentials.
impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tls_verify_disabled", &self.tls_verify_disabled)
            .finish_non_exhaustive()
    }
}

/// What admission needs of a member besides its kubeconfig.
pub struct Candidate<'a> {
    pub name: &'a str,
    pub hub_namespace: &'a str,
    pub origin: &'a str,
    pub trust: TrustPolicy,
    pub azure: Option<PublicIpAccess>,
}

impl Member {
    /// Admits `candidate` with `kubeconfig` if the kubeconfig keeps to the trust policy; a
    /// refusal names every refused field (never a value) and the file.
    pub fn admit(candidate: Candidate<'_>, kubeconfig: Arc<str>) -> Result<Self, Error> {
        let vetted =
            vet::vet(&kubeconfig, candidate.origin, candidate.trust).map_err(Error::Refused)?;
        let connection = Connection {
            kubeconfig,
            trust: candidate.trust,
            tls_verify_disabled: vetted.tls_verify_disabled,
        };
        Ok(Self {
            name: candidate.name.to_string(),
            hub_namespace: candidate.hub_namespace.to_string(),
            origin: candidate.origin.to_string(),
            connection,
            azure: candidate.azure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1\nusers:\n- name: u\n  user:\n{user}"
        )
    }

    fn candidate() -> Candidate<'static> {
        Candidate {
            name: "m1",
            hub_namespace: "fleet-member-m1",
            origin: "/k/m1.yaml",
            trust: TrustPolicy::default(),
            azure: None,
        }
    }

    #[test]
    fn a_member_is_admitted_once_with_its_namespace_and_vetted_connection() {
        let text: Arc<str> = kubeconfig("    token: t\n").into();
        let member = Member::admit(candidate(), text).expect("admitted");
        assert_eq!(
            (member.name.as_str(), member.hub_namespace.as_str()),
            ("m1", "fleet-member-m1")
        );
        assert_eq!(member.origin, "/k/m1.yaml");
        assert!(!member.connection.tls_verify_disabled);
        let vetted = member
            .connection
            .vetted(&member.origin)
            .expect("parsed again");
        assert_eq!(vetted.kubeconfig.current_context.as_deref(), Some("c"));
    }

    #[test]
    fn a_refused_kubeconfig_is_a_refusal_naming_the_file_never_the_value() {
        let text = kubeconfig("    token: t\n    tokenFile: /SECRET/path\n");
        let refused = Member::admit(candidate(), text.into()).expect_err("refused");
        assert!(matches!(refused, Error::Refused(_)), "{refused:?}");
        let told = refused.to_string();
        assert!(
            told.contains("/k/m1.yaml") && !told.contains("SECRET"),
            "{told}"
        );
    }
}
