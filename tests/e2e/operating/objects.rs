//! The monitoring objects apply to a hub with the Prometheus Operator's CRDs.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_objects_apply_to_a_hub_with_the_prometheus_operator_crds() {
    let started = Instant::now();
    let crds_dir = installed("prometheus-operator-crds");
    let (_fleet, hub) = fleet_with_release_namespace(&["member-1"]).await;
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    for file in [
        "monitoring.coreos.com_servicemonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
    ] {
        let text = std::fs::read_to_string(crds_dir.join(file)).expect("CRD file");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("CRD parses");
        let name = crd.metadata.name.clone().expect("CRD name");
        crds.patch(
            &name,
            &PatchParams::apply("operating-test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        eventually(&format!("CRD {name} established"), || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }

    // With the alert labels and dashboard folder an operator would set.
    let mut args = MONITORING_ON.to_vec();
    args.extend([
        "--set",
        "metrics.prometheusRule.labels.release=prometheus",
        "--set",
        "metrics.prometheusRule.alertLabels.team=networking",
        "--set",
        "metrics.grafanaDashboard.annotations.grafana_folder=Fleet",
    ]);
    let rendered = render_chart(&args);
    let discovery = Discovery::new(hub.clone()).run().await.expect("discovery");
    let mut applied = vec![];
    for obj in rendered.iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ServiceMonitor" | "PrometheusRule")
        ) || (o["kind"] == "ConfigMap" && !o["metadata"]["labels"]["grafana_dashboard"].is_null())
    }) {
        let obj: DynamicObject = serde_json::from_value(obj.clone()).expect("an object");
        let (resource, _) = support::served_as(&discovery, &obj);
        let name = obj.metadata.name.clone().expect("name");
        let ns = obj.metadata.namespace.clone().expect("namespace");
        let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), &ns, &resource);
        let mut params = PatchParams::apply("operating-test").force();
        // Unknown or misplaced fields are refused, not silently dropped.
        params.field_validation = Some(ValidationDirective::Strict);
        api.patch(&name, &params, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("apply {} {ns}/{name}: {e}", resource.kind));
        let back = api.get(&name).await.expect("read back");
        // The stored object carries the rendered spec (no field pruned by the CRD's schema).
        assert_eq!(
            serde_json::to_value(&back.data).expect("JSON"),
            serde_json::to_value(&obj.data).expect("JSON"),
            "{} {name} stored as rendered",
            resource.kind
        );
        applied.push(resource.kind.clone());
    }
    applied.sort();
    assert_eq!(
        applied,
        ["ConfigMap", "PrometheusRule", "ServiceMonitor"],
        "each monitoring object applied"
    );
    eprintln!(
        "monitoring objects applied with strict validation in {:?}",
        started.elapsed()
    );
}
