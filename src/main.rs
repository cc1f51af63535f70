//! The `fleetnet-hub` binary: parse the flags ([`cli`]), build the runtime, run the subcommand.

mod cli;

use clap::Parser;
use cli::{Cli, Command, RunConfig};
use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::azure::AzureMembers;
use fleetnet_hub::config::Config;
use fleetnet_hub::fleet::sources::register;
use fleetnet_hub::status::cli as status;

/// Runs until SIGTERM or Ctrl-C, then shuts down gracefully.
async fn run(config: RunConfig) -> anyhow::Result<()> {
    let mut ext = Extensions::default();
    if config.members_allow_remote {
        tracing::warn!("--members-allow-remote: /members is answered to clients off the pod");
        ext.http.members_allow_remote = true;
    }
    if let Some(azure) = config.azure {
        let fleet = fleetnet_hub::azure::AzureFleet::new(azure)?;
        let stats = fleet.stats_handle();
        ext.azure_counters = Some(std::sync::Arc::new(move || stats.snapshot()));
        ext.azure = Some(std::sync::Arc::new(AzureMembers::new(
            fleet,
            config.config.runtime.member_config.clone(),
            config.azure_resource_group,
        )));
    }
    let running = app::start(config.config, ext).await?;
    app::wait_for_signal().await;
    tracing::info!("signal received: shutting down");
    running.shutdown().await;
    Ok(())
}

fn crdgen(out: &std::path::Path) -> anyhow::Result<()> {
    use fleetnet_hub::api::{crd_files, crd_yaml};
    std::fs::create_dir_all(out)?;
    for (file, crd) in crd_files() {
        std::fs::write(out.join(file), crd_yaml(&crd)?)?;
    }
    Ok(())
}

/// Logs (and OTLP traces when `OTEL_EXPORTER_OTLP_*` is set), sampled per member.
fn init_telemetry(
    run: Option<&RunConfig>,
) -> anyhow::Result<fleetnet_hub::telemetry::TelemetryGuard> {
    use fleetnet_hub::telemetry::{self, TelemetryConfig};
    let mut config = TelemetryConfig::from_env()?;
    if let Some(run) = run {
        config.log_format = run.log_format.parse()?;
        config.sampling = run_sampling(config.sampling, &run.config);
    }
    Ok(telemetry::init(config)?)
}

/// `FLEETNET_TRACE_SAMPLING`'s ratios with `run`'s on top: `--trace-sampling-ratio` (or its
/// env) only when given, a member's `traceSamplingRatio` from `--member-config` always.
fn run_sampling(
    mut sampling: fleetnet_hub::telemetry::SamplingConfig,
    config: &Config,
) -> fleetnet_hub::telemetry::SamplingConfig {
    if let Some(ratio) = config.trace_sampling_ratio {
        sampling.default_ratio = ratio;
    }
    for (member, settings) in config.runtime.member_config.members() {
        if let Some(ratio) = settings.trace_sampling_ratio {
            sampling.members.insert(member, ratio);
        }
    }
    sampling
}

/// jemalloc's own figures for `/metrics`, current as of this call.
fn allocator_bytes() -> Option<fleetnet_hub::metrics::AllocatorBytes> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    Some(fleetnet_hub::metrics::AllocatorBytes {
        allocated: u64::try_from(stats::allocated::read().ok()?).ok()?,
        resident: u64::try_from(stats::resident::read().ok()?).ok()?,
    })
}

fn main() -> std::process::ExitCode {
    // Short-lived allocations apart from what members keep (see `fleetnet_hub::memory`).
    if let Err(e) = fleetnet_hub::memory::keep_scratch_apart() {
        eprintln!("fleetnet-hub: no scratch arena, one arena for all ({e})");
    }
    fleetnet_hub::metrics::report_allocator(allocator_bytes);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(async_main()),
        Err(e) => {
            eprintln!("fleetnet-hub: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// jemalloc, not the C library's allocator: glibc kept the pages a thousand members' engagement
/// burst had freed (even with a `malloc_trim` every 30 s and 2 arenas), and a 30-minute soak
/// ended 18.8 % above its start where the live heap was 5 % above; musl's (the image's) is
/// slower still. Measured at 1,000 members × 10 exports: 481 → 399 KiB per member (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Read by jemalloc when it starts (`_RJEM_MALLOC_CONF` in the environment still overrides):
/// one background thread gives freed pages back a second after they fell free (dirty decay),
/// with no muzzy stage; two arenas as for glibc before (threads are few; more arenas keep
/// more partly used pages); no thread caches: what a burst freed into them stayed there in a
/// quiet process (EndpointSlices 10 × 250: +1,032 → +914 KiB per member; 1,000 × 10: 417 →
/// 399 KiB per member, the same quiet CPU).
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,max_background_threads:1,narenas:2,\
tcache:false,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

async fn async_main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let run_config = match &cli.command {
        Command::Run(args) => match args.validate() {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("fleetnet-hub: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let telemetry = match init_telemetry(run_config.as_ref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("fleetnet-hub: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match (cli.command, run_config) {
        (Command::Run(_), Some(config)) => run(config).await,
        (Command::Run(_), None) => unreachable!("validated above"),
        (Command::Check(args), _) => fleetnet_hub::check::run_options(&args.options(), args.output)
            .await
            .map_err(anyhow::Error::msg),
        (
            Command::Register {
                member,
                kubeconfig,
                at,
                trust,
                dry_run,
            },
            _,
        ) => register::run(register::Request {
            member: &member,
            kubeconfig: &kubeconfig,
            namespace: &at.namespace(),
            hub_kubeconfig: at.hub_kubeconfig.as_deref(),
            trust: trust.policy(),
            dry_run,
        })
        .await
        .map_err(anyhow::Error::msg),
        (Command::Status(args), _) => status::run(&args).await.map_err(anyhow::Error::msg),
        (Command::Uninstall(args), _) => fleetnet_hub::uninstall::run(&args)
            .await
            .map_err(anyhow::Error::msg),
        (Command::Unregister { member, at }, _) => {
            register::run_unregister(&member, &at.namespace(), at.hub_kubeconfig.as_deref())
                .await
                .map_err(anyhow::Error::msg)
        }
        #[cfg(feature = "sandbox")]
        (Command::Sandbox, _) => fleetnet_hub::sandbox::run()
            .await
            .map_err(anyhow::Error::msg),
        (Command::Crdgen { out }, _) => crdgen(&out),
    };
    // Flushes pending spans, bounded.
    if let Err(e) = telemetry.shutdown() {
        eprintln!("fleetnet-hub: telemetry shutdown: {e}");
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetnet-hub: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
