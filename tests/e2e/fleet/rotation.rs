//! Credential rotation in place (issue #42 point 2): a member's new token takes effect for the
//! next request with no watch dropped and nothing listed again; a changed server re-engages the
//! member as before (what every rotation cost until now: measured here).

use super::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Subject};
use kube::api::{Api, DeleteParams};
use support::tls::{base64, make_pki};

const NS: &str = "rotation";
const SA: &str = "hub-agent";

/// A cluster-admin ServiceAccount token of `member` bound to a Secret of its own (deleting the
/// Secret revokes the token).
pub(super) async fn bound_token(member: &kube::Client, secret: &str) -> String {
    fleetnet_testenv::tokens::bound_token(member, "member", (NS, SA), secret, 3600)
        .await
        .expect("a bound token")
}

pub(super) async fn service_account(member: &kube::Client) {
    fleetnet_testenv::tokens::admin_service_account(member, "member", NS, SA)
        .await
        .expect("service account");
}

use fleetnet_testenv::tokens::with_token;

fn write_member(dir: &Path, member: &str, content: &str) {
    let tmp = dir.join(format!(".{member}.new"));
    std::fs::write(&tmp, content).expect("write");
    std::fs::rename(tmp, dir.join(format!("{member}.yaml"))).expect("swap");
}

/// LISTs and ended WATCHes the member's apiserver counted so far.
/// Once the old credential is gone (revoked, unbound): the member's next write (an export's
/// finalizer) goes through on the new one, nothing was listed again since `before` (LISTs,
/// ended WATCHes), and the member was not engaged again (its `since` is `engaged_since`).
/// Returns its status.
async fn kept_going(
    fleet: &Fleet,
    admin: &kube::Client,
    running: &app::Running,
    before: (f64, f64),
    engaged: &fleetnet_hub::fleet::MemberStatus,
) -> fleetnet_hub::fleet::MemberStatus {
    tokio::time::sleep(Duration::from_secs(2)).await;
    export_and_wait(fleet, "alpha", "shop", "after").await;
    let exported = exports(admin, "shop").get("after").await.expect("export");
    assert!(
        exported.metadata.finalizers.is_some_and(|f| !f.is_empty()),
        "the member's write on the new credential went through"
    );
    let after = lists_and_watches(admin).await;
    let status = running.state.member("alpha").expect("alpha");
    eprintln!(
        "after the rotation: LISTs {}, ended WATCHes {}",
        after.0 - before.0,
        after.1 - before.1
    );
    assert_eq!(after.0 - before.0, 0.0, "nothing listed again");
    assert_eq!(after.1 - before.1, 0.0, "no watch dropped");
    assert_eq!(status.since, engaged.since, "not engaged again: {status:?}");
    status
}

async fn lists_and_watches(member: &kube::Client) -> (f64, f64) {
    let text = apiserver_metrics(member).await;
    (
        sum(&text, "apiserver_request_total", &["verb=\"LIST\""]),
        sum(&text, "apiserver_request_total", &["verb=\"WATCH\""]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_is_used_without_relisting_and_a_new_server_re_engages() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .start()
        .await
        .expect("fleet");
    let admin = fleet.member("alpha").client().await.expect("member client");
    service_account(&admin).await;
    let (first, second) = (
        bound_token(&admin, "token-1").await,
        bound_token(&admin, "token-2").await,
    );
    let original =
        std::fs::read_to_string(fleet.member("alpha").kubeconfig_path()).expect("kubeconfig");
    let dir = member_dir(&fleet, &[]);
    write_member(&dir, "alpha", &with_token(&original, &first));
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    export_and_wait(&fleet, "alpha", "shop", "before").await;
    let engaged = running.state.member("alpha").expect("alpha");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = lists_and_watches(&admin).await;

    // The token rotated: taken in place; then the old one revoked.
    let rotated_at = Instant::now();
    write_member(&dir, "alpha", &with_token(&original, &second));
    eventually("alpha's new kubeconfig taken", || async {
        running
            .state
            .member("alpha")
            .filter(|m| m.kubeconfig_hash != engaged.kubeconfig_hash)
            .map(|_| ())
    })
    .await;
    let taken = rotated_at.elapsed();
    Api::<Secret>::namespaced(admin.clone(), NS)
        .delete("token-1", &DeleteParams::default())
        .await
        .expect("revoke the first token");
    eprintln!("rotation in place: taken after {taken:?}");
    // Its writes (the export's finalizer and status on the member, the hub's side) go on.
    let status = kept_going(&fleet, &admin, &running, before, &engaged).await;
    assert_eq!(status.phase, Phase::Ready);
    let after = lists_and_watches(&admin).await;

    // A new server (the same apiserver by another name; its certificate names `kubernetes`,
    // not `localhost`): engaged again, as before; what each rotation cost until now.
    let changed_at = Instant::now();
    let renamed = with_token(&original, &second).replace(
        "server: https://127.0.0.1:",
        "tls-server-name: kubernetes\n    server: https://localhost:",
    );
    assert_ne!(
        renamed,
        with_token(&original, &second),
        "server named by IP"
    );
    write_member(&dir, "alpha", &renamed);
    eventually("alpha engaged again", || async {
        running
            .state
            .member("alpha")
            .filter(|m| m.since != status.since && m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    let ready = changed_at.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let re_engaged = lists_and_watches(&admin).await;
    eprintln!(
        "re-engagement: ready after {ready:?}; LISTs {}, ended WATCHes {}",
        re_engaged.0 - after.0,
        re_engaged.1 - after.1
    );
    assert!(re_engaged.0 > after.0, "a re-engagement lists again");
    export_and_wait(&fleet, "alpha", "shop", "renamed").await;
    running.shutdown().await;
}

/// A client certificate (X.509 v3: rustls refuses the v1 certificates `x509 -req` makes without
/// extensions) for user `user` signed by the CA `make_pki` left in `dir`: (PEM, key).
fn client_pair(dir: &Path, user: &str) -> (Vec<u8>, Vec<u8>) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}");
    };
    let (key, csr, pem) = (
        format!("{user}.key"),
        format!("{user}.csr"),
        format!("{user}.pem"),
    );
    let subject = format!("/CN={user}");
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("write ext");
    openssl(&[
        "req", "-subj", &subject, "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr,
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "client.ext",
        "-out",
        &pem,
    ]);
    let read = |f: &str| std::fs::read(dir.join(f)).expect("read PEM");
    (read(&pem), read(&key))
}

/// `user` bound to cluster-admin.
async fn admin_binding(member: &kube::Client, user: &str) {
    let subject = Subject {
        kind: "User".into(),
        name: user.into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        ..Default::default()
    };
    fleetnet_testenv::tokens::bind_cluster_admin(member, "member", user, subject)
        .await
        .expect("binding");
}

/// `kubeconfig` with its user's token replaced by the client certificate `pair`.
fn with_pair(kubeconfig: &str, (cert, key): &(Vec<u8>, Vec<u8>)) -> String {
    let (cert, key) = (base64(cert), base64(key));
    kubeconfig
        .lines()
        .map(|l| match l.split_once("token:") {
            Some((indent, _)) => {
                format!("{indent}client-certificate-data: {cert}\n{indent}client-key-data: {key}")
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_is_presented_by_new_connections_without_relisting() {
    let pki = tempfile::tempdir().expect("tempdir");
    make_pki(pki.path());
    let (first, second) = (
        client_pair(pki.path(), "agent-1"),
        client_pair(pki.path(), "agent-2"),
    );
    let client_ca = format!("--client-ca-file={}", pki.path().join("ca.pem").display());
    let fleet = Fleet::builder()
        .members(["alpha"])
        .apiserver_args("alpha", [client_ca])
        .start()
        .await
        .expect("fleet");
    let admin = fleet.member("alpha").client().await.expect("member client");
    admin_binding(&admin, "agent-1").await;
    admin_binding(&admin, "agent-2").await;
    let original =
        std::fs::read_to_string(fleet.member("alpha").kubeconfig_path()).expect("kubeconfig");
    let dir = member_dir(&fleet, &[]);
    write_member(&dir, "alpha", &with_pair(&original, &first));
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    export_and_wait(&fleet, "alpha", "shop", "before").await;
    let engaged = running.state.member("alpha").expect("alpha");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = lists_and_watches(&admin).await;

    write_member(&dir, "alpha", &with_pair(&original, &second));
    eventually("alpha's new kubeconfig taken", || async {
        running
            .state
            .member("alpha")
            .filter(|m| m.kubeconfig_hash != engaged.kubeconfig_hash)
            .map(|_| ())
    })
    .await;
    // The old identity loses its rights: the member's next writes go as agent-2 (a new
    // connection), its watches on the old connection go on.
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete("agent-1", &DeleteParams::default())
        .await
        .expect("unbind agent-1");
    kept_going(&fleet, &admin, &running, before, &engaged).await;
    running.shutdown().await;
}
