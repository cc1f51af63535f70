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

/// How a test's runner is set up; names starting with "fail" fail.
struct Script {
    /// The view's first list (`None`: it has not listed yet).
    listed: Option<&'static [&'static str]>,
    /// The pace's limit: how many run at once.
    limit: u16,
    /// How long each reconcile takes.
    hold: Duration,
    /// What a reconcile asks for, and what the error policy asks for after a failed one.
    action: Action,
    on_error: Action,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            listed: Some(&["a"]),
            limit: 4,
            hold: Duration::from_millis(10),
            action: Action::await_change(),
            on_error: Action::await_change(),
        }
    }
}

fn start(script: Script) -> Started {
    let Script {
        listed,
        limit,
        hold,
        action,
        on_error,
    } = script;
    let (store, mut writer) = reflector::store::<ConfigMap>();
    if let Some(names) = listed {
        list(&mut writer, names);
    }
    let pace = Arc::new(Pace::new(limit));
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

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

#[tokio::test(start_paused = true)]
async fn runs_at_most_concurrency_at_once_and_one_name_once_at_a_time() {
    let run = start(Script {
        listed: Some(&NAMES),
        limit: 2,
        hold: Duration::from_secs(1),
        ..Script::default()
    });
    run.pace.trigger_all(NAMES.map(key));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // "a" handed again while it may be running: it runs once more after, never beside itself.
    run.pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(run.seen.most.load(Ordering::SeqCst), 2);
    assert!(
        run.seen.overlapping.lock().is_empty(),
        "{:?}",
        run.seen.overlapping.lock()
    );
    for name in ["b", "c", "d", "e"] {
        assert_eq!(run.seen.runs_of(name), 1, "{name}");
    }
    assert!((1..=2).contains(&run.seen.runs_of("a")));
    // Everything handed came back to the pace: it hands again.
    run.pace.trigger(key("e"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(run.seen.runs_of("e"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_name_triggered_while_it_runs_runs_again_after() {
    let run = start(Script {
        hold: Duration::from_secs(1),
        ..Script::default()
    });
    run.pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    run.pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(run.seen.runs_of("a"), 2);
    assert!(run.seen.overlapping.lock().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_requeue_runs_again_after_its_delay_unless_a_trigger_ran_it_sooner() {
    let run = start(Script {
        action: Action::requeue(Duration::from_secs(30)),
        ..Script::default()
    });
    run.pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(run.seen.runs_of("a"), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(run.seen.runs_of("a"), 2, "the requeue ran it at 30 s");
    // At ~31 s it asked for 30 s more; a trigger at 40 s runs it then, and its own requeue
    // (70 s) replaces the one set for 61 s.
    tokio::time::sleep(Duration::from_secs(9)).await;
    run.pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(run.seen.runs_of("a"), 3);
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(run.seen.runs_of("a"), 3, "the 61 s timer was stale");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(run.seen.runs_of("a"), 4, "the 70 s one was not");
}

#[tokio::test(start_paused = true)]
async fn a_failed_reconcile_comes_back_after_what_the_error_policy_asks() {
    let run = start(Script {
        listed: Some(&["fail-1"]),
        on_error: Action::requeue(Duration::from_secs(5)),
        ..Script::default()
    });
    run.pace.trigger(key("fail-1"));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(run.seen.runs_of("fail-1"), 3, "at 0, 5 and 10 s");
}

#[tokio::test(start_paused = true)]
async fn a_name_not_in_the_view_is_not_reconciled_and_gives_its_room_back() {
    let run = start(Script {
        limit: 1,
        ..Script::default()
    });
    run.pace.trigger(key("gone"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.pace.trigger(key("a"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*run.seen.runs.lock(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn reconcile_all_triggers_every_name_in_the_view() {
    let mut run = start(Script {
        listed: Some(&["a", "b"]),
        ..Script::default()
    });
    put(&mut run.view, "c");
    run.reconcile_all.unbounded_send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut runs = run.seen.runs.lock().clone();
    runs.sort();
    assert_eq!(runs, ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_running_reconciles_finish_and_starts_no_more() {
    let run = start(Script {
        listed: Some(&["a", "b"]),
        limit: 1,
        hold: Duration::from_secs(3),
        action: Action::requeue(Duration::from_secs(1)),
        ..Script::default()
    });
    run.pace.trigger_all([key("a"), key("b")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), run.task)
        .await
        .expect("ends once the running reconcile is over")
        .unwrap();
    assert_eq!(
        run.seen.runs.lock().len(),
        1,
        "the running one finished, no other started"
    );
}

#[tokio::test(start_paused = true)]
async fn names_handed_before_the_view_has_listed_are_reconciled_once_it_has() {
    let mut run = start(Script {
        listed: None,
        ..Script::default()
    });
    run.pace.trigger_all([key("a"), key("b")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(run.seen.runs.lock().is_empty(), "the view has not listed");
    list(&mut run.view, &["a", "b"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut runs = run.seen.runs.lock().clone();
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
