//! Members from labelled hub Secrets next to the kubeconfig directory (issue #42): a Secret
//! added, changed and removed at runtime (with `--cleanup-on-remove`), a member declared by a
//! file and a Secret refused with both named, a refused kubeconfig shape told without a
//! secret, and `register` / `unregister` round trip through the binary.

use super::*;

use fleetnet_hub::fleet::sources::register::{secret_for, secret_name};
use fleetnet_hub::fleet::sources::secrets::{KUBECONFIG_KEY, MEMBER_LABEL, MEMBER_NAME_LABEL};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};

const NS: &str = "fleetnet-system";

/// A kubeconfig asking for an exec plugin, with values that must never be shown.
const EXEC_KUBECONFIG: &str = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/TOPSECRET-plugin\n      args: [--token, TOPSECRET-arg]\n";

/// The member Secrets of [`NS`], and the app's configuration reading them.
async fn secrets_and_config(fleet: &Fleet, dir: &Path) -> (Api<Secret>, Config) {
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", NS)
        .await
        .expect("ns");
    let config = config_builder(fleet, dir)
        .member_secrets_namespace(Some(NS.into()))
        .build()
        .expect("config");
    (Api::namespaced(hub, NS), config)
}

fn kubeconfig_of(fleet: &Fleet, member: &str) -> String {
    std::fs::read_to_string(fleet.member(member).kubeconfig_path()).expect("kubeconfig")
}

/// A Secret named `name` declaring a member by its own name (no name label).
fn unnamed_secret(name: &str, kubeconfig: &str) -> Secret {
    let mut s = secret_for(name, NS, kubeconfig);
    s.metadata.name = Some(name.into());
    if let Some(labels) = s.metadata.labels.as_mut() {
        labels.remove(MEMBER_NAME_LABEL);
    }
    s
}

fn error_of(running: &Running, member: &str) -> Option<String> {
    running.state.member(member)?.last_error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_secret_is_added_changed_refused_and_removed_at_runtime() {
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &["alpha"]);
    let (secrets, mut config) = secrets_and_config(&fleet, &dir).await;
    config.runtime.cleanup_on_remove = true;
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    let alpha = running.state.member("alpha").expect("alpha");
    assert_eq!(
        alpha.source.as_deref(),
        Some(dir.join("alpha.yaml").display().to_string().as_str()),
        "a file is named by its path, as always"
    );

    // Added: beta engaged from its Secret, its export on the hub.
    let beta_kubeconfig = kubeconfig_of(&fleet, "beta");
    let pp = PostParams::default();
    secrets
        .create(&pp, &secret_for("beta", NS, &beta_kubeconfig))
        .await
        .expect("create");
    wait_phase(&running, "beta", Phase::Ready).await;
    let beta = running.state.member("beta").expect("beta");
    let place = format!("Secret {NS}/{}", secret_name("beta"));
    assert_eq!(beta.source.as_deref(), Some(place.as_str()));
    let members = http_get_body(running.health_address, "/members").await;
    assert!(members.contains(&place), "{members}");
    export_and_wait(&fleet, "beta", "ns1", "web").await;

    // Changed: re-engaged on the new content.
    let mut changed = secret_for("beta", NS, &format!("{beta_kubeconfig}\n# rotated\n"));
    changed.metadata.resource_version = None;
    secrets
        .replace(&secret_name("beta"), &pp, &changed)
        .await
        .expect("replace");
    eventually("beta re-engaged from its changed Secret", || async {
        running
            .state
            .member("beta")
            .filter(|m| m.kubeconfig_hash != beta.kubeconfig_hash && m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    export_and_wait(&fleet, "beta", "ns1", "after-rotation").await;

    // alpha declared by its file and a Secret: refused, both named; served again once the
    // Secret is gone.
    secrets
        .create(
            &pp,
            &unnamed_secret("alpha", &kubeconfig_of(&fleet, "alpha")),
        )
        .await
        .expect("create");
    let e = eventually("alpha refused naming both places", || async {
        error_of(&running, "alpha").filter(|e| e.contains("both declare member"))
    })
    .await;
    assert_eq!(
        e,
        format!(
            "file {} and Secret {NS}/alpha both declare member \"alpha\": remove or rename one",
            dir.join("alpha.yaml").display()
        )
    );
    assert!(running.state.member("alpha").is_some_and(|m| m.refused));
    secrets
        .delete("alpha", &DeleteParams::default())
        .await
        .expect("delete");
    wait_phase(&running, "alpha", Phase::Ready).await;

    // A refused shape (exec plugin): the redacted reason, no secret anywhere shown.
    let mut exec = secret_for("gamma", NS, EXEC_KUBECONFIG);
    exec.metadata.name = Some("gamma-exec".into());
    secrets.create(&pp, &exec).await.expect("create");
    let e = eventually("gamma refused", || async {
        error_of(&running, "gamma").filter(|e| e.contains("exec"))
    })
    .await;
    assert!(e.contains(&format!("Secret {NS}/gamma-exec")), "{e}");
    let members = http_get_body(running.health_address, "/members").await;
    let metrics = http_get_body(running.metrics_address, "/metrics").await;
    for shown in [&e, &members, &metrics] {
        assert!(!shown.contains("TOPSECRET"), "{shown}");
    }

    // Removed: beta stopped and (--cleanup-on-remove) cleaned up as a removed file is.
    secrets
        .delete(&secret_name("beta"), &DeleteParams::default())
        .await
        .expect("delete");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace("beta");
    wait_ise_gone(&hub, &hub_ns, "ns1-web").await;
    wait_ise_gone(&hub, &hub_ns, "ns1-after-rotation").await;
    assert!(running.state.member("beta").is_none(), "beta stopped");
    let beta_client = fleet.member("beta").client().await.expect("beta client");
    eventually("beta's finalizers removed", || {
        let api = exports(&beta_client, "ns1");
        async move {
            let list = api.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|se| se.metadata.finalizers.is_none())
                .then_some(())
        }
    })
    .await;
    assert_eq!(
        running.state.member("alpha").map(|m| m.phase),
        Some(Phase::Ready),
        "alpha untouched"
    );
    running.shutdown().await;
}

/// Runs the binary with `args`: (success, stdout, stderr).
fn cli(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .args(args)
        .env_remove("FLEETNET_HUB_KUBECONFIG")
        .env_remove("FLEETNET_MEMBER_SECRETS_NAMESPACE")
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_engages_a_member_and_unregister_stops_it() {
    let fleet = Fleet::builder()
        .members(["beta"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    let dir = member_dir(&fleet, &[]);
    let (secrets, config) = secrets_and_config(&fleet, &dir).await;
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_ready(&running).await;
    let hub_kubeconfig = fleet.hub().kubeconfig_path().display().to_string();
    let kubeconfig = fleet.member("beta").kubeconfig_path().display().to_string();
    let at = ["--namespace", NS, "--hub-kubeconfig", &hub_kubeconfig];
    let register = |member: &str, file: &str, extra: &[&str]| {
        let mut args = vec!["register", member, "--kubeconfig", file];
        args.extend(at);
        args.extend(extra);
        cli(&args)
    };

    // --dry-run: the Secret without credentials, nothing written.
    let (ok, shown, _) = register("beta", &kubeconfig, &["--dry-run"]);
    assert!(
        ok && shown.contains("<redacted: ") && shown.contains(MEMBER_LABEL),
        "{shown}"
    );
    let text = kubeconfig_of(&fleet, "beta");
    for line in text
        .lines()
        .filter(|l| l.contains("-data:") || l.contains("token:"))
    {
        let value = line.split(':').nth(1).unwrap_or_default().trim();
        assert!(value.len() < 8 || !shown.contains(value), "{shown}");
    }
    assert!(
        secrets
            .get_opt(&secret_name("beta"))
            .await
            .expect("get")
            .is_none()
    );

    // What `run` refuses is refused with the same redacted reason, and nothing written.
    let exec_file = fleet.scratch_dir().join("exec.yaml");
    std::fs::write(&exec_file, EXEC_KUBECONFIG).expect("write");
    let (ok, out, err) = register("gamma", &exec_file.display().to_string(), &[]);
    assert!(!ok && err.contains("exec"), "{err}");
    assert!(
        !err.contains("TOPSECRET") && !out.contains("TOPSECRET"),
        "{out}{err}"
    );

    // register → engaged, exporting; unregister → stopped.
    let (ok, out, err) = register("beta", &kubeconfig, &[]);
    assert!(ok, "{out}{err}");
    let stored = secrets.get(&secret_name("beta")).await.expect("registered");
    assert_eq!(
        stored.data.as_ref().and_then(|d| d.get(KUBECONFIG_KEY)),
        Some(&ByteString(text.clone().into_bytes()))
    );
    wait_phase(&running, "beta", Phase::Ready).await;
    export_and_wait(&fleet, "beta", "ns1", "web").await;
    let mut args = vec!["unregister", "beta"];
    args.extend(at);
    let (ok, out, err) = cli(&args);
    assert!(ok && out.contains("unregistered"), "{out}{err}");
    eventually("beta stopped", || async {
        running.state.member("beta").is_none().then_some(())
    })
    .await;
    let (ok, _, err) = cli(&args);
    assert!(!ok && err.contains("no member Secret"), "{err}");
    running.shutdown().await;
}
