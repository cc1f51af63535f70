//! The client policy: the tower layers every outbound HTTP stack of the process composes, the
//! Kubernetes clients ([`crate::client`]) and the ARM and token stacks ([`crate::azure`]).
//! [`Policy::layers`] stacks them, outer to inner:
//!
//! | layer | what it does |
//! | --- | --- |
//! | [`Step::Classify`] | puts the request's [`RequestKind`] in its extensions |
//! | retry ([`RetryPolicy`]) | sends again what [`decide`] allows, after [`retry_after`] or [`backoff`] |
//! | [`Step::Count`] | counts every attempt in [`ClientStats`] by verb, resource and status |
//! | [`Step::RateLimit`] | waits for a token of a shared token bucket ([`bucket`], governor), one request per [`Turn`] at a time |
//! | [`Step::Concurrency`] | waits for a slot of a shared semaphore |
//! | [`Step::Timeout`] | a deadline per attempt; a write's [`Fence`] asked last, the deadline clipped to its hold |
//!
//! A write carrying a [`Fence`] in its extensions gives up its wait for a token or a slot the
//! moment the fence closes, and is refused at the last step if it does not hold then.
//! Control traffic does not wait in these buckets: Lease calls and the hub probe go through a
//! client and budget of their own (`app::lease_client`).
//!
//! Below the retry layer each attempt (first, retry, every page) takes its own token and slot
//! and is counted; no slot is held while a retry waits. Long-running requests (watches,
//! [`Repeat::Never`]) skip the bucket, the slots and the deadline, and are never retried here.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Method, Request, Response, Uri};
use tokio::sync::Semaphore;
use tower::layer::util::{Identity, Stack};
use tower::retry::RetryLayer;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

use crate::ownership::fence::{Fence, Gate};

mod backoff;
mod retry;
mod stats;
pub use backoff::ResetByTime;
pub use retry::{
    Attempts, MAX_RETRY_AFTER, Resend, RetryLimits, RetryPolicy, backoff, decide, retry_after,
};
pub use stats::{ClientStats, RequestCount};

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

/// One requester's place in line for a [`Bucket`] shared with others (a member's share of the
/// hub budget). Requests carrying the same `Turn` in their extensions wait for a token one at a
/// time, so a member's backlog holds one place in the bucket's line: the members waiting are
/// served in turn, and a member's single change never waits behind another's thousands.
#[derive(Debug, Clone, Default)]
pub struct Turn(Arc<tokio::sync::Mutex<()>>);

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

pub(crate) fn is_write_verb(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// A token bucket of `qps` tokens a second and `burst` at once, to share (clone the `Arc`)
/// between every stack that spends the same budget.
pub fn bucket(qps: f64, burst: u32) -> Result<Arc<Bucket>, &'static str> {
    if !(qps.is_finite() && qps > 0.0) {
        return Err("qps must be a positive number");
    }
    let burst = NonZeroU32::new(burst).ok_or("burst must be at least 1")?;
    let quota = Duration::try_from_secs_f64(1.0 / qps)
        .ok()
        .and_then(Quota::with_period)
        .ok_or("qps too large")?;
    Ok(Arc::new(Bucket {
        tokens: RateLimiter::direct(quota.allow_burst(burst)),
        line: tokio::sync::Mutex::new(()),
    }))
}

/// A token bucket (governor) whose waiters are served first come, first served: one waits
/// for the next token at a time, the others in a FIFO line (tokio's mutex is fair), rather than
/// all waking together to race for it. With [`Turn`]s, a line of requesters' heads: round-robin.
pub struct Bucket {
    tokens: DefaultDirectRateLimiter,
    line: tokio::sync::Mutex<()>,
}

impl Bucket {
    /// Waits for a token; `turn` first, when the request has one.
    pub async fn take(&self, turn: Option<&Turn>) {
        let _turn = match turn {
            Some(Turn(own)) => Some(own.lock().await),
            None => None,
        };
        let _head = self.line.lock().await;
        self.tokens.until_ready().await;
    }
}

/// One attempt's answer, to come.
pub type Reply<RB> = BoxFuture<'static, Result<Response<RB>, BoxError>>;

/// One step of the policy around each attempt. Long-running requests ([`Repeat::Never`]) skip
/// the bucket, the slots and the deadline.
#[derive(Clone)]
pub enum Step {
    /// Puts the stack's [`RequestKind`] of each request in its extensions, for the steps and
    /// the retry policy below.
    Classify(fn(&Method, &Uri) -> RequestKind),
    /// Counts every attempt by kind and status (`None`: no answer); with `trace`, each attempt
    /// runs in a `k8s.request` span (an OpenTelemetry client span) with its verb, resource,
    /// method, URL and status.
    Count {
        stats: Arc<ClientStats>,
        trace: bool,
    },
    /// Waits for a token of a shared bucket ([`bucket`]), or of the resource's own
    /// ([`Policy::own_buckets`]); the wait counted.
    RateLimit {
        bucket: Option<Arc<Bucket>>,
        own: Arc<[(&'static str, Arc<Bucket>)]>,
        stats: Arc<ClientStats>,
    },
    /// Waits for a slot of a shared semaphore, held until the answer; the wait counted.
    Concurrency {
        slots: Arc<Semaphore>,
        stats: Arc<ClientStats>,
    },
    /// A deadline per attempt (until the inner service answers): [`TimedOut`].
    Timeout(Duration),
}

impl Step {
    fn around<RB: Send + 'static>(
        &self,
        kind: &RequestKind,
        target: &(Method, Uri),
        turn: Option<&Turn>,
        gate: Option<&Gate>,
        attempt: Reply<RB>,
    ) -> Reply<RB> {
        let long_running = kind.repeat == Repeat::Never;
        match self.clone() {
            Step::Classify(_) => attempt,
            Step::Count { stats, trace } => counted(&stats, trace, kind, target, attempt),
            _ if long_running => attempt,
            Step::RateLimit { bucket, own, stats } => {
                let bucket = own
                    .iter()
                    .find(|(resource, _)| kind.resource == *resource)
                    .map(|(_, own)| own.clone())
                    .or(bucket);
                let Some(bucket) = bucket else {
                    return attempt;
                };
                let (turn, gate) = (turn.cloned(), gate.cloned());
                Box::pin(async move {
                    let waited = Instant::now();
                    unless_fenced(gate.as_ref(), bucket.take(turn.as_ref())).await?;
                    stats.add_wait(waited.elapsed());
                    attempt.await
                })
            }
            Step::Concurrency { slots, stats } => {
                let gate = gate.cloned();
                Box::pin(async move {
                    let waited = Instant::now();
                    let _slot = unless_fenced(gate.as_ref(), slots.acquire_owned()).await??;
                    stats.add_wait(waited.elapsed());
                    attempt.await
                })
            }
            Step::Timeout(limit) => deadline(limit, kind, gate, attempt),
        }
    }
}

/// `attempt` counted in `stats` by kind and status (`None`: no answer); with `trace`, in a
/// `k8s.request` span (an OpenTelemetry client span) with its verb, resource, method, URL and
/// status.
fn counted<RB: Send + 'static>(
    stats: &Arc<ClientStats>,
    trace: bool,
    kind: &RequestKind,
    target: &(Method, Uri),
    attempt: Reply<RB>,
) -> Reply<RB> {
    let span = match trace {
        true => tracing::debug_span!(
            target: "fleetnet_hub::client",
            "k8s.request",
            k8s.verb = kind.verb,
            k8s.resource = %kind.resource,
            http.method = %target.0,
            http.url = %target.1,
            http.status_code = tracing::field::Empty,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
        ),
        false => tracing::Span::none(),
    };
    let (kind, stats) = (kind.clone(), stats.clone());
    let counted = async move {
        let res = attempt.await;
        let code = res.as_ref().map(|r| r.status().as_u16()).ok();
        if let Some(code) = code {
            let span = tracing::Span::current();
            span.record("http.status_code", code);
            if code >= 400 {
                span.record("otel.status_code", "ERROR");
            }
        }
        stats.record(&kind, code);
        res
    };
    Box::pin(tracing::Instrument::instrument(counted, span))
}

/// `attempt` under a deadline of `limit`. The last step before the request leaves: a fenced
/// write is refused here if its hold ran out while it waited, and may not outlive what is
/// left of it.
fn deadline<RB: Send + 'static>(
    limit: Duration,
    kind: &RequestKind,
    gate: Option<&Gate>,
    attempt: Reply<RB>,
) -> Reply<RB> {
    let (verb, resource) = (kind.verb, kind.resource.clone());
    let gate = gate.cloned();
    Box::pin(async move {
        let after = match gate.as_ref().map_or(Ok(None), Gate::admit)? {
            Some(left) => limit.min(left),
            None => limit,
        };
        tokio::time::timeout(after, attempt).await.map_err(|_| {
            Box::new(TimedOut {
                verb,
                resource,
                after,
            })
        })?
    })
}

/// `wait`, unless the write's fence closes first (then its refusal).
async fn unless_fenced<T>(
    gate: Option<&Gate>,
    wait: impl std::future::Future<Output = T>,
) -> Result<T, BoxError> {
    match gate {
        Some(gate) => tokio::select! {
            refusal = gate.closed() => Err(refusal.into()),
            done = wait => Ok(done),
        },
        None => Ok(wait.await),
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

/// A tower layer of steps, outer to inner. Its services are ready at once: the inner service's
/// readiness is awaited per request, after the steps' waits.
#[derive(Clone)]
pub struct PolicyLayer(pub Arc<[Step]>);

impl<S> Layer<S> for PolicyLayer {
    type Service = Stepped<S>;
    fn layer(&self, inner: S) -> Stepped<S> {
        Stepped {
            inner,
            steps: self.0.clone(),
        }
    }
}

/// The service of a [`PolicyLayer`].
#[derive(Clone)]
pub struct Stepped<S> {
    inner: S,
    steps: Arc<[Step]>,
}

impl<S, B, RB> Service<Request<B>> for Stepped<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Reply<RB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<B>) -> Reply<RB> {
        for step in self.steps.iter() {
            if let Step::Classify(classify) = step {
                let kind = classify(req.method(), req.uri());
                req.extensions_mut().insert(kind);
            }
        }
        let kind = RequestKind::of(&req);
        let turn = req.extensions().get::<Turn>().cloned();
        let gate = req.extensions().get::<Fence>().and_then(|f| f.gate(&req));
        let target = (req.method().clone(), req.uri().clone());
        let attempt = self.inner.clone().oneshot(req);
        let attempt: Reply<RB> = Box::pin(async move { attempt.await.map_err(Into::into) });
        let steps = self.steps.iter().rev();
        steps.fold(attempt, |attempt, step| {
            step.around(&kind, &target, turn.as_ref(), gate.as_ref(), attempt)
        })
    }
}

/// Everything one stack applies to its requests.
pub struct Policy {
    pub classify: fn(&Method, &Uri) -> RequestKind,
    pub retry: RetryLimits,
    /// The token bucket, shared by every stack of the same budget; `None`: no rate limit.
    pub bucket: Option<Arc<Bucket>>,
    /// Resources whose requests take their tokens from a bucket of their own instead (a
    /// member's Events: they neither wait behind nor delay its exports' writes).
    pub own_buckets: Vec<(&'static str, Arc<Bucket>)>,
    /// Requests in flight at once, shared likewise.
    pub slots: Arc<Semaphore>,
    pub timeout: Duration,
    pub stats: Arc<ClientStats>,
    /// A `k8s.request` span per attempt.
    pub trace: bool,
}

/// The layers of [`Policy::layers`], outer to inner.
pub type PolicyLayers = ServiceBuilder<
    Stack<PolicyLayer, Stack<RetryLayer<RetryPolicy>, Stack<PolicyLayer, Identity>>>,
>;

impl Policy {
    /// Classify; retry; count, rate limit, concurrency, timeout.
    pub fn layers(self) -> PolicyLayers {
        let stats = self.stats;
        let mut steps = vec![Step::Count {
            stats: stats.clone(),
            trace: self.trace,
        }];
        if self.bucket.is_some() || !self.own_buckets.is_empty() {
            steps.push(Step::RateLimit {
                bucket: self.bucket,
                own: self.own_buckets.into(),
                stats: stats.clone(),
            });
        }
        let slots = self.slots;
        steps.push(Step::Concurrency {
            slots,
            stats: stats.clone(),
        });
        steps.push(Step::Timeout(self.timeout));
        ServiceBuilder::new()
            .layer(PolicyLayer(Arc::new([Step::Classify(self.classify)])))
            .layer(RetryLayer::new(RetryPolicy::new(self.retry, stats)))
            .layer(PolicyLayer(steps.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `a` requests of one turn queued first, then one of another turn (or, without turns, all
    /// of none): how many of the first went before the latecomer once it was queued.
    async fn served_before_latecomer(a: usize, turns: bool) -> usize {
        // A token every 50 ms: time enough for the latecomer's task to join the line.
        let bucket = bucket(20.0, 1).expect("bucket");
        let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
        let backlog = Turn::default();
        for i in 0..a {
            let (bucket, done_tx, turn) = (bucket.clone(), done_tx.clone(), backlog.clone());
            tokio::spawn(async move {
                bucket.take(turns.then_some(&turn)).await;
                let _ = done_tx.send(i);
            });
        }
        tokio::time::sleep(Duration::from_millis(70)).await;
        let mut order = vec![];
        while let Ok(i) = done.try_recv() {
            order.push(i);
        }
        let before = order.len();
        let latecomer = Turn::default();
        tokio::spawn(async move {
            bucket.take(turns.then_some(&latecomer)).await;
            let _ = done_tx.send(a);
        });
        while let Some(i) = done.recv().await {
            order.push(i);
        }
        let at = order
            .iter()
            .position(|&i| i == a)
            .expect("the latecomer served");
        at - before
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_backlog_holds_one_place_in_the_line_for_a_shared_bucket() {
        // The backlog's head waits for the next token, then the latecomer's turn comes.
        assert!(served_before_latecomer(20, true).await <= 2);
        // Without turns the line is first come, first served: the latecomer waits for all
        // that were queued before it (20 less those served in the first 70 ms).
        assert!(served_before_latecomer(20, false).await >= 15);
    }
}
