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

/// Whether `error`, or any error it came from, is a write this replica's fence refused.
pub fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| e.is::<NotHeld>())
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

    /// Through a whole client stack (buffer, retry, counting), a fenced write fails with an
    /// error [`refused`] recognises, without reaching any server.
    #[tokio::test]
    async fn a_client_reports_its_fenced_writes_as_refused() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
        let limits = crate::client::Limits::default();
        let closed = Fence::new(watch::channel(Hold::Never).1);
        let stats = std::sync::Arc::default();
        let client = crate::client::build_fenced("t", config, &limits, stats, closed);
        let api = kube::Api::<ConfigMap>::namespaced(client.expect("client"), "ns");
        let created = api.create(&Default::default(), &ConfigMap::default()).await;
        assert!(refused(&created.expect_err("fenced")));
        let other = kube::Error::Service("connection refused".into());
        assert!(!refused(&other));
    }
}
