//! The Traffic Manager path end to end: real apiservers, the whole process (`app::start`), the
//! product's Azure client (azure_identity + azure_mgmt_network through the tower stacks)
//! against the local ARM server. Each member's public IPs come from its own subscription and
//! resource group (`--member-config`); a malformed answer and a throttled LIST leave the export
//! pending and the reconcile requeues (never sooner than `Retry-After`); a changed member
//! config re-engages that member only. A token endpoint and ARM that echo the credentials
//! they were sent leave no trace of them in the process's logs, `/members`, `/metrics`, its
//! exported spans or the member's Events.

use crate::support;

use crate::support::arm;
use crate::support::otlp;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arm::{FakeArm, FakeIp, Fault};
use fleetnet_hub::api::InternalServiceExport;
use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::azure::AzureMembers;
use fleetnet_hub::azure::{AzureConfig, AzureFleet};
use fleetnet_hub::client::Limits;
use fleetnet_hub::config::ConfigBuilder;
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
fn tm_config_builder(fleet: &Fleet, dir: &Path) -> ConfigBuilder {
    support::config_builder(fleet, dir)
        .hub_limits(Limits::default())
        .member_sync_timeout(Duration::from_secs(120))
        .traffic_manager(true)
        .rescan_interval(Duration::from_secs(1))
}

/// An external LoadBalancer Service `web/front` with its ServiceExport; no ingress IP yet.
async fn export_load_balancer(member: &kube::Client) {
    namespace(member, "web").await;
    let mut svc = service("web", "front", 80);
    svc.spec.as_mut().expect("spec").type_ = Some("LoadBalancer".into());
    create_service(member, &svc).await;
    create_export(member, "web", "front", &[]).await;
}

/// The whole process with the Traffic Manager feature, its members' Azure settings in a
/// `--member-config` file holding `members_yaml`, against `arm`.
async fn start_with_member_config(
    fleet: &Fleet,
    arm: &FakeArm,
    members_yaml: &str,
) -> (app::Running, std::path::PathBuf) {
    let config_path = fleet.scratch_dir().join("members.yaml");
    std::fs::write(&config_path, members_yaml).expect("member config");
    let azure = AzureFleet::new(azure_config(arm)).expect("azure client");
    let counters = azure.stats_handle();
    let config = tm_config_builder(fleet, &fleet.member_kubeconfig_dir())
        .member_config(Some(config_path.clone()))
        .build()
        .expect("member config parses");
    let members = AzureMembers::new(
        azure,
        config.runtime.member_config.clone(),
        "unused-default-rg".into(),
    );
    let running = app::start(
        config,
        Extensions {
            azure: Some(Arc::new(members)),
            azure_counters: Some(Arc::new(move || counters.snapshot())),
            ..Default::default()
        },
    )
    .await
    .expect("process starts");
    (running, config_path)
}

/// An external LoadBalancer Service `web/name` naming `resource_group` in its annotation, with
/// its ServiceExport; no ingress IP yet.
async fn export_annotated_load_balancer(member: &kube::Client, name: &str, resource_group: &str) {
    let mut svc = service("web", name, 80);
    svc.spec.as_mut().expect("spec").type_ = Some("LoadBalancer".into());
    svc.metadata.annotations = Some(
        [(
            "service.beta.kubernetes.io/azure-load-balancer-resource-group".to_string(),
            resource_group.to_string(),
        )]
        .into(),
    );
    create_service(member, &svc).await;
    create_export(member, "web", name, &[]).await;
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

    let (running, config_path) =
        start_with_member_config(&fleet, &arm, &member_config("mc_west")).await;

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

/// The whole binary, logging at debug and exporting spans to a real OTLP receiver, against a
/// token endpoint that echoes the client secret it was sent and an ARM that echoes the bearer
/// token: both failures are reported (logs, reconcile outcomes) and neither credential shows
/// anywhere the process emits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_echoed_by_failing_azure_calls_are_never_emitted() {
    let fleet = Fleet::builder()
        .members(["east"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let east = fleet.member("east").client().await.expect("east client");
    let arm = FakeArm::start().await;
    arm.set_ips(
        SUB_EAST,
        "mc_east",
        vec![FakeIp::new("pip-east", "20.0.0.1")],
    );
    arm.push_token_faults([Fault::Echo]);
    arm.push_faults([Fault::Echo]);
    let receiver = otlp::Receiver::grpc().await;
    let (health, metrics) = (free_port(), free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
        .arg("run")
        .arg("--hub-kubeconfig")
        .arg(fleet.hub().kubeconfig_path())
        .arg("--kubeconfig-dir")
        .arg(fleet.member_kubeconfig_dir())
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health}"),
        ])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .args([
            "--enable-traffic-manager",
            "--azure-credential",
            "client-secret",
        ])
        .args([
            "--azure-arm-endpoint",
            arm.base(),
            "--azure-authority-host",
            arm.base(),
        ])
        .args([
            "--azure-tenant-id",
            arm::TENANT,
            "--azure-client-id",
            arm::CLIENT_ID,
        ])
        .args([
            "--azure-subscription-id",
            SUB_EAST,
            "--azure-resource-group",
            "mc_east",
        ])
        .env("AZURE_CLIENT_SECRET", arm::CLIENT_SECRET)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env("RUST_LOG", "debug")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(KillOnDrop)
        .expect("spawn fleetnet-hub");
    // Read as it comes: a full pipe would stall the process at its next log line.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let health: std::net::SocketAddr = ([127, 0, 0, 1], health).into();
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], metrics).into();
    within(Duration::from_secs(60), "process ready", || async move {
        let up = tokio::net::TcpStream::connect(health).await.is_ok()
            && http_get(health, "/readyz").await.0 == 200;
        up.then_some(())
    })
    .await;

    export_load_balancer(&east).await;
    assign_ingress(&east, "web", "front", "20.0.0.1").await;
    // The first token request and the first LIST fail with the echo; a later reconcile gets
    // a token and the public IP.
    let ises = ises(&hub, &fleet.hub_namespace("east"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ise = ises.get_opt("web-front").await.ok().flatten();
        if ise.is_some_and(|i| i.spec.public_ip_resource_id.is_some()) {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let logs = stderr.join().unwrap_or_default();
            let tail: Vec<&str> = logs.lines().rev().take(40).collect();
            panic!(
                "no public IP exported within 60 s; logs:\n{}",
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        arm.token_requests() >= 2,
        "the echoing token answer was used"
    );
    assert!(
        arm.list_operations(SUB_EAST, "mc_east") >= 2,
        "the echoing LIST answer was used"
    );
    let members = http_get(health, "/members").await.1;
    let scraped = http_get(metrics, "/metrics").await.1;
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(east.clone(), "web")
        .list(&Default::default())
        .await
        .expect("events")
        .items;
    let events = serde_json::to_string(&events).expect("events as JSON");
    let export = serde_json::to_string(&exports(&east, "web").get("front").await.expect("export"))
        .expect("export as JSON");
    // SIGTERM: the process flushes its spans on the way out.
    signal(child.id(), "-TERM");
    child.wait().expect("the process ends");
    let logs = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    let spans = receiver.dump();
    assert!(
        logs.contains("InvalidAuthenticationToken") && logs.contains("getting an Azure token"),
        "both failures are in the logs"
    );
    assert!(
        spans.contains("InvalidAuthenticationToken"),
        "the failed lookup is on its span"
    );
    let issued: Vec<String> = (0..arm.token_requests())
        .map(|n| format!("fake-access-token-{n}"))
        .collect();
    for (surface, text) in [
        ("logs", &logs),
        ("/members", &members),
        ("/metrics", &scraped),
        ("spans", &spans),
        ("events", &events),
        ("ServiceExport", &export),
    ] {
        assert!(
            !text.contains(arm::CLIENT_SECRET),
            "the client secret leaked into {surface}"
        );
        for token in &issued {
            assert!(
                !text.contains(token.as_str()),
                "{token} leaked into {surface}"
            );
        }
    }
    println!(
        "azure secrets: {} bytes of logs, {} of spans, /members, /metrics, events and the export grepped for the client secret and {} tokens",
        logs.len(),
        spans.len(),
        issued.len()
    );
}

/// Member east's Service names member west's resource group (both in one subscription, as a
/// fleet often is) and carries west's public IP address: without the allowlist, east's export
/// would carry west's public IP resource (a Traffic Manager endpoint east does not own). With
/// it, ARM sees no LIST of west's group until west looks it up itself; east is exported without
/// the public IP fields, its ServiceExport says why (condition and Event naming the group and
/// the member), and a group the operator gave east (`azureResourceGroups`) is looked up. The
/// binary, with its `--member-config`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_naming_another_members_resource_group_gets_no_arm_call() {
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
        "mc_west",
        vec![FakeIp::new("pip-west", "20.0.0.2")],
    );
    arm.set_ips(
        SUB_EAST,
        "mc_east_lb",
        vec![FakeIp::new("pip-east-lb", "20.0.0.3")],
    );
    let members = format!(
        "members:\n  east:\n    azureSubscriptionId: {SUB_EAST}\n    azureResourceGroup: mc_east\n    azureResourceGroups: [mc_east_lb]\n  west:\n    azureSubscriptionId: {SUB_EAST}\n    azureResourceGroup: mc_west\n"
    );
    let config_path = fleet.scratch_dir().join("members.yaml");
    std::fs::write(&config_path, members).expect("member config");
    // The binary, so the allowlist comes the way operators give it: `--member-config`.
    let _hub = HubProcess::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .arg("run")
            .arg("--hub-kubeconfig")
            .arg(fleet.hub().kubeconfig_path())
            .arg("--kubeconfig-dir")
            .arg(fleet.member_kubeconfig_dir())
            .arg("--member-config")
            .arg(&config_path)
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{}", free_port()),
                "--metrics-bind-address",
                &format!("127.0.0.1:{}", free_port()),
                "--enable-traffic-manager",
                "--azure-credential",
                "client-secret",
                "--azure-arm-endpoint",
                arm.base(),
                "--azure-authority-host",
                arm.base(),
                "--azure-tenant-id",
                arm::TENANT,
                "--azure-client-id",
                arm::CLIENT_ID,
            ])
            .env("AZURE_CLIENT_SECRET", arm::CLIENT_SECRET),
    );

    // east: a LoadBalancer naming west's group, with west's address.
    namespace(&east, "web").await;
    export_annotated_load_balancer(&east, "front", "MC_WEST").await;
    assign_ingress(&east, "web", "front", "20.0.0.2").await;
    let se = wait_condition(
        &east,
        "web",
        "front",
        "PublicIPResourceGroupAllowed",
        "False",
        "ResourceGroupNotAllowed",
    )
    .await;
    let (_, _, message) = condition(&se, "PublicIPResourceGroupAllowed").expect("condition");
    assert!(
        message.contains("\"MC_WEST\"") && message.contains("not allowed for member east"),
        "{message}"
    );
    let ise = wait_ise(&hub, &fleet.hub_namespace("east"), "web-front", |i| {
        i.spec.type_.as_deref() == Some("LoadBalancer")
    })
    .await;
    assert_eq!(
        ise.spec.public_ip_resource_id, None,
        "exported as one whose public IP is not found"
    );
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(east.clone(), "web");
    let refused = eventually("the refusal's Event", || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("PublicIPResourceGroupNotAllowed"))
        }
    })
    .await;
    assert!(
        refused
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("MC_WEST"),
        "{refused:?}"
    );
    assert_eq!(
        arm.list_operations(SUB_EAST, "mc_west"),
        0,
        "no ARM request for west's group on east's behalf"
    );
    assert!(arm.lists().is_empty(), "no LIST at all: {:?}", arm.lists());

    // east: a group the operator allowed it is looked up, in east's subscription.
    export_annotated_load_balancer(&east, "back", "mc_east_lb").await;
    assign_ingress(&east, "web", "back", "20.0.0.3").await;
    let ise = wait_ise(&hub, &fleet.hub_namespace("east"), "web-back", |i| {
        i.spec.public_ip_resource_id.is_some()
    })
    .await;
    assert!(public_ip_id(&ise).ends_with(
        "/resourceGroups/mc_east_lb/providers/Microsoft.Network/publicIPAddresses/pip-east-lb"
    ));

    // west: its own group is looked up and found.
    export_load_balancer(&west).await;
    assign_ingress(&west, "web", "front", "20.0.0.2").await;
    let ise = wait_ise(&hub, &fleet.hub_namespace("west"), "web-front", |i| {
        i.spec.public_ip_resource_id.is_some()
    })
    .await;
    assert_eq!(
        public_ip_id(&ise),
        format!(
            "/subscriptions/{SUB_EAST}/resourceGroups/mc_west/providers/Microsoft.Network/publicIPAddresses/pip-west"
        )
    );
    assert_eq!(arm.list_operations(SUB_EAST, "mc_west"), 1);
    // east's export never got west's public IP.
    let ise = ises(&hub, &fleet.hub_namespace("east"))
        .get("web-front")
        .await
        .expect("east's ISE");
    assert_eq!(ise.spec.public_ip_resource_id, None);
}

/// A `fleetnet-hub` child process, killed when dropped (also when the test fails).
struct HubProcess {
    _process: KillOnDrop,
}

impl HubProcess {
    fn spawn(command: &mut std::process::Command) -> Self {
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn fleetnet-hub");
        Self {
            _process: KillOnDrop(child),
        }
    }
}
