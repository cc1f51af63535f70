//! A container runtime's part, done with Debian's OCI tools: `umoci unpack` turns the image
//! layout into a runtime bundle (rootfs + config.json from the image's Entrypoint, Cmd, Env and
//! User), the bundle's config.json is given what a kubelet would give the chart's container
//! (args, env, mounts, security context), and `runc run` starts it.
//!
//! What differs from a pod: no network namespace (the container shares the host's, so it
//! reaches the test apiservers on 127.0.0.1; the chart's ports are set to free ones), and no
//! cgroup limits (this machine's cgroups are hybrid v1/v2, where crun refuses to run; runc runs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// The seccomp profile that `RuntimeDefault` means on CRI-O and Podman (Debian's
/// golang-github-containers-common ships it).
pub const CONTAINERS_SECCOMP: &str = "/usr/share/containers/seccomp.json";

/// A tool this test needs, or a panic that says which package brings it.
pub fn tool(name: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} not found: `apt-get install {package}` (.ci/run installs it when missing)")
    })
}

/// Runs `cmd` and panics with its output when it fails; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The image's config blob (Entrypoint, Cmd, Env, User, Labels) in an OCI layout, through its
/// index and manifest, as a runtime resolves it.
pub fn image_config(layout: &Path) -> Value {
    let read = |rel: &str| -> Value {
        let text = std::fs::read(layout.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
    };
    let blob = |digest: &Value| {
        let digest = digest.as_str().expect("digest");
        read(&format!(
            "blobs/sha256/{}",
            digest.strip_prefix("sha256:").expect("sha256 digest")
        ))
    };
    let index = read("index.json");
    let manifest = blob(&index["manifests"][0]["digest"]);
    blob(&manifest["config"]["digest"])
}

/// A read-only bind mount of `source` at `destination`.
pub fn bind(source: &Path, destination: &str) -> Value {
    json!({
        "destination": destination,
        "type": "bind",
        "source": source,
        "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
    })
}

/// What the pod spec asks of one container, resolved as a kubelet would.
pub struct PodView<'a> {
    /// The rendered container.
    pub container: &'a Value,
    /// The rendered pod `securityContext`.
    pub pod_security: &'a Value,
    /// The image config's `config` (Entrypoint, Env).
    pub image: &'a Value,
    /// Env a kubelet adds or resolves (downward API, in-cluster service address).
    pub env: Vec<String>,
    /// Mounts (volumes and the ServiceAccount token).
    pub mounts: Vec<Value>,
}

/// The bundle's config.json (`umoci`'s, from the image) made into the chart's container:
/// Kubernetes' `args` replace the image's Cmd after its Entrypoint; runAsUser/runAsGroup/fsGroup,
/// readOnlyRootFilesystem, capabilities drop ALL, allowPrivilegeEscalation false and
/// seccompProfile RuntimeDefault as runc applies them; the host's network.
pub fn containerize(spec: &mut Value, pod: &PodView<'_>, seccomp: Option<Value>) {
    let security = &pod.container["securityContext"];
    let field = |key: &str| -> Value {
        match &security[key] {
            Value::Null => pod.pod_security[key].clone(),
            v => v.clone(),
        }
    };
    let mut args: Vec<Value> = pod.image["Entrypoint"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    args.extend(
        pod.container["args"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    let process = &mut spec["process"];
    process["terminal"] = json!(false);
    process["args"] = json!(args);
    let mut env: Vec<String> = serde_json::from_value(process["env"].clone()).unwrap_or_default();
    env.extend(pod.env.iter().cloned());
    process["env"] = json!(env);
    // Kubernetes: runAsUser / runAsGroup override the image's USER; fsGroup is a supplementary group.
    let uid = field("runAsUser").as_u64().expect("runAsUser rendered");
    assert!(
        uid != 0 || field("runAsNonRoot") != json!(true),
        "runAsNonRoot with uid 0"
    );
    process["user"] = json!({
        "uid": uid,
        "gid": field("runAsGroup").as_u64().unwrap_or(uid),
        "additionalGids": pod.pod_security["fsGroup"].as_u64().into_iter().collect::<Vec<_>>(),
    });
    let drops_all = security["capabilities"]["drop"]
        .as_array()
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    if drops_all {
        for set in [
            "bounding",
            "effective",
            "inheritable",
            "permitted",
            "ambient",
        ] {
            process["capabilities"][set] = json!([]);
        }
    }
    process["noNewPrivileges"] = json!(security["allowPrivilegeEscalation"] == json!(false));
    // The kubelet leaves RLIMIT_NOFILE to the runtime's default (inherited), not umoci's 1024.
    if let Some(p) = process.as_object_mut() {
        p.remove("rlimits");
    }
    spec["root"]["readonly"] = json!(security["readOnlyRootFilesystem"] == json!(true));
    spec["hostname"] = json!("fleetnet-hub-image-test");
    if let Some(namespaces) = spec["linux"]["namespaces"].as_array_mut() {
        namespaces.retain(|n| n["type"] != "network");
    }
    if let Some(mounts) = spec["mounts"].as_array_mut() {
        mounts.extend(pod.mounts.iter().cloned());
    }
    if let Some(profile) = seccomp {
        spec["linux"]["seccomp"] = profile;
    }
}

/// containers-common's seccomp profile (the format with `includes`/`excludes` and `archMap`)
/// as an OCI runtime `linux.seccomp` for an amd64 process without capabilities: rules that
/// need a capability are left out, rules that apply when a capability is missing are kept.
pub fn runtime_seccomp(profile: &Value) -> Value {
    let arch = "amd64";
    let mut syscalls = vec![];
    for rule in profile["syscalls"].as_array().into_iter().flatten() {
        let has = |side: &str, key: &str| {
            rule[side][key]
                .as_array()
                .is_some_and(|list| !list.is_empty())
        };
        let lists_arch = |side: &str| {
            rule[side]["arches"]
                .as_array()
                .is_some_and(|list| list.iter().any(|a| a == arch))
        };
        if has("includes", "caps")
            || (has("includes", "arches") && !lists_arch("includes"))
            || lists_arch("excludes")
        {
            continue;
        }
        let mut out = json!({"names": rule["names"], "action": rule["action"]});
        if let Some(args) = rule["args"].as_array().filter(|a| !a.is_empty()) {
            out["args"] = json!(args);
        }
        if let Some(errno) = rule["errnoRet"].as_u64() {
            out["errnoRet"] = json!(errno);
        }
        syscalls.push(out);
    }
    let architectures: Vec<Value> = profile["archMap"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["architecture"] == "SCMP_ARCH_X86_64")
        .flat_map(|m| {
            let mut all = vec![m["architecture"].clone()];
            all.extend(
                m["subArchitectures"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
            all
        })
        .collect();
    let mut out = json!({
        "defaultAction": profile["defaultAction"],
        "architectures": architectures,
        "syscalls": syscalls,
    });
    if let Some(errno) = profile["defaultErrnoRet"].as_u64() {
        out["defaultErrnoRet"] = json!(errno);
    }
    out
}

/// A container started with `runc run`; killed and deleted when dropped.
pub struct Container {
    /// The container id.
    pub id: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Container {
    /// `runc run --bundle <bundle> <id>` in the foreground of a child process (its exit status is
    /// the container's), output to `log`.
    pub fn start(bundle: &Path, id: &str, log: &Path) -> Container {
        let out = std::fs::File::create(log).expect("container log");
        let child = Command::new(tool("runc", "runc"))
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("runc run");
        Container {
            id: id.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    /// The container's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The container's init process on the host (`runc state`), once it runs.
    pub fn pid(&self) -> Option<u32> {
        let out = Command::new(tool("runc", "runc"))
            .args(["state", &self.id])
            .output()
            .ok()?;
        let state: Value = serde_json::from_slice(&out.stdout).ok()?;
        (state["status"] == "running")
            .then(|| state["pid"].as_u64())
            .flatten()
            .and_then(|p| u32::try_from(p).ok())
    }

    /// `runc kill <id> TERM` (what a kubelet sends first) and the container's exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        run(Command::new(tool("runc", "runc")).args(["kill", &self.id, "TERM"]));
        self.child
            .take()
            .expect("running")
            .wait()
            .expect("wait runc")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("runc")
                .args(["kill", &self.id, "KILL"])
                .output();
            let _ = child.wait();
        }
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.id])
            .output();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules granted by a capability go (the container has none); rules for a missing
    /// capability, for amd64 or for every architecture stay, with their args and errno.
    #[test]
    fn seccomp_profile_for_an_amd64_process_without_capabilities() {
        let profile = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": 38,
            "archMap": [
                {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
                {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}
            ],
            "syscalls": [
                {"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [], "includes": {}, "excludes": {}},
                {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64", "x32"]}, "excludes": {}},
                {"names": ["sync_file_range2"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["ppc64le"]}, "excludes": {}},
                {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}, "excludes": {}},
                {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "includes": {}, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}], "includes": {}, "excludes": {}}
            ]
        });
        assert_eq!(
            runtime_seccomp(&profile),
            json!({
                "defaultAction": "SCMP_ACT_ERRNO",
                "defaultErrnoRet": 38,
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
                "syscalls": [
                    {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                    {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW"},
                    {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
                    {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                     "args": [{"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]}
                ]
            })
        );
    }
}
