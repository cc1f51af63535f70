//! What one member answer may cost: every response body of a member's client is read through
//! [`Bounded`], under the caps its request and status call for ([`shape_of`]).
//!
//! A member's API server is another team's system (or whatever answers at its address). Without
//! these bounds one answer could take the whole process down: the per-attempt timeout of the
//! client policy ends when the headers arrive, and kube collects a LIST body into memory
//! whatever its size (a 600 MB answer drove the process past its 512 MiB limit in seconds).
//!
//! - a LIST, GET, discovery or error answer: at most `max_response_bytes` in all, and all of it
//!   within `response_deadline` of the request being sent;
//! - a watch (`watch=true`): at most `max_event_bytes` per line (one event), a byte at least
//!   every `watch_idle`, and closed by `timeoutSeconds` (which kube always sends, 290 s) plus
//!   `watch_margin`: the server itself ends it then, so only a server that trickles bytes to
//!   keep it open meets this deadline.
//!
//! Past any of them the body ends with [`LimitExceeded`], which names the member, the request's
//! verb and resource and the bound, never any of the content: kube hands it to the watcher (the
//! view's health marks the member failing; kube's watcher backoff retries) or to the reconcile.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower::BoxError;

/// The bounds of one member's responses (from [`super::Limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Bytes of one non-watch response body (`--member-max-response-bytes`).
    pub max_response_bytes: u64,
    /// Bytes of one watch event, one line of the watch body (`--member-max-event-bytes`).
    pub max_event_bytes: u64,
    /// From sending a non-watch request to the last byte of its answer (the request timeout).
    pub response_deadline: Duration,
    /// The longest a watch may go without a byte.
    pub watch_idle: Duration,
    /// How long past its `timeoutSeconds` a watch may stay open.
    pub watch_margin: Duration,
}

/// No byte for 5 minutes ends a watch. kube's watcher asks `timeoutSeconds=290` (the server
/// closes the watch then, and it asks `allowWatchBookmarks`, so a live server sends a bookmark
/// well before): a watch whose server stays silent longer than the whole watch should last is
/// dead. Never shorter than 290 s: a quiet member with a server that sends no bookmarks would
/// otherwise flap failing every few minutes.
pub const WATCH_IDLE: Duration = Duration::from_secs(300);

/// A watch open 60 s past its `timeoutSeconds` (350 s for kube's 290) is ended: the server
/// should have closed it; one that trickles a byte now and then is holding it open.
pub const WATCH_MARGIN: Duration = Duration::from_secs(60);

/// `timeoutSeconds` when a watch request names none (kube's default).
const DEFAULT_WATCH_TIMEOUT_S: u64 = 290;

/// How a response body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Read whole (and kept whole by kube): a total size and a deadline.
    Whole { max_bytes: u64, deadline: Duration },
    /// A watch: one event per line, for as long as the server keeps it open.
    Stream {
        max_line: u64,
        idle: Duration,
        lifetime: Duration,
    },
}

/// The shape of the answer to `method uri` with `status`: a successful watch is a stream;
/// everything else, a watch refused included (its body is one `Status`), is read whole.
pub fn shape_of(method: &Method, uri: &Uri, status: StatusCode, limits: &BodyLimits) -> Shape {
    match watch_timeout(method, uri) {
        Some(timeout) if status.is_success() => Shape::Stream {
            max_line: limits.max_event_bytes,
            idle: limits.watch_idle,
            lifetime: timeout.saturating_add(limits.watch_margin),
        },
        _ => Shape::Whole {
            max_bytes: limits.max_response_bytes,
            deadline: limits.response_deadline,
        },
    }
}

/// The `timeoutSeconds` of a watch request (`?watch=true` or `1`, or a legacy `/watch/` path),
/// `None` when it is no watch.
fn watch_timeout(method: &Method, uri: &Uri) -> Option<Duration> {
    let query = uri.query().unwrap_or_default();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let watch = matches!(param("watch"), Some("true" | "1"))
        || uri.path().split('/').any(|segment| segment == "watch");
    if *method != Method::GET || !watch {
        return None;
    }
    let secs = param("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(DEFAULT_WATCH_TIMEOUT_S);
    Some(Duration::from_secs(secs))
}

/// Which bound a member's answer went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// The whole body was over this many bytes.
    ResponseBytes(u64),
    /// One watch event (line) was over this many bytes.
    EventBytes(u64),
    /// The body was not complete this long after the request was sent.
    Deadline(Duration),
    /// The watch sent no byte for this long.
    Idle(Duration),
    /// The watch was still open this long after it was sent.
    Lifetime(Duration),
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ResponseBytes(n) => write!(f, "response over {}", Size(*n)),
            Self::EventBytes(n) => write!(f, "event over {}", Size(*n)),
            Self::Deadline(d) => write!(f, "response not complete within {d:?}"),
            Self::Idle(d) => write!(f, "sent nothing for {d:?}"),
            Self::Lifetime(d) => write!(f, "still open after {d:?}"),
        }
    }
}

/// A byte count as operators set it: `16 MiB`, `512 KiB`, else bytes.
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: u64 = 1 << 10;
        const MIB: u64 = 1 << 20;
        match self.0 {
            n if n >= MIB && n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n if n >= KIB && n % KIB == 0 => write!(f, "{} KiB", n / KIB),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// A member's answer went past a bound: `member m: LIST services response over 16 MiB`. Names
/// the member, the request's verb and resource and the bound; never the content, nor the
/// request's URL (its query could carry what a kubeconfig put in the server URL).
#[derive(Debug, Clone, thiserror::Error)]
#[error("member {member}: {request} {exceeded}")]
pub struct LimitExceeded {
    pub member: Arc<str>,
    /// The verb and resource, `LIST services`.
    pub request: String,
    pub exceeded: Exceeded,
}

/// `LIST services`, from the request's classification; only characters a resource name has.
pub fn request_label(method: &Method, uri: &Uri) -> String {
    let kind = super::classify(method, uri);
    let resource: String = kind
        .resource
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-'))
        .take(100)
        .collect();
    format!("{} {resource}", kind.verb.to_ascii_uppercase())
}

/// A response body read under a [`Shape`]: past a bound it ends with [`LimitExceeded`] and
/// drops the inner body (an HTTP/2 stream is reset, its buffers freed).
pub struct Bounded<B> {
    inner: Option<B>,
    member: Arc<str>,
    request: String,
    bound: Bound,
}

enum Bound {
    Whole {
        max_bytes: u64,
        read: u64,
        deadline: Duration,
        at: Pin<Box<Sleep>>,
    },
    Stream {
        max_line: u64,
        /// Bytes of the line being read (since the last newline).
        line: u64,
        idle: Duration,
        quiet: Pin<Box<Sleep>>,
        lifetime: Duration,
        ends: Pin<Box<Sleep>>,
    },
}

impl<B> Bounded<B> {
    /// `body` of member `member`'s answer to `request` ([`request_label`]), read under `shape`,
    /// the deadlines counted from `sent`.
    pub fn new(body: B, member: Arc<str>, request: String, shape: Shape, sent: Instant) -> Self {
        let bound = match shape {
            Shape::Whole {
                max_bytes,
                deadline,
            } => Bound::Whole {
                max_bytes,
                read: 0,
                deadline,
                at: Box::pin(tokio::time::sleep_until(after(sent, deadline))),
            },
            Shape::Stream {
                max_line,
                idle,
                lifetime,
            } => Bound::Stream {
                max_line,
                line: 0,
                idle,
                quiet: Box::pin(tokio::time::sleep_until(after(Instant::now(), idle))),
                lifetime,
                ends: Box::pin(tokio::time::sleep_until(after(sent, lifetime))),
            },
        };
        Self {
            inner: Some(body),
            member,
            request,
            bound,
        }
    }

    fn fail(&mut self, exceeded: Exceeded) -> BoxError {
        self.inner = None;
        Box::new(LimitExceeded {
            member: self.member.clone(),
            request: self.request.clone(),
            exceeded,
        })
    }
}

/// `start + d`, or far ahead when that is past what the clock holds.
fn after(start: Instant, d: Duration) -> Instant {
    start
        .checked_add(d)
        .unwrap_or_else(|| start + Duration::from_secs(86_400 * 365))
}

impl Bound {
    /// A deadline that has passed (registering for the wake-up otherwise).
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Option<Exceeded> {
        match self {
            Self::Whole { deadline, at, .. } => at
                .as_mut()
                .poll(cx)
                .is_ready()
                .then_some(Exceeded::Deadline(*deadline)),
            Self::Stream {
                idle,
                quiet,
                lifetime,
                ends,
                ..
            } => {
                if ends.as_mut().poll(cx).is_ready() {
                    Some(Exceeded::Lifetime(*lifetime))
                } else if quiet.as_mut().poll(cx).is_ready() {
                    Some(Exceeded::Idle(*idle))
                } else {
                    None
                }
            }
        }
    }

    /// Counts `data`; the bound it goes past, if any.
    fn count(&mut self, data: &[u8]) -> Result<(), Exceeded> {
        match self {
            Self::Whole {
                max_bytes, read, ..
            } => {
                *read = read.saturating_add(data.len() as u64);
                if *read > *max_bytes {
                    return Err(Exceeded::ResponseBytes(*max_bytes));
                }
            }
            Self::Stream {
                max_line,
                line,
                idle,
                quiet,
                ..
            } => {
                // The first piece continues the line being read; every newline starts another.
                for (i, piece) in data.split(|b| *b == b'\n').enumerate() {
                    if i > 0 {
                        *line = 0;
                    }
                    *line = line.saturating_add(piece.len() as u64);
                    if *line > *max_line {
                        return Err(Exceeded::EventBytes(*max_line));
                    }
                }
                if !data.is_empty() {
                    let next = after(Instant::now(), *idle);
                    quiet.as_mut().reset(next);
                }
            }
        }
        Ok(())
    }
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        // An answer that says up front it is over the cap (`Content-Length`) is not read.
        if let Bound::Whole {
            max_bytes, read, ..
        } = this.bound
            && read.saturating_add(inner.size_hint().lower()) > max_bytes
        {
            return Poll::Ready(Some(Err(this.fail(Exceeded::ResponseBytes(max_bytes)))));
        }
        // A body that never stops sending is cut at its deadline too: checked before each read.
        if let Some(exceeded) = this.bound.poll_expired(cx) {
            return Poll::Ready(Some(Err(this.fail(exceeded))));
        }
        match Pin::new(inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(exceeded) = this.bound.count(data)
                {
                    return Poll::Ready(Some(Err(this.fail(exceeded))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

#[cfg(test)]
mod tests;
