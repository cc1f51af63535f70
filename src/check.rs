//! `fleetnet-hub check`: for every member of a kubeconfig directory, can fleetnet-hub work
//! with it? Connects, finds the ServiceExport CRD, and asks the member (SelfSubjectAccessReview)
//! for every permission the reconciler needs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::api::GROUP;
use crate::api::ServiceExportVersion;
use crate::client::Limits;
use crate::fleet::{MemberClient, TrustPolicy, member_client, registry};

/// `(group, resource, verb)` the reconciler needs in each member.
pub const MEMBER_PERMISSIONS: &[(&str, &str, &str)] = &[
    (GROUP, "serviceexports", "get"),
    (GROUP, "serviceexports", "list"),
    (GROUP, "serviceexports", "watch"),
    (GROUP, "serviceexports", "patch"),
    (GROUP, "serviceexports/status", "patch"),
    ("", "services", "get"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("events.k8s.io", "events", "create"),
    ("discovery.k8s.io", "endpointslices", "get"),
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    ("discovery.k8s.io", "endpointslices", "patch"),
];

/// How `check` prints its report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// An aligned table.
    #[default]
    Text,
    /// One JSON object: `{"members": [{member, server, ok, problem}], "unusable": N}`.
    Json,
}

/// One row of the report. `server` is printable ([`crate::client::printable_server`]) and
/// `problem` never quotes the kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemberCheck {
    pub member: String,
    pub server: String,
    pub ok: bool,
    pub problem: String,
}

/// The permissions of [`MEMBER_PERMISSIONS`] the member's identity lacks
/// (SelfSubjectAccessReview), as `<verb> <group>/<resource>`.
async fn missing_permissions(client: kube::Client) -> Result<Vec<String>, String> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client);
    let mut missing = vec![];
    for (group, resource, verb) in MEMBER_PERMISSIONS {
        let (resource, subresource) = resource
            .split_once('/')
            .map_or((*resource, None), |(r, s)| (r, Some(s.to_string())));
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource,
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &review).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) if group.is_empty() => missing.push(format!("{verb} {resource}")),
            Ok(_) => missing.push(format!("{verb} {group}/{resource}")),
            Err(e) => return Err(format!("SelfSubjectAccessReview failed: {e}")),
        }
    }
    Ok(missing)
}

impl MemberCheck {
    fn new(member: &str, server: &str, verdict: Result<String, String>) -> Self {
        Self {
            member: member.into(),
            server: server.into(),
            ok: verdict.is_ok(),
            problem: verdict.unwrap_or_else(|e| e),
        }
    }
}

/// Checks one member kubeconfig, read from `file` (named in a refusal).
pub async fn check_member(
    name: &str,
    file: &Path,
    kubeconfig: &str,
    trust: TrustPolicy,
) -> MemberCheck {
    let (limits, fence) = (Limits::default(), crate::client::Fence::open());
    let origin = file.display().to_string();
    match member_client(
        name,
        &origin,
        kubeconfig,
        trust,
        &limits,
        Arc::default(),
        fence,
    )
    .await
    {
        Ok(member) => {
            let server = member.clients.server.clone();
            MemberCheck::new(name, &server, usable(member).await)
        }
        Err(problem) => MemberCheck::new(name, "-", Err(problem.to_string())),
    }
}

/// `Ok(summary)` when fleetnet-hub can work with the member, else the problem.
async fn usable(member: MemberClient) -> Result<String, String> {
    let discovery = ServiceExportVersion::discover(&member.clients.client);
    let version = tokio::time::timeout(Duration::from_secs(15), discovery)
        .await
        .map_err(|_| "no answer within 15 s".to_string())??;
    let missing = missing_permissions(member.clients.client).await?;
    if !missing.is_empty() {
        return Err(format!("missing RBAC: {}", missing.join(", ")));
    }
    let insecure = match member.tls_verify_disabled {
        true => "; TLS verification DISABLED",
        false => "",
    };
    let proxied = match &member.clients.proxy {
        Some(proxy) => format!("; via proxy {proxy}"),
        None => String::new(),
    };
    Ok(format!(
        "ok (ServiceExport {}){insecure}{proxied}",
        version.as_str()
    ))
}

/// Checks every member of `dir`, prints the report as `output` asks, fails if any member is
/// unusable.
pub async fn run(dir: &Path, trust: TrustPolicy, output: Output) -> Result<(), String> {
    let rows = check_dir(dir, trust).await?;
    match output {
        Output::Text => print!("{}", table(&rows)),
        Output::Json => println!("{}", json(&rows)),
    }
    let bad = rows.iter().filter(|r| !r.ok).count();
    if bad > 0 {
        Err(format!("{bad} of {} members unusable", rows.len()))
    } else {
        Ok(())
    }
}

/// The rows of the report for every member of `dir`.
pub async fn check_dir(dir: &Path, trust: TrustPolicy) -> Result<Vec<MemberCheck>, String> {
    let members = registry::scan(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if members.is_empty() {
        return Err(format!("no member kubeconfigs in {}", dir.display()));
    }
    let mut rows = vec![];
    for (name, source) in members {
        rows.push(match source.kubeconfig {
            Ok(k) => check_member(&name, &source.path, &k, trust).await,
            Err(e) => MemberCheck::new(&name, "-", Err(e)),
        });
    }
    Ok(rows)
}

/// The report as one JSON object (`--output json`).
pub fn json(rows: &[MemberCheck]) -> String {
    let unusable = rows.iter().filter(|r| !r.ok).count();
    serde_json::json!({ "members": rows, "unusable": unusable }).to_string()
}

/// `member | server | status | problem`, aligned; one line per member whatever its name or
/// error holds (control characters escaped).
pub fn table(rows: &[MemberCheck]) -> String {
    use crate::telemetry::escape_control;
    let cells: Vec<[String; 3]> = rows
        .iter()
        .map(|r| {
            let problem = if r.ok { "" } else { r.problem.as_str() };
            [&r.member, &r.server, problem].map(|c| escape_control(c).into_owned())
        })
        .collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .max()
            .unwrap_or(0)
            .max(6)
    };
    let (w0, w1) = (width(0), width(1));
    let mut out = format!(
        "{:<w0$} | {:<w1$} | {:<6} | problem\n",
        "member", "server", "status"
    );
    for (r, [member, server, problem]) in rows.iter().zip(&cells) {
        let status = if r.ok { "ok" } else { "FAIL" };
        out.push_str(&format!(
            "{member:<w0$} | {server:<w1$} | {status:<6} | {problem}\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_member_whatever_its_name_holds() {
        let rows = [
            MemberCheck::new("good", "https://h/", Ok("ok".into())),
            MemberCheck::new(
                "evil\nforged | https://x/ | ok\r\x1b[2K",
                "-",
                Err("invalid member name \"evil\\n\": bad\nline".into()),
            ),
        ];
        let text = table(&rows);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(
            text.contains(r"evil\nforged | https://x/ | ok\r\x1b[2K | -"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&json(&rows)).expect("JSON");
        assert_eq!(json["unusable"], 1);
        assert_eq!(json["members"][1]["member"], rows[1].member);
        assert_eq!(json["members"][0]["server"], "https://h/");
    }
}
