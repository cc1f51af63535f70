//! `fleetnet-bench --fleet-size --member-secrets`: issue #42's benchmark. The names are
//! registered as labelled hub Secrets (`fleetnet.azure.com/member-kubeconfig: "true"`), each
//! with a token of its own: a ServiceAccount token of its member apiserver bound to a Secret
//! there (deleting that Secret revokes the token, as an expired or rotated-away token is
//! refused). After the quiet window:
//!
//! - **rotation**: every name's Secret rewritten with its second token at once (64 writes in
//!   flight); measured: the last write, the time until every replica's `/members` shows every
//!   name's new kubeconfig hash, and, with the first tokens revoked [`NEW_TOKEN_WITHIN`] after the
//!   rotation began, a new export on every member apiserver reaching the hub in every name's
//!   namespace with its member-side write (the ServiceExport's finalizer) made: the requests
//!   after the revocation went on the new tokens. From the rotation's start to the probe's end:
//!   LISTs the member apiservers and the hub served (none are due), WATCHes the member
//!   apiservers ended (against what the quiet window's rate predicts: watches end on their
//!   server timeout anyway), names engaged again (`/members` `since`), authentication failures
//!   the member apiservers counted;
//! - **a member added**: a new name's Secret created; → its exports' ISEs on the hub;
//! - **status**: `fleetnet-hub status --output json` against the hub, three times: its wall
//!   time and the members it lists.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fleetnet_bench::{NAMESPACE, ServerCounts, create_pair, scrape_every_resource};
use fleetnet_hub::api::{ServiceExport, ServiceExportVersion};
use fleetnet_hub::fleet::sources::secrets::{KUBECONFIG_KEY, MEMBER_LABEL, MEMBER_NAME_LABEL};
use fleetnet_testenv::Fleet;
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde::Serialize;

use crate::ise_seen::{Seen, wait_present};
use crate::replicas::Replica;

/// The hub namespace of the member Secrets (`--member-secrets-namespace`).
pub const SECRETS_NAMESPACE: &str = "fleetnet-members";
/// Each member apiserver's namespace of the ServiceAccount and its tokens' bound Secrets.
const TOKENS_NAMESPACE: &str = "bench-tokens";
const SERVICE_ACCOUNT: &str = "hub-agent";
/// Issue #42: every request on the new token within 5 s of the rotation.
pub const NEW_TOKEN_WITHIN: Duration = Duration::from_secs(5);
/// Writes in flight while rotating (and setting up).
const IN_FLIGHT: usize = 64;
/// The name added after the rotation.
pub const ADDED: &str = "added-1";
/// The export created after the old tokens are revoked.
const PROBE: &str = "after-rotation";

/// One name's Secret and its two kubeconfigs (first and second token).
pub struct SecretMember {
    pub name: String,
    pub server: usize,
    first: String,
    second: String,
}

/// What the rotation, the added member and `status` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SecretsReport {
    pub rotation: Rotation,
    /// Its Secret created → all its exports' ISEs on the hub.
    pub added_s: Option<f64>,
    /// Its exports on the hub → `status` lists it too (polled).
    pub added_in_status_s: Option<f64>,
    /// `fleetnet-hub status --output json`, each run.
    pub status_s: Vec<f64>,
    /// Members the last `status` listed (names + the added one expected).
    pub status_members: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rotation {
    pub names: usize,
    /// Rotation start → the last Secret written.
    pub written_s: f64,
    /// Rotation start → every name's new kubeconfig hash on its replica's `/members`;
    /// `None` when not within 60 s.
    pub taken_s: Option<f64>,
    /// Rotation start → the first tokens revoked.
    pub revoked_at_s: f64,
    /// Revocation → the probe export in every name's hub namespace and its member-side writes.
    pub probe_s: Option<f64>,
    /// Member apiservers whose probe ServiceExport got its finalizer.
    pub probe_finalized: usize,
    pub member_lists: u64,
    pub hub_lists: u64,
    /// WATCHes the member apiservers ended in the window, and what the quiet window's rate of
    /// ended WATCHes predicts for a window as long.
    pub member_watches_ended: u64,
    pub member_watches_ended_expected: f64,
    /// Names whose `since` changed (engaged again).
    pub re_engaged: usize,
    /// `authentication_attempts` with a result other than success, all member apiservers.
    pub auth_failures: Option<f64>,
    pub window_s: f64,
}

fn say(line: impl AsRef<str>) {
    eprintln!("[member-secrets] {}", line.as_ref());
}

use fleetnet_testenv::tokens::with_token;

/// A token of the names' ServiceAccount on `server` bound to a new Secret `secret` there.
async fn bound_token(server: &kube::Client, secret: &str) -> anyhow::Result<String> {
    let account = (TOKENS_NAMESPACE, SERVICE_ACCOUNT);
    Ok(fleetnet_testenv::tokens::bound_token(server, "member", account, secret, 4 * 3600).await?)
}

fn member_secret(name: &str, kubeconfig: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("member-{name}")),
            namespace: Some(SECRETS_NAMESPACE.into()),
            labels: Some(
                [
                    (MEMBER_LABEL.to_string(), "true".to_string()),
                    (MEMBER_NAME_LABEL.to_string(), name.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(
            [(
                KUBECONFIG_KEY.to_string(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

/// Two bound tokens per name (and for [`ADDED`]), each name's Secret on the hub with the first,
/// and the names' hub namespaces.
pub async fn prepare(
    fleet: &Fleet,
    hub: &kube::Client,
    names: &[String],
    servers: &[String],
    server_clients: &[kube::Client],
) -> anyhow::Result<Vec<SecretMember>> {
    for c in server_clients {
        fleetnet_testenv::tokens::admin_service_account(
            c,
            "member",
            TOKENS_NAMESPACE,
            SERVICE_ACCOUNT,
        )
        .await?;
    }
    let kubeconfigs: Vec<String> = servers
        .iter()
        .map(|s| std::fs::read_to_string(fleet.member(s).kubeconfig_path()))
        .collect::<Result<_, _>>()
        .context("read a member apiserver's kubeconfig")?;
    let all: Vec<(usize, String)> = names
        .iter()
        .cloned()
        .chain([ADDED.to_string()])
        .enumerate()
        .map(|(i, n)| (fleetnet_bench::server_of(i, servers.len()), n))
        .collect();
    let members: Vec<SecretMember> = futures::stream::iter(all)
        .map(|(server, name)| {
            let (client, kubeconfig) = (&server_clients[server], &kubeconfigs[server]);
            async move {
                let first = bound_token(client, &format!("{name}-a")).await?;
                let second = bound_token(client, &format!("{name}-b")).await?;
                Ok::<_, anyhow::Error>(SecretMember {
                    first: with_token(kubeconfig, &first),
                    second: with_token(kubeconfig, &second),
                    name,
                    server,
                })
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    fleetnet_testenv::ensure_namespace(hub, "hub", SECRETS_NAMESPACE).await?;
    let hub_namespaces = members.iter().map(|m| fleet.hub_namespace(&m.name));
    run_all(hub_namespaces, |ns| async move {
        fleetnet_testenv::ensure_namespace(hub, "hub", &ns)
            .await
            .map_err(anyhow::Error::from)
    })
    .await?;
    let registered = members.iter().filter(|m| m.name != ADDED);
    run_all(registered, |m| async move {
        secrets(hub)
            .create(&PostParams::default(), &member_secret(&m.name, &m.first))
            .await
            .with_context(|| format!("create the Secret of {}", m.name))
            .map(drop)
    })
    .await?;
    Ok(members)
}

/// `f` over `items`, [`IN_FLIGHT`] at a time; the first error.
async fn run_all<I, T, F, Fut>(items: I, f: F) -> anyhow::Result<()>
where
    I: IntoIterator<Item = T>,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items)
        .map(f)
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

fn secrets(hub: &kube::Client) -> Api<Secret> {
    Api::namespaced(hub.clone(), SECRETS_NAMESPACE)
}

/// Name → (kubeconfig hash, since) over every replica's `/members` (the replica running it).
async fn engagements(replicas: &[Replica]) -> Engagements {
    let mut all = HashMap::new();
    for r in replicas {
        let Ok(members) = r.members_json().await else {
            continue;
        };
        let Some(members) = members.get("members").and_then(|m| m.as_object()) else {
            continue;
        };
        for (name, status) in members {
            let field = |k: &str| {
                status
                    .get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            if field("phase") == "ready" {
                all.insert(name.clone(), (field("kubeconfig_hash"), field("since")));
            }
        }
    }
    all
}

/// `authentication_attempts` whose result is not `success`, summed over `servers`; `None`
/// when the apiservers do not publish it.
async fn auth_failures(servers: &[kube::Client]) -> Option<f64> {
    let mut total = None;
    for c in servers {
        let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
        let text = c.request_text(req).await.ok()?;
        for line in text.lines() {
            // A result never seen has no series: any sample of the metric means it is there.
            if let Some((labels, value)) =
                fleetnet_bench::parse_sample(line, "authentication_attempts")
            {
                let failed = labels.iter().any(|(k, v)| *k == "result" && v != "success");
                *total.get_or_insert(0.0) += if failed { value } else { 0.0 };
            }
        }
    }
    total
}

/// Requests of `verb` since `before`, Leases aside (the replicas' shard Leases are listed
/// every few seconds whatever happens to the members).
fn count(after: &ServerCounts, before: &ServerCounts, verb: &str) -> u64 {
    after
        .requests_since(before)
        .iter()
        .filter(|w| w.verb == verb && w.resource != "leases")
        .map(|w| w.count)
        .sum()
}

/// Rotates every name's token at once, revokes the first tokens [`NEW_TOKEN_WITHIN`] later and
/// proves the requests after that on the new ones; see the module doc.
pub async fn rotate(
    fleet: &Fleet,
    hub: &kube::Client,
    server_clients: &[kube::Client],
    replicas: &[Replica],
    members: &[SecretMember],
    seen: &std::sync::Mutex<Seen>,
    quiet_watches_ended_per_s: f64,
) -> anyhow::Result<Rotation> {
    let registered: Vec<&SecretMember> = members.iter().filter(|m| m.name != ADDED).collect();
    let before = engagements(replicas).await;
    ensure!(
        before.len() == registered.len(),
        "{} of {} names ready before the rotation",
        before.len(),
        registered.len()
    );
    let (members0, hub0) = (
        scrape_every_resource(server_clients).await?,
        scrape_every_resource(std::slice::from_ref(hub)).await?,
    );
    let auth0 = auth_failures(server_clients).await;
    say(format!(
        "rotating {} tokens at once ({IN_FLIGHT} writes in flight)",
        registered.len()
    ));
    let start = Instant::now();
    run_all(registered.iter().copied(), |m| async move {
        secrets(hub)
            .replace(
                &format!("member-{}", m.name),
                &PostParams::default(),
                &member_secret(&m.name, &m.second),
            )
            .await
            .with_context(|| format!("rotate the Secret of {}", m.name))
            .map(drop)
    })
    .await?;
    let written = start.elapsed();
    let taken = wait_taken(replicas, &registered, &before, start).await;
    say(format!(
        "rotation: Secrets written in {written:.1?}, every name on its new kubeconfig after {taken:.1?}"
    ));
    tokio::time::sleep(NEW_TOKEN_WITHIN.saturating_sub(start.elapsed())).await;
    let revoked_at = start.elapsed();
    revoke_first_tokens(server_clients, &registered).await?;
    let revoked = Instant::now();
    let (probe_s, probe_finalized) = probe(fleet, server_clients, &registered, seen).await?;
    let probe_s = probe_s.map(|()| revoked.elapsed().as_secs_f64());
    let window = start.elapsed();
    let after = engagements(replicas).await;
    let re_engaged = changed(&registered, &before, &after, |(_, since)| since);
    let (members1, hub1) = (
        scrape_every_resource(server_clients).await?,
        scrape_every_resource(std::slice::from_ref(hub)).await?,
    );
    let auth1 = auth_failures(server_clients).await;
    Ok(Rotation {
        names: registered.len(),
        written_s: written.as_secs_f64(),
        taken_s: taken.map(|t| t.as_secs_f64()),
        revoked_at_s: revoked_at.as_secs_f64(),
        probe_s,
        probe_finalized,
        member_lists: count(&members1, &members0, "LIST"),
        hub_lists: count(&hub1, &hub0, "LIST"),
        member_watches_ended: count(&members1, &members0, "WATCH"),
        member_watches_ended_expected: quiet_watches_ended_per_s * window.as_secs_f64(),
        re_engaged,
        auth_failures: auth0.zip(auth1).map(|(a, b)| b - a),
        window_s: window.as_secs_f64(),
    })
}

/// Name → (kubeconfig hash, since) of a `/members` poll.
type Engagements = HashMap<String, (String, String)>;

/// Names of `registered` whose `field` differs between `before` and `after` (both present).
fn changed(
    registered: &[&SecretMember],
    before: &Engagements,
    after: &Engagements,
    field: impl Fn(&(String, String)) -> &String,
) -> usize {
    registered
        .iter()
        .filter(|m| {
            matches!((after.get(&m.name), before.get(&m.name)),
                (Some(a), Some(b)) if field(a) != field(b))
        })
        .count()
}

/// Polls the replicas until every name of `registered` shows a kubeconfig hash other than
/// `before`'s: when, from `start`; `None` after 60 s.
async fn wait_taken(
    replicas: &[Replica],
    registered: &[&SecretMember],
    before: &Engagements,
    start: Instant,
) -> Option<Duration> {
    loop {
        let now = engagements(replicas).await;
        let taken = changed(registered, before, &now, |(hash, _)| hash);
        if taken == registered.len() {
            return Some(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(60) {
            say(format!(
                "{taken} of {} names on their new token after 60 s",
                registered.len()
            ));
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the Secrets the first tokens are bound to: those tokens are refused from then on.
async fn revoke_first_tokens(
    server_clients: &[kube::Client],
    registered: &[&SecretMember],
) -> anyhow::Result<()> {
    run_all(registered.iter().copied(), |m| async move {
        Api::<Secret>::namespaced(server_clients[m.server].clone(), TOKENS_NAMESPACE)
            .delete(&format!("{}-a", m.name), &DeleteParams::default())
            .await
            .with_context(|| format!("revoke the first token of {}", m.name))
            .map(drop)
    })
    .await
}

/// A new export on every member apiserver: its ISE in every name's hub namespace (within
/// 60 s) and, on the apiserver, its finalizer (a member-side write). Returns `Some(())` when
/// every ISE arrived, and how many ServiceExports got their finalizer.
async fn probe(
    fleet: &Fleet,
    server_clients: &[kube::Client],
    registered: &[&SecretMember],
    seen: &std::sync::Mutex<Seen>,
) -> anyhow::Result<(Option<()>, usize)> {
    for c in server_clients {
        create_pair(c.clone(), PROBE.to_string()).await?;
    }
    let expected: Vec<(String, String)> = registered
        .iter()
        .map(|m| (fleet.hub_namespace(&m.name), format!("{NAMESPACE}-{PROBE}")))
        .collect();
    let arrived = wait_present(seen, &expected, Duration::from_secs(60))
        .await
        .then_some(());
    let mut finalized = 0;
    for c in server_clients {
        let export = Api::<ServiceExport>::namespaced_with(
            c.clone(),
            NAMESPACE,
            &ServiceExportVersion::V1Beta1,
        )
        .get(PROBE)
        .await
        .context("get the probe ServiceExport")?;
        if export.metadata.finalizers.is_some_and(|f| !f.is_empty()) {
            finalized += 1;
        }
    }
    Ok((arrived, finalized))
}

/// Creates [`ADDED`]'s Secret and times its exports' arrival on the hub (60 s at most).
pub async fn add_member(
    fleet: &Fleet,
    hub: &kube::Client,
    members: &[SecretMember],
    exports: &[String],
    seen: &std::sync::Mutex<Seen>,
) -> anyhow::Result<Option<Duration>> {
    let added = members
        .iter()
        .find(|m| m.name == ADDED)
        .context("no added member prepared")?;
    let ns = fleet.hub_namespace(ADDED);
    let expected: Vec<(String, String)> = exports
        .iter()
        .map(|e| (ns.clone(), format!("{NAMESPACE}-{e}")))
        .chain([(ns.clone(), format!("{NAMESPACE}-{PROBE}"))])
        .collect();
    let start = Instant::now();
    secrets(hub)
        .create(&PostParams::default(), &member_secret(ADDED, &added.second))
        .await
        .context("create the added member's Secret")?;
    if !wait_present(seen, &expected, Duration::from_secs(60)).await {
        say(format!("{ADDED}'s exports not on the hub after 60 s"));
        return Ok(None);
    }
    let took = start.elapsed();
    say(format!(
        "{ADDED} added: its {} exports on the hub after {took:.2?}",
        expected.len()
    ));
    Ok(Some(took))
}

/// One `binary status --output json` against the hub: its wall time and the members listed.
fn status_once(binary: &Path, hub_kubeconfig: &Path) -> anyhow::Result<(f64, usize)> {
    let start = Instant::now();
    let out = std::process::Command::new(binary)
        .args(["status", "--output", "json", "--hub-kubeconfig"])
        .arg(hub_kubeconfig)
        .output()
        .context("run fleetnet-hub status")?;
    let took = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "fleetnet-hub status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let value: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("status --output json")?;
    let listed = value
        .get("members")
        .and_then(|m| m.as_array())
        .map_or(0, Vec::len);
    Ok((took, listed))
}

/// `status` until it lists `expect` members (30 s at most: when, from now), then `runs` timed
/// runs: (when it listed them all, each run's wall time, members the last listed).
pub fn status(
    binary: &Path,
    hub_kubeconfig: &Path,
    expect: usize,
    runs: usize,
) -> anyhow::Result<(Option<f64>, Vec<f64>, usize)> {
    let begun = Instant::now();
    let shown = loop {
        let (_, listed) = status_once(binary, hub_kubeconfig)?;
        if listed >= expect {
            break Some(begun.elapsed().as_secs_f64());
        }
        if begun.elapsed() > Duration::from_secs(30) {
            say(format!(
                "status lists {listed} of {expect} members after 30 s"
            ));
            break None;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let mut times = vec![];
    let mut listed = 0;
    for _ in 0..runs {
        let (took, n) = status_once(binary, hub_kubeconfig)?;
        times.push(took);
        listed = n;
    }
    say(format!(
        "status: every member listed after {shown:.2?} s; runs {times:.2?} s, {listed} members listed"
    ));
    Ok((shown, times, listed))
}

/// The report's lines for the Secrets phase.
pub fn markdown(r: &SecretsReport) -> String {
    let t = &r.rotation;
    let opt = |v: Option<f64>| v.map_or("not reached".to_string(), |v| format!("{v:.2} s"));
    let mut out = format!(
        "\n#### Members as Secrets: rotation, a member added, `status`\n\n\
         | figure | value |\n|---|---|\n\
         | every token rotated at once ({names} Secrets): last Secret written / every name on its new kubeconfig (replicas' `/members`) | {written:.2} s / {taken} |\n\
         | first tokens revoked at (rotation start +) | {revoked:.2} s |\n\
         | revocation → a new export on every apiserver in every name's hub namespace ; its ServiceExports finalized on the new tokens | {probe} ; {finalized} |\n\
         | in the {window:.0} s from rotation to probe: LISTs members / hub (Leases aside) ; names engaged again | {ml} / {hl} ; {re} |\n\
         | WATCHes the member apiservers ended (the quiet window's rate predicts) | {we} ({wx:.0}) |\n\
         | authentication failures on the member apiservers | {auth} |\n\
         | a member added: Secret created → its exports on the hub ; → listed by `status` too | {added} ; {in_status} |\n\
         | `fleetnet-hub status --output json`, {runs} runs ; members listed | {status} ; {listed} |\n",
        names = t.names,
        written = t.written_s,
        taken = opt(t.taken_s),
        revoked = t.revoked_at_s,
        probe = opt(t.probe_s),
        finalized = t.probe_finalized,
        window = t.window_s,
        ml = t.member_lists,
        hl = t.hub_lists,
        re = t.re_engaged,
        we = t.member_watches_ended,
        wx = t.member_watches_ended_expected,
        auth = t
            .auth_failures
            .map_or("not published".to_string(), |a| format!("{a:.0}")),
        added = opt(r.added_s),
        in_status = opt(r.added_s.zip(r.added_in_status_s).map(|(a, s)| a + s)),
        runs = r.status_s.len(),
        status = r
            .status_s
            .iter()
            .map(|s| format!("{s:.2} s"))
            .collect::<Vec<_>>()
            .join(", "),
        listed = r.status_members,
    );
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\nusers:\n- name: u\n  user:\n    token: old\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n";

    #[test]
    fn a_rotated_kubeconfig_differs_in_its_token_only() {
        let rotated = with_token(KUBECONFIG, "new");
        assert!(rotated.contains("    token: new\n"));
        assert!(!rotated.contains("old"));
        assert_eq!(
            rotated.replace("token: new", "token: old"),
            KUBECONFIG,
            "nothing else changed"
        );
    }

    #[test]
    fn the_secret_declares_the_member_as_the_controller_reads_it() {
        let secret = member_secret("m0042", KUBECONFIG);
        let (name, _source) =
            fleetnet_hub::fleet::sources::secrets::member_of(&secret).expect("a member Secret");
        assert_eq!(name, "m0042");
        assert_eq!(secret.metadata.name.as_deref(), Some("member-m0042"));
        let labels = secret.metadata.labels.expect("labels");
        assert_eq!(labels.get(MEMBER_LABEL).map(String::as_str), Some("true"));
    }

    #[test]
    fn the_report_names_what_was_not_reached() {
        let report = SecretsReport {
            rotation: Rotation {
                names: 1000,
                written_s: 1.2,
                taken_s: None,
                revoked_at_s: 5.0,
                probe_s: Some(2.5),
                probe_finalized: 5,
                member_lists: 0,
                hub_lists: 0,
                member_watches_ended: 3,
                member_watches_ended_expected: 2.9,
                re_engaged: 0,
                auth_failures: Some(0.0),
                window_s: 9.0,
            },
            added_s: Some(0.8),
            added_in_status_s: Some(1.0),
            status_s: vec![0.3, 0.2, 0.2],
            status_members: 1001,
        };
        let text = markdown(&report);
        assert!(text.contains("1000 Secrets"), "{text}");
        assert!(text.contains("1.20 s / not reached"), "{text}");
        assert!(text.contains("| 0.80 s ; 1.80 s |"), "{text}");
        assert!(text.contains("0.30 s, 0.20 s, 0.20 s ; 1001"), "{text}");
    }
}
