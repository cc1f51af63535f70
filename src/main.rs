use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "fleetnet-hub", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CRD YAMLs generated from the Rust types.
    Crdgen {
        #[arg(long, default_value = "charts/fleetnet-hub/crds")]
        out: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crdgen { out } => {
            std::fs::create_dir_all(&out)?;
            for (file, crd) in [
                (
                    "networking.fleet.azure.com_serviceexports.yaml",
                    fleetnet_hub::api::service_export_crd(),
                ),
                (
                    "networking.fleet.azure.com_internalserviceexports.yaml",
                    fleetnet_hub::api::internal_service_export_crd(),
                ),
            ] {
                std::fs::write(out.join(file), fleetnet_hub::api::crd_yaml(&crd)?)?;
            }
        }
    }
    Ok(())
}
