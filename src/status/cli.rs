//! `fleetnet-hub status`: every member across all replicas, from the `MemberStatus` objects
//! their owners publish (one LIST), with the member's exports and imports counted from the
//! hub's own objects (one metadata-only LIST each).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;

use k8s_openapi::api::coordination::v1::Lease;

use super::object::{JobState, LEASE_OWNER, MANAGED_BY, MANAGED_BY_LABEL, resource};

/// Flags of `status`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// The hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, env = "FLEETNET_HUB_KUBECONFIG")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// `text` (a table) or `json`.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// How `status` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// An aligned table.
    #[default]
    Text,
    /// One JSON object: `{"members": [...]}`.
    Json,
}

/// One member as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub member: String,
    pub namespace: String,
    /// The replica holding the member's Lease now (its pod name), else what was published.
    pub owner: String,
    /// The Lease that gives the right to write for the member (`<namespace>/<name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_lease: Option<String>,
    pub phase: String,
    pub since: String,
    pub failing_jobs: Vec<String>,
    /// InternalServiceExports in its hub namespace (`None`: not readable).
    pub exports: Option<usize>,
    /// InternalServiceImports in its hub namespace (`None`: not readable).
    pub imports: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub jobs: BTreeMap<String, JobState>,
    pub observed_at: String,
}

/// Runs `status`: prints the fleet to stdout.
pub async fn run(args: &Args) -> Result<(), String> {
    let hub = hub(args.hub_kubeconfig.as_deref()).await?;
    let rows = rows(&hub).await?;
    let out = match args.output {
        Output::Json => serde_json::to_string_pretty(&serde_json::json!({ "members": rows }))
            .map_err(|e| format!("json: {e}"))?,
        Output::Text => table(&rows),
    };
    println!("{out}");
    Ok(())
}

/// Every member's row, by member name.
pub async fn rows(hub: &kube::Client) -> Result<Vec<Row>, String> {
    let api: Api<DynamicObject> = Api::all_with(hub.clone(), &resource());
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let params = ListParams::default().labels(&selector);
    let (listed, exports, imports, holders) = tokio::join!(
        api.list(&params),
        count(hub, "internalserviceexports", "InternalServiceExport"),
        count(hub, "internalserviceimports", "InternalServiceImport"),
        lease_holders(hub),
    );
    let listed = listed.map_err(|e| format!("list MemberStatuses: {e}"))?;
    let mut rows: Vec<Row> = listed
        .items
        .iter()
        .filter_map(|o| {
            let namespace = o.metadata.namespace.clone()?;
            let s = super::publish::status_of(o)?;
            Some(Row {
                exports: exports
                    .as_ref()
                    .map(|c| c.get(&namespace).copied().unwrap_or(0)),
                imports: imports
                    .as_ref()
                    .map(|c| c.get(&namespace).copied().unwrap_or(0)),
                failing_jobs: s
                    .failing_jobs
                    .split(',')
                    .filter(|j| !j.is_empty())
                    .map(str::to_string)
                    .collect(),
                member: s.member,
                namespace,
                owner_lease: s.owner.strip_prefix(LEASE_OWNER).map(str::to_string),
                owner: owner_now(&s.owner, &holders),
                phase: s.phase,
                since: s.since,
                last_error: s.last_error,
                jobs: s.jobs,
                observed_at: s.observed_at,
            })
        })
        .collect();
    rows.sort_by(|a, b| a.member.cmp(&b.member));
    Ok(rows)
}

/// The holder of every Lease readable on the hub, by `<namespace>/<name>`, as a replica's
/// identity's pod name (`<pod>_<8 hex>`); empty if Leases are not listable.
async fn lease_holders(hub: &kube::Client) -> BTreeMap<String, String> {
    let api: Api<Lease> = Api::all(hub.clone());
    let Ok(leases) = api.list(&ListParams::default()).await else {
        return BTreeMap::new();
    };
    leases
        .items
        .into_iter()
        .filter_map(|l| {
            let key = format!("{}/{}", l.metadata.namespace?, l.metadata.name?);
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((key, pod_of(&holder).to_string()))
        })
        .collect()
}

/// The pod name of a replica's identity (`<pod>_<8 hex>`), or the identity as it is.
pub(crate) fn pod_of(identity: &str) -> &str {
    match identity.rsplit_once('_') {
        Some((pod, suffix))
            if suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_hexdigit()) =>
        {
            pod
        }
        _ => identity,
    }
}

/// Who writes for a member whose object says `published`: the holder of its Lease when known.
pub(crate) fn owner_now(published: &str, holders: &BTreeMap<String, String>) -> String {
    match published.strip_prefix(LEASE_OWNER) {
        Some(lease) => holders
            .get(lease)
            .cloned()
            .unwrap_or_else(|| format!("none ({published} not held)")),
        None => published.to_string(),
    }
}

/// Objects of `plural` (networking.fleet.azure.com) per namespace; `None` if not listable.
async fn count(hub: &kube::Client, plural: &str, kind: &str) -> Option<BTreeMap<String, usize>> {
    let gvk = GroupVersionKind::gvk("networking.fleet.azure.com", "v1alpha1", kind);
    let api: Api<DynamicObject> = Api::all_with(
        hub.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    );
    let listed = api.list_metadata(&ListParams::default()).await.ok()?;
    let mut counts = BTreeMap::new();
    for o in listed.items {
        if let Some(ns) = o.metadata.namespace {
            *counts.entry(ns).or_insert(0) += 1;
        }
    }
    Some(counts)
}

/// The aligned table `status` prints.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "MEMBER",
        "OWNER",
        "PHASE",
        "FAILING JOBS",
        "EXPORTS",
        "IMPORTS",
        "SINCE",
        "LAST ERROR",
    ];
    let count = |c: Option<usize>| c.map_or("-".to_string(), |c| c.to_string());
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.member.clone(),
                r.owner.clone(),
                r.phase.clone(),
                or_dash(&r.failing_jobs.join(",")),
                count(r.exports),
                count(r.imports),
                or_dash(&r.since),
                or_dash(&one_line(r.last_error.as_deref().unwrap_or(""))),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_string);
    for row in std::iter::once(&header).chain(&cells) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let _ = write!(out, "{} members", rows.len());
    out
}

fn or_dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.into() }
}

/// An error on one line, at most 120 characters (the JSON has it whole).
fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// A client of the hub from `kubeconfig`, else the usual configuration.
pub(crate) async fn hub(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no hub configuration: {e}"))?,
        Some(path) => {
            let named =
                |e: &dyn std::fmt::Display| format!("hub kubeconfig {}: {e}", path.display());
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| named(&e))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| named(&e))?
        }
    };
    kube::Client::try_from(config).map_err(|e| format!("hub client: {e}"))
}
