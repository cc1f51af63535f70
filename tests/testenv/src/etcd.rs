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

/// The keys of one etcd, read and deleted through its JSON gateway (`/v3/kv/*`), below the
/// apiservers: how a pooled cluster is emptied of what a test wrote (`crate::pool`).
pub(crate) struct EtcdKeys {
    url: String,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
}

impl EtcdKeys {
    pub(crate) fn new(client_url: &str) -> Self {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        Self {
            url: client_url.to_string(),
            client,
        }
    }

    /// Every key under `prefix` with the revision it was last written at.
    pub(crate) async fn revisions(&self, prefix: &str) -> Result<Vec<(String, i64)>> {
        let mut end = prefix.as_bytes().to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let answer = self
            .call(
                "range",
                serde_json::json!({
                    "key": b64(prefix.as_bytes()),
                    "range_end": b64(&end),
                    "keys_only": true,
                }),
            )
            .await?;
        let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
        Ok(kvs
            .iter()
            .map(|kv| {
                let key = kv["key"].as_str().map(unb64).unwrap_or_default();
                let revision = kv["mod_revision"]
                    .as_str()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or_default();
                (key, revision)
            })
            .collect())
    }

    pub(crate) async fn delete(&self, key: &str) -> Result<()> {
        self.call(
            "deleterange",
            serde_json::json!({ "key": b64(key.as_bytes()) }),
        )
        .await
        .map(drop)
    }

    async fn call(&self, op: &str, body: serde_json::Value) -> Result<serde_json::Value> {
        use http_body_util::BodyExt as _;
        let failed = |message: String| Error::Cluster {
            cluster: "etcd".into(),
            message: format!("/v3/kv/{op}: {message}"),
        };
        let request = http::Request::post(format!("{}/v3/kv/{op}", self.url))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_string(),
            )))
            .map_err(|e| failed(e.to_string()))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(failed(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}
