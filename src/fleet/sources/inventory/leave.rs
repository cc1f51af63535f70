//! A member leaving fleet's inventory: fleet, on a MemberCluster's deletion, sets its
//! InternalMemberCluster's `spec.state` to `Leave` and waits for the agents' `AgentLeft`
//! before it deletes the member's namespace. So the member stays engaged (its membership job
//! runs the leave) until the hub shows the leave done for every agent type we report for, or
//! the InternalMemberCluster (its namespace) is gone. Read on the hub, so every replica agrees.

use std::time::Duration;

use kube::api::Api;

use crate::api::{AGENT_JOINED, AgentTypes, InternalMemberCluster, find_condition};

/// How often a leaving member's InternalMemberCluster is read (only while some member leaves).
pub const POLL: Duration = Duration::from_secs(1);

/// Whether the leave is done: no InternalMemberCluster, or none of our agent types joined
/// (left, or never joined: a member that never ran has nothing to leave).
pub fn done(imc: Option<&InternalMemberCluster>, agents: AgentTypes) -> bool {
    let Some(imc) = imc else { return true };
    agents.names().all(|agent| {
        imc.agent_status(agent)
            .and_then(|s| find_condition(&s.conditions, AGENT_JOINED))
            .is_none_or(|c| c.status != "True")
    })
}

/// Reads member `name`'s InternalMemberCluster in `namespace`: `Ok(None)` when it (or its
/// namespace) is gone.
pub async fn read(
    hub: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<InternalMemberCluster>, kube::Error> {
    Api::<InternalMemberCluster>::namespaced(hub.clone(), namespace)
        .get_opt(name)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AgentStatus, InternalMemberClusterStatus};
    use crate::api::{MULTI_CLUSTER_SERVICE_AGENT, SERVICE_EXPORT_IMPORT_AGENT};

    fn imc(joined: &[(&str, &str)]) -> InternalMemberCluster {
        let mut imc: InternalMemberCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.kubernetes-fleet.io/v1beta1", "kind": "InternalMemberCluster",
            "metadata": {"name": "alpha", "namespace": "fleet-member-alpha"},
            "spec": {"state": "Leave"}
        }))
        .expect("imc");
        let agent_status = joined
            .iter()
            .map(|(agent, status)| {
                let mut s: AgentStatus = serde_json::from_value(serde_json::json!({
                    "type": agent,
                    "conditions": [{"type": "Joined", "status": status, "reason": "r",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
                }))
                .expect("agent status");
                s.type_ = agent.to_string();
                s
            })
            .collect();
        imc.status = Some(InternalMemberClusterStatus {
            agent_status,
            ..Default::default()
        });
        imc
    }

    #[test]
    fn the_leave_is_done_when_no_agent_of_ours_is_joined_or_the_object_is_gone() {
        let both = AgentTypes::default();
        assert!(done(None, both), "gone");
        assert!(done(Some(&imc(&[])), both), "never joined");
        let one_left = imc(&[
            (MULTI_CLUSTER_SERVICE_AGENT, "False"),
            (SERVICE_EXPORT_IMPORT_AGENT, "True"),
        ]);
        assert!(!done(Some(&one_left), both));
        let only_mcs = AgentTypes::parse(MULTI_CLUSTER_SERVICE_AGENT).expect("types");
        assert!(
            done(Some(&one_left), only_mcs),
            "the other agent is not ours"
        );
        let left = imc(&[
            (MULTI_CLUSTER_SERVICE_AGENT, "False"),
            (SERVICE_EXPORT_IMPORT_AGENT, "False"),
            ("MemberAgent", "True"),
        ]);
        assert!(done(Some(&left), both), "fleet's member agent is not ours");
    }
}
