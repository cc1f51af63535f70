//! Converged means no write, also after a restart; what one verdict change costs.

use super::*;

/// Imports created and given verdicts, the binary stopped and started again: the second
/// start writes nothing (adoption of what the first wrote, as of what an agent wrote). One
/// verdict change costs the reference's two writes: the ServiceImport's status, then the
/// copy's reference to the version that status write made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_writes_nothing_and_a_verdict_change_costs_two_writes() {
    const N: usize = 5;
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    // The apiservers' counters run from before this test (a pooled cluster's may not be 0).
    let before = import_writes(&member, &hub).await;
    let both = || selected("serviceimport,internalserviceimport");
    let first = start_jobs(&fleet, M, both()).await;
    for i in 0..N {
        create_import(&member, NS, &format!("svc-{i}")).await;
    }
    for i in 0..N {
        let name = format!("svc-{i}");
        wait_finalized(&member, NS, &name).await;
        let copy = format!("{NS}-{name}");
        eventually(&format!("{copy} created"), || async {
            internals(&hub, &hub_ns)
                .get_opt(&copy)
                .await
                .ok()?
                .map(|_| ())
        })
        .await;
        set_hub_status(&hub, &hub_ns, &copy, verdict("ClusterSetIP")).await;
        wait_status(&member, NS, &name, &verdict("ClusterSetIP")).await;
    }
    let converged = settled_writes(&member, &hub, Duration::from_secs(2)).await;
    // Per import: the test's create, our finalizer and copy; the hub's verdict, our status
    // write and the copy's new version.
    assert_eq!((converged - before) as usize, 6 * N, "writes to converge");

    first.shutdown().await;
    let second = start_jobs(&fleet, M, both()).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        import_writes(&member, &hub).await,
        converged,
        "writes after a restart"
    );

    // One verdict change: the hub's write, then two of ours.
    set_hub_status(&hub, &hub_ns, &format!("{NS}-svc-0"), verdict("Headless")).await;
    wait_status(&member, NS, "svc-0", &verdict("Headless")).await;
    let after = settled_writes(&member, &hub, Duration::from_secs(2)).await;
    assert_eq!(after - converged, 3.0, "writes for one verdict change");
    second.shutdown().await;
}

/// What a member agent made (the finalizer, the copy with its production cache's TypeMeta
/// filled in, the verdict reflected) is adopted as it is: no write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_agent_made_is_adopted_without_a_write() {
    let (fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let mut si = create_import(&member, NS, "agent-made").await;
    si.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let si = imports(&member, NS)
        .replace("agent-made", &PostParams::default(), &si)
        .await
        .expect("the agent's finalizer");
    let copy = format!("{NS}-agent-made");
    let mut reference = expected_reference(&si);
    reference.kind = "ServiceImport".into();
    reference.api_version = Some("networking.fleet.azure.com/v1alpha1".into());
    let isi: InternalServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "InternalServiceImport",
        "metadata": {"name": copy, "namespace": hub_ns},
        "spec": {"serviceImportReference": reference},
    }))
    .expect("an InternalServiceImport");
    internals(&hub, &hub_ns)
        .create(&PostParams::default(), &isi)
        .await
        .expect("the agent's copy");
    let before = import_writes(&member, &hub).await;

    let running = start_jobs(&fleet, M, selected("serviceimport")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        import_writes(&member, &hub).await,
        before,
        "writes on adoption"
    );
    let kept = internals(&hub, &hub_ns).get(&copy).await.expect("get");
    assert_eq!(kept.spec.service_import_reference, reference);
    running.shutdown().await;
}

/// A member down: nothing is deleted on its account (a copy whose ServiceImport cannot be read
/// is kept), and the verdict the hub wrote meanwhile reaches the ServiceImport once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_down_loses_no_copy_and_catches_up_with_the_verdict() {
    let (mut fleet, hub, member, hub_ns) = one_member_fleet(M, &[NS]).await;
    let running = start_jobs(&fleet, M, selected("serviceimport")).await;
    create_import(&member, NS, "web").await;
    wait_finalized(&member, NS, "web").await;
    let copy = format!("{NS}-web");
    eventually("copy created", || async {
        internals(&hub, &hub_ns)
            .get_opt(&copy)
            .await
            .ok()?
            .map(|_| ())
    })
    .await;
    let deletes = || async {
        support::replicas::hub_requests(
            &hub,
            &["resource=\"internalserviceimports\"", "verb=\"DELETE\""],
        )
        .await
    };
    let deletes_before = deletes().await;

    fleet.member_mut(M).stop();
    // The hub's verdict, and a copy naming a ServiceImport the views never had.
    set_hub_status(&hub, &hub_ns, &copy, verdict("ClusterSetIP")).await;
    create_internal(&hub, &hub_ns, "unknown", (NS, "unknown"), None).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        deletes().await,
        deletes_before,
        "deleted while the member was down"
    );
    assert!(
        internals(&hub, &hub_ns)
            .get_opt("unknown")
            .await
            .expect("get")
            .is_some()
    );

    fleet.member_mut(M).start().await.expect("member back");
    let member = fleet.member(M).client().await.expect("member client");
    wait_status(&member, NS, "web", &verdict("ClusterSetIP")).await;
    // Read live now: the member has no such ServiceImport, and the copy goes.
    wait_no_internal(&hub, &hub_ns, "unknown").await;
    assert!(
        internals(&hub, &hub_ns)
            .get_opt(&copy)
            .await
            .expect("get")
            .is_some()
    );
    running.shutdown().await;
}
