//! What one EndpointSlice needs, decided from what was observed: a pure function, no I/O.
//!
//! The rules are fleet-networking's member EndpointSlice controller's (export, skip, unexport,
//! unique names, last-seen annotations: the `endpointslice` job) and its EndpointSliceExport
//! controller's (an export whose slice is gone, or whose slice's unique name is another, is
//! removed: the `endpointsliceexport` job), decided together per slice when both run
//! ([`Halves`]).

use std::net::Ipv4Addr;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub use super::last_seen::LastSeen;
use super::last_seen::since;
pub use super::model::SERVICE_NAME_LABEL;
use super::model::{ExportVerdict, ExportView, SliceView, digest};

/// The job's name, as `--controllers` spells it (and its metric labels' prefix).
pub const NAME: &str = "endpointslice";
/// The name of the cleanup half on its own, as `--controllers` spells it.
pub const CLEANUP_NAME: &str = "endpointsliceexport";

/// Which of the reference's two member controllers a member's exporter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Halves {
    /// The EndpointSlice controller: exports, names, stamps and unexports slices.
    pub export: bool,
    /// The EndpointSliceExport controller: deletes the exports whose slice is gone or whose
    /// slice's unique name is another.
    pub cleanup: bool,
}

impl Halves {
    /// Both, as the member agent runs them.
    pub const BOTH: Self = Self {
        export: true,
        cleanup: true,
    };
}
use crate::api::{
    ADDRESS_TYPE_IPV4, EndpointSliceExport, EndpointSliceExportSpec, ExportedEndpoint,
    ExportedObjectReference, OwnerServiceReference,
};
use crate::controller::writers::OtherWriter;

/// Everything one decision reads.
pub struct Observation<'a> {
    pub member: &'a str,
    pub halves: Halves,
    pub slice: &'a SliceView,
    /// The ServiceExport of the slice's Service, if any.
    pub export: Option<&'a ExportVerdict>,
    /// The hub's EndpointSliceExport named by the slice's unique-name annotation (when valid).
    pub named: Option<&'a ExportView>,
    /// Every EndpointSliceExport that refers to this slice's namespace/name.
    pub referring: &'a [&'a ExportView],
    pub now: Timestamp,
    /// Random suffix for a new unique name (five lowercase hex characters).
    pub suffix: &'a str,
    /// The most bytes one EndpointSliceExport may have as written (`--max-export-bytes`).
    pub max_bytes: u32,
}

/// How a reconcile ended, for logs, spans and the `outcome` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not exportable and never exported: nothing to do.
    Skipped,
    /// Its export would be larger than `--max-export-bytes`: not written (an export already
    /// in the hub stays as it was).
    TooLarge,
    Exported,
    Updated,
    Unchanged,
    Unexported,
    /// The slice's export is terminating in the hub: written again once it is gone.
    Waiting,
    /// The slice is gone: only its leftover exports (if any) were removed.
    Gone,
    /// Its export is another writer's (the agent still writing it): left alone.
    OtherWriter,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::TooLarge => "too_large",
            Self::Exported => "exported",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
            Self::Unexported => "unexported",
            Self::Waiting => "waiting",
            Self::Gone => "gone",
            Self::OtherWriter => "other_writer",
        }
    }
}

impl crate::controller::Outcome for Outcome {
    /// `endpointslice:<label>`.
    fn reconciled(self) -> crate::controller::Reconciled {
        crate::controller::Reconciled::of(NAME, self.label())
    }
}

/// The member write: the slice's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameChange {
    /// Set what is given (`None`: left as it is): a unique name (a first one, or a new one for a
    /// tampered or taken name) and the last-seen pair.
    Stamp {
        unique: Option<String>,
        last_seen: Option<LastSeen>,
    },
    /// Remove the unique name and the last-seen pair: the slice is withdrawn.
    Withdraw,
}

/// The hub write for the slice's own export.
#[derive(Debug, Clone, PartialEq)]
pub enum HubWrite {
    Create(Box<EndpointSliceExport>),
    Update {
        name: String,
        spec: Box<EndpointSliceExportSpec>,
    },
}

impl HubWrite {
    /// The export written.
    pub fn name(&self) -> &str {
        match self {
            HubWrite::Create(export) => export.metadata.name.as_deref().unwrap_or_default(),
            HubWrite::Update { name, .. } => name,
        }
    }
}

/// An EndpointSliceExport to delete (only the object of that UID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doomed {
    pub name: String,
    pub uid: Option<String>,
}

/// The writes that converge one slice, in the order they are made: deletes of the exports
/// that must go → the name annotation → the export's create or update.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub delete: Vec<Doomed>,
    pub name: Option<NameChange>,
    pub hub: Option<HubWrite>,
    /// Look again later even if nothing changes (an export still terminating).
    pub recheck: bool,
    /// Addresses left out because they are not IPv4 (named in a warning, never retried).
    pub malformed: Vec<String>,
    /// The size of the export that was not written for being too large (named in a warning).
    pub too_large: Option<usize>,
    /// The export was left to this other writer ([`Plan::left_to`]).
    pub held: Option<OtherWriter>,
    pub outcome: Outcome,
}

impl Plan {
    fn new(outcome: Outcome) -> Self {
        Self {
            delete: vec![],
            name: None,
            hub: None,
            recheck: false,
            malformed: vec![],
            too_large: None,
            held: None,
            outcome,
        }
    }

    /// The plan when `other` (the agent still running for the member) wrote the slice's
    /// export last: a plan that would update that export writes nothing at all, the slice's
    /// annotations included (the agent stamps those as well), and says why. Creating or
    /// withdrawing an export is not a second writer's business.
    pub fn left_to(self, other: Option<OtherWriter>) -> Self {
        match other {
            Some(other) if matches!(self.hub, Some(HubWrite::Update { .. })) => Self {
                held: Some(other),
                ..Self::new(Outcome::OtherWriter)
            },
            _ => self,
        }
    }

    /// Withdraws something on the view's word: to be confirmed with live reads first.
    pub fn withdraws(&self) -> bool {
        !self.delete.is_empty() || self.name == Some(NameChange::Withdraw)
    }

    pub fn writes(&self) -> usize {
        self.delete.len() + usize::from(self.name.is_some()) + usize::from(self.hub.is_some())
    }
}

/// Decides one slice that exists (in the view or live).
pub fn decide(o: &Observation<'_>) -> Plan {
    let slice = o.slice;
    if !o.halves.export {
        let mut plan = Plan::new(Outcome::Skipped);
        plan.delete = cleanup(o, slice.unique_name.as_deref());
        if !plan.delete.is_empty() {
            plan.outcome = Outcome::Unexported;
        }
        return plan;
    }
    // Only IPv4 slices are ever exported, and the address type never changes: nothing to do,
    // as in fleet-networking (an annotated one is left as it is).
    if slice.address_type != ADDRESS_TYPE_IPV4 {
        let mut plan = Plan::new(Outcome::Skipped);
        plan.delete = cleanup(o, slice.unique_name.as_deref());
        return plan;
    }
    if !exportable(slice, o.export) {
        return unexport(o);
    }
    let valid = slice
        .unique_name
        .as_ref()
        .filter(|n| is_dns1123_subdomain(n));
    let slice_uid = slice.metadata.uid.as_deref().unwrap_or_default();
    // A name is kept while its export in the hub is absent or this very slice's; a tampered
    // name, or one another slice's export holds, gets a new one (the reference drops it and
    // assigns one on its next pass: the same end, one write less).
    let kept = valid.filter(|_| o.named.is_none_or(|e| e.slice_uid == slice_uid));
    let (name, existing) = match kept {
        Some(name) => (name.clone(), o.named),
        None => (new_unique_name(o.member, slice, o.suffix), None),
    };
    let mut plan = Plan::new(Outcome::Unchanged);
    let (exported_since, last_seen) = since(slice, existing, o.now);
    let unique = kept.is_none().then(|| name.clone());
    if unique.is_some() || last_seen.is_some() {
        plan.name = Some(NameChange::Stamp { unique, last_seen });
    }
    plan.delete = cleanup(o, Some(&name));
    let (spec, malformed) = export_spec(o.member, slice, Time(exported_since));
    plan.malformed = malformed;
    plan.outcome = hub_write(&mut plan, existing, name, spec);
    if let Some(bytes) = plan.hub.as_ref().map(written_bytes)
        && bytes > usize::try_from(o.max_bytes).unwrap_or(usize::MAX)
    {
        // A member's slice cannot fill the hub: this version of it stays out.
        plan.hub = None;
        plan.too_large = Some(bytes);
        plan.outcome = Outcome::TooLarge;
    }
    plan
}

/// Sets the plan's hub write for the slice's own export under `name`: created when absent,
/// updated when it says something else, waited for while terminating.
fn hub_write(
    plan: &mut Plan,
    existing: Option<&ExportView>,
    name: String,
    spec: EndpointSliceExportSpec,
) -> Outcome {
    match existing {
        Some(e) if e.deleting => {
            plan.recheck = true;
            Outcome::Waiting
        }
        Some(e) if e.digest == digest(&spec) => Outcome::Unchanged,
        Some(_) => {
            plan.hub = Some(HubWrite::Update {
                name,
                spec: Box::new(spec),
            });
            Outcome::Updated
        }
        None => {
            let mut export = EndpointSliceExport::default();
            export.metadata.name = Some(name);
            export.spec = spec;
            plan.hub = Some(HubWrite::Create(Box::new(export)));
            Outcome::Exported
        }
    }
}

/// A slice that may not be exported (no Service, its ServiceExport absent, invalid, in conflict
/// or being deleted, or the slice being deleted): skipped if it never was; else its export goes
/// (the one its name names, when that one is this slice's) and then its annotations.
fn unexport(o: &Observation<'_>) -> Plan {
    let slice = o.slice;
    let mut plan = Plan::new(Outcome::Skipped);
    // With the cleanup half, every export of the slice goes: none matches a name it no
    // longer has.
    plan.delete = cleanup(o, None);
    if slice.unique_name.is_some() {
        let slice_uid = slice.metadata.uid.as_deref().unwrap_or_default();
        let linked = o.named.filter(|e| e.slice_uid == slice_uid);
        for e in doomed(linked.as_slice(), |e| {
            !plan.delete.iter().any(|d| d.name == e.id.name)
        }) {
            plan.delete.push(e);
        }
        plan.name = Some(NameChange::Withdraw);
    }
    if plan.writes() > 0 {
        plan.outcome = Outcome::Unexported;
    }
    plan
}

/// The cleanup half's deletes: the exports of the slice not under `keep` (its unique name),
/// when that half runs.
fn cleanup(o: &Observation<'_>, keep: Option<&str>) -> Vec<Doomed> {
    if !o.halves.cleanup {
        return vec![];
    }
    doomed(o.referring, |e| Some(e.id.name.as_str()) != keep)
}

/// The size of the export `write` leaves in the hub (its JSON; `usize::MAX` if it cannot be
/// serialised, so it is not written either).
fn written_bytes(write: &HubWrite) -> usize {
    let size =
        |export: &EndpointSliceExport| serde_json::to_vec(export).map_or(usize::MAX, |v| v.len());
    match write {
        HubWrite::Create(export) => size(export),
        HubWrite::Update { name, spec } => {
            let mut export = EndpointSliceExport::default();
            export.metadata.name = Some(name.clone());
            export.spec = (**spec).clone();
            size(&export)
        }
    }
}

/// Decides a slice the member no longer has (read live): its leftover exports go, with the
/// cleanup half (the EndpointSlice controller alone ignores a slice it cannot read).
pub fn decide_gone(halves: Halves, referring: &[&ExportView]) -> Plan {
    let mut plan = Plan::new(Outcome::Gone);
    if halves.cleanup {
        plan.delete = doomed(referring, |_| true);
    }
    plan
}

/// Exported while its Service is exported, valid and without conflict, and it is not being
/// deleted.
fn exportable(slice: &SliceView, export: Option<&ExportVerdict>) -> bool {
    slice.service.is_some()
        && slice.metadata.deletion_timestamp.is_none()
        && export.is_some_and(|e| e.valid_without_conflict)
}

fn doomed(referring: &[&ExportView], keep_not: impl Fn(&ExportView) -> bool) -> Vec<Doomed> {
    referring
        .iter()
        .filter(|e| !e.deleting && keep_not(e))
        .map(|e| Doomed {
            name: e.id.name.clone(),
            uid: e.id.uid.clone(),
        })
        .collect()
}

/// The export of `slice`: ready endpoints' IPv4 addresses, its ports and references, as the
/// reference writes them (the slice's kind and API version empty: its client leaves an object's
/// TypeMeta empty), exported since `exported_since` (the last-seen timestamp).
/// Also returns the addresses left out for not being IPv4 addresses.
fn export_spec(
    member: &str,
    slice: &SliceView,
    exported_since: Time,
) -> (EndpointSliceExportSpec, Vec<String>) {
    let mut malformed = vec![];
    let endpoints = slice
        .endpoints
        .iter()
        // Unknown readiness counts as ready, as the EndpointSlice API says.
        .filter(|e| e.ready.unwrap_or(true))
        .filter_map(|e| {
            let (ok, bad): (Vec<String>, Vec<String>) = e
                .addresses
                .iter()
                .cloned()
                .partition(|a| a.parse::<Ipv4Addr>().is_ok());
            malformed.extend(bad);
            (!ok.is_empty()).then_some(ExportedEndpoint { addresses: ok })
        })
        .collect();
    let ports = slice.ports.clone();
    let ns = slice.metadata.namespace.clone().unwrap_or_default();
    let name = slice.metadata.name.clone().unwrap_or_default();
    let generation = slice.metadata.generation.unwrap_or_default();
    let service = slice.service.clone().unwrap_or_default();
    let spec = EndpointSliceExportSpec {
        address_type: ADDRESS_TYPE_IPV4.into(),
        endpoints,
        ports,
        endpoint_slice_reference: ExportedObjectReference {
            cluster_id: member.into(),
            kind: String::new(),
            api_version: None,
            namespaced_name: format!("{ns}/{name}"),
            namespace: ns.clone(),
            name,
            resource_version: slice.metadata.resource_version.clone().unwrap_or_default(),
            generation,
            uid: slice.metadata.uid.clone().unwrap_or_default(),
            exported_since: Some(exported_since),
        },
        owner_service_reference: OwnerServiceReference {
            namespaced_name: format!("{ns}/{service}"),
            namespace: ns,
            name: service,
        },
    };
    (spec, malformed)
}

/// `<member>-<namespace>-<name>-<suffix>`, each part cut to a third of what a DNS subdomain
/// leaves; a random lowercase name if that is still not a DNS subdomain.
pub fn new_unique_name(member: &str, slice: &SliceView, suffix: &str) -> String {
    const PART: usize = (253 - 3 - 5) / 3;
    let cut = |s: &str| s.chars().take(PART).collect::<String>();
    let name = format!(
        "{}-{}-{}-{suffix}",
        cut(member),
        cut(slice.metadata.namespace.as_deref().unwrap_or_default()),
        cut(slice.metadata.name.as_deref().unwrap_or_default()),
    );
    if is_dns1123_subdomain(&name) {
        name
    } else {
        (0..25)
            .map(|_| char::from(b'a' + rand::random_range(0..26u8)))
            .collect()
    }
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels of lowercase alphanumerics
/// and '-', each starting and ending with an alphanumeric.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label_ok)
}

#[cfg(test)]
mod tests;
