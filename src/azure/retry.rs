//! THE retry policy of the Azure transport stacks: which answers are sent again, after how
//! long, and how often. The SDK's own retry is switched off (`RetryOptions::none()`), so this
//! is the only retry loop; it sits above the limiters, so every attempt takes its own token.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

pub(crate) use crate::client::retry::RetryLimits;
use crate::client::retry::{Answer, backoff};

use super::stats::TransportStats;
use super::transport::{HttpRequest, HttpResponse, SendError};

/// Whether to retry, and after how long. `retries` is how many retries were done already,
/// `jitter` a number in [0, 1).
///
/// 408, 429, 500, 502, 503, 504 and no answer at all are retried: every request on these
/// stacks is a read (ARM GETs) or a token request, which may be repeated. The server's
/// `Retry-After` is waited exactly; without one, exponential backoff.
pub(crate) fn decide(
    answer: Answer,
    retries: u32,
    limits: &RetryLimits,
    jitter: f64,
) -> Option<Duration> {
    if retries >= limits.max_retries {
        return None;
    }
    let retry_after = match answer {
        Answer::Status {
            code: 408 | 429 | 500 | 502 | 503 | 504,
            retry_after,
        } => retry_after,
        Answer::Status { .. } => return None,
        Answer::NoAnswer => None,
    };
    let wait =
        retry_after.unwrap_or_else(|| backoff(limits.base_delay, retries, limits.max_wait, jitter));
    (wait <= limits.max_wait).then_some(wait)
}

/// Azure's `Retry-After` family: `retry-after-ms`, `x-ms-retry-after-ms` (milliseconds), then
/// `Retry-After` (seconds or an HTTP date).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    for name in ["retry-after-ms", "x-ms-retry-after-ms"] {
        if let Some(ms) = text(name).and_then(|v| v.parse::<u64>().ok()) {
            return Some(Duration::from_millis(ms));
        }
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = azure_core::date::parse_rfc1123(value).ok()?;
    let now = time::OffsetDateTime::now_utc();
    Some(Duration::try_from(at - now).unwrap_or(Duration::ZERO))
}

/// The tower retry policy of one stack. Stateless per request: the attempt number travels in
/// the request copy it keeps, and is stamped on the final answer or error.
#[derive(Debug, Clone)]
pub(crate) struct RetryPolicy {
    /// Names the stack in logs ("ARM", "token").
    stack: &'static str,
    limits: Arc<RetryLimits>,
    stats: Arc<TransportStats>,
}

impl RetryPolicy {
    pub(crate) fn new(
        stack: &'static str,
        limits: RetryLimits,
        stats: Arc<TransportStats>,
    ) -> Self {
        Self {
            stack,
            limits: Arc::new(limits),
            stats,
        }
    }

    /// [`decide`] for one result, with its attempt number stamped on it; `None` to stop.
    fn next_wait(
        &self,
        attempt: u32,
        result: &mut Result<HttpResponse, SendError>,
        jitter: f64,
    ) -> Option<Duration> {
        let answer = match result {
            Ok(response) => {
                response.attempts = attempt;
                if response.status.is_success() {
                    return None;
                }
                Answer::Status {
                    code: response.status.as_u16(),
                    retry_after: response.retry_after(),
                }
            }
            Err(error) => {
                error.attempts = attempt;
                if !error.is_retryable() {
                    return None;
                }
                Answer::NoAnswer
            }
        };
        let wait = decide(answer, attempt.saturating_sub(1), &self.limits, jitter);
        if wait.is_none() {
            tracing::debug!(stack = self.stack, ?answer, attempt, "giving up on request");
        }
        wait
    }
}

impl tower::retry::Policy<HttpRequest, HttpResponse, SendError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut HttpRequest,
        result: &mut Result<HttpResponse, SendError>,
    ) -> Option<Self::Future> {
        let wait = self.next_wait(request.attempt, result, rand::random::<f64>())?;
        request.attempt += 1;
        self.stats.record_retry();
        tracing::debug!(
            stack = self.stack,
            url = %request.url,
            status = result.as_ref().ok().map(|r| r.status.as_u16()),
            error = result.as_ref().err().map(tracing::field::display),
            ?wait,
            attempt = request.attempt,
            "retrying request"
        );
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &HttpRequest) -> Option<HttpRequest> {
        request.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::azure::transport::{Payload, SendErrorKind};
    use crate::client::retry::fixtures::{limits, status};
    use bytes::Bytes;
    use http::{HeaderValue, Method, StatusCode};
    use tower::retry::Policy;

    fn request(body: Payload) -> HttpRequest {
        HttpRequest {
            method: Method::GET,
            url: "https://management.azure.com/subscriptions"
                .parse()
                .expect("url"),
            headers: HeaderMap::new(),
            body,
            attempt: 1,
        }
    }

    fn response(code: u16, headers: &[(&'static str, &'static str)]) -> HttpResponse {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_static(value));
        }
        HttpResponse {
            status: StatusCode::from_u16(code).expect("status"),
            headers: map,
            body: Bytes::new(),
            attempts: 1,
        }
    }

    fn policy() -> (RetryPolicy, Arc<TransportStats>) {
        let stats = Arc::new(TransportStats::default());
        (
            RetryPolicy::new("test", limits(), Arc::clone(&stats)),
            stats,
        )
    }

    #[test]
    fn throttling_server_errors_and_lost_answers_are_retried() {
        for code in [408, 429, 500, 502, 503, 504] {
            let wait = decide(status(code, None), 0, &limits(), 0.5);
            assert_eq!(wait, Some(Duration::from_millis(75)), "{code}");
        }
        assert_eq!(
            decide(Answer::NoAnswer, 1, &limits(), 1.0),
            Some(Duration::from_millis(200))
        );
        // The server's wait is taken as is.
        assert_eq!(
            decide(status(429, Some(2)), 0, &limits(), 0.9),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn client_errors_are_not_retried() {
        for code in [400, 401, 403, 404, 409, 501] {
            assert_eq!(
                decide(status(code, None), 0, &limits(), 0.5),
                None,
                "{code}"
            );
        }
    }

    #[test]
    fn retries_are_bounded_and_long_waits_go_back_to_the_caller() {
        assert!(decide(status(503, None), 2, &limits(), 0.5).is_some());
        assert_eq!(decide(status(503, None), 3, &limits(), 0.5), None);
        assert_eq!(decide(Answer::NoAnswer, 3, &limits(), 0.5), None);
        assert_eq!(
            decide(status(429, Some(30)), 0, &limits(), 0.0),
            None,
            "a Retry-After over max_wait is the caller's to wait"
        );
        assert_eq!(
            decide(status(429, Some(5)), 0, &limits(), 0.0),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("x-ms-retry-after-ms", HeaderValue::from_static("300"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(300)));
        h.insert("retry-after-ms", HeaderValue::from_static(" 250 "));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));

        let mut h = HeaderMap::new();
        let soon = time::OffsetDateTime::now_utc() + Duration::from_secs(120);
        let date = azure_core::date::to_rfc1123(&soon);
        h.insert("retry-after", HeaderValue::from_str(&date).expect("ascii"));
        let d = retry_after(&h).expect("http date parsed");
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );

        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("garbage"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn retry_after_is_read_on_429_and_503_only() {
        assert_eq!(
            response(429, &[("retry-after", "3")]).retry_after(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            response(503, &[("retry-after", "3")]).retry_after(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(response(500, &[("retry-after", "3")]).retry_after(), None);
    }

    #[tokio::test]
    async fn attempts_are_counted_in_the_copy_and_stamped_on_the_result() {
        let (mut policy, stats) = policy();
        let mut copy = policy
            .clone_request(&request(Payload::Bytes(Bytes::from_static(b"x"))))
            .expect("a byte body is resent");
        assert_eq!(copy.attempt, 1);

        let mut result = Ok(response(503, &[]));
        assert!(policy.retry(&mut copy, &mut result).is_some());
        assert_eq!(copy.attempt, 2, "the copy sent next is attempt 2");
        let mut result = Err(SendError {
            kind: SendErrorKind::Timeout(Duration::from_secs(1)),
            attempts: 1,
        });
        assert!(policy.retry(&mut copy, &mut result).is_some());
        assert_eq!(copy.attempt, 3);
        assert_eq!(result.expect_err("kept").attempts, 2);

        let mut result = Ok(response(404, &[]));
        assert!(policy.retry(&mut copy, &mut result).is_none());
        assert_eq!(result.expect("kept").attempts, 3, "the final answer says 3");
        assert_eq!(copy.attempt, 3);
        assert_eq!(stats.retries(), 2);
    }

    #[tokio::test]
    async fn exhausted_and_over_long_waits_stop_with_the_last_answer() {
        let (mut policy, stats) = policy();
        let mut copy = request(Payload::Bytes(Bytes::new()));
        copy.attempt = 4; // the first try and max_retries (3) retries
        let mut result = Ok(response(500, &[]));
        assert!(policy.retry(&mut copy, &mut result).is_none());
        assert_eq!(result.expect("kept").attempts, 4);

        let mut copy = request(Payload::Bytes(Bytes::new()));
        let mut result = Ok(response(429, &[("retry-after", "60")]));
        assert!(policy.retry(&mut copy, &mut result).is_none());
        let answer = result.expect("the 429 goes back");
        assert_eq!(answer.retry_after(), Some(Duration::from_secs(60)));
        assert_eq!(answer.attempts, 1);

        let mut result = Err(SendError {
            kind: SendErrorKind::Request("bad header".into()),
            attempts: 1,
        });
        assert!(policy.retry(&mut copy, &mut result).is_none());
        assert_eq!(stats.retries(), 0);
    }

    #[test]
    fn a_stream_body_is_not_resent() {
        let (mut policy, _) = policy();
        let stream = azure_core::BytesStream::new(Bytes::from_static(b"streamed"));
        let request = request(Payload::Stream(Box::new(stream)));
        assert!(policy.clone_request(&request).is_none());
    }
}
