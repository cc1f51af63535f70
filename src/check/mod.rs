//! `fleetnet-hub check`: can fleetnet-hub work with the hub and with every member of every
//! source `run` reads (the kubeconfig directory, the labelled hub Secrets)? For each it says
//! what is wrong in one [`Category`] an operator acts on: unreachable, TLS, authentication,
//! RBAC (naming what is missing), CRD missing (naming it). Categories come from the typed
//! errors ([`problem`]), never from a kubeconfig's text.

mod access;
mod hub;
mod problem;
mod served;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, stream};

pub use access::Permission;
pub use hub::{HubCheck, HubOptions, Leases};
pub use problem::{Category, Problem, classify};

use crate::api::GROUP;
use crate::client::Limits;
use crate::config::DEFAULT_FLEET_SYSTEM_NAMESPACE;
use crate::fleet::registry::{self, MemberSource};
use crate::fleet::{MemberClient, TrustPolicy, member_client};

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
    /// The hub's line, then an aligned table of the members.
    #[default]
    Text,
    /// One JSON object: `{"hub": {server, ok, category, problem}, "members": [{member, source,
    /// server, ok, category, problem, warnings}], "unusable": N, "ok": bool}`.
    Json,
}

/// What `check` checks, from its flags: the hub and the sources `run` would use.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--kubeconfig-dir`.
    pub kubeconfig_dir: PathBuf,
    /// `--fleet-system-namespace`: the jobs' member writes are asked for there.
    pub fleet_system_namespace: String,
    /// What member kubeconfigs may use.
    pub trust: TrustPolicy,
    /// The hub and how `run` uses it; `None` checks the kubeconfig directory's members only.
    pub hub: Option<HubOptions>,
}

/// One member's row. `server` is printable ([`crate::client::printable_server`]) and
/// `problem` never quotes the kubeconfig; for a usable member `problem` is its summary, with
/// the `warnings` (TLS verification disabled, a proxy) that hold even though it works.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemberCheck {
    pub member: String,
    /// Where it is declared: `file <path>` or `Secret <ns>/<name>`.
    pub source: String,
    pub server: String,
    pub ok: bool,
    pub category: Category,
    pub problem: String,
    pub warnings: Vec<String>,
}

impl MemberCheck {
    fn new(member: &str, server: &str, verdict: Result<String, Problem>) -> Self {
        let (category, problem) = match verdict {
            Ok(summary) => (Category::Ok, summary),
            Err(p) => (p.category, p.detail),
        };
        Self {
            member: member.into(),
            source: String::new(),
            server: server.into(),
            ok: category == Category::Ok,
            category,
            problem,
            warnings: vec![],
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
    let source = registry::source_at(registry::Place::File(file.into()), Ok(kubeconfig.into()));
    check_source(name, &source, trust, fleet_system_namespace).await
}

/// Checks the member `name` declared by `source`.
async fn check_source(
    name: &str,
    source: &MemberSource,
    trust: TrustPolicy,
    fleet_system_namespace: &str,
) -> MemberCheck {
    let mut row = match &source.kubeconfig {
        Err(e) => MemberCheck::new(name, "-", Err(Problem::new(Category::Kubeconfig, e))),
        Ok(kubeconfig) => {
            let (limits, fence) = (Limits::default(), crate::client::Fence::open());
            let origin = source.place.to_string();
            let client = member_client(
                name,
                &origin,
                kubeconfig,
                trust,
                &limits,
                Arc::default(),
                fence,
            );
            match client.await {
                Ok(member) => usable(name, member, fleet_system_namespace).await,
                Err(e) => MemberCheck::new(
                    name,
                    "-",
                    Err(Problem::new(Category::Kubeconfig, e.to_string())),
                ),
            }
        }
    };
    row.source = source.place.described();
    row
}

/// The member's row: served CRDs, then its identity's permissions (SelfSubjectAccessReview).
async fn usable(name: &str, member: MemberClient, fleet_system_namespace: &str) -> MemberCheck {
    let client = &member.clients.client;
    let mut warnings = vec![];
    if member.tls_verify_disabled {
        warnings.push("TLS verification DISABLED".to_string());
    }
    if let Some(proxy) = &member.clients.proxy {
        warnings.push(format!("via proxy {proxy}"));
    }
    let verdict = async {
        let version = served::service_export_version(client).await?;
        served::all_served(client, &served::member_resources()).await?;
        let everywhere = MEMBER_PERMISSIONS.iter().map(|p| Permission::new(*p, None));
        let in_fleet_system = FLEET_SYSTEM_PERMISSIONS
            .iter()
            .map(|p| Permission::new(*p, Some(fleet_system_namespace)));
        let missing = access::missing(client, everywhere.chain(in_fleet_system).collect()).await?;
        if let Some(problem) = access::denied("", &missing) {
            return Err(problem);
        }
        let told = warnings
            .iter()
            .map(|w| format!("; {w}"))
            .collect::<String>();
        Ok(format!("ok (ServiceExport {version}){told}"))
    };
    let verdict = verdict.await;
    let mut row = MemberCheck::new(name, &member.clients.server, verdict);
    row.warnings = warnings;
    row
}

/// The whole report: the hub (when checked) and every member.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub hub: Option<HubCheck>,
    pub members: Vec<MemberCheck>,
}

impl Report {
    /// Members that cannot be worked with.
    pub fn unusable(&self) -> usize {
        self.members.iter().filter(|r| !r.ok).count()
    }

    /// Everything usable: the hub (when checked) and every member.
    pub fn ok(&self) -> bool {
        self.unusable() == 0 && self.hub.as_ref().is_none_or(|h| h.ok)
    }
}

/// Checks the hub and every member, prints the report as `output` asks; fails when anything
/// is unusable.
pub async fn run_options(options: &Options, output: Output) -> Result<(), String> {
    let report = check_all(options).await?;
    match output {
        Output::Text => print!("{}", report_text(&report)),
        Output::Json => println!("{}", report_json(&report)),
    }
    match (report.hub.as_ref().is_none_or(|h| h.ok), report.unusable()) {
        (true, 0) => Ok(()),
        (hub_ok, bad) => {
            let hub = if hub_ok { "" } else { "the hub is unusable; " };
            Err(format!(
                "{hub}{bad} of {} members unusable",
                report.members.len()
            ))
        }
    }
}

/// The report of `options`: the hub first (its client lists the member Secrets), then every
/// member of every source, then the hub's permissions in each member's hub namespace.
pub async fn check_all(options: &Options) -> Result<Report, String> {
    let dir = &options.kubeconfig_dir;
    let mut found =
        registry::scan_places(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut hub_row = None;
    let mut hub_client = None;
    if let Some(hub_options) = &options.hub {
        match hub::connect(hub_options).await {
            Ok((client, server)) => {
                let mut row = hub::check(&client, &server, hub_options).await;
                if let (true, Some(ns)) = (row.ok, &hub_options.member_secrets_namespace) {
                    match hub::member_secrets(&client, ns).await {
                        Ok(secrets) => found.extend(secrets),
                        Err(p) => {
                            row = HubCheck {
                                ok: false,
                                category: p.category,
                                problem: p.detail,
                                ..row
                            }
                        }
                    }
                }
                hub_row = Some(row);
                hub_client = Some(client);
            }
            Err(row) => hub_row = Some(row),
        }
    }
    let members = registry::merge(found);
    if members.is_empty() {
        let secrets = match options
            .hub
            .as_ref()
            .and_then(|h| h.member_secrets_namespace.as_ref())
        {
            Some(ns) => format!(" nor member Secrets in {ns}"),
            None => String::new(),
        };
        return Err(format!(
            "no member kubeconfigs in {}{secrets}",
            dir.display()
        ));
    }
    if let (Some(client), Some(row), Some(hub_options)) = (&hub_client, &mut hub_row, &options.hub)
    {
        let names: Vec<String> = members.keys().cloned().collect();
        hub::check_member_namespaces(client, row, hub_options, &names).await;
    }
    let (trust, ns) = (options.trust, options.fleet_system_namespace.as_str());
    let rows = stream::iter(members.iter())
        .map(|(name, source)| check_source(name, source, trust, ns))
        .buffered(4)
        .collect()
        .await;
    Ok(Report {
        hub: hub_row,
        members: rows,
    })
}

/// Checks every member of `dir` (the default fleet system namespace, no hub), prints the report
/// as `output` asks, fails if any member is unusable.
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
    let options = dir_only(dir, fleet_system_namespace, trust);
    run_options(&options, output).await
}

fn dir_only(dir: &Path, fleet_system_namespace: &str, trust: TrustPolicy) -> Options {
    Options {
        kubeconfig_dir: dir.into(),
        fleet_system_namespace: fleet_system_namespace.into(),
        trust,
        hub: None,
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
    let options = dir_only(dir, fleet_system_namespace, trust);
    Ok(check_all(&options).await?.members)
}

/// The members' rows as one JSON object (`--output json` without the hub).
pub fn json(rows: &[MemberCheck]) -> String {
    report_json(&Report {
        hub: None,
        members: rows.to_vec(),
    })
}

/// The report as one JSON object (`--output json`): `hub`, `members`, `unusable` (members)
/// and `ok` (everything).
pub fn report_json(report: &Report) -> String {
    serde_json::json!({
        "hub": report.hub,
        "members": report.members,
        "unusable": report.unusable(),
        "ok": report.ok(),
    })
    .to_string()
}

/// The hub's line (when checked), then the members' [`table`].
pub fn report_text(report: &Report) -> String {
    use crate::telemetry::escape_control;
    let mut out = String::new();
    if let Some(hub) = &report.hub {
        let status = if hub.ok { "ok" } else { "FAIL" };
        let problem = escape_control(&hub.problem);
        out.push_str(&format!(
            "hub {} | {status} | {} | {problem}\n\n",
            escape_control(&hub.server),
            hub.category
        ));
    }
    out.push_str(&table(&report.members));
    out
}

/// `member | server | status | category | detail`, aligned; one line per member whatever its
/// name or error holds (control characters escaped). A usable member's detail is its summary
/// with its warnings (TLS verification disabled, a proxy).
pub fn table(rows: &[MemberCheck]) -> String {
    use crate::telemetry::escape_control;
    let cells: Vec<[String; 3]> = rows
        .iter()
        .map(|r| [&r.member, &r.server, &r.problem].map(|c| escape_control(c).into_owned()))
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
        "{:<w0$} | {:<w1$} | {:<6} | {:<14} | detail\n",
        "member", "server", "status", "category"
    );
    for (r, [member, server, detail]) in rows.iter().zip(&cells) {
        let status = if r.ok { "ok" } else { "FAIL" };
        let category = r.category.as_str();
        out.push_str(&format!(
            "{member:<w0$} | {server:<w1$} | {status:<6} | {category:<14} | {detail}\n"
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
                Err(Problem::new(
                    Category::Kubeconfig,
                    "invalid member name \"evil\\n\": bad\nline",
                )),
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
        assert_eq!(json["members"][1]["category"], "kubeconfig");
        assert_eq!(
            (&json["hub"], &json["ok"]),
            (&serde_json::Value::Null, &false.into())
        );
    }

    /// A usable member's warnings are in the table: its detail column used to be blank for
    /// every usable member, so "TLS verification DISABLED" was never seen.
    #[test]
    fn a_usable_members_warnings_are_shown() {
        let mut lax = MemberCheck::new(
            "lax",
            "https://h/",
            Ok("ok (ServiceExport v1beta1); TLS verification DISABLED".into()),
        );
        lax.warnings = vec!["TLS verification DISABLED".into()];
        let hub = HubCheck {
            server: "https://hub/".into(),
            ok: false,
            category: Category::Rbac,
            problem: "missing RBAC in the hub: list secrets in ns".into(),
        };
        let report = Report {
            hub: Some(hub),
            members: vec![lax],
        };
        let text = report_text(&report);
        assert!(
            text.contains("hub https://hub/ | FAIL | rbac | missing RBAC"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("lax ")
                && l.contains("| ok ")
                && l.contains("TLS verification DISABLED")),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&report_json(&report)).expect("JSON");
        assert_eq!(
            json["members"][0]["warnings"][0],
            "TLS verification DISABLED"
        );
        assert_eq!((&json["unusable"], &json["ok"]), (&0.into(), &false.into()));
        assert_eq!(json["hub"]["category"], "rbac");
    }
}
