//! fleet's `InternalMemberCluster` (group `cluster.kubernetes-fleet.io`, v1beta1), in the member's
//! hub namespace: whether the member is to join or leave the fleet, and where each of its agents
//! reports that it has (the `agentStatus` list; the membership job writes the networking agents'
//! entries). Its status has fields other agents write (conditions, properties, resource usage):
//! they are kept as read, so a write of ours never drops them.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// fleet's cluster API group.
pub const FLEET_CLUSTER_GROUP: &str = "cluster.kubernetes-fleet.io";

/// `spec.state`: the member is to be in the fleet.
pub const CLUSTER_STATE_JOIN: &str = "Join";
/// `spec.state`: the member is to leave the fleet.
pub const CLUSTER_STATE_LEAVE: &str = "Leave";
/// The agent condition type saying whether an agent has joined.
pub const AGENT_JOINED: &str = "Joined";
/// The networking agent that runs the MultiClusterService job (`mcs-controller-manager`).
pub const MULTI_CLUSTER_SERVICE_AGENT: &str = "MultiClusterServiceAgent";
/// The networking agent that runs the export and import jobs (`member-net-controller-manager`).
pub const SERVICE_EXPORT_IMPORT_AGENT: &str = "ServiceExportImportAgent";

object! {
    /// InternalMemberCluster: fleet's per-member object in the member's hub namespace.
    pub struct InternalMemberCluster {
        pub spec: InternalMemberClusterSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<InternalMemberClusterStatus>,
    }
    group FLEET_CLUSTER_GROUP, kind "InternalMemberCluster", plural "internalmemberclusters",
    scope NamespaceResourceScope, version |_v: ()| "v1beta1"
}

/// What fleet's hub asks of the member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InternalMemberClusterSpec {
    /// `Join` or `Leave`.
    pub state: String,
    /// How often each agent reports (default 60 s, as the CRD defaults it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_period_seconds: Option<i32>,
}

/// The member's status as its agents report it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InternalMemberClusterStatus {
    /// One entry per agent type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_status: Vec<AgentStatus>,
    /// Every other field, kept as read.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// One agent's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// The agent type, e.g. [`SERVICE_EXPORT_IMPORT_AGENT`].
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_received_heartbeat: Option<Time>,
}

impl InternalMemberCluster {
    /// The heartbeat period the hub asks for, in seconds (the CRD's default when unset).
    pub fn heartbeat_period_seconds(&self) -> i32 {
        self.spec.heartbeat_period_seconds.unwrap_or(60)
    }

    /// The report of agent `agent_type`, if there is one.
    pub fn agent_status(&self, agent_type: &str) -> Option<&AgentStatus> {
        self.status
            .as_ref()?
            .agent_status
            .iter()
            .find(|a| a.type_ == agent_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_status_fields_other_agents_write() {
        let status = serde_json::json!({
            "agentStatus": [{"type": "MemberAgent", "lastReceivedHeartbeat": "2026-01-02T03:04:05Z"}],
            "conditions": [{"type": "x", "status": "True", "reason": "r", "message": "",
                            "lastTransitionTime": "2026-01-02T03:04:05Z"}],
            "properties": {"k": {"value": "v"}},
            "resourceUsage": {"capacity": {"cpu": "4"}}
        });
        let imc: InternalMemberCluster = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m1", "namespace": "fleet-member-m1"},
            "spec": {"state": "Join", "heartbeatPeriodSeconds": 30},
            "status": status
        }))
        .expect("deserializes");
        assert_eq!(imc.heartbeat_period_seconds(), 30);
        assert!(imc.agent_status("MemberAgent").is_some());
        let back = serde_json::to_value(imc.status.as_ref().expect("status")).expect("serializes");
        assert_eq!(back, status);
    }
}

/// Which networking agents the membership job reports for (`--agent-types`): the reference runs
/// one reconciler per agent type; the hub reports both in one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentTypes {
    /// `MultiClusterServiceAgent` (the MultiClusterService job's agent).
    pub multi_cluster_service: bool,
    /// `ServiceExportImportAgent` (the export and import jobs' agent).
    pub service_export_import: bool,
}

impl Default for AgentTypes {
    /// Both.
    fn default() -> Self {
        Self {
            multi_cluster_service: true,
            service_export_import: true,
        }
    }
}

impl AgentTypes {
    /// The agent types, in the order the reference's agents are listed.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + use<> {
        [
            (self.multi_cluster_service, MULTI_CLUSTER_SERVICE_AGENT),
            (self.service_export_import, SERVICE_EXPORT_IMPORT_AGENT),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
    }

    /// Parses a comma-separated list of agent type names (at least one).
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut types = Self {
            multi_cluster_service: false,
            service_export_import: false,
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                MULTI_CLUSTER_SERVICE_AGENT => types.multi_cluster_service = true,
                SERVICE_EXPORT_IMPORT_AGENT => types.service_export_import = true,
                _ => {
                    return Err(format!(
                        "unknown agent type {name:?}; known: {MULTI_CLUSTER_SERVICE_AGENT}, {SERVICE_EXPORT_IMPORT_AGENT}"
                    ));
                }
            }
        }
        match types.names().next() {
            Some(_) => Ok(types),
            None => Err("no agent type named".into()),
        }
    }
}

impl std::fmt::Display for AgentTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.names().collect::<Vec<_>>().join(","))
    }
}

#[cfg(test)]
mod agent_types_tests {
    use super::AgentTypes;

    #[test]
    fn agent_types_parse_and_print() {
        let both = AgentTypes::parse("MultiClusterServiceAgent, ServiceExportImportAgent");
        assert_eq!(both, Ok(AgentTypes::default()));
        let one = AgentTypes::parse("ServiceExportImportAgent").expect("parses");
        assert_eq!(one.to_string(), "ServiceExportImportAgent");
        assert!(AgentTypes::parse("MemberAgent").is_err());
        assert!(AgentTypes::parse(" ").is_err());
    }
}
