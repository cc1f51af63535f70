//! Prometheus metrics of the whole process: one [`Metrics`], shared by every member's
//! exporter as its [`ReconcileObserver`], rendered by [`Metrics::encode`] for `/metrics`.
//!
//! Two kinds of series:
//! - event-driven ones (reconciles, hub writes, latencies), recorded by the observer calls;
//! - scrape-time ones (member state, API requests, rate-limiter wait, Azure counters), read
//!   from [`FleetState`], each client's [`ClientStats`] and the Azure source when encoded
//!   (`scrape`).
//!
//! Cardinality is bounded: labels are member names, outcome labels (a fixed set), verbs,
//! resources (kinds, never object names), HTTP codes and write ops. No object name is a label.
//! [`Metrics::remove_member`] drops every series of a member that left the fleet.
//!
//! Per member, only what the shipped alerts and dashboard read is kept by default
//! ([`MetricsDetail::Fleet`]); the breakdowns by outcome, by request verb and resource, and the
//! duration histogram per member cost some 40 series a member more and come with
//! [`MetricsDetail::Member`] (`--metrics-detail=member`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::client::ClientStats;
use crate::controller::{ReconcileObserver, Reconciled};
use crate::fleet::{FleetState, MemberHooks};

mod scrape;
use scrape::ScrapeCollector;
pub use scrape::{AllocatorBytes, report_allocator};

#[cfg(test)]
mod detail_tests;

/// `Content-Type` of [`Metrics::encode`] (OpenMetrics text 1.0, exemplars included).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of [`Metrics::encode_prometheus`] (Prometheus text 0.0.4, no exemplars).
pub const PROMETHEUS_CONTENT_TYPE: &str =
    prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Buckets of the reconcile duration histogram, seconds (5 ms … 60 s).
const RECONCILE_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];
/// Buckets of the export / conflict latency histograms, seconds (50 ms … 10 min).
const LATENCY_BUCKETS: [f64; 15] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0,
];

/// Azure counters at one instant, as the Azure client reports them (monotonic totals).
pub use crate::azure::AzureStatsSnapshot as AzureCounters;

/// Reads the Azure counters at scrape time.
pub type AzureSource = Arc<dyn Fn() -> AzureCounters + Send + Sync>;

/// The labels of one series.
type Labels = Vec<(&'static str, String)>;

pub use crate::config::MetricsDetail;

/// The outcome label a member's `fleetnet_reconcile_total` carries: errors always by step (the
/// alerts name the failed step); without member detail every other outcome is `ok` (the fleet's
/// outcomes are in `fleetnet_reconcile_outcomes_total`).
fn member_outcome(detail: MetricsDetail, outcome: &Reconciled, label: &str) -> String {
    match (detail, outcome) {
        (MetricsDetail::Fleet, Reconciled::Done { .. }) => "ok".into(),
        _ => label.to_string(),
    }
}

fn member_labels(name: &str) -> Labels {
    vec![("member", label(name))]
}

/// A label value from outside data (a member name comes from a file name) with its control
/// characters escaped: the exposition format escapes only `\\`, `"` and line feeds, and a
/// carriage return or an escape sequence in a label would forge or hide lines of `/metrics`
/// for whoever reads it.
fn label(value: &str) -> String {
    crate::telemetry::escape_control(value).into_owned()
}

/// Exemplar labels: the trace of the observation (only when it is sampled).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceLabels {
    trace_id: String,
}

type ExemplarHistogram = HistogramWithExemplars<TraceLabels>;

/// fleet-networking's export-duration metric, as its dashboards and perf tests query it.
const EXPORT_DURATION_METRIC: &str = "fleet_networking_service_export_duration_milliseconds";
const EXPORT_DURATION_BUCKETS_MS: [f64; 6] = [1000.0, 2500.0, 5000.0, 10000.0, 25000.0, 50000.0];
/// The reference caps a data point here so outliers do not skew averages.
const EXPORT_DURATION_CAP_MS: u128 = 100_000;

/// fleet-networking's export-import duration metric (its member EndpointSliceImport
/// controller's), same buckets and cap.
const IMPORT_DURATION_METRIC: &str =
    "fleet_networking_endpointslice_export_import_duration_milliseconds";

/// The labels of fleet-networking's import metric: where from, where to, whether first.
fn import_labels(origin: &str, destination: &str, first: bool) -> Labels {
    vec![
        ("origin_cluster_id", label(origin)),
        ("destination_cluster_id", label(destination)),
        ("is_first_import", first.to_string()),
    ]
}

/// The label of fleet-networking's metric: the member.
fn origin(member: &str) -> Labels {
    vec![("origin_cluster_id", label(member))]
}

/// The reference's rules: a duration that does not make sense (<= 0) counts as one second;
/// larger ones are capped.
fn export_duration_ms(took: Duration) -> f64 {
    match took.as_millis() {
        0 => 1000.0,
        ms => ms.min(EXPORT_DURATION_CAP_MS) as f64,
    }
}

/// What Metrics knows of one member.
#[derive(Default)]
struct MemberEntry {
    member_client: Option<Arc<ClientStats>>,
    /// Outcome labels recorded, so that removal finds every series.
    outcomes: BTreeSet<String>,
    /// Origins of the slices imported into the member (import duration series).
    import_origins: BTreeSet<String>,
}

/// State read at scrape time, shared with the registry's collector.
#[derive(Default)]
struct Shared {
    members: RwLock<BTreeMap<String, MemberEntry>>,
    hub_client: RwLock<Option<Arc<ClientStats>>>,
    fleet: RwLock<Option<Arc<FleetState>>>,
    leader: RwLock<Option<crate::ownership::Claim>>,
    azure: RwLock<Option<AzureSource>>,
    detail: MetricsDetail,
}

/// The process's metrics. Share it as `Arc<Metrics>`: it is the exporters' observer and the
/// `/metrics` source at once.
pub struct Metrics {
    registry: Registry,
    shared: Arc<Shared>,
    reconciles: Family<Labels, Counter>,
    outcomes: Family<Labels, Counter>,
    durations: Family<Labels, ExemplarHistogram, fn() -> ExemplarHistogram>,
    in_flight: Family<Labels, Gauge>,
    controller_errors: Family<Labels, Counter>,
    ise_writes: Family<Labels, Counter>,
    slice_writes: Family<Labels, Counter>,
    dropped: Family<Labels, Counter>,
    export_latency: ExemplarHistogram,
    conflict_latency: Histogram,
    export_duration: Family<Labels, Histogram, fn() -> Histogram>,
    import_duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered, no member yet, with the default detail ([`MetricsDetail::Fleet`]).
    pub fn new() -> Self {
        Self::with_detail(MetricsDetail::default())
    }

    /// The per-member detail this registry records.
    pub fn detail(&self) -> MetricsDetail {
        self.shared.detail
    }

    /// The labels of a per-member series that only [`MetricsDetail::Member`] breaks down by
    /// member (none: one series for the fleet).
    fn detailed_labels(&self, member: &str) -> Labels {
        match self.shared.detail {
            MetricsDetail::Member => member_labels(member),
            MetricsDetail::Fleet => vec![],
        }
    }
}

/// Registers each `(name, help, unit, metric)`, in order (the order of the families on
/// `/metrics`).
macro_rules! register {
    ($registry:expr, $(($name:expr, $help:expr, $unit:expr, $metric:expr)),* $(,)?) => {
        $(match $unit {
            Some(unit) => $registry.register_with_unit($name, $help, unit, $metric),
            None => $registry.register($name, $help, $metric),
        })*
    };
}

impl Metrics {
    /// Every family registered, no member yet, with `detail` per member.
    pub fn with_detail(detail: MetricsDetail) -> Self {
        let mut m = Self {
            registry: Registry::default(),
            shared: Arc::new(Shared {
                detail,
                ..Shared::default()
            }),
            reconciles: Family::default(),
            outcomes: Family::default(),
            durations: Family::new_with_constructor(|| {
                HistogramWithExemplars::new(RECONCILE_BUCKETS.into_iter())
            }),
            in_flight: Family::default(),
            controller_errors: Family::default(),
            ise_writes: Family::default(),
            slice_writes: Family::default(),
            dropped: Family::default(),
            export_latency: HistogramWithExemplars::new(LATENCY_BUCKETS.into_iter()),
            conflict_latency: Histogram::new(LATENCY_BUCKETS),
            export_duration: Family::new_with_constructor(|| {
                Histogram::new(EXPORT_DURATION_BUCKETS_MS)
            }),
            import_duration: Family::new_with_constructor(|| {
                Histogram::new(EXPORT_DURATION_BUCKETS_MS)
            }),
        };
        // Registered in this order: the order of the families in a scrape.
        m.register_reconciles();
        m.register_writes();
        m.register_latencies();
        m.registry
            .register_collector(Box::new(ScrapeCollector(m.shared.clone())));
        m
    }

    /// The reconciles: how many, how long, how many now, and the errors around them.
    fn register_reconciles(&mut self) {
        let registry = &mut self.registry;
        register!(
            registry,
            (
                "fleetnet_reconcile",
                "Reconciles by member and outcome: error:<step>, and ok for the others (with --metrics-detail=member every outcome: exported, unexported, skipped, invalid:<reason>, <job>:<outcome>)",
                None,
                self.reconciles.clone()
            ),
            (
                "fleetnet_reconcile_outcomes",
                "Reconciles of every member, by outcome (exported, unexported, skipped, invalid:<reason>, <job>:<outcome>, error:<step>)",
                None,
                self.outcomes.clone()
            ),
            (
                "fleetnet_reconcile_duration",
                "Duration of one reconcile (by member with --metrics-detail=member)",
                Some(Unit::Seconds),
                self.durations.clone()
            ),
            (
                "fleetnet_reconciles_in_flight",
                "Reconciles running now, by member (the member's work-queue depth being processed)",
                None,
                self.in_flight.clone()
            ),
            (
                "fleetnet_controller_errors",
                "Errors of a member's controller outside reconciles (watch failures), by member",
                None,
                self.controller_errors.clone()
            ),
        );
    }

    /// The hub writes, by kind, and what bounded queues dropped.
    fn register_writes(&mut self) {
        let registry = &mut self.registry;
        register!(
            registry,
            (
                "fleetnet_ise_writes",
                "InternalServiceExport writes to the hub, by op (create, update, delete)",
                None,
                self.ise_writes.clone()
            ),
            (
                "fleetnet_endpointsliceexport_writes",
                "EndpointSliceExport writes to the hub, by op (create, update, delete)",
                None,
                self.slice_writes.clone()
            ),
            (
                "fleetnet_queue_dropped",
                "Items dropped because their bounded queue was full, by queue: events (a member's 4,096 or the process's 32,768 waiting Events), dangling_ises and absent_slices (names to check for a missing export; the 5-minute sweep finds them)",
                None,
                self.dropped.clone()
            ),
        );
    }

    /// From a Service change to its export and to the conflict verdict reflected.
    fn register_latencies(&mut self) {
        let registry = &mut self.registry;
        register!(
            registry,
            (
                "fleetnet_export_latency",
                "Time from a Service change being first seen (exportedSince) to its InternalServiceExport written",
                Some(Unit::Seconds),
                self.export_latency.clone()
            ),
            (
                "fleetnet_conflict_reflected_latency",
                "Time from an export to the hub's conflict verdict reflected on the ServiceExport",
                Some(Unit::Seconds),
                self.conflict_latency.clone()
            ),
            (
                EXPORT_DURATION_METRIC,
                "Time from a Service export (exportedSince) to the hub's conflict verdict reflected on its ServiceExport, in milliseconds, by member (origin_cluster_id); fleet-networking's metric",
                None,
                self.export_duration.clone()
            ),
            (
                IMPORT_DURATION_METRIC,
                "The duration of an endpointslice export",
                None,
                self.import_duration.clone()
            ),
        );
    }

    /// Starts tracking `member` with the counters of its client (again: a new engagement
    /// replaces the client counters; the event series are kept).
    pub fn register_member(&self, member: &str, member_stats: Arc<ClientStats>) {
        self.shared
            .members
            .write()
            .entry(member.to_string())
            .or_default()
            .member_client = Some(member_stats);
    }

    /// The counters of the hub client shared by every member. Series: `client="hub"`.
    pub fn set_hub_client(&self, hub_stats: Arc<ClientStats>) {
        *self.shared.hub_client.write() = Some(hub_stats);
    }

    /// Where member phases and last-sync times come from at scrape time.
    pub fn set_fleet_state(&self, state: Arc<FleetState>) {
        *self.shared.fleet.write() = Some(state);
    }

    /// Whether this replica writes (holds the leader Lease, or election is off, or members are
    /// sharded), read at scrape time: `fleetnet_leader`.
    pub fn set_leader(&self, leader: crate::ownership::Claim) {
        *self.shared.leader.write() = Some(leader);
    }

    /// Where the Azure counters come from at scrape time; without one, no Azure series.
    pub fn set_azure_source(&self, source: AzureSource) {
        *self.shared.azure.write() = Some(source);
    }

    /// Drops every series of `member`: reconcile totals, duration histogram, in-flight and
    /// error counters, member state, last sync and its clients' series. Call it after the
    /// member's exporter stopped (a reconcile still running would record it again).
    pub fn remove_member(&self, member: &str) {
        let entry = self.shared.members.write().remove(member);
        let entry = entry.unwrap_or_default();
        for origin in &entry.import_origins {
            for first in [true, false] {
                self.import_duration
                    .remove(&import_labels(origin, member, first));
            }
        }
        for outcome in entry.outcomes {
            self.reconciles.remove(&vec![
                ("member", label(member)),
                ("outcome", label(&outcome)),
            ]);
        }
        let labels = member_labels(member);
        self.durations.remove(&labels);
        self.in_flight.remove(&labels);
        self.controller_errors.remove(&labels);
        self.export_duration.remove(&origin(member));
    }

    /// Members with series, sorted.
    pub fn members(&self) -> Vec<String> {
        self.shared.members.read().keys().cloned().collect()
    }

    /// Every series in the OpenMetrics text format ([`OPENMETRICS_CONTENT_TYPE`]), with
    /// exemplars (trace ids) on the histograms that have them. Ends with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an encoding error would be a bug in a collector.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }

    /// Every series in the Prometheus text format 0.0.4 ([`PROMETHEUS_CONTENT_TYPE`]); no
    /// exemplars.
    pub fn encode_prometheus(&self) -> String {
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }

    fn ensure_member(&self, member: &str) {
        if !self.shared.members.read().contains_key(member) {
            self.shared
                .members
                .write()
                .entry(member.to_string())
                .or_default();
        }
    }

    fn note_outcome(&self, member: &str, outcome: &str) {
        let known = self
            .shared
            .members
            .read()
            .get(member)
            .is_some_and(|e| e.outcomes.contains(outcome));
        if !known {
            self.shared
                .members
                .write()
                .entry(member.to_string())
                .or_default()
                .outcomes
                .insert(outcome.to_string());
        }
    }
}

impl ReconcileObserver for Metrics {
    fn reconcile_started(&self, member: &str) {
        self.ensure_member(member);
        self.in_flight.get_or_create(&member_labels(member)).inc();
    }

    fn reconciled(&self, member: &str, outcome: Reconciled, took: Duration) {
        let full = outcome.label();
        self.outcomes
            .get_or_create(&vec![("outcome", label(&full))])
            .inc();
        let outcome = member_outcome(self.shared.detail, &outcome, &full);
        self.note_outcome(member, &outcome);
        self.in_flight.get_or_create(&member_labels(member)).dec();
        self.reconciles
            .get_or_create(&vec![
                ("member", label(member)),
                ("outcome", label(&outcome)),
            ])
            .inc();
        self.durations
            .get_or_create(&self.detailed_labels(member))
            .observe(took.as_secs_f64(), current_trace(), None);
    }

    fn hub_write(&self, member: &str, op: &'static str) {
        self.ensure_member(member);
        self.ise_writes
            .get_or_create(&vec![("op", op.to_string())])
            .inc();
    }

    fn slice_write(&self, member: &str, op: &'static str) {
        self.ensure_member(member);
        self.slice_writes
            .get_or_create(&vec![("op", op.to_string())])
            .inc();
    }

    fn slice_import_duration(&self, origin: &str, destination: &str, first: bool, took: Duration) {
        let known = self
            .shared
            .members
            .read()
            .get(destination)
            .is_some_and(|e| e.import_origins.contains(origin));
        if !known {
            self.shared
                .members
                .write()
                .entry(destination.to_string())
                .or_default()
                .import_origins
                .insert(origin.to_string());
        }
        self.import_duration
            .get_or_create(&import_labels(origin, destination, first))
            .observe(export_duration_ms(took));
    }

    fn dropped(&self, _member: &str, queue: &'static str) {
        self.dropped
            .get_or_create(&vec![("queue", queue.to_string())])
            .inc();
    }

    fn export_latency(&self, _member: &str, latency: Duration) {
        self.export_latency
            .observe(latency.as_secs_f64(), current_trace(), None);
    }

    fn conflict_reflected(&self, member: &str, latency: Duration) {
        self.conflict_latency.observe(latency.as_secs_f64());
        self.export_duration
            .get_or_create(&origin(member))
            .observe(export_duration_ms(latency));
    }

    fn watch_failed(&self, member: &str, _job: &'static str, _member_side: bool, _error: &str) {
        self.ensure_member(member);
        self.controller_errors
            .get_or_create(&member_labels(member))
            .inc();
    }
}

/// The runtime's member lifecycle: an engagement registers the member's client counters, a
/// member leaving (its exporter stopped) drops its series.
impl MemberHooks for Metrics {
    fn member_engaged(&self, member: &str, stats: Arc<ClientStats>) {
        self.register_member(member, stats);
    }

    fn member_left(&self, member: &str) {
        self.remove_member(member);
    }
}

/// The trace id of the current span, when it is sampled (an exemplar pointing at a trace
/// that was never exported would be a dead link). `None` without the OpenTelemetry layer.
fn current_trace() -> Option<TraceLabels> {
    crate::telemetry::current_sampled_trace_id().map(|trace_id| TraceLabels { trace_id })
}

#[cfg(test)]
mod tests;
