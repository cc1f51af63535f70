//! The monitoring side of the tests: the chart's rendered PrometheusRule and Grafana dashboard,
//! promtool, and a real Prometheus server on loopback (both built once from the Prometheus Go
//! module by `tests/testenv/install.sh prometheus`), with a small client of its HTTP API.

use super::chart::{installed, of_kind, one};
use super::free_port;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The cached promtool; panics clearly when it cannot be had.
pub fn promtool() -> PathBuf {
    let bin = installed("promtool").join("promtool");
    assert!(bin.is_file(), "promtool missing at {}", bin.display());
    bin
}

/// The values that turn every monitoring object of the chart on.
pub const MONITORING_ON: &[&str] = &[
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "metrics.grafanaDashboard.enabled=true",
];

/// The rule groups of the rendered PrometheusRule (`spec`, i.e. a Prometheus rule file).
pub fn rule_file(objects: &[Value]) -> Value {
    one(objects, "PrometheusRule")["spec"].clone()
}

/// Every alerting rule of a rule file: (alert name, expression).
pub fn alerts(rules: &Value) -> Vec<(String, String)> {
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["alert"].as_str().expect("alert name").to_string(),
                r["expr"].as_str().expect("expr").to_string(),
            )
        })
        .collect()
}

/// The dashboard JSON out of the rendered ConfigMap labelled `grafana_dashboard`.
pub fn dashboard(objects: &[Value]) -> Value {
    let cms: Vec<&Value> = of_kind(objects, "ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(cms.len(), 1, "one ConfigMap labelled grafana_dashboard=1");
    let data = cms[0]["data"].as_object().expect("data");
    assert_eq!(data.len(), 1, "one dashboard in the ConfigMap");
    let json = data.values().next().and_then(Value::as_str).expect("text");
    serde_json::from_str(json).expect("dashboard JSON parses")
}

/// A dashboard query: where it is (panel title or variable) and its PromQL.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    pub panel: String,
    pub expr: String,
    pub legend: Option<String>,
}

/// Every target of every panel (rows included, nested or not).
pub fn panel_queries(dashboard: &Value) -> Vec<PanelQuery> {
    fn walk(panels: &[Value], out: &mut Vec<PanelQuery>) {
        for p in panels {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push(PanelQuery {
                    panel: p["title"].as_str().unwrap_or("?").to_string(),
                    expr: t["expr"].as_str().unwrap_or_default().to_string(),
                    legend: t["legendFormat"].as_str().map(str::to_string),
                });
            }
            if let Some(inner) = p["panels"].as_array() {
                walk(inner, out);
            }
        }
    }
    let mut out = vec![];
    walk(dashboard["panels"].as_array().expect("panels"), &mut out);
    out
}

/// The `label_values(selector, label)` query variables: (name, selector, label).
pub fn label_values_variables(dashboard: &Value) -> Vec<(String, String, String)> {
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let name = v["name"].as_str().expect("variable name").to_string();
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .expect("variable query");
            let inner = q
                .trim()
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| {
                    panic!("variable {name}: only label_values(...) is supported: {q}")
                });
            let (selector, label) = inner
                .rsplit_once(',')
                .unwrap_or_else(|| panic!("variable {name}: label_values(selector, label): {q}"));
            (name, selector.trim().to_string(), label.trim().to_string())
        })
        .collect()
}

/// The `{{label}}` names of a Grafana legend format.
pub fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}").map(|(l, _)| l.trim().to_string()))
        .collect()
}

/// A Prometheus server on 127.0.0.1, data in a temporary directory, killed on drop.
pub struct Prometheus {
    pub base: String,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts the cached server with `config` (a prometheus.yml) and waits until it is ready.
    pub async fn start(config: &str) -> Self {
        let bin = installed("prometheus").join("prometheus");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("write config");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = tokio::process::Command::new(bin)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start prometheus");
        let mut p = Prometheus {
            base: format!("http://127.0.0.1:{port}"),
            child,
            _dir: dir,
            http: reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ready = p
                .http
                .get(format!("{}/-/ready", p.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return p;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", p.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready after 90 s:\n{}",
                p.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The server's own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>?<params>`: the `data` of a success, the error text otherwise.
    pub async fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let response = self
            .http
            .get(format!("{}/api/v1/{path}", self.base))
            .query(params)
            .send()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        let body: Value = serde_json::from_slice(
            &response
                .bytes()
                .await
                .map_err(|e| format!("{path}: body: {e}"))?,
        )
        .map_err(|e| format!("{path}: not JSON: {e}"))?;
        if body["status"] == "success" {
            Ok(body["data"].clone())
        } else {
            Err(format!(
                "{path} {params:?}: {} {}",
                body["errorType"], body["error"]
            ))
        }
    }

    /// An instant query: the result vector (or scalar as a one-element vector).
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("query", &[("query", expr)]).await?;
        match data["resultType"].as_str() {
            Some("vector") | Some("matrix") => {
                Ok(data["result"].as_array().cloned().unwrap_or_default())
            }
            Some("scalar") => Ok(vec![data["result"].clone()]),
            other => Err(format!("{expr}: unexpected result type {other:?}")),
        }
    }

    /// The AST of `expr` (`/api/v1/parse_query`).
    pub async fn parse(&self, expr: &str) -> Result<Value, String> {
        self.api("parse_query", &[("query", expr)]).await
    }
}

/// A series selector (`{__name__="x", l="v"}`) as found in the AST of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    pub name: String,
    pub text: String,
}

/// What a query reads: its selectors, and the label names it groups or matches by, each with
/// the selectors below the node that uses it.
#[derive(Debug, Default)]
pub struct Reads {
    pub selectors: Vec<Selector>,
    pub labels: Vec<(String, Vec<Selector>)>,
}

/// Walks an AST from `/api/v1/parse_query`.
pub fn reads(ast: &Value) -> Reads {
    let mut out = Reads::default();
    walk(ast, &mut out);
    out
}

fn walk(node: &Value, out: &mut Reads) -> Vec<Selector> {
    let mut below = vec![];
    match node["type"].as_str() {
        Some("vectorSelector") | Some("matrixSelector") => {
            let s = selector(node);
            out.selectors.push(s.clone());
            below.push(s);
        }
        Some("aggregation") => {
            below.extend(walk(&node["expr"], out));
            below.extend(walk(&node["param"], out));
            if node["without"] != true {
                for l in node["grouping"].as_array().into_iter().flatten() {
                    out.labels
                        .push((l.as_str().unwrap_or_default().into(), below.clone()));
                }
            }
        }
        Some("binaryExpr") => {
            below.extend(walk(&node["lhs"], out));
            below.extend(walk(&node["rhs"], out));
            let m = &node["matching"];
            if m["on"] == true {
                for l in m["labels"].as_array().into_iter().flatten() {
                    out.labels
                        .push((l.as_str().unwrap_or_default().into(), below.clone()));
                }
            }
        }
        Some("call") => {
            for a in node["args"].as_array().into_iter().flatten() {
                below.extend(walk(a, out));
            }
        }
        Some("parenExpr") | Some("unaryExpr") | Some("subquery") => {
            below.extend(walk(&node["expr"], out));
        }
        _ => {}
    }
    below
}

fn selector(node: &Value) -> Selector {
    let matchers: Vec<String> = node["matchers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let value =
                serde_json::to_string(m["value"].as_str().unwrap_or_default()).expect("a string");
            format!(
                "{}{}{}",
                m["name"].as_str().unwrap_or_default(),
                m["type"].as_str().unwrap_or_default(),
                value
            )
        })
        .collect();
    Selector {
        name: node["name"].as_str().unwrap_or_default().to_string(),
        text: format!("{{{}}}", matchers.join(", ")),
    }
}

/// For an expression whose top node is `<lhs> <comparison> <number>` (no `bool`), the same
/// expression with `bool`: it returns the left side's series whatever their value.
pub fn without_threshold(ast: &Value, expr: &str) -> Option<String> {
    let mut top = ast;
    while top["type"] == "parenExpr" {
        top = &top["expr"];
    }
    let comparison = ["==", "!=", ">", "<", ">=", "<="];
    let op = top["op"].as_str()?;
    if top["type"] != "binaryExpr"
        || !comparison.contains(&op)
        || top["bool"] == true
        || top["rhs"]["type"] != "numberLiteral"
    {
        return None;
    }
    // The threshold is the text's last token, the operator the one before it.
    let trimmed = expr.trim_end();
    let (head, number) = trimmed.rsplit_once(char::is_whitespace)?;
    let head = head.trim_end().strip_suffix(op)?;
    Some(format!("{head}{op} bool {number}"))
}

/// Copies `fixture` (a promtool test file) next to `rules` written as `rules_name`, with only
/// the `summary` annotation kept (descriptions are free text; they are checked by `promtool check
/// rules`, not by the unit tests). Returns the test file's path.
pub fn stage_rule_tests(dir: &Path, fixture: &Path, rules: &Value, rules_name: &str) -> PathBuf {
    let mut rules = rules.clone();
    for g in rules["groups"].as_array_mut().expect("groups") {
        for r in g["rules"].as_array_mut().expect("rules") {
            if let Some(a) = r["annotations"].as_object_mut() {
                a.retain(|k, _| k == "summary");
            }
        }
    }
    std::fs::write(
        dir.join(rules_name),
        serde_json::to_string_pretty(&rules).expect("JSON"),
    )
    .expect("write rules");
    let target = dir.join(fixture.file_name().expect("file name"));
    std::fs::copy(fixture, &target).expect("copy the rule tests");
    target
}
