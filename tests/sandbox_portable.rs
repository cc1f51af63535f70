//! `fleetnet-hub sandbox` from a copy of the binary, away from the source tree: it finds its
//! apiservers through the install script and the CRDs it carries (#15), comes up (both sample
//! ISEs, their slices' exports and member-2's imported slices printed, then the "running"
//! banner) and stops cleanly on SIGTERM.
//!
//! Where this test may (root, `unshare` present), the child runs in its own mount namespace with
//! the checkout hidden under an empty tmpfs, so any read of the source tree would fail.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const READY: &str = "fleetnet-hub sandbox is running.";

#[test]
fn sandbox_runs_from_a_copied_binary_without_the_source_tree() {
    // Built (or found) here first, as every substrate test does: the child then only finds them
    // in the cache, and the deadline below is about the sandbox, not a Go build.
    fleetnet_testenv::Binaries::locate().expect("kube-apiserver and etcd");
    let away = tempfile::tempdir().expect("tempdir");
    let exe = away.path().join("fleetnet-hub");
    std::fs::copy(env!("CARGO_BIN_EXE_fleetnet-hub"), &exe).expect("copy the binary");
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));

    let hide = can_hide(checkout);
    let mut child = sandbox(&exe, hide.then_some(checkout))
        .current_dir(away.path())
        .spawn()
        .expect("start the sandbox");
    let lines = read_lines(&mut child);

    let mut stdout = String::new();
    let mut stderr = String::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    while !stdout.contains(READY) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok((true, line)) => stdout.push_str(&(line + "\n")),
            Ok((false, line)) => stderr.push_str(&(line + "\n")),
            Err(_) => {
                let _ = child.kill();
                panic!("sandbox not up within 240 s\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
            }
        }
    }
    // Issue #27: the first command a user runs says nothing is wrong when nothing is (waiting
    // for an API server to come up is not an error).
    let level = |line: &str| line.split_whitespace().nth(1).map(str::to_owned);
    assert!(
        stderr.lines().any(|l| level(l).as_deref() == Some("INFO")),
        "no log line read as `<time> <LEVEL> …`:\n{stderr}"
    );
    let alarming: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|line| matches!(level(line).as_deref(), Some("WARN" | "ERROR")))
        .collect();
    assert!(
        alarming.is_empty(),
        "WARN or ERROR lines before the sandbox was up:\n{}",
        alarming.join("\n")
    );
    for member in ["member-1", "member-2"] {
        assert!(
            stdout.contains(&format!("demo-hello (from {member})")),
            "no ISE printed for {member}:\n{stdout}"
        );
        assert!(
            stdout.contains(&format!("EndpointSlice demo/hello-{member})")),
            "no EndpointSliceExport printed for {member}:\n{stdout}"
        );
    }

    // The whole loop: member-2 imports both members' demo/hello through a MultiClusterService.
    assert!(
        stdout.contains("derived Service fleet-system/demo-hello")
            && ["10.244.0.10", "10.244.1.10"]
                .iter()
                .all(|address| stdout.contains(address)),
        "no imported EndpointSlices printed:\n{stdout}"
    );

    let stopped = Instant::now();
    let status = terminate(&mut child);
    stderr.extend(lines.try_iter().map(|(_, l)| l + "\n"));
    assert!(status.success(), "sandbox exit {status}\n{stderr}");
    assert!(
        !stderr.contains(&*checkout.to_string_lossy()),
        "the sandbox used the source tree:\n{stderr}"
    );
    println!(
        "sandbox from {} (source tree {}): up, 2 ISEs, 2 EndpointSliceExports, 2 imported slices, stopped in {:?}",
        exe.display(),
        if hide { "hidden" } else { "present" },
        stopped.elapsed()
    );
}

/// `exe sandbox` with the substrate's cache and no tracing; in a private mount namespace with
/// `hidden` covered by an empty tmpfs when given.
fn sandbox(exe: &Path, hidden: Option<&Path>) -> Command {
    let mut cmd = match hidden {
        Some(dir) => {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(r#"mount -t tmpfs none "$1" && exec "$0" sandbox"#)
                .args([exe, dir]);
            c
        }
        None => {
            let mut c = Command::new(exe);
            c.arg("sandbox");
            c
        }
    };
    let cache = std::env::var_os("FLEETNET_CACHE")
        .unwrap_or_else(|| Path::new(&home()).join(".cache/fleetnet-hub").into());
    cmd.env("FLEETNET_CACHE", cache)
        .env_remove("KUBEBUILDER_ASSETS")
        // The default log level, as a user's first run has it.
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// SIGTERM, then the exit status (within 60 s).
fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(term.success());
    let stopped = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if stopped.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("sandbox did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every line of the child's stdout (`true`) and stderr (`false`), as they come.
fn read_lines(child: &mut std::process::Child) -> mpsc::Receiver<(bool, String)> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((true, line));
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send((false, line));
        }
    });
    rx
}

/// Whether a private mount namespace can cover `dir` here (needs root and `unshare`).
fn can_hide(dir: &Path) -> bool {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs none "$0" && [ -z "$(ls -A "$0")" ]"#)
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn home() -> String {
    std::env::var("HOME").unwrap_or_else(|_| "/root".into())
}
