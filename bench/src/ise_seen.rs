//! What a metadata watch on every InternalServiceExport of the hub saw: first-seen times and
//! what is there now (the benchmarks' clock of "on the hub").

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::ensure;
use fleetnet_hub::api::InternalServiceExport;
use futures::StreamExt as _;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};

/// What a metadata watch on every ISE of the hub saw: first-seen times and what is there now.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) first: HashMap<(String, String), Instant>,
    pub(crate) present: HashSet<(String, String)>,
    relist: Option<HashSet<(String, String)>>,
    listed: bool,
}

impl Seen {
    fn apply(&mut self, event: watcher::Event<PartialObjectMeta<InternalServiceExport>>) {
        let key = |m: &PartialObjectMeta<InternalServiceExport>| {
            (
                m.metadata.namespace.clone().unwrap_or_default(),
                m.metadata.name.clone().unwrap_or_default(),
            )
        };
        let now = Instant::now();
        match event {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(m) => {
                let k = key(&m);
                self.first.entry(k.clone()).or_insert(now);
                self.relist.get_or_insert_default().insert(k);
            }
            watcher::Event::InitDone => {
                self.present = self.relist.take().unwrap_or_default();
                self.listed = true;
            }
            watcher::Event::Apply(m) => {
                let k = key(&m);
                self.first.entry(k.clone()).or_insert(now);
                self.present.insert(k);
            }
            watcher::Event::Delete(m) => {
                self.present.remove(&key(&m));
            }
        }
    }

    /// The last first-seen time of `keys`, when all are present.
    pub(crate) fn all_present(&self, keys: &[(String, String)]) -> Option<Instant> {
        keys.iter()
            .map(|k| {
                self.present
                    .contains(k)
                    .then(|| self.first.get(k).copied())?
            })
            .try_fold(None::<Instant>, |latest, t| Some(latest.max(Some(t?))))
            .flatten()
    }
}

/// A task aborted when this drops.
pub(crate) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) fn watch_ises(hub: &kube::Client) -> (Arc<Mutex<Seen>>, AbortOnDrop) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let api: Api<PartialObjectMeta<InternalServiceExport>> = Api::all(hub.clone());
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => s.lock().unwrap_or_else(|p| p.into_inner()).apply(e),
                Err(e) => eprintln!("[fleet-size] ISE watch: {e}"),
            }
        }
    });
    (seen, AbortOnDrop(task))
}

pub(crate) fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits until the ISE watch of [`watch_ises`] has listed (60 s at most).
pub(crate) async fn wait_listed(seen: &Mutex<Seen>) -> anyhow::Result<()> {
    let listed = Instant::now();
    while !lock(seen).listed {
        ensure!(
            listed.elapsed() < Duration::from_secs(60),
            "the ISE watch did not list within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Polls `seen` (every 50 ms) until every one of `keys` is present: whether they all were
/// within `within`.
pub(crate) async fn wait_present(
    seen: &Mutex<Seen>,
    keys: &[(String, String)],
    within: Duration,
) -> bool {
    let begun = Instant::now();
    loop {
        if lock(seen).all_present(keys).is_some() {
            return true;
        }
        if begun.elapsed() > within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
