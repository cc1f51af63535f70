//! The watchers' retry backoff, grown by failures in a row and reset by time only.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// `B`, deaf to the resets of kube's watcher stream: `.backoff()` resets its backoff on every
/// item that is not an error, and the watcher yields `Event::Init` before each (re)list, so a
/// member whose LIST fails every time (an answer over its size cap, malformed JSON) was listed
/// again after the shortest wait for ever: twice a second, each time up to the cap. Wrapped
/// around kube's `ResetTimerBackoff`, the wait grows with the failures in a row and starts over
/// once none has come for that backoff's reset period.
pub struct ResetByTime<B>(pub B);

impl<B: Iterator<Item = Duration>> Iterator for ResetByTime<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.next()
    }
}

impl<B: Backoff> Backoff for ResetByTime<B> {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Doubles from 1 s; counts its resets.
    struct Doubling(Duration, usize);

    impl Iterator for Doubling {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            self.0 *= 2;
            Some(self.0)
        }
    }

    impl Backoff for Doubling {
        fn reset(&mut self) {
            self.0 = Duration::from_millis(500);
            self.1 += 1;
        }
    }

    #[test]
    fn the_stream_resets_nothing_and_the_wait_keeps_growing() {
        let mut b = ResetByTime(Doubling(Duration::from_millis(500), 0));
        assert_eq!(b.next(), Some(Duration::from_secs(1)));
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_secs(2)));
        assert_eq!(b.0.1, 0, "never reset through the wrapper");
    }
}
