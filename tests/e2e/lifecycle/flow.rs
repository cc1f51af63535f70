//! The lifecycle, in one fleet: install, exports flowing through every job, upgrade with the
//! pods rolled one at a time, rollback, the drain refused while a pod runs, uninstall + drain,
//! then nothing of the controller left and every user object kept (`checks`), a second drain
//! that writes nothing.

use super::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fleetnet_hub::api::{
    EndpointSliceExport, EndpointSliceImport, InternalServiceExport, InternalServiceImport,
    MultiClusterService, ServiceImport,
};
use fleetnet_testenv::{ScopedIdentity, load_cluster_role, load_role};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_upgrade_rollback_uninstall_leave_nothing_of_the_controller() {
    let fleet = Fleet::builder()
        .members(MEMBERS)
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", NS)
        .await
        .expect("release namespace");
    let scratch = fleet.scratch_dir().join("lifecycle");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let kubeconfig_dir = scratch.join("kubeconfigs");
    member_kubeconfigs(
        &hub,
        &kubeconfig_dir,
        &member_identities(&fleet, &scratch).await,
    )
    .await;
    let values = scratch.join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "members: [{}]\nmemberKubeconfigSecrets: [{{name: {KUBECONFIGS_SECRET}}}]\n",
            MEMBERS.join(", ")
        ),
    )
    .expect("values");
    let values = values.to_string_lossy().into_owned();
    let chart_v1 = repo()
        .join("charts/fleetnet-hub")
        .to_string_lossy()
        .into_owned();

    // Install: the release's own ServiceAccount token and RBAC for the pods.
    let helm = Helm::new(&fleet);
    helm.run(&["install", RELEASE, &chart_v1, "-f", &values]);
    let v1 = rendering(&helm.manifest());
    assert_eq!(v1.chart, "fleetnet-hub-0.1.0");
    let sa = ScopedIdentity {
        namespace: NS.into(),
        name: RELEASE.into(),
        cluster_role: None,
        role: None,
        role_namespaces: vec![],
    };
    let mounts = Mounts {
        hub_kubeconfig: fleet
            .hub()
            .issue_scoped_kubeconfig(&sa, &scratch.join("hub-sa.kubeconfig"))
            .await
            .expect("the chart's ServiceAccount token"),
        kubeconfig_dir,
        scratch: scratch.clone(),
    };
    let members = users_objects(&fleet).await;
    let mut pods: Vec<Pod> = (0..2)
        .map(|i| start_pod(&format!("{RELEASE}-v1-{i}"), &v1, &mounts))
        .collect();
    exports_flowing(&hub, &members).await;
    let before = converged(&hub, &members).await;
    println!(
        "lifecycle: installed 0.1.0, {} objects converged",
        before.len()
    );

    // Upgrade to the next chart version with a changed value; pods rolled one at a time.
    let chart_v2 = next_version(&scratch);
    helm.run(&[
        "upgrade",
        RELEASE,
        &chart_v2,
        "-f",
        &values,
        "--set",
        "controller.memberSyncTimeout=90s",
    ]);
    let v2 = rendering(&helm.manifest());
    assert_eq!(v2.chart, "fleetnet-hub-0.2.0");
    assert!(
        v1.args.contains(&"--member-sync-timeout=60s".to_string()),
        "{:?}",
        v1.args
    );
    assert!(
        v2.args.contains(&"--member-sync-timeout=90s".to_string()),
        "{:?}",
        v2.args
    );
    roll(&hub, &mut pods, &v2, "v2", &mounts, &before).await;
    assert_eq!(
        converged(&hub, &members).await,
        before,
        "the upgrade rewrote converged objects"
    );
    println!("lifecycle: upgraded to 0.2.0, pods rolled, no export lost, nothing rewritten");

    // Rollback to the first revision: its rendering again.
    helm.run(&["rollback", RELEASE, "1"]);
    let v3 = rendering(&helm.manifest());
    assert_eq!(v3, v1, "the rollback renders revision 1");
    roll(&hub, &mut pods, &v3, "v3", &mounts, &before).await;
    assert_eq!(
        converged(&hub, &members).await,
        before,
        "the rollback rewrote converged objects"
    );
    println!("lifecycle: rolled back to 0.1.0, pods rolled, nothing rewritten");

    // The drain refuses while a pod holds the release's Lease, and writes nothing.
    let (ok, _, stderr) = drain(&fleet, &["--wait-seconds", "0"]);
    assert!(!ok && stderr.contains("still running"), "{stderr}");
    assert_eq!(
        converged(&hub, &members).await,
        before,
        "a refused drain wrote"
    );

    // Uninstall: the pods get SIGTERM (their RBAC is gone already), then the drain.
    helm.run(&["uninstall", RELEASE]);
    for pod in pods.drain(..) {
        pod.terminate();
    }
    let (ok, stdout, stderr) = drain(&fleet, &["--delete-crds"]);
    assert!(ok, "the drain failed:\n{stdout}\n{stderr}");
    println!("lifecycle: the drain's summary: {stdout}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("json summary");
    for m in MEMBERS {
        let t = &summary["members"][m];
        assert!(t["finalizers"].as_u64() > Some(0), "{m}: {summary}");
        assert!(t["deleted"].as_u64() > Some(0), "{m}: {summary}");
    }
    assert!(
        summary["release"]["deleted"].as_u64() > Some(0),
        "{summary}"
    );
    super::checks::nothing_of_the_controller_left(&fleet, &hub).await;
    super::checks::every_user_object_kept(&fleet, &hub).await;

    // Idempotent: a second drain finds nothing to do.
    let (ok, stdout, stderr) = drain(&fleet, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    let again: serde_json::Value = serde_json::from_str(&stdout).expect("json summary");
    for (who, t) in again["members"].as_object().into_iter().flatten() {
        for field in ["finalizers", "deleted", "cleared"] {
            assert_eq!(t[field], 0, "{who} {field} on a second drain: {again}");
        }
    }
    super::checks::user_objects_deletable(&fleet).await;
    println!(
        "lifecycle: uninstalled; nothing of the controller left; user objects kept and deletable"
    );
}

/// A ServiceAccount with the member ClusterRole and fleet system Role the chart ships, in every
/// member: the pods' (and the drain's) member identity.
async fn member_identities(fleet: &Fleet, scratch: &Path) -> BTreeMap<String, PathBuf> {
    let role = load_cluster_role(&repo().join("charts/fleetnet-hub/files/member-clusterrole.yaml"))
        .expect("member ClusterRole");
    let id = ScopedIdentity {
        namespace: NS.into(),
        name: "fleetnet-hub-member".into(),
        cluster_role: Some(role),
        role: Some(
            load_role(&repo().join("charts/fleetnet-hub/files/member-fleet-system-role.yaml"))
                .expect("member fleet system Role"),
        ),
        role_namespaces: vec![SYSTEM.into()],
    };
    let mut files = BTreeMap::new();
    for m in MEMBERS {
        let path = fleet
            .member(m)
            .issue_scoped_kubeconfig(&id, &scratch.join(format!("{m}-sa.kubeconfig")))
            .await
            .expect("member identity");
        files.insert(m.to_string(), path);
    }
    files
}

/// The chart copied with its version bumped to 0.2.0.
fn next_version(scratch: &Path) -> String {
    let to = scratch.join("chart-0.2.0");
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo().join("charts/fleetnet-hub"))
        .arg(&to)
        .status()
        .expect("cp");
    assert!(status.success());
    let chart_yaml = to.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart_yaml).expect("Chart.yaml");
    assert!(text.contains("\nversion: 0.1.0\n"), "{text}");
    std::fs::write(
        &chart_yaml,
        text.replace("\nversion: 0.1.0\n", "\nversion: 0.2.0\n"),
    )
    .expect("bump");
    to.to_string_lossy().into_owned()
}

/// What the user makes: on every member a Service, its ServiceExport and an EndpointSlice of
/// it; on member-1 also a MultiClusterService importing it and a ServiceImport of its own.
async fn users_objects(fleet: &Fleet) -> Vec<kube::Client> {
    let mut clients = vec![];
    for m in MEMBERS {
        let member = fleet.member(m).client().await.expect("member client");
        namespace(&member, APP).await;
        namespace(&member, SYSTEM).await;
        create_service(&member, &service(APP, "cart", 80)).await;
        create_export(&member, APP, "cart", &[]).await;
        slices(&member, APP)
            .create(
                &PostParams::default(),
                &endpoint_slice(APP, "cart-1", "cart", &["10.0.0.1"]),
            )
            .await
            .expect("EndpointSlice");
        clients.push(member);
    }
    let member = &clients[0];
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "cart", "namespace": APP},
        "spec": {"serviceImport": {"name": "cart"}}
    }))
    .expect("MCS");
    Api::<MultiClusterService>::namespaced(member.clone(), APP)
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create MCS");
    let import: ServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "ServiceImport",
        "metadata": {"name": "db", "namespace": APP}
    }))
    .expect("ServiceImport");
    Api::<ServiceImport>::namespaced(member.clone(), APP)
        .create(&PostParams::default(), &import)
        .await
        .expect("create ServiceImport");
    clients
}

/// Every job at work: exports of both members, the imports' copies in the hub, the hub's
/// verdict on the MCS's import (written as fleet-networking's hub controller writes it), the
/// derived Service, and an EndpointSliceImport imported into the fleet system namespace.
async fn exports_flowing(hub: &kube::Client, members: &[kube::Client]) {
    // The hub's conflict verdict on each ISE (as fleet-networking's hub controller writes it):
    // a slice is exported only once its ServiceExport is not in conflict.
    let verdict = json!({"status": {"conditions": [{
        "type": "Conflict", "status": "False", "reason": "NoConflictFound",
        "message": "service shop/cart is exported without conflict",
        "observedGeneration": 1, "lastTransitionTime": "2026-12-07T00:00:00Z",
    }]}});
    for m in MEMBERS {
        let ns = format!("fleet-member-{m}");
        wait_ise(hub, &ns, "shop-cart", |_| true).await;
        ises(hub, &ns)
            .patch_status(
                "shop-cart",
                &PatchParams::default(),
                &Patch::Merge(&verdict),
            )
            .await
            .expect("the hub's verdict on the ISE");
        wait_slice_export(hub, &ns, APP, "cart-1", |_| true).await;
    }
    let hub_ns = "fleet-member-member-1";
    let isis: Api<InternalServiceImport> = Api::namespaced(hub.clone(), hub_ns);
    for name in ["shop-cart", "shop-db"] {
        eventually(&format!("InternalServiceImport {name}"), || async {
            isis.get_opt(name).await.ok().flatten()
        })
        .await;
    }
    let mut isi = isis.get("shop-cart").await.expect("ISI");
    isi.status = Some(
        serde_json::from_value(json!({
            "type": "ClusterSetIP",
            "clusters": [{"cluster": "member-1"}, {"cluster": "member-2"}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
        }))
        .expect("verdict"),
    );
    isis.replace_status("shop-cart", &PostParams::default(), &isi)
        .await
        .expect("the hub's verdict");
    let derived: Api<Service> = Api::namespaced(members[0].clone(), SYSTEM);
    eventually("the derived Service", || async {
        derived.get_opt("shop-cart").await.ok().flatten()
    })
    .await;
    let esi: EndpointSliceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "EndpointSliceImport",
        "metadata": {"name": "member-2-shop-cart-1", "namespace": hub_ns},
        "spec": {
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "endpointSliceReference": {
                "clusterId": "member-2", "kind": "EndpointSlice", "namespace": APP,
                "name": "cart-1", "resourceVersion": "0", "generation": 1,
                "uid": "00000000-0000-0000-0000-000000000000",
                "namespacedName": "shop/cart-1", "exportedSince": "2026-12-07T00:00:00Z"
            },
            "ownerServiceReference": {"namespace": APP, "name": "cart", "namespacedName": "shop/cart"}
        }
    }))
    .expect("EndpointSliceImport");
    Api::<EndpointSliceImport>::namespaced(hub.clone(), hub_ns)
        .create(&PostParams::default(), &esi)
        .await
        .expect("create EndpointSliceImport");
    let imported: Api<EndpointSlice> = Api::namespaced(members[0].clone(), SYSTEM);
    eventually("the imported EndpointSlice", || async {
        imported
            .get_opt("member-2-shop-cart-1")
            .await
            .ok()
            .flatten()
    })
    .await;
}

/// Every object the jobs write or keep converged, with its resourceVersion, once it holds
/// still for 5 s (Leases, heartbeats and MemberStatus are not among them).
async fn converged(hub: &kube::Client, members: &[kube::Client]) -> BTreeMap<String, String> {
    let read = || async {
        let mut all = BTreeMap::new();
        for m in MEMBERS {
            let ns = format!("fleet-member-{m}");
            all.extend(
                versions(
                    &Api::<InternalServiceExport>::namespaced(hub.clone(), &ns),
                    "ISE",
                )
                .await,
            );
            all.extend(
                versions(
                    &Api::<EndpointSliceExport>::namespaced(hub.clone(), &ns),
                    "ESE",
                )
                .await,
            );
            all.extend(
                versions(
                    &Api::<InternalServiceImport>::namespaced(hub.clone(), &ns),
                    "ISI",
                )
                .await,
            );
            all.extend(
                versions(
                    &Api::<EndpointSliceImport>::namespaced(hub.clone(), &ns),
                    "ESI",
                )
                .await,
            );
        }
        for (m, member) in MEMBERS.iter().zip(members) {
            let tag = |k: &str| format!("{m} {k}");
            all.extend(versions(&exports(member, APP), &tag("ServiceExport")).await);
            all.extend(
                versions(
                    &Api::<MultiClusterService>::all(member.clone()),
                    &tag("MCS"),
                )
                .await,
            );
            all.extend(
                versions(
                    &Api::<ServiceImport>::all(member.clone()),
                    &tag("ServiceImport"),
                )
                .await,
            );
            all.extend(
                versions(
                    &Api::<Service>::namespaced(member.clone(), SYSTEM),
                    &tag("Service"),
                )
                .await,
            );
            all.extend(
                versions(
                    &Api::<EndpointSlice>::all(member.clone()),
                    &tag("EndpointSlice"),
                )
                .await,
            );
        }
        all
    };
    let mut last = read().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = read().await;
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "still changing after 60 s");
        last = now;
    }
}

/// Replaces the pods one at a time as the chart's rolling update does (maxSurge 1,
/// maxUnavailable 0): a pod with `rendering` started and ready, then the oldest SIGTERMed;
/// every export stays in the hub throughout.
async fn roll(
    hub: &kube::Client,
    pods: &mut Vec<Pod>,
    rendering: &Rendering,
    revision: &str,
    mounts: &Mounts,
    before: &BTreeMap<String, String>,
) {
    let exported: Vec<String> = before
        .keys()
        .filter(|k| k.starts_with("ISE "))
        .cloned()
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (hub, stop) = (hub.clone(), stop.clone());
        tokio::spawn(async move {
            let mut lost = vec![];
            while !stop.load(Ordering::Relaxed) {
                let mut now = BTreeMap::new();
                for m in MEMBERS {
                    let api = Api::<InternalServiceExport>::namespaced(
                        hub.clone(),
                        &format!("fleet-member-{m}"),
                    );
                    now.extend(versions(&api, "ISE").await);
                }
                lost.extend(exported.iter().filter(|k| !now.contains_key(*k)).cloned());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            lost
        })
    };
    for i in 0..pods.len() {
        let new = start_pod(&format!("{RELEASE}-{revision}-{i}"), rendering, mounts);
        new.ready().await;
        pods.push(new);
        let old = pods.remove(0);
        tokio::task::spawn_blocking(move || old.terminate())
            .await
            .expect("terminate");
    }
    let leases: Api<Lease> = Api::namespaced(hub.clone(), NS);
    let prefix = format!("{RELEASE}-{revision}-");
    eventually("a pod of the new revision leads", || async {
        let lease = leases.get_opt(RELEASE).await.ok().flatten()?;
        let holder = lease.spec?.holder_identity?;
        holder.starts_with(&prefix).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let lost = watcher.await.expect("watcher");
    assert!(
        lost.is_empty(),
        "exports missing from the hub during the roll: {lost:?}"
    );
}
