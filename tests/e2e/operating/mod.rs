//! Operating fleetnet-hub: the chart's alerts, dashboard and ServiceMonitor, proven with the real
//! tools (promtool and a Prometheus server built from the Prometheus Go module, the Prometheus
//! Operator's CRDs from its module) rather than only rendered:
//! - the rendered rules pass `promtool check rules` and the unit tests of
//!   tests/fixtures/prometheus-rules/ (each alert fires when it should, stays silent otherwise);
//! - a real scrape of the controller passes `promtool check metrics`, and a real Prometheus
//!   scraping two replicas evaluates every dashboard query and every alert expression: each
//!   selector, grouping label and legend label must find data, so a typo cannot ship;
//! - the ServiceMonitor, PrometheusRule and dashboard ConfigMap apply to a hub serving the
//!   Prometheus Operator's CRDs, with strict field validation.

mod dashboard;
mod jobs;
mod objects;
mod rules;

use crate::support;
use crate::support::prometheus;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::chart::*;
use fleetnet_hub::app::{self, Extensions, Running};
use fleetnet_hub::config::LeaderElection;
use fleetnet_hub::fleet::Phase;
use fleetnet_testenv::Fleet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, ValidationDirective};
use kube::discovery::Discovery;
use prometheus::*;
use serde_json::Value;
use support::*;

/// Metrics that come from outside fleetnet-hub (cAdvisor, through the kubelet): the dashboard's
/// process panels read them; a test Prometheus has none, so their selectors are only parsed.
const EXTERNAL: &[&str] = &[
    "container_memory_working_set_bytes",
    "container_cpu_usage_seconds_total",
];

/// How long the end-to-end test waits for anything to show up in Prometheus.
const SLOW: Duration = Duration::from_secs(120);

fn run_tool(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The rendered rules: default values (leader election) and the sharded value set.
fn rendered_rules() -> (Value, Value) {
    let default = rule_file(&render_chart(MONITORING_ON));
    let mut sharded_args = MONITORING_ON.to_vec();
    let sharded_values = repo().join("charts/fleetnet-hub/ci/sharded-values.yaml");
    let sharded_values = sharded_values.to_str().expect("UTF-8 path");
    sharded_args.extend(["-f", sharded_values]);
    let sharded = rule_file(&render_chart(&sharded_args));
    (default, sharded)
}

/// A fleet of `members` and a client of its hub, the chart's release namespace created there.
async fn fleet_with_release_namespace(members: &[&str]) -> (Fleet, kube::Client) {
    let (fleet, hub) = quiet_fleet(members.iter().copied()).await;
    fleetnet_testenv::ensure_namespace(&hub, "hub", "fleetnet-system")
        .await
        .expect("release namespace");
    (fleet, hub)
}
