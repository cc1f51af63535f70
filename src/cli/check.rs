//! `check`'s flags: `run`'s sources and hub settings ([`FleetArgs`]), the trust policy, the
//! output format.

use clap::Args;
use fleetnet_hub::check::{Options, Output};

use super::{FleetArgs, TrustArgs};

/// Flags of `check`.
#[derive(Args, Clone, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
    #[command(flatten)]
    pub(crate) trust: TrustArgs,
    /// `text` (the hub's line and a table of the members) or `json`.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) output: Output,
}

impl CheckArgs {
    /// What to check: the hub `run` would use and the members of every source it would read.
    pub(crate) fn options(&self) -> Options {
        Options {
            kubeconfig_dir: self.fleet.kubeconfig_dir.clone(),
            fleet_system_namespace: self.fleet.fleet_system_namespace.clone(),
            trust: self.trust.policy(),
            hub: Some(self.fleet.hub_options()),
        }
    }
}
