//! The chart's alert rules: `promtool check rules` and the unit tests of
//! tests/fixtures/prometheus-rules/.

use super::*;

fn fixture(name: &str) -> std::path::PathBuf {
    repo().join("tests/fixtures/prometheus-rules").join(name)
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let started = Instant::now();
    let promtool = promtool();
    // Off by default: nothing monitoring-related is rendered.
    let plain = render_chart(&[]);
    for kind in ["PrometheusRule", "ServiceMonitor"] {
        assert!(
            of_kind(&plain, kind).is_empty(),
            "{kind} rendered by default"
        );
    }
    assert!(
        of_kind(&plain, "ConfigMap")
            .iter()
            .all(|c| c["metadata"]["labels"]["grafana_dashboard"].is_null()),
        "dashboard rendered by default"
    );

    let (default, sharded) = rendered_rules();
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, rules) in [("full.yaml", &default), ("full-sharded.yaml", &sharded)] {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_string_pretty(rules).expect("JSON")).expect("write");
        let (ok, out) = run_tool(Command::new(&promtool).args(["check", "rules"]).arg(&path));
        assert!(ok, "promtool check rules {name}:\n{out}");
        assert!(
            !out.contains("WARNING"),
            "promtool check rules {name}:\n{out}"
        );
    }

    let mut covered = BTreeSet::new();
    for (fixture_name, rules, rules_name) in [
        ("alerts.test.yaml", &default, "rules.yaml"),
        ("sharded.test.yaml", &sharded, "rules-sharded.yaml"),
    ] {
        let test_file = stage_rule_tests(dir.path(), &fixture(fixture_name), rules, rules_name);
        let (ok, out) = run_tool(
            Command::new(&promtool)
                .args(["test", "rules"])
                .arg(&test_file)
                .current_dir(dir.path()),
        );
        assert!(ok, "promtool test rules {fixture_name}:\n{out}");

        // Each alert has a case where it fires and one where it stays silent.
        let tests: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(fixture(fixture_name)).expect("fixture"),
        )
        .expect("fixture parses");
        let cases: Vec<(String, bool)> = tests["tests"]
            .as_array()
            .expect("tests")
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
            .map(|c| {
                let fires = c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
                (
                    c["alertname"].as_str().unwrap_or_default().to_string(),
                    fires,
                )
            })
            .collect();
        // The sharded file tests only what the default rendering lacks.
        let new: Vec<String> = alerts(rules)
            .into_iter()
            .map(|(a, _)| a)
            .filter(|a| !covered.contains(a))
            .collect();
        for alert in new {
            for fires in [true, false] {
                assert!(
                    cases.contains(&(alert.clone(), fires)),
                    "{fixture_name}: no case where {alert} {}",
                    if fires { "fires" } else { "stays silent" }
                );
            }
            covered.insert(alert);
        }
    }

    // The operation page's alert table names every alert the chart can render.
    let readme =
        std::fs::read_to_string(repo().join("docs/operation.md")).expect("docs/operation.md");
    let operating = readme
        .split("\n## Operating")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/operation.md has an Operating section");
    for alert in &covered {
        assert!(
            operating.contains(&format!("`{alert}`")),
            "docs/operation.md Operating section lacks {alert}"
        );
    }
    eprintln!(
        "alert rules: {} alerts checked and unit-tested in {:?}",
        covered.len(),
        started.elapsed()
    );
}
