//! Fencing: a write leaves the process only while this replica holds its lease. The hold is
//! a local deadline (the start of the last successful renew plus the renew deadline, which
//! is shorter than the lease duration), checked against the monotonic clock at the moment of
//! each request, so a replica that was paused, partitioned or stuck renewing stops writing
//! before anyone else may take the lease, whatever its tasks were doing.

use std::time::Duration;

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
    /// A fence that never closes (no election; a sharded replica's process-wide fence).
    pub fn open() -> Self {
        Self(watch::channel(Hold::Always).1)
    }

    /// Follows `hold`, as the lease loop sends it.
    pub fn new(hold: watch::Receiver<Hold>) -> Self {
        Self(hold)
    }

    /// Whether a write may leave now: the same question [`Gate::admit`] asks.
    pub fn holds_now(&self) -> bool {
        self.0.borrow().valid_at(Instant::now())
    }

    /// Resolves once the fence holds; `None` if it does not and never will (its lease loop
    /// is gone).
    pub async fn opened(&self) -> Option<()> {
        let mut rx = self.0.clone();
        loop {
            if rx.borrow_and_update().valid_at(Instant::now()) {
                return Some(());
            }
            rx.changed().await.ok()?;
        }
    }
}

/// One write's pass through a [`Fence`], asked again at every step where the write waited
/// (for a token, a slot) and on every retry: a write is authorised when it is sent.
#[derive(Debug, Clone)]
pub struct Gate {
    fence: Fence,
    method: Method,
    path: String,
}

impl Gate {
    /// Whether the write may leave now, and then for at most how long (`None`: no limit).
    pub fn admit(&self) -> Result<Option<Duration>, NotHeld> {
        let now = Instant::now();
        match *self.fence.0.borrow() {
            Hold::Always => Ok(None),
            Hold::Until(until) if now < until => Ok(Some(until - now)),
            _ => Err(self.refusal()),
        }
    }

    /// Resolves, with the refusal, once the fence closes.
    pub async fn closed(&self) -> NotHeld {
        self.fence.closed().await;
        self.refusal()
    }

    fn refusal(&self) -> NotHeld {
        NotHeld {
            method: self.method.clone(),
            path: self.path.clone(),
        }
    }
}

/// With `tower::filter::FilterLayer::new(AtSend)` innermost in a client stack, the request's
/// [`Fence`] (an extension) is asked once more as it goes to the connection, below the
/// buffer's queue: nothing that waited after the policy's last step slips out. A write that
/// carries no fence at all is refused too ([`Unfenced`]): a client that forgot to set one must
/// fail loudly, not write as if it held a lease (reads need none).
#[derive(Debug, Clone, Copy)]
pub struct AtSend;

impl<B> Predicate<Request<B>> for AtSend {
    type Request = Request<B>;

    fn check(&mut self, req: Request<B>) -> Result<Request<B>, BoxError> {
        let Some(fence) = req.extensions().get::<Fence>() else {
            return match is_read(req.method()) {
                true => Ok(req),
                false => Err(Unfenced {
                    method: req.method().clone(),
                    path: req.uri().path().to_string(),
                }
                .into()),
            };
        };
        match fence.gate(&req).map(|g| g.admit()) {
            Some(Err(refusal)) => Err(refusal.into()),
            _ => Ok(req),
        }
    }
}

/// Reads go whatever the fence says; every other method writes.
fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The error of a write sent without a [`Fence`]: a defect of the client that sent it, not a
/// lapse of the lease (so not [`refused`], which callers treat as routine).
#[derive(Debug, thiserror::Error)]
#[error("not writing {method} {path}: the request carries no fence (every write must)")]
pub struct Unfenced {
    method: Method,
    path: String,
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

impl Fence {
    /// The pass of `req` through this fence: `None` for a read, which always goes.
    pub fn gate<B>(&self, req: &Request<B>) -> Option<Gate> {
        (!is_read(req.method())).then(|| Gate {
            fence: self.clone(),
            method: req.method().clone(),
            path: req.uri().path().to_string(),
        })
    }

    /// Resolves once the fence does not hold (its deadline passed, or the hold was given up);
    /// never for an open fence.
    pub async fn closed(&self) {
        let mut rx = self.0.clone();
        loop {
            let hold = *rx.borrow_and_update();
            match hold {
                Hold::Never => return,
                Hold::Until(until) if Instant::now() >= until => return,
                Hold::Until(until) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(until) => return,
                        changed = rx.changed() => {
                            // A renewal that came after the hold ran out: closed meanwhile.
                            if changed.is_err() || Instant::now() >= until { return }
                        }
                    }
                }
                Hold::Always => {
                    if rx.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(fence: &Fence, method: Method) -> Result<Option<Duration>, NotHeld> {
        let req = Request::builder()
            .method(method)
            .uri("/x")
            .body(())
            .expect("req");
        fence.gate(&req).map_or(Ok(None), |gate| gate.admit())
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_while_the_hold_is_valid_reads_always() {
        let (tx, rx) = watch::channel(Hold::Never);
        let fence = Fence::new(rx);
        assert_eq!(admit(&fence, Method::GET).ok(), Some(None));
        assert!(admit(&fence, Method::PATCH).is_err());
        tx.send_replace(Hold::Until(Instant::now() + Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(
            admit(&fence, Method::POST).ok(),
            Some(Some(Duration::from_secs(6))),
            "a write may take what is left of the hold"
        );
        // The deadline passes with nobody telling the fence: writes stop by the clock alone.
        tokio::time::advance(Duration::from_secs(7)).await;
        let e = admit(&fence, Method::DELETE).expect_err("fenced");
        assert!(e.to_string().contains("does not hold its lease"), "{e}");
        assert!(admit(&fence, Method::GET).is_ok());
        assert_eq!(admit(&Fence::open(), Method::PUT).ok(), Some(None));
    }

    /// A request with no fence among its extensions: a write is refused (and not as a lapse
    /// of the lease), a read goes; with a fence, the fence decides.
    #[test]
    fn a_write_without_a_fence_is_refused_a_read_is_not() {
        let request = |method: Method, fence: Option<Fence>| {
            let mut req = Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/ns/configmaps")
                .body(())
                .expect("req");
            if let Some(fence) = fence {
                req.extensions_mut().insert(fence);
            }
            req
        };
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            let error = AtSend
                .check(request(method.clone(), None))
                .expect_err("an unfenced write is refused");
            assert!(error.is::<Unfenced>(), "{error}");
            assert!(error.to_string().contains("carries no fence"), "{error}");
            assert!(
                !refused(error.as_ref()),
                "a defect, not a lapse of the lease"
            );
            assert!(
                AtSend
                    .check(request(method.clone(), Some(Fence::open())))
                    .is_ok()
            );
            let closed = Fence::new(watch::channel(Hold::Never).1);
            let error = AtSend
                .check(request(method, Some(closed)))
                .expect_err("fenced");
            assert!(refused(error.as_ref()));
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(AtSend.check(request(method, None)).is_ok());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn closed_resolves_when_the_hold_runs_out_or_is_given_up() {
        let start = Instant::now();
        let (tx, rx) = watch::channel(Hold::Until(start + Duration::from_secs(10)));
        let fence = Fence::new(rx);
        fence.closed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(10), "by the clock");
        tx.send_replace(Hold::Until(Instant::now() + Duration::from_secs(60)));
        let given_up = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            tx.send_replace(Hold::Never);
            tx
        });
        let at = Instant::now();
        fence.closed().await;
        assert_eq!(at.elapsed(), Duration::from_secs(3), "given up");
        drop(given_up.await);
        let open = Fence::open();
        let waited = tokio::time::timeout(Duration::from_secs(100), open.closed()).await;
        assert!(waited.is_err(), "an open fence never closes");
    }
}
