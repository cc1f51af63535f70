//! `fleetnet-hub check`: for every member of a kubeconfig directory, can fleetnet-hub work
//! with it? Connects, finds the ServiceExport CRD, and asks the member (SelfSubjectAccessReview)
//! for every permission the jobs need: cluster-wide, and in the fleet system namespace.

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
use crate::config::DEFAULT_FLEET_SYSTEM_NAMESPACE;
use crate::fleet::{MemberClient, TrustPolicy, member_client, registry};

/// `(group, resource, verb)` the reconciler needs in each member.
pub const MEMBER_PERMISSIONS: &[(&str, &str, &str)] = &[
    (GROUP, "serviceexports", "get"),
    (GROUP, "serviceexports", "list"),
    (GROUP, "serviceexports", "watch"),
    (GROUP, "serviceexports", "patch"),
    (GROUP, "serviceexports", "delete"),
    (GROUP, "serviceexports/status", "patch"),
    ("", "services", "get"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("events.k8s.io", "events", "create"),
    ("discovery.k8s.io", "endpointslices", "get"),
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    ("discovery.k8s.io", "endpointslices", "patch"),
    (GROUP, "serviceimports", "get"),
    (GROUP, "serviceimports", "list"),
    (GROUP, "serviceimports", "watch"),
    (GROUP, "serviceimports", "create"),
    (GROUP, "serviceimports", "patch"),
    (GROUP, "serviceimports", "delete"),
    (GROUP, "serviceimports/status", "update"),
    (GROUP, "multiclusterservices", "get"),
    (GROUP, "multiclusterservices", "list"),
    (GROUP, "multiclusterservices", "watch"),
    (GROUP, "multiclusterservices", "patch"),
    (GROUP, "multiclusterservices", "delete"),
    (GROUP, "multiclusterservices/status", "patch"),
];

/// `(group, resource, verb)` the jobs need in each member's fleet system namespace only
/// (`--fleet-system-namespace`): the objects they own there (the chart's Role).
pub const FLEET_SYSTEM_PERMISSIONS: &[(&str, &str, &str)] = &[
    ("", "services", "create"),
    ("", "services", "patch"),
    ("", "services", "delete"),
    ("discovery.k8s.io", "endpointslices", "create"),
    ("discovery.k8s.io", "endpointslices", "update"),
    ("discovery.k8s.io", "endpointslices", "delete"),
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

/// The permissions of [`MEMBER_PERMISSIONS`] (cluster-wide) and [`FLEET_SYSTEM_PERMISSIONS`]
/// (in `fleet_system_namespace`) the member's identity lacks (SelfSubjectAccessReview), as
/// `<verb> <group>/<resource>[ in <namespace>]`.
async fn missing_permissions(
    client: kube::Client,
    fleet_system_namespace: &str,
) -> Result<Vec<String>, String> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client);
    let everywhere = MEMBER_PERMISSIONS.iter().map(|p| (p, None));
    let in_fleet_system = FLEET_SYSTEM_PERMISSIONS
        .iter()
        .map(|p| (p, Some(fleet_system_namespace)));
    let mut missing = vec![];
    for ((group, resource, verb), namespace) in everywhere.chain(in_fleet_system) {
        let whole = *resource;
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
                    namespace: namespace.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let place = namespace.map(|ns| format!(" in {ns}")).unwrap_or_default();
        match api.create(&PostParams::default(), &review).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) if group.is_empty() => missing.push(format!("{verb} {whole}{place}")),
            Ok(_) => missing.push(format!("{verb} {group}/{whole}{place}")),
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

/// Checks one member kubeconfig, read from `file` (named in a refusal), with the default
/// fleet system namespace.
pub async fn check_member(
    name: &str,
    file: &Path,
    kubeconfig: &str,
    trust: TrustPolicy,
) -> MemberCheck {
    check_member_in(
        name,
        file,
        kubeconfig,
        trust,
        DEFAULT_FLEET_SYSTEM_NAMESPACE,
    )
    .await
}

/// Checks one member kubeconfig, read from `file` (named in a refusal); the jobs' writes are
/// asked for in `fleet_system_namespace`.
pub async fn check_member_in(
    name: &str,
    file: &Path,
    kubeconfig: &str,
    trust: TrustPolicy,
    fleet_system_namespace: &str,
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
            let verdict = usable(member, fleet_system_namespace).await;
            MemberCheck::new(name, &server, verdict)
        }
        Err(problem) => MemberCheck::new(name, "-", Err(problem.to_string())),
    }
}

/// `Ok(summary)` when fleetnet-hub can work with the member, else the problem.
async fn usable(member: MemberClient, fleet_system_namespace: &str) -> Result<String, String> {
    let discovery = ServiceExportVersion::discover(&member.clients.client);
    let version = tokio::time::timeout(Duration::from_secs(15), discovery)
        .await
        .map_err(|_| "no answer within 15 s".to_string())??;
    let missing = missing_permissions(member.clients.client, fleet_system_namespace).await?;
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

/// Checks every member of `dir` (the default fleet system namespace), prints the report as
/// `output` asks, fails if any member is unusable.
pub async fn run(dir: &Path, trust: TrustPolicy, output: Output) -> Result<(), String> {
    run_in(dir, DEFAULT_FLEET_SYSTEM_NAMESPACE, trust, output).await
}

/// [`run`], asking for the jobs' writes in `fleet_system_namespace` (`--fleet-system-namespace`).
pub async fn run_in(
    dir: &Path,
    fleet_system_namespace: &str,
    trust: TrustPolicy,
    output: Output,
) -> Result<(), String> {
    let rows = check_dir_in(dir, fleet_system_namespace, trust).await?;
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

/// The rows of the report for every member of `dir` (the default fleet system namespace).
pub async fn check_dir(dir: &Path, trust: TrustPolicy) -> Result<Vec<MemberCheck>, String> {
    check_dir_in(dir, DEFAULT_FLEET_SYSTEM_NAMESPACE, trust).await
}

/// The rows of the report for every member of `dir`, the jobs' writes asked for in
/// `fleet_system_namespace`.
pub async fn check_dir_in(
    dir: &Path,
    fleet_system_namespace: &str,
    trust: TrustPolicy,
) -> Result<Vec<MemberCheck>, String> {
    let members = registry::scan(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if members.is_empty() {
        return Err(format!("no member kubeconfigs in {}", dir.display()));
    }
    let mut rows = vec![];
    for (name, source) in members {
        let path = source
            .place
            .path()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        rows.push(match source.kubeconfig {
            Ok(k) => {
                let ns = fleet_system_namespace;
                check_member_in(&name, &path, &k, trust, ns).await
            }
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
