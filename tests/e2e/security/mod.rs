//! A member kubeconfig, a flag or an endpoint can never silently widen trust, on real
//! apiservers: refused kubeconfigs (exec, tokenFile, insecure TLS, plain http off loopback,
//! proxy-url, a field the vetting does not know, a symlink out of the directory, two files for
//! one member, an oversized file, a FIFO) never reach their server, name the field and the
//! file, and leave the other members alone; the opt-in for insecure TLS is shown per member; every write carries fleetnet-hub's
//! field manager; no secret reaches a log line, an error, `/members`, `/metrics` or `check`.

use crate::support;
use crate::support::tls::base64;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetnet_hub::app::{self, AppConfig, Extensions};
use fleetnet_hub::fleet::{Phase, TrustPolicy};
use fleetnet_testenv::Fleet;
use support::*;

const SECRETS: [&str; 7] = [
    "SECRET-EXEC-TOKEN-7f3a",
    "SECRET-FILE-CONTENT-91bc",
    "SECRET-INSECURE-TOKEN-5d2e",
    "SECRET-YAML-TOKEN-0c4f",
    "SECRET-WRONG-TOKEN-8e1d",
    "SECRET-AZURE-CLIENT-SECRET-3b9a",
    "SECRET-PLAIN-HTTP-TOKEN-6a1f",
];

/// No `(surface, text)` of `emitted` holds any of `secrets`.
fn none_leaked(emitted: &[(&str, &str)], secrets: &[&str]) {
    for (surface, text) in emitted {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret} leaked into {surface}");
        }
    }
}

/// A TCP listener standing in as a refused member's server: counts connections, answers none.
async fn decoy() -> (SocketAddr, Arc<AtomicUsize>) {
    decoy_on(std::net::Ipv4Addr::LOCALHOST.into()).await
}

/// [`decoy`] on `ip`.
async fn decoy_on(ip: std::net::IpAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (addr, count)
}

/// An address of this machine that is not loopback: the source address of its default route
/// (a UDP connect sends nothing). Without one, 0.0.0.0, which Linux connects locally.
fn non_loopback_ip() -> std::net::IpAddr {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("203.0.113.1:9").and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into())
}

/// What a test starts from: the captured logs, a fleet with one real member, a decoy server
/// that must see no connection, and a scratch directory.
struct Scene {
    logs: LogCapture,
    fleet: Fleet,
    decoy: SocketAddr,
    connections: Arc<AtomicUsize>,
    scratch: tempfile::TempDir,
}

async fn scene(member: &str) -> Scene {
    let logs = capture_logs();
    let fleet = Fleet::builder()
        .members([member])
        .start()
        .await
        .expect("fleet starts");
    let (decoy, connections) = decoy().await;
    let scratch = tempfile::tempdir().expect("tempdir");
    Scene {
        logs,
        fleet,
        decoy,
        connections,
        scratch,
    }
}

fn kubeconfig(server: &str, cluster_extra: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    server: {server}\n{cluster_extra}users:\n- name: u\n  user:\n{user}"
    )
}

fn config(fleet: &Fleet, dir: &Path, trust: TrustPolicy) -> AppConfig {
    let mut config = app_config(fleet, dir);
    config.runtime.member_sync_timeout = Duration::from_secs(60);
    config.runtime.rescan_interval = Duration::from_secs(1);
    config.runtime.instance = "security-test".into();
    config.runtime.trust = trust;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_kubeconfigs_never_connect_and_no_secret_is_emitted() {
    let Scene {
        logs,
        fleet,
        decoy: decoy_addr,
        connections,
        scratch,
    } = scene("good").await;
    let decoy_url = format!("https://{decoy_addr}");
    // Plain http to this machine's own non-loopback address: reachable, so only the vetting
    // keeps the token off the wire.
    let (plain_addr, plain_connections) = decoy_on(non_loopback_ip()).await;
    let dir = scratch.path().join("kubeconfigs");
    std::fs::create_dir(&dir).expect("mkdir");
    let marker = scratch.path().join("exec-ran");
    let secret_file = scratch.path().join("hub-token");
    std::fs::write(&secret_file, SECRETS[1]).expect("write");
    let good = std::fs::read_to_string(fleet.member("good").kubeconfig_path()).expect("read");
    std::fs::write(dir.join("good.yaml"), &good).expect("write");
    std::fs::write(
        dir.join("exec.yaml"),
        kubeconfig(
            &decoy_url,
            "",
            &format!(
                "    token: {}\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\n",
                SECRETS[0],
                marker.display()
            ),
        ),
    )
    .expect("write");
    std::fs::write(
        dir.join("tokenfile.yaml"),
        kubeconfig(
            &decoy_url,
            "",
            &format!("    tokenFile: {}\n", secret_file.display()),
        ),
    )
    .expect("write");
    std::fs::write(
        dir.join("insecure.yaml"),
        kubeconfig(
            &decoy_url,
            "    insecure-skip-tls-verify: true\n",
            &format!("    token: {}\n", SECRETS[2]),
        ),
    )
    .expect("write");
    let outside = scratch.path().join("outside.yaml");
    std::fs::write(&outside, kubeconfig(&decoy_url, "", "    token: x\n")).expect("write");
    std::os::unix::fs::symlink(&outside, dir.join("escape.yaml")).expect("symlink");
    std::fs::write(
        dir.join("twice.yaml"),
        kubeconfig(&decoy_url, "", "    token: a\n"),
    )
    .expect("write");
    std::fs::write(
        dir.join("twice.yml"),
        kubeconfig(&decoy_url, "", "    token: b\n"),
    )
    .expect("write");
    std::fs::write(
        dir.join("badyaml.yaml"),
        format!("apiVersion: v1\nusers: \"{}\"\n", SECRETS[3]),
    )
    .expect("write");
    let wrong_token: String = good
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                format!("    token: {}", SECRETS[4])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("wrongtoken.yaml"), wrong_token).expect("write");
    std::fs::write(
        dir.join("plainhttp.yaml"),
        kubeconfig(
            &format!("http://{plain_addr}"),
            "",
            &format!("    token: {}\n", SECRETS[6]),
        ),
    )
    .expect("write");
    std::fs::write(
        dir.join("proxy.yaml"),
        kubeconfig(
            &decoy_url,
            &format!("    proxy-url: http://{decoy_addr}\n"),
            "    token: p\n",
        ),
    )
    .expect("write");
    std::fs::write(
        dir.join("unknown.yaml"),
        kubeconfig(
            &decoy_url,
            "",
            "    token: u\n    tokenCommand: /bin/cat /var/run/secrets/token\n",
        ),
    )
    .expect("write");
    // Valid, with a comment that takes it over the size cap.
    let padding = format!("# {}\n", "x".repeat(1024 * 1024));
    std::fs::write(
        dir.join("oversized.yaml"),
        kubeconfig(&decoy_url, "", "    token: o\n") + "\n" + &padding,
    )
    .expect("write");
    let mkfifo = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(mkfifo.success(), "mkfifo");

    let running = app::start(
        config(&fleet, &dir, TrustPolicy::default()),
        Extensions::default(),
    )
    .await
    .expect("starts");
    wait_phase(&running, "good", Phase::Ready).await;
    let refused = [
        ("exec", "users[u].exec"),
        ("tokenfile", "users[u].tokenFile"),
        ("insecure", "clusters[k].insecure-skip-tls-verify"),
        ("escape", "outside the kubeconfig directory"),
        ("twice", "both declare member"),
        ("plainhttp", "clusters[k].server (plain http"),
        ("proxy", "clusters[k].proxy-url (proxies are not supported"),
        ("unknown", "users[u].tokenCommand (not a kubeconfig field"),
        ("oversized", "bytes, over the 1048576-byte limit"),
        ("fifo", "is a FIFO, not a regular file"),
    ];
    for (member, why) in refused {
        wait_phase(&running, member, Phase::Failing).await;
        let status = running.state.member(member).expect("tracked");
        assert!(status.refused, "{member} marked refused");
        let error = status.last_error.unwrap_or_default();
        // The field (or what is wrong with the file) and the file, never a value.
        assert!(error.contains(why), "{member}: {error}");
        assert!(
            error.contains(&format!("{member}.yaml")),
            "{member}: {error}"
        );
        assert!(
            !error.contains("/bin/cat") && !error.contains("http-proxy"),
            "{member}: {error}"
        );
    }
    wait_phase(&running, "badyaml", Phase::Failing).await;
    wait_phase(&running, "wrongtoken", Phase::Failing).await;

    // The good member is unaffected: it exports.
    let client = fleet.member("good").client().await.expect("client");
    let hub = fleet.hub().client().await.expect("hub");
    namespace(&client, "shop").await;
    create_service(&client, &service("shop", "cart", 80)).await;
    create_export(&client, "shop", "cart", &[]).await;
    let ise = wait_ise(&hub, &fleet.hub_namespace("good"), "shop-cart", |_| true).await;
    // Every write carries fleetnet-hub's field manager: the hub records it.
    let managers: Vec<String> = ise
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.manager.clone())
        .collect();
    assert_eq!(managers, vec!["fleetnet-hub".to_string()], "ISE managers");
    // Surfaces that show the refusal.
    let members = http_get(running.health_address, "/members").await.1;
    let metrics = http_get(running.metrics_address, "/metrics").await.1;
    for (member, _) in refused {
        assert!(
            metrics.contains(&format!(
                "fleetnet_member_kubeconfig_refused{{member=\"{member}\"}} 1"
            )),
            "{member} in\n{metrics}"
        );
    }
    assert!(metrics.contains("fleetnet_member_kubeconfig_refused{member=\"good\"} 0"));
    let mut check_rows = String::new();
    for member in [
        "exec",
        "tokenfile",
        "insecure",
        "wrongtoken",
        "plainhttp",
        "proxy",
        "unknown",
    ] {
        let file = dir.join(format!("{member}.yaml"));
        let text = std::fs::read_to_string(&file).expect("read");
        let row =
            fleetnet_hub::check::check_member(member, &file, &text, TrustPolicy::default()).await;
        assert!(!row.ok, "{member}: {row:?}");
        if let Some((_, why)) = refused.iter().find(|(m, _)| *m == member) {
            assert!(
                row.problem.contains(why) && row.problem.contains(&format!("{member}.yaml")),
                "{member}: {row:?}"
            );
        }
        check_rows.push_str(&format!("{row:?}\n"));
    }
    assert!(check_rows.contains("kubeconfig refused"), "{check_rows}");

    // Give every refused member a few rescans: still nothing reaches the decoy.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "a refused member's server was contacted"
    );
    assert_eq!(
        plain_connections.load(Ordering::SeqCst),
        0,
        "the plain-http member's server was contacted"
    );
    assert!(!marker.exists(), "the exec plugin ran");

    // Azure settings with a secret and a refused endpoint: the error and Debug stay clean.
    let azure = fleetnet_hub::azure::AzureConfig {
        credential: fleetnet_hub::azure::CredentialKind::ClientSecret,
        tenant_id: Some("t".into()),
        client_id: Some("c".into()),
        client_secret: Some(SECRETS[5].into()),
        arm_endpoint: "http://management.example.com".into(),
        ..Default::default()
    };
    let azure_error = azure.validate().expect_err("http off loopback").to_string();
    assert!(azure_error.contains("must be https"), "{azure_error}");
    let azure_debug = format!("{azure:?}");

    running.shutdown().await;
    let logs = logs.text();
    assert!(
        logs.contains("kubeconfig refused"),
        "the refusals are logged"
    );
    let emitted = [
        ("logs", logs.as_str()),
        ("/members", members.as_str()),
        ("/metrics", metrics.as_str()),
        ("check", check_rows.as_str()),
        ("azure error", azure_error.as_str()),
        ("azure Debug", azure_debug.as_str()),
    ];
    none_leaked(&emitted, &SECRETS);
    println!(
        "security: {} refused members, 0 decoy connections (plain http to {plain_addr}), {} bytes of logs grepped for {} secrets",
        refused.len(),
        logs.len(),
        SECRETS.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_tls_only_with_the_opt_in_and_then_flagged() {
    let _logs = capture_logs();
    let fleet = Fleet::builder()
        .members(["lax"])
        .start()
        .await
        .expect("fleet starts");
    let scratch = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read_to_string(fleet.member("lax").kubeconfig_path()).expect("read");
    // The real member, its CA dropped and verification off.
    let lax: String = good
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("certificate-authority-data:") {
                "    insecure-skip-tls-verify: true".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(scratch.path().join("lax.yaml"), &lax).expect("write");
    let trust = TrustPolicy {
        allow_insecure_tls: true,
        ..Default::default()
    };
    let running = app::start(config(&fleet, scratch.path(), trust), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "lax", Phase::Ready).await;
    let status = running.state.member("lax").expect("tracked");
    assert!(status.tls_verify_disabled && !status.refused);
    let members = http_get(running.health_address, "/members").await.1;
    assert!(
        members.contains("\"tls_verify_disabled\":true"),
        "{members}"
    );
    let metrics = http_get(running.metrics_address, "/metrics").await.1;
    assert!(
        metrics.contains("fleetnet_member_tls_verify_disabled{member=\"lax\"} 1"),
        "{metrics}"
    );
    let file = scratch.path().join("lax.yaml");
    let row = fleetnet_hub::check::check_member("lax", &file, &lax, trust).await;
    assert!(
        row.ok && row.problem.contains("TLS verification DISABLED"),
        "{row:?}"
    );
    let row = fleetnet_hub::check::check_member("lax", &file, &lax, TrustPolicy::default()).await;
    assert!(
        !row.ok && row.problem.contains("insecure-skip-tls-verify"),
        "{row:?}"
    );
    running.shutdown().await;
}

/// What a failing exec plugin is given and says: none of it may be emitted.
const PLUGIN_SECRETS: [&str; 4] = [
    "SECRET-PLUGIN-ENV-4c7e",
    "SECRET-PLUGIN-ARG-9d2b",
    "SECRET-PLUGIN-STDOUT-1f8a",
    "SECRET-PLUGIN-STDERR-6e3c",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_exec_plugin_is_named_without_its_command_env_or_output() {
    let Scene {
        logs,
        fleet,
        decoy: decoy_addr,
        connections,
        scratch,
    } = scene("unused").await;
    let [env, arg, stdout, stderr] = PLUGIN_SECRETS;
    let plugin = kubeconfig(
        &format!("https://{decoy_addr}"),
        "",
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"echo {stdout} $PLUGIN_KEY; echo {stderr} >&2; exit 3\", \"{arg}\"]\n      env:\n      - name: PLUGIN_KEY\n        value: {env}\n"
        ),
    );
    let file = scratch.path().join("plugin.yaml");
    std::fs::write(&file, &plugin).expect("write");
    let trust = TrustPolicy {
        allow_exec: true,
        ..Default::default()
    };
    let running = app::start(config(&fleet, scratch.path(), trust), Extensions::default())
        .await
        .expect("starts");
    let redacted = "exec plugin sh failed (exit status 3)";
    eventually("the plugin's failure on the member", || async {
        let status = running.state.member("plugin")?;
        status
            .last_error
            .filter(|e| e.contains(redacted))
            .map(|_| assert!(!status.refused, "allowed by the opt-in"))
    })
    .await;
    let members = http_get(running.health_address, "/members").await.1;
    assert!(members.contains(redacted), "{members}");
    let row = fleetnet_hub::check::check_member("plugin", &file, &plugin, trust).await;
    assert!(!row.ok && row.problem.contains(redacted), "{row:?}");
    let check_row = format!("{row:?}");
    running.shutdown().await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no token, no request"
    );
    let logs = logs.text();
    assert!(logs.contains(redacted), "the failure is logged");
    let emitted = [
        ("logs", logs.as_str()),
        ("/members", members.as_str()),
        ("check", check_row.as_str()),
    ];
    none_leaked(&emitted, &PLUGIN_SECRETS);
    println!(
        "security: exec plugin failure shown as {redacted:?}; {} bytes of logs grepped for {} plugin secrets",
        logs.len(),
        PLUGIN_SECRETS.len()
    );
}

/// One refused or unusable kubeconfig shape: the member (and file) name, the file's bytes,
/// the secrets it holds (each must appear in no output), and what its error must say.
struct Shape {
    member: &'static str,
    file: Vec<u8>,
    secrets: Vec<String>,
    says: &'static str,
}

/// Every way a member kubeconfig can be wrong that we know of, each with its own secret,
/// against `server` (a decoy that must see no connection).
fn refused_shapes(server: &str, decoy: SocketAddr) -> Vec<Shape> {
    let secret = |case: &str| format!("SECRET-{case}-{:x}", 0x5eed_u32 + case.len() as u32);
    let shape = |member, user: String, secrets: Vec<String>, says| Shape {
        member,
        file: kubeconfig(server, "", &user).into_bytes(),
        secrets,
        says,
    };
    let typo = secret("TYPO");
    let quote = secret("QUOTE");
    let (dup1, dup2) = (secret("DUP-FIRST"), secret("DUP-SECOND"));
    let indent = secret("INDENT");
    let tab = secret("TAB");
    let flow = secret("FLOW");
    let unknown = secret("UNKNOWN-FIELD");
    let (arg, env) = (secret("EXEC-ARG"), secret("EXEC-ENV"));
    let key_b64 = secret("KEY-BASE64");
    let pem = secret("PEM-BODY");
    let pem_key =
        format!("-----BEGIN RSA PRIVATE KEY-----\n{pem}\n-----END RSA PRIVATE KEY-----\n");
    let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let (query, fragment, userinfo, proxy) = (
        secret("QUERY"),
        secret("FRAGMENT"),
        secret("USERINFO"),
        secret("PROXY"),
    );
    let context = secret("CONTEXT");
    let wrong_type = secret("WRONG-TYPE");
    let (non_utf8, huge) = (secret("NON-UTF8"), secret("HUGE"));
    let mut non_utf8_file = kubeconfig(server, "", &format!("    token: {non_utf8}")).into_bytes();
    non_utf8_file.extend_from_slice(b"\xff\xfe\n");
    let mut huge_file = kubeconfig(server, "", &format!("    token: {huge}\n")).into_bytes();
    huge_file.extend_from_slice(format!("# {}\n", "x".repeat(1024 * 1024)).as_bytes());
    let at_server = |member, url: String, s: String, says| Shape {
        member,
        file: kubeconfig(&url, "", "    token: t\n").into_bytes(),
        secrets: vec![s],
        says,
    };
    vec![
        shape(
            "typo",
            format!("    token {typo}\n    username: u\n"),
            vec![typo.clone()],
            "YAML syntax error",
        ),
        shape(
            "quote",
            format!("    token: \"{quote}\n"),
            vec![quote.clone()],
            "YAML syntax error",
        ),
        shape(
            "dupkey",
            format!("    token: {dup1}\n    token: {dup2}\n"),
            vec![dup1.clone(), dup2.clone()],
            "users[#0].user.token: a key appears twice",
        ),
        shape(
            "indent",
            format!("      token: {indent}\n    username: u\n"),
            vec![indent.clone()],
            "YAML syntax error",
        ),
        shape(
            "tabs",
            format!("\ttoken: {tab}\n"),
            vec![tab.clone()],
            "YAML syntax error",
        ),
        shape(
            "flow",
            format!("    token: {{{flow}\n"),
            vec![flow.clone()],
            "never closed",
        ),
        shape(
            "unknown",
            format!("    token: t\n    tokenSecret: {unknown}\n"),
            vec![unknown.clone()],
            "users[u].tokenSecret (not a kubeconfig field",
        ),
        shape(
            "execargs",
            format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/true\n      args: [\"--token\", \"{arg}\"]\n      env:\n      - name: TOKEN\n        value: {env}\n"
            ),
            vec![arg.clone(), env.clone()],
            "users[u].exec (runs a program",
        ),
        shape(
            "keybase64",
            format!(
                "    client-certificate-data: {}\n    client-key-data: {key_b64}$$$\n",
                base64(cert.as_bytes())
            ),
            vec![key_b64.clone()],
            "unusable kubeconfig",
        ),
        shape(
            "brokenpem",
            format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                base64(cert.as_bytes()),
                base64(pem_key.as_bytes())
            ),
            vec![pem.clone(), base64(pem_key.as_bytes())],
            "unusable kubeconfig",
        ),
        at_server(
            "query",
            format!("{server}/?token={query}"),
            query.clone(),
            "clusters[k].server (a query string",
        ),
        at_server(
            "fragment",
            format!("{server}/#{fragment}"),
            fragment.clone(),
            "clusters[k].server (a fragment",
        ),
        at_server(
            "userinfo",
            server.replace("https://", &format!("https://admin:{userinfo}@")),
            userinfo.clone(),
            "credentials in the URL",
        ),
        Shape {
            member: "proxycreds",
            file: kubeconfig(
                server,
                &format!("    proxy-url: http://user:{proxy}@{decoy}\n"),
                "    token: t\n",
            )
            .into_bytes(),
            secrets: vec![proxy.clone()],
            says: "clusters[k].proxy-url (proxies are not supported",
        },
        Shape {
            member: "context",
            file: kubeconfig(server, "", "    token: t\n")
                .replace("current-context: c", &format!("current-context: {context}"))
                .into_bytes(),
            secrets: vec![context.clone()],
            says: "unusable kubeconfig",
        },
        Shape {
            member: "wrongtype",
            file: kubeconfig(
                server,
                &format!("    disable-compression: {wrong_type}\n"),
                "    token: t\n",
            )
            .into_bytes(),
            secrets: vec![wrong_type.clone()],
            says: "at clusters[#0].cluster.disable-compression: a value of the wrong type",
        },
        Shape {
            member: "nonutf8",
            file: non_utf8_file,
            secrets: vec![non_utf8.clone()],
            says: "is not UTF-8 text",
        },
        Shape {
            member: "huge",
            file: huge_file,
            secrets: vec![huge.clone()],
            says: "over the 1048576-byte limit",
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_of_any_refused_kubeconfig_shape_reaches_any_output() {
    let Scene {
        logs,
        fleet,
        decoy: decoy_addr,
        connections,
        scratch,
    } = scene("good").await;
    let dir = scratch.path().join("kubeconfigs");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(
        fleet.member("good").kubeconfig_path(),
        dir.join("good.yaml"),
    )
    .expect("copy");
    // One member declared by three files: refused once, naming all three, however often the
    // directory is scanned.
    for file in ["dup.yaml", "dup.yml", "dup.json"] {
        std::fs::write(
            dir.join(file),
            kubeconfig(&format!("https://{decoy_addr}"), "", "    token: d\n"),
        )
        .expect("write");
    }
    let shapes = refused_shapes(&format!("https://{decoy_addr}"), decoy_addr);
    let mut secrets: Vec<String> = Vec::new();
    for shape in &shapes {
        std::fs::write(dir.join(format!("{}.yaml", shape.member)), &shape.file).expect("write");
        for s in &shape.secrets {
            assert!(!secrets.contains(s), "distinct secrets: {s}");
            secrets.push(s.clone());
        }
    }

    let running = app::start(
        config(&fleet, &dir, TrustPolicy::default()),
        Extensions::default(),
    )
    .await
    .expect("starts");
    wait_phase(&running, "good", Phase::Ready).await;
    let mut errors = String::new();
    for shape in &shapes {
        wait_phase(&running, shape.member, Phase::Failing).await;
        let status = running.state.member(shape.member).expect("tracked");
        let error = status.last_error.unwrap_or_default();
        assert!(
            error.contains(shape.says) && error.contains(&format!("{}.yaml", shape.member)),
            "{}: {error}",
            shape.member
        );
        errors.push_str(&format!("{}: {error}\n", shape.member));
    }
    // Several rescans (one a second) and member retries.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let members = http_get(running.health_address, "/members").await.1;
    let metrics = http_get(running.metrics_address, "/metrics").await.1;
    let rows = fleetnet_hub::check::check_dir(&dir, TrustPolicy::default())
        .await
        .expect("check runs");
    for shape in &shapes {
        let row = rows
            .iter()
            .find(|r| r.member == shape.member)
            .expect("checked");
        assert!(
            !row.ok && row.problem.contains(shape.says),
            "{}: {row:?}",
            shape.member
        );
    }
    let dup = running.state.member("dup").expect("tracked");
    let error = dup.last_error.unwrap_or_default();
    assert!(
        dup.refused
            && ["dup.yaml", "dup.yml", "dup.json"]
                .iter()
                .all(|f| error.contains(f))
            && error.contains("all declare member"),
        "{error}"
    );
    let check_text = fleetnet_hub::check::table(&rows);
    let check_json = fleetnet_hub::check::json(&rows);
    // The binary itself, with its own log format, at debug: stdout and stderr.
    let mut binary = String::new();
    for output in ["text", "json"] {
        let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .args(["check", "--output", output, "--kubeconfig-dir"])
            .arg(&dir)
            .env("RUST_LOG", "debug")
            .output()
            .await
            .expect("check runs");
        assert!(!run.status.success(), "check fails: members are unusable");
        let stdout = String::from_utf8_lossy(&run.stdout);
        if output == "json" {
            let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
            assert_eq!(report["unusable"], shapes.len() + 1, "{report}");
        }
        binary.push_str(&stdout);
        binary.push_str(&String::from_utf8_lossy(&run.stderr));
    }
    running.shutdown().await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "a refused member's server was contacted"
    );
    let logs = logs.text();
    let engaged = logs
        .lines()
        .filter(|l| l.contains("member not started") && l.contains("declare member \"dup\""))
        .count();
    assert_eq!(
        engaged, 1,
        "the refused member is engaged once, not at every scan"
    );
    let emitted = [
        ("logs", logs.as_str()),
        ("/members", members.as_str()),
        ("/metrics", metrics.as_str()),
        ("check", check_text.as_str()),
        ("check --output json", check_json.as_str()),
        (
            "fleetnet-hub check (text and json, stdout and stderr)",
            binary.as_str(),
        ),
        ("member errors", errors.as_str()),
    ];
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    none_leaked(&emitted, &secrets);
    println!(
        "security: {} refused kubeconfig shapes, {} secrets, none in {} bytes of logs, /members, /metrics, check (text and JSON) or the member errors:\n{errors}",
        shapes.len(),
        secrets.len(),
        logs.len()
    );
}
