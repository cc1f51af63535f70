//! How a member is served: through v1alpha1 when that is all it serves, over one connection.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_serving_only_v1alpha1_is_read_through_v1alpha1() {
    use fleetnet_hub::api::{
        ServiceExportVersion, crd_yaml, internal_service_export_crd, service_export_crd,
    };
    let crds = tempfile::tempdir().expect("tempdir");
    let mut se = service_export_crd();
    se.spec.versions.retain(|v| v.name == "v1alpha1");
    se.spec.versions[0].storage = true;
    std::fs::write(crds.path().join("se.yaml"), crd_yaml(&se).expect("yaml")).expect("write");
    std::fs::write(
        crds.path().join("ise.yaml"),
        crd_yaml(&internal_service_export_crd()).expect("yaml"),
    )
    .expect("write");
    let fleet = Fleet::builder()
        .members(["old"])
        .crds_dir(crds.path())
        .start()
        .await
        .expect("fleet");
    let client = fleet.member("old").client().await.expect("client");
    assert_eq!(
        fleetnet_hub::api::ServiceExportVersion::discover(&client).await,
        Ok(ServiceExportVersion::V1Alpha1)
    );

    let dir = member_dir(&fleet, &["old"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_ready(&running).await;
    namespace(&client, "ns1").await;
    create_service(&client, &service("ns1", "web", 80)).await;
    let se = fleetnet_hub::api::ServiceExport::new("ns1", "web", ServiceExportVersion::V1Alpha1);
    kube::api::Api::<fleetnet_hub::api::ServiceExport>::namespaced_with(
        client.clone(),
        "ns1",
        &ServiceExportVersion::V1Alpha1,
    )
    .create(&Default::default(), &se)
    .await
    .expect("create v1alpha1 ServiceExport");
    let hub = fleet.hub().client().await.expect("hub");
    wait_ise(&hub, &fleet.hub_namespace("old"), "ns1-web", |_| true).await;
    running.shutdown().await;
}

/// A member's watches, requests and Events travel over one HTTP/2 connection: with
/// HTTP/1.1 each watch holds a connection of its own (three to four per member, each a TLS
/// session in memory on both ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_served_over_one_connection() {
    let fleet = Fleet::builder()
        .members(["alpha"])
        .quiet()
        .start()
        .await
        .expect("fleet");
    {
        // Exports to reconcile (writes and Events on the member); this client and its
        // connections are gone before the controller starts.
        let member = fleet.member("alpha").client().await.expect("member client");
        namespace(&member, "web").await;
        for name in ["a", "b"] {
            create_service(&member, &service("web", name, 80)).await;
            create_export(&member, "web", name, &[]).await;
        }
    }
    let port: u16 = fleet
        .member("alpha")
        .server()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the member's port");
    eventually("the setup client's connections closed", || async {
        (connections_to(port) == 0).then_some(())
    })
    .await;
    let dir = member_dir(&fleet, &["alpha"]);
    let running = app::start(config(&fleet, &dir), Extensions::default())
        .await
        .expect("starts");
    wait_phase(&running, "alpha", Phase::Ready).await;
    let hub = fleet.hub().client().await.expect("hub client");
    for name in ["web-a", "web-b"] {
        wait_ise(&hub, &fleet.hub_namespace("alpha"), name, |_| true).await;
    }
    assert_eq!(
        connections_to(port),
        1,
        "connections of this process to the member's API server while it is exported"
    );
    running.shutdown().await;
}

/// Established TCP connections of this process to 127.0.0.1:`port`.
fn connections_to(port: u16) -> usize {
    let sockets: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .trim_end_matches(']')
                    .to_string(),
            )
        })
        .collect();
    let table = std::fs::read_to_string("/proc/self/net/tcp").expect("tcp table");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = fields
                .get(2)
                .and_then(|remote| remote.split(':').nth(1))
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            fields.get(3) == Some(&"01")
                && remote_port == Some(port)
                && fields.get(9).is_some_and(|inode| sockets.contains(*inode))
        })
        .count()
}
