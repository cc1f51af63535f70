//! A child process that is ended by PID when its guard drops.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

use crate::{Result, io_err};

/// Owns one running process; dropping it terminates the process (SIGTERM, then SIGKILL).
#[derive(Debug)]
pub(crate) struct ProcessGuard {
    name: String,
    child: Option<Child>,
}

impl ProcessGuard {
    /// Spawns `cmd` with stdout+stderr appended to `log`. The kernel kills the child when the
    /// process that started it dies, so even a killed test run leaves nothing listening.
    pub(crate) fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io_err(format!("open {}", log.display())))?;
        let err = out.try_clone().map_err(io_err("clone log handle"))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = spawn_outliving_the_caller(cmd).map_err(io_err(format!("spawn {name}")))?;
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` when the process has already exited.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Resident set size in KiB, read from /proc.
    pub(crate) fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    }

    /// CPU time (user + system, every thread) the process has used so far, read from /proc:
    /// CPU-seconds, unlike wall time, hold still when other work shares the machine.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        cpu_time_of(self.pid()?)
    }

    /// SIGKILL at once, as a crash or a lost node. Idempotent.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, up to 10 s for a clean exit, then SIGKILL. Idempotent.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // SAFETY: plain kill(2) on a PID we own and have not reaped yet.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        // Polled often: tests stop a cluster for an outage and wait for this.
        for _ in 0..500 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("[testenv] {} ignored SIGTERM for 10 s; killing", self.name);
        let _ = child.kill();
        let _ = child.wait();
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` from one thread that lives as long as the process. `PR_SET_PDEATHSIG` fires when
/// the *thread* that spawned a child ends, and the test harness runs each test on a thread of
/// its own: a cluster kept for the next test (`crate::pool`) must outlive the test that started
/// it, and still die with the process.
fn spawn_outliving_the_caller(cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in incoming {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the testenv spawner thread");
        requests
    });
    let (reply, answer) = mpsc::channel();
    let sent = spawner.send((cmd, reply));
    let gone = || std::io::Error::other("the testenv spawner thread has ended");
    sent.map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Listening ports are picked below Linux's ephemeral range (32768–60999 by default): a port
/// picked there can be taken, between the pick and the server's bind, by any outgoing
/// connection (an apiserver opens dozens to etcd), and the server then fails to start.
const LISTEN_PORTS: std::ops::Range<u16> = 20000..32000;

/// A port on 127.0.0.1 that was free a moment ago, never the same twice in one process.
pub fn free_port() -> Result<u16> {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..200 {
        let port = rand::random_range(LISTEN_PORTS);
        if handed_out.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return Ok(port);
        }
    }
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(io_err("bind 127.0.0.1:0"))?;
    Ok(listener
        .local_addr()
        .map_err(io_err("local_addr of 127.0.0.1:0"))?
        .port())
}

/// utime + stime of process `pid` (fields 14 and 15 of `/proc/<pid>/stat`, in clock ticks).
pub(crate) fn cpu_time_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its closing one.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second).ok().filter(|t| *t > 0)?;
    Some(Duration::from_millis(ticks * 1000 / per_second))
}
