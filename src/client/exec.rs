//! Failures of a client's exec credential plugin, told without what the plugin was given or
//! said. kube's own error carries the whole command (its arguments and environment) and the
//! plugin's output, and those hold credentials; the client returns this one instead, so no log
//! line, `/members` or error that quotes a request's failure can carry them.

use std::process::ExitStatus;

use kube::client::AuthError;
use tower::BoxError;

/// An exec credential plugin of the client failed; the plugin is named by its file name only.
#[derive(Debug, thiserror::Error)]
#[error("exec plugin {plugin} failed ({how})")]
pub struct ExecPluginFailed {
    /// The base name of the plugin's command (`kubelogin`), never its arguments.
    pub plugin: String,
    /// `exit status 1`, or what was wrong with its answer.
    pub how: String,
}

/// The base name of the exec plugin `config` runs, if any.
pub(super) fn plugin_of(config: &kube::Config) -> Option<String> {
    let command = config.auth_info.exec.as_ref()?.command.as_deref()?;
    let base = command.rsplit('/').next().unwrap_or(command);
    Some(base.to_string())
}

/// `error` as [`ExecPluginFailed`] when it is a failure of `plugin` (a request's, kube's auth
/// layer below); any other error unchanged.
pub(super) fn redact(plugin: &str, error: BoxError) -> BoxError {
    match error
        .downcast_ref::<AuthError>()
        .and_then(|e| failed(plugin, e))
    {
        Some(failed) => Box::new(failed),
        None => error,
    }
}

/// `error` told as a failure of `plugin`, if it is one.
pub(super) fn failed(plugin: &str, error: &AuthError) -> Option<ExecPluginFailed> {
    let how = match error {
        AuthError::AuthExecRun { out, .. } => exit(out.status),
        AuthError::AuthExecStart(e) => format!("could not be started: {}", e.kind()),
        // Both may quote the plugin's output.
        AuthError::AuthExecParse(_) => "its output is not an ExecCredential".to_string(),
        AuthError::AuthExec(_) => "its answer is not usable".to_string(),
        _ => return None,
    };
    Some(ExecPluginFailed {
        plugin: plugin.to_string(),
        how,
    })
}

fn exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_failed_plugin_is_named_by_its_file_and_status_only() {
        let mut command = std::process::Command::new("/usr/local/bin/kubelogin");
        command
            .env("AAD_SECRET", "SECRET-ENV")
            .arg("--token=SECRET-ARG");
        let failed = AuthError::AuthExecRun {
            cmd: format!("{command:?}"),
            out: Box::new(std::process::Output {
                status: ExitStatus::from_raw(3 << 8),
                stdout: b"SECRET-STDOUT".to_vec(),
                stderr: b"SECRET-STDERR".to_vec(),
            }),
        };
        assert!(
            failed.to_string().contains("SECRET"),
            "kube's own error quotes them"
        );
        let e = redact("kubelogin", Box::new(failed)).to_string();
        assert_eq!(e, "exec plugin kubelogin failed (exit status 3)");
        let killed = AuthError::AuthExecRun {
            cmd: String::new(),
            out: Box::new(std::process::Output {
                status: ExitStatus::from_raw(9),
                stdout: vec![],
                stderr: vec![],
            }),
        };
        let e = redact("p", Box::new(killed)).to_string();
        assert_eq!(e, "exec plugin p failed (killed by signal 9)");
        let e = redact(
            "p",
            Box::new(AuthError::AuthExec("token SECRET-OUT".into())),
        );
        assert!(!e.to_string().contains("SECRET"), "{e}");
        let other: BoxError = "connection refused".into();
        assert_eq!(redact("p", other).to_string(), "connection refused");
    }
}
