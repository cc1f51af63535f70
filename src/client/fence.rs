//! Fencing: a write leaves the process only while this replica holds its lease. The hold is
//! a local deadline (the start of the last successful renew plus the renew deadline, which
//! is shorter than the lease duration), checked against the monotonic clock at the moment of
//! each request, so a replica that was paused, partitioned or stuck renewing stops writing
//! before anyone else may take the lease, whatever its tasks were doing.

use http::{Method, Request};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::BoxError;
use tower::filter::Predicate;

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

/// The error a fenced write fails with.
#[derive(Debug, thiserror::Error)]
#[error("not writing {method} {path}: this replica does not hold its lease")]
pub struct NotHeld {
    method: Method,
    path: String,
}

/// With `tower::filter::FilterLayer::new(fence)`, every write (anything but GET, HEAD,
/// OPTIONS) is refused with [`NotHeld`] when the fence does not hold.
impl<B> Predicate<Request<B>> for Fence {
    type Request = Request<B>;

    fn check(&mut self, req: Request<B>) -> Result<Request<B>, BoxError> {
        let read = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if read || self.holds() {
            return Ok(req);
        }
        let (method, path) = (req.method().clone(), req.uri().path().to_string());
        Err(NotHeld { method, path }.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::filter::FilterLayer;
    use tower::{Layer, ServiceExt};

    async fn send(fence: &Fence, method: Method) -> Result<(), BoxError> {
        let svc =
            FilterLayer::new(fence.clone()).layer(tower::service_fn(|_: Request<()>| async {
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
