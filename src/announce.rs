//! What the process tells its operator about itself, outside any member: the startup line (at
//! INFO: what it serves, as whom, within which budgets) and the hub's long outages (a WARN once
//! the hub has been unreachable for [`HUB_OUTAGE_WARN_AFTER`], repeated at most once per
//! [`HUB_OUTAGE_REPEAT`], and an INFO when it is back). The decisions are pure values,
//! unit-tested; the callers log them.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::fleet::registry;

/// How long the hub may be unreachable before a WARN says so.
pub const HUB_OUTAGE_WARN_AFTER: Duration = Duration::from_secs(60);
/// The least time between two WARNs of one outage.
pub const HUB_OUTAGE_REPEAT: Duration = Duration::from_secs(60);

/// Logs the startup line: members by source, jobs, this replica's identity and mode, budgets.
pub fn log_startup(config: &Config) {
    let dir = &config.runtime.kubeconfig_dir;
    // A count now: the sources are read again by the fleet right after.
    let files = registry::scan_places(dir).map_or(0, |found| found.len());
    let s = Startup::of(config, files);
    tracing::info!(
        kubeconfig_dir = %dir.display(),
        member_files = s.member_files,
        member_secrets = %s.member_secrets,
        jobs = %s.jobs,
        instance = %s.instance,
        mode = %s.mode,
        member_qps = s.member_qps,
        member_burst = s.member_burst,
        hub_qps = s.hub_qps,
        hub_burst = s.hub_burst,
        "serving: members from {} file(s) of {} and {}; jobs {}; {}; budgets: member {}/s burst {}, hub {}/s burst {}",
        s.member_files,
        dir.display(),
        s.member_secrets,
        s.jobs,
        s.mode,
        s.member_qps,
        s.member_burst,
        s.hub_qps,
        s.hub_burst,
    );
}

/// The startup line's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Startup {
    pub member_files: usize,
    /// `Secrets labelled … in <ns>`, or `no member Secrets`.
    pub member_secrets: String,
    pub jobs: String,
    pub instance: String,
    /// `one replica`, `leader election on Lease <ns>/<name> as <identity>`, `sharded over N
    /// shard Leases <ns>/<name>-* as <identity>`.
    pub mode: String,
    pub member_qps: f64,
    pub member_burst: u32,
    pub hub_qps: f64,
    pub hub_burst: u32,
}

impl Startup {
    /// The values of `config`, with `member_files` files in the kubeconfig directory.
    pub fn of(config: &Config, member_files: usize) -> Startup {
        let runtime = &config.runtime;
        let member_secrets = match &runtime.member_secrets_namespace {
            Some(ns) => format!(
                "Secrets labelled {}=true in {ns}",
                crate::fleet::sources::secrets::MEMBER_LABEL
            ),
            None => "no member Secrets".to_string(),
        };
        let mode = match &config.leader_election {
            None => "one replica (no election)".to_string(),
            Some(le) if le.shard_members => format!(
                "sharded over {} shard Leases {}/{}-* as {}",
                le.shards, le.namespace, le.name, le.identity
            ),
            Some(le) => format!(
                "leader election on Lease {}/{} as {}",
                le.namespace, le.name, le.identity
            ),
        };
        Startup {
            member_files,
            member_secrets,
            jobs: runtime.controllers.to_string(),
            instance: runtime.instance.clone(),
            mode,
            member_qps: runtime.member_limits.qps,
            member_burst: runtime.member_limits.burst,
            hub_qps: config.hub_limits.qps,
            hub_burst: config.hub_limits.burst,
        }
    }
}

/// What to log about the hub after one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubSays {
    /// Nothing new.
    Nothing,
    /// WARN: unreachable for this long.
    StillDown(Duration),
    /// INFO: reachable again after an outage this long.
    Back(Duration),
}

/// The hub's outage, as the probes see it.
#[derive(Debug, Clone, Default)]
pub struct HubOutage {
    /// The first failed probe of the current outage.
    since: Option<Instant>,
    /// The last WARN of the current outage.
    warned: Option<Instant>,
}

impl HubOutage {
    /// The probe at `now` found the hub `reachable` (or not): what to log.
    pub fn observe(&mut self, reachable: bool, now: Instant) -> HubSays {
        match (reachable, self.since) {
            (true, None) => HubSays::Nothing,
            (true, Some(since)) => {
                *self = HubOutage::default();
                HubSays::Back(now.saturating_duration_since(since))
            }
            (false, None) => {
                self.since = Some(now);
                HubSays::Nothing
            }
            (false, Some(since)) => {
                let down = now.saturating_duration_since(since);
                let due = self
                    .warned
                    .is_none_or(|at| now.saturating_duration_since(at) >= HUB_OUTAGE_REPEAT);
                if down >= HUB_OUTAGE_WARN_AFTER && due {
                    self.warned = Some(now);
                    return HubSays::StillDown(down);
                }
                HubSays::Nothing
            }
        }
    }

    /// Logs what `observe` said.
    pub fn log(says: HubSays) {
        match says {
            HubSays::Nothing => {}
            HubSays::StillDown(down) => tracing::warn!(
                down_secs = down.as_secs(),
                "hub unreachable for {}s: nothing is exported, imported or cleaned up until it answers",
                down.as_secs()
            ),
            HubSays::Back(down) => tracing::info!(
                down_secs = down.as_secs(),
                "hub reachable again after {}s",
                down.as_secs()
            ),
        }
    }
}

/// Hub reachability for `/readyz`, every 5 s, through `control` (the control client: our own
/// queue of writes never makes the hub look unreachable).
pub async fn probe_hub(
    control: kube::Client,
    state: std::sync::Arc<crate::fleet::FleetState>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    let mut outage = HubOutage::default();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let ok = crate::fleet::answers(&control, Duration::from_secs(5))
            .await
            .is_ok();
        if ok != state.hub_reachable() {
            tracing::info!(reachable = ok, "hub reachability changed");
        }
        HubOutage::log(outage.observe(ok, std::time::Instant::now()));
        state.set_hub_reachable(ok);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_outage_warns_once_a_minute_and_its_end_is_told() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut outage = HubOutage::default();
        assert_eq!(outage.observe(true, at(0)), HubSays::Nothing);
        // A short outage: no WARN, its end told.
        assert_eq!(outage.observe(false, at(5)), HubSays::Nothing);
        assert_eq!(outage.observe(false, at(30)), HubSays::Nothing);
        assert_eq!(
            outage.observe(true, at(35)),
            HubSays::Back(Duration::from_secs(30))
        );
        assert_eq!(outage.observe(true, at(40)), HubSays::Nothing);
        // A long one: a WARN past 60 s, then at most once a minute.
        let mut said = vec![];
        for s in (100..=300).step_by(5) {
            said.push((s, outage.observe(false, at(s))));
        }
        let warns: Vec<u64> = said
            .iter()
            .filter(|(_, says)| matches!(says, HubSays::StillDown(_)))
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(warns, [160, 220, 280]);
        assert_eq!(said[12].1, HubSays::StillDown(Duration::from_secs(60)));
        assert_eq!(
            outage.observe(true, at(301)),
            HubSays::Back(Duration::from_secs(201))
        );
    }

    #[test]
    fn the_startup_line_says_sources_jobs_mode_and_budgets() {
        let mut config = Config::builder(None, "kubeconfigs").build().expect("valid");
        let line = Startup::of(&config, 3);
        assert_eq!(line.member_files, 3);
        assert_eq!(line.mode, "one replica (no election)");
        assert_eq!(line.jobs, config.runtime.controllers.to_string());
        assert_eq!(
            (line.hub_qps, line.hub_burst),
            (config.hub_limits.qps, config.hub_limits.burst)
        );
        config.leader_election = Some(crate::config::LeaderElection {
            namespace: "rel".into(),
            name: "fleetnet-hub".into(),
            identity: "pod-a_1".into(),
            shard_members: true,
            shards: 4,
        });
        config.runtime.member_secrets_namespace = Some("rel".into());
        let line = Startup::of(&config, 0);
        assert_eq!(
            line.mode,
            "sharded over 4 shard Leases rel/fleetnet-hub-* as pod-a_1"
        );
        assert!(
            line.member_secrets.ends_with("=true in rel"),
            "{}",
            line.member_secrets
        );
    }
}
