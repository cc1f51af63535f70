//! A member's supervision: how an attempt that fails, panics or ends is told, and when the next
//! one runs.

use super::{
    Error, MAX_RETRY_DELAY, RAN_WELL, engaging_slot, failures_after, retry_delay, settle, slot_hold,
};
use futures::FutureExt;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A member that is down is tried again quickly at first, then at most every 15 s, never
/// the minutes a long streak would otherwise reach; an engagement that ran a while before
/// failing starts from the first step again.
#[test]
fn a_failing_member_is_retried_within_the_cap_and_a_long_run_resets_the_streak() {
    assert_eq!(retry_delay(1, 0.0), Duration::from_millis(500));
    assert_eq!(retry_delay(3, 0.5), Duration::from_secs(3));
    for failures in [5, 8, 30, u32::MAX] {
        assert_eq!(retry_delay(failures, 1.0), MAX_RETRY_DELAY, "{failures}");
        // Still jittered at the cap: members that failed together do not return in step.
        assert_eq!(
            retry_delay(failures, 0.0),
            MAX_RETRY_DELAY / 2,
            "{failures}"
        );
    }
    let quick = Duration::from_millis(10);
    assert_eq!(failures_after(0, quick), 1);
    assert_eq!(failures_after(6, quick), 7);
    assert_eq!(failures_after(u32::MAX, quick), u32::MAX);
    assert_eq!(failures_after(6, RAN_WELL), 1);
}

#[test]
fn an_attempt_that_ends_is_a_failure_unless_it_was_asked_to_stop() {
    let told = |e: Option<Error>| e.map(|e| e.to_string());
    assert_eq!(settle(Ok(Ok(())), true), None);
    assert_eq!(settle(Ok(Err(Error::Discovery("x".into()))), true), None);
    assert_eq!(
        told(settle(Ok(Ok(())), false)).as_deref(),
        Some("member task ended unexpectedly; restarting")
    );
    let no_route = settle(Ok(Err(Error::Discovery("no route".into()))), false);
    assert_eq!(told(no_route).as_deref(), Some("no route"));
}

/// A panicking attempt is caught and told without its message (which may quote a member's
/// data); the next attempt runs.
#[tokio::test]
async fn a_panicking_attempt_is_a_failure_and_the_next_attempt_runs() {
    let attempt = |n: u32| async move {
        if n == 0 {
            panic!("secret-from-member");
        }
        Err::<(), Error>(Error::Discovery(format!("attempt {n}")))
    };
    let mut reasons = Vec::new();
    for n in 0..2 {
        let ended = std::panic::AssertUnwindSafe(attempt(n))
            .catch_unwind()
            .await;
        reasons.extend(settle(ended, false).map(|e| e.to_string()));
    }
    assert_eq!(reasons, ["member task panicked; restarting", "attempt 1"]);
}

/// A member's first attempt may hold its engaging slot 5 s; one after failures 1 s, so that
/// members failing again and again (hanging servers) leave the slots to the others.
#[tokio::test(start_paused = true)]
async fn a_retry_holds_its_engaging_slot_for_a_second_at_most() {
    assert_eq!(slot_hold(0), Duration::from_secs(5));
    assert_eq!(slot_hold(1), Duration::from_secs(1));
    assert_eq!(slot_hold(u32::MAX), Duration::from_secs(1));
    let slots = Arc::new(tokio::sync::Semaphore::new(1));
    let cancel = CancellationToken::new();
    let held = engaging_slot(&slots, &cancel, slot_hold(3))
        .await
        .expect("a slot");
    tokio::task::yield_now().await;
    assert_eq!(slots.available_permits(), 0, "held");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        slots.available_permits(),
        1,
        "freed after 1 s, its attempt still running"
    );
    drop(held);
    let first = engaging_slot(&slots, &cancel, slot_hold(0))
        .await
        .expect("a slot");
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert_eq!(
        slots.available_permits(),
        0,
        "a first attempt holds it longer"
    );
    drop(first);
    tokio::task::yield_now().await;
    assert_eq!(
        slots.available_permits(),
        1,
        "freed when the attempt lets go"
    );
    cancel.cancel();
    let _all = slots.clone().acquire_owned().await.expect("permit");
    assert!(
        engaging_slot(&slots, &cancel, slot_hold(0)).await.is_none(),
        "cancelled while waiting"
    );
}
