use super::*;
use k8s_openapi::api::core::v1::ConfigMap;

fn cm(ns: &str, name: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some(ns.into());
    c
}

fn same(c: ConfigMap) -> ConfigMap {
    c
}

type Events = mpsc::UnboundedReceiver<watcher::Result<Event<ConfigMap>>>;

/// What a reader heard so far, as `init`, `+ns/name` (listed), `done`, `apply name`,
/// `delete name`, `error: …`.
fn heard(rx: &mut Events) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push(match e {
            Ok(Event::Init) => "init".to_string(),
            Ok(Event::InitApply(o)) => format!("+{}", o.metadata.name.unwrap_or_default()),
            Ok(Event::InitDone) => "done".to_string(),
            Ok(Event::Apply(o)) => format!("apply {}", o.metadata.name.unwrap_or_default()),
            Ok(Event::Delete(o)) => format!("delete {}", o.metadata.name.unwrap_or_default()),
            Err(e) => format!("error: {e}"),
        });
    }
    seen
}

fn names(store: &Store<ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> = store
        .state()
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

fn list(routes: &mut Routes<ConfigMap>, objects: &[ConfigMap]) {
    routes.take(Event::Init, same);
    for o in objects {
        routes.take(Event::InitApply(o.clone()), same);
    }
    routes.take(Event::InitDone, same);
}

#[test]
fn objects_go_to_their_namespace_and_those_of_no_member_are_not_kept() {
    let mut routes = Routes::<ConfigMap>::default();
    assert!(
        !routes.know("fleet-member-a"),
        "not listed yet: the list fills it"
    );
    routes.know("fleet-member-b");
    let (a, mut rx_a, fill) = routes.subscribe("fleet-member-a");
    assert!(!fill);
    list(
        &mut routes,
        &[
            cm("fleet-member-a", "x"),
            cm("fleet-member-b", "y"),
            cm("other", "z"),
        ],
    );
    assert_eq!(names(&a), ["x"]);
    assert_eq!(heard(&mut rx_a), ["init", "+x", "done"]);
    routes.take(Event::Apply(cm("fleet-member-a", "w")), same);
    routes.take(Event::Apply(cm("fleet-member-b", "v")), same);
    routes.take(Event::Apply(cm("other", "u")), same);
    routes.take(Event::Delete(cm("fleet-member-a", "x")), same);
    assert_eq!(names(&a), ["w"]);
    assert_eq!(
        heard(&mut rx_a),
        ["apply w", "delete x"],
        "its own namespace only"
    );
    assert!(
        !routes.namespaces.contains_key("other"),
        "no member's: not kept"
    );
}

#[test]
fn a_reader_that_comes_later_gets_what_is_held_at_once_then_what_follows() {
    let mut routes = Routes::<ConfigMap>::default();
    routes.know("ns");
    list(&mut routes, &[cm("ns", "x"), cm("ns", "y")]);
    // A member taken over: its namespace is held already, nothing is asked of the hub.
    let (store, mut rx, fill) = routes.subscribe("ns");
    assert!(!fill, "held already: no LIST of its own");
    assert_eq!(names(&store), ["x", "y"]);
    let mut first = heard(&mut rx);
    first[1..3].sort();
    assert_eq!(first, ["init", "+x", "+y", "done"]);
    routes.take(Event::Apply(cm("ns", "z")), same);
    assert_eq!(heard(&mut rx), ["apply z"]);
    assert_eq!(names(&store), ["x", "y", "z"]);
}

#[test]
fn a_namespace_learnt_during_a_list_takes_its_objects_from_it_and_one_learnt_after_is_filled() {
    let mut routes = Routes::<ConfigMap>::default();
    routes.take(Event::Init, same);
    routes.take(Event::InitApply(cm("early", "x")), same);
    assert!(!routes.know("early"), "the list under way has it");
    routes.take(Event::InitApply(cm("late", "y")), same);
    routes.take(Event::InitDone, same);
    let (early, _rx, _) = routes.subscribe("early");
    assert_eq!(names(&early), ["x"]);
    // Learnt after the list: its objects were dropped, a LIST of its own fills it.
    let (late, mut rx, fill) = routes.subscribe("late");
    assert!(fill);
    assert!(heard(&mut rx).is_empty(), "not listed: no list yet");
    routes.take(Event::Apply(cm("late", "new")), same);
    routes.take(Event::Delete(cm("late", "gone")), same);
    assert_eq!(heard(&mut rx), ["apply new", "delete gone"]);
    // The fill's answer is older than the events since: it does not bring `gone` back.
    let answer = vec![cm("late", "y"), cm("late", "gone")];
    assert!(!routes.filled("late", Ok(answer)));
    assert_eq!(names(&late), ["new", "y"]);
    let mut listed = heard(&mut rx);
    listed[1..3].sort();
    assert_eq!(listed, ["init", "+new", "+y", "done"]);
    assert!(!routes.filled("late", Ok(vec![])), "filled once");
}

#[test]
fn a_failed_fill_is_told_to_its_readers_and_asked_again() {
    let mut routes = Routes::<ConfigMap>::default();
    list(&mut routes, &[]);
    let (_store, mut rx, fill) = routes.subscribe("late");
    assert!(fill);
    let error = kube::Error::Service("connection refused".into());
    assert!(routes.filled("late", Err(error)), "still needed");
    let told = heard(&mut rx);
    assert_eq!(told.len(), 1);
    assert!(told[0].contains("connection refused"), "{told:?}");
    assert!(
        !routes.filled("gone", Ok(vec![])),
        "a namespace dropped needs none"
    );
}

fn not_found() -> watcher::Error {
    let status = kube::core::Status::failure(
        "the server could not find the requested resource",
        "NotFound",
    )
    .with_code(404);
    watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
}

#[test]
fn a_failure_reaches_every_reader_of_every_namespace_and_a_new_one_until_the_watch_delivers() {
    let mut routes = Routes::<ConfigMap>::default();
    let (_a, mut rx_a, _) = routes.subscribe("a");
    let (_b, mut rx_b, _) = routes.subscribe("b");
    routes.failed(&not_found());
    for rx in [&mut rx_a, &mut rx_b] {
        let told = heard(rx);
        assert_eq!(told.len(), 1);
        assert!(told[0].contains("could not find"), "{told:?}");
    }
    let (_c, mut rx_c, _) = routes.subscribe("c");
    let mut rx_c_errors = Vec::new();
    while let Ok(e) = rx_c.try_recv() {
        rx_c_errors.push(e);
    }
    // Still the API's 404: the reading job says its CRD is not installed.
    assert!(matches!(
        rx_c_errors.as_slice(),
        [Err(watcher::Error::InitialListFailed(kube::Error::Api(s)))] if s.code == 404
    ));
    list(&mut routes, &[]);
    assert_eq!(
        heard(&mut rx_a),
        ["init", "done"],
        "listed again: recovered"
    );
    routes.know("d");
    list(&mut routes, &[]);
    let (_d, mut rx_d, _) = routes.subscribe("d");
    assert_eq!(
        heard(&mut rx_d),
        ["init", "done"],
        "no failure told any more"
    );
}

#[test]
fn a_namespace_a_job_reads_is_kept_when_its_member_leaves_the_registry_until_the_job_ends() {
    let mut routes = Routes::<ConfigMap>::default();
    routes.know("a");
    let (_b, rx_b, _) = routes.subscribe("b");
    routes.keep_only(&HashSet::new());
    assert!(!routes.namespaces.contains_key("a"));
    assert!(routes.namespaces.contains_key("b"), "read still");
    drop(rx_b);
    routes.keep_only(&HashSet::new());
    assert!(!routes.namespaces.contains_key("b"));
}
