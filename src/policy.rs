//! The client policy: the tower layers every outbound HTTP stack of the process composes, the
//! Kubernetes clients ([`crate::client`]) and the ARM and token stacks ([`crate::azure`]).
//! [`Policy::layers`] stacks them, outer to inner:
//!
//! | layer | what it does |
//! | --- | --- |
//! | [`Classify`] | puts the request's [`RequestKind`] in its extensions, for the layers below |
//! | retry ([`RetryPolicy`]) | sends again what [`decide`] allows, after [`retry_after`] or [`backoff`] |
//! | [`Count`] | counts every attempt in [`ClientStats`] by verb, resource and status |
//! | [`RateLimit`] | waits for a token of a shared token bucket ([`bucket`], governor) |
//! | [`Concurrency`] | waits for a slot of a shared semaphore |
//! | [`Timeout`] | a deadline per attempt |
//!
//! Below the retry layer each attempt (first, retry, every page) takes its own token and slot
//! and is counted; no slot is held while a retry waits. Long-running requests (watches,
//! [`Repeat::Never`]) skip the bucket, the slots and the deadline, and are never retried here.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{HeaderMap, Method, Request, Response, Uri};
use tokio::sync::Semaphore;
use tower::layer::util::{Identity, Stack};
use tower::retry::RetryLayer;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

/// Which failed attempts of a request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Long-running (a watch): its owner resumes it. No token, slot or deadline either.
    Never,
    /// After a 429 only: the server refused it before acting on it (writes).
    Throttled,
    /// After a 429, 408, 5xx or no answer: sending it again changes nothing (reads, tokens).
    Always,
}

/// What a request is, for counting and retrying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKind {
    /// The verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, …).
    pub verb: &'static str,
    /// What it acts on (`services`, `serviceexports/status`; `-` for anything else).
    pub resource: String,
    pub repeat: Repeat,
}

impl RequestKind {
    fn of<B>(req: &Request<B>) -> Self {
        req.extensions().get::<Self>().cloned().unwrap_or(Self {
            verb: "other",
            resource: "-".into(),
            repeat: Repeat::Throttled,
        })
    }

    /// Whether the request changes state.
    pub fn is_write(&self) -> bool {
        is_write_verb(self.verb)
    }
}

fn is_write_verb(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// Requests of one (verb, resource, code).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestCount {
    pub verb: &'static str,
    pub resource: String,
    /// HTTP status, or `None` when no response arrived (transport error, timeout).
    pub code: Option<u16>,
    pub count: u64,
}

impl RequestCount {
    /// Whether the request changed state.
    pub fn is_write(&self) -> bool {
        is_write_verb(self.verb)
    }
}

/// `(verb, resource, status code)`.
type RequestKey = (&'static str, String, Option<u16>);

/// The counters of one stack, read by `/metrics` and by tests. Cheap to update from many tasks.
#[derive(Debug, Default)]
pub struct ClientStats {
    requests: Mutex<BTreeMap<RequestKey, u64>>,
    wait_micros: AtomicU64,
    retries: AtomicU64,
}

impl ClientStats {
    fn record(&self, kind: &RequestKind, code: Option<u16>) {
        let mut map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((kind.verb, kind.resource.clone(), code))
            .or_default() += 1;
    }

    fn add_wait(&self, waited: Duration) {
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.wait_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Attempts sent again by the retry layer (each is also counted as a request).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Every counter, sorted.
    pub fn snapshot(&self) -> Vec<RequestCount> {
        let map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .map(|((verb, resource, code), count)| RequestCount {
                verb,
                resource: resource.clone(),
                code: *code,
                count: *count,
            })
            .collect()
    }

    /// Total requests matching `pred`.
    pub fn count_where(&self, pred: impl Fn(&RequestCount) -> bool) -> u64 {
        self.snapshot()
            .iter()
            .filter(|c| pred(c))
            .map(|c| c.count)
            .sum()
    }

    /// Every attempt sent.
    pub fn requests(&self) -> u64 {
        self.count_where(|_| true)
    }

    /// 429 answers.
    pub fn throttled(&self) -> u64 {
        self.count_where(|c| c.code == Some(429))
    }

    /// Requests that change state (create, update, patch, delete), Events not counted.
    pub fn writes_excluding_events(&self) -> u64 {
        self.count_where(|c| c.is_write() && c.resource != "events")
    }

    /// Time spent waiting for a token or a slot.
    pub fn waited(&self) -> Duration {
        Duration::from_micros(self.wait_micros.load(Ordering::Relaxed))
    }
}

/// A token bucket of `qps` tokens a second and `burst` at once, to share (clone the `Arc`)
/// between every stack that spends the same budget.
pub fn bucket(qps: f64, burst: u32) -> Result<Arc<DefaultDirectRateLimiter>, &'static str> {
    if !(qps.is_finite() && qps > 0.0) {
        return Err("qps must be a positive number");
    }
    let burst = NonZeroU32::new(burst).ok_or("burst must be at least 1")?;
    let quota = Duration::try_from_secs_f64(1.0 / qps)
        .ok()
        .and_then(Quota::with_period)
        .ok_or("qps too large")?;
    Ok(Arc::new(RateLimiter::direct(quota.allow_burst(burst))))
}

/// How a stack retries.
#[derive(Debug, Clone)]
pub struct RetryLimits {
    /// Retries of one request after the first attempt.
    pub max_retries: u32,
    /// First backoff when the server gives no `Retry-After` (doubles per retry, jittered).
    pub base_delay: Duration,
    /// The longest wait before a retry. A longer `Retry-After` is not waited out here: the
    /// answer goes back to the caller, whose reconcile requeues.
    pub max_wait: Duration,
}

impl Default for RetryLimits {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(200),
            max_wait: Duration::from_secs(10),
        }
    }
}

/// What one attempt ended with, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP status, with the server's `Retry-After` when it sent one.
    Status {
        code: u16,
        retry_after: Option<Duration>,
    },
    /// No answer: transport error or timeout.
    NoAnswer,
}

/// Whether to retry, and after how long: `retries` is how many were done already, `jitter` a
/// number in [0, 1). At least the server's `Retry-After` (a fifth more at most, so requests
/// refused together do not come back together), else [`backoff`]; never over `max_wait`.
pub fn decide(
    repeat: Repeat,
    answer: Answer,
    retries: u32,
    limits: &RetryLimits,
    jitter: f64,
) -> Option<Duration> {
    if retries >= limits.max_retries {
        return None;
    }
    let retry_after = match (repeat, answer) {
        (Repeat::Never, _) => return None,
        (
            _,
            Answer::Status {
                code: 429,
                retry_after,
            },
        ) => retry_after,
        (
            Repeat::Always,
            Answer::Status {
                code: 408 | 500 | 502 | 503 | 504,
                retry_after,
            },
        ) => retry_after,
        (Repeat::Always, Answer::NoAnswer) => None,
        _ => return None,
    };
    let jitter = jitter.clamp(0.0, 1.0);
    let wait = match retry_after {
        Some(after) => after + after.mul_f64(0.2 * jitter),
        None => backoff(limits.base_delay, retries, limits.max_wait, jitter),
    };
    (wait <= limits.max_wait).then_some(wait)
}

/// THE backoff of the process: exponential with "equal jitter", between half and all of
/// `base * 2^retry`, capped at `max`. `jitter` in [0, 1).
pub fn backoff(base: Duration, retry: u32, max: Duration, jitter: f64) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(retry.min(16)));
    exp.min(max).mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// The server's wait before a retry: `retry-after-ms` or `x-ms-retry-after-ms` (milliseconds,
/// Azure), else `Retry-After` in seconds or as an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    for name in ["retry-after-ms", "x-ms-retry-after-ms"] {
        if let Some(ms) = text(name).and_then(|v| v.parse().ok()) {
            return Some(Duration::from_millis(ms));
        }
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse() {
        return Some(Duration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    Some(
        at.duration_since(jiff::Timestamp::now())
            .try_into()
            .unwrap_or_default(),
    )
}

/// Attempts made for an answer, in its extensions (1 when no retry layer stamped it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts(pub u32);

/// A request body that can be sent again, or not (a stream).
pub trait Resend: Sized {
    fn resend(&self) -> Option<Self>;
}

impl Resend for bytes::Bytes {
    fn resend(&self) -> Option<Self> {
        Some(self.clone())
    }
}

/// The retry policy; cloned for each request, so `retries` counts that request's retries.
#[derive(Clone)]
pub struct RetryPolicy {
    limits: Arc<RetryLimits>,
    stats: Arc<ClientStats>,
    retries: u32,
}

impl<B: Resend, RB> tower::retry::Policy<Request<B>, Response<RB>, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<RB>, BoxError>,
    ) -> Option<Self::Future> {
        let answer = match result {
            Ok(response) => {
                response.extensions_mut().insert(Attempts(self.retries + 1));
                if response.status().is_success() {
                    return None;
                }
                Answer::Status {
                    code: response.status().as_u16(),
                    retry_after: retry_after(response.headers()),
                }
            }
            Err(_) => Answer::NoAnswer,
        };
        let kind = RequestKind::of(req);
        let jitter = rand::random::<f64>();
        let wait = decide(kind.repeat, answer, self.retries, &self.limits, jitter)?;
        self.retries += 1;
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            target: "fleetnet_hub::client",
            verb = kind.verb,
            resource = %kind.resource,
            uri = %req.uri(),
            ?answer,
            retry = self.retries,
            ?wait,
            "retrying request"
        );
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        let mut copy = Request::new(req.body().resend()?);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

/// The inner services the layers here wrap.
pub trait Inner<B, RB>:
    Service<Request<B>, Response = Response<RB>, Error: Into<BoxError>, Future: Send> + Send + 'static
{
}
impl<S, B, RB> Inner<B, RB> for S where
    S: Service<Request<B>, Response = Response<RB>, Error: Into<BoxError>, Future: Send>
        + Send
        + 'static
{
}

/// One policy step around the inner service; [`PolicyLayer`] makes it a tower layer.
pub trait Hook: Clone + Send + Sync + 'static {
    fn around<S: Inner<B, RB>, B: Send + 'static, RB: Send + 'static>(
        &self,
        inner: S,
        req: Request<B>,
    ) -> BoxFuture<'static, Result<Response<RB>, BoxError>>;
}

/// The tower layer of a [`Hook`].
#[derive(Clone)]
pub struct PolicyLayer<H>(pub H);

impl<S, H: Clone> Layer<S> for PolicyLayer<H> {
    type Service = Hooked<S, H>;
    fn layer(&self, inner: S) -> Hooked<S, H> {
        Hooked {
            inner,
            hook: self.0.clone(),
        }
    }
}

/// The service of a [`PolicyLayer`]. The inner readiness is awaited per request, in the hook.
#[derive(Clone)]
pub struct Hooked<S, H> {
    inner: S,
    hook: H,
}

impl<S, H, B, RB> Service<Request<B>> for Hooked<S, H>
where
    S: Service<Request<B>, Response = Response<RB>> + Inner<B, RB> + Clone,
    H: Hook,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<RB>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.hook.around(self.inner.clone(), req)
    }
}

/// Names each request with the stack's classifier.
#[derive(Clone)]
pub struct Classify(pub fn(&Method, &Uri) -> RequestKind);

impl Hook for Classify {
    fn around<S: Inner<B, RB>, B: Send + 'static, RB: Send + 'static>(
        &self,
        inner: S,
        mut req: Request<B>,
    ) -> BoxFuture<'static, Result<Response<RB>, BoxError>> {
        let kind = (self.0)(req.method(), req.uri());
        req.extensions_mut().insert(kind);
        Box::pin(async move { inner.oneshot(req).await.map_err(Into::into) })
    }
}

/// Counts every attempt by kind and status (`None`: no answer); with `trace`, each attempt
/// runs in a `k8s.request` span with its verb, resource and status.
#[derive(Clone)]
pub struct Count {
    pub stats: Arc<ClientStats>,
    pub trace: bool,
}

impl Hook for Count {
    fn around<S: Inner<B, RB>, B: Send + 'static, RB: Send + 'static>(
        &self,
        inner: S,
        req: Request<B>,
    ) -> BoxFuture<'static, Result<Response<RB>, BoxError>> {
        let kind = RequestKind::of(&req);
        let stats = self.stats.clone();
        let span = match self.trace {
            true => tracing::debug_span!(
                target: "fleetnet_hub::client",
                "k8s.request",
                k8s.verb = kind.verb,
                k8s.resource = %kind.resource,
                http.status_code = tracing::field::Empty,
            ),
            false => tracing::Span::none(),
        };
        let attempt = async move {
            let res = inner.oneshot(req).await.map_err(Into::into);
            let code = res.as_ref().map(|r| r.status().as_u16()).ok();
            if let Some(code) = code {
                tracing::Span::current().record("http.status_code", code);
            }
            stats.record(&kind, code);
            res
        };
        Box::pin(tracing::Instrument::instrument(attempt, span))
    }
}

/// Waits for a token of the shared bucket (none: no bucket), the wait counted.
#[derive(Clone)]
pub struct RateLimit {
    pub bucket: Option<Arc<DefaultDirectRateLimiter>>,
    pub stats: Arc<ClientStats>,
}

impl Hook for RateLimit {
    fn around<S: Inner<B, RB>, B: Send + 'static, RB: Send + 'static>(
        &self,
        inner: S,
        req: Request<B>,
    ) -> BoxFuture<'static, Result<Response<RB>, BoxError>> {
        let bucket = self.bucket.clone().filter(|_| !long_running(&req));
        let stats = self.stats.clone();
        Box::pin(async move {
            if let Some(bucket) = bucket {
                let waited = Instant::now();
                bucket.until_ready().await;
                stats.add_wait(waited.elapsed());
            }
            inner.oneshot(req).await.map_err(Into::into)
        })
    }
}

/// Waits for a slot of the shared semaphore, held until the answer; the wait counted.
#[derive(Clone)]
pub struct Concurrency {
    pub slots: Arc<Semaphore>,
    pub stats: Arc<ClientStats>,
}

impl Hook for Concurrency {
    fn around<S: Inner<B, RB>, B: Send + 'static, RB: Send + 'static>(
        &self,
        inner: S,
        req: Request<B>,
    ) -> BoxFuture<'static, Result<Response<RB>, BoxError>> {
        let slots = Some(self.slots.clone()).filter(|_| !long_running(&req));
        let stats = self.stats.clone();
        Box::pin(async move {
            let _slot = match slots {
                Some(slots) => {
                    let waited = Instant::now();
                    let slot = slots.acquire_owned().await?;
                    stats.add_wait(waited.elapsed());
                    Some(slot)
                }
                None => None,
            };
            inner.oneshot(req).await.map_err(Into::into)
        })
    }
}

/// The error of an attempt whose deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {resource} timed out after {after:?}")]
pub struct TimedOut {
    pub verb: &'static str,
    pub resource: String,
    pub after: Duration,
}

/// A deadline per attempt (until the inner service answers).
#[derive(Clone)]
pub struct Timeout(pub Duration);

impl Hook for Timeout {
    fn around<S: Inner<B, RB>, B: Send + 'static, RB: Send + 'static>(
        &self,
        inner: S,
        req: Request<B>,
    ) -> BoxFuture<'static, Result<Response<RB>, BoxError>> {
        let kind = RequestKind::of(&req);
        let after = self.0;
        let attempt = inner.oneshot(req);
        if kind.repeat == Repeat::Never {
            return Box::pin(async move { attempt.await.map_err(Into::into) });
        }
        Box::pin(async move {
            match tokio::time::timeout(after, attempt).await {
                Ok(res) => res.map_err(Into::into),
                Err(_) => Err(Box::new(TimedOut {
                    verb: kind.verb,
                    resource: kind.resource,
                    after,
                }) as BoxError),
            }
        })
    }
}

fn long_running<B>(req: &Request<B>) -> bool {
    RequestKind::of(req).repeat == Repeat::Never
}

/// Everything one stack applies to its requests.
pub struct Policy {
    pub classify: fn(&Method, &Uri) -> RequestKind,
    pub retry: RetryLimits,
    /// The token bucket, shared by every stack of the same budget; `None`: no rate limit.
    pub bucket: Option<Arc<DefaultDirectRateLimiter>>,
    /// Requests in flight at once, shared likewise.
    pub slots: Arc<Semaphore>,
    pub timeout: Duration,
    pub stats: Arc<ClientStats>,
    /// A `k8s.request` span per attempt.
    pub trace: bool,
}

/// The layers of [`Policy::layers`], outer to inner.
pub type PolicyLayers = ServiceBuilder<
    Stack<
        PolicyLayer<Timeout>,
        Stack<
            PolicyLayer<Concurrency>,
            Stack<
                PolicyLayer<RateLimit>,
                Stack<
                    PolicyLayer<Count>,
                    Stack<RetryLayer<RetryPolicy>, Stack<PolicyLayer<Classify>, Identity>>,
                >,
            >,
        >,
    >,
>;

impl Policy {
    /// Classify, retry, count, rate limit, concurrency, timeout.
    pub fn layers(self) -> PolicyLayers {
        let stats = self.stats;
        ServiceBuilder::new()
            .layer(PolicyLayer(Classify(self.classify)))
            .layer(RetryLayer::new(RetryPolicy {
                limits: Arc::new(self.retry),
                stats: stats.clone(),
                retries: 0,
            }))
            .layer(PolicyLayer(Count {
                stats: stats.clone(),
                trace: self.trace,
            }))
            .layer(PolicyLayer(RateLimit {
                bucket: self.bucket,
                stats: stats.clone(),
            }))
            .layer(PolicyLayer(Concurrency {
                slots: self.slots,
                stats,
            }))
            .layer(PolicyLayer(Timeout(self.timeout)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Repeat::{Always, Never, Throttled};
    use http::HeaderValue;

    /// 3 retries, 100 ms first backoff, 5 s longest wait.
    fn limits() -> RetryLimits {
        RetryLimits {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_wait: Duration::from_secs(5),
        }
    }

    fn status(code: u16, after: Option<u64>) -> Answer {
        Answer::Status {
            code,
            retry_after: after.map(Duration::from_secs),
        }
    }

    #[test]
    fn throttling_is_retried_unless_long_running_after_retry_after() {
        for repeat in [Throttled, Always] {
            let wait = decide(repeat, status(429, Some(1)), 0, &limits(), 0.0);
            assert_eq!(wait, Some(Duration::from_secs(1)));
        }
        assert_eq!(decide(Never, status(429, Some(1)), 0, &limits(), 0.0), None);
        // Jitter only ever adds to the server's wait, by at most a fifth.
        let w = decide(Always, status(429, Some(2)), 0, &limits(), 0.999).expect("retried");
        assert!(w >= Duration::from_secs(2) && w < Duration::from_millis(2400));
    }

    #[test]
    fn server_errors_and_lost_answers_are_retried_only_when_repeatable() {
        for code in [408, 500, 502, 503, 504] {
            let wait = decide(Always, status(code, None), 0, &limits(), 0.5);
            assert_eq!(wait, Some(Duration::from_millis(75)), "{code}");
            assert_eq!(
                decide(Throttled, status(code, None), 0, &limits(), 0.5),
                None
            );
        }
        let wait = decide(Always, Answer::NoAnswer, 1, &limits(), 1.0);
        assert_eq!(wait, Some(Duration::from_millis(200)));
        assert_eq!(decide(Throttled, Answer::NoAnswer, 0, &limits(), 0.5), None);
        assert_eq!(decide(Never, Answer::NoAnswer, 0, &limits(), 0.5), None);
        for code in [400, 401, 403, 404, 409, 410, 422, 501] {
            assert_eq!(decide(Always, status(code, None), 0, &limits(), 0.5), None);
        }
    }

    #[test]
    fn retries_are_bounded_and_long_waits_go_back_to_the_caller() {
        assert!(decide(Always, status(503, None), 2, &limits(), 0.5).is_some());
        assert_eq!(decide(Always, status(503, None), 3, &limits(), 0.5), None);
        let long = decide(Throttled, status(429, Some(60)), 0, &limits(), 0.0);
        assert_eq!(long, None, "a minute is the reconcile's to wait");
    }

    #[test]
    fn backoff_doubles_with_equal_jitter_and_caps() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        assert_eq!(backoff(base, 0, max, 0.0), Duration::from_millis(50));
        assert_eq!(backoff(base, 0, max, 1.0), Duration::from_millis(100));
        assert_eq!(backoff(base, 2, max, 1.0), Duration::from_millis(400));
        assert_eq!(backoff(base, 10, max, 1.0), max);
        assert_eq!(backoff(base, u32::MAX, max, 0.0), max / 2);
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static(" 7 "));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("x-ms-retry-after-ms", HeaderValue::from_static("300"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(300)));
        h.insert("retry-after-ms", HeaderValue::from_static(" 250 "));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));

        let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&soon)
            .expect("date");
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_str(&date).expect("ascii"));
        let d = retry_after(&h).expect("http date parsed");
        assert!(d > Duration::from_secs(100) && d <= Duration::from_secs(120));

        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn a_bucket_needs_a_positive_rate_and_burst() {
        assert!(bucket(10.0, 1).is_ok());
        assert_eq!(bucket(0.0, 1).err(), Some("qps must be a positive number"));
        assert_eq!(
            bucket(f64::NAN, 1).err(),
            Some("qps must be a positive number")
        );
        assert_eq!(bucket(1.0, 0).err(), Some("burst must be at least 1"));
        assert_eq!(bucket(1e308, 1).err(), Some("qps too large"));
    }
}
