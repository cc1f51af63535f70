//! A hostile member: an HTTPS server (a private CA made here, put in the kubeconfig's
//! `certificate-authority-data`) that answers what fleetnet-hub asks a member's API server
//! (`/version`, `/api`, `/apis`, the ServiceExport group's resources, LIST and WATCH of
//! Services, ServiceExports and EndpointSlices) and misbehaves in one [`Mode`].

use super::tls;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde_json::json;

/// How the member misbehaves. The misbehaviour answers the LIST of Services (every member
/// view lists Services first), unless said otherwise; everything else answers like an empty
/// cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A LIST body that never ends.
    Endless,
    /// A LIST body of this many bytes (a list that is only ever opened).
    Huge(u64),
    /// A LIST body at a byte a second.
    Trickle,
    /// A LIST body that is not JSON.
    Malformed,
    /// Every request refused: 429 with this `Retry-After`.
    RetryAfter(&'static str),
    /// This many Services, in pages of the request's `limit` when `paged`, else in one body.
    Objects { count: usize, paged: bool },
    /// Services and ServiceExports named with control characters (a forged log line).
    ControlNames,
    /// The LIST answers; the WATCH of Services sends one event of this many bytes.
    HugeEvent(u64),
}

/// The name the [`Mode::ControlNames`] objects carry.
pub const FORGED_NAME: &str = "evil\u{1b}[31m\nlevel=ERROR forged=\"line\"\r\u{7}";

/// A running hostile member; stops when dropped.
pub struct HostileMember {
    pub addr: std::net::SocketAddr,
    /// The CA that signed the server's certificate (PEM).
    pub ca_pem: Vec<u8>,
    /// Body bytes the misbehaving answers produced, all answers together.
    pub sent: Arc<AtomicU64>,
    /// The most body bytes one misbehaving answer produced (what the client read of it, give
    /// or take the transport's buffers).
    pub largest: Arc<AtomicU64>,
    /// Requests received, as `METHOD path?query`.
    pub requests: Arc<parking_lot::Mutex<Vec<String>>>,
    _pki: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for HostileMember {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[derive(Clone)]
struct Hostile {
    mode: Mode,
    sent: Counters,
    requests: Arc<parking_lot::Mutex<Vec<String>>>,
}

impl HostileMember {
    /// Serves `mode` on a free loopback port.
    pub async fn start(mode: Mode) -> Self {
        let pki = tempfile::tempdir().expect("tempdir");
        let (ca_pem, cert_pem, key_pem) = tls::make_pki(pki.path());
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind hostile member");
        let addr = tcp.local_addr().expect("addr");
        let state = Hostile {
            mode,
            sent: Counters::default(),
            requests: Arc::default(),
        };
        let (sent, largest) = (state.sent.total.clone(), state.sent.largest.clone());
        let requests = state.requests.clone();
        let app = axum::Router::new().fallback(answer).with_state(state);
        let listener = tls::Listener {
            tcp,
            acceptor: tls::acceptor(&cert_pem, &key_pem),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self {
            addr,
            ca_pem,
            sent,
            largest,
            requests,
            _pki: pki,
            stop: Some(stop),
        }
    }

    /// A token kubeconfig for this member (server `https://127.0.0.1:<port>`, the CA inline).
    pub fn kubeconfig(&self, name: &str, token: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: https://{addr}
    certificate-authority-data: {ca}
users:
- name: {name}
  user:
    token: {token}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
",
            addr = self.addr,
            ca = tls::base64(&self.ca_pem),
        )
    }

    /// Requests whose line starts with `prefix` (`GET /api/v1/services`).
    pub fn requests_to(&self, prefix: &str) -> usize {
        self.requests
            .lock()
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }
}

async fn answer(State(h): State<Hostile>, req: Request) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let path = uri.path().to_string();
    let query = uri.query().unwrap_or_default().to_string();
    h.requests.lock().push(format!("{method} {path}?{query}"));
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    let watch = matches!(param("watch").as_deref(), Some("true" | "1"));
    if let Mode::RetryAfter(after) = h.mode {
        let mut r = status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests");
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static(after));
        return r;
    }
    if method != Method::GET {
        return status(StatusCode::NOT_FOUND, "NotFound");
    }
    let services = path == "/api/v1/services";
    let exports = path == "/apis/networking.fleet.azure.com/v1beta1/serviceexports";
    let slices = path == "/apis/discovery.k8s.io/v1/endpointslices";
    match path.as_str() {
        "/version" => return json_response(version()),
        "/api" => {
            return json_response(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": []}));
        }
        "/apis" => return json_response(groups()),
        "/apis/networking.fleet.azure.com/v1beta1" => return json_response(fleet_resources()),
        "/apis/discovery.k8s.io/v1" => return json_response(slice_resources()),
        _ => {}
    }
    if !(services || exports || slices) {
        return status(StatusCode::NOT_FOUND, "NotFound");
    }
    let timeout = param("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(290u64);
    if watch {
        return match h.mode {
            Mode::HugeEvent(n) if services => {
                let head = Bytes::from_static(
                    br#"{"type":"ADDED","object":{"kind":"Service","metadata":{"name":""#,
                );
                streaming(counted(h.sent.clone(), once(head).chain(filler(n))))
            }
            // A quiet watch, closed by the server at its timeout as kube-apiserver does.
            _ => streaming(futures::stream::once(async move {
                tokio::time::sleep(Duration::from_secs(timeout)).await;
                Ok::<_, Infallible>(Bytes::new())
            })),
        };
    }
    let kind = if services {
        "ServiceList"
    } else if exports {
        "ServiceExportList"
    } else {
        "EndpointSliceList"
    };
    let head = format!(
        r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"resourceVersion":"1"}},"items":["#
    );
    let sent = h.sent.clone();
    match h.mode {
        Mode::Endless if services => streaming(counted(
            sent,
            once(Bytes::from(head)).chain(filler(u64::MAX)),
        )),
        Mode::Huge(n) if services => {
            streaming(counted(sent, once(Bytes::from(head)).chain(filler(n))))
        }
        Mode::Trickle if services => streaming(counted(
            sent,
            futures::stream::unfold(Bytes::from(head), |rest| async move {
                if rest.is_empty() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    return Some((Ok(Bytes::from_static(b" ")), rest));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                Some((Ok(rest.slice(..1)), rest.slice(1..)))
            }),
        )),
        Mode::Malformed if services => {
            json_text(format!("{head}{{\"metadata\": {{\"name\": nope]]]"))
        }
        Mode::Objects { count, paged } if services => {
            let limit = param("limit").and_then(|l| l.parse::<usize>().ok());
            let from = param("continue")
                .and_then(|c| c.parse::<usize>().ok())
                .unwrap_or(0);
            let to = match (paged, limit) {
                (true, Some(limit)) if limit > 0 => (from + limit).min(count),
                _ => count,
            };
            let next = if to < count {
                format!(r#","continue":"{to}""#)
            } else {
                String::new()
            };
            let head = format!(
                r#"{{"apiVersion":"v1","kind":"ServiceList","metadata":{{"resourceVersion":"1"{next}}},"items":["#
            );
            let items = futures::stream::iter(from..to).map(move |i| {
                let sep = if i + 1 < to { "," } else { "" };
                Ok::<_, Infallible>(Bytes::from(format!(
                    r#"{{"metadata":{{"name":"svc-{i}","namespace":"ns","resourceVersion":"1","uid":"u-{i}","annotations":{{"pad":"{PAD}"}}}},"spec":{{"ports":[{{"port":80}}]}}}}{sep}"#
                )))
            });
            streaming(counted(
                sent,
                once(Bytes::from(head))
                    .chain(items)
                    .chain(once(Bytes::from_static(b"]}"))),
            ))
        }
        Mode::ControlNames if services || exports => {
            let name = serde_json::to_string(FORGED_NAME).expect("a JSON string");
            let item = if services {
                format!(
                    r#"{{"metadata":{{"name":{name},"namespace":"ns","resourceVersion":"1","uid":"u-1"}},"spec":{{"ports":[{{"port":80}}]}}}}"#
                )
            } else {
                format!(
                    r#"{{"apiVersion":"networking.fleet.azure.com/v1beta1","kind":"ServiceExport","metadata":{{"name":{name},"namespace":"ns","resourceVersion":"1","uid":"u-2"}}}}"#
                )
            };
            json_text(format!("{head}{item}]}}"))
        }
        _ => json_text(format!("{head}]}}")),
    }
}

/// An annotation that makes each of [`Mode::Objects`]' Services ~210 bytes: 100,000 of them
/// in one body are over the default 16 MiB cap.
const PAD: &str =
    "pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp";

/// One chunk.
fn once(b: Bytes) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    futures::stream::once(async move { Ok(b) })
}

/// `n` bytes of JSON-looking filler (a string that never closes), in 64 KiB chunks.
fn filler(n: u64) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let chunk = Bytes::from(vec![b'a'; 64 << 10]);
    futures::stream::unfold(n, move |left| {
        let chunk = chunk.clone();
        async move {
            if left == 0 {
                return None;
            }
            let take = left.min(chunk.len() as u64);
            Some((Ok(chunk.slice(..take as usize)), left - take))
        }
    })
}

/// Bytes sent: in all, and in the largest answer.
#[derive(Clone, Default)]
struct Counters {
    total: Arc<AtomicU64>,
    largest: Arc<AtomicU64>,
}

/// `body`, its bytes counted in `sent` as they go.
fn counted(
    sent: Counters,
    body: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let mut this_answer = 0u64;
    body.inspect(move |b| {
        if let Ok(b) = b {
            let n = b.len() as u64;
            this_answer += n;
            sent.total.fetch_add(n, Ordering::Relaxed);
            sent.largest.fetch_max(this_answer, Ordering::Relaxed);
        }
    })
}

fn streaming(body: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static) -> Response {
    let mut r = Response::new(Body::from_stream(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn json_text(text: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

fn json_response(v: serde_json::Value) -> Response {
    json_text(v.to_string())
}

/// A `metav1.Status` answer.
fn status(code: StatusCode, reason: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("hostile member says {reason}"), "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn version() -> serde_json::Value {
    json!({
        "major": "1", "minor": "36", "gitVersion": "v1.36.0", "gitCommit": "hostile",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

fn group(name: &str, version: &str) -> serde_json::Value {
    let gv = json!({"groupVersion": format!("{name}/{version}"), "version": version});
    json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
}

fn groups() -> serde_json::Value {
    json!({
        "kind": "APIGroupList", "apiVersion": "v1",
        "groups": [
            group("networking.fleet.azure.com", "v1beta1"),
            group("discovery.k8s.io", "v1"),
        ]
    })
}

fn resource(name: &str, kind: &str) -> serde_json::Value {
    json!({
        "name": name, "singularName": "", "namespaced": true, "kind": kind,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]
    })
}

fn fleet_resources() -> serde_json::Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": "networking.fleet.azure.com/v1beta1",
        "resources": [
            resource("serviceexports", "ServiceExport"),
            resource("serviceexports/status", "ServiceExport"),
        ]
    })
}

fn slice_resources() -> serde_json::Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "discovery.k8s.io/v1",
        "resources": [resource("endpointslices", "EndpointSlice")]
    })
}
