use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

type Events = Vec<watcher::Result<watcher::Event<u32>>>;
/// One watch of [`opener`]: its events, played at once.
type Played = futures::stream::Iter<std::vec::IntoIter<watcher::Result<watcher::Event<u32>>>>;

/// An `open` for [`capped`] whose watches play `opened` in turn (then end at once), and the
/// count of watches it opened.
fn opener(opened: Vec<Events>) -> (impl Fn() -> Played + Send + 'static, Arc<AtomicUsize>) {
    let opens = Arc::new(AtomicUsize::new(0));
    let lists = Mutex::new(opened.into_iter());
    let count = opens.clone();
    let open = move || {
        count.fetch_add(1, Ordering::SeqCst);
        futures::stream::iter(lists.lock().next().unwrap_or_default())
    };
    (open, opens)
}

/// What `capped` lets through of `opened` watches (each open takes the next list of
/// events), for a view whose store holds `size` objects; `opens` counts the watches opened.
async fn through(
    opened: Vec<Events>,
    size: usize,
    max: usize,
    take: usize,
) -> (Vec<String>, usize) {
    let (open, opens) = opener(opened);
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
    let (open, opens) = opener(vec![list(3), list(1), list(1)]);
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

fn refused(what: &str) -> watcher::Result<watcher::Event<u32>> {
    let error = kube::Error::Service(Box::new(std::io::Error::other(what.to_string())));
    Err(watcher::Error::WatchStartFailed(error))
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_fails_after_its_list_lists_again_so_its_recovery_is_told() {
    let mut failed_watch = list(1);
    failed_watch.push(refused("storage is (re)initializing"));
    // The watcher would resume its watch and tell nothing: a view would stay failing.
    failed_watch.push(Ok(watcher::Event::Apply(9)));
    let (seen, opens) = through(vec![failed_watch, list(1)], 0, 10, 7).await;
    assert_eq!(
        seen,
        [
            "init",
            "list 1",
            "done",
            "error failed to start watching object: ServiceError: storage is (re)initializing",
            "init",
            "list 1",
            "done",
        ]
    );
    assert_eq!(opens, 2, "the failed watch was opened anew");
    // A list's failure is the watcher's to retry: it lists again by itself.
    let list_failed = vec![Err(watcher::Error::InitialListFailed(
        kube::Error::Service(Box::new(std::io::Error::other("refused"))),
    ))];
    let (_, opens) = through(vec![list_failed, list(1)], 0, 10, 2).await;
    assert_eq!(opens, 1);
}

#[test]
fn watches_that_fail_soon_after_their_list_wait_longer_each_time() {
    assert_eq!(relist_pause(0, false), (1, None), "the first lists at once");
    assert_eq!(relist_pause(1, false), (2, Some(Duration::from_secs(10))));
    assert_eq!(relist_pause(2, false), (3, Some(Duration::from_secs(20))));
    assert_eq!(relist_pause(3, false), (4, Some(Duration::from_secs(40))));
    assert_eq!(relist_pause(4, false), (5, Some(Duration::from_secs(60))));
    assert_eq!(relist_pause(40, false), (41, Some(Duration::from_secs(60))));
    assert_eq!(
        relist_pause(7, true),
        (1, None),
        "a watch that held starts anew"
    );
    assert_eq!(
        relist_pause(u32::MAX, false).1,
        Some(Duration::from_secs(60))
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_refused_after_every_list_is_listed_again_after_the_pause() {
    let refusing = || {
        let mut events = list(1);
        events.push(refused("forbidden"));
        events
    };
    let (open, opens) = opener(vec![refusing(), refusing(), refusing()]);
    let mut events = Box::pin(capped(open, || 0, 10, "services".into()));
    let start = tokio::time::Instant::now();
    // The first failure lists again at once, the second after 10 s.
    for waited in [0, 0, 10] {
        // init, list 1, done, refused.
        for _ in 0..3 {
            assert!(events.next().await.is_some_and(|e| e.is_ok()));
        }
        assert!(events.next().await.is_some_and(|e| e.is_err()));
        assert_eq!(start.elapsed(), Duration::from_secs(waited));
    }
    assert_eq!(
        opens.load(Ordering::SeqCst),
        4,
        "each failed watch opened anew"
    );
}
