//! What a job asks about ownership besides its writes (which the [`Fence`] checks at send
//! time): whether it may write now, so a reconcile that could only be refused is not started,
//! and when it gains the right, so everything is reconciled once from the warm caches. A
//! [`Claim`] reads the very hold its member's fence reads: the two never disagree.

use futures::Stream;

use super::Fence;

/// This replica's claim on writing, for one member (its shard's) or for the whole process
/// (the leader lease's; always held without an election).
#[derive(Debug, Clone)]
pub struct Claim(Fence);

impl Claim {
    /// The claim `fence` stands for.
    pub fn of(fence: Fence) -> Self {
        Self(fence)
    }

    /// Whether this replica may write now (the fence would let a write leave).
    pub fn may_write(&self) -> bool {
        self.0.holds_now()
    }

    /// Yields `()` each time the claim is gained: not for a claim held at the start, only
    /// after it lapsed or was given up and came back. Ends when the claim can no longer
    /// change (no election, or its lease loop is gone) and is not held.
    pub fn gained(&self) -> impl Stream<Item = ()> + Send + 'static + use<> {
        let held = self.may_write();
        futures::stream::unfold((self.0.clone(), held), |(fence, held)| async move {
            if held {
                fence.closed().await;
            }
            fence.opened().await?;
            Some(((), (fence, true)))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::*;
    use crate::ownership::Hold;

    /// Counts the gains of `claim` as they come.
    fn counted(claim: &Claim) -> watch::Receiver<usize> {
        let (tx, rx) = watch::channel(0);
        let gained = claim.gained();
        tokio::spawn(async move {
            let mut gained = Box::pin(gained);
            while gained.next().await.is_some() {
                tx.send_modify(|n| *n += 1);
            }
        });
        rx
    }

    /// Lets the counting task look (paused time: only as far as asked).
    async fn after(secs: u64) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn gained_fires_on_each_gain_after_a_lapse_never_for_the_first_hold() {
        let (tx, rx) = watch::channel(Hold::Until(Instant::now() + Duration::from_secs(10)));
        let claim = Claim::of(Fence::new(rx));
        assert!(claim.may_write());
        let gains = counted(&claim);
        after(5).await;
        assert_eq!(*gains.borrow(), 0, "held from the start: nothing gained");
        // The hold runs out by the clock, unannounced; a renew later gives it back.
        after(6).await;
        assert!(!claim.may_write());
        tx.send_replace(Hold::Until(Instant::now() + Duration::from_secs(10)));
        after(1).await;
        assert!(claim.may_write());
        assert_eq!(*gains.borrow(), 1);
        tx.send_replace(Hold::Never);
        after(1).await;
        assert!(!claim.may_write());
        tx.send_replace(Hold::Until(Instant::now() + Duration::from_secs(10)));
        after(1).await;
        assert_eq!(*gains.borrow(), 2);
        // Renewed in time: no gain.
        tx.send_replace(Hold::Until(Instant::now() + Duration::from_secs(10)));
        after(1).await;
        assert_eq!(*gains.borrow(), 2);
        tx.send_replace(Hold::Never);
        after(1).await;
        drop(tx);
        let mut gains = gains;
        let ended = async { while gains.changed().await.is_ok() {} };
        let ended = tokio::time::timeout(Duration::from_secs(1), ended).await;
        assert!(ended.is_ok(), "the lease loop is gone: the stream ends");
        assert_eq!(*gains.borrow(), 2);
    }

    #[tokio::test]
    async fn an_open_fence_is_always_claimed_and_never_gained_again() {
        let claim = Claim::of(Fence::open());
        assert!(claim.may_write());
        let mut gained = Box::pin(claim.gained());
        let next = tokio::time::timeout(Duration::from_millis(50), gained.next()).await;
        assert!(next.is_err(), "nothing ever changes");
        let standby = Claim::of(Fence::new(watch::channel(Hold::Never).1));
        assert!(!standby.may_write());
        assert_eq!(Box::pin(standby.gained()).next().await, None);
    }
}
