//! The membership job's decision (pure): what the member's InternalMemberCluster needs, given
//! its spec, its status as seen, the agent types we report for, and the clock.
//!
//! fleet-networking's agents each write their own `agentStatus` entry (one status write per
//! agent per heartbeat); here one write carries every networking agent's entry. An entry a
//! heartbeat has made fresh elsewhere (another writer: the reference agent still running) is
//! left as it is, so the two writers do not take turns overwriting each other.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    AGENT_JOINED, AgentStatus, AgentTypes, CLUSTER_STATE_JOIN, CLUSTER_STATE_LEAVE,
    InternalMemberCluster, InternalMemberClusterStatus,
};
use crate::api::{ConditionSpec, condition_matches, find_condition, set_condition};

/// The job's name, as `--controllers` spells it.
pub const NAME: &str = "internalmembercluster";

/// The reference's reason of `Joined=True`.
pub const REASON_JOINED: &str = "AgentJoined";
/// The reference's reason of `Joined=False`.
pub const REASON_LEFT: &str = "AgentLeft";

/// The heartbeat period varies by ±5 % around the hub's period, as the reference's requeue does
/// (so a thousand members started together do not write together forever).
pub const JITTER: f64 = 0.05;

/// What a member's agents clean up on leave, in the order the job does it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// The MultiClusterServiceAgent's: every MultiClusterService of the member, deleted and
    /// waited for.
    MultiClusterServices,
    /// The ServiceExportImportAgent's: every ServiceExport of the member, deleted and waited for.
    ServiceExports,
}

/// What one reconcile of an InternalMemberCluster is to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// `Join`: write `status` (when `Some`: a heartbeat or a changed condition), then look again
    /// after `next`. `others`: agent types whose heartbeat someone else wrote since our last.
    Join {
        status: Option<InternalMemberClusterStatus>,
        next: Duration,
        others: Vec<&'static str>,
    },
    /// `Leave`: clean up in this order, then write `status` (when `Some`: `AgentLeft`).
    Leave {
        cleanup: Vec<Cleanup>,
        status: Option<InternalMemberClusterStatus>,
    },
    /// A state the API does not know: nothing is written (the reference logs it).
    Invalid,
}

/// How a reconcile ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This replica does not write for the member now.
    Skipped,
    /// A heartbeat (and the `Joined` conditions) written.
    Heartbeat,
    /// Joined, and the heartbeats are fresh: nothing written.
    Joined,
    /// Another writer keeps an agent entry of ours fresh: reported, not overwritten.
    OtherWriter,
    /// Leaving: what is deleted is not gone yet.
    Leaving,
    /// `AgentLeft` written.
    Left,
    /// Left already: nothing written.
    Gone,
    /// `spec.state` is neither `Join` nor `Leave`.
    InvalidState,
}

impl Outcome {
    /// Stable label (`internalmembercluster:<label>` in metrics).
    pub fn label(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::Heartbeat => "heartbeat",
            Self::Joined => "joined",
            Self::OtherWriter => "other_writer",
            Self::Leaving => "leaving",
            Self::Left => "left",
            Self::Gone => "gone",
            Self::InvalidState => "invalid_state",
        }
    }
}

impl crate::controller::Outcome for Outcome {
    fn reconciled(self) -> crate::controller::Reconciled {
        crate::controller::Reconciled::Done {
            job: Some(NAME),
            outcome: self.label(),
            reason: None,
        }
    }
}

/// What the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    pub imc: &'a InternalMemberCluster,
    pub agents: AgentTypes,
    pub now: Timestamp,
    /// A number in [0, 1): where in the jitter band the next heartbeat falls.
    pub jitter: f64,
    /// The heartbeat this replica last wrote for each agent type, if it wrote one since it
    /// started (to tell another writer's heartbeat from ours).
    pub ours: &'a [(&'static str, Timestamp)],
}

/// The decision.
pub fn decide(o: &Observation<'_>) -> Plan {
    match o.imc.spec.state.as_str() {
        CLUSTER_STATE_JOIN => join(o),
        CLUSTER_STATE_LEAVE => leave(o),
        _ => Plan::Invalid,
    }
}

/// The heartbeat period the hub asks for; a nonsensical one (0 or negative) as 1 s.
pub fn period(imc: &InternalMemberCluster) -> Duration {
    let seconds = imc.heartbeat_period_seconds().max(1);
    Duration::from_secs(u64::from(seconds.unsigned_abs()))
}

/// The period with its jitter: within ±[`JITTER`] of `period` (`jitter` in [0, 1)).
pub fn jittered(period: Duration, jitter: f64) -> Duration {
    period.mul_f64(1.0 - JITTER + 2.0 * JITTER * jitter.clamp(0.0, 1.0))
}

fn join(o: &Observation<'_>) -> Plan {
    let period = period(o.imc);
    let want = joined(o.imc);
    let mut status = o.imc.status.clone().unwrap_or_default();
    let others = others(o, &status);
    let now = Time(whole_seconds(o.now));
    let mut write = false;
    for agent in o.agents.names() {
        let entry = entry_of(&mut status, agent);
        let converged = condition_matches(find_condition(&entry.conditions, AGENT_JOINED), &want);
        let age = age(o.now, entry.last_received_heartbeat.as_ref());
        // Due: the earliest a jittered period allows. Refreshed with it: every entry past half
        // a period, so entries written together stay together; a fresher one (someone else's
        // heartbeat) is left as it is.
        let due = age.is_none_or(|age| age >= period.mul_f64(1.0 - JITTER));
        write |= !converged || due;
        if !converged || age.is_none_or(|age| age >= period / 2) {
            set_condition(&mut entry.conditions, &want, now.clone());
            entry.last_received_heartbeat = Some(now.clone());
        }
    }
    if write {
        return Plan::Join {
            status: Some(status),
            next: jittered(period, o.jitter),
            others,
        };
    }
    // Nothing due: look again when the oldest entry of ours is (after a restart, or while
    // another writer keeps an entry fresh).
    let oldest = o
        .agents
        .names()
        .filter_map(|agent| age(o.now, heartbeat(o.imc, agent)))
        .max()
        .unwrap_or_default();
    Plan::Join {
        status: None,
        next: jittered(period, o.jitter)
            .saturating_sub(oldest)
            .min(period.mul_f64(1.0 + JITTER)),
        others,
    }
}

fn leave(o: &Observation<'_>) -> Plan {
    let mut cleanup = Vec::new();
    if o.agents.multi_cluster_service {
        cleanup.push(Cleanup::MultiClusterServices);
    }
    if o.agents.service_export_import {
        cleanup.push(Cleanup::ServiceExports);
    }
    let want = ConditionSpec::new(
        AGENT_JOINED,
        "False",
        REASON_LEFT,
        String::new(),
        o.imc.metadata.generation,
    );
    let mut status = o.imc.status.clone().unwrap_or_default();
    let now = Time(whole_seconds(o.now));
    let mut write = false;
    for agent in o.agents.names() {
        let entry = entry_of(&mut status, agent);
        if !condition_matches(find_condition(&entry.conditions, AGENT_JOINED), &want) {
            // No heartbeat: the member has left.
            set_condition(&mut entry.conditions, &want, now.clone());
            write = true;
        }
    }
    Plan::Leave {
        cleanup,
        status: write.then_some(status),
    }
}

/// `Joined=True` for the object's generation, as the reference sets it.
fn joined(imc: &InternalMemberCluster) -> ConditionSpec {
    ConditionSpec::new(
        AGENT_JOINED,
        "True",
        REASON_JOINED,
        String::new(),
        imc.metadata.generation,
    )
}

/// The agent types whose heartbeat in `status` is newer than the one we last wrote: someone
/// else writes it.
fn others(o: &Observation<'_>, status: &InternalMemberClusterStatus) -> Vec<&'static str> {
    o.ours
        .iter()
        .filter(|(agent, wrote)| {
            status
                .agent_status
                .iter()
                .find(|a| a.type_ == *agent)
                .and_then(|a| a.last_received_heartbeat.as_ref())
                .is_some_and(|seen| seen.0 > *wrote)
        })
        .map(|(agent, _)| *agent)
        .collect()
}

/// The entry of `agent`, appended when missing (fleet's `GetAgentStatus`).
fn entry_of<'s>(status: &'s mut InternalMemberClusterStatus, agent: &str) -> &'s mut AgentStatus {
    let at = match status.agent_status.iter().position(|a| a.type_ == agent) {
        Some(at) => at,
        None => {
            status.agent_status.push(AgentStatus {
                type_: agent.to_string(),
                ..Default::default()
            });
            status.agent_status.len() - 1
        }
    };
    &mut status.agent_status[at]
}

fn heartbeat<'i>(imc: &'i InternalMemberCluster, agent: &str) -> Option<&'i Time> {
    imc.agent_status(agent)?.last_received_heartbeat.as_ref()
}

/// How long ago `heartbeat` was (`None`: never; a heartbeat from the future counts as now).
fn age(now: Timestamp, heartbeat: Option<&Time>) -> Option<Duration> {
    let age = now.duration_since(heartbeat?.0);
    Some(age.max(SignedDuration::ZERO).unsigned_abs())
}

/// `t` as the API keeps it (RFC 3339 to the second): what we write is what we read back.
pub fn whole_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

#[cfg(test)]
mod tests;
