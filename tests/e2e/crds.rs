//! The CRDs generated from the Rust types: committed YAML is fresh, and the schemas are
//! wire-compatible with fleet-networking's own CRDs.

use std::path::Path;

use crate::support::repo;

use fleetnet_hub::api::{crd_files, crd_yaml, internal_service_export_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

#[test]
fn committed_crds_are_fresh() {
    for (file, crd) in crd_files() {
        let path = repo().join("charts/fleetnet-hub/crds").join(file);
        let committed =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let fresh = crd_yaml(&crd).expect("CRD serializes");
        assert!(
            committed == fresh,
            "{} is stale: run `cargo run -- crdgen` and commit the result",
            path.display()
        );
    }
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::to_value(crd).expect("CRD to JSON")
}

/// Descriptions are prose; `required` is a set; numbers compare by value.
fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("description");
            if let Some(Value::Array(req)) = map.get_mut("required") {
                req.sort_by_key(|r| r.to_string());
            }
            for child in map.values_mut() {
                normalize(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::Number(n) => {
            if let Some(f) = n.as_f64() {
                *v = serde_json::json!(f);
            }
        }
        _ => {}
    }
}

/// Every path at which two JSON values differ, for a readable failure.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => differences(&format!("{path}.{k}"), l, r, out),
                    (l, r) => out.push(format!("{path}.{k}: ours {l:?} / fleet-networking {r:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), l, r, out);
            }
        }
        (l, r) if l != r => out.push(format!("{path}: ours {l} / fleet-networking {r}")),
        _ => {}
    }
}

#[test]
fn generated_crds_are_wire_compatible_with_fleet_networking() {
    for (file, crd) in crd_files() {
        let reference = repo()
            .join("tests/fixtures/fleet-networking-crds")
            .join(file);
        let mut theirs = load(&reference);
        let mut ours = serde_json::to_value(crd).expect("CRD to JSON");
        // Only the parts that decide what is on the wire and what the apiserver accepts.
        for v in [&mut theirs, &mut ours] {
            normalize(v);
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("annotations");
            }
        }
        let mut diffs = vec![];
        differences("", &ours["spec"], &theirs["spec"], &mut diffs);
        differences("", &ours["metadata"], &theirs["metadata"], &mut diffs);
        assert!(
            diffs.is_empty(),
            "{file} differs from fleet-networking's CRD:\n{}",
            diffs.join("\n")
        );
    }
}

#[test]
fn the_comparison_catches_a_renamed_field() {
    let mut theirs = load(&repo().join("tests/fixtures/fleet-networking-crds/networking.fleet.azure.com_internalserviceexports.yaml"));
    let mut ours = serde_json::to_value(internal_service_export_crd()).expect("CRD to JSON");
    let spec = &mut ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    let weight = spec
        .as_object_mut()
        .and_then(|m| m.remove("weight"))
        .expect("weight field");
    spec["weigth"] = weight;
    normalize(&mut theirs);
    normalize(&mut ours);
    let mut diffs = vec![];
    differences("", &ours["spec"], &theirs["spec"], &mut diffs);
    assert!(diffs.iter().any(|d| d.contains("weigth")), "{diffs:?}");
    assert!(diffs.iter().any(|d| d.contains(".weight")), "{diffs:?}");
}
