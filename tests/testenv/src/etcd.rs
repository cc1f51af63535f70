//! The one etcd that backs every cluster of a fleet.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{ProcessGuard, free_port};
use crate::{Error, Result};

#[derive(Debug)]
pub(crate) struct Etcd {
    pub(crate) client_url: String,
    process: ProcessGuard,
}

impl Etcd {
    pub(crate) fn start(binary: &Path, dir: &Path) -> Result<Self> {
        let client = free_port()?;
        let peer = free_port()?;
        let data: PathBuf = dir.join("etcd-data");
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(binary);
        cmd.arg("--name=substrate")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=substrate={peer_url}"))
            .arg("--log-level=warn")
            // Small and quick: test data is tiny and fsync latency only slows the suite.
            .arg("--unsafe-no-fsync")
            .arg("--quota-backend-bytes=1073741824");
        let process = ProcessGuard::spawn("etcd", cmd, &dir.join("etcd.log"))?;
        let mut etcd = Self {
            client_url,
            process,
        };
        etcd.wait_ready(client, &dir.join("etcd.log"))?;
        Ok(etcd)
    }

    fn wait_ready(&mut self, port: u16, log: &Path) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.process.exited() {
                return Err(Error::Cluster {
                    cluster: "etcd".into(),
                    message: format!("exited with {status}; see {}", log.display()),
                });
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(Error::Cluster {
            cluster: "etcd".into(),
            message: format!("not listening after 30 s; see {}", log.display()),
        })
    }

    /// SIGKILL at once: for the end of a fleet, whose data goes with it.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        self.process.cpu_time()
    }

    pub(crate) fn rss_kib(&self) -> Option<u64> {
        self.process.rss_kib()
    }
}
