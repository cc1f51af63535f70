//! End-to-end: a Service exported in every member lands in the member's hub namespace, and is
//! withdrawn when its ServiceExport goes.
//!
//! Clusters come from kubeconfig paths when `FLEETNET_E2E_HUB_KUBECONFIG` (hub admin) and
//! `FLEETNET_E2E_MEMBER_KUBECONFIG_DIR` (`<member>.yaml` admin kubeconfigs) are set — that is how
//! `tests/kind-e2e.sh` runs it against kind clusters — and from the real-apiserver substrate
//! otherwise. `FLEETNET_E2E_EXTERNAL_CONTROLLER=1` means the controller already runs (in the
//! cluster); otherwise it is started in-process against the same kubeconfigs.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use fleetnet_hub::app::{self, Extensions, Running};
use fleetnet_hub::config::Config;
use fleetnet_hub::fleet::registry;
use fleetnet_testenv::{Fleet, client_from_kubeconfig};
use kube::api::DeleteParams;
use support::*;

struct Clusters {
    hub: PathBuf,
    members: BTreeMap<String, PathBuf>,
    member_dir: PathBuf,
    prefix: String,
    _substrate: Option<Fleet>,
}

async fn clusters() -> Clusters {
    let prefix = std::env::var("FLEETNET_E2E_NAMESPACE_PREFIX")
        .unwrap_or_else(|_| fleetnet_hub::fleet::registry::DEFAULT_NAMESPACE_PREFIX.into());
    if let (Ok(hub), Ok(dir)) = (
        std::env::var("FLEETNET_E2E_HUB_KUBECONFIG"),
        std::env::var("FLEETNET_E2E_MEMBER_KUBECONFIG_DIR"),
    ) {
        let dir = PathBuf::from(dir);
        let members = registry::scan(&dir)
            .expect("FLEETNET_E2E_MEMBER_KUBECONFIG_DIR readable")
            .into_iter()
            .filter_map(|(name, src)| Some((name, src.place.path()?.to_path_buf())))
            .collect();
        return Clusters {
            hub: hub.into(),
            members,
            member_dir: dir,
            prefix,
            _substrate: None,
        };
    }
    let fleet = Fleet::builder()
        .members(["member-1", "member-2"])
        .start()
        .await
        .expect("substrate");
    let members = fleet
        .members()
        .iter()
        .map(|m| (m.name().to_string(), m.kubeconfig_path().to_path_buf()))
        .collect();
    Clusters {
        hub: fleet.hub().kubeconfig_path().to_path_buf(),
        members,
        member_dir: fleet.member_kubeconfig_dir(),
        prefix: fleetnet_testenv::DEFAULT_HUB_NAMESPACE_PREFIX.into(),
        _substrate: Some(fleet),
    }
}

async fn controller(c: &Clusters) -> Option<Running> {
    if std::env::var("FLEETNET_E2E_EXTERNAL_CONTROLLER").is_ok_and(|v| v == "1") {
        return None;
    }
    let config = Config::builder(Some(c.hub.clone()), &c.member_dir)
        .namespace_prefix(&c.prefix)
        // Far above the 30 s the test waits for readiness: a member must be Ready because
        // its watches listed, never because this timeout woke a lost sync signal.
        .member_sync_timeout(Duration::from_secs(120))
        .records("default", fleetnet_hub::config::DEFAULT_LEADER_ELECTION_ID)
        .instance("e2e")
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
        .build()
        .expect("a valid configuration");
    let running = app::start(config, Extensions::default())
        .await
        .expect("controller starts");
    eventually("controller ready", || async {
        running.state.ready().then_some(())
    })
    .await;
    Some(running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_from_every_member_land_in_their_hub_namespace() {
    init_test_logs();
    let c = clusters().await;
    assert!(!c.members.is_empty(), "no member clusters");
    let running = controller(&c).await;
    let hub = client_from_kubeconfig("hub", &c.hub)
        .await
        .expect("hub client");
    let ns = format!("e2e-{:06x}", rand::random::<u32>() & 0xffffff);
    for (member, kubeconfig) in &c.members {
        let client = client_from_kubeconfig(member, kubeconfig)
            .await
            .expect("member client");
        namespace(&client, &ns).await;
        create_service(&client, &service(&ns, "echo", 8080)).await;
        create_export(&client, &ns, "echo", &[]).await;
    }
    for member in c.members.keys() {
        let hub_ns = format!("{}{member}", c.prefix);
        let ise = wait_ise(&hub, &hub_ns, &format!("{ns}-echo"), |_| true).await;
        assert_eq!(ise.spec.service_reference.cluster_id, *member);
        assert_eq!(
            ise.spec.service_reference.namespaced_name,
            format!("{ns}/echo")
        );
        assert_eq!(ise.spec.ports[0].port, 8080);
    }
    for (member, kubeconfig) in &c.members {
        let client = client_from_kubeconfig(member, kubeconfig)
            .await
            .expect("member client");
        exports(&client, &ns)
            .delete("echo", &DeleteParams::default())
            .await
            .expect("delete export");
        wait_ise_gone(
            &hub,
            &format!("{}{member}", c.prefix),
            &format!("{ns}-echo"),
        )
        .await;
    }
    if let Some(running) = running {
        running.shutdown().await;
    }
}
