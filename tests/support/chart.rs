//! The repository's Helm charts rendered by helm (built once by `tests/testenv/install.sh`),
//! for the substrate's Kubernetes version, and their objects picked by kind.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::repo;

/// The namespace the charts are rendered for.
pub const RELEASE_NS: &str = "fleetnet-system";

/// Runs `tests/testenv/install.sh <what>` (builds on first use, then only checks the cache) and
/// returns the directory it prints; panics with the script's output when it fails.
pub fn installed(what: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("tests/testenv/install.sh"))
        .arg(what)
        .output()
        .unwrap_or_else(|e| panic!("run tests/testenv/install.sh {what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or_default().trim().to_string();
    assert!(
        out.status.success() && !dir.is_empty(),
        "tests/testenv/install.sh {what} failed ({}): it builds {what} from its Go module (needs Go)\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(dir)
}

/// helm as tests/chart.sh finds it: `FLEETNET_HELM`, else the one tests/testenv/install.sh built.
pub fn helm() -> PathBuf {
    if let Ok(h) = std::env::var("FLEETNET_HELM") {
        return h.into();
    }
    installed("helm").join("helm")
}

/// The Kubernetes version the substrate runs (tests/testenv/versions.env), for `--kube-version`.
fn kube_version() -> String {
    let versions = std::fs::read_to_string(repo().join("tests/testenv/versions.env"))
        .expect("tests/testenv/versions.env");
    versions
        .lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_VERSION="))
        .expect("KUBERNETES_VERSION in versions.env")
        .trim()
        .to_string()
}

/// `helm template` of `chart` (a path in the repository) as release `release` in
/// [`RELEASE_NS`] with `args`: the non-null documents as JSON values.
pub fn render(release: &str, chart: &str, args: &[&str]) -> Vec<Value> {
    let out = Command::new(helm())
        .args(["template", "--kube-version", &kube_version(), release])
        .arg(repo().join(chart))
        .args(["--namespace", RELEASE_NS])
        .args(args)
        .output()
        .expect("run helm template");
    assert!(
        out.status.success(),
        "helm template {chart} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("helm output is UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&text).expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// charts/fleetnet-hub rendered as release fleetnet-hub with `args`.
pub fn render_chart(args: &[&str]) -> Vec<Value> {
    render("fleetnet-hub", "charts/fleetnet-hub", args)
}

/// The rendered objects of `kind`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one rendered object of `kind` (for ConfigMap: the one labelled for the Grafana sidecar).
pub fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(found.len(), 1, "one {kind} rendered");
    found[0]
}
