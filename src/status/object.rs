//! The `MemberStatus` object: its names, what it holds, and when it is written.

use std::collections::BTreeMap;

use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};

/// API group of the status objects.
pub const GROUP: &str = "fleetnet.azure.com";
/// Its version.
pub const VERSION: &str = "v1alpha1";
/// Its kind.
pub const KIND: &str = "MemberStatus";
/// Its plural.
pub const PLURAL: &str = "memberstatuses";
/// The one object's name in each member's hub namespace.
pub const NAME: &str = "fleetnet-hub";
/// The label `status` selects the objects with (value [`MANAGED_BY`]).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "fleetnet-hub";
/// The label naming the member.
pub const MEMBER_LABEL: &str = "fleetnet.azure.com/member";
/// The longest error text published: a member's error text costs only its own object.
pub const MAX_ERROR: usize = 1024;

/// The `MemberStatus` resource, for dynamic APIs.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// What a member's owner publishes: the `.status` of its `MemberStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The member's name.
    #[serde(default)]
    pub member: String,
    /// Who writes for the member: `Lease <namespace>/<name>` (the leader Lease, or the member's
    /// shard's; `status` shows its holder), or [`NO_ELECTION_OWNER`]. Not the replica itself:
    /// a rollout renames every replica, and would rewrite every member's object.
    #[serde(default)]
    pub owner: String,
    /// `connecting`, `syncing`, `ready` or `failing`.
    #[serde(default)]
    pub phase: String,
    /// When the phase last changed (RFC 3339).
    #[serde(default)]
    pub since: String,
    /// The last error, redacted as on `/members` (no credential ever reaches it), clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Where the member is declared (its file, or `Secret <ns>/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Each job by name.
    #[serde(default)]
    pub jobs: BTreeMap<String, JobState>,
    /// The failing jobs, comma-separated (a printer column).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failing_jobs: String,
    /// When this was written (RFC 3339); not compared.
    #[serde(default)]
    pub observed_at: String,
}

/// One job's state in a [`Status`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobState {
    /// `syncing`, `ready` or `failing`.
    #[serde(default)]
    pub phase: String,
    /// Why it last failed, clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When its phase last changed (RFC 3339).
    #[serde(default)]
    pub since: String,
}

/// `text` clipped to [`MAX_ERROR`] bytes, on a character boundary.
pub fn clip(text: &str) -> String {
    if text.len() <= MAX_ERROR {
        return text.to_string();
    }
    let mut end = MAX_ERROR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What to write, given the member's status `now` and what the hub holds (`None`: nothing):
/// nothing when they agree. A phase unchanged keeps the hub's `since`, and an error the hub
/// shows is kept until the next one (as `/members` keeps it after recovery): a replica that
/// restarts, or takes a member over, republishes nothing of a member whose state is the same.
pub fn decide(mut now: Status, on_hub: Option<&Status>, observed_at: &str) -> Option<Status> {
    now.failing_jobs = failing_jobs(&now.jobs);
    if let Some(hub) = on_hub {
        if hub.phase == now.phase {
            now.since.clone_from(&hub.since);
        }
        if now.last_error.is_none() {
            now.last_error.clone_from(&hub.last_error);
        }
        for (name, job) in &mut now.jobs {
            let Some(theirs) = hub.jobs.get(name) else {
                continue;
            };
            if theirs.phase == job.phase {
                job.since.clone_from(&theirs.since);
            }
            if job.last_error.is_none() {
                job.last_error.clone_from(&theirs.last_error);
            }
        }
        now.observed_at.clone_from(&hub.observed_at);
        if &now == hub {
            return None;
        }
    }
    now.observed_at = observed_at.to_string();
    Some(now)
}

fn failing_jobs(jobs: &BTreeMap<String, JobState>) -> String {
    let failing: Vec<&str> = jobs
        .iter()
        .filter(|(_, j)| j.phase == "failing")
        .map(|(name, _)| name.as_str())
        .collect();
    failing.join(",")
}

/// How [`Status::owner`] names a Lease: this, then `<namespace>/<name>`.
pub const LEASE_OWNER: &str = "Lease ";

/// [`Status::owner`] without an election: every replica writes.
pub const NO_ELECTION_OWNER: &str = "every replica (no election)";
