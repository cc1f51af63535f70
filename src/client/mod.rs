//! Kubernetes clients with fleetnet-hub's tower stack on top of kube's own: a token bucket
//! (one per client, never per request), a concurrency limit and a timeout for every request
//! except long-running watches, and per-verb request counting.
//!
//! Above the limit layer sits the retry layer ([`retry`]): 429 for every verb, 5xx and lost
//! answers for reads, after `Retry-After` or a jittered backoff, bounded. Each attempt takes
//! its own token and is counted; retries are counted too.

mod classify;
pub mod fence;
pub mod retry;
mod stats;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Request, Response};
use kube::client::{Body, ClientBuilder};
use tokio::sync::Semaphore;
use tower::{BoxError, Layer, Service, ServiceExt, buffer::BufferLayer, retry::RetryLayer};

pub use classify::{RequestKind, classify};
pub use fence::{Fence, Hold};
pub use retry::RetryLimits;
pub use stats::{ClientStats, RequestCount};

/// Limits of one client's outbound requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Sustained requests per second (client-go's QPS).
    pub qps: f64,
    /// Bucket size (client-go's burst).
    pub burst: u32,
    /// Requests in flight at once, watches not counted.
    pub max_in_flight: usize,
    /// Deadline of one request, watches excluded.
    pub timeout: Duration,
    /// Retries of refused or failed requests.
    pub retry: RetryLimits,
    /// A member's Events have a bucket of their own (`--event-qps`, `--event-burst`): they
    /// never take a token an export needs.
    pub event_qps: f64,
    pub event_burst: u32,
    /// Reconciles of one member running at once (`--reconcile-concurrency`); the others wait
    /// in the queue, not on the limiter.
    pub reconcile_concurrency: u16,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            qps: 20.0,
            burst: 30,
            max_in_flight: 32,
            timeout: Duration::from_secs(30),
            retry: RetryLimits::default(),
            event_qps: 10.0,
            event_burst: 25,
            reconcile_concurrency: 16,
        }
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("client {client}: invalid limits: {message}")]
    Limits { client: String, message: String },
    #[error("client {client}: {source}")]
    Kube {
        client: String,
        #[source]
        source: kube::Error,
    },
}

/// Builds a client for `config` whose requests all pass through `limits`, counted in `stats`.
pub fn build(
    name: &str,
    config: kube::Config,
    limits: &Limits,
    stats: Arc<ClientStats>,
) -> Result<kube::Client, Error> {
    build_fenced(name, config, limits, stats, Fence::open())
}

/// [`build`], and every write refused unless `fence` holds at the moment it is sent (each
/// attempt, after its wait for a token).
pub fn build_fenced(
    name: &str,
    mut config: kube::Config,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: Fence,
) -> Result<kube::Client, Error> {
    let layer = LimitLayer::new(name, limits, stats.clone())?;
    let retry = RetryLayer::new(retry::RetryPolicy::new(limits.retry.clone(), stats));
    // Ours is the one retry layer (see `retry`).
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).map_err(|source| Error::Kube {
        client: name.to_string(),
        source,
    })?;
    // The buffer makes kube's boxed stack cloneable, so a request can wait for its token
    // without holding the service.
    Ok(builder
        .with_layer(&fence::FenceLayer(fence))
        .with_layer(&tower::util::MapRequestLayer::new(identify))
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&layer)
        .with_layer(&retry)
        .build())
}

/// A client that sends through `client` (its budget, retries, counters), with every write
/// refused unless `fence` holds: one member's view of a client shared by many.
pub fn fenced_view(client: &kube::Client, fence: Fence) -> kube::Client {
    let shared = client.clone();
    let service = tower::ServiceBuilder::new()
        .layer(fence::FenceLayer(fence))
        .service_fn(move |req: Request<Body>| {
            let shared = shared.clone();
            async move { shared.send(req).await.map_err(BoxError::from) }
        });
    kube::Client::new(service, client.default_namespace().to_string())
}

/// The field manager every write of fleetnet-hub is recorded under (managedFields).
pub const FIELD_MANAGER: &str = "fleetnet-hub";

/// `fleetnet-hub/<version>`, the User-Agent of every request.
pub const USER_AGENT: &str = concat!("fleetnet-hub/", env!("CARGO_PKG_VERSION"));

/// Names the product on every request: its User-Agent, and `fieldManager` on every write
/// that does not name one already (server-side apply always does).
fn identify(mut req: Request<Body>) -> Request<Body> {
    req.headers_mut()
        .entry(http::header::USER_AGENT)
        .or_insert(http::HeaderValue::from_static(USER_AGENT));
    let write = matches!(
        *req.method(),
        http::Method::POST | http::Method::PUT | http::Method::PATCH
    );
    if write && let Some(uri) = with_field_manager(req.uri()) {
        *req.uri_mut() = uri;
    }
    req
}

/// `uri` with `fieldManager=fleetnet-hub` added, unless it already names a field manager.
fn with_field_manager(uri: &http::Uri) -> Option<http::Uri> {
    let query = uri.query().unwrap_or_default();
    if query.split('&').any(|kv| kv.starts_with("fieldManager=")) {
        return None;
    }
    let sep = if query.is_empty() { "" } else { "&" };
    let path_and_query = format!("{}?{query}{sep}fieldManager={FIELD_MANAGER}", uri.path());
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    http::Uri::from_parts(parts).ok()
}

/// The tower layer: token bucket + concurrency + timeout + counting.
#[derive(Clone)]
pub struct LimitLayer {
    shared: Arc<Shared>,
}

struct Shared {
    limiter: DefaultDirectRateLimiter,
    in_flight: Semaphore,
    timeout: Duration,
    stats: Arc<ClientStats>,
}

impl LimitLayer {
    /// One limiter for everything built from this layer (clone the layer to share it).
    pub fn new(name: &str, limits: &Limits, stats: Arc<ClientStats>) -> Result<Self, Error> {
        let bad = |message: &str| Error::Limits {
            client: name.to_string(),
            message: message.to_string(),
        };
        if !(limits.qps.is_finite() && limits.qps > 0.0) {
            return Err(bad("qps must be a positive number"));
        }
        let burst = NonZeroU32::new(limits.burst).ok_or_else(|| bad("burst must be at least 1"))?;
        if limits.max_in_flight == 0 {
            return Err(bad("max in flight must be at least 1"));
        }
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / limits.qps))
            .ok_or_else(|| bad("qps too large"))?
            .allow_burst(burst);
        Ok(Self {
            shared: Arc::new(Shared {
                limiter: RateLimiter::direct(quota),
                in_flight: Semaphore::new(limits.max_in_flight),
                timeout: limits.timeout,
                stats,
            }),
        })
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limited<S>;
    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`LimitLayer`] produces.
#[derive(Clone)]
pub struct Limited<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, B> Service<Request<Body>> for Limited<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is awaited per request inside `call`, after the token.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let kind = classify(req.method(), req.uri());
        let shared = self.shared.clone();
        let inner = self.inner.clone();
        // The verb and resource, which kube's own HTTP span cannot know.
        let span = tracing::debug_span!(
            "k8s.request",
            k8s.verb = kind.verb,
            k8s.resource = %kind.resource,
            http.status_code = tracing::field::Empty,
        );
        let fut = async move {
            let res = if kind.verb == "watch" {
                // Long-running: neither a QPS token nor an in-flight slot, or watches stall.
                inner.oneshot(req).await.map_err(Into::into)
            } else {
                let waited = Instant::now();
                shared.limiter.until_ready().await;
                let _slot = shared.in_flight.acquire().await.map_err(BoxError::from)?;
                shared.stats.add_wait(waited.elapsed());
                match tokio::time::timeout(shared.timeout, inner.oneshot(req)).await {
                    Ok(res) => res.map_err(Into::into),
                    Err(_) => Err(BoxError::from(format!(
                        "{} {} timed out after {:?}",
                        kind.verb, kind.resource, shared.timeout
                    ))),
                }
            };
            let code = res.as_ref().map(|r| r.status().as_u16()).ok();
            if let Some(code) = code {
                tracing::Span::current().record("http.status_code", code);
            }
            shared.stats.record(&kind, code);
            res
        };
        Box::pin(tracing::Instrument::instrument(fut, span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: http::Method, uri: &str) -> Request<Body> {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("request")
    }

    #[test]
    fn every_request_names_the_product_and_writes_its_field_manager() {
        let r = identify(req(http::Method::GET, "/api/v1/services?watch=true"));
        assert_eq!(r.headers()[http::header::USER_AGENT], USER_AGENT);
        assert!(USER_AGENT.starts_with("fleetnet-hub/"));
        assert_eq!(
            r.uri().query(),
            Some("watch=true"),
            "reads are left as they are"
        );
        let r = identify(req(
            http::Method::PATCH,
            "/apis/g/v1/namespaces/n/serviceexports/s/status",
        ));
        assert_eq!(r.uri().query(), Some("fieldManager=fleetnet-hub"));
        let r = identify(req(
            http::Method::POST,
            "https://h:6443/apis/g/v1/x?dryRun=All",
        ));
        assert_eq!(
            r.uri().query(),
            Some("dryRun=All&fieldManager=fleetnet-hub")
        );
        assert_eq!(r.uri().host(), Some("h"));
        let r = identify(req(http::Method::PATCH, "/x?fieldManager=mine&force=true"));
        assert_eq!(r.uri().query(), Some("fieldManager=mine&force=true"));
    }
}
