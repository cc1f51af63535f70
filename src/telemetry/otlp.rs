//! The trace pipeline: the endpoint from the `OTEL_*` variables (vetted: https off loopback),
//! the gRPC or HTTP/protobuf exporter (public roots or a private CA), the SDK's batch
//! processor, the per-member sampler, and a guard that stops it all within a bound.

use std::path::PathBuf;
use std::time::Duration;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{
    Protocol, SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::{
    EnvResourceDetector, ResourceDetector, TelemetryResourceDetector,
};
use opentelemetry_sdk::trace::{Sampler, SamplingResult, SdkTracerProvider, ShouldSample};

use super::Error::{self, Config};
use super::{MEMBER_ATTRIBUTE, SamplingConfig};

/// Where spans go.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// Full URL used as is: for HTTP the signal path included (`…/v1/traces`).
    pub endpoint: String,
    /// [`Protocol::Grpc`] or [`Protocol::HttpBinary`] (`http/protobuf`, the default).
    pub protocol: Protocol,
    /// Deadline of one export request.
    pub timeout: Duration,
    /// PEM file of the CA that signs the collector's certificate
    /// (`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub ca_certificate: Option<PathBuf>,
}

impl OtlpConfig {
    /// From `var` (an environment lookup); `None` when no endpoint is set or the SDK is
    /// disabled. Each `OTEL_EXPORTER_OTLP_TRACES_*` variable wins over its generic
    /// `OTEL_EXPORTER_OTLP_*`; a generic HTTP endpoint is a base (`/v1/traces` appended);
    /// `http/protobuf` and 10 s (in ms) by default. Read here, not by the SDK, so that the
    /// endpoint is vetted before anything is sent.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, Error> {
        // The traces variable, else the generic one; blank is unset.
        let get = |name: &str| {
            let traces = var(&format!("OTEL_EXPORTER_OTLP_TRACES_{name}"));
            let value = |v: Option<String>| Some(v?.trim().to_string()).filter(|v| !v.is_empty());
            value(traces).or_else(|| value(var(&format!("OTEL_EXPORTER_OTLP_{name}"))))
        };
        let is_true = |k: &str| var(k).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if is_true("OTEL_SDK_DISABLED") {
            return Ok(None);
        }
        let protocol = get("PROTOCOL").unwrap_or_default().to_ascii_lowercase();
        let protocol = match protocol.as_str() {
            "" | "http/protobuf" => Protocol::HttpBinary,
            "grpc" => Protocol::Grpc,
            p => {
                return Err(Config(format!(
                    "OTLP protocol {p:?}: expected grpc or http/protobuf"
                )));
            }
        };
        // The traces endpoint is used as is, and so is a gRPC base.
        let as_is = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some_and(|e| !e.trim().is_empty());
        let endpoint = match get("ENDPOINT") {
            None => return Ok(None),
            Some(endpoint) if as_is || protocol == Protocol::Grpc => endpoint,
            Some(base) => format!("{}/v1/traces", base.trim_end_matches('/')),
        };
        let timeout = match get("TIMEOUT").map(|ms| ms.parse().map_err(|_| ms)) {
            None => Duration::from_secs(10),
            Some(Ok(ms)) => Duration::from_millis(ms),
            Some(Err(ms)) => return Err(Config(format!("OTLP timeout {ms:?}: expected ms"))),
        };
        check_scheme(&endpoint, is_true("FLEETNET_OTLP_ALLOW_HTTP"))?;
        Ok(Some(Self {
            endpoint,
            protocol,
            timeout,
            ca_certificate: get("CERTIFICATE").map(PathBuf::from),
        }))
    }
}

/// Spans name members and objects: they go over https, except to a collector on loopback or
/// when `FLEETNET_OTLP_ALLOW_HTTP=true` says plain http is wanted (logged at start).
fn check_scheme(endpoint: &str, allow_http: bool) -> Result<(), Error> {
    let uri = endpoint.parse::<http::Uri>().ok();
    let host = uri.as_ref().and_then(|u| u.host()).unwrap_or_default();
    let loopback = crate::config::is_loopback_host(host);
    match uri.as_ref().and_then(|u| u.scheme_str()) {
        Some("https") => Ok(()),
        Some("http") if loopback => Ok(()),
        Some("http") if allow_http => {
            let warning = "FLEETNET_OTLP_ALLOW_HTTP: spans go to the collector in cleartext";
            tracing::warn!(endpoint, "{warning}");
            Ok(())
        }
        Some("http") => Err(Config(format!(
            "OTLP endpoint {endpoint:?} is plain http off loopback: use https (a private CA via OTEL_EXPORTER_OTLP_CERTIFICATE), or set FLEETNET_OTLP_ALLOW_HTTP=true"
        ))),
        _ => Err(Config(format!(
            "OTLP endpoint {endpoint:?}: expected https://host:port"
        ))),
    }
}

/// The tracer provider for `otlp`: OTLP exporter, the SDK's batch span processor
/// (`OTEL_BSP_*` honoured), [`MemberRatio`] under the SDK's parent-based sampler, resource
/// from the environment.
pub fn tracer_provider(
    otlp: &OtlpConfig,
    sampling: &SamplingConfig,
    service_name: &str,
) -> Result<SdkTracerProvider, Error> {
    let read = |path: &PathBuf| std::fs::read(path).map_err(|e| (path.display().to_string(), e));
    let ca = (otlp.ca_certificate.as_ref().map(read).transpose())
        .map_err(|(path, e)| Config(format!("OTLP CA certificate {path}: {e}")))?;
    let exporter = match otlp.protocol {
        Protocol::Grpc => grpc_exporter(otlp, ca.as_deref())?,
        _ => http_exporter(otlp, ca.as_deref())?,
    };
    let root: Box<dyn ShouldSample> = Box::new(MemberRatio(sampling.clone()));
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::parent_based(root))
        .with_resource(resource(service_name))
        .build())
}

fn grpc_exporter(otlp: &OtlpConfig, ca: Option<&[u8]>) -> Result<SpanExporter, Error> {
    use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
    // tonic's channel spawns its worker on the current runtime.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Config(
            "the grpc OTLP exporter must be built inside a tokio runtime".into(),
        ));
    }
    let builder = SpanExporter::builder()
        .with_tonic()
        .with_endpoint(otlp.endpoint.clone())
        .with_timeout(otlp.timeout);
    let tls = ClientTlsConfig::new();
    let builder = match (otlp.endpoint.starts_with("https://"), ca) {
        (false, _) => builder,
        (true, Some(pem)) => {
            builder.with_tls_config(tls.ca_certificate(Certificate::from_pem(pem)))
        }
        (true, None) => builder.with_tls_config(tls.with_webpki_roots()),
    };
    Ok(builder.build()?)
}

/// The SDK's default HTTP client has no TLS here: ours is reqwest's blocking client over
/// rustls (ring), trusting the private CA when one is given.
fn http_exporter(otlp: &OtlpConfig, ca: Option<&[u8]>) -> Result<SpanExporter, Error> {
    install_crypto_provider();
    let mut client = (reqwest_otlp::blocking::Client::builder())
        .tls_backend_rustls()
        .timeout(otlp.timeout);
    if let Some(pem) = ca {
        let cert = reqwest_otlp::Certificate::from_pem(pem)
            .map_err(|e| Config(format!("OTLP CA certificate is not PEM: {e}")))?;
        client = client.add_root_certificate(cert);
    }
    // reqwest's blocking client runs its own runtime and must not be built on a runtime thread.
    let client = std::thread::spawn(move || client.build())
        .join()
        .map_err(|_| Config("OTLP http client: building panicked".into()))?
        .map_err(|e| Config(format!("OTLP http client: {e}")))?;
    Ok(SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(otlp.endpoint.clone())
        .with_timeout(otlp.timeout)
        .build()?)
}

/// rustls' process-wide provider: ring, as kube's own TLS uses (no second crypto library).
pub fn install_crypto_provider() {
    // Already installed (by us or a library) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `service.name` (ours unless the environment names one), `service.version`, the SDK's
/// telemetry attributes and `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_SERVICE_NAME` wins.
fn resource(default_service_name: &str) -> Resource {
    let name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty());
    let detectors: [Box<dyn ResourceDetector>; 2] = [
        Box::new(TelemetryResourceDetector),
        Box::new(EnvResourceDetector::new()),
    ];
    Resource::builder_empty()
        .with_service_name(default_service_name.to_string())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_detectors(&detectors)
        .with_attributes(name.map(|name| KeyValue::new("service.name", name)))
        .build()
}

/// The sampler of root spans: a trace-id ratio chosen by the span's `fleet.member`
/// ([`SamplingConfig`]); the SDK's parent-based sampler makes children follow their parent.
#[derive(Debug, Clone)]
struct MemberRatio(SamplingConfig);

impl ShouldSample for MemberRatio {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let member = attributes
            .iter()
            .find(|kv| kv.key.as_str() == MEMBER_ATTRIBUTE);
        let ratio = member.and_then(|kv| self.0.members.get(kv.value.as_str().as_ref()));
        let ratio = ratio.copied().unwrap_or(self.0.default_ratio);
        Sampler::TraceIdRatioBased(ratio)
            .should_sample(parent, trace_id, name, kind, attributes, links)
    }
}

/// Keeps the trace pipeline alive; flushes and stops it (bounded) on
/// [`TelemetryGuard::shutdown`] or drop.
#[derive(Debug)]
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    timeout: Duration,
}

impl TelemetryGuard {
    /// A guard over `provider` (from [`tracer_provider`]), for callers with their own subscriber.
    pub fn new(provider: Option<SdkTracerProvider>, timeout: Duration) -> Self {
        Self { provider, timeout }
    }

    /// Whether spans are exported.
    pub fn tracing_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes and stops the exporter. The SDK waits no longer than the shutdown timeout, even
    /// against an endpoint that accepts connections and never answers.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        Ok(provider.shutdown_with_timeout(self.timeout)?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
    use opentelemetry_sdk::trace::SamplingDecision;

    const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";

    /// The configuration from these variables, plus `OTEL_EXPORTER_OTLP_ENDPOINT=endpoint`.
    fn from(endpoint: &str, vars: &[(&str, &str)]) -> Result<Option<OtlpConfig>, Error> {
        let vars = [vars, &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)]].concat();
        OtlpConfig::from_vars(|k| Some(vars.iter().find(|(n, _)| *n == k)?.1.to_string()))
    }

    #[test]
    fn otlp_config_from_vars() {
        const C: &str = "https://c:4318";
        assert_eq!(from("", &[]).unwrap(), None);
        let http = from("https://c:4318/", &[]).unwrap().unwrap();
        assert_eq!(
            (http.protocol, http.endpoint.as_str()),
            (Protocol::HttpBinary, "https://c:4318/v1/traces")
        );
        let grpc = from(
            C,
            &[(PROTOCOL, "grpc"), ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")],
        );
        let grpc = grpc.unwrap().unwrap();
        assert_eq!((grpc.protocol, grpc.endpoint.as_str()), (Protocol::Grpc, C));
        assert_eq!(grpc.timeout, Duration::from_millis(2500));
        let traces = from(
            C,
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t:9/custom")],
        );
        assert_eq!(traces.unwrap().unwrap().endpoint, "https://t:9/custom");
        assert!(from(C, &[("OTEL_SDK_DISABLED", "true")]).unwrap().is_none());
        assert!(from(C, &[(PROTOCOL, "http/json")]).is_err());
        let ca = from(C, &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem")]);
        assert_eq!(ca.unwrap().unwrap().ca_certificate, Some("/ca.pem".into()));
        // Plain http only on loopback, or when asked for in so many words.
        let plain = |endpoint, allow| from(endpoint, &[("FLEETNET_OTLP_ALLOW_HTTP", allow)]);
        let refused = plain("http://collector.observability:4318", "");
        assert!(refused.is_err_and(|e| e.to_string().contains("FLEETNET_OTLP_ALLOW_HTTP")));
        assert!(plain("http://collector.observability:4318", "true").is_ok());
        for loopback in ["http://127.0.0.1:1", "http://[::1]:1", "http://localhost:1"] {
            assert!(plain(loopback, "").is_ok(), "{loopback}");
        }
        assert!(plain("ftp://c:1", "true").is_err());
    }

    fn sampled(parent: Option<TraceFlags>, member: Option<&str>) -> bool {
        let config = "0,troubled=1,quiet=0".parse().unwrap();
        let sampler = Sampler::parent_based(Box::new(MemberRatio(config)) as Box<dyn ShouldSample>);
        let parent = parent.map(|flags| {
            let span = SpanContext::new(7.into(), 9.into(), flags, false, TraceState::default());
            Context::new().with_remote_span_context(span)
        });
        let attrs: Vec<_> = (member.iter())
            .map(|m| KeyValue::new(MEMBER_ATTRIBUTE, m.to_string()))
            .collect();
        let trace_id = TraceId::from(0x1234_5678_9abc_def0_1234_5678_9abc_def0u128);
        let kind = &SpanKind::Internal;
        let r = sampler.should_sample(parent.as_ref(), trace_id, "reconcile", kind, &attrs, &[]);
        r.decision == SamplingDecision::RecordAndSample
    }

    #[test]
    fn member_ratio_for_roots_and_parent_for_children() {
        assert!(sampled(None, Some("troubled")));
        assert!(!sampled(None, Some("quiet")));
        assert!(!sampled(None, Some("other")), "default 0");
        assert!(!sampled(None, None));
        // A child's own attributes do not matter: it follows its parent.
        assert!(sampled(Some(TraceFlags::SAMPLED), Some("quiet")));
        assert!(!sampled(Some(TraceFlags::default()), Some("troubled")));
    }

    #[test]
    fn shutdown_is_bounded_against_an_endpoint_that_never_answers() {
        use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
        // Never accepted, never answered: the kernel completes the handshakes, the export hangs.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let otlp = OtlpConfig {
            endpoint: format!("http://{}/v1/traces", listener.local_addr().unwrap()),
            protocol: Protocol::HttpBinary,
            timeout: Duration::from_secs(30),
            ca_certificate: None,
        };
        let provider = tracer_provider(&otlp, &SamplingConfig::default(), "t").unwrap();
        for _ in 0..3 {
            provider.tracer("t").start("s").end();
        }
        let started = std::time::Instant::now();
        let result = TelemetryGuard::new(Some(provider), Duration::from_millis(800)).shutdown();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "{took:?}: {result:?}");
    }
}
