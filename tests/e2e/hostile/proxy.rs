//! A member's proxy: used only when the operator allows it, its password never shown.

use super::*;

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
