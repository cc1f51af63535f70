//! Refused kubeconfigs never connect and leave the other members alone; insecure TLS only with
//! the opt-in, then flagged; a failing exec plugin named without its command, env or output.

use super::*;

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
