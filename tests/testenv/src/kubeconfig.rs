//! Writing kubeconfig files for substrate clusters.

use std::path::Path;

use base64::Engine as _;

use crate::{Result, io_err};

/// A bearer-token kubeconfig with one cluster, one user and one current context.
pub(crate) fn write_token_kubeconfig(
    path: &Path,
    cluster: &str,
    server: &str,
    ca_pem: &[u8],
    user: &str,
    token: &str,
) -> Result<()> {
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: {user}
current-context: {cluster}
",
        ca = base64::engine::general_purpose::STANDARD.encode(ca_pem),
    );
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(format!("create {}", dir.display())))?;
    }
    // Written beside and renamed, so a watcher of the directory never sees half a file.
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, text).map_err(io_err(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("rename to {}", path.display())))
}
