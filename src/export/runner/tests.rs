use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use parking_lot::Mutex;

fn key(name: &str) -> ObjectRef<ConfigMap> {
    ObjectRef::new(name).within("ns")
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// The view's first list: `names`, complete.
fn list(writer: &mut Writer<ConfigMap>, names: &[&str]) {
    writer.apply_watcher_event(&watcher::Event::Init);
    for name in names {
        writer.apply_watcher_event(&watcher::Event::InitApply(config_map(name)));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

fn put(writer: &mut Writer<ConfigMap>, name: &str) {
    writer.apply_watcher_event(&watcher::Event::Apply(config_map(name)));
}

/// What the reconciles saw: how many ran at once at most, and each name's runs.
#[derive(Default)]
struct Seen {
    now: AtomicUsize,
    most: AtomicUsize,
    runs: Mutex<Vec<String>>,
    overlapping: Mutex<Vec<String>>,
    running: Mutex<HashSet<String>>,
}

impl Seen {
    fn runs_of(&self, name: &str) -> usize {
        self.runs.lock().iter().filter(|n| *n == name).count()
    }
}

/// A running runner and what drives it.
struct Started {
    pace: Arc<Pace<ConfigMap>>,
    seen: Arc<Seen>,
    stop: tokio::sync::oneshot::Sender<()>,
    reconcile_all: futures::channel::mpsc::UnboundedSender<()>,
    view: Writer<ConfigMap>,
    task: tokio::task::JoinHandle<()>,
}

/// A runner over a view that listed `names` (`None`: has not listed yet) with `concurrency` (its pace's limit), each reconcile taking `hold` and
/// asking for `action` (or failing when its name starts with "fail", the error policy asking
/// for `on_error`).
fn start(
    names: Option<&[&str]>,
    concurrency: u16,
    hold: Duration,
    action: Action,
    on_error: Action,
) -> Started {
    let (store, mut writer) = reflector::store::<ConfigMap>();
    if let Some(names) = names {
        list(&mut writer, names);
    }
    let pace = Arc::new(Pace::new(concurrency));
    let seen = Arc::new(Seen::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (all_tx, all_rx) = futures::channel::mpsc::unbounded::<()>();
    let runner = Runner {
        pace: pace.clone(),
        store,
        dyntype: (),
        ctx: seen.clone(),
    };
    let keys = pace.clone().stream();
    let task = tokio::spawn(runner.run(
        keys,
        all_rx,
        async move {
            let _ = stopped.await;
        },
        move |cm: Arc<ConfigMap>, seen: Arc<Seen>| async move {
            let name = cm.metadata.name.clone().unwrap_or_default();
            if !seen.running.lock().insert(name.clone()) {
                seen.overlapping.lock().push(name.clone());
            }
            let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(hold).await;
            seen.now.fetch_sub(1, Ordering::SeqCst);
            seen.running.lock().remove(&name);
            seen.runs.lock().push(name.clone());
            if name.starts_with("fail") {
                Err(std::io::Error::other(format!("{name} failed")))
            } else {
                Ok(action)
            }
        },
        move |_cm: Arc<ConfigMap>, _e: &std::io::Error, _seen: Arc<Seen>| on_error,
    ));
    Started {
        pace,
        seen,
        stop,
        reconcile_all: all_tx,
        view: writer,
        task,
    }
}

#[tokio::test(start_paused = true)]
async fn runs_at_most_concurrency_at_once_and_one_name_once_at_a_time() {
    let names = ["a", "b", "c", "d", "e"];
    let Started {
        pace,
        seen,
        stop: _stop,
        ..
    } = start(
        Some(&names),
        2,
        Duration::from_secs(1),
        Action::await_change(),
        Action::await_change(),
    );
    pace.trigger_all(names.map(key));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // "a" handed again while it may be running: it runs once more after, never beside itself.
    pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(seen.most.load(Ordering::SeqCst), 2);
    assert!(
        seen.overlapping.lock().is_empty(),
        "{:?}",
        seen.overlapping.lock()
    );
    for name in ["b", "c", "d", "e"] {
        assert_eq!(seen.runs_of(name), 1, "{name}");
    }
    assert!((1..=2).contains(&seen.runs_of("a")));
    // Everything handed came back to the pace: it hands again.
    pace.trigger(key("e"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(seen.runs_of("e"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_name_triggered_while_it_runs_runs_again_after() {
    let Started {
        pace,
        seen,
        stop: _stop,
        ..
    } = start(
        Some(&["a"]),
        4,
        Duration::from_secs(1),
        Action::await_change(),
        Action::await_change(),
    );
    pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(seen.runs_of("a"), 2);
    assert!(seen.overlapping.lock().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_requeue_runs_again_after_its_delay_unless_a_trigger_ran_it_sooner() {
    let Started {
        pace,
        seen,
        stop: _stop,
        ..
    } = start(
        Some(&["a"]),
        4,
        Duration::from_millis(10),
        Action::requeue(Duration::from_secs(30)),
        Action::await_change(),
    );
    pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(seen.runs_of("a"), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(seen.runs_of("a"), 2, "the requeue ran it at 30 s");
    // At ~31 s it asked for 30 s more; a trigger at 40 s runs it then, and its own requeue
    // (70 s) replaces the one set for 61 s.
    tokio::time::sleep(Duration::from_secs(9)).await;
    pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(seen.runs_of("a"), 3);
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(seen.runs_of("a"), 3, "the 61 s timer was stale");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(seen.runs_of("a"), 4, "the 70 s one was not");
}

#[tokio::test(start_paused = true)]
async fn a_failed_reconcile_comes_back_after_what_the_error_policy_asks() {
    let Started {
        pace,
        seen,
        stop: _stop,
        ..
    } = start(
        Some(&["fail-1"]),
        4,
        Duration::from_millis(10),
        Action::await_change(),
        Action::requeue(Duration::from_secs(5)),
    );
    pace.trigger(key("fail-1"));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(seen.runs_of("fail-1"), 3, "at 0, 5 and 10 s");
}

#[tokio::test(start_paused = true)]
async fn a_name_not_in_the_view_is_not_reconciled_and_gives_its_room_back() {
    let Started {
        pace,
        seen,
        stop: _stop,
        ..
    } = start(
        Some(&["a"]),
        1,
        Duration::from_millis(10),
        Action::await_change(),
        Action::await_change(),
    );
    pace.trigger(key("gone"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*seen.runs.lock(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn reconcile_all_triggers_every_name_in_the_view() {
    let Started {
        seen,
        reconcile_all,
        mut view,
        stop: _stop,
        ..
    } = start(
        Some(&["a", "b"]),
        4,
        Duration::from_millis(10),
        Action::await_change(),
        Action::await_change(),
    );
    put(&mut view, "c");
    reconcile_all.unbounded_send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut runs = seen.runs.lock().clone();
    runs.sort();
    assert_eq!(runs, ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_running_reconciles_finish_and_starts_no_more() {
    let Started {
        pace,
        seen,
        stop,
        task,
        ..
    } = start(
        Some(&["a", "b"]),
        1,
        Duration::from_secs(3),
        Action::requeue(Duration::from_secs(1)),
        Action::await_change(),
    );
    pace.trigger_all([key("a"), key("b")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("ends once the running reconcile is over")
        .unwrap();
    assert_eq!(
        seen.runs.lock().len(),
        1,
        "the running one finished, no other started"
    );
}

#[tokio::test(start_paused = true)]
async fn names_handed_before_the_view_has_listed_are_reconciled_once_it_has() {
    let Started {
        pace,
        seen,
        mut view,
        stop: _stop,
        ..
    } = start(
        None,
        4,
        Duration::from_millis(10),
        Action::await_change(),
        Action::await_change(),
    );
    pace.trigger_all([key("a"), key("b")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(seen.runs.lock().is_empty(), "the view has not listed");
    list(&mut view, &["a", "b"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut runs = seen.runs.lock().clone();
    runs.sort();
    assert_eq!(runs, ["a", "b"]);
}

#[test]
fn the_book_keeps_the_earliest_requeue_and_a_run_supersedes_it() {
    let mut book = Book::<ConfigMap>::default();
    let now = Instant::now();
    let a = key("a");
    assert!(book.start(&a));
    assert!(!book.start(&a), "running already");
    assert!(book.again.contains(&a));
    let at = book
        .finished(&a, Action::requeue(Duration::from_secs(10)), now)
        .expect("a timer");
    assert!(
        book.finished(&a, Action::requeue(Duration::from_secs(20)), now)
            .is_none(),
        "a later requeue adds no timer"
    );
    let sooner = book
        .finished(&a, Action::requeue(Duration::from_secs(5)), now)
        .expect("a sooner one does");
    assert!(!book.due(&a, at), "replaced by the sooner one");
    assert!(book.start(&a));
    assert!(!book.due(&a, sooner), "the run since made it stale");
    assert_eq!(book.finished(&a, Action::await_change(), now), None);
    book.again.clear();
    book.shrink();
    assert_eq!(
        (
            book.busy.capacity(),
            book.again.capacity(),
            book.due.capacity()
        ),
        (0, 0, 0)
    );
}
