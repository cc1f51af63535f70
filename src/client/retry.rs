//! The retry layer of a Kubernetes client: which answers are retried, after how long, and how
//! often. It sits above the limit layer, so every attempt takes its own token and is counted.
//!
//! kube's built-in retry layer is switched off (`Config::default_retry = false`): it sits
//! below our limiter, retries up to 15 times with waits growing to 1000 s, and its retries
//! are invisible to the client's counters.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use tower::BoxError;

use super::classify::classify;
use super::stats::ClientStats;

/// How a client retries.
#[derive(Debug, Clone)]
pub struct RetryLimits {
    /// Retries of one request after the first attempt.
    pub max_retries: u32,
    /// First backoff when the server gives no `Retry-After` (doubles per retry, jittered).
    pub base_delay: Duration,
    /// The longest wait before a retry. A `Retry-After` above it is not waited out here: the
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

/// Whether to retry, and after how long. `verb` is the Kubernetes verb of the request,
/// `retries` how many retries were done already, `jitter` a number in [0, 1).
///
/// - 429 is retried for every verb: the server refused the request before acting on it.
/// - 500, 502, 503, 504 and no answer at all are retried for reads only: a write may have
///   happened, and the reconcile re-reads before writing again.
/// - watches are never retried here: the watcher resumes them with its own backoff.
pub fn decide(
    verb: &str,
    answer: Answer,
    retries: u32,
    limits: &RetryLimits,
    jitter: f64,
) -> Option<Duration> {
    if verb == "watch" || retries >= limits.max_retries {
        return None;
    }
    let read = matches!(verb, "get" | "list");
    let retry_after = match answer {
        Answer::Status {
            code: 429,
            retry_after,
        } => retry_after,
        Answer::Status {
            code: 500 | 502 | 503 | 504,
            retry_after,
        } if read => retry_after,
        Answer::NoAnswer if read => None,
        _ => return None,
    };
    let jitter = jitter.clamp(0.0, 1.0);
    let wait = match retry_after {
        // At least what the server asked for; a little more so that requests refused together
        // do not come back together.
        Some(after) => after + after.mul_f64(0.2 * jitter),
        None => backoff(limits.base_delay, retries, limits.max_wait, jitter),
    };
    (wait <= limits.max_wait).then_some(wait)
}

/// Exponential backoff with "equal jitter": between half and all of `base * 2^retry`, capped
/// at `max`. `jitter` in [0, 1).
pub fn backoff(base: Duration, retry: u32, max: Duration, jitter: f64) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(retry.min(16)));
    exp.min(max).mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// `Retry-After` in seconds, as the apiserver sends it (an HTTP date is not used by it).
fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    response
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// The tower retry policy of one client; cloned for each request, so `retries` is per request.
#[derive(Clone)]
pub struct RetryPolicy {
    limits: Arc<RetryLimits>,
    stats: Arc<ClientStats>,
    retries: u32,
}

impl RetryPolicy {
    pub(super) fn new(limits: RetryLimits, stats: Arc<ClientStats>) -> Self {
        Self {
            limits: Arc::new(limits),
            stats,
            retries: 0,
        }
    }
}

impl<B> tower::retry::Policy<Request<Body>, Response<B>, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        let answer = match result {
            Ok(response) if response.status().is_success() => return None,
            Ok(response) => Answer::Status {
                code: response.status().as_u16(),
                retry_after: retry_after(response),
            },
            Err(_) => Answer::NoAnswer,
        };
        let kind = classify(req.method(), req.uri());
        let wait = decide(
            kind.verb,
            answer,
            self.retries,
            &self.limits,
            rand::random::<f64>(),
        )?;
        self.retries += 1;
        self.stats.record_retry();
        tracing::debug!(
            k8s.verb = kind.verb,
            k8s.resource = %kind.resource,
            ?answer,
            retry = self.retries,
            ?wait,
            "retrying Kubernetes API request"
        );
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        // Bodies that are streams cannot be sent twice: such requests get no retries.
        let body = req.body().try_clone()?;
        let mut copy = Request::new(body);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

/// Inputs shared by the retry tests here and in `crate::azure`.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// 3 retries, 100 ms first backoff, 5 s longest wait.
    pub(crate) fn limits() -> RetryLimits {
        RetryLimits {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_wait: Duration::from_secs(5),
        }
    }

    /// An HTTP answer with an optional `Retry-After` in seconds.
    pub(crate) fn status(code: u16, after: Option<u64>) -> Answer {
        Answer::Status {
            code,
            retry_after: after.map(Duration::from_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{limits, status};
    use super::*;

    #[test]
    fn throttling_is_retried_for_every_verb_after_retry_after() {
        for verb in ["get", "list", "create", "update", "patch", "delete"] {
            assert_eq!(
                decide(verb, status(429, Some(1)), 0, &limits(), 0.0),
                Some(Duration::from_secs(1)),
                "{verb}"
            );
        }
        // Jitter only ever adds to the server's wait, by at most a fifth.
        let w = decide("get", status(429, Some(2)), 0, &limits(), 0.999).expect("retried");
        assert!(
            w >= Duration::from_secs(2) && w < Duration::from_millis(2400),
            "{w:?}"
        );
    }

    #[test]
    fn server_errors_and_lost_answers_are_retried_for_reads_only() {
        for code in [500, 502, 503, 504] {
            assert!(decide("get", status(code, None), 0, &limits(), 0.5).is_some());
            assert!(decide("list", status(code, None), 0, &limits(), 0.5).is_some());
            for write in ["create", "update", "patch", "delete"] {
                assert_eq!(
                    decide(write, status(code, None), 0, &limits(), 0.5),
                    None,
                    "{write} {code}"
                );
            }
        }
        assert!(decide("get", Answer::NoAnswer, 0, &limits(), 0.5).is_some());
        assert_eq!(decide("patch", Answer::NoAnswer, 0, &limits(), 0.5), None);
    }

    #[test]
    fn client_errors_and_watches_are_not_retried() {
        for code in [400, 401, 403, 404, 409, 410, 422] {
            assert_eq!(decide("get", status(code, None), 0, &limits(), 0.5), None);
        }
        assert_eq!(
            decide("watch", status(429, Some(1)), 0, &limits(), 0.5),
            None
        );
        assert_eq!(decide("watch", Answer::NoAnswer, 0, &limits(), 0.5), None);
    }

    #[test]
    fn retries_are_bounded_and_long_waits_go_back_to_the_caller() {
        assert!(decide("get", status(503, None), 2, &limits(), 0.5).is_some());
        assert_eq!(decide("get", status(503, None), 3, &limits(), 0.5), None);
        assert_eq!(
            decide("create", status(429, Some(60)), 0, &limits(), 0.0),
            None,
            "a minute is the reconcile's to wait, not the request's"
        );
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
    fn retry_after_is_read_in_seconds() {
        let r = Response::builder()
            .status(429)
            .header("Retry-After", " 3 ")
            .body(())
            .expect("response");
        assert_eq!(retry_after(&r), Some(Duration::from_secs(3)));
        let r = Response::builder()
            .status(429)
            .header("Retry-After", "soon")
            .body(())
            .expect("response");
        assert_eq!(retry_after(&r), None);
    }
}
