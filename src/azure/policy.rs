//! The one place every ARM HTTP request goes through: origin guard, process-wide concurrency
//! limit and token bucket, per-request timeout, and THE retry policy.
//!
//! Retry ownership: the SDK pipeline is built with `RetryOptions::none()` (its
//! `NoRetryPolicy` only turns non-success responses into errors, and never sees any, because
//! this policy answers them itself). [`ArmPolicy`] sits in the per-retry slot, right before
//! the transport, so each attempt (first or retry, every page) takes a limiter token and a
//! concurrency permit. There is exactly one retry loop: this one.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_core::error::{Error, ErrorKind};
use azure_core::headers::{Headers, RETRY_AFTER, RETRY_AFTER_MS, X_MS_RETRY_AFTER_MS};
use azure_core::{Body, Context, Policy, PolicyResult, Request, Response, StatusCode, Url};
use bytes::Bytes;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;
use tokio::sync::Semaphore;

use super::config::AzureConfig;
use super::stats::AzureStats;

/// The final outcome of one ARM request that did not succeed, after retries. Travels inside
/// `azure_core::Error` through the SDK; the lookup downcasts it to classify.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{description} (after {attempts} attempt{})", if *attempts == 1 { "" } else { "s" })]
pub(crate) struct ArmFailure {
    /// HTTP status, if ARM answered.
    pub status: Option<u16>,
    /// ARM's `Retry-After` on the last answer, if any.
    pub retry_after: Option<Duration>,
    pub attempts: u32,
    pub description: String,
}

impl ArmFailure {
    fn into_error(self) -> Error {
        let kind = match self.status.and_then(|s| StatusCode::try_from(s).ok()) {
            Some(status) => ErrorKind::HttpResponse {
                status,
                error_code: None,
            },
            None => ErrorKind::Io,
        };
        Error::new(kind, self)
    }
}

enum Attempt {
    Done(Response),
    Retryable(ArmFailure),
    Fatal(Error),
}

/// Process-wide ARM request budget (shared by every member and subscription).
pub(crate) struct ArmBudget {
    limiter: DefaultDirectRateLimiter,
    concurrency: Semaphore,
}

impl std::fmt::Debug for ArmBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmBudget")
            .field("available_permits", &self.concurrency.available_permits())
            .finish_non_exhaustive()
    }
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
            limiter: RateLimiter::direct(quota),
            concurrency: Semaphore::new(config.max_concurrency.max(1)),
        }
    }
}

#[derive(Debug)]
pub(crate) struct ArmPolicy {
    budget: Arc<ArmBudget>,
    stats: Arc<AzureStats>,
    /// Bearer tokens go to this origin only (a `nextLink` elsewhere is refused).
    endpoint: Url,
    timeout: Duration,
    max_retries: u32,
    base_delay: Duration,
    max_wait: Duration,
}

impl ArmPolicy {
    pub(crate) fn new(
        config: &AzureConfig,
        endpoint: Url,
        budget: Arc<ArmBudget>,
        stats: Arc<AzureStats>,
    ) -> Self {
        Self {
            budget,
            stats,
            endpoint,
            timeout: config.request_timeout,
            max_retries: config.max_retries,
            base_delay: config.retry_base_delay,
            max_wait: config.max_retry_wait,
        }
    }

    fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.min(16)));
        let capped = exp.min(self.max_wait);
        // "Equal jitter": between half and all of the exponential delay.
        capped.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    async fn attempt(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> Attempt {
        let Ok(_permit) = self.budget.concurrency.acquire().await else {
            return Attempt::Fatal(Error::message(
                ErrorKind::Other,
                "ARM concurrency limiter closed",
            ));
        };
        let waited = Instant::now();
        self.budget.limiter.until_ready().await;
        self.stats.add_limiter_wait(waited.elapsed());
        AzureStats::incr(&self.stats.arm_requests);

        let exchange = async {
            let response = next[0].send(ctx, request, &next[1..]).await?;
            let (status, headers, body) = response.deconstruct();
            // Read the body under the same deadline and concurrency permit.
            let body = body.collect().await?;
            Ok::<_, Error>((status, headers, body))
        };
        let (status, headers, body) = match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => {
                return Attempt::Retryable(ArmFailure {
                    status: None,
                    retry_after: None,
                    attempts: 1,
                    description: format!("ARM request timed out after {:?}", self.timeout),
                });
            }
            Ok(Err(error)) if error.kind() == &ErrorKind::Io => {
                return Attempt::Retryable(ArmFailure {
                    status: None,
                    retry_after: None,
                    attempts: 1,
                    description: format!("ARM transport error: {}", error_chain(&error)),
                });
            }
            Ok(Err(error)) => return Attempt::Fatal(error),
            Ok(Ok(parts)) => parts,
        };

        if status.is_success() {
            let stream = futures::stream::iter(std::iter::once(Ok::<Bytes, Error>(body)));
            return Attempt::Done(Response::new(status, headers, Box::pin(stream)));
        }

        let code = u16::from(status);
        let retry_after = if matches!(code, 429 | 503) {
            retry_after(&headers)
        } else {
            None
        };
        if code == 429 {
            AzureStats::incr(&self.stats.throttled);
        }
        let failure = ArmFailure {
            status: Some(code),
            retry_after,
            attempts: 1,
            description: describe_status(
                code,
                &body,
                headers.get_optional_str(&azure_core::headers::REQUEST_ID),
            ),
        };
        if matches!(code, 408 | 429 | 500 | 502 | 503 | 504) {
            Attempt::Retryable(failure)
        } else {
            Attempt::Fatal(failure.into_error())
        }
    }
}

#[async_trait::async_trait]
impl Policy for ArmPolicy {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        if request.url().origin() != self.endpoint.origin() {
            return Err(Error::with_message(ErrorKind::Other, || {
                format!(
                    "refusing to send an ARM request to {}: not the configured ARM endpoint {}",
                    request.url().origin().ascii_serialization(),
                    self.endpoint.origin().ascii_serialization()
                )
            }));
        }
        // A byte body is re-sent as is; a stream body could not be, so it gets no retries.
        let resendable = matches!(request.body(), Body::Bytes(_));
        let mut retries = 0u32;
        loop {
            let mut failure = match self.attempt(ctx, request, next).await {
                Attempt::Done(response) => return Ok(response),
                Attempt::Fatal(error) => return Err(error),
                Attempt::Retryable(failure) => failure,
            };
            failure.attempts = retries + 1;
            let wait = failure.retry_after.unwrap_or_else(|| self.backoff(retries));
            if !resendable || retries >= self.max_retries || wait > self.max_wait {
                tracing::debug!(
                    url = %request.url(),
                    error = %failure,
                    "giving up on ARM request"
                );
                return Err(failure.into_error());
            }
            retries += 1;
            AzureStats::incr(&self.stats.retries);
            tracing::debug!(
                url = %request.url(),
                error = %failure,
                ?wait,
                retry = retries,
                "retrying ARM request"
            );
            tokio::time::sleep(wait).await;
        }
    }
}

/// ARM's `Retry-After` family: `retry-after-ms`, `x-ms-retry-after-ms` (milliseconds), then
/// `Retry-After` (seconds or an HTTP date).
pub(crate) fn retry_after(headers: &Headers) -> Option<Duration> {
    for name in [RETRY_AFTER_MS, X_MS_RETRY_AFTER_MS] {
        if let Some(ms) = headers
            .get_optional_str(&name)
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            return Some(Duration::from_millis(ms));
        }
    }
    let value = headers.get_optional_str(&RETRY_AFTER)?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = azure_core::date::parse_rfc1123(value).ok()?;
    let now = time::OffsetDateTime::now_utc();
    Some(Duration::try_from(at - now).unwrap_or(Duration::ZERO))
}

/// "HTTP 503 (ServerBusy: message), request id …" from ARM's `{"error":{"code","message"}}`
/// body and `x-ms-request-id`, when present.
fn describe_status(code: u16, body: &[u8], request_id: Option<&str>) -> String {
    let detail = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let error = v.get("error").unwrap_or(&v);
            let code = error.get("code").and_then(|c| c.as_str());
            let message = error.get("message").and_then(|m| m.as_str());
            match (code, message) {
                (None, None) => None,
                (c, m) => Some(format!(
                    "{}: {}",
                    c.unwrap_or("<no code>"),
                    truncate(m.unwrap_or(""), 300)
                )),
            }
        });
    let mut text = match detail {
        Some(detail) => format!("ARM answered HTTP {code} ({detail})"),
        None => format!("ARM answered HTTP {code}"),
    };
    if let Some(id) = request_id {
        text.push_str(", x-ms-request-id ");
        text.push_str(truncate(id, 64));
    }
    text
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `error` and its sources, joined: azure_core's Display shows only the outermost message.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let s = inner.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        let mut h = Headers::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, "7");
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(RETRY_AFTER_MS, "250");
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));

        let mut h = Headers::new();
        let soon = time::OffsetDateTime::now_utc() + Duration::from_secs(120);
        h.insert(RETRY_AFTER, azure_core::date::to_rfc1123(&soon));
        let d = retry_after(&h).expect("http date parsed");
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );

        let mut h = Headers::new();
        h.insert(RETRY_AFTER, "garbage");
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn status_description_uses_arm_error_body() {
        let body = br#"{"error":{"code":"ServerBusy","message":"try later"}}"#;
        assert_eq!(
            describe_status(503, body, None),
            "ARM answered HTTP 503 (ServerBusy: try later)"
        );
        assert_eq!(
            describe_status(500, b"<html>", Some("abc-123")),
            "ARM answered HTTP 500, x-ms-request-id abc-123"
        );
    }
}
