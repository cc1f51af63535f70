//! A real scrape of the controller passes `promtool check metrics`, and a real Prometheus scraping
//! two replicas evaluates every dashboard query and alert expression: each selector, grouping
//! label and legend label must find data.

use super::*;

/// A member apiserver that answers requests 429 with `Retry-After: 1`, every third one 503: a
/// member's throttled and failed requests both.
async fn throttling_server() -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    serve_http(|| {
        let (code, status, reason) = match SEEN.fetch_add(1, Ordering::Relaxed) % 3 {
            2 => (503, "Service Unavailable", "ServiceUnavailable"),
            _ => (429, "Too Many Requests", "TooManyRequests"),
        };
        let body = format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{status}","reason":"{reason}","code":{code}}}"#
        );
        format!(
            "HTTP/1.1 {code} {status}\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    })
    .await
}

fn throttled_kubeconfig(addr: std::net::SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: throttled\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: c\n  context: {{cluster: throttled, user: u}}\nusers:\n- name: u\n  user: {{}}\n"
    )
}

async fn wait_phase(running: &Running, member: &str, phase: Phase) {
    slowly(&format!("member {member} {phase:?}"), || async {
        let m = running.state.member(member)?;
        (m.phase == phase).then_some(())
    })
    .await;
}

/// Polls `probe` until it returns `Some`, for up to `SLOW`.
async fn slowly<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + SLOW;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {SLOW:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn create_export_of(fleet: &Fleet, member: &str, ns: &str, name: &str) {
    let client = fleet.member(member).client().await.expect("member client");
    namespace(&client, ns).await;
    create_service(&client, &service(ns, name, 80)).await;
    create_export(&client, ns, name, &[]).await;
}

/// `promtool check metrics` of `body`: (exit status success, the problems it printed).
fn promtool_check_metrics(promtool: &Path, body: &str) -> (bool, Vec<String>) {
    use std::io::Write;
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool check metrics");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write the scrape");
    let out = child.wait_with_output().expect("promtool check metrics");
    let problems = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success(),
        problems
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// An OpenMetrics text scrape in the Prometheus text format 0.0.4 that promtool lints: a
/// counter family's HELP and TYPE name its `_total` samples, no `# UNIT`, no `# EOF`, no
/// exemplars (what prometheus-client's own text-format encoder does differently).
fn as_prometheus_text(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::new();
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let line = match line
            .strip_prefix("# HELP ")
            .or(line.strip_prefix("# TYPE "))
        {
            Some(rest) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                format!("{} {name} {tail}", &line[..6])
            }
            None => line.split(" # ").next().unwrap_or(line).to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `promtool check metrics` of a real scrape (OpenMetrics, as `/metrics` serves it) is clean once
/// in the text format promtool reads; the scrape as served draws only "no help text" for the
/// counter families (promtool reads OpenMetrics' HELP of `x` for `x_total` as missing).
fn check_metrics(promtool: &Path, openmetrics: &str) {
    let (ok, problems) = promtool_check_metrics(promtool, &as_prometheus_text(openmetrics));
    assert!(
        ok && problems.is_empty(),
        "promtool check metrics is not clean:\n{}",
        problems.join("\n")
    );
    let (_, raw) = promtool_check_metrics(promtool, openmetrics);
    let unexpected: Vec<&String> = raw
        .iter()
        .filter(|p| {
            !p.strip_suffix(" no help text").is_some_and(|m| {
                m.ends_with("_total")
                    && openmetrics
                        .contains(&format!("# TYPE {} counter", m.trim_end_matches("_total")))
            })
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "promtool check metrics of the OpenMetrics scrape as served: {unexpected:#?}"
    );
}

/// Checks one query against Prometheus; returns a list of problems (empty: fine).
/// - every selector of a fleetnet-hub (or Prometheus) metric finds series in the last 15 min;
/// - every label it groups or matches by exists on a series of the selectors below;
/// - the whole expression evaluates, and, when `must_return`, returns series carrying every
///   label of `legend`.
async fn check_query(
    prom: &Prometheus,
    what: &str,
    expr: &str,
    must_return: bool,
    legend: Option<&str>,
) -> Vec<String> {
    let mut problems = vec![];
    let ast = match prom.parse(expr).await {
        Ok(ast) => ast,
        Err(e) => return vec![format!("{what}: does not parse: {e}")],
    };
    let reads = reads(&ast);
    let external = |s: &Selector| EXTERNAL.contains(&s.name.as_str());
    for s in reads.selectors.iter().filter(|s| !external(s)) {
        match prom
            .query(&format!("last_over_time({}[15m])", s.text))
            .await
        {
            Ok(r) if !r.is_empty() => {}
            Ok(_) => problems.push(format!("{what}: no series for {}", s.text)),
            Err(e) => problems.push(format!("{what}: {e}")),
        }
    }
    for (label, below) in &reads.labels {
        let mut found = false;
        for s in below.iter().filter(|s| !external(s)) {
            let q = format!("count by ({label}) (last_over_time({}[15m]))", s.text);
            if let Ok(r) = prom.query(&q).await {
                found |= r.iter().any(|v| v["metric"].get(label.as_str()).is_some());
            }
        }
        if !found {
            problems.push(format!(
                "{what}: no series has the label `{label}` it groups or matches by"
            ));
        }
    }
    let uses_external = reads.selectors.iter().any(external);
    match prom.query(expr).await {
        Err(e) => problems.push(format!("{what}: {e}")),
        Ok(result) if must_return && !uses_external => {
            if result.is_empty() {
                problems.push(format!("{what}: returns nothing: {expr}"));
            }
            for label in legend.map(legend_labels).unwrap_or_default() {
                if !result
                    .iter()
                    .any(|v| v["metric"].get(label.as_str()).is_some())
                {
                    problems.push(format!(
                        "{what}: no series has the legend's label `{label}`"
                    ));
                }
            }
        }
        Ok(_) => {}
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_evaluate_against_a_real_prometheus_scraping_two_replicas() {
    let started = Instant::now();
    let promtool = promtool();
    let rendered = render_chart(MONITORING_ON);
    let (default_rules, sharded_rules) = rendered_rules();
    let board = dashboard(&rendered);
    // The job the ServiceMonitor's targets get is the metrics Service's name; the rules select it.
    let job = one(&rendered, "Service")["metadata"]["name"]
        .as_str()
        .expect("metrics Service name")
        .to_string();

    let (mut fleet, hub) = fleet_with_release_namespace(&["alpha", "beta"]).await;
    // A job that cannot work (its hub CRD missing) while its members are Ready: the failing-job
    // panel and alert have a series to find.
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    crds.delete(
        "endpointsliceexports.networking.fleet.azure.com",
        &Default::default(),
    )
    .await
    .expect("delete the EndpointSliceExport CRD");
    let dir = fleet.scratch_dir().join("kubeconfigs-operating");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for m in ["alpha", "beta"] {
        std::fs::copy(
            fleet.member(m).kubeconfig_path(),
            dir.join(format!("{m}.yaml")),
        )
        .expect("copy kubeconfig");
    }
    // A member whose apiserver answers only 429: failing, throttled, retried.
    let throttling = throttling_server().await;
    std::fs::write(dir.join("throttled.yaml"), throttled_kubeconfig(throttling))
        .expect("write kubeconfig");

    // Two replicas with leader election, as the chart deploys them.
    let replica = |identity: &str| {
        let mut cfg = app_config(&fleet, &dir);
        // The throttling member is a plain-http test server on loopback.
        cfg.runtime.trust.allow_plain_http_loopback = true;
        // The queries must work on the series the chart's default (no --metrics-detail) serves.
        cfg.metrics_detail = fleetnet_hub::metrics::MetricsDetail::Fleet;
        cfg.leader_election = Some(LeaderElection {
            namespace: "fleetnet-system".into(),
            name: "fleetnet-hub".into(),
            identity: identity.into(),
            shard_members: false,
            shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
        });
        cfg
    };
    let leader = app::start(replica("replica-a"), Extensions::default())
        .await
        .expect("replica a starts");
    eventually("replica-a leads", || async {
        leader.claim.may_write().then_some(())
    })
    .await;
    let standby = app::start(replica("replica-b"), Extensions::default())
        .await
        .expect("replica b starts");
    for running in [&leader, &standby] {
        for m in ["alpha", "beta"] {
            wait_phase(running, m, Phase::Ready).await;
        }
        wait_phase(running, "throttled", Phase::Failing).await;
    }
    for m in ["alpha", "beta"] {
        create_export_of(&fleet, m, "shop", "cart").await;
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-cart", |_| true).await;
    }

    // The hub goes away for a while: hub requests without an answer, a reconcile error. Killed,
    // not stopped: a graceful stop blocks here for up to 10 s, and the export below would race
    // the leader's renew deadline (a standby's reconciles are skipped, not errors).
    fleet.hub_mut().kill();
    let leader_metrics = leader.metrics.clone();
    slowly("a hub request without an answer", || {
        let text = leader_metrics.encode();
        async move {
            text.lines()
                .any(|l| {
                    l.starts_with("fleetnet_api_requests_total{client=\"hub\"")
                        && l.contains("code=\"none\"")
                })
                .then_some(())
        }
    })
    .await;
    create_export_of(&fleet, "alpha", "shop", "during-outage").await;
    slowly("a reconcile error during the outage", || {
        let text = leader_metrics.encode();
        async move {
            text.lines()
                .any(|l| {
                    l.starts_with("fleetnet_reconcile_total{")
                        && l.contains("outcome=\"error:")
                        && !l.contains("not_leader")
                })
                .then_some(())
        }
    })
    .await;
    fleet.hub_mut().start().await.expect("hub back");
    let hub = fleet.hub().client().await.expect("hub client");
    slowly("the export made during the outage reaches the hub", || {
        let api = ises(&hub, &fleet.hub_namespace("alpha"));
        async move { api.get_opt("shop-during-outage").await.ok().flatten() }
    })
    .await;

    // promtool check metrics on a real scrape of each replica.
    for running in [&leader, &standby] {
        let (status, body) = http_get(running.metrics_address, "/metrics").await;
        assert_eq!(status, 200, "GET /metrics");
        check_metrics(&promtool, &body);
    }
    let checked_metrics = started.elapsed();

    // Prometheus scrapes both replicas, with the target labels the Prometheus Operator gives a
    // ServiceMonitor's targets.
    let target = |addr: std::net::SocketAddr, pod: &str| {
        format!(
            "      - targets: ['{addr}']\n        labels: {{namespace: fleetnet-system, pod: {pod}, container: fleetnet-hub, service: {job}, endpoint: metrics}}\n"
        )
    };
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n{}{}",
        target(leader.metrics_address, "fleetnet-hub-0"),
        target(standby.metrics_address, "fleetnet-hub-1"),
    );
    let prom = Prometheus::start(&config).await;
    let up = format!("count_over_time(up{{job=\"{job}\"}}[5m]) >= 10");
    slowly("10 scrapes of both replicas", || {
        let (prom, up) = (&prom, &up);
        async move {
            let r = prom.query(up).await.ok()?;
            (r.len() == 2).then_some(())
        }
    })
    .await;
    let targets = prom
        .api("targets", &[("state", "active")])
        .await
        .expect("targets");
    let active = targets["activeTargets"].as_array().expect("activeTargets");
    assert!(
        active.len() == 2 && active.iter().all(|t| t["health"] == "up"),
        "both replicas scraped: {targets:#}"
    );
    // What the NoLeader and HubUnreachable alerts read: the leader 1, the standby 0; the hub
    // answers both.
    for (query, expected) in [
        (
            "fleetnet_leader",
            vec![("fleetnet-hub-0", "1"), ("fleetnet-hub-1", "0")],
        ),
        (
            "fleetnet_hub_reachable",
            vec![("fleetnet-hub-0", "1"), ("fleetnet-hub-1", "1")],
        ),
    ] {
        let r = prom.query(query).await.expect(query);
        let mut seen: Vec<(String, String)> = r
            .iter()
            .map(|v| {
                let pod = v["metric"]["pod"].as_str().unwrap_or_default().to_string();
                (pod, v["value"][1].as_str().unwrap_or_default().to_string())
            })
            .collect();
        seen.sort();
        let expected: Vec<(String, String)> = expected
            .into_iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect();
        assert_eq!(seen, expected, "{query} by replica");
    }

    let mut problems = vec![];
    // Variables first: their values are what the panels are evaluated with.
    let mut values: Vec<(String, String)> = vec![];
    for (name, selector, label) in label_values_variables(&board) {
        let selector = values
            .iter()
            .fold(selector, |s, (n, v)| s.replace(&format!("${n}"), v));
        let q = format!("count by ({label}) (last_over_time({selector}[15m]))");
        let found: Vec<String> = match prom.query(&q).await {
            Ok(r) => r
                .iter()
                .filter_map(|v| v["metric"][label.as_str()].as_str().map(str::to_string))
                .collect(),
            Err(e) => {
                problems.push(format!("variable {name}: {e}"));
                vec![]
            }
        };
        if found.is_empty() {
            problems.push(format!("variable {name}: label_values finds nothing"));
        }
        // As Grafana formats a multi-value selection for a regex matcher.
        let value = if found.len() == 1 {
            found[0].clone()
        } else {
            format!("({})", found.join("|"))
        };
        values.push((name, value));
    }
    let member_values = values
        .iter()
        .find(|(n, _)| n == "member")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    for m in ["alpha", "beta", "throttled"] {
        assert!(
            member_values.contains(m),
            "$member lists {m}: {member_values}"
        );
    }
    assert!(
        values.iter().any(|(n, v)| n == "job" && *v == job),
        "$job is {job}: {values:?}"
    );

    let queries = panel_queries(&board);
    for q in &queries {
        let expr = values
            .iter()
            .fold(q.expr.replace("$__rate_interval", "1m"), |e, (n, v)| {
                e.replace(&format!("${n}"), v)
            });
        assert!(
            !expr.contains('$'),
            "panel {}: unknown variable in {expr}",
            q.panel
        );
        problems.extend(
            check_query(
                &prom,
                &format!("panel {:?}", q.panel),
                &expr,
                true,
                q.legend.as_deref(),
            )
            .await,
        );
    }
    let mut rules = alerts(&default_rules);
    rules.extend(
        alerts(&sharded_rules)
            .into_iter()
            .filter(|(a, _)| !rules.iter().any(|(b, _)| a == b))
            .collect::<Vec<_>>(),
    );
    for (alert, expr) in &rules {
        problems.extend(check_query(&prom, &format!("alert {alert}"), expr, false, None).await);
        // The expression without its threshold returns series.
        let ast = prom.parse(expr).await.expect("parsed above");
        if let Some(lhs) = without_threshold(&ast, expr) {
            match prom.query(&lhs).await {
                Ok(r) if !r.is_empty() => {}
                Ok(_) => problems.push(format!("alert {alert}: nothing without threshold: {lhs}")),
                Err(e) => problems.push(format!("alert {alert}: {e}")),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\nPrometheus log:\n{}",
        problems.len(),
        problems.join("\n"),
        prom.log()
    );
    eprintln!(
        "operating: promtool check metrics clean after {checked_metrics:?}; {} panel queries and {} alert expressions evaluated against Prometheus; total {:?}",
        queries.len(),
        rules.len(),
        started.elapsed()
    );
    drop(prom);
    standby.shutdown().await;
    leader.shutdown().await;
}
