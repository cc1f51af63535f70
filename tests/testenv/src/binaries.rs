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
    /// `KUBEBUILDER_ASSETS` if it holds both binaries; otherwise `install.sh` (carried in this
    /// library, so a binary copied away from the checkout works too), which builds them from the
    /// published Go modules into `${FLEETNET_CACHE:-$HOME/.cache/fleetnet-hub}/bin/<version>/`
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

/// `install.sh` and the `versions.env` it sources, compiled in: the script is run from a
/// temporary copy, never from the source tree.
const INSTALL_SH: &str = include_str!("../install.sh");
const VERSIONS_ENV: &str = include_str!("../versions.env");

fn run_install_script() -> std::result::Result<PathBuf, String> {
    let copy = tempfile::Builder::new()
        .prefix("fleetnet-testenv-install-")
        .tempdir()
        .map_err(|e| format!("cannot create a directory for install.sh: {e}"))?;
    let script = copy.path().join("install.sh");
    std::fs::write(&script, INSTALL_SH)
        .and_then(|()| std::fs::write(copy.path().join("versions.env"), VERSIONS_ENV))
        .map_err(|e| format!("cannot write install.sh to {}: {e}", copy.path().display()))?;
    eprintln!(
        "[testenv] locating kube-apiserver + etcd with the built-in install.sh (building them takes minutes the first time)"
    );
    // stderr is inherited so the build's progress is visible.
    let output = Command::new("bash")
        .arg(&script)
        .arg("apiserver")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run bash install.sh: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "install.sh failed ({}); see its messages above",
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| "install.sh printed no directory".to_string())?;
    if !has_both(&dir) {
        return Err(format!(
            "install.sh reported {} but kube-apiserver/etcd are not there",
            dir.display()
        ));
    }
    Ok(dir)
}
