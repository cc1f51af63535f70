use super::*;
use k8s_openapi::api::core::v1::ConfigMap;

/// A write that enters the shared hub bucket while its member's hold is valid, and whose
/// hold runs out while it waits for a token, is refused when its turn comes: it never
/// reaches the server (a connection error would say it did).
#[tokio::test]
async fn a_member_write_is_fenced_when_it_leaves_the_shared_bucket_not_when_it_enters() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
    let limits = Limits {
        qps: 1.0,
        burst: 1,
        ..Limits::default()
    };
    let hub = build("hub", config, &limits, Arc::default()).expect("hub client");
    let (hold, rx) = tokio::sync::watch::channel(Hold::Never);
    let view = member_view(&hub, Fence::new(rx));
    let api = kube::Api::<ConfigMap>::namespaced(view, "ns");
    // The one token goes to a write sent while the hold is valid: it reaches the (absent)
    // server and fails there.
    hold.send_replace(Hold::Until(
        tokio::time::Instant::now() + Duration::from_secs(60),
    ));
    let first = api.create(&Default::default(), &ConfigMap::default()).await;
    assert!(!fence::refused(&first.expect_err("no server")), "sent");
    // The next waits about a second for its token; its hold ends before that.
    hold.send_replace(Hold::Until(
        tokio::time::Instant::now() + Duration::from_millis(200),
    ));
    let second = api.create(&Default::default(), &ConfigMap::default()).await;
    assert!(
        fence::refused(&second.expect_err("fenced")),
        "refused, not sent"
    );
}

/// An HTTP/1.1 server answering `{}` to every request, counting the connections it
/// accepted and those still open.
async fn counting_server() -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (accepted, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, o) = (accepted.clone(), open.clone());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            o.fetch_add(1, Ordering::SeqCst);
            let o = o.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut buf).await {
                    // One request per read is enough for these GETs without a body.
                    let _ = n;
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                    if conn.write_all(answer.as_bytes()).await.is_err() {
                        break;
                    }
                }
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (url, accepted, open)
}

type Counter = Arc<std::sync::atomic::AtomicUsize>;

/// A hub client of 8 lanes over a [`counting_server`], with its accepted and open counts.
async fn laned_hub() -> (kube::Client, Counter, Counter) {
    let (url, accepted, open) = counting_server().await;
    let config = kube::Config::new(url.parse().expect("url"));
    let hub = build_over(
        "hub",
        config,
        8,
        &Limits::default(),
        Arc::default(),
        Fence::open(),
    )
    .expect("hub client");
    (hub, accepted, open)
}

/// Waits (10 s at most, else fails with `why`) until `open` connections are `n`.
async fn until_open(open: &Counter, n: usize, why: &str) {
    let reached = async {
        while open.load(std::sync::atomic::Ordering::SeqCst) != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reached)
        .await
        .expect(why);
}

/// Member views fill a lane's connection up to `MEMBERS_PER_LANE` before the next lane
/// opens; the last view of a lane to go closes it.
#[tokio::test]
async fn member_views_fill_one_lane_before_the_next_opens_and_its_last_view_closes_it() {
    use std::sync::atomic::Ordering;
    let (hub, accepted, open) = laned_hub().await;
    let get = |client: &kube::Client| {
        let client = client.clone();
        async move {
            let req = http::Request::get("/version")
                .body(vec![])
                .expect("request");
            client.request_text(req).await.expect("answered")
        }
    };
    let mut first: Vec<kube::Client> = (0..MEMBERS_PER_LANE)
        .map(|_| member_view(&hub, Fence::open()))
        .collect();
    for view in &first {
        get(view).await;
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one lane while it has room"
    );
    let second = member_view(&hub, Fence::open());
    get(&second).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a full lane: the next opens"
    );
    // A view of the full lane goes: the room it leaves is taken before the newer lane's.
    first.pop();
    let refill = member_view(&hub, Fence::open());
    get(&refill).await;
    get(&first[0]).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    drop(second);
    until_open(
        &open,
        1,
        "the second lane's connection closed with its last member view",
    )
    .await;
    get(&member_view(&hub, Fence::open())).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "a full lane again: another opens"
    );
}

#[test]
fn a_lane_is_the_fullest_with_room_else_a_new_one_else_the_least_full() {
    let opened = std::cell::Cell::new(0);
    let open = || {
        opened.set(opened.get() + 1);
        Arc::new(())
    };
    let mut lanes: Vec<std::sync::Weak<()>> = (0..2).map(|_| std::sync::Weak::new()).collect();
    let a1 = lane_for(&mut lanes, 2, open);
    let a2 = lane_for(&mut lanes, 2, open);
    assert!(Arc::ptr_eq(&a1, &a2) && opened.get() == 1);
    let b1 = lane_for(&mut lanes, 2, open);
    assert!(!Arc::ptr_eq(&a1, &b1) && opened.get() == 2);
    // Both places taken, both full: the least full (a tie here) takes one more.
    let b2 = lane_for(&mut lanes, 2, open);
    assert!(Arc::ptr_eq(&b1, &b2));
    let over = lane_for(&mut lanes, 2, open);
    assert_eq!(opened.get(), 2, "no third place: the least full shares");
    assert!(Arc::ptr_eq(&over, &a1), "of a tie, the first");
    // The first lane's views all go: its place is free, and the next view opens a lane there
    // (the second lane is full).
    drop((a1, a2, over));
    let c = lane_for(&mut lanes, 2, open);
    assert_eq!(opened.get(), 3);
    assert!(!Arc::ptr_eq(&c, &b1));
    // A view of the second lane goes: the fullest with room is the second (1 view) or the new
    // one (1 view); either way no lane opens.
    drop(b2);
    let _d = lane_for(&mut lanes, 2, open);
    assert_eq!(opened.get(), 3);
}

/// A member's Events take their tokens from their own bucket: with the member's budget
/// spent, an Event still goes at once, and with the Events' spent, a read still goes.
#[tokio::test]
async fn a_members_events_and_its_requests_spend_separate_budgets() {
    let (url, accepted, _) = counting_server().await;
    let limits = Limits {
        qps: 0.001,
        burst: 1,
        event_qps: 0.001,
        event_burst: 1,
        ..Limits::default()
    };
    let config = kube::Config::new(url.parse().expect("url"));
    let client = member_client_of("m", &config, &limits, Arc::default(), Fence::open(), None)
        .expect("member client");
    let send = |path: &'static str, method: http::Method| {
        let client = client.clone();
        async move {
            let req = http::Request::builder()
                .method(method)
                .uri(path)
                .body(b"{}".to_vec())
                .expect("request");
            tokio::time::timeout(Duration::from_secs(2), client.request_text(req)).await
        }
    };
    let read = "/api/v1/namespaces/ns/configmaps/c";
    let event = "/apis/events.k8s.io/v1/namespaces/ns/events";
    assert!(
        send(read, http::Method::GET).await.is_ok(),
        "the member's one token"
    );
    assert!(
        send(event, http::Method::POST).await.is_ok(),
        "the Events' own token"
    );
    assert!(
        send(event, http::Method::POST).await.is_err(),
        "the Events' budget is spent"
    );
    assert!(
        send(read, http::Method::GET).await.is_err(),
        "so is the member's"
    );
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one connection"
    );
}

fn req(method: http::Method, uri: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .expect("request")
}

#[test]
fn every_request_names_the_product_and_writes_its_field_manager() {
    let r = identify(req(http::Method::GET, "/api/v1/services?watch=true"));
    assert_eq!(r.headers()[http::header::USER_AGENT], USER_AGENT);
    assert!(USER_AGENT.starts_with("fleetnet-hub/"));
    assert_eq!(
        r.uri().query(),
        Some("watch=true"),
        "reads are left as they are"
    );
    let r = identify(req(
        http::Method::PATCH,
        "/apis/g/v1/namespaces/n/serviceexports/s/status",
    ));
    assert_eq!(r.uri().query(), Some("fieldManager=fleetnet-hub"));
    let r = identify(req(
        http::Method::POST,
        "https://h:6443/apis/g/v1/x?dryRun=All",
    ));
    assert_eq!(
        r.uri().query(),
        Some("dryRun=All&fieldManager=fleetnet-hub")
    );
    assert_eq!(r.uri().host(), Some("h"));
    let r = identify(req(http::Method::PATCH, "/x?fieldManager=mine&force=true"));
    assert_eq!(r.uri().query(), Some("fieldManager=mine&force=true"));
}

/// The shared view of the hub sends each request as the member whose namespace it addresses:
/// that member's fence decides its writes; a namespace no member holds (never held, or
/// given back) has every write refused; a member started again keeps its namespace when the
/// earlier view goes.
#[tokio::test]
async fn hub_views_fence_each_namespace_by_its_members_hold_and_refuse_unrouted_writes() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
    let hub = build("hub", config, &Limits::default(), Arc::default()).expect("hub client");
    let views = HubViews::new(&hub);
    let create = |ns: &str| {
        let api = kube::Api::<ConfigMap>::namespaced(views.client(), ns);
        async move {
            let error = api
                .create(&Default::default(), &ConfigMap::default())
                .await
                .expect_err("no server");
            fence::refused(&error)
        }
    };
    let (_lost, never) = tokio::sync::watch::channel(Hold::Never);
    let _a = views.add("fleet-member-a", Fence::new(never));
    let b = views.add("fleet-member-b", Fence::open());
    assert!(create("fleet-member-a").await, "a's hold is not held");
    assert!(!create("fleet-member-b").await, "b's write is sent");
    assert!(create("fleet-member-c").await, "no member holds c");
    drop(b);
    assert!(create("fleet-member-b").await, "b's view went");
    let (_held, always) = tokio::sync::watch::channel(Hold::Always);
    let again = views.add("fleet-member-a", Fence::new(always));
    drop(_a);
    assert!(
        !create("fleet-member-a").await,
        "the newer view of a stays when the older goes"
    );
    drop(again);
    assert!(create("fleet-member-a").await);
}

/// The views' namespaces share a lane's connection, which closes with the last of them.
#[tokio::test]
async fn hub_views_share_a_lane_and_its_connection_closes_with_the_last_view() {
    use std::sync::atomic::Ordering;
    let (hub, accepted, open) = laned_hub().await;
    let views = HubViews::new(&hub);
    let get = |ns: &str| {
        let client = views.client();
        let req = http::Request::get(format!("/api/v1/namespaces/{ns}/configmaps"))
            .body(vec![])
            .expect("request");
        async move { client.request_text(req).await.expect("answered") }
    };
    let a = views.add("fleet-member-a", Fence::open());
    let b = views.add("fleet-member-b", Fence::open());
    get("fleet-member-a").await;
    get("fleet-member-b").await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one lane for both");
    assert_eq!(open.load(Ordering::SeqCst), 1);
    drop(a);
    get("fleet-member-b").await;
    assert_eq!(open.load(Ordering::SeqCst), 1, "b still uses it");
    drop(b);
    until_open(&open, 0, "the lane's connection closed with its last view").await;
}

#[test]
fn a_request_path_names_the_namespace_it_addresses() {
    let cases = [
        ("/api/v1/namespaces/ns/configmaps", Some("ns")),
        (
            "/apis/networking.fleet.azure.com/v1alpha1/namespaces/fleet-member-a/internalserviceexports/x",
            Some("fleet-member-a"),
        ),
        ("/api/v1/namespaces/ns", None),
        ("/api/v1/namespaces//configmaps", None),
        ("/apis/coordination.k8s.io/v1/leases", None),
        ("/version", None),
    ];
    for (path, ns) in cases {
        assert_eq!(namespace_of(path), ns, "{path}");
    }
}

/// Whatever the environment says, a kubeconfig that names no proxy gets none; one that names
/// its own keeps it: a member's connections go through it, the hub's refuse it (never printing
/// it).
#[tokio::test]
async fn a_kubeconfig_without_proxy_url_never_takes_one_from_the_environment() {
    let kubeconfig = |proxy: &str| {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n{proxy}contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t\ncurrent-context: c\n"
        );
        Kubeconfig::from_yaml(&text).expect("a kubeconfig")
    };
    let plain = config_of(Some(kubeconfig(""))).await.expect("config");
    assert_eq!(plain.proxy_url, None);
    let own = "    proxy-url: http://user:pw@proxy.example:3128\n";
    let proxied = config_of(Some(kubeconfig(own))).await.expect("config");
    assert_eq!(
        proxied.proxy_url.map(|u| u.to_string()),
        Some("http://user:pw@proxy.example:3128/".to_string())
    );
    let Err(refused) = connections(&proxied_config("http"), 1, None, Proxy::Never, None) else {
        panic!("the hub's client never goes through a proxy");
    };
    assert!(!refused.to_string().contains("pw"), "{refused}");
    assert!(connections(&proxied_config("http"), 1, None, Proxy::Member, None).is_ok());
    for scheme in ["https", "socks5"] {
        let Err(refused) = connections(&proxied_config(scheme), 1, None, Proxy::Member, None)
        else {
            panic!("{scheme}: only http:// proxies");
        };
        let refused = refused.to_string();
        assert!(refused.contains("only an http:// proxy"), "{refused}");
        assert!(
            !refused.contains("pw") && !refused.contains("proxy.example"),
            "{refused}"
        );
    }
}

fn proxied_config(scheme: &str) -> kube::Config {
    let mut config = kube::Config::new("https://127.0.0.1:6443".parse().expect("url"));
    let url = format!("{scheme}://user:pw@proxy.example:3128");
    config.proxy_url = Some(url.parse().expect("url"));
    config
}

/// Through a whole client stack (buffer, retry, counting), a fenced write fails with an
/// error [`crate::ownership::refused`] recognises, without reaching any server.
#[tokio::test]
async fn a_client_reports_its_fenced_writes_as_refused() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
    let limits = Limits::default();
    let closed =
        crate::ownership::Fence::new(tokio::sync::watch::channel(crate::ownership::Hold::Never).1);
    let stats = std::sync::Arc::default();
    let client = build_over("t", config, 1, &limits, stats, closed);
    let api = kube::Api::<ConfigMap>::namespaced(client.expect("client"), "ns");
    let created = api.create(&Default::default(), &ConfigMap::default()).await;
    assert!(crate::ownership::refused(&created.expect_err("fenced")));
    let other = kube::Error::Service("connection refused".into());
    assert!(!crate::ownership::refused(&other));
}
