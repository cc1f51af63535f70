//! One connection of the health and metrics listeners, held to its deadlines: the accept
//! loop and its slots, what a connection was last doing ([`Activity`]), the pure [`verdict`]
//! on it, and the loop that serves it until a deadline or shutdown cuts it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// What one connection may cost a listener. The defaults fit kubelet probes and a Prometheus
/// scrape (a request of a few hundred bytes, an answer within milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// The whole request head (request line and headers) must arrive within this from the
    /// moment the server waits for it, on a new connection and between keep-alive requests
    /// alike: a client dripping its headers a byte at a time is cut here.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this long (a backstop: the header
    /// deadline usually closes an idle keep-alive connection first).
    pub idle_timeout: Duration,
    /// A request must be answered, response body written out included, within this from the
    /// moment its head was read; otherwise the connection is closed (a client that does not
    /// read its answer cannot hold a slot).
    pub request_timeout: Duration,
    /// Connections served at once per listener. Past it no connection is accepted: new ones
    /// wait in the listen backlog (FIFO) until a slot frees up, so a kubelet probe queued behind
    /// held connections is answered at most one header deadline later rather than refused.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            max_connections: 64,
        }
    }
}

/// The peer address of the connection a request came on (set by the accept loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// Accepts connections while a slot is free, each served on its own task holding its slot.
/// Waiting for a slot *before* accepting leaves the surplus in the kernel's backlog instead of
/// accepting and dropping it: the queued kubelet probe is served as soon as a holder is cut.
pub(super) async fn accept_loop(
    listener: tokio::net::TcpListener,
    what: &'static str,
    app: Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) {
    // Zero would never accept anything: at least one connection at a time.
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = shutdown.cancelled() => break,
        };
        // The semaphore is never closed; an error would mean it was, so stop serving.
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                tracing::warn!(error = %e, "{what} server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let app = app.clone();
        let limits = limits.clone();
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            let _slot = slot;
            serve_connection(stream, peer, app, &limits, shutdown).await;
        });
    }
    drop(listener);
    tasks.close();
    // Connections drain on their own (each bounded by its request deadline); this bound only
    // keeps the task from outliving a stuck one.
    let drain = limits
        .request_timeout
        .saturating_add(Duration::from_secs(1));
    let _ = tokio::time::timeout(drain, tasks.wait()).await;
}

/// When a connection was last busy or idle: what its deadlines are measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    /// Requests whose response has not been written out yet (one at a time over HTTP/1.1).
    pub in_flight: usize,
    /// Of those, the ones whose response body hyper has produced and dropped: their bytes may
    /// still sit in hyper's write queue, so they end at the next completed flush, not now.
    pub answered: usize,
    /// When the oldest request in flight started (its head was read).
    pub busy_since: Option<Instant>,
    /// When the connection last became idle (accepted, or its last response written out).
    pub idle_since: Instant,
}

impl Activity {
    fn new(now: Instant) -> Self {
        Activity {
            in_flight: 0,
            answered: 0,
            busy_since: None,
            idle_since: now,
        }
    }

    /// A request's head was read.
    fn started(&mut self, now: Instant) {
        if self.in_flight == 0 {
            self.busy_since = Some(now);
        }
        self.in_flight += 1;
    }

    /// A response body was produced to its end (or dropped): it is out once flushed.
    fn answered(&mut self) {
        self.answered = (self.answered + 1).min(self.in_flight);
    }

    /// hyper flushed the connection: its write queue is empty, every answered response is out.
    fn flushed(&mut self, now: Instant) {
        if self.answered == 0 {
            return;
        }
        self.in_flight = self.in_flight.saturating_sub(self.answered);
        self.answered = 0;
        if self.in_flight == 0 {
            self.busy_since = None;
            self.idle_since = now;
        }
    }
}

/// What to do with a connection now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep serving it; look again at this instant (its next deadline).
    KeepUntil(Instant),
    /// Its request took longer than the request deadline: close it.
    RequestOverdue,
    /// It stayed idle longer than the idle deadline: close it.
    Idle,
}

/// The deadline a connection is under: the request deadline while a request is in flight, the
/// idle deadline otherwise. A limit too large to add to an instant never expires (rechecked
/// daily).
pub fn verdict(activity: &Activity, now: Instant, limits: &ServerLimits) -> Verdict {
    let (deadline, expired) = match activity.busy_since {
        Some(since) => (
            since.checked_add(limits.request_timeout),
            Verdict::RequestOverdue,
        ),
        None => (
            activity.idle_since.checked_add(limits.idle_timeout),
            Verdict::Idle,
        ),
    };
    match deadline {
        Some(deadline) if now >= deadline => expired,
        Some(deadline) => Verdict::KeepUntil(deadline),
        None => Verdict::KeepUntil(now.checked_add(Duration::from_secs(86_400)).unwrap_or(now)),
    }
}

/// Serves one connection with `app` under `limits`: HTTP/1.1 only (kubelet probes and
/// Prometheus scrapes speak it; an h2c connection would have no header deadline), the header
/// deadline enforced by hyper, the request and idle deadlines by this loop (dropping the
/// connection closes it). On `shutdown` the connection finishes its request in flight, still
/// under its deadline, then closes. `peer` is what `/members` judges the client by.
pub async fn serve_connection<I>(
    io: I,
    peer: SocketAddr,
    app: Router,
    limits: &ServerLimits,
    shutdown: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Mutex::new(Activity::new(Instant::now())));
    // A request's start moves the connection's deadline earlier (idle -> request deadline):
    // the loop below sleeps until the deadline it last saw, so it is woken to look again.
    let started = Arc::new(Notify::new());
    let tracked = activity.clone();
    let wake = started.clone();
    let service = tower::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        tracked.lock().started(Instant::now());
        wake.notify_one();
        // Marks the request answered when hyper drops the response body (its last bytes
        // queued, or the connection gone); the next flush then ends it.
        let done = Finished(tracked.clone());
        let app = app.clone();
        async move {
            let response = match app.oneshot(req).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(move |body| {
                body.map_frame(move |frame| {
                    let _held = &done;
                    frame
                })
            }))
        }
    });
    let builder = http1(limits);
    let io = Tracked {
        io,
        activity: activity.clone(),
    };
    let conn = builder.serve_connection(
        TokioIo::new(io),
        hyper_util::service::TowerToHyperService::new(service),
    );
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        let now = Instant::now();
        let next = match verdict(&activity.lock(), now, limits) {
            Verdict::KeepUntil(next) => next,
            cut => {
                tracing::debug!(peer = %peer, verdict = ?cut, "closing an HTTP connection");
                return;
            }
        };
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    // Header deadline, a client gone mid-request, a malformed request: the
                    // client's doing, not an error of this process.
                    tracing::debug!(peer = %peer, error = %e, "HTTP connection ended");
                }
                return;
            }
            () = shutdown.cancelled(), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
            () = tokio::time::sleep_until(next) => {}
            () = started.notified() => {}
        }
    }
}

/// How a connection is spoken: HTTP/1.1 only, the header deadline of `limits`, a small
/// buffer, keep-alive (the idle deadline is [`serve_connection`]'s).
fn http1(limits: &ServerLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // A request head of these endpoints is a few hundred bytes: hyper's smallest buffer
        // (8 KiB is its floor) bounds what a connection holds at 16 KiB instead of ~400 KiB.
        .max_buf_size(16 * 1024)
        .keep_alive(true);
    builder
}

/// Marks a request answered when its response body is dropped (see [`serve_connection`]).
struct Finished(Arc<Mutex<Activity>>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.lock().answered();
    }
}

/// The connection's socket, telling [`Activity`] when hyper's writes are flushed: hyper drops a
/// response body as soon as it has queued the body's last bytes, and flushes the socket only
/// once its queue is written out, so only then is a response really delivered to the kernel.
struct Tracked<I> {
    io: I,
    activity: Arc<Mutex<Activity>>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            self.activity.lock().flushed(Instant::now());
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
