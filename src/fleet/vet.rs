//! Vetting of member kubeconfigs. Whoever can write one member's kubeconfig must not be able to
//! run code in fleetnet-hub's pod, read its files (the hub's ServiceAccount token, the Azure
//! federated token) or quietly turn off TLS: only inline credentials are accepted, unless an
//! operator opts in. Pure: nothing here connects anywhere.

use kube::config::Kubeconfig;

/// What member kubeconfigs may use beyond inline credentials; both off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrustPolicy {
    /// `exec` credential plugins (e.g. kubelogin for Entra ID), run as fleetnet-hub's user.
    pub allow_exec: bool,
    /// `insecure-skip-tls-verify: true`; such members are flagged on `/members`, in `check`
    /// and in `fleetnet_member_tls_verify_disabled`.
    pub allow_insecure_tls: bool,
}

/// A member kubeconfig that passed vetting, with what the operator allowed it to use.
pub struct Vetted {
    pub kubeconfig: Kubeconfig,
    /// Some cluster entry disables TLS verification (allowed by the policy).
    pub tls_verify_disabled: bool,
}

/// Never the kubeconfig: it holds credentials.
impl std::fmt::Debug for Vetted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vetted")
            .field("tls_verify_disabled", &self.tls_verify_disabled)
            .finish_non_exhaustive()
    }
}

/// Accepts `kubeconfig` if every cluster and user entry keeps to `policy`; otherwise names
/// every refused field (entry and field, never a value).
pub fn vet(kubeconfig: Kubeconfig, policy: TrustPolicy) -> Result<Vetted, String> {
    let mut refused: Vec<String> = vec![];
    let mut tls_verify_disabled = false;
    for named in &kubeconfig.clusters {
        let Some(cluster) = &named.cluster else {
            continue;
        };
        let at = |field: &str| format!("clusters[{}].{field}", named.name);
        if cluster.certificate_authority.is_some() {
            refused.push(format!(
                "{} (a file path: only certificate-authority-data is accepted)",
                at("certificate-authority")
            ));
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            if policy.allow_insecure_tls {
                tls_verify_disabled = true;
            } else {
                refused.push(format!(
                    "{} (TLS verification cannot be disabled without --allow-insecure-member-tls)",
                    at("insecure-skip-tls-verify")
                ));
            }
        }
    }
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let at = |field: &str| format!("users[{}].{field}", named.name);
        let files = [
            ("tokenFile", user.token_file.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
        ];
        for (field, set) in files {
            if set {
                refused.push(format!(
                    "{} (a file path: only inline token and client-certificate-data/client-key-data are accepted)",
                    at(field)
                ));
            }
        }
        if user.auth_provider.is_some() {
            refused.push(format!(
                "{} (auth-provider plugins are not supported; use an inline token)",
                at("auth-provider")
            ));
        }
        if user.exec.is_some() && !policy.allow_exec {
            refused.push(format!(
                "{} (runs a program in fleetnet-hub's pod; allow with --allow-member-exec-plugins)",
                at("exec")
            ));
        }
    }
    if refused.is_empty() {
        Ok(Vetted {
            kubeconfig,
            tls_verify_disabled,
        })
    } else {
        Err(format!("kubeconfig refused: {}", refused.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t";

    fn parse(users: &str, cluster_extra: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1\n{cluster_extra}users:\n- name: u\n  user:\n{users}"
        ))
        .expect("parses")
    }

    #[test]
    fn inline_credentials_pass() {
        let k = parse(
            "    token: s3cr3t-token\n",
            &format!("    certificate-authority-data: {CA}\n"),
        );
        let vetted = vet(k, TrustPolicy::default()).expect("accepted");
        assert!(!vetted.tls_verify_disabled);
        let k = parse(
            "    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n",
            "",
        );
        assert!(vet(k, TrustPolicy::default()).is_ok());
    }

    #[test]
    fn files_plugins_and_insecure_tls_are_refused_by_name_never_by_value() {
        let k = parse(
            "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n    client-certificate: /etc/c.crt\n    client-key: /etc/c.key\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"curl evil\"]\n",
            "    certificate-authority: /etc/ca.crt\n    insecure-skip-tls-verify: true\n",
        );
        let e = vet(k, TrustPolicy::default()).expect_err("refused");
        for field in [
            "users[u].tokenFile",
            "users[u].client-certificate",
            "users[u].client-key",
            "users[u].exec",
            "clusters[k].certificate-authority",
            "clusters[k].insecure-skip-tls-verify",
            "--allow-member-exec-plugins",
            "--allow-insecure-member-tls",
        ] {
            assert!(e.contains(field), "{field} in {e}");
        }
        for value in ["/var/run/secrets", "/etc/c.key", "curl evil", "/etc/ca.crt"] {
            assert!(!e.contains(value), "{value} leaked into {e}");
        }
    }

    #[test]
    fn opt_ins_allow_exec_and_insecure_tls_and_say_so() {
        let k = parse(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: kubelogin\n",
            "    insecure-skip-tls-verify: true\n",
        );
        let policy = TrustPolicy {
            allow_exec: true,
            allow_insecure_tls: true,
        };
        let vetted = vet(k, policy).expect("allowed by the operator");
        assert!(vetted.tls_verify_disabled);
        let k = parse("    auth-provider:\n      name: gcp\n", "");
        assert!(
            vet(k, policy)
                .expect_err("never")
                .contains("users[u].auth-provider")
        );
    }
}
