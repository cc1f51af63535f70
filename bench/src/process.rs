use super::*;

// ---------------------------------------------------------------------------------------------
// This process: RSS and CPU.
// ---------------------------------------------------------------------------------------------

/// VmRSS of this process in KiB (0 when unreadable).
pub fn rss_kib() -> u64 {
    status_kib("VmRSS").unwrap_or(0)
}

pub(crate) fn status_kib(field: &str) -> Option<u64> {
    status_kib_of("/proc/self/status", field)
}

/// A field (`VmRSS`, `VmHWM`, …) of a `/proc/<pid>/status` file, in KiB.
pub fn status_kib_of(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// glibc's `malloc_trim(0)`: returns the heap's free memory to the OS. Only for the diagnostic
/// RSS figures, read after the figures they would otherwise change.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn trim_heap() -> bool {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: glibc's malloc_trim takes no pointer and only releases memory that is free.
    unsafe { malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn trim_heap() -> bool {
    false
}

/// User + system CPU seconds of this process so far.
pub fn cpu_seconds() -> f64 {
    cpu_seconds_of("/proc/self/stat").unwrap_or(0.0)
}

/// User + system CPU seconds so far of the process whose `/proc/<pid>/stat` is `path` (`None`
/// when unreadable: the process is gone).
pub fn cpu_seconds_of(path: &str) -> Option<f64> {
    Some(cpu_seconds_in(&std::fs::read_to_string(path).ok()?))
}

/// User + system CPU seconds in the text of a `/proc/<pid>/stat`.
pub(crate) fn cpu_seconds_in(stat: &str) -> f64 {
    // Fields after the command name (which may hold spaces): state is the first; utime and
    // stime are the 14th and 15th fields of the line.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / CLOCK_TICKS
}

/// Starts `fleetnet-hub run` with no member against the hub and reads its RSS after 3 s.
pub async fn binary_idle_rss(binary: &Path, fleet: &fleetnet_testenv::Fleet) -> Option<u64> {
    let dir = fleet.scratch_dir().join("bench-binary-no-members");
    std::fs::create_dir_all(&dir).ok()?;
    let port = |_: ()| {
        fleetnet_testenv::free_port()
            .ok()
            .map(|p| format!("127.0.0.1:{p}"))
    };
    let mut child = tokio::process::Command::new(binary)
        .arg("run")
        .arg("--hub-kubeconfig")
        .arg(fleet.hub().kubeconfig_path())
        .arg("--kubeconfig-dir")
        .arg(&dir)
        .arg("--metrics-bind-address")
        .arg(port(())?)
        .arg("--health-probe-bind-address")
        .arg(port(())?)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| tracing::warn!(error = %e, binary = %binary.display(), "cannot start"))
        .ok()?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = child
        .id()
        .and_then(|pid| status_kib_of(&format!("/proc/{pid}/status"), "VmRSS"));
    let _ = child.kill().await;
    rss
}

/// Busy and total CPU seconds of the whole machine so far (all cores, from `/proc/stat`):
/// what the substrate (apiservers, etcd) and everything else used besides this process.
pub fn machine_cpu_seconds() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0.0, 0.0);
    };
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).unwrap_or(&0.0) + ticks.get(4).unwrap_or(&0.0);
    ((total - idle) / CLOCK_TICKS, total / CLOCK_TICKS)
}
