//! Which resource group a Service's public IP may be looked up in, and what the export says
//! when its Service names one the member may not read.
//!
//! The group comes from a Service annotation, written by whoever can edit Services in the
//! member; the Azure identity reading it is shared by every member. So the annotation only
//! chooses among the groups the operator gave the member (its default and `azureResourceGroups`);
//! a group outside them gets no ARM call, and the export carries the reference's behaviour for
//! a public IP that cannot be found (exported without the public IP fields, no error), plus a
//! condition and an Event that name the group.

use k8s_openapi::api::core::v1::Service;

use super::{
    AZURE_LB_RESOURCE_GROUP_ANNOTATION, EventKind, EventSpec, Plan, Settings, Subject,
    public_ip_query, set_and_tell,
};
use crate::api::{ConditionSpec, find_condition};

/// ServiceExport condition (ours, not fleet-networking's): `False` while the Service names a
/// resource group this member may not read; back to `True` once it no longer does. Absent on
/// exports that never named one.
pub const CONDITION_PUBLIC_IP_ALLOWED: &str = "PublicIPResourceGroupAllowed";
const NOT_ALLOWED: &str = "ResourceGroupNotAllowed";
const ALLOWED: &str = "ResourceGroupAllowed";

/// Longest group name quoted in a message: ARM's names are at most 90 characters, and an
/// annotation can be far longer than a condition message may be.
const QUOTED: usize = 100;

/// What the public IP lookup of a Service would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicIpQuery {
    /// Look up `ip` among the public IPs of `resource_group`, a group the member may read.
    Lookup { resource_group: String, ip: String },
    /// The Service names `resource_group`, which is not among the member's: no lookup.
    NotAllowed { resource_group: String },
}

/// `name` quoted with control characters escaped, cut at [`QUOTED`] characters.
fn quoted(name: &str) -> String {
    match name.char_indices().nth(QUOTED) {
        Some((cut, _)) => format!("{:?}…", &name[..cut]),
        None => format!("{name:?}"),
    }
}

/// Sets the condition (and tells once, with an Event) when the Service names a group outside
/// the member's allowlist; turns it back to `True` once it does not, if it was ever set.
pub(super) fn scope_condition(
    plan: &mut Plan,
    settings: &Settings,
    subject: &Subject<'_>,
    service: &Service,
) {
    let (ns, name, se) = (subject.ns, subject.name, subject.se);
    if let Some(PublicIpQuery::NotAllowed { resource_group }) = public_ip_query(settings, service) {
        let group = quoted(&resource_group);
        let member = &settings.member;
        let want = ConditionSpec::new(
            CONDITION_PUBLIC_IP_ALLOWED,
            "False",
            NOT_ALLOWED,
            format!(
                "service {ns}/{name} names resource group {group} ({AZURE_LB_RESOURCE_GROUP_ANNOTATION}), which is not allowed for member {member}: its public IP is not looked up and it is exported without the public IP fields (the operator allows groups per member: azureResourceGroups in --member-config)"
            ),
            subject.generation,
        );
        let event = EventSpec::new(
            EventKind::Warning,
            "PublicIPResourceGroupNotAllowed",
            format!(
                "Service {name} names resource group {group}, which is not allowed for member {member}; its public IP is not looked up"
            ),
        );
        set_and_tell(plan, se, want, event);
        return;
    }
    let was_refused = find_condition(se.conditions(), CONDITION_PUBLIC_IP_ALLOWED)
        .is_some_and(|c| c.status != "True");
    if was_refused {
        let want = ConditionSpec::new(
            CONDITION_PUBLIC_IP_ALLOWED,
            "True",
            ALLOWED,
            format!(
                "service {ns}/{name} names no resource group outside member {}'s",
                settings.member
            ),
            subject.generation,
        );
        let event = EventSpec::new(
            EventKind::Normal,
            "PublicIPResourceGroupAllowed",
            format!("Service {name} no longer names a resource group that is not allowed"),
        );
        set_and_tell(plan, se, want, event);
    }
}
