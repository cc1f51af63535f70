//! The exporter's views (the member's Services and the ISEs of its hub namespace, beside the
//! ServiceExports of the feed it shares with the slice exporter): when they have listed,
//! whether their watches are healthy, how they back off, what they trigger.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, ExponentialBackoff};
use kube::runtime::{WatchStreamExt, watcher as watch_of};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::ReconcileObserver;
use super::decide::ise_name;
use super::feed::Subscription;
use super::projections::{IseView, ServiceExportView, ServiceView, project};
use super::queue::Lossy;
use crate::api::{InternalServiceExport, ServiceExportVersion};

/// The three views (reflector stores).
pub(super) struct Views {
    pub(super) services: Store<ServiceView>,
    pub(super) ises: Store<IseView>,
    pub(super) exports: Store<ServiceExportView>,
}

impl Views {
    /// Watches the member's Services and its hub namespace, and returns the names of the feed's
    /// ServiceExports to reconcile as the pace hands them, with the future that feeds the pace
    /// what they and the feed trigger; every ISE seen (listed or changed),
    /// and the ISE name of every deleted ServiceExport, is sent to `dangling` to be checked for
    /// a missing export (when its queue is full, the name is left to the next periodic sweep).
    pub(super) fn watch(
        member: &kube::Client,
        hub: &Api<InternalServiceExport>,
        exports: &Subscription,
        health: &Arc<WatchHealth>,
        dangling: Lossy<String>,
    ) -> (
        Self,
        BoxStream<'static, ObjectRef<ServiceExportView>>,
        BoxFuture<'static, ()>,
    ) {
        let version = exports.version;
        let (services, services_writer) = reflector::store::<ServiceView>();
        let (ises, ises_writer) = reflector::store::<IseView>();
        let config = watcher::Config::default;
        let service_events = reflector::reflector(
            services_writer,
            view_watch(Api::<Service>::all(member.clone()), config(), {
                let services = services.clone();
                move || services.len()
            })
            .map_ok(project::<Service, ServiceView>),
        )
        .inspect(health.inspector(View::Services))
        .touched_objects()
        .filter_map(move |svc| {
            futures::future::ready(svc.ok().map(|svc: ServiceView| {
                ObjectRef::new_with(&svc.name, version).within(&svc.namespace)
            }))
        })
        .boxed();
        let loser_index = exports.store.clone();
        let listed = dangling.clone();
        let ise_events = reflector::reflector(
            ises_writer,
            view_watch(hub.clone(), config(), {
                let ises = ises.clone();
                move || ises.len()
            })
            .map_ok(project::<InternalServiceExport, IseView>),
        )
        .inspect(health.inspector(View::InternalServiceExports))
        .inspect(move |event| {
            if let Ok(watcher::Event::Apply(ise) | watcher::Event::InitApply(ise)) = event {
                listed.push(ise.name.clone());
            }
        })
        .touched_objects()
        .filter_map(|ise| futures::future::ready(ise.ok()))
        .flat_map(move |ise: IseView| {
            // The export it carries, and any other export of the same hub name (the loser of
            // a name collision takes over when the winner's ISE goes).
            let owner = ise
                .spec
                .service_reference
                .namespaced_name
                .split_once('/')
                .map(|(ns, name)| ObjectRef::new_with(name, version).within(ns));
            let mut refs = exports_sharing_hub_name(&loser_index, version, &ise.name);
            refs.extend(owner);
            refs.dedup();
            futures::stream::iter(refs)
        })
        .boxed();
        // Every trigger waits in the feed's pace, which hands the controller no more names
        // than it reconciles at once.
        let triggers = exports
            .pace
            .clone()
            .take_from(futures::stream::select(service_events, ise_events));
        let known = exports.store.clone();
        let handed = exports
            .pace
            .clone()
            .stream()
            .inspect(move |key| {
                // A deleted export's ISE is checked too: one written in a race with the
                // deletion would otherwise wait for the next ISE event. The feed tells of a
                // change once the store has it: absent is deleted.
                if known.get(key).is_none() {
                    let ns = key.namespace.as_deref().unwrap_or_default();
                    dangling.push(ise_name(ns, &key.name));
                }
            })
            .boxed();
        let views = Self {
            services,
            ises,
            exports: exports.store.clone(),
        };
        (views, handed, triggers)
    }
}

/// One watch of a member's exporters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    ServiceExports = 0,
    Services = 1,
    InternalServiceExports = 2,
    EndpointSlices = 3,
    EndpointSliceExports = 4,
}

const VIEWS: usize = 5;

impl View {
    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether the watch is of the hub (its list waits in the shared hub budget's line).
    fn in_hub(self) -> bool {
        matches!(
            self,
            Self::InternalServiceExports | Self::EndpointSliceExports
        )
    }
}

/// Tells when a member's exporters' watches have each delivered their initial list.
///
/// Not `Store::wait_until_ready`: the store's readiness is a oneshot channel that wakes only
/// the task that polled it last, and the controller itself waits on the ServiceExport store.
/// Two waiters there lose a wake-up: the member would look unsynced until something else
/// polled it again (seen as exactly `--member-sync-timeout` before Ready).
#[derive(Clone, Default)]
pub struct Synced {
    exports: Option<Store<ServiceExportView>>,
    /// Per exporter: its listed views (bits by [`View`]), and which of them are the member's
    /// and which the hub's to wait for.
    exporters: Vec<(watch::Receiver<u8>, u8, u8)>,
}

impl Synced {
    /// Resolves once every watch has produced its initial list (or the exporter stopped: then
    /// there is nothing to wait for). A later re-list (after a watch expired) does not reset
    /// it: the stores keep their content until the new list is complete.
    pub async fn wait(&self) {
        self.wait_for(|member, hub| member | hub).await;
    }

    /// Resolves once the member's own watches have listed: what is left is the hub's lists,
    /// which wait their turn in the shared hub budget.
    pub async fn member_listed(&self) {
        self.wait_for(|member, _| member).await;
    }

    async fn wait_for(&self, views: impl Fn(u8, u8) -> u8) {
        for (listed, member, hub) in &self.exporters {
            let wanted = views(*member, *hub);
            let mut listed = listed.clone();
            let _ = listed.wait_for(|done| done & wanted == wanted).await;
        }
    }

    /// ServiceExports currently known (0 when the ServiceExport exporter does not run).
    pub fn exports(&self) -> usize {
        self.exports.as_ref().map_or(0, |e| e.state().len())
    }

    /// Waits for both exporters' watches.
    pub fn and(mut self, other: Synced) -> Synced {
        self.exports = self.exports.or(other.exports);
        self.exporters.extend(other.exporters);
        self
    }
}

/// Health of one exporter's watches: first lists, failures and recoveries, reported to the
/// observer.
pub(crate) struct WatchHealth {
    member: String,
    observer: Arc<dyn ReconcileObserver>,
    /// The views that have listed, one bit each (one channel: each costs ~0.5 KiB, per member).
    listed: watch::Sender<u8>,
    failing: Mutex<[bool; VIEWS]>,
}

impl WatchHealth {
    pub(crate) fn new(member: &str, observer: Arc<dyn ReconcileObserver>) -> Self {
        Self {
            member: member.to_string(),
            observer,
            listed: watch::channel(0).0,
            failing: Mutex::new([false; VIEWS]),
        }
    }

    /// The readiness handle over the first lists of `views`.
    pub(crate) fn synced(
        &self,
        exports: Option<Store<ServiceExportView>>,
        views: &[View],
    ) -> Synced {
        let bits = |hub: bool| {
            views
                .iter()
                .filter(|v| v.in_hub() == hub)
                .fold(0, |bits, v| bits | v.bit())
        };
        Synced {
            exports,
            exporters: vec![(self.listed.subscribe(), bits(false), bits(true))],
        }
    }

    /// Inspects one watch's events: a completed list marks it listed (and recovered), an
    /// error marks it failing.
    pub(crate) fn inspector<K>(
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
        self.listed.send_if_modified(|listed| {
            let was = *listed;
            *listed |= view.bit();
            *listed != was
        });
        let recovered = {
            let mut failing = self.failing.lock();
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
        self.failing.lock()[view as usize] = true;
        tracing::warn!(member = %self.member, view = ?view, error = %error, "watch failed; retrying with backoff");
        self.observer
            .controller_error(&self.member, &format!("{view:?} watch: {error}"));
    }
}

/// A view's watch of `api`: kube's watcher, held to [`MAX_OBJECTS_PER_VIEW`] objects
/// ([`capped`]; `size` is the view's store), retried after [`watch_backoff`], each poll
/// allocating in the scratch arena ([`crate::memory`]: the lists and full objects it decodes
/// are freed before the next poll; the store keeps its own copies).
pub(crate) fn view_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    size: impl Fn() -> usize + Send + 'static,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let kind = api
        .resource_url()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let open = move || watch_of(api.clone(), config.clone());
    crate::memory::scratch_stream(
        capped(open, size, MAX_OBJECTS_PER_VIEW, kind).backoff(watch_backoff()),
    )
}

/// The most objects one view holds (a member's Services, ServiceExports or EndpointSlices):
/// five times Kubernetes' scalability envelope of 10,000 Services per cluster. What a member
/// sends beyond it is not kept: its view fails (`50000 or more services`) and lists again
/// after the watch backoff, so a member of millions of objects costs ~0.5 KiB × this per view,
/// not the process.
pub(crate) const MAX_OBJECTS_PER_VIEW: usize = 50_000;

/// A view that reached [`MAX_OBJECTS_PER_VIEW`].
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {max} or more objects, the most one view of a member holds")]
pub(crate) struct OverCap {
    kind: String,
    max: usize,
}

/// The watch `open` makes, as long as its view stays under `max` objects: a list that reaches
/// `max` (counted as it arrives, before the store takes it whole), or a change while the view
/// (`size`) holds `max`, ends that watch with [`OverCap`]; the next poll (after the backoff the
/// error brings) opens a new one, which lists again from the start. After an error that cost a
/// capped read ([`costly`]: an answer or event over its size cap, or [`OverCap`]), the next
/// poll also waits [`penalty`]: a member that always sends too much is read every 10 s doubling
/// to 5 min, not every 2 s (a completed list forgives it).
fn capped<K, S>(
    open: impl Fn() -> S + Send + 'static,
    size: impl Fn() -> usize + Send + 'static,
    max: usize,
    kind: String,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    K: Send + 'static,
{
    let state = Capped {
        inner: Box::pin(open()),
        listed: 0,
        strikes: 0,
        pause: None,
    };
    futures::stream::unfold(
        (state, open, size, kind),
        move |(mut state, open, size, kind)| async move {
            if let Some(pause) = state.pause.take() {
                tokio::time::sleep(pause).await;
            }
            let event = state.inner.next().await?;
            let over = match &event {
                Ok(watcher::Event::Init) => {
                    state.listed = 0;
                    false
                }
                Ok(watcher::Event::InitApply(_)) => {
                    state.listed += 1;
                    state.listed > max
                }
                Ok(watcher::Event::InitDone) => {
                    state.strikes = 0;
                    false
                }
                Ok(watcher::Event::Apply(_)) => size() >= max,
                Ok(watcher::Event::Delete(_)) => false,
                Err(e) => {
                    if costly(e) {
                        state.strike();
                    }
                    false
                }
            };
            if !over {
                return Some((event, (state, open, size, kind)));
            }
            state.inner = Box::pin(open());
            state.listed = 0;
            state.strike();
            let error = OverCap {
                kind: kind.clone(),
                max,
            };
            let error = watcher::Error::InitialListFailed(kube::Error::Service(Box::new(error)));
            Some((Err(error), (state, open, size, kind)))
        },
    )
}

/// What [`capped`] keeps between events.
struct Capped<S> {
    inner: std::pin::Pin<Box<S>>,
    /// Objects of the list under way.
    listed: usize,
    /// Costly errors since the last completed list.
    strikes: u32,
    /// The wait before the next poll.
    pause: Option<Duration>,
}

impl<S> Capped<S> {
    fn strike(&mut self) {
        self.strikes = self.strikes.saturating_add(1);
        self.pause = Some(penalty(self.strikes));
    }
}

/// The wait after the `strikes`-th costly error in a row: 10 s doubling, at most 5 minutes.
fn penalty(strikes: u32) -> Duration {
    Duration::from_secs(10)
        .saturating_mul(2u32.saturating_pow(strikes.saturating_sub(1).min(16)))
        .min(Duration::from_secs(300))
}

/// Whether `error` cost a capped read: an answer or watch event of the member over its size
/// cap ([`crate::client::bounded`]), or a view over [`MAX_OBJECTS_PER_VIEW`]. Deadlines and
/// ordinary failures are not: they cost waiting, not reading.
fn costly(error: &(dyn std::error::Error + 'static)) -> bool {
    use crate::client::bounded::{Exceeded, LimitExceeded};
    let mut next = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<OverCap>().is_some() {
            return true;
        }
        if let Some(limit) = e.downcast_ref::<LimitExceeded>() {
            return matches!(
                limit.exceeded,
                Exceeded::ResponseBytes(_) | Exceeded::EventBytes(_)
            );
        }
        // io::Error's `source` skips the error it wraps.
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && costly(inner)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// Watch retry: quick enough that a member whose apiserver returns is current again within
/// a few seconds (kube's default waits up to 30 s, plus jitter), slow enough not to spin.
fn watch_backoff() -> crate::policy::ResetByTime<ResetTimerBackoff<ExponentialBackoff>> {
    // Grown by failures in a row, reset by time only (see `ResetByTime`).
    crate::policy::ResetByTime(ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(250))
                .with_max_delay(Duration::from_secs(2))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(60),
    ))
}

/// The ServiceExports whose hub name (`<namespace>-<name>`) is `hub_name`: every split at a
/// '-' that names an export in the view.
fn exports_sharing_hub_name(
    exports: &Store<ServiceExportView>,
    version: ServiceExportVersion,
    hub_name: &str,
) -> Vec<ObjectRef<ServiceExportView>> {
    hub_name
        .match_indices('-')
        .map(|(i, _)| (&hub_name[..i], &hub_name[i + 1..]))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .map(|(ns, name)| ObjectRef::new_with(name, version).within(ns))
        .filter(|key| exports.get(key).is_some())
        .collect()
}

#[cfg(test)]
mod tests;
