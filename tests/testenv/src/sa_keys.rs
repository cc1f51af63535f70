//! The service-account key pair every cluster of the process signs and checks its tokens with.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use crate::{Error, Result, io_err};

/// Writes the service-account key pair into `dir`. One pair serves every fleet of the process:
/// openssl spends 0.2–0.4 CPU-seconds on an RSA key (up to a second of wall time on a busy
/// machine), and a fleet's clusters shared their key already; fleets are apart by their ports
/// and admin tokens.
pub(crate) fn write_sa_keys(dir: &Path) -> Result<()> {
    type Pair = (Vec<u8>, Vec<u8>);
    static KEYS: OnceLock<std::result::Result<Pair, String>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let scratch = tempfile::tempdir().map_err(|e| format!("service-account keys: {e}"))?;
        generate_sa_keys(scratch.path()).map_err(|e| e.to_string())?;
        let read =
            |f: &str| std::fs::read(scratch.path().join(f)).map_err(|e| format!("read {f}: {e}"));
        Ok((read("sa.key")?, read("sa.pub")?))
    });
    let (key, public) = keys.as_ref().map_err(|m| Error::Binaries(m.clone()))?;
    std::fs::write(dir.join("sa.key"), key).map_err(io_err("write sa.key"))?;
    std::fs::write(dir.join("sa.pub"), public).map_err(io_err("write sa.pub"))
}

fn generate_sa_keys(dir: &Path) -> Result<()> {
    let run = |args: &[&str]| -> Result<()> {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(io_err("run openssl (is it installed?)"))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Binaries(format!(
                "openssl {args:?} failed: {status}"
            )))
        }
    };
    run(&["genrsa", "-out", "sa.key", "2048"])?;
    run(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])
}
