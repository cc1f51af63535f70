//! The scrape-time series: leadership, hub reachability, member state, API requests,
//! rate-limiter wait and Azure counters, read from the process's [`crate::ownership::Claim`],
//! [`crate::fleet::FleetState`], each client's [`ClientStats`] and the Azure source when encoded.

use std::fmt;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::{AzureCounters, Labels, MetricsDetail, Shared, label, member_labels};
use crate::client::{ClientStats, RequestCount};
use crate::fleet::{JobPhase, MemberStatus, Phase};

/// Bytes the process's allocator reports: what live objects take and what it keeps resident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorBytes {
    pub allocated: u64,
    pub resident: u64,
}

/// Where `fleetnet_allocator_bytes` comes from: the binary picks the allocator, so the binary
/// says how to read it (a process has one allocator, hence one source for the process).
static ALLOCATOR: OnceLock<fn() -> Option<AllocatorBytes>> = OnceLock::new();

/// Makes `source` the allocator figures on `/metrics`; the first call wins.
pub fn report_allocator(source: fn() -> Option<AllocatorBytes>) {
    let _ = ALLOCATOR.set(source);
}

/// Encodes the scrape-time series.
pub(super) struct ScrapeCollector(pub(super) Arc<Shared>);

impl fmt::Debug for ScrapeCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScrapeCollector")
    }
}

/// One client's counters with the labels that name it.
struct ClientSeries {
    labels: Labels,
    stats: Arc<ClientStats>,
    /// Its requests by verb and resource too (the hub's always, a member's with
    /// `--metrics-detail=member`); else by code only.
    by_request: bool,
}

impl Shared {
    /// The member states and client counters to encode, copied so no lock is held meanwhile.
    fn scrape(&self) -> (Vec<(String, MemberStatus)>, Vec<ClientSeries>) {
        let members = self.members.read();
        let states = self.fleet.read().as_ref().map_or_else(Vec::new, |fleet| {
            let states = fleet.members().into_iter();
            states
                .filter(|(name, _)| members.contains_key(name))
                .collect()
        });
        let hub = self.hub_client.read().clone().map(|stats| ClientSeries {
            labels: vec![("client", "hub".into())],
            stats,
            by_request: true,
        });
        let by_request = self.detail == MetricsDetail::Member;
        let per_member = members.iter().filter_map(|(name, entry)| {
            Some(ClientSeries {
                labels: vec![("client", "member".into()), ("member", label(name))],
                stats: entry.member_client.clone()?,
                by_request,
            })
        });
        (states, hub.into_iter().chain(per_member).collect())
    }
}

/// One family of `rows`, skipped when there are none.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<Unit>),
    rows: Vec<(Labels, M)>,
) -> fmt::Result {
    let Some((_, first)) = rows.first() else {
        return Ok(());
    };
    let mut m = encoder.encode_descriptor(name, help, unit.as_ref(), first.metric_type())?;
    for (labels, value) in &rows {
        value.encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn encode_members(e: &mut DescriptorEncoder, states: &[(String, MemberStatus)]) -> fmt::Result {
    let phases = states.iter().flat_map(|(name, s)| {
        Phase::ALL.into_iter().map(move |p| {
            let labels = vec![("member", label(name)), ("state", p.as_str().to_string())];
            (labels, ConstGauge::new(i64::from(s.phase == p)))
        })
    });
    let help =
        "1 for the member's current phase (connecting, syncing, ready, failing), 0 for the others.";
    family(e, ("fleetnet_member_state", help, None), phases.collect())?;
    let flag = |f: fn(&MemberStatus) -> bool| {
        let rows = states
            .iter()
            .map(|(name, s)| (member_labels(name), ConstGauge::new(i64::from(f(s)))));
        rows.collect::<Vec<_>>()
    };
    let help = "1 when the member's kubeconfig was refused (a field the vetting does not allow, the file itself, its name): never connected.";
    family(
        e,
        ("fleetnet_member_kubeconfig_refused", help, None),
        flag(|s| s.refused),
    )?;
    let help =
        "1 when TLS verification of the member's API server is off (--allow-insecure-member-tls).";
    let tls = flag(|s| s.tls_verify_disabled);
    family(e, ("fleetnet_member_tls_verify_disabled", help, None), tls)?;
    let help = "1 when the member's connection goes through the proxy its kubeconfig names (--allow-member-proxy).";
    let proxied = flag(|s| s.proxy.is_some());
    family(e, ("fleetnet_member_proxied", help, None), proxied)?;
    // Only failing jobs have a series: a healthy fleet pays nothing per job.
    let failing_jobs = states.iter().flat_map(|(name, s)| {
        let failing = s.jobs.iter().filter(|(_, j)| j.phase == JobPhase::Failing);
        failing.map(move |(job, _)| {
            // `controller`, as --controllers names it: a `job` label would clash with the
            // target label Prometheus gives every series (it would become `exported_job`).
            let labels = vec![("member", label(name)), ("controller", (*job).to_string())];
            (labels, ConstGauge::new(1))
        })
    });
    let help = "1 for each job of a member that is failing (a watch failing, or not listed in time); no series for the others.";
    family(
        e,
        ("fleetnet_member_job_failing", help, None),
        failing_jobs.collect(),
    )?;
    let synced = states.iter().filter_map(|(name, s)| {
        let seconds = s.last_sync?.as_millisecond() as f64 / 1000.0;
        Some((member_labels(name), ConstGauge::new(seconds)))
    });
    let help = "When the member's watches last completed an initial sync (Unix time).";
    let unit = Some(Unit::Other("seconds".into()));
    family(
        e,
        ("fleetnet_member_last_sync_timestamp", help, unit),
        synced.collect(),
    )
}

/// A client's request counts as rows: by verb, resource and code, or summed by code.
fn request_rows(client: &ClientSeries) -> Vec<(Labels, ConstCounter)> {
    let code = |r: &RequestCount| r.code.map_or_else(|| "none".to_string(), |c| c.to_string());
    let snapshot = client.stats.snapshot();
    if !client.by_request {
        let mut by_code = std::collections::BTreeMap::<String, u64>::new();
        for r in &snapshot {
            *by_code.entry(code(r)).or_default() += r.count;
        }
        let rows = by_code.into_iter().map(|(code, n)| {
            let mut labels = client.labels.clone();
            labels.push(("code", code));
            (labels, ConstCounter::new(n))
        });
        return rows.collect();
    }
    let rows = snapshot.iter().map(|r| {
        let mut labels = client.labels.clone();
        labels.push(("verb", r.verb.to_string()));
        labels.push(("resource", label(&r.resource)));
        labels.push(("code", code(r)));
        (labels, ConstCounter::new(r.count))
    });
    rows.collect()
}

fn encode_clients(e: &mut DescriptorEncoder, clients: &[ClientSeries]) -> fmt::Result {
    let requests = clients.iter().flat_map(request_rows);
    let help = "Kubernetes API requests by client (member or hub), member, HTTP code (none: no response), and for the hub (for members with --metrics-detail=member) verb and resource kind.";
    family(e, ("fleetnet_api_requests", help, None), requests.collect())?;
    let waits = clients.iter().map(|c| {
        let wait = ConstCounter::new(c.stats.waited().as_secs_f64());
        (c.labels.clone(), wait)
    });
    let help = "Time requests waited for the client's token bucket and in-flight limit.";
    let unit = Some(Unit::Seconds);
    family(
        e,
        ("fleetnet_rate_limiter_wait", help, unit),
        waits.collect(),
    )?;
    let retries = clients
        .iter()
        .map(|c| (c.labels.clone(), ConstCounter::new(c.stats.retries())));
    let help = "Kubernetes API requests sent again by the client's retry layer (429; 5xx or no answer for reads).";
    family(e, ("fleetnet_api_retries", help, None), retries.collect())
}

fn encode_azure(e: &mut DescriptorEncoder, c: &AzureCounters) -> fmt::Result {
    for (name, help, value) in [
        (
            "fleetnet_azure_list_calls",
            "Public IP LIST operations against ARM.",
            c.list_calls,
        ),
        (
            "fleetnet_azure_arm_requests",
            "HTTP requests sent to ARM (every page, every retry).",
            c.arm_requests,
        ),
        (
            "fleetnet_azure_cache_hits",
            "Public IP lookups answered from the cache.",
            c.cache_hits,
        ),
        (
            "fleetnet_azure_cache_misses",
            "Public IP lookups that waited for a LIST.",
            c.cache_misses,
        ),
        ("fleetnet_azure_retries", "ARM requests re-sent.", c.retries),
        (
            "fleetnet_azure_throttled",
            "429 responses received from ARM.",
            c.throttled,
        ),
        (
            "fleetnet_azure_token_requests",
            "HTTP requests sent to the token endpoint (Entra ID or IMDS), every retry included.",
            c.token.requests,
        ),
        (
            "fleetnet_azure_token_retries",
            "Token requests sent again.",
            c.token.retries,
        ),
        (
            "fleetnet_azure_token_throttled",
            "429 responses received from the token endpoint.",
            c.token.throttled,
        ),
        (
            "fleetnet_azure_groups_evicted",
            "Resource groups dropped from the public IP cache: unused for a TTL, or the least recently used when the cache was full.",
            c.groups_evicted,
        ),
        (
            "fleetnet_azure_truncated_lists",
            "Public IP LISTs stopped at --azure-max-public-ips-per-group (the group holds more).",
            c.truncated_lists,
        ),
    ] {
        family(
            e,
            (name, help, None),
            vec![(vec![], ConstCounter::new(value))],
        )?;
    }
    let help = "Time ARM requests waited for the shared rate limiter.";
    let wait = ConstCounter::new(c.limiter_wait.as_secs_f64());
    family(
        e,
        ("fleetnet_azure_limiter_wait", help, Some(Unit::Seconds)),
        vec![(vec![], wait)],
    )
}

/// The process's own state: whether it writes, whether the hub answers.
fn encode_process(e: &mut DescriptorEncoder, shared: &Shared) -> fmt::Result {
    let flag = |v: bool| vec![(vec![], ConstGauge::new(i64::from(v)))];
    if let Some(leader) = shared.leader.read().as_ref() {
        let help = "1 while this replica writes: it holds the leader Lease, leader election is off, or members are sharded (each by its own Lease).";
        family(e, ("fleetnet_leader", help, None), flag(leader.may_write()))?;
    }
    if let Some(fleet) = shared.fleet.read().as_ref() {
        let help = "1 when the hub's API server answered this replica's last probe.";
        let reachable = flag(fleet.hub_reachable());
        family(e, ("fleetnet_hub_reachable", help, None), reachable)?;
        let help = "Removed members whose --cleanup-on-remove is recorded in the hub and not done yet (retried every rescan by their owner).";
        let pending = i64::try_from(fleet.cleanups().len()).unwrap_or(i64::MAX);
        let pending = vec![(vec![], ConstGauge::new(pending))];
        family(e, ("fleetnet_member_cleanups_pending", help, None), pending)?;
        let help = "Reads of the kubeconfig directory: one per change in it and one per --rescan-interval.";
        let scans = vec![(vec![], ConstCounter::new(fleet.scans()))];
        family(e, ("fleetnet_kubeconfig_scans", help, None), scans)?;
    }
    if let Some(bytes) = ALLOCATOR.get().and_then(|source| source()) {
        let help = "Heap bytes the allocator reports: allocated (live objects) and resident (pages it holds); resident well above allocated is memory kept, not used.";
        let rows = [("allocated", bytes.allocated), ("resident", bytes.resident)]
            .into_iter()
            .map(|(state, n)| {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                (vec![("state", state.to_string())], ConstGauge::new(n))
            })
            .collect();
        family(e, ("fleetnet_allocator", help, Some(Unit::Bytes)), rows)?;
    }
    // Scraped from the runtime that serves /metrics: the process's one runtime.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let help = "Tasks alive in the process's tokio runtime (members, watches, queues, connections): flat while members come and go.";
        let tasks = i64::try_from(runtime.metrics().num_alive_tasks()).unwrap_or(i64::MAX);
        let tasks = vec![(vec![], ConstGauge::new(tasks))];
        family(e, ("fleetnet_runtime_tasks", help, None), tasks)?;
    }
    Ok(())
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let (states, clients) = self.0.scrape();
        encode_process(&mut encoder, &self.0)?;
        encode_members(&mut encoder, &states)?;
        encode_clients(&mut encoder, &clients)?;
        match self.0.azure.read().clone() {
            Some(source) => encode_azure(&mut encoder, &source()),
            None => Ok(()),
        }
    }
}
