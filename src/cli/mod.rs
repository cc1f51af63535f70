//! The `fleetnet-hub` command line: the subcommands and their flags. Every setting is a flag
//! with an environment variable (`env = …`); the flag wins only when given (tested for every
//! one of them in `env_flags`).

mod check;
#[cfg(test)]
mod env_flags;
mod fleet;
mod run;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use fleetnet_hub::config::release_namespace;
use fleetnet_hub::fleet::TrustPolicy;
use fleetnet_hub::status::cli as status;

pub(crate) use check::CheckArgs;
pub(crate) use fleet::FleetArgs;
pub(crate) use run::{RunArgs, RunConfig};

#[derive(Parser)]
#[command(
    name = "fleetnet-hub",
    version,
    about = "Exports every member cluster's Services to the Azure Kubernetes Fleet hub, from one process in the hub"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the controller for every member in the kubeconfig directory.
    Run(Box<RunArgs>),
    /// Check every member's kubeconfig: reachability, CRD, RBAC.
    Check(Box<CheckArgs>),
    /// Register a member: vet its kubeconfig as `run` would, then write it into a labelled
    /// Secret of the hub (`fleetnet.azure.com/member-kubeconfig: "true"`) that `run` watches.
    Register {
        /// The member's name (a DNS-1123 label).
        member: String,
        /// The member's kubeconfig.
        #[arg(long)]
        kubeconfig: PathBuf,
        #[command(flatten)]
        at: MemberSecretsAt,
        #[command(flatten)]
        trust: TrustArgs,
        /// Print the Secret, without its credentials; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Every member across all replicas, from the MemberStatus objects on the hub.
    Status(status::Args),
    /// Once the replicas are gone: take back from members and hub what the controller wrote.
    Uninstall(fleetnet_hub::uninstall::Args),
    /// Unregister a member: delete the member Secrets that declare it.
    Unregister {
        member: String,
        #[command(flatten)]
        at: MemberSecretsAt,
    },
    /// Start a local hub and two members (real apiservers), run the controller against them.
    #[cfg(feature = "sandbox")]
    Sandbox,
    /// Write the CRD YAMLs generated from the Rust types.
    Crdgen {
        #[arg(long, default_value = "charts/fleetnet-hub/crds")]
        out: PathBuf,
    },
}

/// Where `register` and `unregister` find the member Secrets.
#[derive(Args, Clone, Debug)]
pub struct MemberSecretsAt {
    /// The namespace of the member Secrets (as `run --member-secrets-namespace`; default
    /// $POD_NAMESPACE, else `default`).
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS_NAMESPACE")]
    namespace: Option<String>,
    /// The hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, env = "FLEETNET_HUB_KUBECONFIG")]
    pub(crate) hub_kubeconfig: Option<PathBuf>,
}

impl MemberSecretsAt {
    /// The Secrets' namespace: the flag, else the release namespace.
    pub(crate) fn namespace(&self) -> String {
        release_namespace(self.namespace.clone())
    }
}

/// What member kubeconfigs may use beyond inline credentials (both off by default).
#[derive(Args, Clone, Debug, Default)]
pub struct TrustArgs {
    /// Allow `exec` credential plugins in member kubeconfigs (e.g. kubelogin). They run as
    /// this process, with its files and tokens: only for kubeconfigs you fully trust.
    #[arg(long, env = "FLEETNET_ALLOW_MEMBER_EXEC_PLUGINS")]
    allow_member_exec_plugins: bool,
    /// Allow `insecure-skip-tls-verify: true` in member kubeconfigs; such members are flagged
    /// on /members, in `check` and in `fleetnet_member_tls_verify_disabled`.
    #[arg(long, env = "FLEETNET_ALLOW_INSECURE_MEMBER_TLS")]
    allow_insecure_member_tls: bool,
    /// Allow a member `server` over plain `http://` to a loopback host (localhost, 127.0.0.0/8,
    /// ::1): tests and local tunnels only; nothing on that connection is encrypted.
    #[arg(long, env = "FLEETNET_ALLOW_PLAIN_HTTP_LOOPBACK_MEMBERS")]
    allow_plain_http_loopback_members: bool,
    /// Allow a member kubeconfig's own `proxy-url` when it is `http://[user:pass@]host:port`
    /// (HTTP CONNECT; TLS to the member stays end to end). Such members show their proxy,
    /// without credentials, on /members, in `check` and in `fleetnet_member_proxied`. The
    /// environment's proxy is never used for members.
    #[arg(long, env = "FLEETNET_ALLOW_MEMBER_PROXY")]
    allow_member_proxy: bool,
}

impl TrustArgs {
    /// The policy, announced loudly when it widens trust.
    pub(crate) fn policy(&self) -> TrustPolicy {
        if self.allow_member_exec_plugins {
            tracing::warn!(
                "--allow-member-exec-plugins: member kubeconfigs may run programs in this process's pod"
            );
        }
        if self.allow_insecure_member_tls {
            tracing::warn!(
                "--allow-insecure-member-tls: member kubeconfigs may disable TLS verification"
            );
        }
        if self.allow_plain_http_loopback_members {
            tracing::warn!(
                "--allow-plain-http-loopback-members: member servers may be plain http on loopback"
            );
        }
        if self.allow_member_proxy {
            tracing::warn!(
                "--allow-member-proxy: member kubeconfigs may name an http:// proxy (proxy-url)"
            );
        }
        TrustPolicy {
            allow_exec: self.allow_member_exec_plugins,
            allow_insecure_tls: self.allow_insecure_member_tls,
            allow_plain_http_loopback: self.allow_plain_http_loopback_members,
            allow_proxy: self.allow_member_proxy,
        }
    }
}
