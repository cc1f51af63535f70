//! Fencing: a write leaves the process only while this replica holds its lease. The hold is
//! a local deadline (the start of the last successful renew plus the renew deadline, which
//! is shorter than the lease duration), checked against the monotonic clock at the moment of
//! each request, so a replica that was paused, partitioned or stuck renewing stops writing
//! before anyone else may take the lease, whatever its tasks were doing.

use std::task::{Context, Poll};

use futures::future::{BoxFuture, FutureExt};
use http::{Method, Request};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

/// Whether this replica may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// No election: always.
    Always,
    /// Until this instant (monotonic).
    Until(Instant),
    /// Not held.
    Never,
}

impl Hold {
    /// Held at `now`.
    pub fn valid_at(self, now: Instant) -> bool {
        match self {
            Hold::Always => true,
            Hold::Until(until) => now < until,
            Hold::Never => false,
        }
    }
}

/// The receiving side of the lease's hold, shared by every fenced client.
#[derive(Debug, Clone)]
pub struct Fence(watch::Receiver<Hold>);

impl Fence {
    /// A fence that never closes (no leader election).
    pub fn open() -> Self {
        Self(watch::channel(Hold::Always).1)
    }

    /// Follows `hold`, as the lease loop sends it.
    pub fn new(hold: watch::Receiver<Hold>) -> Self {
        Self(hold)
    }

    /// Whether a write may leave now.
    pub fn holds(&self) -> bool {
        self.0.borrow().valid_at(Instant::now())
    }
}

/// Refuses every write (anything but GET, HEAD, OPTIONS) when the fence does not hold.
#[derive(Clone)]
pub struct FenceLayer(pub Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = FenceService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct FenceService<S> {
    inner: S,
    fence: Fence,
}

/// The error a fenced write fails with.
#[derive(Debug, thiserror::Error)]
#[error("not writing {method} {path}: this replica does not hold its lease")]
pub struct NotHeld {
    method: Method,
    path: String,
}

impl<S, B> Service<Request<B>> for FenceService<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let read = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if !read && !self.fence.holds() {
            let e = NotHeld {
                method: req.method().clone(),
                path: req.uri().path().to_string(),
            };
            return futures::future::ready(Err(e.into())).boxed();
        }
        let fut = self.inner.call(req);
        async move { fut.await.map_err(Into::into) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::ServiceExt;

    async fn send(fence: &Fence, method: Method) -> Result<(), BoxError> {
        let svc = FenceLayer(fence.clone()).layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, BoxError>(())
        }));
        svc.oneshot(
            Request::builder()
                .method(method)
                .uri("/x")
                .body(())
                .expect("req"),
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_while_the_hold_is_valid_reads_always() {
        let (tx, rx) = watch::channel(Hold::Never);
        let fence = Fence::new(rx);
        assert!(send(&fence, Method::GET).await.is_ok());
        assert!(send(&fence, Method::PATCH).await.is_err());
        tx.send_replace(Hold::Until(Instant::now() + Duration::from_secs(10)));
        assert!(send(&fence, Method::POST).await.is_ok());
        // The deadline passes with nobody telling the fence: writes stop by the clock alone.
        tokio::time::advance(Duration::from_secs(11)).await;
        let e = send(&fence, Method::DELETE).await.expect_err("fenced");
        assert!(e.to_string().contains("does not hold its lease"), "{e}");
        assert!(send(&fence, Method::GET).await.is_ok());
        assert!(send(&Fence::open(), Method::PUT).await.is_ok());
    }
}
