//! `fleetnet-bench`: cold convergence, server-side writes, 409s, quiet writes, churn latency,
//! RSS and CPU of fleetnet-hub on a substrate hub + N members. The measuring is
//! the `fleetnet_bench` library; this is its command line.
//!
//! ```sh
//! cargo run --release -p fleetnet-bench -- --members 10 --exports 250 --churn 10 --duration 30 --svg docs/bench.svg
//! cargo build --release -p fleetnet-hub && cargo run --release -p fleetnet-bench -- --failover --members 20 --exports 10
//! cargo build --release -p fleetnet-hub && cargo run --release -p fleetnet-bench -- --endpoint-slices --members 10 --exports 250 --churn 10 --duration 30
//! cargo build --release -p fleetnet-hub && cargo run --release -p fleetnet-bench -- --slice-imports --members 10 --exports 100 --churn 10 --duration 30
//! cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --table --quiet 60
//! cargo run --release -p fleetnet-bench -- --fairness --members 6 --exports 2000 --churn 5 --kube-api-qps 500 --kube-api-burst 500
//! cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --fleet-size --members 300 --member-servers 5 --exports 10 --replicas 3 --quiet 60
//! cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --fleet-size --member-secrets --members 1000 --member-servers 5 --exports 10 --replicas 3 --quiet 60 --no-failover
//! cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --soak --duration 1800 --members 30 --pool 40 --member-servers 3 --exports 10
//! bench/reference-agents/build.sh FLEET_NETWORKING_GIT_DIR FLEET_GIT_DIR && cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --agents 5x100 --churn 10 --duration 30 --quiet 60
//! cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --hostile --members 100 --member-servers 4 --exports 20
//! cargo build --release -p fleetnet-hub -p fleetnet-bench && target/release/fleetnet-bench --leave --members 1
//! ```

mod agents;
mod agents_report;
mod failover;
mod fleet_size;
mod fleet_size_report;
mod heartbeats;
mod hostile;
mod imports_bench;
mod ise_seen;
mod leave_bench;
mod replicas;
mod secrets_fleet;
mod slices_bench;
mod soak;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use fleetnet_bench::{self as bench, Churn, Config, Report};
use fleetnet_hub::config::{Budgets, positive_rate};

/// The line a sweep point's child process prints its report on.
const JSON_PREFIX: &str = "BENCH-JSON ";

#[derive(Parser, Debug)]
#[command(
    name = "fleetnet-bench",
    about = "Benchmarks fleetnet-hub (run in this process) against a substrate hub + N member kube-apiservers"
)]
struct Cli {
    /// Member clusters (each a real kube-apiserver).
    #[arg(long, default_value_t = 1)]
    members: usize,
    /// Service + ServiceExport pairs per member, created before the controller starts.
    #[arg(long, default_value_t = 50)]
    exports: usize,
    /// Service port changes per second after convergence (and the quiet period).
    #[arg(long, value_parser = positive_rate)]
    churn: Option<f64>,
    /// How long the churn lasts, in seconds.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds after convergence in which writes are counted (0: skip).
    #[arg(long, default_value_t = 60.0)]
    quiet: f64,
    #[command(flatten)]
    budgets: Budgets,
    /// Give up when not converged after this many seconds.
    #[arg(long, default_value_t = 900.0)]
    converge_timeout: f64,
    /// Member counts, one run (a fresh process and substrate) per point, e.g. `1,5,10`;
    /// `--members` is then ignored.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<usize>,
    /// Write the charts here (latency CDF when churn ran; RSS and convergence against members
    /// with `--sweep`).
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Also write every report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run nothing: print the tables (and write `--svg`) of reports saved with `--json`.
    #[arg(long, value_delimiter = ',')]
    replay: Vec<PathBuf>,
    /// Print the report as one JSON line too (used by `--sweep`).
    #[arg(long, hide = true)]
    emit_json: bool,
    /// Measure failover instead: `--replicas` sharded replicas of the `fleetnet-hub` binary,
    /// the busiest killed with SIGKILL (see `failover.rs`).
    #[arg(long)]
    failover: bool,
    /// Replicas for `--failover` and `--fleet-size`.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Measure a large fleet instead: `--members` member names served by `--member-servers`
    /// apiservers (`--exports` exports per apiserver, seen by each of its names), `--replicas`
    /// replicas of the `fleetnet-hub` binary; convergence, RSS, a `--quiet` window's requests
    /// counted by the apiservers, hand-offs, and a kill -9 of the busiest replica (see
    /// `fleet_size.rs`).
    #[arg(long, conflicts_with_all = ["failover", "fairness", "sweep", "replay"])]
    fleet_size: bool,
    /// Issue #27's one table instead: `--fleet-size` runs of the binary (one replica, churn
    /// after the `--quiet` window) at 5 × 100, 10 × 250 and 1,000 × 10; latency p50 / p99, idle
    /// CPU and RSS per member (see `table.rs`).
    #[arg(long, conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay", "endpoint_slices", "soak"])]
    table: bool,
    /// Member apiservers for `--fleet-size`; member name i is served by apiserver i % K.
    #[arg(long, default_value_t = 1)]
    member_servers: usize,
    /// Soak instead, for `--duration` seconds: two sharded replicas of the `fleetnet-hub`
    /// binary while `--pool` member names come and go around `--members` base names (one
    /// step every `--member-every` s), exports are created and deleted on the
    /// `--member-servers` apiservers (`--exports` each at the start and the end) and the
    /// second replica restarts every `--restart-every` s; RSS, series, tasks and Leases at the
    /// start, middle and end (see `soak.rs`). Fails when the end is not back at the start.
    #[arg(long, conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay", "endpoint_slices"])]
    soak: bool,
    /// Names that come and go in `--soak`, besides the base `--members`.
    #[arg(long, default_value_t = 20)]
    pool: usize,
    #[arg(long, default_value_t = 3.0)]
    member_every: f64,
    #[arg(long, default_value_t = 2.0)]
    export_every: f64,
    #[arg(long, default_value_t = 300.0)]
    restart_every: f64,
    /// `spec.heartbeatPeriodSeconds` of the InternalMemberClusters `--fleet-size` and `--leave`
    /// create (one per member name, as fleet's hub does).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i32).range(1..))]
    heartbeat_period: i32,
    /// `--fleet-size` without the kill -9.
    #[arg(long)]
    no_failover: bool,
    /// `--fleet-size` with the names registered as hub Secrets, each with a token of its own:
    /// after the quiet window every token rotated at once, a member added and `status` timed
    /// (see `secrets_fleet.rs`).
    #[arg(long, requires = "fleet_size")]
    member_secrets: bool,
    /// Seconds `--fleet-size` waits after the kill -9 for the orphans and the probe's ISEs;
    /// what is not done by then is reported as incomplete.
    #[arg(long, default_value_t = 120.0)]
    failover_timeout: f64,
    /// Measure fairness instead: member 1 cold-starts `--exports` exports while the other
    /// members, one export each, change their Service at `--churn` per second (default 5) until
    /// member 1 has converged (see `fairness.rs`).
    #[arg(long, conflicts_with_all = ["failover", "sweep"])]
    fairness: bool,
    /// Measure the EndpointSlice exporter instead: `--members` members, `--exports` exported
    /// Services each with one EndpointSlice of `--endpoints` ready endpoints; cold export,
    /// RSS per member, change → export latency at `--churn` per second (default 10) for
    /// `--duration` (see `slices.rs`).
    #[arg(long, conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay"])]
    endpoint_slices: bool,
    /// Measure the EndpointSliceImport job instead: `--members` members importing `--exports`
    /// EndpointSliceImports each (`--endpoints` endpoints); cold import, RSS per member, hub
    /// change → member slice latency at `--churn` per second (default 10) for `--duration`
    /// (see `imports_bench.rs`).
    #[arg(long, conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay", "endpoint_slices"])]
    slice_imports: bool,
    /// Ready endpoints per EndpointSlice for `--endpoint-slices` and `--slice-imports`.
    #[arg(long, default_value_t = 3)]
    endpoints: usize,
    /// The `fleetnet-hub` binary for `--failover` and `--fleet-size` (default: next to this
    /// executable).
    #[arg(long)]
    binary: Option<PathBuf>,
    /// What one hostile member costs the others instead: `--members` healthy names on
    /// `--member-servers` apiservers in one replica, alone and then beside a member answering
    /// 600 MB; peak RSS and the healthy members' export latency of `--exports` probe exports
    /// (see `hostile.rs`).
    #[arg(long, conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay", "endpoint_slices", "soak", "table"])]
    hostile: bool,
    /// fleet-networking's reference member agents (two processes per member) and then the
    /// `fleetnet-hub` binary, side by side on one substrate: `MEMBERSxEXPORTS` (default 5x100);
    /// convergence, RSS, quiet CPU and writes, heartbeats, churn latency at `--churn` (default
    /// 10) per second for `--duration` (see `agents.rs`). The agents are built by
    /// `bench/reference-agents/build.sh`.
    #[arg(long, num_args = 0..=1, default_missing_value = "5x100", conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay", "endpoint_slices", "soak", "table", "hostile"])]
    agents: Option<String>,
    /// Where `bench/reference-agents/build.sh` put the agents (default: its default).
    #[arg(long)]
    agents_dir: Option<PathBuf>,
    /// A member leaving instead: `--members` members (an apiserver each) with 100 exports and
    /// 20 MultiClusterServices each, every job on, all set to `Leave` at once; `Leave` →
    /// `AgentLeft` and what is left behind (see `leave_bench.rs`).
    #[arg(long, conflicts_with_all = ["failover", "fairness", "fleet_size", "sweep", "replay", "endpoint_slices", "soak", "table", "hostile", "slice_imports", "agents"])]
    leave: bool,
}

fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v).map_err(|e| format!("--{name} {v}: {e}"))
}

impl Cli {
    fn config(&self) -> Result<Config, String> {
        let churn = match self.churn {
            Some(rate) => Some(Churn {
                rate,
                duration: seconds("duration", self.duration)?,
            }),
            None => None,
        };
        // The shipped binary next to this one, for its idle RSS as a process of its own.
        let real_binary = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join("fleetnet-hub")))
            .filter(|p| p.is_file());
        Ok(Config {
            members: self.members,
            exports: self.exports,
            hub_limits: self.budgets.hub(),
            member_limits: self.budgets.member(),
            quiet: seconds("quiet", self.quiet)?,
            churn,
            converge_timeout: seconds("converge-timeout", self.converge_timeout)?,
            real_binary,
            ..Config::default()
        })
    }

    /// The flags of one sweep point's child process.
    fn child_args(&self, members: usize) -> Vec<String> {
        let mut args = vec![
            "--members".to_string(),
            members.to_string(),
            "--exports".into(),
            self.exports.to_string(),
            "--quiet".into(),
            self.quiet.to_string(),
            "--converge-timeout".into(),
            self.converge_timeout.to_string(),
            "--emit-json".into(),
        ];
        args.extend(self.budgets.to_args());
        if let Some(rate) = self.churn {
            args.extend([
                "--churn".into(),
                rate.to_string(),
                "--duration".into(),
                self.duration.to_string(),
            ]);
        }
        args
    }
}

/// Runs each sweep point in a fresh process, so one point's memory does not leak into the next.
async fn sweep(cli: &Cli) -> Result<Vec<Report>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    let mut reports = vec![];
    for &members in &cli.sweep {
        eprintln!("[bench] sweep point: {members} members");
        // Progress on stderr as it comes; the report on stdout.
        let output = tokio::process::Command::new(&exe)
            .args(cli.child_args(members))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| format!("running {}: {e}", exe.display()))?
            .wait_with_output()
            .await
            .map_err(|e| format!("running {}: {e}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "sweep point {members} members failed ({}):\n{stdout}",
                output.status
            ));
        }
        let report = stdout
            .lines()
            .find_map(|l| l.strip_prefix(JSON_PREFIX))
            .ok_or_else(|| format!("sweep point {members}: no report in its output"))?;
        reports
            .push(serde_json::from_str(report).map_err(|e| format!("sweep point {members}: {e}"))?);
    }
    Ok(reports)
}

async fn main_inner(cli: Cli) -> Result<(), String> {
    if cli.hostile {
        return run_hostile(&cli).await;
    }
    if let Some(size) = &cli.agents {
        return run_agents(&cli, size).await;
    }
    if cli.leave {
        return run_leave(&cli).await;
    }
    if cli.failover {
        return run_failover(&cli).await;
    }
    if cli.endpoint_slices {
        return run_endpoint_slices(&cli).await;
    }
    if cli.slice_imports {
        return run_slice_imports(&cli).await;
    }
    if cli.soak {
        return run_soak(&cli).await;
    }
    if cli.table {
        return run_table(&cli).await;
    }
    if cli.fleet_size {
        return run_fleet_size(&cli).await;
    }
    if cli.fairness {
        return run_fairness_mode(&cli).await;
    }
    let reports = if !cli.replay.is_empty() {
        let mut reports: Vec<Report> = vec![];
        for path in &cli.replay {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            reports.extend(
                serde_json::from_str::<Vec<Report>>(&text)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            );
        }
        reports
    } else if cli.sweep.is_empty() {
        let report = bench::run(&cli.config()?)
            .await
            .map_err(|e| format!("{e:#}"))?;
        if cli.emit_json {
            println!(
                "{JSON_PREFIX}{}",
                serde_json::to_string(&report).map_err(|e| e.to_string())?
            );
        }
        vec![report]
    } else {
        cli.config()?;
        sweep(&cli).await?
    };
    if !cli.emit_json {
        for r in &reports {
            println!("{}", bench::markdown(r));
        }
        println!("{}", bench::summary_markdown(&reports));
    }
    if let Some(path) = &cli.svg {
        std::fs::write(path, bench::svg(&reports))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("[bench] wrote {}", path.display());
    }
    write_json(cli.json.as_deref(), &reports)
}

/// `--hostile`: the probes' latency with and without a hostile member.
async fn run_hostile(cli: &Cli) -> Result<(), String> {
    let config = hostile::Config {
        members: cli.members,
        member_servers: cli.member_servers,
        probes: cli.exports,
        budget_args: cli.budgets.to_args(),
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
    };
    let report = hostile::run(&config).await.map_err(|e| format!("{e:#}"))?;
    println!("{}", hostile::markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

/// `--leave`: members leaving with every job on.
async fn run_leave(cli: &Cli) -> Result<(), String> {
    let config = leave_bench::Config {
        members: cli.members,
        heartbeat_period_s: cli.heartbeat_period,
        budget_args: cli.budgets.to_args(),
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
    };
    let report = leave_bench::run(&config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    println!("{}", leave_bench::leave_markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

/// `--failover`: how long a killed replica's members go without an owner.
async fn run_agents(cli: &Cli, size: &str) -> Result<(), String> {
    let (members, exports) = size
        .split_once('x')
        .and_then(|(m, e)| Some((m.parse().ok()?, e.parse().ok()?)))
        .ok_or_else(|| format!("--agents {size}: expected MEMBERSxEXPORTS, e.g. 5x100"))?;
    let agents_dir = cli.agents_dir.clone().unwrap_or_else(|| {
        let home = std::env::var_os("HOME").unwrap_or_default();
        PathBuf::from(home).join(".cache/fleetnet-hub/reference-agents")
    });
    let config = agents::Config {
        members,
        exports,
        quiet: seconds("quiet", cli.quiet)?,
        churn: Churn {
            rate: cli.churn.unwrap_or(10.0),
            duration: seconds("duration", cli.duration)?,
        },
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        agents_dir,
        budget_args: cli.budgets.to_args(),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
    };
    let report = agents::run(&config).await.map_err(|e| format!("{e:#}"))?;
    println!("{}", agents::markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

async fn run_failover(cli: &Cli) -> Result<(), String> {
    let config = failover::Config {
        members: cli.members,
        replicas: cli.replicas,
        exports: cli.exports,
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
    };
    let report = failover::run(&config).await.map_err(|e| format!("{e:#}"))?;
    println!("{}", failover::markdown(&report));
    Ok(())
}

/// What `--endpoint-slices` and `--slice-imports` run: members, Services (imports) each,
/// endpoints, churn, budgets, the binary.
fn slices_config(cli: &Cli) -> Result<slices_bench::SlicesConfig, String> {
    Ok(slices_bench::SlicesConfig {
        members: cli.members,
        services: cli.exports,
        endpoints: cli.endpoints,
        rate: cli.churn.unwrap_or(10.0),
        duration: seconds("duration", cli.duration)?,
        budget_args: cli.budgets.to_args(),
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
    })
}

/// `--endpoint-slices`: the EndpointSlice exporter's cold start and churn.
async fn run_endpoint_slices(cli: &Cli) -> Result<(), String> {
    let config = slices_config(cli)?;
    let report = slices_bench::run_slices(&config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    println!("{}", slices_bench::slices_markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

/// `--slice-imports`: the EndpointSliceImport job's cold import and churn.
async fn run_slice_imports(cli: &Cli) -> Result<(), String> {
    let config = slices_config(cli)?;
    let report = imports_bench::run_imports(&config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    println!("{}", imports_bench::imports_markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

/// `--soak`: members and exports coming and going for a long time; fails when the end is not back at the start.
async fn run_soak(cli: &Cli) -> Result<(), String> {
    let config = soak::Config {
        duration: seconds("duration", cli.duration)?,
        member_servers: cli.member_servers,
        base_members: cli.members,
        pool: cli.pool,
        exports: cli.exports,
        member_every: seconds("member-every", cli.member_every)?,
        export_every: seconds("export-every", cli.export_every)?,
        restart_every: seconds("restart-every", cli.restart_every)?,
        budget_args: cli.budgets.to_args(),
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
    };
    let report = soak::run(&config).await.map_err(|e| format!("{e:#}"))?;
    println!("{}", soak::markdown(&report));
    write_json(cli.json.as_deref(), &report)?;
    if !soak::returned(&report) {
        return Err("the soak's end is not back at its start (see the last line)".into());
    }
    Ok(())
}

/// `--table`: the fleet-size runs of the side-by-side table.
async fn run_table(cli: &Cli) -> Result<(), String> {
    let template = fleet_size::Config {
        members: 0,
        member_servers: 0,
        exports: 0,
        replicas: 1,
        hub_limits: cli.budgets.hub(),
        member_limits: cli.budgets.member(),
        budget_args: cli.budgets.to_args(),
        quiet: seconds("quiet", cli.quiet)?,
        failover: false,
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
        failover_timeout: Duration::ZERO,
        churn: None,
        heartbeat_period_s: cli.heartbeat_period,
        member_secrets: false,
    };
    let rows = table::run(&template).await.map_err(|e| format!("{e:#}"))?;
    for row in &rows {
        println!("{}", fleet_size::markdown(&row.report));
    }
    println!("{}", table::markdown(&rows));
    write_json(cli.json.as_deref(), &rows)
}

/// `--fleet-size`: replicas of the shipped binary over a large fleet.
async fn run_fleet_size(cli: &Cli) -> Result<(), String> {
    let config = fleet_size::Config {
        members: cli.members,
        member_servers: cli.member_servers,
        exports: cli.exports,
        replicas: cli.replicas,
        hub_limits: cli.budgets.hub(),
        member_limits: cli.budgets.member(),
        budget_args: cli.budgets.to_args(),
        quiet: seconds("quiet", cli.quiet)?,
        failover: !cli.no_failover,
        binary: cli.binary.clone().unwrap_or_else(replicas::default_binary),
        timeout: seconds("converge-timeout", cli.converge_timeout)?,
        failover_timeout: seconds("failover-timeout", cli.failover_timeout)?,
        churn: cli
            .churn
            .map(|rate| {
                Ok::<_, String>(Churn {
                    rate,
                    duration: seconds("duration", cli.duration)?,
                })
            })
            .transpose()?,
        heartbeat_period_s: cli.heartbeat_period,
        member_secrets: cli.member_secrets,
    };
    let report = fleet_size::run(&config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    println!("{}", fleet_size::markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

/// `--fairness`: the light members' changes during a heavy member's cold start.
async fn run_fairness_mode(cli: &Cli) -> Result<(), String> {
    let config = bench::FairnessConfig {
        heavy_exports: cli.exports,
        light_members: cli.members.saturating_sub(1),
        rate: cli.churn.unwrap_or(5.0),
        hub_limits: cli.budgets.hub(),
        member_limits: cli.budgets.member(),
        converge_timeout: seconds("converge-timeout", cli.converge_timeout)?,
        progress: true,
    };
    let report = bench::run_fairness(&config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    println!("{}", bench::fairness_markdown(&report));
    write_json(cli.json.as_deref(), &report)
}

/// `--json`: the report(s) written as pretty JSON, when a path was given.
fn write_json(path: Option<&std::path::Path>, value: &impl serde::Serialize) -> Result<(), String> {
    let Some(path) = path else {
        return Ok(());
    };
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // The substrate's readiness polls meet 500s while apiservers start; kube's client logs
        // each one as an error.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off")
        });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match main_inner(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetnet-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
