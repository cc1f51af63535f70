//! For the observability tests: OTLP trace receivers on 127.0.0.1 (a gRPC `TraceService`
//! server and an HTTP/protobuf `/v1/traces` endpoint), the spans they received in a flat form,
//! and a starter for one member's exporter with a given [`ReconcileObserver`].

use super::tls;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use fleetnet_hub::client::ClientStats;
use fleetnet_hub::controller::ReconcileObserver;
use fleetnet_hub::export::{MemberExporter, Settings};
use fleetnet_hub::member_watches::MemberWatches;
use fleetnet_hub::service_exports::ServiceExportFeed;
use fleetnet_testenv::Fleet;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::sync::oneshot;

use crate::support::{CONVERGE, counted_client};

/// One received span, ids in lower-case hex, attribute values as strings.
#[derive(Debug, Clone)]
pub struct ExportedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP `SpanKind` (3 = client).
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
}

impl ExportedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty()
    }
}

/// What a receiver got.
#[derive(Default)]
struct Received {
    requests: Vec<ExportTraceServiceRequest>,
    /// `authorization` headers seen on export requests (none are configured).
    authorization_headers: usize,
    content_types: Vec<String>,
}

/// A running OTLP receiver; stops when dropped.
pub struct Receiver {
    /// What to put in `OTEL_EXPORTER_OTLP_ENDPOINT` (`http://127.0.0.1:<port>`).
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

struct GrpcTraces(Arc<Mutex<Received>>);

#[tonic::async_trait]
impl TraceService for GrpcTraces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let auth = request.metadata().get("authorization").is_some();
        let mut r = lock(&self.0);
        r.authorization_headers += usize::from(auth);
        r.content_types.push("application/grpc".into());
        r.requests.push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A private CA and a certificate for 127.0.0.1 it signed ([`tls::make_pki`]), kept on disk.
pub struct TestPki {
    _dir: tempfile::TempDir,
    /// The CA certificate (PEM file), for `OTEL_EXPORTER_OTLP_CERTIFICATE`.
    pub ca_pem: std::path::PathBuf,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl TestPki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let (_, cert_pem, key_pem) = tls::make_pki(d);
        Self {
            ca_pem: d.join("ca.pem"),
            cert_pem,
            key_pem,
            _dir: dir,
        }
    }
}

impl Receiver {
    /// A gRPC `opentelemetry.proto.collector.trace.v1.TraceService` server.
    pub async fn grpc() -> Self {
        Self::grpc_with(None).await
    }

    /// The gRPC receiver over TLS with `pki`'s certificate (`https://127.0.0.1:<port>`).
    pub async fn grpc_tls(pki: &TestPki) -> Self {
        Self::grpc_with(Some(pki)).await
    }

    async fn grpc_with(pki: Option<&TestPki>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind grpc receiver");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Received::default()));
        let (stop, stopped) = oneshot::channel::<()>();
        let service = TraceServiceServer::new(GrpcTraces(received.clone()));
        let mut server = tonic::transport::Server::builder();
        if let Some(pki) = pki {
            server = server
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(
                    tonic::transport::Identity::from_pem(&pki.cert_pem, &pki.key_pem),
                ))
                .expect("server TLS");
        }
        let task = tokio::spawn(async move {
            server
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await
                .expect("grpc receiver");
        });
        Self {
            endpoint: format!("{}://{addr}", if pki.is_some() { "https" } else { "http" }),
            received,
            stop: Some(stop),
            task,
        }
    }

    /// An HTTP server decoding `ExportTraceServiceRequest` protobuf bodies on `/v1/traces`.
    pub async fn http() -> Self {
        Self::http_with(None).await
    }

    /// The HTTP receiver over TLS with `pki`'s certificate (`https://127.0.0.1:<port>`).
    pub async fn https(pki: &TestPki) -> Self {
        Self::http_with(Some(pki)).await
    }

    async fn http_with(pki: Option<&TestPki>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind http receiver");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Received::default()));
        let state = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move { http_export(&state, &headers, &body) }
            }),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = match pki {
            None => tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
                    .expect("http receiver");
            }),
            Some(pki) => {
                let listener = tls::Listener {
                    tcp: listener,
                    acceptor: tls::acceptor(&pki.cert_pem, &pki.key_pem),
                };
                tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await
                        .expect("https receiver");
                })
            }
        };
        Self {
            endpoint: format!("{}://{addr}", if pki.is_some() { "https" } else { "http" }),
            received,
            stop: Some(stop),
            task,
        }
    }

    /// Export requests received.
    pub fn requests(&self) -> usize {
        lock(&self.received).requests.len()
    }

    /// `authorization` headers seen on export requests.
    pub fn authorization_headers(&self) -> usize {
        lock(&self.received).authorization_headers
    }

    /// Content types of the requests.
    pub fn content_types(&self) -> Vec<String> {
        lock(&self.received).content_types.clone()
    }

    /// Every request, as `Debug` text: every string of every attribute, resource and event.
    pub fn dump(&self) -> String {
        format!("{:?}", lock(&self.received).requests)
    }

    /// Every span received.
    pub fn spans(&self) -> Vec<ExportedSpan> {
        let r = lock(&self.received);
        let mut out = vec![];
        for req in &r.requests {
            for rs in &req.resource_spans {
                let resource = rs
                    .resource
                    .as_ref()
                    .map(|r| attributes(&r.attributes))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for s in &ss.spans {
                        out.push(ExportedSpan {
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            parent_span_id: hex(&s.parent_span_id),
                            name: s.name.clone(),
                            kind: s.kind,
                            attributes: attributes(&s.attributes),
                            resource: resource.clone(),
                        });
                    }
                }
            }
        }
        out
    }
}

fn http_export(
    state: &Mutex<Received>,
    headers: &HeaderMap,
    body: &[u8],
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let proto = [(header::CONTENT_TYPE, "application/x-protobuf")];
    if ct != "application/x-protobuf" {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, proto, vec![]);
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, proto, vec![]);
    };
    let mut r = lock(state);
    r.authorization_headers += usize::from(headers.contains_key(header::AUTHORIZATION));
    r.content_types.push(ct);
    r.requests.push(request);
    (
        StatusCode::OK,
        proto,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(value).unwrap_or_default(),
            )
        })
        .collect()
}

fn value(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One member's exporter started with `observer`, and its clients' counters.
pub struct ObservedExporter {
    pub member_stats: Arc<ClientStats>,
    pub hub_stats: Arc<ClientStats>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ObservedExporter {
    /// Stops the controller (in-flight reconciles finish) and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        }
    }
}

impl Drop for ObservedExporter {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Starts `member`'s exporter of `fleet` (admin kubeconfigs, leader) reporting to `observer`,
/// and waits for its watches to sync.
pub async fn start_observed(
    fleet: &Fleet,
    member: &str,
    observer: Arc<dyn ReconcileObserver>,
) -> ObservedExporter {
    let member_stats = Arc::new(ClientStats::default());
    let hub_stats = Arc::new(ClientStats::default());
    let member_client = counted_client(
        member,
        fleet.member(member).kubeconfig_path(),
        member_stats.clone(),
    )
    .await;
    let hub_client = counted_client("hub", fleet.hub().kubeconfig_path(), hub_stats.clone()).await;
    let mut feed =
        ServiceExportFeed::watch(&member_client, Default::default(), member, observer.clone());
    let mut watches = MemberWatches::of(&member_client);
    let exporter = MemberExporter {
        member: member.to_string(),
        events_client: member_client.clone(),
        member_client,
        hub_client: hub_client.clone(),
        hub_namespace: fleet.hub_namespace(member),
        exports: feed.subscribe(0),
        settings: Settings {
            member: member.to_string(),
            traffic_manager: false,
            default_resource_group: "rg-default".into(),
            quotas: Default::default(),
            allowed_resource_groups: vec![],
        },
        public_ips: None,
        claim: fleetnet_hub::ownership::Claim::of(fleetnet_hub::ownership::Fence::open()),
        observer,
        instance: "observability-test".into(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    // The replica's ISE watch, the member's namespace in it.
    let ises = fleetnet_hub::export::hub_tap(&hub_client, true);
    ises.members(&[fleet.hub_namespace(member)], true);
    let (run, synced) = exporter.start((&mut watches.services, &ises), async move {
        let _ = stopped.await;
    });
    let feed = feed.run(std::future::pending());
    let watches = watches.run(tokio_util::sync::CancellationToken::new());
    let ises = ises.run(std::future::pending());
    let task = tokio::spawn(async move {
        // The feeds run as long as the exporter.
        tokio::select! {
            () = run => {}
            () = feed => {}
            () = watches => {}
            () = ises => {}
        }
    });
    tokio::time::timeout(CONVERGE, synced.wait())
        .await
        .expect("exporter watches synced");
    ObservedExporter {
        member_stats,
        hub_stats,
        stop: Some(stop),
        task: Some(task),
    }
}

/// The bearer tokens and CA data of a kubeconfig file: what must never reach a span or a log.
pub fn kubeconfig_secrets(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("kubeconfig readable");
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            [
                "token:",
                "certificate-authority-data:",
                "client-key-data:",
                "client-certificate-data:",
            ]
            .iter()
            .find_map(|k| l.strip_prefix(k))
            .map(|v| v.trim().trim_matches('"').to_string())
        })
        .filter(|v| v.len() >= 8)
        .collect()
}
