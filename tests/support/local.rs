//! This machine: the repository, free ports, signals, and this test binary as a child process.

use std::path::PathBuf;

/// The repository's root (the crate's manifest directory).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Sends `sig` (`-TERM`, `-STOP`, ...) to process `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// A child process killed (SIGKILL) and reaped when dropped, also when the test panics: a
/// process left running would go on writing into clusters the next tests reuse.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port on 127.0.0.1 that was free a moment ago, from the substrate's pick (below the
/// ephemeral range, never the same twice in this process: the tests of this binary run side by
/// side).
pub fn free_port() -> u16 {
    fleetnet_testenv::free_port().expect("a free port")
}

/// The name libtest knows test `test` of `module` (its `module_path!()`, which starts with the
/// crate's name) by.
fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}

/// This test binary, set to run only the ignored test `test` of `module` (pass
/// `module_path!()`), on one thread, its output not captured. For a test that needs something
/// process-wide of its own (an environment variable, the global tracing subscriber): the tests
/// of this binary share one process.
pub fn child_test(module: &str, test: &str) -> tokio::process::Command {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "--exact",
        &test_name(module, test),
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// A loopback HTTP/1.1 server on an ephemeral port: each request's headers are read, then
/// answered with what `respond` returns (a whole response, status line to body) and closed.
pub async fn serve_http(
    respond: impl Fn() -> String + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let respond = std::sync::Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(respond().as_bytes()).await;
            });
        }
    });
    addr
}
