use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

type Events = Vec<watcher::Result<watcher::Event<u32>>>;

/// What `capped` lets through of `opened` watches (each open takes the next list of
/// events), for a view whose store holds `size` objects; `opens` counts the watches opened.
async fn through(
    opened: Vec<Events>,
    size: usize,
    max: usize,
    take: usize,
) -> (Vec<String>, usize) {
    let opens = Arc::new(AtomicUsize::new(0));
    let lists = Arc::new(Mutex::new(opened.into_iter()));
    let open = {
        let opens = opens.clone();
        move || {
            opens.fetch_add(1, Ordering::SeqCst);
            futures::stream::iter(lists.lock().next().unwrap_or_default())
        }
    };
    let seen = capped(open, move || size, max, "services".into())
        .take(take)
        .map(|e| match e {
            Ok(watcher::Event::Init) => "init".to_string(),
            Ok(watcher::Event::InitApply(n)) => format!("list {n}"),
            Ok(watcher::Event::InitDone) => "done".to_string(),
            Ok(watcher::Event::Apply(n)) => format!("apply {n}"),
            Ok(watcher::Event::Delete(n)) => format!("delete {n}"),
            Err(e) => format!("error {e}"),
        })
        .collect()
        .await;
    (seen, opens.load(Ordering::SeqCst))
}

fn list(n: u32) -> Events {
    let mut events = vec![Ok(watcher::Event::Init)];
    events.extend((1..=n).map(|i| Ok(watcher::Event::InitApply(i))));
    events.push(Ok(watcher::Event::InitDone));
    events
}

#[tokio::test(start_paused = true)]
async fn a_list_over_the_cap_ends_its_watch_and_the_next_lists_again() {
    let (seen, opens) = through(vec![list(3), list(2)], 0, 2, 9).await;
    assert_eq!(
        seen,
        [
            "init",
            "list 1",
            "list 2",
            "error failed to perform initial object list: ServiceError: services: 2 or more objects, the most one view of a member holds",
            "init",
            "list 1",
            "list 2",
            "done",
        ]
    );
    assert_eq!(opens, 2, "one watch opened again after the cap");
}

#[test]
fn costly_errors_are_reads_over_a_cap_wherever_they_are_wrapped() {
    use crate::client::bounded::{Exceeded, LimitExceeded};
    let limit = |exceeded| LimitExceeded {
        member: "m".into(),
        request: "LIST services".into(),
        exceeded,
    };
    let listed = |e: Box<dyn std::error::Error + Send + Sync>| {
        watcher::Error::InitialListFailed(kube::Error::Service(e))
    };
    let over = OverCap {
        kind: "services".into(),
        max: 1,
    };
    assert!(costly(&listed(Box::new(over))));
    assert!(costly(&listed(Box::new(limit(Exceeded::ResponseBytes(1))))));
    let in_io = std::io::Error::other(limit(Exceeded::EventBytes(1)));
    assert!(costly(&listed(Box::new(in_io))));
    let slow = limit(Exceeded::Deadline(Duration::from_secs(30)));
    assert!(!costly(&listed(Box::new(slow))));
    assert!(!costly(&listed(Box::new(std::io::Error::other("reset")))));
    assert_eq!(
        (1..=7)
            .map(penalty)
            .map(|d| d.as_secs())
            .collect::<Vec<_>>(),
        [10, 20, 40, 80, 160, 300, 300]
    );
    assert_eq!(penalty(u32::MAX), Duration::from_secs(300));
}

#[tokio::test(start_paused = true)]
async fn after_a_costly_error_the_next_poll_waits_the_penalty() {
    let opens = Arc::new(AtomicUsize::new(0));
    let lists = Arc::new(Mutex::new(vec![list(3), list(1), list(1)].into_iter()));
    let open = {
        let opens = opens.clone();
        move || {
            opens.fetch_add(1, Ordering::SeqCst);
            futures::stream::iter(lists.lock().next().unwrap_or_default())
        }
    };
    let mut events = Box::pin(capped(open, || 0, 2, "services".into()));
    let start = tokio::time::Instant::now();
    // init, 1, 2, then over the cap.
    for _ in 0..3 {
        assert!(events.next().await.is_some_and(|e| e.is_ok()));
    }
    assert!(events.next().await.is_some_and(|e| e.is_err()));
    assert_eq!(start.elapsed(), Duration::ZERO, "the error is told at once");
    // The next watch's first event waits the penalty.
    assert!(events.next().await.is_some_and(|e| e.is_ok()));
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(opens.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_change_while_the_view_is_full_ends_the_watch_one_below_passes() {
    let changes = || vec![Ok(watcher::Event::Apply(7)), Ok(watcher::Event::Delete(7))];
    let (below, opens) = through(vec![changes()], 1, 2, 9).await;
    assert_eq!(below, ["apply 7", "delete 7"]);
    assert_eq!(opens, 1);
    let (full, opens) = through(vec![changes(), vec![]], 2, 2, 9).await;
    assert_eq!(full.len(), 1, "{full:?}");
    assert!(full[0].starts_with("error "), "{full:?}");
    assert_eq!(opens, 2);
}
