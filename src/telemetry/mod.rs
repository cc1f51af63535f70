//! Logs and traces. Logs (`logs.rs`): text or JSON lines on stderr, filtered by `RUST_LOG`;
//! a line inside a reconcile carries the `reconcile` span's fields (member, namespace,
//! ServiceExport) and the trace id. Traces (`otlp.rs`), only when an OTLP endpoint is set (else
//! no OpenTelemetry layer at all, nothing to pay): one trace per reconcile (root span
//! `reconcile`), its children the Azure lookup and the DEBUG `k8s.request` client spans (the trace
//! filter enables them while the log filter stays at `RUST_LOG`), head-sampled per member,
//! exported in batches over OTLP gRPC or HTTP/protobuf.
//!
//! Configuration follows the OpenTelemetry conventions ([`TelemetryConfig::from_env`]):
//! `OTEL_EXPORTER_OTLP_{,TRACES_}{ENDPOINT,PROTOCOL,TIMEOUT,CERTIFICATE}`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SDK_DISABLED`, `OTEL_BSP_*`; the per-member ratios come
//! from `FLEETNET_TRACE_SAMPLING` (`0.01,member-a=1`, see [`SamplingConfig`]).

mod logs;
mod otlp;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, Layer};

pub(crate) use logs::current_sampled_trace_id;
pub use logs::escape_control;
pub use otlp::{OtlpConfig, TelemetryGuard, install_crypto_provider, tracer_provider};

/// The span attribute the sampler reads on root spans.
pub const MEMBER_ATTRIBUTE: &str = "fleet.member";

/// Env var of the per-member sampling ratios ([`SamplingConfig`] syntax).
pub const SAMPLING_ENV: &str = "FLEETNET_TRACE_SAMPLING";

/// `service.name` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` set one.
const SERVICE_NAME: &str = "fleetnet-hub";

/// Filter of the OpenTelemetry layer: our spans at INFO (our client layer's per-attempt spans at
/// DEBUG), never the exporter's own stack (no feedback loop), and no kube-runtime span below
/// WARN: our `reconcile` span is the trace root (it carries the member the sampler needs); a
/// runtime span (its watcher's, or the `reconciling object` span of its `Controller`, no longer
/// used) would be a member-less root that per-member sampling could not suppress.
pub const DEFAULT_TRACE_FILTER: &str = "info,fleetnet_hub::client=debug,\
kube_runtime=warn,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off,tonic=off,\
h2=off,hyper=off,hyper_util=off,reqwest=off,tower=off";

/// Log directives added to whatever the log filter is: azure_core logs every ARM request it
/// sends, its `Authorization: Bearer` header included, at DEBUG; kube-client logs the whole
/// text of an answer or watch event it cannot decode at WARN (a member's malformed answer of up
/// to `--member-max-response-bytes` in one line): the error itself still reaches the member's
/// state, without the text.
pub const CREDENTIAL_SAFE_DIRECTIVES: &[&str] = &[
    "azure_core::policies::transport=info",
    "kube_client::client=error",
];

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("telemetry configuration: {0}")]
    Config(String),
    #[error("OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
    #[error("flushing spans: {0}")]
    Flush(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// Log line format; lines go to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable single lines (no colours).
    #[default]
    Text,
    /// One JSON object per line, span fields and trace id included.
    Json,
}

impl FromStr for LogFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "text" | "plain" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(Error::Config(format!(
                "log format {other:?}: expected text or json"
            ))),
        }
    }
}

/// Head sampling of reconcile traces: a ratio per member (read from the root span's
/// `fleet.member`), `default_ratio` for the others and for root spans without a member.
/// Children follow their parent. Syntax (`FromStr`): comma-separated, a bare number is the
/// default, `member=ratio` an override: `0.01,troubled-member=1,noisy-member=0`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    pub default_ratio: f64,
    pub members: HashMap<String, f64>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            default_ratio: 1.0,
            members: HashMap::new(),
        }
    }
}

impl FromStr for SamplingConfig {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let ratio = |v: &str| {
            let r = v.trim().parse().ok().filter(|r| (0.0..=1.0).contains(r));
            r.ok_or_else(|| Error::Config(format!("sampling ratio {v:?}: expected 0 to 1")))
        };
        let mut config = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some((member, r)) => {
                    config.members.insert(member.trim().to_string(), ratio(r)?);
                }
                None => config.default_ratio = ratio(part)?,
            }
        }
        Ok(config)
    }
}

/// Everything [`init`] needs.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub log_format: LogFormat,
    /// Directives of the log layer; `None`: `RUST_LOG`, or `info` without it.
    pub log_filter: Option<String>,
    /// `None`: tracing off (no OpenTelemetry layer, no exporter).
    pub otlp: Option<OtlpConfig>,
    pub sampling: SamplingConfig,
    /// Bound of the final flush at shutdown.
    pub shutdown_timeout: Duration,
}

impl TelemetryConfig {
    /// Text logs, OTLP from the `OTEL_*` variables, sampling from `FLEETNET_TRACE_SAMPLING`,
    /// 5 s to shut down. The caller sets `log_format` (a CLI flag) afterwards.
    pub fn from_env() -> Result<Self, Error> {
        let sampling =
            std::env::var(SAMPLING_ENV).map_or(Ok(SamplingConfig::default()), |s| s.parse());
        Ok(Self {
            log_format: LogFormat::Text,
            log_filter: None,
            otlp: OtlpConfig::from_vars(|k| std::env::var(k).ok())?,
            sampling: sampling?,
            shutdown_timeout: Duration::from_secs(5),
        })
    }
}

/// Installs the global subscriber (once per process) and, when `config.otlp` is set, the
/// trace pipeline. With `grpc`, call it inside the tokio runtime.
pub fn init(config: TelemetryConfig) -> Result<TelemetryGuard, Error> {
    let rust_log = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let log_directives = config
        .log_filter
        .or(rust_log)
        .unwrap_or_else(|| "info".into());
    let mut log_filter = EnvFilter::try_new(&log_directives)
        .map_err(|e| Error::Config(format!("invalid filter {log_directives:?}: {e}")))?;
    for directive in CREDENTIAL_SAFE_DIRECTIVES {
        let directive = directive
            .parse()
            .map_err(|e| Error::Config(format!("directive {directive:?}: {e}")))?;
        log_filter = log_filter.add_directive(directive);
    }
    let provider = (config.otlp.as_ref())
        .map(|otlp| tracer_provider(otlp, &config.sampling, SERVICE_NAME))
        .transpose()?;
    let otel_layer = provider.as_ref().map(|provider| {
        let tracer = provider.tracer(SERVICE_NAME);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(EnvFilter::new(DEFAULT_TRACE_FILTER))
    });
    let guard = TelemetryGuard::new(provider, config.shutdown_timeout);
    tracing_subscriber::registry()
        .with(otel_layer)
        .with(logs::layer(config.log_format).with_filter(log_filter))
        .try_init()?;
    if let Some(otlp) = &config.otlp {
        tracing::info!(
            endpoint = %otlp.endpoint,
            protocol = ?otlp.protocol,
            default_ratio = config.sampling.default_ratio,
            member_ratios = config.sampling.members.len(),
            "trace export on"
        );
    }
    Ok(guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_config_parses_default_and_members() {
        let c: SamplingConfig = "0.01, a=1 ,b=0".parse().unwrap();
        assert_eq!(c.default_ratio, 0.01);
        assert_eq!(c.members.get("a"), Some(&1.0));
        assert_eq!(c.members.get("b"), Some(&0.0));
        assert!("x=2".parse::<SamplingConfig>().is_err());
        assert!("abc".parse::<SamplingConfig>().is_err());
        let empty: SamplingConfig = "".parse().unwrap();
        assert_eq!(empty, SamplingConfig::default());
    }
}
