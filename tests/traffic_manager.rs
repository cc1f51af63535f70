//! The Traffic Manager path end to end: real apiservers, the whole process (`app::start`), the
//! product's Azure client (azure_identity + azure_mgmt_network through the tower stacks)
//! against the local ARM server. Each member's public IPs come from its own subscription and
//! resource group (`--member-config`); a malformed answer and a throttled LIST leave the export
//! pending and the reconcile requeues (never sooner than `Retry-After`); a changed member
//! config re-engages that member only.

mod support;

#[path = "support/arm.rs"]
mod arm;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arm::{FakeArm, FakeIp, Fault};
use fleetnet_hub::api::InternalServiceExport;
use fleetnet_hub::app::{self, AppConfig, Extensions};
use fleetnet_hub::azure::AzureMembers;
use fleetnet_hub::azure::{AzureConfig, AzureFleet};
use fleetnet_hub::client::Limits;
use fleetnet_hub::config::MemberConfigFile;
use fleetnet_testenv::Fleet;
use support::*;

const SUB_EAST: &str = "00000000-0000-0000-0000-0000000000e1";
const SUB_WEST: &str = "00000000-0000-0000-0000-0000000000a2";

fn member_config(west_group: &str) -> String {
    format!(
        "members:\n  east:\n    azureSubscriptionId: {SUB_EAST}\n    azureResourceGroup: mc_east\n  west:\n    azureSubscriptionId: {SUB_WEST}\n    azureResourceGroup: {west_group}\n"
    )
}

fn azure_config(arm: &FakeArm) -> AzureConfig {
    AzureConfig {
        cache_ttl: Duration::from_secs(30),
        // A Retry-After above this is the reconcile's to wait out, not the request's.
        max_retry_wait: Duration::from_secs(1),
        ..arm::client_secret_config(arm)
    }
}

/// With the Traffic Manager feature on and a 1 s rescan.
fn app_config(fleet: &Fleet, dir: &Path) -> AppConfig {
    let mut config = support::app_config(fleet, dir);
    config.hub_limits = Limits::default();
    config.runtime.member_sync_timeout = Duration::from_secs(120);
    config.runtime.traffic_manager = true;
    config.runtime.rescan_interval = Duration::from_secs(1);
    config
}

/// An external LoadBalancer Service `web/front` with its ServiceExport; no ingress IP yet.
async fn export_load_balancer(member: &kube::Client) {
    namespace(member, "web").await;
    let mut svc = service("web", "front", 80);
    svc.spec.as_mut().expect("spec").type_ = Some("LoadBalancer".into());
    create_service(member, &svc).await;
    create_export(member, "web", "front", &[]).await;
}

fn public_ip_id(ise: &InternalServiceExport) -> String {
    ise.spec.public_ip_resource_id.clone().unwrap_or_default()
}

fn reconciles(running: &app::Running, member: &str, outcome: &str) -> f64 {
    sum(
        &running.metrics.encode(),
        "fleetnet_reconcile_total",
        &[
            &format!("member=\"{member}\""),
            &format!("outcome=\"{outcome}\""),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_ips_per_member_subscription_failures_requeue_and_settings_reload() {
    let fleet = Fleet::builder()
        .members(["east", "west"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let east = fleet.member("east").client().await.expect("east client");
    let west = fleet.member("west").client().await.expect("west client");
    let arm = FakeArm::start().await;
    arm.set_ips(
        SUB_EAST,
        "mc_east",
        vec![FakeIp::new("pip-east", "20.0.0.1").with_label("east-front")],
    );
    arm.set_ips(
        SUB_WEST,
        "mc_west",
        vec![FakeIp::new("pip-west", "20.0.0.2")],
    );
    arm.set_ips(
        SUB_WEST,
        "mc_west_2",
        vec![FakeIp::new("pip-west-moved", "20.0.0.2")],
    );

    let config_path = fleet.scratch_dir().join("members.yaml");
    std::fs::write(&config_path, member_config("mc_west")).expect("member config");
    let azure = AzureFleet::new(azure_config(&arm)).expect("azure client");
    let counters = azure.stats_handle();
    let members = AzureMembers::new(
        azure,
        Some(config_path.clone()),
        MemberConfigFile::load(&config_path).expect("member config parses"),
        "unused-default-rg".into(),
    );
    let running = app::start(
        app_config(&fleet, &fleet.member_kubeconfig_dir()),
        Extensions {
            azure: Some(Arc::new(members)),
            azure_counters: Some(Arc::new(move || counters.snapshot())),
        },
    )
    .await
    .expect("process starts");

    for member in [&east, &west] {
        export_load_balancer(member).await;
    }
    for name in ["east", "west"] {
        let ise = wait_ise(&hub, &fleet.hub_namespace(name), "web-front", |_| true).await;
        assert_eq!(ise.spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(ise.spec.public_ip_resource_id, None, "no ingress IP yet");
    }

    // east: the first LIST answers 200 with a body that is not the ARM shape. The lookup fails
    // (no panic), the reconcile requeues, the next LIST succeeds.
    arm.push_faults([Fault::Malformed]);
    assign_ingress(&east, "web", "front", "20.0.0.1").await;
    let ise = wait_ise(&hub, &fleet.hub_namespace("east"), "web-front", |i| {
        i.spec.public_ip_resource_id.is_some()
    })
    .await;
    assert_eq!(
        public_ip_id(&ise),
        format!(
            "/subscriptions/{SUB_EAST}/resourceGroups/mc_east/providers/Microsoft.Network/publicIPAddresses/pip-east"
        )
    );
    assert_eq!(ise.spec.is_dns_label_configured, Some(true));
    assert!(arm.list_operations(SUB_EAST, "mc_east") >= 2);
    assert!(reconciles(&running, "east", "error:pending") >= 1.0);

    // west: ARM throttles with Retry-After: 3, longer than the in-line retry budget (1 s). The
    // reconcile fails once and requeues after 3 s, not after its 1 s backoff (which would hit
    // the held-down 429 and fail a second time).
    arm.push_faults([Fault::Throttle {
        retry_after_secs: 3,
    }]);
    let pending_before = reconciles(&running, "west", "error:pending");
    let assigned = Instant::now();
    assign_ingress(&west, "web", "front", "20.0.0.2").await;
    let ise = wait_ise(&hub, &fleet.hub_namespace("west"), "web-front", |i| {
        i.spec.public_ip_resource_id.is_some()
    })
    .await;
    let took = assigned.elapsed();
    assert_eq!(
        public_ip_id(&ise),
        format!(
            "/subscriptions/{SUB_WEST}/resourceGroups/mc_west/providers/Microsoft.Network/publicIPAddresses/pip-west"
        )
    );
    assert_eq!(
        ise.spec.is_dns_label_configured, None,
        "pip-west has no DNS label"
    );
    let pending = reconciles(&running, "west", "error:pending") - pending_before;
    eprintln!(
        "west: exported with its public IP {took:?} after the ingress IP; {pending} pending reconcile(s)"
    );
    assert!(
        took >= Duration::from_secs(3),
        "Retry-After undercut: {took:?}"
    );
    assert_eq!(
        pending, 1.0,
        "one throttled reconcile, then one after Retry-After"
    );
    assert_eq!(arm.list_operations(SUB_WEST, "mc_west"), 2);

    // The member config changes at runtime: west's group moves; west alone is re-engaged.
    let east_reconciles = reconciles(&running, "east", "exported");
    // Replaced atomically, as a ConfigMap volume does.
    let tmp = fleet.scratch_dir().join(".members.yaml.tmp");
    std::fs::write(&tmp, member_config("mc_west_2")).expect("member config");
    std::fs::rename(&tmp, &config_path).expect("swap member config");
    let ise = wait_ise(&hub, &fleet.hub_namespace("west"), "web-front", |i| {
        public_ip_id(i).contains("/resourceGroups/mc_west_2/")
    })
    .await;
    assert!(public_ip_id(&ise).ends_with("/pip-west-moved"));
    assert_eq!(
        reconciles(&running, "east", "exported"),
        east_reconciles,
        "east was not re-engaged"
    );
    assert_eq!(
        arm.list_operations(SUB_EAST, "mc_east"),
        2,
        "east's cache stands"
    );

    // One token for both subscriptions and every LIST.
    assert_eq!(arm.token_requests(), 1);
    running.shutdown().await;
}
