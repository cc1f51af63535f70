//! Every refused kubeconfig shape we know of, each with its own secret: none reaches a log line,
//! an error, `/members`, `/metrics` or `check`.

use super::*;

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
