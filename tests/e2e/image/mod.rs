//! The container image (#43 point 1), built and started the way a cluster would run it.
//!
//! `image/build.py` assembles the image from the binary cargo built for this test (and a small
//! binary twice: the digest must not change); `umoci unpack` (Debian's umoci) turns the OCI layout into a runtime
//! bundle from the image's own Entrypoint, Env and User; the bundle is given the chart's RENDERED
//! container (args, env, volume mounts, pod and container security context, seccomp
//! RuntimeDefault) and the chart's ServiceAccount token mounted where a kubelet mounts it, and
//! `runc run` (Debian's runc, as root) starts it against a real hub apiserver on which the chart's
//! rendering (its RBAC) is applied. It answers /readyz, exports a member's Service to the hub as
//! uid 65532 with no capabilities and seccomp filtering on, and exits cleanly on SIGTERM.
//!
//! This is a real OCI runtime, not an emulation: only the network namespace is the host's (see
//! runtime.rs).

mod runtime;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fleetnet_testenv::{Fleet, ScopedIdentity, load_cluster_role};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::support::chart::{RELEASE_NS, one, render_chart};
use crate::support::*;
use runtime::{Container, PodView, bind, containerize, image_config, run, runtime_seccomp, tool};

/// Where a kubelet mounts the ServiceAccount token (kube's in-cluster configuration reads it there).
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_runs_the_charts_container_with_its_rbac_and_security_context_against_a_real_hub() {
    use std::os::unix::fs::MetadataExt;
    let euid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    assert_eq!(
        euid, 0,
        "runc runs the image as root (CI and the developer machines are root)"
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let (layout, digest) = build_image(dir);
    let config = image_config(&layout);
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap())
        .expect("index.json");
    let tag = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("ref.name")
        .to_string();
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], json!(["/fleetnet-hub"]));
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.licenses"],
        "MIT"
    );
    let bundle = dir.join("bundle");
    run(Command::new(tool("umoci", "umoci"))
        .args(["unpack", "--image"])
        .arg(format!("{}:{tag}", layout.display()))
        .arg(&bundle));

    let fleet = Fleet::builder()
        .members(["member-1"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    fleetnet_testenv::ensure_namespace(&hub, "hub", RELEASE_NS)
        .await
        .expect("release namespace");
    let (health, metrics) = (free_port(), free_port());
    let rendered = render_chart(&[
        "--set",
        "members={member-1}",
        "--set",
        "replicaCount=1",
        "--set",
        &format!("health.port={health}"),
        "--set",
        &format!("metrics.port={metrics}"),
    ]);
    let deployment = one(&rendered, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    // The chart's default image reference is the image this builder makes and `docker load` names.
    assert_eq!(container["image"], format!("fleetnet-hub:{tag}"));
    assert_eq!(
        index["manifests"][0]["annotations"]["io.containerd.image.name"],
        format!("docker.io/library/fleetnet-hub:{tag}")
    );
    assert_eq!(pod["automountServiceAccountToken"], true);
    let discovery = Discovery::new(hub.clone()).run().await.expect("discovery");
    let rendering = dir.join("rendering.yaml");
    let docs: Vec<String> = rendered.iter().map(Value::to_string).collect();
    std::fs::write(&rendering, docs.join("\n---\n")).expect("write rendering");
    let applied = crate::chart::apply_rendering(&hub, &discovery, &rendering).await;
    assert_eq!(
        applied.len(),
        rendered.len(),
        "every rendered object applied"
    );

    let mounts = volumes(&fleet, dir, &rendered, container).await;
    let port = fleet
        .hub()
        .server()
        .rsplit(':')
        .next()
        .expect("hub port")
        .to_string();
    let mut env = vec![
        "KUBERNETES_SERVICE_HOST=127.0.0.1".to_string(),
        format!("KUBERNETES_SERVICE_PORT={port}"),
    ];
    env.extend(container_env(container, "fleetnet-hub-image-0"));
    let seccomp = (container["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault")
        .then(|| {
            let text = std::fs::read(runtime::CONTAINERS_SECCOMP).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (`apt-get install golang-github-containers-common`)",
                    runtime::CONTAINERS_SECCOMP
                )
            });
            runtime_seccomp(&serde_json::from_slice(&text).expect("seccomp profile"))
        });
    let spec_path = bundle.join("config.json");
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(&spec_path).expect("config.json")).expect("json");
    containerize(
        &mut spec,
        &PodView {
            container,
            pod_security: &pod["securityContext"],
            image: &config["config"],
            env,
            mounts,
        },
        seccomp,
    );
    std::fs::write(&spec_path, spec.to_string()).expect("write config.json");

    let id = format!("fleetnet-image-{}", std::process::id());
    let started = Container::start(&bundle, &id, &dir.join("container.log"));
    let pid = ready(&started, health).await;
    confined(pid, &started);
    println!("image: {digest} ran under runc as the chart's container; /readyz 200 on :{health}");

    let member = fleet
        .member("member-1")
        .client()
        .await
        .expect("member admin");
    namespace(&member, "shop").await;
    export_cart_and_wait(&member, &hub, &fleet.hub_namespace("member-1")).await;

    let log = started.log();
    let status = started.terminate();
    assert!(status.success(), "container exited with {status}:\n{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// Builds the image from the test's binary (gzip level 1: the layer is ~95 MB of stripped debug
/// build, and level 6 costs this test seconds of CPU for nothing it checks), and proves the
/// builder reproducible on a small binary: two builds, one digest. Returns the OCI layout (the
/// archive untarred) and the image's digest.
fn build_image(dir: &Path) -> (std::path::PathBuf, String) {
    let build = |binary: &Path, out: &Path, level: &str| {
        let started = Instant::now();
        let stdout = run(Command::new("python3")
            .arg(repo().join("image/build.py"))
            .arg(binary)
            .arg("--out")
            .arg(out)
            .args(["--compress-level", level]));
        let digest = stdout.lines().last().unwrap_or_default().to_string();
        assert!(digest.starts_with("sha256:"), "{stdout}");
        println!(
            "image: built {digest} from {} in {:?}",
            binary.display(),
            started.elapsed()
        );
        digest
    };
    let small = Path::new("/bin/true");
    let first = build(small, &dir.join("small-1.tar"), "6");
    let second = build(small, &dir.join("small-2.tar"), "6");
    assert_eq!(first, second, "one binary, one digest");
    let archive = dir.join("fleetnet-hub-oci.tar");
    let digest = build(Path::new(env!("CARGO_BIN_EXE_fleetnet-hub")), &archive, "1");
    let layout = dir.join("layout");
    std::fs::create_dir(&layout).expect("layout dir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    (layout, digest)
}

/// What the rendered volumeMounts and the ServiceAccount token mount bring into the container:
/// the member's kubeconfig (its ServiceAccount bound to the member ClusterRole the chart ships),
/// the rendered member-config ConfigMap, and a token of the chart's hub ServiceAccount.
async fn volumes(fleet: &Fleet, dir: &Path, rendered: &[Value], container: &Value) -> Vec<Value> {
    let hub_identity = fleetnet_testenv::ScopedIdentity::bare(RELEASE_NS, "fleetnet-hub");
    let hub_kubeconfig = fleet
        .hub()
        .issue_scoped_kubeconfig(&hub_identity, &dir.join("hub-sa.kubeconfig"))
        .await
        .expect("hub SA token");
    let kubeconfig: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&hub_kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig YAML");
    let sa = dir.join("serviceaccount");
    std::fs::create_dir(&sa).expect("sa dir");
    let token = kubeconfig["users"][0]["user"]["token"]
        .as_str()
        .expect("token");
    std::fs::write(sa.join("token"), token).expect("token");
    std::fs::write(sa.join("ca.crt"), fleet.hub().ca_pem().expect("ca")).expect("ca.crt");
    std::fs::write(sa.join("namespace"), RELEASE_NS).expect("namespace");

    let kubeconfigs = dir.join("kubeconfigs");
    std::fs::create_dir(&kubeconfigs).expect("kubeconfigs dir");
    let member_role =
        load_cluster_role(&repo().join("charts/fleetnet-hub/files/member-clusterrole.yaml"))
            .expect("member ClusterRole");
    let member_identity = ScopedIdentity {
        namespace: RELEASE_NS.into(),
        name: "fleetnet-hub-member".into(),
        cluster_role: Some(member_role),
        role: None,
        role_namespaces: vec![],
    };
    fleet
        .member("member-1")
        .issue_scoped_kubeconfig(&member_identity, &kubeconfigs.join("member-1.yaml"))
        .await
        .expect("member SA kubeconfig");

    let member_config = dir.join("member-config");
    std::fs::create_dir(&member_config).expect("member-config dir");
    let config_map = one(rendered, "ConfigMap");
    for (key, value) in config_map["data"].as_object().expect("ConfigMap data") {
        std::fs::write(member_config.join(key), value.as_str().unwrap_or_default())
            .expect("member config file");
    }

    let mut mounts = vec![bind(&sa, SA_DIR)];
    for mount in container["volumeMounts"].as_array().expect("volumeMounts") {
        let source = match mount["name"].as_str() {
            Some("member-kubeconfigs") => &kubeconfigs,
            Some("member-config") => &member_config,
            other => panic!("a volume this test does not provide: {other:?}"),
        };
        assert_eq!(mount["readOnly"], true, "{mount}");
        mounts.push(bind(
            source,
            mount["mountPath"].as_str().expect("mountPath"),
        ));
    }
    mounts
}

/// The rendered container's env as a kubelet resolves it (values, and the downward API's pod
/// name and namespace).
fn container_env(container: &Value, pod_name: &str) -> Vec<String> {
    let mut env = vec![];
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().expect("env name");
        let value = match (
            &var["value"],
            var["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Value::String(v), _) => v.clone(),
            (_, Some("metadata.name")) => pod_name.to_string(),
            (_, Some("metadata.namespace")) => RELEASE_NS.to_string(),
            _ => panic!("env {name}: not resolvable here: {var}"),
        };
        env.push(format!("{name}={value}"));
    }
    env
}

/// Waits for /readyz 200 on the health port (the chart's readiness probe); returns the container's
/// host pid. Panics with the container's output when it does not come up.
async fn ready(container: &Container, health: u16) -> u32 {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], health));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok()
            && http_get(addr, "/readyz").await.0 == 200
            && let Some(pid) = container.pid()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no /readyz 200 within 60 s; container output:\n{}",
            container.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The running process is what the chart's security context asks for: uid and gid 65532, no
/// capability in any set, no new privileges, a seccomp filter.
fn confined(pid: u32, container: &Container) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let log = container.log();
    assert_eq!(field("Uid"), "65532 65532 65532 65532", "{log}");
    assert_eq!(field("Gid"), "65532 65532 65532 65532", "{log}");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(set), "0000000000000000", "{set}");
    }
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2", "seccomp filter mode");
    assert_eq!(
        field("Groups"),
        "65532",
        "fsGroup as the supplementary group"
    );
    // readOnlyRootFilesystem: the container's / is mounted read-only.
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let root = mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .rfind(|f| f.get(4) == Some(&"/"))
        .expect("a mount at /");
    assert!(
        root.get(5).is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "root not read-only: {root:?}"
    );
}
