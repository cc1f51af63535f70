//! Finding (or building, once) the `kube-apiserver` and `etcd` binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::{Error, Result};

/// A directory holding executable `kube-apiserver` and `etcd`.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

static LOCATED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();

impl Binaries {
    /// `KUBEBUILDER_ASSETS` if it holds both binaries; otherwise `tests/testenv/install.sh`, which
    /// builds them from the published Go modules into `$HOME/.cache/fleetnet-hub/bin/<version>/`
    /// the first time (minutes) and answers from the cache afterwards. Once per process.
    pub fn locate() -> Result<Self> {
        let found = LOCATED.get_or_init(|| {
            if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from)
                && has_both(&dir)
            {
                return Ok(dir);
            }
            run_install_script()
        });
        match found {
            Ok(dir) => Ok(Self { dir: dir.clone() }),
            Err(message) => Err(Error::Binaries(message.clone())),
        }
    }

    /// Path of the `kube-apiserver` binary.
    pub fn kube_apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }

    /// Path of the `etcd` binary.
    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }
}

fn has_both(dir: &Path) -> bool {
    dir.join("kube-apiserver").is_file() && dir.join("etcd").is_file()
}

fn run_install_script() -> std::result::Result<PathBuf, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("install.sh");
    eprintln!(
        "[testenv] locating kube-apiserver + etcd via {} (building them takes minutes the first time)",
        script.display()
    );
    // stderr is inherited so the build's progress is visible.
    let output = Command::new("bash")
        .arg(&script)
        .arg("apiserver")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}); see its messages above",
            script.display(),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| format!("{} printed no directory", script.display()))?;
    if !has_both(&dir) {
        return Err(format!(
            "{} reported {} but kube-apiserver/etcd are not there",
            script.display(),
            dir.display()
        ));
    }
    Ok(dir)
}
