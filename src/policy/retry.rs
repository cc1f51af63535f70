//! The retry policy of every stack: which answers are sent again ([`decide`]), after how long
//! (the server's [`retry_after`], else [`backoff`]), and how often ([`RetryLimits`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{HeaderMap, Request, Response};
use tower::BoxError;

use super::{ClientStats, Repeat, RequestKind};

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

/// Whether to retry, and after how long: `status` is the answer's (`None`: no answer, a
/// transport error or timeout), `retries` how many were done already, `jitter` a number in
/// [0, 1). At least the server's `Retry-After` (a fifth more at most, so requests refused
/// together do not come back together), else [`backoff`]; never over `max_wait`.
pub fn decide(
    repeat: Repeat,
    status: Option<u16>,
    retry_after: Option<Duration>,
    retries: u32,
    limits: &RetryLimits,
    jitter: f64,
) -> Option<Duration> {
    let transient = matches!(status, None | Some(408 | 500 | 502 | 503 | 504));
    match (repeat, status) {
        _ if retries >= limits.max_retries => return None,
        (Repeat::Never, _) => return None,
        (_, Some(429)) => {}
        (Repeat::Always, _) if transient => {}
        _ => return None,
    }
    let jitter = unit(jitter);
    let wait = match retry_after {
        // The server's wait comes from outside: a huge one saturates (and is then over
        // `max_wait`) rather than overflow. `after / 5 * jitter` cannot overflow itself.
        Some(after) => after.saturating_add((after / 5).mul_f64(jitter)),
        None => backoff(limits.base_delay, retries, limits.max_wait, jitter),
    };
    (wait <= limits.max_wait).then_some(wait)
}

/// `jitter` clamped to [0, 1]; not a number counts as 0 (`mul_f64` panics on NaN).
fn unit(jitter: f64) -> f64 {
    if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(0.0, 1.0)
    }
}

/// THE backoff of the process: exponential with "equal jitter", between half and all of
/// `base * 2^retry`, capped at `max`. `jitter` in [0, 1).
pub fn backoff(base: Duration, retry: u32, max: Duration, jitter: f64) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(retry.min(16)));
    exp.min(max).mul_f64(0.5 + 0.5 * unit(jitter))
}

/// The longest `Retry-After` taken as given ([`retry_after`]): a server's answer is outside
/// data, and callers add it to instants and durations (`Instant + Duration` panics on
/// overflow). Nothing waits this long in-line anyway: the retry layer waits at most its
/// `max_wait`, a reconcile requeues after at most 5 minutes.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The server's wait before a retry: `retry-after-ms` or `x-ms-retry-after-ms` (milliseconds,
/// Azure), else `Retry-After` in seconds or as an HTTP date; never over [`MAX_RETRY_AFTER`]
/// (a number too large for `u64` counts as that too), a date in the past is no wait.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry_after_at(headers, jiff::Timestamp::now())
}

/// [`retry_after`] as of `now`.
fn retry_after_at(headers: &HeaderMap, now: jiff::Timestamp) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    for name in ["retry-after-ms", "x-ms-retry-after-ms"] {
        if let Some(ms) = text(name).and_then(whole_number) {
            return Some(Duration::from_millis(ms).min(MAX_RETRY_AFTER));
        }
    }
    let value = text("retry-after")?;
    if let Some(secs) = whole_number(value) {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
    Some(wait.min(MAX_RETRY_AFTER))
}

/// A run of ASCII digits as a number, `u64::MAX` when it is longer than that.
fn whole_number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(u64::MAX))
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

impl RetryPolicy {
    pub fn new(limits: RetryLimits, stats: Arc<ClientStats>) -> Self {
        Self {
            limits: Arc::new(limits),
            stats,
            retries: 0,
        }
    }
}

impl<B: Resend, RB> tower::retry::Policy<Request<B>, Response<RB>, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<RB>, BoxError>,
    ) -> Option<Self::Future> {
        let (status, after) = match result {
            Ok(response) => {
                response.extensions_mut().insert(Attempts(self.retries + 1));
                if response.status().is_success() {
                    return None;
                }
                let after = retry_after(response.headers());
                (Some(response.status().as_u16()), after)
            }
            Err(_) => (None, None),
        };
        let kind = RequestKind::of(req);
        let (retries, jitter) = (self.retries, rand::random::<f64>());
        let wait = decide(kind.repeat, status, after, retries, &self.limits, jitter)?;
        self.retries += 1;
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            target: "fleetnet_hub::client",
            verb = kind.verb,
            resource = %kind.resource,
            uri = %req.uri(),
            ?status,
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

    fn decide(
        repeat: Repeat,
        code: Option<u16>,
        after: Option<u64>,
        retries: u32,
        jitter: f64,
    ) -> Option<Duration> {
        super::decide(
            repeat,
            code,
            after.map(Duration::from_secs),
            retries,
            &limits(),
            jitter,
        )
    }

    #[test]
    fn throttling_is_retried_unless_long_running_after_retry_after() {
        for repeat in [Throttled, Always] {
            let wait = decide(repeat, Some(429), Some(1), 0, 0.0);
            assert_eq!(wait, Some(Duration::from_secs(1)));
        }
        assert_eq!(decide(Never, Some(429), Some(1), 0, 0.0), None);
        // Jitter only ever adds to the server's wait, by at most a fifth.
        let w = decide(Always, Some(429), Some(2), 0, 0.999).expect("retried");
        assert!(w >= Duration::from_secs(2) && w < Duration::from_millis(2400));
    }

    #[test]
    fn server_errors_and_lost_answers_are_retried_only_when_repeatable() {
        for code in [408, 500, 502, 503, 504] {
            let wait = decide(Always, Some(code), None, 0, 0.5);
            assert_eq!(wait, Some(Duration::from_millis(75)), "{code}");
            assert_eq!(decide(Throttled, Some(code), None, 0, 0.5), None);
        }
        let wait = decide(Always, None, None, 1, 1.0);
        assert_eq!(wait, Some(Duration::from_millis(200)));
        assert_eq!(decide(Throttled, None, None, 0, 0.5), None);
        assert_eq!(decide(Never, None, None, 0, 0.5), None);
        for code in [400, 401, 403, 404, 409, 410, 422, 501] {
            assert_eq!(decide(Always, Some(code), None, 0, 0.5), None);
        }
    }

    #[test]
    fn retries_are_bounded_and_long_waits_go_back_to_the_caller() {
        assert!(decide(Always, Some(503), None, 2, 0.5).is_some());
        assert_eq!(decide(Always, Some(503), None, 3, 0.5), None);
        let long = decide(Throttled, Some(429), Some(60), 0, 0.0);
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
        for bad in ["-5", "+5", "1.5", ""] {
            h.insert("retry-after", HeaderValue::from_static(bad));
            assert_eq!(retry_after(&h), None, "{bad:?}");
        }
    }

    /// Each header form with a value no clock can hold: capped, never a panic, and never
    /// waited in-line (the answer goes back to the caller).
    #[test]
    fn huge_retry_after_in_every_form_is_capped_and_not_waited() {
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("now");
        let huge = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            retry_after_at(&h, now)
        };
        let cases = [
            ("retry-after", "18446744073709551615"),
            ("retry-after", "99999999999999999999999999999"),
            ("retry-after-ms", "18446744073709551615"),
            ("x-ms-retry-after-ms", "99999999999999999999999999999"),
            ("retry-after", "Thu, 30 Dec 9999 00:00:00 GMT"),
        ];
        for (name, value) in cases {
            let after = huge(name, value);
            assert_eq!(after, Some(MAX_RETRY_AFTER), "{name}: {value}");
            for jitter in [0.0, 0.999, 1.0, f64::NAN] {
                let wait = super::decide(Always, Some(429), after, 0, &limits(), jitter);
                assert_eq!(wait, None, "{name}: {value} jitter {jitter}");
            }
        }
        assert_eq!(
            huge("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(Duration::ZERO),
            "a date in the past is no wait"
        );
    }

    /// `decide` itself never overflows, whatever it is handed (callers may pass a Duration
    /// they built themselves).
    #[test]
    fn decide_saturates_on_the_largest_duration() {
        let wait = super::decide(Always, Some(429), Some(Duration::MAX), 0, &limits(), 1.0);
        assert_eq!(wait, None);
        let generous = RetryLimits {
            max_wait: Duration::MAX,
            ..limits()
        };
        let wait = super::decide(Always, Some(429), Some(Duration::MAX), 0, &generous, 1.0);
        assert_eq!(wait, Some(Duration::MAX));
        let max = Duration::from_secs(10);
        assert_eq!(
            backoff(Duration::MAX, u32::MAX, max, f64::NAN),
            max / 2,
            "no jitter when it is not a number"
        );
    }
}
