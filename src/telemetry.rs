//! Logs and traces: a `tracing` subscriber with text or JSON logs (level from `RUST_LOG`) and,
//! when an OTLP endpoint is configured, an OpenTelemetry layer exporting spans in batches over
//! OTLP (gRPC or HTTP/protobuf) with a per-member sampler.
//!
//! - Logs: every line inside a reconcile carries the `reconcile` span's fields (member,
//!   namespace, ServiceExport name) and the trace id (`trace_id`, `span_id`).
//! - Traces: one trace per reconcile (root span `reconcile`), its children the Azure lookup
//!   and kube's `HTTP` client spans (DEBUG level: the trace filter enables them while the log
//!   filter stays at `RUST_LOG`).
//! - Off when no endpoint is configured: no OpenTelemetry layer at all, nothing to pay.
//!
//! Configuration follows the OpenTelemetry conventions ([`TelemetryConfig::from_env`]):
//! `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_SDK_DISABLED`, `OTEL_BSP_*`; the per-member ratios come from
//! `FLEETNET_TRACE_SAMPLING` (`0.01,member-a=1`, see [`SamplingConfig`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SamplingDecision, SamplingResult,
    SdkTracerProvider, ShouldSample,
};
use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Full, Json, JsonFields, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt as tfmt};

/// The span attribute the sampler reads on root spans.
pub const MEMBER_ATTRIBUTE: &str = "fleet.member";

/// Filter of the OpenTelemetry layer when none is configured: our spans at INFO (our client
/// layer's at DEBUG), kube's per-request `HTTP` spans (DEBUG), never the exporter's own stack
/// (no feedback loop), and not kube-runtime's `reconciling object` span: our `reconcile` span
/// is the trace root (it carries the member the sampler needs); the runtime's would be a
/// second, member-less root per reconcile that per-member sampling could not suppress.
pub const DEFAULT_TRACE_FILTER: &str = "info,kube_client=debug,fleetnet_hub::client=debug,\
kube_runtime=warn,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off,tonic=off,\
h2=off,hyper=off,hyper_util=off,reqwest=off,tower=off";

/// Env var of the per-member sampling ratios ([`SamplingConfig`] syntax).
pub const SAMPLING_ENV: &str = "FLEETNET_TRACE_SAMPLING";

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("telemetry configuration: {0}")]
    Config(String),
    #[error("invalid filter {filter:?}: {source}")]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
    #[error("flushing spans: {0}")]
    Flush(String),
    #[error("trace export did not stop within {0:?}")]
    Timeout(Duration),
}

/// Log line format.
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

/// OTLP transport (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `grpc` (tonic; needs a tokio runtime when [`init`] runs).
    Grpc,
    /// `http/protobuf`, the OpenTelemetry default.
    HttpProtobuf,
}

impl FromStr for OtlpProtocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" => Ok(Self::HttpProtobuf),
            other => Err(Error::Config(format!(
                "OTLP protocol {other:?}: expected grpc or http/protobuf"
            ))),
        }
    }
}

/// Where spans go.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// Full URL used as is: for HTTP the signal path included (`…/v1/traces`).
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Deadline of one export request.
    pub timeout: Duration,
    /// PEM file of the CA that signs the collector's certificate
    /// (`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub ca_certificate: Option<std::path::PathBuf>,
}

/// Spans name members and objects: they go over https, except to a collector on loopback or
/// when `FLEETNET_OTLP_ALLOW_HTTP=true` says plain http is wanted (logged at start).
fn check_otlp_scheme(endpoint: &str, allow_http: bool) -> Result<(), Error> {
    let (scheme, rest) = endpoint.split_once("://").ok_or_else(|| {
        Error::Config(format!(
            "OTLP endpoint {endpoint:?}: expected http(s)://host:port"
        ))
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match scheme {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" if allow_http => {
            tracing::warn!(
                endpoint,
                "FLEETNET_OTLP_ALLOW_HTTP: spans go to the collector in cleartext"
            );
            Ok(())
        }
        "http" => Err(Error::Config(format!(
            "OTLP endpoint {endpoint:?} is plain http off loopback: use https (a private CA via OTEL_EXPORTER_OTLP_CERTIFICATE), or set FLEETNET_OTLP_ALLOW_HTTP=true"
        ))),
        other => Err(Error::Config(format!(
            "OTLP endpoint {endpoint:?}: unsupported scheme {other:?}"
        ))),
    }
}

impl OtlpConfig {
    /// From the process environment; `None` when no endpoint is set or the SDK is disabled.
    pub fn from_env() -> Result<Option<Self>, Error> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// From `var` (an environment lookup): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is) or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base: `/v1/traces` appended for HTTP), protocol from
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (default
    /// `http/protobuf`), timeout from `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` /
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds, default 10 s).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, Error> {
        let get = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let protocol = match get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            Some(p) => p.parse()?,
            None => OtlpProtocol::HttpProtobuf,
        };
        let endpoint = if let Some(e) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            e
        } else if let Some(base) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
            match protocol {
                OtlpProtocol::Grpc => base,
                OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
            }
        } else {
            return Ok(None);
        };
        let timeout = match get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| get("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            Some(ms) => Duration::from_millis(ms.parse().map_err(|_| {
                Error::Config(format!("OTLP timeout {ms:?}: expected milliseconds"))
            })?),
            None => Duration::from_secs(10),
        };
        let allow_http =
            get("FLEETNET_OTLP_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        check_otlp_scheme(&endpoint, allow_http)?;
        let ca_certificate = get("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
            .or_else(|| get("OTEL_EXPORTER_OTLP_CERTIFICATE"))
            .map(std::path::PathBuf::from);
        Ok(Some(Self {
            endpoint,
            protocol,
            timeout,
            ca_certificate,
        }))
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
        let ratio = |v: &str| -> Result<f64, Error> {
            let r: f64 = v
                .trim()
                .parse()
                .map_err(|_| Error::Config(format!("sampling ratio {v:?} is not a number")))?;
            if (0.0..=1.0).contains(&r) {
                Ok(r)
            } else {
                Err(Error::Config(format!("sampling ratio {r} not in [0, 1]")))
            }
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

/// Where log lines go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogTarget {
    #[default]
    Stderr,
    Stdout,
}

/// Everything [`init`] needs.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub log_format: LogFormat,
    pub log_target: LogTarget,
    /// Directives of the log layer; `None`: `RUST_LOG`, or `info` without it.
    pub log_filter: Option<String>,
    /// `None`: tracing off (no OpenTelemetry layer, no exporter).
    pub otlp: Option<OtlpConfig>,
    pub sampling: SamplingConfig,
    /// Directives of the OpenTelemetry layer ([`DEFAULT_TRACE_FILTER`]).
    pub trace_filter: String,
    /// `service.name` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` set one.
    pub service_name: String,
    /// Bound of the final flush at shutdown (and of [`TelemetryGuard::force_flush`]).
    pub shutdown_timeout: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Text,
            log_target: LogTarget::Stderr,
            log_filter: None,
            otlp: None,
            sampling: SamplingConfig::default(),
            trace_filter: DEFAULT_TRACE_FILTER.to_string(),
            service_name: "fleetnet-hub".to_string(),
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

impl TelemetryConfig {
    /// Text logs, OTLP from the `OTEL_*` variables, sampling from `FLEETNET_TRACE_SAMPLING`.
    /// The caller sets `log_format` (a CLI flag) afterwards.
    pub fn from_env() -> Result<Self, Error> {
        let sampling = match std::env::var(SAMPLING_ENV) {
            Ok(s) => s.parse()?,
            Err(_) => SamplingConfig::default(),
        };
        Ok(Self {
            otlp: OtlpConfig::from_env()?,
            sampling,
            ..Self::default()
        })
    }
}

/// The sampler of [`SamplingConfig`]: per-member trace-id ratio for roots, parent-based for
/// children (sampled parent → sampled, else dropped).
#[derive(Debug, Clone)]
pub struct MemberSampler {
    default: f64,
    members: Arc<HashMap<String, f64>>,
}

impl MemberSampler {
    pub fn new(config: &SamplingConfig) -> Self {
        Self {
            default: config.default_ratio,
            members: Arc::new(config.members.clone()),
        }
    }

    /// The ratio applied to a root span with these attributes.
    pub fn ratio_for(&self, attributes: &[KeyValue]) -> f64 {
        attributes
            .iter()
            .find(|kv| kv.key.as_str() == MEMBER_ATTRIBUTE)
            .and_then(|kv| self.members.get(kv.value.as_str().as_ref()).copied())
            .unwrap_or(self.default)
    }
}

impl ShouldSample for MemberSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        if let Some(cx) = parent_context.filter(|cx| cx.span().span_context().is_valid()) {
            let span = cx.span();
            let parent = span.span_context();
            return SamplingResult {
                decision: if parent.is_sampled() {
                    SamplingDecision::RecordAndSample
                } else {
                    SamplingDecision::Drop
                },
                attributes: Vec::new(),
                trace_state: parent.trace_state().clone(),
            };
        }
        Sampler::TraceIdRatioBased(self.ratio_for(attributes)).should_sample(
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        )
    }
}

/// Keeps the trace pipeline alive; flushes and stops it (bounded) on [`shutdown`] or drop.
///
/// [`shutdown`]: TelemetryGuard::shutdown
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    timeout: Duration,
}

impl fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("tracing", &self.provider.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl TelemetryGuard {
    /// A guard over `provider` (built by [`tracer_provider`]); for callers composing their own
    /// subscriber.
    pub fn new(provider: Option<SdkTracerProvider>, timeout: Duration) -> Self {
        Self { provider, timeout }
    }

    /// Whether spans are exported.
    pub fn tracing_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports every span ended so far; returns within the shutdown timeout.
    pub fn force_flush(&self) -> Result<(), Error> {
        let Some(provider) = self.provider.clone() else {
            return Ok(());
        };
        bounded(self.timeout, move || provider.force_flush())
    }

    /// Flushes and stops the exporter. Never waits longer than the shutdown timeout (plus a
    /// little), even against an endpoint that accepts connections and never answers.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        let timeout = self.timeout;
        bounded(timeout, move || provider.shutdown_with_timeout(timeout))
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            // The subscriber may be gone already; stderr is what is left.
            eprintln!("fleetnet-hub: telemetry shutdown: {e}");
        }
    }
}

/// Runs `op` on its own thread and waits at most `timeout` (+ 500 ms) for it. The SDK calls
/// block (and a current-thread runtime could otherwise deadlock the gRPC exporter); a thread
/// that overruns is left behind, detached.
fn bounded(
    timeout: Duration,
    op: impl FnOnce() -> opentelemetry_sdk::error::OTelSdkResult + Send + 'static,
) -> Result<(), Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("otel-flush".into())
        .spawn(move || {
            let _ = tx.send(op());
        })
        .map_err(|e| Error::Flush(format!("cannot start the flush thread: {e}")))?;
    let limit = timeout + Duration::from_millis(500);
    match rx.recv_timeout(limit) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Flush(e.to_string())),
        Err(_) => Err(Error::Timeout(limit)),
    }
}

/// The tracer provider for `otlp`: OTLP exporter, batch span processor (`OTEL_BSP_*`
/// honoured), [`MemberSampler`], resource from the environment.
pub fn tracer_provider(
    otlp: &OtlpConfig,
    sampling: &SamplingConfig,
    service_name: &str,
) -> Result<SdkTracerProvider, Error> {
    let ca =
        match &otlp.ca_certificate {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                Error::Config(format!("OTLP CA certificate {}: {e}", path.display()))
            })?),
            None => None,
        };
    let tls = otlp.endpoint.starts_with("https://");
    let exporter = match otlp.protocol {
        OtlpProtocol::Grpc => {
            // tonic's channel spawns its worker on the current runtime.
            if tokio::runtime::Handle::try_current().is_err() {
                return Err(Error::Config(
                    "the grpc OTLP exporter must be built inside a tokio runtime".into(),
                ));
            }
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(otlp.endpoint.clone())
                .with_timeout(otlp.timeout);
            let builder = if tls {
                use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
                let config = match &ca {
                    Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                    None => ClientTlsConfig::new().with_webpki_roots(),
                };
                builder.with_tls_config(config)
            } else {
                builder
            };
            builder.build()?
        }
        OtlpProtocol::HttpProtobuf => {
            install_crypto_provider();
            let mut client = reqwest_otlp::blocking::Client::builder()
                .tls_backend_rustls()
                .timeout(otlp.timeout);
            if let Some(pem) = &ca {
                let cert = reqwest_otlp::Certificate::from_pem(pem)
                    .map_err(|e| Error::Config(format!("OTLP CA certificate is not PEM: {e}")))?;
                client = client.add_root_certificate(cert);
            }
            let client = build_blocking(client)?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(otlp.endpoint.clone())
                .with_timeout(otlp.timeout)
                .build()?
        }
    };
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(BatchConfigBuilder::default().build())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(MemberSampler::new(sampling))
        .with_resource(resource(service_name))
        .build())
}

/// rustls' process-wide provider: ring, as kube's own TLS uses (no second crypto library).
pub fn install_crypto_provider() {
    // Already installed (by us or a library) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// reqwest's blocking client runs its own runtime and must not be built on a runtime thread.
fn build_blocking(
    builder: reqwest_otlp::blocking::ClientBuilder,
) -> Result<reqwest_otlp::blocking::Client, Error> {
    let build = || {
        builder
            .build()
            .map_err(|e| Error::Config(format!("OTLP http client: {e}")))
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(build).join())
            .map_err(|_| Error::Config("OTLP http client: building panicked".into()))?
    } else {
        build()
    }
}

/// `service.name` (ours unless the environment names one), `service.version`, the SDK's
/// telemetry attributes and `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_SERVICE_NAME` wins.
fn resource(default_service_name: &str) -> Resource {
    let mut builder = Resource::builder_empty()
        .with_service_name(default_service_name.to_string())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ]);
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
    {
        builder = builder.with_service_name(name);
    }
    builder.build()
}

fn env_filter(directives: &str) -> Result<EnvFilter, Error> {
    EnvFilter::builder()
        .parse(directives)
        .map_err(|source| Error::Filter {
            filter: directives.to_string(),
            source,
        })
}

/// Installs the global subscriber (once per process) and, when `config.otlp` is set, the
/// trace pipeline. With `grpc`, call it inside the tokio runtime.
pub fn init(config: TelemetryConfig) -> Result<TelemetryGuard, Error> {
    let log_directives = config
        .log_filter
        .clone()
        .or_else(|| {
            std::env::var("RUST_LOG")
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
        .unwrap_or_else(|| "info".to_string());
    let log_filter = env_filter(&log_directives)?;
    let writer = match config.log_target {
        LogTarget::Stderr => BoxMakeWriter::new(std::io::stderr),
        LogTarget::Stdout => BoxMakeWriter::new(std::io::stdout),
    };
    let log_layer = match config.log_format {
        LogFormat::Text => tfmt::layer()
            .with_writer(writer)
            .with_ansi(false)
            .event_format(WithTraceId::text(tfmt::format().with_ansi(false)))
            .boxed(),
        LogFormat::Json => tfmt::layer()
            .with_writer(writer)
            .fmt_fields(JsonFields::new())
            .event_format(WithTraceId::json(tfmt::format().json().flatten_event(true)))
            .boxed(),
    }
    .with_filter(log_filter);

    let (otel_layer, provider) = match &config.otlp {
        Some(otlp) => {
            let provider = tracer_provider(otlp, &config.sampling, &config.service_name)?;
            let tracer = provider.tracer("fleetnet-hub");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(env_filter(&config.trace_filter)?);
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    let guard = TelemetryGuard::new(provider, config.shutdown_timeout);
    tracing_subscriber::registry()
        .with(otel_layer)
        .with(log_layer)
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

thread_local! {
    /// Set while this thread reads a span's OpenTelemetry context: an event emitted from
    /// inside that read must not read it again (the span's data is locked).
    static IN_LOOKUP: Cell<bool> = const { Cell::new(false) };
}

/// Trace and span id of `id`'s OpenTelemetry span, when the OpenTelemetry layer is installed
/// and the span is valid.
fn otel_ids(
    id: &tracing::span::Id,
    dispatch: &tracing::Dispatch,
) -> Option<(String, String, bool)> {
    if IN_LOOKUP.with(|l| l.replace(true)) {
        return None;
    }
    let cx = tracing_opentelemetry::get_otel_context(id, dispatch);
    IN_LOOKUP.with(|l| l.set(false));
    let cx = cx?;
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        (
            sc.trace_id().to_string(),
            sc.span_id().to_string(),
            sc.is_sampled(),
        )
    })
}

/// The trace id of the current span when its trace is sampled (for exemplars).
pub(crate) fn current_sampled_trace_id() -> Option<String> {
    let span = tracing::Span::current();
    let id = span.id()?;
    tracing::dispatcher::get_default(|d| otel_ids(&id, d))
        .and_then(|(trace, _, sampled)| sampled.then_some(trace))
}

/// Wraps a formatter to add the trace and span id of the event's span: JSON gets
/// `"trace_id"` and `"span_id"` members, text a ` trace_id=…` suffix.
pub struct WithTraceId<F> {
    inner: F,
    json: bool,
}

impl WithTraceId<Format<Full>> {
    fn text(inner: Format<Full>) -> Self {
        Self { inner, json: false }
    }
}

impl WithTraceId<Format<Json>> {
    fn json(inner: Format<Json>) -> Self {
        Self { inner, json: true }
    }
}

impl<S, N, F> FormatEvent<S, N> for WithTraceId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let ids = ctx
            .parent_span()
            .map(|s| s.id())
            .and_then(|id| tracing::dispatcher::get_default(|d| otel_ids(&id, d)));
        let Some((trace_id, span_id, _)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
        match body.strip_suffix('}').filter(|_| self.json) {
            Some(object) => writeln!(
                writer,
                "{object},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            ),
            None => writeln!(writer, "{body} trace_id={trace_id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};

    #[test]
    fn sampling_config_parses_default_and_members() {
        let c: SamplingConfig = "0.01, a=1 ,b=0".parse().unwrap();
        assert_eq!(c.default_ratio, 0.01);
        assert_eq!(c.members.get("a"), Some(&1.0));
        assert_eq!(c.members.get("b"), Some(&0.0));
        assert!("x=2".parse::<SamplingConfig>().is_err());
        assert!("abc".parse::<SamplingConfig>().is_err());
        assert_eq!(
            "".parse::<SamplingConfig>().unwrap(),
            SamplingConfig::default()
        );
    }

    #[test]
    fn otlp_config_from_vars() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(OtlpConfig::from_vars(vars(&[])).unwrap(), None);
        let http =
            OtlpConfig::from_vars(vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318/")]))
                .unwrap()
                .unwrap();
        assert_eq!(http.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(http.endpoint, "https://c:4318/v1/traces");
        let grpc = OtlpConfig::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (grpc.protocol, grpc.endpoint.as_str(), grpc.timeout),
            (
                OtlpProtocol::Grpc,
                "https://c:4317",
                Duration::from_millis(2500)
            )
        );
        let traces = OtlpConfig::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t:9/custom"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(traces.endpoint, "https://t:9/custom");
        assert!(
            OtlpConfig::from_vars(vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
                ("OTEL_SDK_DISABLED", "true"),
            ]))
            .unwrap()
            .is_none()
        );
        assert!(
            OtlpConfig::from_vars(vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ]))
            .is_err()
        );
        // Plain http only on loopback, or when asked for in so many words.
        let plain = |endpoint: &'static str, allow: &'static str| {
            OtlpConfig::from_vars(move |k: &str| match k {
                "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(endpoint.to_string()),
                "FLEETNET_OTLP_ALLOW_HTTP" => Some(allow.to_string()),
                _ => None,
            })
        };
        assert!(
            plain("http://collector.observability:4318", "")
                .is_err_and(|e| e.to_string().contains("FLEETNET_OTLP_ALLOW_HTTP"))
        );
        assert!(plain("http://collector.observability:4318", "true").is_ok());
        assert!(plain("http://127.0.0.1:4318", "").is_ok());
        assert!(plain("http://[::1]:4318", "").is_ok());
        assert!(plain("http://localhost:4318", "").is_ok());
        assert!(plain("ftp://c:1", "true").is_err());
        let with_ca = OtlpConfig::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/otel/ca.pem"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            with_ca.ca_certificate.as_deref(),
            Some(std::path::Path::new("/etc/otel/ca.pem"))
        );
    }

    fn decide(sampler: &MemberSampler, parent: Option<&Context>, member: Option<&str>) -> bool {
        let attrs: Vec<KeyValue> = member
            .map(|m| vec![KeyValue::new(MEMBER_ATTRIBUTE, m.to_string())])
            .unwrap_or_default();
        let r = sampler.should_sample(
            parent,
            TraceId::from(0x1234_5678_9abc_def0_1234_5678_9abc_def0u128),
            "reconcile",
            &SpanKind::Internal,
            &attrs,
            &[],
        );
        r.decision == SamplingDecision::RecordAndSample
    }

    #[test]
    fn member_sampler_uses_member_ratio_for_roots_and_parent_for_children() {
        let config: SamplingConfig = "0,troubled=1,quiet=0".parse().unwrap();
        let s = MemberSampler::new(&config);
        assert!(decide(&s, None, Some("troubled")));
        assert!(!decide(&s, None, Some("quiet")));
        assert!(!decide(&s, None, Some("other")), "default 0");
        assert!(!decide(&s, None, None));
        let all = MemberSampler::new(&SamplingConfig::default());
        assert!(decide(&all, None, Some("other")), "default 1");

        let parent = |sampled: bool| {
            Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from(7u128),
                opentelemetry::trace::SpanId::from(9u64),
                if sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                },
                false,
                TraceState::default(),
            ))
        };
        // A child's own attributes do not matter: it follows the parent.
        assert!(decide(&s, Some(&parent(true)), Some("quiet")));
        assert!(!decide(&s, Some(&parent(false)), Some("troubled")));
    }

    #[test]
    fn shutdown_is_bounded_against_an_endpoint_that_never_answers() {
        // Accepts TCP connections and never answers: the export hangs until its timeout.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = std::thread::spawn(move || {
            let mut held = vec![];
            listener.set_nonblocking(true).unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while std::time::Instant::now() < until {
                if let Ok((s, _)) = listener.accept() {
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let otlp = OtlpConfig {
            endpoint: format!("http://{addr}/v1/traces"),
            protocol: OtlpProtocol::HttpProtobuf,
            timeout: Duration::from_secs(30),
            ca_certificate: None,
        };
        let provider = tracer_provider(&otlp, &SamplingConfig::default(), "t").unwrap();
        {
            use opentelemetry::trace::{Span as _, Tracer as _};
            let tracer = provider.tracer("t");
            for _ in 0..3 {
                tracer.start("s").end();
            }
        }
        let guard = TelemetryGuard::new(Some(provider), Duration::from_millis(800));
        let started = std::time::Instant::now();
        let result = guard.shutdown();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "shutdown took {took:?}: {result:?}"
        );
        drop(hold);
    }
}
