//! A bounded queue of names to look at, for work that a periodic sweep finds again anyway:
//! what does not fit is dropped, counted (`fleetnet_queue_dropped_total{queue}`) and logged
//! at debug, never waited for (the watch that feeds it must not stall).

use std::fmt::Debug;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::observer::ReconcileObserver;

/// The sending side of a member's lossy queue.
pub(crate) struct Lossy<T> {
    tx: mpsc::Sender<T>,
    member: Arc<str>,
    /// The queue's name on the metric.
    queue: &'static str,
    observer: Arc<dyn ReconcileObserver>,
}

impl<T> Clone for Lossy<T> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            member: self.member.clone(),
            queue: self.queue,
            observer: self.observer.clone(),
        }
    }
}

impl<T: Debug> Lossy<T> {
    /// A queue of `capacity` items of `member`, named `queue`, and its receiver.
    pub(crate) fn channel(
        capacity: usize,
        member: &str,
        queue: &'static str,
        observer: Arc<dyn ReconcileObserver>,
    ) -> (Self, mpsc::Receiver<T>) {
        let (tx, rx) = mpsc::channel(capacity);
        let lossy = Self {
            tx,
            member: member.into(),
            queue,
            observer,
        };
        (lossy, rx)
    }

    /// Queues `item`, or drops it when the queue is full. Nothing is counted once the receiver
    /// is gone (the exporter stopping).
    pub(crate) fn push(&self, item: T) {
        if let Err(mpsc::error::TrySendError::Full(item)) = self.tx.try_send(item) {
            self.observer.dropped(&self.member, self.queue);
            tracing::debug!(member = %self.member, queue = self.queue, item = ?item, "queue full: dropped; the next sweep finds it");
        }
    }
}

/// An observer that records what queues dropped, `(member, queue)`, for the queues' tests.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Drops(pub(crate) parking_lot::Mutex<Vec<(String, &'static str)>>);

#[cfg(test)]
impl ReconcileObserver for Drops {
    fn reconcile_started(&self, _: &str) {}
    fn reconciled(&self, _: &str, _: super::observer::Reconciled, _: std::time::Duration) {}
    fn hub_write(&self, _: &str, _: &'static str) {}
    fn export_latency(&self, _: &str, _: std::time::Duration) {}
    fn conflict_reflected(&self, _: &str, _: std::time::Duration) {}
    fn watch_failed(&self, _: &str, _: &'static str, _: bool, _: &str) {}
    fn dropped(&self, member: &str, queue: &'static str) {
        self.0.lock().push((member.to_string(), queue));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_does_not_fit_is_dropped_and_counted_and_a_closed_queue_counts_nothing() {
        let drops = Arc::new(Drops::default());
        let (queue, mut rx) = Lossy::channel(2, "m1", "dangling_ises", drops.clone());
        for name in ["a", "b", "c", "d"] {
            queue.clone().push(name.to_string());
        }
        assert_eq!(rx.try_recv().ok().as_deref(), Some("a"));
        assert_eq!(rx.try_recv().ok().as_deref(), Some("b"));
        assert!(rx.try_recv().is_err());
        assert_eq!(
            *drops.0.lock(),
            vec![
                ("m1".to_string(), "dangling_ises"),
                ("m1".to_string(), "dangling_ises")
            ]
        );
        drop(rx);
        queue.push("e".to_string());
        assert_eq!(
            drops.0.lock().len(),
            2,
            "a stopped exporter's queue drops silently"
        );
    }
}
