//! The health and metrics servers under clients that try to hold them (#40 item 5), in process
//! over loopback: a slow-loris client is cut at the header deadline, a probe queued behind a
//! full listener is answered once the holders are cut, a client that does not read its answer
//! is cut at the request deadline, an idle keep-alive connection is closed, and `/members` is
//! answered to loopback peers only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetnet_hub::fleet::FleetState;
use fleetnet_hub::http::{self, HttpOptions, MEMBERS_LOOPBACK_ONLY, RenderMetrics, ServerLimits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Cancels the servers when a test ends, passed or not.
struct Servers(CancellationToken);

impl Drop for Servers {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

async fn health(options: HttpOptions) -> (SocketAddr, Servers) {
    let stop = CancellationToken::new();
    let state = Arc::new(FleetState::default());
    let addr = http::serve_health("127.0.0.1:0", state, options, stop.clone())
        .await
        .expect("bind the health server");
    (addr, Servers(stop))
}

/// Reads until the peer closes (EOF or reset) or `within` passes; returns what was read and
/// whether the connection was closed.
async fn read_until_closed<R: AsyncRead + Unpin>(
    stream: &mut R,
    within: Duration,
) -> (Vec<u8>, bool) {
    let mut got = vec![];
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (got, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// One `Connection: close` GET; the status code and the body.
async fn get<S>(stream: &mut S, path: &str) -> (u16, String)
where
    S: AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.1\r\nHost: fleetnet\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let (raw, closed) = read_until_closed(stream, Duration::from_secs(10)).await;
    assert!(closed, "the server closes a Connection: close exchange");
    parse(&raw)
}

fn parse(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP/1.1 answer: {text:?}"));
    (code, body.to_string())
}

#[tokio::test]
async fn a_client_dripping_its_headers_a_byte_a_second_is_cut_at_the_header_deadline() {
    let limits = ServerLimits::default();
    let (addr, _servers) = health(HttpOptions::default()).await;
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut rx, mut tx) = stream.into_split();
    let request = b"GET /healthz HTTP/1.1\r\nHost: fleetnet\r\nUser-Agent: slow-loris\r\n\r\n";
    let started = Instant::now();
    let drip = tokio::spawn(async move {
        let mut sent = 0;
        for byte in request {
            if tx.write_all(&[*byte]).await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        sent
    });
    let (answer, closed) = read_until_closed(&mut rx, Duration::from_secs(30)).await;
    let cut_after = started.elapsed();
    drip.abort();
    assert!(closed, "the slow client's connection is closed");
    assert!(
        cut_after < limits.header_read_timeout + Duration::from_secs(3),
        "cut after {cut_after:?}, header deadline {:?}",
        limits.header_read_timeout
    );
    assert!(
        !String::from_utf8_lossy(&answer).contains(" 200 ")
            && !String::from_utf8_lossy(&answer).contains(" 503 "),
        "the dripped request was never served: {:?}",
        String::from_utf8_lossy(&answer)
    );
    println!(
        "slow-loris: cut after {:.1} s (header deadline {:?}), {} of {} bytes sent",
        cut_after.as_secs_f64(),
        limits.header_read_timeout,
        (cut_after.as_secs() + 1).min(request.len() as u64),
        request.len()
    );
}

#[tokio::test]
async fn a_probe_queued_behind_a_full_listener_is_answered_once_the_holders_are_cut() {
    // The shipped cap, with a shorter header deadline to keep the test short.
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(2),
        ..ServerLimits::default()
    };
    let cap = limits.max_connections;
    assert_eq!(cap, 64, "the default cap");
    let (addr, _servers) = health(HttpOptions {
        limits: limits.clone(),
        ..HttpOptions::default()
    })
    .await;
    // `cap` holders that connect and never send a byte.
    let mut holders = vec![];
    for _ in 0..cap {
        holders.push(TcpStream::connect(addr).await.expect("connect a holder"));
    }
    let held_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The kubelet's probe, one past the cap: connected by the kernel, not served yet.
    let mut probe = TcpStream::connect(addr).await.expect("connect the probe");
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: fleetnet\r\nConnection: close\r\n\r\n")
        .await
        .expect("send the probe");
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(800), probe.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "the probe must wait while {cap} connections hold every slot: {early:?}"
    );
    let (raw, closed) = read_until_closed(&mut probe, Duration::from_secs(15)).await;
    let answered_after = held_at.elapsed();
    assert!(closed && !raw.is_empty(), "the probe is answered");
    let (code, body) = parse(&raw);
    // A FleetState whose runtime never started: the liveness answer of a dead runtime.
    assert_eq!(
        (code, body.as_str()),
        (503, "fleet runtime not running"),
        "the probe's own answer"
    );
    for (i, mut holder) in holders.into_iter().enumerate() {
        let (_, closed) = read_until_closed(&mut holder, Duration::from_secs(5)).await;
        assert!(closed, "holder {i} was cut");
    }
    println!(
        "cap {cap}: the probe was answered {:.1} s after the holders connected (header deadline {:?})",
        answered_after.as_secs_f64(),
        limits.header_read_timeout
    );
}

#[tokio::test]
async fn a_client_that_does_not_read_its_answer_is_cut_at_the_request_deadline() {
    // Far larger than what the socket buffers absorb, so the write stalls.
    const BODY: usize = 64 << 20;
    let limits = ServerLimits {
        request_timeout: Duration::from_secs(2),
        ..ServerLimits::default()
    };
    let stop = CancellationToken::new();
    let _servers = Servers(stop.clone());
    let render: RenderMetrics = Arc::new(|| "x".repeat(BODY));
    let addr = http::serve_metrics_with("127.0.0.1:0", render, limits.clone(), stop)
        .await
        .expect("bind the metrics server");
    // A small receive buffer (no autotuning), so the answer cannot fit in the kernel's buffers
    // whatever the host's tcp_rmem says.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(64 * 1024)
        .expect("receive buffer");
    let mut client = socket.connect(addr).await.expect("connect");
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: fleetnet\r\n\r\n")
        .await
        .expect("send");
    // Not reading for twice the request deadline.
    tokio::time::sleep(limits.request_timeout * 2).await;
    let (raw, closed) = read_until_closed(&mut client, Duration::from_secs(20)).await;
    assert!(closed, "the connection was closed");
    assert!(
        raw.len() < BODY,
        "the answer was cut short: {} of {BODY} bytes",
        raw.len()
    );
    assert!(raw.starts_with(b"HTTP/1.1 200"), "it had started answering");
    println!(
        "request deadline {:?}: {} of {BODY} bytes delivered before the cut",
        limits.request_timeout,
        raw.len()
    );
}

/// Sends one keep-alive GET /healthz and reads exactly its answer (the server's answer has a
/// Content-Length).
async fn keep_alive_exchange(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: fleetnet\r\n\r\n")
        .await
        .expect("send");
    let mut raw = vec![];
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed before answering");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if body.len() >= length {
                assert!(
                    !head.to_ascii_lowercase().contains("connection: close"),
                    "{head}"
                );
                return;
            }
        }
    }
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_deadline() {
    // The header deadline far away: only the idle deadline can close it.
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(1),
        ..ServerLimits::default()
    };
    let (addr, _servers) = health(HttpOptions {
        limits,
        ..HttpOptions::default()
    })
    .await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    keep_alive_exchange(&mut stream).await;
    let idle_from = Instant::now();
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(20)).await;
    assert!(closed, "the idle connection was closed");
    println!(
        "idle deadline 1 s (header deadline 60 s): closed {:.1} s after the last answer",
        idle_from.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn between_keep_alive_requests_the_header_deadline_runs_too() {
    // The idle deadline far away: the wait for the next request's head is under the header one.
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(600),
        ..ServerLimits::default()
    };
    let (addr, _servers) = health(HttpOptions {
        limits,
        ..HttpOptions::default()
    })
    .await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    keep_alive_exchange(&mut stream).await;
    // Still usable before the deadline.
    keep_alive_exchange(&mut stream).await;
    let idle_from = Instant::now();
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(20)).await;
    assert!(
        closed,
        "the idle connection was closed by the header deadline"
    );
    println!(
        "header deadline 1 s (idle deadline 600 s): keep-alive connection closed {:.1} s after the last answer",
        idle_from.elapsed().as_secs_f64()
    );
}

/// Serves one in-memory connection as if it came from `peer` (no packet leaves the process).
async fn exchange_as(peer: &str, allow_remote: bool, path: &str) -> (u16, String) {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let app = http::health_router(Arc::new(FleetState::default()), allow_remote);
    let peer: SocketAddr = peer.parse().expect("peer address");
    let stop = CancellationToken::new();
    let _servers = Servers(stop.clone());
    let limits = ServerLimits::default();
    let served = tokio::spawn(async move {
        http::serve_connection(server, peer, app, &limits, stop).await;
    });
    let answer = get(&mut client, path).await;
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), served).await;
    answer
}

#[tokio::test]
async fn members_is_answered_to_loopback_peers_only_unless_allowed() {
    // Over real loopback TCP, through the accept loop.
    let (addr, servers) = health(HttpOptions::default()).await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let (code, body) = get(&mut stream, "/members").await;
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(json.get("members").is_some(), "{json}");

    // An IPv6 loopback peer, where the host has one.
    if let Ok(v6) = tokio::net::TcpListener::bind("[::1]:0").await {
        drop(v6);
        let stop = CancellationToken::new();
        let _v6_servers = Servers(stop.clone());
        let addr = http::serve_health(
            "[::1]:0",
            Arc::new(FleetState::default()),
            HttpOptions::default(),
            stop,
        )
        .await
        .expect("bind [::1]");
        let mut stream = TcpStream::connect(addr).await.expect("connect [::1]");
        assert_eq!(get(&mut stream, "/members").await.0, 200, "::1 is loopback");
    }

    // A peer off the pod: refused with where to read it from instead; the probes still answer.
    let (code, body) = exchange_as("10.244.1.7:51234", false, "/members").await;
    assert_eq!((code, body.as_str()), (403, MEMBERS_LOOPBACK_ONLY));
    assert!(body.contains("kubectl -n <namespace> port-forward pod/<pod> 8081"));
    let (code, _) = exchange_as("[2001:db8::7]:51234", false, "/members").await;
    assert_eq!(code, 403, "an IPv6 peer off the pod");
    let (code, _) = exchange_as("[::ffff:10.244.1.7]:51234", false, "/members").await;
    assert_eq!(code, 403, "an IPv4-mapped peer off the pod");
    let (code, body) = exchange_as("10.244.1.7:51234", false, "/healthz").await;
    assert_eq!((code, body.as_str()), (503, "fleet runtime not running"));
    let (code, _) = exchange_as("10.244.1.7:51234", false, "/readyz").await;
    assert_eq!(code, 503, "/readyz is answered to the kubelet off the pod");
    // The same in-memory path from a loopback peer: served (so the 403 above is the peer's).
    assert_eq!(
        exchange_as("127.0.0.1:51234", false, "/members").await.0,
        200
    );

    // --members-allow-remote: served to anyone.
    let (code, body) = exchange_as("10.244.1.7:51234", true, "/members").await;
    assert_eq!(code, 200, "{body}");

    // Shut down: the listener stops accepting.
    drop(servers);
    let mut refused = false;
    for _ in 0..50 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "the listener is closed after shutdown");
}
