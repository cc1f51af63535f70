//! Traces over the wire: two members' reconcilers on real apiservers, telemetry initialised
//! from the standard `OTEL_*` variables, spans received by an OTLP receiver in this test.
//!
//! The global subscriber can be installed once per process, and each case needs its own
//! environment, so each case runs the ignored test `child_two_members` as a subprocess of
//! this test binary (env set by the parent) while the parent runs the receiver and checks
//! what arrived, the child's JSON logs and the child's metrics.

use crate::support;
use crate::support::otlp;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetnet_hub::metrics::Metrics;
use fleetnet_hub::telemetry::{self, LogFormat, SAMPLING_ENV, TelemetryConfig};
use otlp::{ExportedSpan, Receiver};
use support::*;

const CHILD_ENV: &str = "FLEETNET_TELEMETRY_CHILD_SUMMARY";
const MEMBERS: [&str; 2] = ["alpha", "beta"];
const SERVICE_NAME: &str = "fleetnet-hub-otlp-test";

/// One case at a time: each child starts a hub and two members.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the child reports besides its logs.
#[derive(serde::Serialize, serde::Deserialize)]
struct Summary {
    /// Tokens and certificate data of every kubeconfig the child used.
    secrets: Vec<String>,
    /// `Metrics::encode()` at the end of the run.
    metrics: String,
}

struct ChildRun {
    summary: Summary,
    stdout: String,
    stderr: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_of_two_members() {
    let _serial = SERIAL.lock().await;
    let receiver = Receiver::grpc().await;
    exported(
        &receiver,
        "grpc",
        "application/grpc",
        "1",
        &["alpha", "beta"],
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_with_ratio_zero_for_one_member() {
    let _serial = SERIAL.lock().await;
    let receiver = Receiver::http().await;
    // Everything for alpha (the default), nothing for beta.
    exported(
        &receiver,
        "http/protobuf",
        "application/x-protobuf",
        "1,beta=0",
        &["alpha"],
        &["beta"],
    )
    .await;
}

/// Runs the two-member child exporting to `receiver` over `protocol` with `sampling`, then
/// checks what arrived: only `content_type`, traces of `sampled` members and none of
/// `unsampled`, no secret of any kubeconfig.
async fn exported(
    receiver: &Receiver,
    protocol: &str,
    content_type: &str,
    sampling: &str,
    sampled: &[&str],
    unsampled: &[&str],
) {
    let run = run_child(&[
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
        (SAMPLING_ENV, sampling),
    ])
    .await;
    let spans = receiver.spans();
    let types = receiver.content_types();
    assert!(types.iter().all(|c| c == content_type), "{types:?}");
    check_traces(&spans, &run, sampled, unsampled);
    check_no_secrets(receiver, &run);
    let names: BTreeSet<_> = spans.iter().map(|s| s.name.as_str()).collect();
    eprintln!(
        "{protocol}: {} export requests, {} spans, {} reconcile roots; names {names:?}",
        receiver.requests(),
        spans.len(),
        spans.iter().filter(|s| s.name == "reconcile").count(),
    );
}

/// Runs `child_two_members` in a subprocess with `env`; returns its summary and output.
async fn run_child(env: &[(&str, &str)]) -> ChildRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let summary_path = dir.path().join("summary.json");
    let mut cmd = child_test(module_path!(), "child_two_members");
    cmd.env(CHILD_ENV, &summary_path)
        .env("OTEL_SERVICE_NAME", SERVICE_NAME)
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=ci,service.namespace=fleet",
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env("RUST_BACKTRACE", "0")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .expect("child finished within 5 minutes")
        .expect("child ran");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child failed: {}\n--- stdout (tail)\n{}\n--- stderr (tail)\n{}",
        out.status,
        tail(&stdout, 60),
        tail(&stderr, 40)
    );
    let summary: Summary = serde_json::from_str(
        &std::fs::read_to_string(&summary_path).expect("child wrote its summary"),
    )
    .expect("summary parses");
    ChildRun {
        summary,
        stdout,
        stderr,
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `sampled`: members whose traces must arrive; `suppressed`: members whose must not.
fn check_traces(spans: &[ExportedSpan], run: &ChildRun, sampled: &[&str], suppressed: &[&str]) {
    assert!(!spans.is_empty(), "no span arrived");
    // Resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    for s in spans {
        assert_eq!(
            s.resource.get("service.name").map(String::as_str),
            Some(SERVICE_NAME)
        );
        assert_eq!(
            s.resource
                .get("deployment.environment.name")
                .map(String::as_str),
            Some("ci")
        );
    }
    let by_id: BTreeMap<&str, &ExportedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let roots: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|s| s.name == "reconcile" && s.is_root())
        .collect();
    for member in sampled {
        let mine: Vec<&&ExportedSpan> = roots
            .iter()
            .filter(|s| s.attr("fleet.member") == Some(member))
            .collect();
        assert!(!mine.is_empty(), "no reconcile root span of {member}");
        for root in &mine {
            assert_eq!(root.attr("k8s.namespace.name"), Some("shop"), "{root:?}");
            assert_eq!(
                root.attr("fleet.serviceexport.name"),
                Some("cart"),
                "{root:?}"
            );
            assert!(root.attr("outcome").is_some(), "{root:?}");
        }
        assert!(
            mine.iter().any(|r| r.attr("outcome") == Some("exported")),
            "no exported outcome for {member}: {mine:?}"
        );
        // The k8s.request client spans, descendants of the member's reconcile (linked by parent
        // span id, possibly through an intermediate span), same trace.
        let children: Vec<&ExportedSpan> = spans
            .iter()
            .filter(|s| s.attributes.contains_key("http.method"))
            .filter(|s| {
                let mut parent = by_id.get(s.parent_span_id.as_str());
                for _ in 0..4 {
                    match parent {
                        Some(p) if p.trace_id != s.trace_id => return false,
                        Some(p) if p.name == "reconcile" => {
                            return p.attr("fleet.member") == Some(member);
                        }
                        Some(p) => parent = by_id.get(p.parent_span_id.as_str()),
                        None => return false,
                    }
                }
                false
            })
            .collect();
        assert!(
            !children.is_empty(),
            "no HTTP child span under a reconcile of {member}"
        );
        for c in &children {
            assert_eq!(c.kind, 3, "HTTP spans are client spans: {c:?}");
            assert!(c.attributes.contains_key("http.url"), "{c:?}");
            assert!(c.attributes.contains_key("http.status_code"), "{c:?}");
        }
        let methods: BTreeSet<&str> = children
            .iter()
            .filter_map(|c| c.attr("http.method"))
            .collect();
        assert!(
            methods.contains("POST") || methods.contains("PATCH"),
            "writes of {member} traced: {methods:?}"
        );
    }
    // kube-runtime's own per-reconcile span is filtered out: it has no member to sample by.
    assert!(
        !spans.iter().any(|s| s.name == "reconciling object"),
        "kube-runtime's span was exported"
    );
    let exported_traces: BTreeSet<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    for member in suppressed {
        assert!(
            !spans.iter().any(|s| s.attr("fleet.member") == Some(member)),
            "a span of {member} (ratio 0) was exported"
        );
    }

    // Logs: every line inside a reconcile carries member, object and trace id.
    let mut lines_in_reconcile: BTreeMap<String, usize> = BTreeMap::new();
    let mut log_traces: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in run.stderr.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(reconcile) = v["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == "reconcile"))
        else {
            continue;
        };
        let member = reconcile["fleet.member"]
            .as_str()
            .expect("member on the line")
            .to_string();
        assert_eq!(reconcile["k8s.namespace.name"], "shop", "{line}");
        assert_eq!(reconcile["fleet.serviceexport.name"], "cart", "{line}");
        let trace_id = v["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no trace_id: {line}"));
        assert_eq!(trace_id.len(), 32, "{line}");
        assert!(v["span_id"].as_str().is_some(), "{line}");
        *lines_in_reconcile.entry(member.clone()).or_default() += 1;
        log_traces
            .entry(member)
            .or_default()
            .insert(trace_id.to_string());
    }
    for member in MEMBERS {
        assert!(
            lines_in_reconcile.get(member).copied().unwrap_or(0) > 0,
            "no log line inside a reconcile of {member}"
        );
    }
    for member in sampled {
        let logged = &log_traces[*member];
        assert!(
            logged.iter().any(|t| exported_traces.contains(t.as_str())),
            "{member}: no logged trace id was exported"
        );
    }
    for member in suppressed {
        // Its reconciles had trace ids (in its logs); none of those traces was exported.
        let logged = &log_traces[*member];
        assert!(
            logged.iter().all(|t| !exported_traces.contains(t.as_str())),
            "{member}: a logged trace was exported"
        );
    }

    // Exemplars on the export latency histogram point at exported traces.
    let exemplar_traces: Vec<&str> = run
        .summary
        .metrics
        .lines()
        .filter(|l| l.starts_with("fleetnet_export_latency_seconds_bucket"))
        .filter_map(|l| l.split("trace_id=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(
        !exemplar_traces.is_empty(),
        "no exemplar on fleetnet_export_latency_seconds:\n{}",
        run.summary.metrics
    );
    for t in &exemplar_traces {
        assert!(
            exported_traces.contains(t),
            "exemplar trace {t} was not exported"
        );
    }
}

fn check_no_secrets(receiver: &Receiver, run: &ChildRun) {
    assert!(
        !run.summary.secrets.is_empty(),
        "the child found the kubeconfig secrets"
    );
    let dump = receiver.dump();
    let logs = format!("{}\n{}", run.stdout, run.stderr);
    for (what, text) in [("exported spans", &dump), ("logs", &logs)] {
        for secret in &run.summary.secrets {
            assert!(!text.contains(secret.as_str()), "kubeconfig data in {what}");
        }
        let lower = text.to_ascii_lowercase();
        for marker in [
            "bearer ",
            "authorization:",
            "\"authorization\"",
            "begin certificate",
        ] {
            assert!(!lower.contains(marker), "{marker:?} in {what}");
        }
    }
    assert!(
        !dump.to_ascii_lowercase().contains("authorization"),
        "no Authorization text in exported spans"
    );
    assert_eq!(receiver.authorization_headers(), 0);
}

/// The child: telemetry from the environment, two members exporting one Service each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a subprocess by the other tests of this file"]
async fn child_two_members() {
    let Some(summary_path) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        eprintln!("child_two_members is started by the other tests of tests/e2e/telemetry.rs");
        return;
    };
    let mut config = TelemetryConfig::from_env().expect("telemetry config");
    config.log_format = LogFormat::Json;
    config.log_filter = Some("info,fleetnet_hub=debug".into());
    config.shutdown_timeout = Duration::from_secs(10);
    let guard = telemetry::init(config).expect("telemetry init");
    assert!(guard.tracing_enabled(), "OTLP endpoint configured");

    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let metrics = Arc::new(Metrics::with_detail(
        fleetnet_hub::metrics::MetricsDetail::Member,
    ));
    let mut exporters = vec![];
    let mut secrets = otlp::kubeconfig_secrets(fleet.hub().kubeconfig_path());
    for member in MEMBERS {
        secrets.extend(otlp::kubeconfig_secrets(
            fleet.member(member).kubeconfig_path(),
        ));
        let client = fleet.member(member).client().await.expect("member client");
        namespace(&client, "shop").await;
        let exporter = otlp::start_observed(&fleet, member, metrics.clone()).await;
        metrics.register_member(member, exporter.member_stats.clone());
        create_service(&client, &service("shop", "cart", 80)).await;
        create_export(&client, "shop", "cart", &[]).await;
        exporters.push(exporter);
    }
    for member in MEMBERS {
        wait_ise(&hub, &fleet.hub_namespace(member), "shop-cart", |_| true).await;
    }
    reconciles_settled(&metrics, &MEMBERS).await;
    for exporter in exporters {
        exporter.stop().await;
    }
    let summary = Summary {
        secrets,
        metrics: metrics.encode(),
    };
    std::fs::write(&summary_path, serde_json::to_vec(&summary).expect("json")).expect("write");
    let started = Instant::now();
    guard.shutdown().expect("spans flushed");
    eprintln!("telemetry shut down in {:?}", started.elapsed());
}
