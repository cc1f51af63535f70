//! The tower stacks every Azure HTTP request goes through, built on one pooled `reqwest::Client`.
//!
//! Outer to inner, each layer seeing every attempt (first or retry, every page):
//!
//! | layer | ARM stack | token stack |
//! | --- | --- | --- |
//! | retry ([`super::retry::RetryPolicy`]) | yes | yes |
//! | token bucket ([`SharedRateLimitLayer`]) | the process-wide ARM budget | — |
//! | concurrency limit | the process-wide ARM budget | its own, small |
//! | per-attempt timeout (sending and reading the whole body) | yes | yes |
//! | counting ([`CountLayer`]) | `arm_requests`, `throttled` | the token `requests`, `throttled` |
//! | [`Sender`]: reqwest, body collected | yes | yes |
//!
//! The limiters sit inside the retry layer, so each retry takes its own token and permit and
//! no permit is held while a retry waits. The adapters to azure_core's `HttpClient` are in
//! [`super::http_client`].

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use azure_core::{SeekableStream, Url};
use bytes::Bytes;
use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{HeaderMap, Method, StatusCode};
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::retry::RetryLayer;
use tower::timeout::TimeoutLayer;
use tower::timeout::error::Elapsed;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

use super::config::AzureConfig;
use super::retry::{RetryLimits, RetryPolicy, retry_after};
use super::stats::TransportStats;

/// Token requests in flight at once. Credentials cache their tokens, so a handful is plenty.
const TOKEN_CONCURRENCY: usize = 4;

/// One outbound request as the stacks see it.
pub(crate) struct HttpRequest {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Payload,
    /// 1 for the first attempt; the retry policy counts up in the copy it re-sends.
    pub attempt: u32,
}

/// A request body.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Can be sent any number of times.
    Bytes(Bytes),
    /// Read while sending, so sent at most once: requests with such a body get no retries.
    Stream(Box<dyn SeekableStream>),
}

impl std::fmt::Debug for HttpRequest {
    // Headers left out: they carry the bearer token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url.as_str())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl HttpRequest {
    /// A copy to send again, if the body allows it.
    pub(crate) fn try_clone(&self) -> Option<Self> {
        let Payload::Bytes(body) = &self.body else {
            return None;
        };
        Some(Self {
            method: self.method.clone(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            body: Payload::Bytes(body.clone()),
            attempt: self.attempt,
        })
    }
}

/// A complete answer: the body has been read (under the attempt's timeout and permit).
#[derive(Debug, Clone)]
pub(crate) struct HttpResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Attempts made for this answer (set by the retry policy).
    pub attempts: u32,
}

impl HttpResponse {
    /// The server's `Retry-After` family, read on the statuses where Azure sends it (429, 503).
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self.status.as_u16() {
            429 | 503 => retry_after(&self.headers),
            _ => None,
        }
    }
}

/// No answer came.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub(crate) struct SendError {
    #[source]
    pub kind: SendErrorKind,
    /// Attempts made (set by the retry policy).
    pub attempts: u32,
}

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendErrorKind {
    /// The attempt's deadline passed before the whole answer was read.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or reading failed. Worth another attempt.
    #[error("transport error")]
    Transport(#[source] reqwest::Error),
    /// The request could not be built or sent for a reason another attempt would not fix.
    #[error("invalid request")]
    Request(#[source] BoxError),
}

impl SendError {
    fn new(kind: SendErrorKind) -> Self {
        Self { kind, attempts: 1 }
    }

    /// Timeouts and transport failures: the request may well succeed if sent again.
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            SendErrorKind::Timeout(_) | SendErrorKind::Transport(_)
        )
    }

    /// Errors out of [`TimeoutLayer`]: its own `Elapsed`, or the inner [`SendError`] boxed.
    fn from_timeout_layer(error: BoxError, timeout: Duration) -> Self {
        match error.downcast::<SendError>() {
            Ok(error) => *error,
            Err(error) if error.is::<Elapsed>() => Self::new(SendErrorKind::Timeout(timeout)),
            Err(error) => Self::new(SendErrorKind::Request(error)),
        }
    }
}

/// The stacks' common type: cloned per request (cheap; limiters are shared through `Arc`s).
pub(crate) type HttpService = BoxCloneSyncService<HttpRequest, HttpResponse, SendError>;

/// The innermost service: sends with the pooled client and reads the whole body.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    client: reqwest::Client,
}

impl Sender {
    pub(crate) fn new(client: reqwest::Client) -> Self {
        Self { client }
    }
}

impl Service<HttpRequest> for Sender {
    type Response = HttpResponse;
    type Error = SendError;
    type Future = BoxFuture<'static, Result<HttpResponse, SendError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let builder = client
                .request(request.method, request.url)
                .headers(request.headers);
            let builder = match request.body {
                Payload::Bytes(bytes) => builder.body(bytes),
                Payload::Stream(stream) => builder.body(reqwest::Body::wrap_stream(stream)),
            };
            let built = builder
                .build()
                .map_err(|e| SendError::new(SendErrorKind::Request(e.into())))?;
            let transport = |e| SendError::new(SendErrorKind::Transport(e));
            let mut response = client.execute(built).await.map_err(transport)?;
            let status = response.status();
            let headers = std::mem::take(response.headers_mut());
            let body = response.bytes().await.map_err(transport)?;
            Ok(HttpResponse {
                status,
                headers,
                body,
                attempts: 1,
            })
        })
    }
}

/// Counts every attempt that reaches it, and 429 answers.
#[derive(Debug, Clone)]
pub(crate) struct CountLayer {
    stats: Arc<TransportStats>,
}

impl CountLayer {
    pub(crate) fn new(stats: Arc<TransportStats>) -> Self {
        Self { stats }
    }
}

impl<S> Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            stats: Arc::clone(&self.stats),
        }
    }
}

/// The service [`CountLayer`] produces.
#[derive(Debug, Clone)]
pub(crate) struct Counted<S> {
    inner: S,
    stats: Arc<TransportStats>,
}

impl<S> Service<HttpRequest> for Counted<S>
where
    S: Service<HttpRequest, Response = HttpResponse>,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<HttpResponse, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        self.stats.record_request();
        let stats = Arc::clone(&self.stats);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            if matches!(&result, Ok(r) if r.status == StatusCode::TOO_MANY_REQUESTS) {
                stats.record_throttled();
            }
            result
        })
    }
}

/// A token bucket shared by every service built from this layer and every clone of them
/// (tower's `RateLimit` is per service instance). Records the time waited for a token.
#[derive(Debug, Clone)]
pub(crate) struct SharedRateLimitLayer {
    limiter: Arc<DefaultDirectRateLimiter>,
    stats: Arc<TransportStats>,
}

impl SharedRateLimitLayer {
    pub(crate) fn new(limiter: Arc<DefaultDirectRateLimiter>, stats: Arc<TransportStats>) -> Self {
        Self { limiter, stats }
    }
}

impl<S> Layer<S> for SharedRateLimitLayer {
    type Service = SharedRateLimit<S>;

    fn layer(&self, inner: S) -> SharedRateLimit<S> {
        SharedRateLimit {
            inner,
            limiter: Arc::clone(&self.limiter),
            stats: Arc::clone(&self.stats),
        }
    }
}

/// The service [`SharedRateLimitLayer`] produces.
#[derive(Debug, Clone)]
pub(crate) struct SharedRateLimit<S> {
    inner: S,
    limiter: Arc<DefaultDirectRateLimiter>,
    stats: Arc<TransportStats>,
}

impl<S> Service<HttpRequest> for SharedRateLimit<S>
where
    S: Service<HttpRequest> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    S::Response: Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // The inner service's readiness (a concurrency permit) is awaited in `call`, after the
        // token, so that a request waiting for a token holds no permit.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        let inner = self.inner.clone();
        let limiter = Arc::clone(&self.limiter);
        let stats = Arc::clone(&self.stats);
        Box::pin(async move {
            let waiting = Instant::now();
            limiter.until_ready().await;
            stats.add_limiter_wait(waiting.elapsed());
            inner.oneshot(request).await
        })
    }
}

/// The process-wide ARM request budget, shared by every member and subscription: a token
/// bucket and a concurrency limit.
#[derive(Debug, Clone)]
pub(crate) struct ArmBudget {
    limiter: Arc<DefaultDirectRateLimiter>,
    concurrency: Arc<Semaphore>,
}

impl ArmBudget {
    /// `config` must have passed `validate()`.
    pub(crate) fn new(config: &AzureConfig) -> Self {
        let burst = NonZeroU32::new(config.arm_burst).unwrap_or(NonZeroU32::MIN);
        let period = Duration::try_from_secs_f64(1.0 / config.arm_qps)
            .ok()
            .filter(|p| !p.is_zero())
            .unwrap_or(Duration::from_millis(100));
        let quota = Quota::with_period(period)
            .unwrap_or(Quota::per_second(NonZeroU32::MIN))
            .allow_burst(burst);
        Self {
            limiter: Arc::new(RateLimiter::direct(quota)),
            concurrency: Arc::new(Semaphore::new(config.max_concurrency.max(1))),
        }
    }
}

fn retry_limits(config: &AzureConfig) -> RetryLimits {
    RetryLimits {
        max_retries: config.max_retries,
        base_delay: config.retry_base_delay,
        max_wait: config.max_retry_wait,
    }
}

/// The stack for ARM requests: retry, the ARM budget, timeout, counting.
pub(crate) fn arm_stack(
    client: reqwest::Client,
    config: &AzureConfig,
    budget: &ArmBudget,
    stats: Arc<TransportStats>,
) -> HttpService {
    let timeout = config.request_timeout;
    let policy = RetryPolicy::new("ARM", retry_limits(config), Arc::clone(&stats));
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .layer(SharedRateLimitLayer::new(
                Arc::clone(&budget.limiter),
                Arc::clone(&stats),
            ))
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::clone(
                &budget.concurrency,
            )))
            .map_err(move |e| SendError::from_timeout_layer(e, timeout))
            .layer(TimeoutLayer::new(timeout))
            .layer(CountLayer::new(stats))
            .service(Sender::new(client)),
    )
}

/// The stack for token requests (Entra ID, IMDS): retry, a small concurrency limit of its own,
/// timeout, counting. Not the ARM budget: a token is what lets ARM requests go at all.
pub(crate) fn token_stack(
    client: reqwest::Client,
    config: &AzureConfig,
    stats: Arc<TransportStats>,
) -> HttpService {
    let timeout = config.request_timeout;
    let policy = RetryPolicy::new("token", retry_limits(config), Arc::clone(&stats));
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .layer(GlobalConcurrencyLimitLayer::new(TOKEN_CONCURRENCY))
            .map_err(move |e| SendError::from_timeout_layer(e, timeout))
            .layer(TimeoutLayer::new(timeout))
            .layer(CountLayer::new(stats))
            .service(Sender::new(client)),
    )
}
