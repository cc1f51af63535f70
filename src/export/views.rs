//! The exporter's three views (ServiceExports and Services of the member, ISEs of its hub
//! namespace): when they have listed, whether their watches are healthy, how they back off.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, ExponentialBackoff};
use tokio::sync::watch;

use super::ReconcileObserver;
use crate::api::{ServiceExport, ServiceExportVersion};

/// One of the exporter's watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    ServiceExports = 0,
    Services = 1,
    InternalServiceExports = 2,
}

/// Tells when a running exporter's watches have each delivered their initial list.
///
/// Not `Store::wait_until_ready`: the store's readiness is a oneshot channel that wakes only
/// the task that polled it last, and the controller itself waits on the ServiceExport store.
/// Two waiters there lose a wake-up: the member would look unsynced until something else
/// polled it again (seen as exactly `--member-sync-timeout` before Ready).
#[derive(Clone)]
pub struct Synced {
    exports: Store<ServiceExport>,
    listed: [watch::Receiver<bool>; 3],
}

impl Synced {
    /// Resolves once all three watches have produced their initial list (or the exporter
    /// stopped: then there is nothing to wait for). A later re-list (after a watch expired)
    /// does not reset it: the stores keep their content until the new list is complete.
    pub async fn wait(&self) {
        for listed in &self.listed {
            let mut listed = listed.clone();
            let _ = listed.wait_for(|done| *done).await;
        }
    }

    /// ServiceExports currently known.
    pub fn exports(&self) -> usize {
        self.exports.state().len()
    }
}

/// Health of the three watches: first lists, failures and recoveries, reported to the observer.
pub(super) struct WatchHealth {
    member: String,
    observer: Arc<dyn ReconcileObserver>,
    listed: [watch::Sender<bool>; 3],
    failing: Mutex<[bool; 3]>,
}

impl WatchHealth {
    pub(super) fn new(member: &str, observer: Arc<dyn ReconcileObserver>) -> Self {
        Self {
            member: member.to_string(),
            observer,
            listed: std::array::from_fn(|_| watch::channel(false).0),
            failing: Mutex::new([false; 3]),
        }
    }

    /// The readiness handle over the three first lists.
    pub(super) fn synced(&self, exports: Store<ServiceExport>) -> Synced {
        Synced {
            exports,
            listed: std::array::from_fn(|i| self.listed[i].subscribe()),
        }
    }

    /// Inspects one watch's events: a completed list marks it listed (and recovered), an
    /// error marks it failing.
    pub(super) fn inspector<K>(
        self: &Arc<Self>,
        view: View,
    ) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + use<K> {
        let health = self.clone();
        move |event| match event {
            Ok(watcher::Event::InitDone) => health.listed(view),
            Ok(_) => {}
            Err(e) => health.failed(view, e),
        }
    }

    fn listed(&self, view: View) {
        self.listed[view as usize].send_replace(true);
        let recovered = {
            let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
            let was = failing.iter().any(|f| *f);
            failing[view as usize] = false;
            was && !failing.iter().any(|f| *f)
        };
        if recovered {
            tracing::info!(member = %self.member, "watches recovered");
            self.observer.watches_recovered(&self.member);
        }
    }

    fn failed(&self, view: View, error: &watcher::Error) {
        self.failing.lock().unwrap_or_else(|p| p.into_inner())[view as usize] = true;
        tracing::warn!(member = %self.member, view = ?view, error = %error, "watch failed; retrying with backoff");
        self.observer
            .controller_error(&self.member, &format!("{view:?} watch: {error}"));
    }
}

/// Drops a trigger stream's errors (each watch's own backoff and health already handled them):
/// the controller would otherwise back off its whole merged trigger stream, every watch of the
/// member at once, with delays growing to minutes.
pub(super) fn objects_only<K>(
    item: Result<K, watcher::Error>,
) -> futures::future::Ready<Option<Result<K, watcher::Error>>> {
    futures::future::ready(item.ok().map(Ok))
}

/// Watch retry: quick enough that a member whose apiserver returns is current again within
/// a few seconds (kube's default waits up to 30 s, plus jitter), slow enough not to spin.
pub(super) fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(250))
                .with_max_delay(Duration::from_secs(2))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(60),
    )
}

/// The ServiceExports whose hub name (`<namespace>-<name>`) is `hub_name`: every split at a
/// '-' that names an export in the view.
pub(super) fn exports_sharing_hub_name(
    exports: &Store<ServiceExport>,
    version: ServiceExportVersion,
    hub_name: &str,
) -> Vec<ObjectRef<ServiceExport>> {
    hub_name
        .match_indices('-')
        .map(|(i, _)| (&hub_name[..i], &hub_name[i + 1..]))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .map(|(ns, name)| ObjectRef::new_with(name, version).within(ns))
        .filter(|key| exports.get(key).is_some())
        .collect()
}
