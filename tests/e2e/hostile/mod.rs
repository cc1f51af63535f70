//! A member is not trusted: the real binary with real members and hostile ones
//! (`support/hostile.rs`). Each hostile member costs only itself: it shows `failing` on
//! `/members` with a reason that names what it exceeded and quotes nothing it sent, the real
//! member's exports still reach the hub, the process's peak RSS stays far below the chart's
//! 512 MiB limit, nothing panics and the process stays live. The environment's proxy (with
//! credentials) is set for every run: members connect directly and its credentials appear
//! nowhere.

use crate::support;
use crate::support::hostile;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetnet_testenv::Fleet;
use hostile::{HostileMember, Mode};
use support::*;

/// The environment's proxy: for Azure and OTLP only. Nothing listens on port 1, so a member
/// connection through it would fail.
const ENV_PROXY: &str = "http://proxyuser:proxy-secret-4711@127.0.0.1:1";
/// The hostile members' bearer token.
const TOKEN: &str = "hostile-token-secret-0815";
/// Peak RSS the process must stay under, whatever a member sends (the chart's limit is 512 MiB).
const RSS_LIMIT_KIB: u64 = 300 << 10;
/// How long a hostile member may take to show failing (the trickle needs its 30 s deadline).
const FAILS_WITHIN: Duration = Duration::from_secs(150);

/// A `fleetnet-hub run` child; killed when dropped.
struct Hub {
    child: tokio::process::Child,
    health: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Hub {
    fn spawn(fleet: &Fleet, dir: &Path) -> Self {
        Self::spawn_with(fleet, dir, "fleetnet-hub-hostile.log", &[])
    }

    /// A run with `extra` flags, logging into `log` (a file of the fleet's scratch directory).
    fn spawn_with(fleet: &Fleet, dir: &Path, log: &str, extra: &[&str]) -> Self {
        let port = || std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (health, metrics) = (port(), port());
        let log = fleet.scratch_dir().join(log);
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let args = [
            "run".to_string(),
            "--hub-kubeconfig".into(),
            fleet.hub().kubeconfig_path().display().to_string(),
            "--kubeconfig-dir".into(),
            dir.display().to_string(),
            "--metrics-bind-address".into(),
            metrics.to_string(),
            "--health-probe-bind-address".into(),
            health.to_string(),
            "--kube-api-qps".into(),
            "200".into(),
            "--kube-api-burst".into(),
            "400".into(),
        ];
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .args(args)
            .args(extra)
            .env("RUST_LOG", "info")
            .env("POD_NAME", "hostile-test")
            .env("HTTPS_PROXY", ENV_PROXY)
            .env("https_proxy", ENV_PROXY)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fleetnet-hub");
        Self {
            child,
            health,
            metrics,
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn assert_live(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "fleetnet-hub exited with {status}; log:\n{}",
                self.log_tail()
            );
        }
    }

    /// `/members` as JSON (`Null` when it does not answer).
    async fn members(&self) -> serde_json::Value {
        let get = tokio::time::timeout(Duration::from_secs(5), http_get(self.health, "/members"));
        match get.await {
            Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
            _ => serde_json::Value::Null,
        }
    }

    /// Peak RSS (VmHWM) so far, KiB.
    fn peak_rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    /// Waits until `member` shows `failing` with a last error containing `reason`; returns it.
    async fn wait_failing(&mut self, member: &str, reason: &str) -> String {
        let deadline = Instant::now() + FAILS_WITHIN;
        loop {
            self.assert_live();
            let members = self.members().await;
            let m = &members["members"][member];
            let error = m["last_error"].as_str().unwrap_or_default().to_string();
            if m["phase"] == "failing" && error.contains(reason) {
                return error;
            }
            assert!(
                Instant::now() < deadline,
                "{member} not failing with {reason:?} within {FAILS_WITHIN:?}: {m}\nlog:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A kubeconfig directory with the fleet's `real` members and the `hostile` ones.
fn member_dir(fleet: &Fleet, real: &[&str], hostile: &[(&str, &HostileMember)]) -> PathBuf {
    let dir = fleet.scratch_dir().join("kubeconfigs-hostile");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for m in real {
        let to = dir.join(format!("{m}.yaml"));
        std::fs::copy(fleet.member(m).kubeconfig_path(), to).expect("copy kubeconfig");
    }
    for (name, member) in hostile {
        let to = dir.join(format!("{name}.yaml"));
        std::fs::write(to, member.kubeconfig(name, TOKEN)).expect("write kubeconfig");
    }
    dir
}

/// Creates `ns/name` Service + ServiceExport in `member` and waits for its ISE in the hub.
async fn export_and_wait(fleet: &Fleet, hub: &kube::Client, member: &str, ns: &str, name: &str) {
    let client = fleet.member(member).client().await.expect("member client");
    namespace(&client, ns).await;
    create_service(&client, &service(ns, name, 80)).await;
    create_export(&client, ns, name, &[]).await;
    let ise = format!("{ns}-{name}");
    within(Duration::from_secs(90), &format!("ISE {ise}"), || async {
        ises(hub, &fleet.hub_namespace(member))
            .get_opt(&ise)
            .await
            .ok()
            .flatten()
            .filter(|i| i.spec.service_reference.cluster_id == member)
    })
    .await;
}

/// What must never be in any output: the proxy's and the members' credentials, and what the
/// hostile members sent (their filler and padding).
fn assert_nothing_leaked(what: &str, text: &str) {
    for secret in [
        "proxy-secret-4711",
        "proxyuser",
        TOKEN,
        "aaaaaaaaaaaaaaaa",
        "pppppppppppppppp",
    ] {
        assert!(
            !text.contains(secret),
            "{what} contains {secret:?}:\n{text}"
        );
    }
}

fn assert_no_panic(hub: &Hub) {
    let log = hub.log_text();
    assert!(
        !log.contains("panicked"),
        "a panic in the log:\n{}",
        hub.log_tail()
    );
}

/// Six ways one answer can be too much, each its own member beside a real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_members_fail_alone_with_a_redacted_reason_and_memory_stays_bounded() {
    let (fleet, hub_client) = quiet_fleet(["alpha"]).await;
    let huge = HostileMember::start(Mode::Huge(600 << 20)).await;
    let endless = HostileMember::start(Mode::Endless).await;
    let trickle = HostileMember::start(Mode::Trickle).await;
    let malformed = HostileMember::start(Mode::Malformed).await;
    let throttling = HostileMember::start(Mode::RetryAfter("18446744073709551615")).await;
    let flood = HostileMember::start(Mode::HugeEvent(64 << 20)).await;
    let dir = member_dir(
        &fleet,
        &["alpha"],
        &[
            ("huge", &huge),
            ("endless", &endless),
            ("trickle", &trickle),
            ("malformed", &malformed),
            ("throttling", &throttling),
            ("flood", &flood),
        ],
    );
    let mut hub = Hub::spawn(&fleet, &dir);
    let started = Instant::now();

    // The real member connects directly (the environment's proxy would fail it) and exports.
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "web").await;

    let expected = [
        ("huge", "member huge: LIST services response over 16 MiB"),
        (
            "endless",
            "member endless: LIST services response over 16 MiB",
        ),
        ("malformed", "Error deserializing response"),
        ("throttling", "TooManyRequests"),
        ("flood", "member flood: WATCH services event over 4 MiB"),
        (
            "trickle",
            "member trickle: LIST services response not complete within 30s",
        ),
    ];
    for (member, reason) in expected {
        let error = hub.wait_failing(member, reason).await;
        assert_nothing_leaked(&format!("{member}'s reason"), &error);
        println!("[hostile] {member}: {error}");
    }

    // Still exporting after all of that.
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "api").await;
    let members = hub.members().await;
    assert_eq!(members["members"]["alpha"]["phase"], "ready", "{members}");
    assert_nothing_leaked("/members", &members.to_string());

    let peak = hub.peak_rss_kib();
    let (lists, largest, total) = (
        huge.requests_to("GET /api/v1/services?"),
        huge.largest.load(std::sync::atomic::Ordering::Relaxed),
        huge.sent.load(std::sync::atomic::Ordering::Relaxed),
    );
    println!(
        "[hostile] peak RSS {} MiB; huge: {lists} LISTs, {} MiB sent, {} MiB in the largest",
        peak >> 10,
        total >> 20,
        largest >> 20
    );
    assert!(peak < RSS_LIMIT_KIB, "peak RSS {peak} KiB");
    // Each answer read no further than the cap (plus what was in flight), and the failed LIST
    // tried again.
    assert!(
        largest < 64 << 20,
        "read {largest} bytes of one 600 MiB answer"
    );
    assert!(lists >= 2, "the failed LIST is tried again");
    // With backoff, and a penalty after every read over the cap: 10 s doubling, not the watch
    // backoff's 2 s (nor the shortest wait after every Init, as kube's reset did).
    let secs = started.elapsed().as_secs_f64();
    println!("[hostile] huge: {lists} LISTs in {secs:.0} s");
    assert!(
        (lists as f64) <= secs / 10.0 + 1.0,
        "{lists} LISTs in {secs:.0} s"
    );
    hub.assert_live();
    assert_no_panic(&hub);
    assert_nothing_leaked("the log", &hub.log_text());
}

/// 100,000 objects in one answer fail their member; in pages they fail it at the view's cap
/// (50,000) instead of filling memory; names with control characters break nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_objects_and_forged_names_cost_only_their_member() {
    let (fleet, hub_client) = quiet_fleet(["alpha"]).await;
    let unpaged = HostileMember::start(Mode::Objects {
        count: 100_000,
        paged: false,
    })
    .await;
    let paged = HostileMember::start(Mode::Objects {
        count: 100_000,
        paged: true,
    })
    .await;
    let forged = HostileMember::start(Mode::ControlNames).await;
    let dir = member_dir(
        &fleet,
        &["alpha"],
        &[
            ("unpaged", &unpaged),
            ("paged", &paged),
            ("forged", &forged),
        ],
    );
    let mut hub = Hub::spawn(&fleet, &dir);
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "web").await;

    let error = hub
        .wait_failing(
            "unpaged",
            "member unpaged: LIST services response over 16 MiB",
        )
        .await;
    assert_nothing_leaked("unpaged's reason", &error);
    // kube's watcher asks pages of 500: the paged member's LISTs all pass the cap.
    within(
        Duration::from_secs(120),
        "paged listed in pages",
        || async { (paged.requests_to("GET /api/v1/services?") >= 200).then_some(()) },
    )
    .await;
    assert!(
        paged
            .requests
            .lock()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/services?") && r.contains("limit=500")),
        "LISTs are paged"
    );
    // 100,000 in pages are more than one view holds: the member fails, its view cut at the cap
    // (the list is counted as it arrives, and listed again after the backoff).
    let error = hub
        .wait_failing("paged", "services: 50000 or more objects")
        .await;
    assert_nothing_leaked("paged's reason", &error);

    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "api").await;
    let peak = hub.peak_rss_kib();
    println!("[hostile] peak RSS {} MiB", peak >> 10);
    assert!(peak < RSS_LIMIT_KIB, "peak RSS {peak} KiB");
    hub.assert_live();
    assert_no_panic(&hub);
    assert_nothing_leaked("the log", &hub.log_text());

    // `check` with the same environment: the real member is reachable directly, and no
    // output names the proxy's credentials, a token or what the members sent.
    let text = check_output(&dir, &[]).await;
    let alpha_status = text
        .lines()
        .find(|l| l.starts_with("alpha "))
        .and_then(|l| l.split('|').nth(2))
        .map(str::trim);
    assert_eq!(alpha_status, Some("ok"), "alpha usable directly:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert_nothing_leaked("check", &text);

    // The forged name reached the log (escaped, inside its own line), and began no line.
    let log = hub.log_text();
    let forged_lines = log
        .lines()
        .filter(|l| l.starts_with("level=ERROR forged"))
        .count();
    println!("[hostile] log lines forged by a member's object name: {forged_lines}");
    assert_eq!(forged_lines, 0, "a member's object name began a log line");
    assert!(
        log.contains(r"\nlevel=ERROR forged"),
        "the forged name is logged, escaped (else this test proves nothing)"
    );
    assert!(
        !log.contains('\u{1b}') && !log.contains('\r') && !log.contains('\u{7}'),
        "no raw control character from a member's name in the log"
    );
}

/// A member kubeconfig's own proxy: the proxy's password (in its `proxy-url`).
const PROXY_PASSWORD: &str = "proxy-pass-9931";
/// `Proxy-Authorization` for `user:proxy-pass-9931` (Basic, RFC 7617).
const PROXY_BASIC: &str = "Basic dXNlcjpwcm94eS1wYXNzLTk5MzE=";

/// `(request line, Proxy-Authorization)` of every request head a [`ConnectProxy`] read.
type Heads = std::sync::Arc<parking_lot::Mutex<Vec<(String, Option<String>)>>>;

/// A tiny HTTP CONNECT proxy: it records every connection and every request head (its first
/// line and its `Proxy-Authorization`), answers a CONNECT with 200 and then copies bytes both
/// ways. Stops when dropped.
struct ConnectProxy {
    addr: SocketAddr,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    heads: Heads,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectProxy {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let heads = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), heads.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(Self::serve(stream, seen.clone()));
            }
        });
        Self {
            addr,
            connections,
            heads,
            task,
        }
    }

    async fn serve(mut client: tokio::net::TcpStream, heads: Heads) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = Vec::new();
        let end = loop {
            let mut chunk = [0u8; 1024];
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if buf.len() > 16 << 10 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let mut lines = head.split("\r\n");
        let first = lines.next().unwrap_or_default().to_string();
        let auth = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("proxy-authorization")
                .then(|| value.trim().to_string())
        });
        heads.lock().push((first.clone(), auth));
        let target = match first.strip_prefix("CONNECT ") {
            Some(rest) => rest.split(' ').next().unwrap_or_default().to_string(),
            None => {
                let _ = client
                    .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                    .await;
                return;
            }
        };
        let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
            return;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
            || upstream.write_all(&buf[end..]).await.is_err()
        {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The URL a kubeconfig names it by, with the credentials.
    fn url(&self) -> String {
        format!("http://user:{PROXY_PASSWORD}@{}", self.addr)
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `member`'s kubeconfig with `proxy-url: proxy` in its cluster, in a directory of its own
/// (`dir_name`, under the fleet's scratch directory); and the member's server as `host:port`.
fn proxied_member_dir(
    fleet: &Fleet,
    member: &str,
    dir_name: &str,
    proxy: &str,
) -> (PathBuf, String) {
    let dir = fleet.scratch_dir().join(dir_name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let text = std::fs::read_to_string(fleet.member(member).kubeconfig_path()).expect("kubeconfig");
    let mut server = None;
    let mut with_proxy = String::new();
    for line in text.lines() {
        with_proxy.push_str(line);
        with_proxy.push('\n');
        if let Some(url) = line.trim_start().strip_prefix("server:") {
            let indent = &line[..line.len() - line.trim_start().len()];
            with_proxy.push_str(&format!("{indent}proxy-url: {proxy}\n"));
            let url = url.trim().trim_matches('"');
            server = url
                .strip_prefix("https://")
                .map(|hp| hp.trim_end_matches('/').to_string());
        }
    }
    let server = server.expect("an https server in the member's kubeconfig");
    std::fs::write(dir.join(format!("{member}.yaml")), with_proxy).expect("write kubeconfig");
    (dir, server)
}

/// Runs `fleetnet-hub check` on `dir` with `extra` flags (the environment's proxy set);
/// returns stdout and stderr together.
async fn check_output(dir: &Path, extra: &[&str]) -> String {
    let check = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(["check", "--kubeconfig-dir"])
        .arg(dir)
        .args(extra)
        .env("HTTPS_PROXY", ENV_PROXY)
        .env("https_proxy", ENV_PROXY)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .kill_on_drop(true)
        .output();
    let check = tokio::time::timeout(Duration::from_secs(120), check)
        .await
        .expect("check ends")
        .expect("check runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    )
}

/// A member whose kubeconfig names its own http:// proxy (with credentials) connects through
/// it only when the operator allows it (`--allow-member-proxy`): its TLS goes through the
/// proxy's CONNECT tunnel, its export reaches the hub, and the proxy's password is in no
/// output. Without the opt-in it is refused and the proxy sees no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_proxy_is_used_only_when_allowed_and_its_password_never_shown() {
    let (fleet, hub_client) = quiet_fleet(["alpha"]).await;
    let assert_no_password = |what: &str, text: &str| {
        assert!(
            !text.contains(PROXY_PASSWORD),
            "{what} contains the proxy's password:\n{text}"
        );
        assert_nothing_leaked(what, text);
    };

    // Allowed: the member's connection goes through the proxy's tunnel.
    let proxy = ConnectProxy::start().await;
    let (dir, server) = proxied_member_dir(&fleet, "alpha", "kubeconfigs-proxy", &proxy.url());
    let mut hub = Hub::spawn_with(
        &fleet,
        &dir,
        "fleetnet-hub-proxy.log",
        &["--allow-member-proxy"],
    );
    export_and_wait(&fleet, &hub_client, "alpha", "ns1", "web").await;
    let heads = proxy.heads.lock().clone();
    println!(
        "[proxy] {} connections, heads: {heads:?}",
        proxy.connections()
    );
    assert!(
        !heads.is_empty(),
        "the member's connection went through the proxy"
    );
    for (line, auth) in &heads {
        assert_eq!(line, &format!("CONNECT {server} HTTP/1.1"), "{heads:?}");
        assert_eq!(auth.as_deref(), Some(PROXY_BASIC), "{heads:?}");
    }
    let members = hub.members().await;
    let alpha = &members["members"]["alpha"];
    assert_eq!(alpha["phase"], "ready", "{members}");
    assert_eq!(
        alpha["proxy"],
        format!("http://{}", proxy.addr).as_str(),
        "{members}"
    );
    assert_no_password("/members", &members.to_string());
    let metrics = http_get(hub.metrics, "/metrics").await.1;
    assert!(
        metrics.contains("fleetnet_member_proxied{member=\"alpha\"} 1"),
        "{metrics}"
    );
    assert_no_password("/metrics", &metrics);
    hub.assert_live();
    assert_no_panic(&hub);
    let log = hub.log_text();
    assert!(
        log.contains("--allow-member-proxy"),
        "the opt-in is logged at start"
    );
    assert!(
        log.contains(&format!("proxy=http://{}", proxy.addr)),
        "the member's proxy is logged, without its credentials:\n{}",
        hub.log_tail()
    );
    assert_no_password("the log", &log);
    drop(hub);

    // `check`, with and without the opt-in (its summary of a usable member is in the JSON).
    let before = proxy.connections();
    let text = check_output(&dir, &["--allow-member-proxy", "--output", "json"]).await;
    assert!(
        text.contains(&format!("via proxy http://{}", proxy.addr)) && text.contains("\"ok\":true"),
        "{text}"
    );
    assert!(proxy.connections() > before, "check went through the proxy");
    assert_no_password("check --output json", &text);
    let text = check_output(&dir, &["--allow-member-proxy"]).await;
    assert!(text.contains("| ok "), "{text}");
    assert_no_password("check", &text);
    let before = proxy.connections();
    for output in ["text", "json"] {
        let text = check_output(&dir, &["--output", output]).await;
        assert!(
            text.contains("proxy-url (proxies are not supported")
                && text.contains("--allow-member-proxy"),
            "{text}"
        );
        assert_no_password("check without the opt-in", &text);
    }
    assert_eq!(
        proxy.connections(),
        before,
        "refused by check: no connection"
    );

    // Not allowed: refused, and the proxy never hears from it.
    let unused = ConnectProxy::start().await;
    let (dir, _) = proxied_member_dir(&fleet, "alpha", "kubeconfigs-proxy-refused", &unused.url());
    let mut hub = Hub::spawn_with(&fleet, &dir, "fleetnet-hub-proxy-refused.log", &[]);
    let alpha = within(Duration::from_secs(90), "alpha refused", || async {
        // Not before the server listens (`members` expects it to).
        tokio::net::TcpStream::connect(hub.health).await.ok()?;
        let members = hub.members().await;
        let alpha = members["members"]["alpha"].clone();
        (alpha["refused"] == true).then_some(alpha)
    })
    .await;
    hub.assert_live();
    assert_eq!(alpha["phase"], "failing", "{alpha}");
    let error = alpha["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("clusters[") && error.contains("proxy-url (proxies are not supported"),
        "{error}"
    );
    assert_no_password("the refusal", &alpha.to_string());
    // Give a wrongly started connection time to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        unused.connections(),
        0,
        "a refused member's proxy is never contacted"
    );
    let metrics = http_get(hub.metrics, "/metrics").await.1;
    assert!(
        metrics.contains("fleetnet_member_proxied{member=\"alpha\"} 0"),
        "{metrics}"
    );
    assert_no_panic(&hub);
    assert_no_password("the log", &hub.log_text());
}
