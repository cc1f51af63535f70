//! What goes wrong with a member, typed: the texts are the ones `/members`, `check` and the
//! logs show (a variant's message never names the member: logs carry it as a field and
//! `/members` as the row).

use std::time::Duration;

/// Why a member does not run, or failed, or why its cleanup is not done.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Its file could not be used: unreadable, a name that is not one, declared twice.
    #[error("{0}")]
    Source(String),
    /// `<prefix><member>` is not a namespace name.
    #[error("{0}")]
    HubNamespace(String),
    /// Its kubeconfig asks for what the trust policy does not allow, or is no kubeconfig.
    #[error("{0}")]
    Refused(String),
    /// A client could not be built from the vetted kubeconfig (told without its content).
    #[error("{0}")]
    Unusable(String),
    /// The member's API server did not tell its ServiceExport version in time.
    #[error("API discovery did not answer within {0:?}")]
    DiscoveryTimeout(Duration),
    /// The member's API server does not serve what the jobs need.
    #[error("{0}")]
    Discovery(String),
    /// The member's watches have not listed in time (it keeps trying).
    #[error("initial sync did not finish within {0:?}; still trying")]
    SyncTimeout(Duration),
    /// The member's API server does not answer its probe.
    #[error("API server not answering: {0}")]
    NotAnswering(String),
    /// An attempt returned while nobody asked it to stop.
    #[error("member task ended unexpectedly; restarting")]
    Ended,
    /// An attempt panicked (its message is not repeated: it may quote what the member sent).
    #[error("member task panicked; restarting")]
    Panicked,
    /// An attempt's task was cancelled from outside.
    #[error("member task ended abnormally")]
    Abnormal,
    /// `--cleanup-on-remove` of a member that left without a usable kubeconfig: only the hub
    /// side can be withdrawn.
    #[error("no usable kubeconfig")]
    NoKubeconfig,
    /// Withdrawing the member's exports failed.
    #[error("{0}")]
    Withdraw(String),
    /// The cleanup is done but its record in the hub could not be deleted.
    #[error("cleanup done, its record not deleted: {0}")]
    RecordNotDeleted(String),
}
