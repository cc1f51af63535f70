//! A job's views (reflector stores of projections): when they have listed, whether their
//! watches are healthy, how they back off, how many objects they may hold.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, ExponentialBackoff};
use kube::runtime::{WatchStreamExt, watcher as watch_of};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::observer::ReconcileObserver;

/// One watch of a job, named by the job: at most eight per job ([`WatchHealth`] keeps one bit
/// each), told apart by `bit`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct View {
    bit: u8,
    name: &'static str,
    in_hub: bool,
}

impl View {
    /// A watch of the member, the `index`-th (0..8) of its job, `name` in logs.
    pub const fn member(index: u8, name: &'static str) -> Self {
        Self {
            bit: 1 << index,
            name,
            in_hub: false,
        }
    }

    /// A watch of the member's hub namespace: its list waits in the shared hub budget's line.
    pub const fn hub(index: u8, name: &'static str) -> Self {
        Self {
            bit: 1 << index,
            name,
            in_hub: true,
        }
    }
}

/// The view's name, as logs and the observer's errors tell it.
impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// How many objects the member has of what its jobs count (ServiceExports, today).
type Count = Arc<dyn Fn() -> usize + Send + Sync>;

/// Tells when a member's exporters' watches have each delivered their initial list.
///
/// Not `Store::wait_until_ready`: the store's readiness is a oneshot channel that wakes only
/// the task that polled it last, and the controller itself waits on the ServiceExport store.
/// Two waiters there lose a wake-up: the member would look unsynced until something else
/// polled it again (seen as exactly `--member-sync-timeout` before Ready).
#[derive(Clone, Default)]
pub struct Synced {
    counted: Option<Count>,
    /// Per job: its listed views (bits by [`View`]), and which of them are the member's
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

    /// Whether every watch has listed by now.
    pub fn listed_now(&self) -> bool {
        self.exporters
            .iter()
            .all(|(listed, member, hub)| *listed.borrow() & (member | hub) == member | hub)
    }

    /// Whether the member's own watches have listed by now.
    pub fn member_listed_now(&self) -> bool {
        self.exporters
            .iter()
            .all(|(listed, member, _)| *listed.borrow() & member == *member)
    }

    async fn wait_for(&self, views: impl Fn(u8, u8) -> u8) {
        for (listed, member, hub) in &self.exporters {
            let wanted = views(*member, *hub);
            let mut listed = listed.clone();
            let _ = listed.wait_for(|done| done & wanted == wanted).await;
        }
    }

    /// Objects of the counted view currently known (0 when no job counts one).
    pub fn objects(&self) -> usize {
        self.counted.as_ref().map_or(0, |count| count())
    }

    /// Waits for the watches of both.
    pub fn and(mut self, other: Synced) -> Synced {
        self.counted = self.counted.or(other.counted);
        self.exporters.extend(other.exporters);
        self
    }
}

/// Health of one exporter's watches: first lists, failures and recoveries, reported to the
/// observer.
pub(crate) struct WatchHealth {
    member: String,
    /// The job whose watches these are.
    job: &'static str,
    observer: Arc<dyn ReconcileObserver>,
    /// The views that have listed, one bit each (one channel: each costs ~0.5 KiB, per member).
    listed: watch::Sender<u8>,
    /// The views whose watch is failing, one bit each.
    failing: Mutex<u8>,
}

impl WatchHealth {
    pub(crate) fn new(
        member: &str,
        job: &'static str,
        observer: Arc<dyn ReconcileObserver>,
    ) -> Self {
        Self {
            member: member.to_string(),
            job,
            observer,
            listed: watch::channel(0).0,
            failing: Mutex::new(0),
        }
    }

    /// The readiness handle over the first lists of `views`; `counted` tells how many objects
    /// the member has of what the handle counts ([`Synced::objects`]).
    pub(crate) fn synced(&self, counted: Option<Count>, views: &[View]) -> Synced {
        let bits = |hub: bool| {
            views
                .iter()
                .filter(|v| v.in_hub == hub)
                .fold(0, |bits, v| bits | v.bit)
        };
        Synced {
            counted,
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
            *listed |= view.bit;
            *listed != was
        });
        let recovered = {
            let mut failing = self.failing.lock();
            let was = *failing != 0;
            *failing &= !view.bit;
            was && *failing == 0
        };
        if recovered {
            tracing::info!(member = %self.member, job = self.job, "watches recovered");
            self.observer.watches_recovered(&self.member, self.job);
        }
    }

    fn failed(&self, view: View, error: &watcher::Error) {
        *self.failing.lock() |= view.bit;
        tracing::warn!(member = %self.member, job = self.job, view = ?view, error = %error, "watch failed; retrying with backoff");
        // A kind the cluster does not serve (its CRD not installed) is the job's problem; any
        // other failure of a member watch (what the member sends, its connection) is the member's.
        let unserved = not_served(error);
        let error = match unserved {
            true => format!(
                "{view:?} watch: not served by the cluster (is its CRD installed?): {error}"
            ),
            false => format!("{view:?} watch: {error}"),
        };
        self.observer
            .watch_failed(&self.member, self.job, !view.in_hub && !unserved, &error);
    }
}

/// Whether a watch failed because the cluster does not serve its kind (404 on the list).
fn not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// A watch several jobs share, run until `shutdown`; at once when none reads it (`idle`:
/// nothing is watched).
pub(crate) async fn shared_watch(
    idle: bool,
    watch: impl Future<Output = ()> + Send,
    shutdown: impl Future<Output = ()> + Send,
) {
    if idle {
        return;
    }
    tokio::select! {
        () = watch => {}
        () = shutdown => {}
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

/// The replica's one watch of a hub kind in every namespace ([`super::hub_tap`]): as
/// [`view_watch`], but held to no count of its own (the tap holds each member's namespace to
/// [`MAX_OBJECTS_PER_VIEW`]: the whole fleet's objects are its list).
pub(crate) fn hub_watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let open = move || watch_of(api.clone(), config.clone());
    crate::memory::scratch_stream(
        capped(open, || 0, usize::MAX, String::new()).backoff(watch_backoff()),
    )
}

/// The error a view gets when its `kind` reached [`MAX_OBJECTS_PER_VIEW`].
pub(crate) fn over_cap(kind: &str) -> watcher::Error {
    let error = OverCap {
        kind: kind.to_string(),
        max: MAX_OBJECTS_PER_VIEW,
    };
    watcher::Error::InitialListFailed(kube::Error::Service(Box::new(error)))
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
///
/// A watch that fails after its list ([`after_list`]) is opened anew too, so it lists again:
/// kube's watcher would resume it silently, and the view, marked failing by the error, would
/// show failing until the next list, however well the resumed watch ran (a quiet member: for
/// ever). The new list's end is the proof that it works. A watch that fails again within
/// [`WATCH_HELD`] of its list waits [`relist_pause`] before listing again.
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
        listed_at: None,
        unheld: 0,
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
                    state.listed_at = Some(tokio::time::Instant::now());
                    false
                }
                Ok(watcher::Event::Apply(_)) => size() >= max,
                Ok(watcher::Event::Delete(_)) => false,
                Err(e) => {
                    if costly(e) {
                        state.strike();
                    }
                    if after_list(e) {
                        state.relist();
                        state.inner = Box::pin(open());
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
    /// When the last list completed, while its watch runs.
    listed_at: Option<tokio::time::Instant>,
    /// Watches in a row that failed within [`WATCH_HELD`] of their list.
    unheld: u32,
}

impl<S> Capped<S> {
    fn strike(&mut self) {
        self.strikes = self.strikes.saturating_add(1);
        self.pause = Some(penalty(self.strikes));
    }

    /// The watch failed after its list: the next poll lists again, after the pause its
    /// streak has earned (the longer of it and a strike's).
    fn relist(&mut self) {
        let held = self
            .listed_at
            .take()
            .is_some_and(|at| at.elapsed() >= WATCH_HELD);
        let (unheld, pause) = relist_pause(self.unheld, held);
        self.unheld = unheld;
        self.listed = 0;
        self.pause = self.pause.max(pause);
    }
}

/// How long a watch must have run after its list for its failure to start a new streak.
const WATCH_HELD: Duration = Duration::from_secs(60);

/// Whether `error` came after the view's list: its watch could not start, broke, or sent an
/// error event.
fn after_list(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(_)
            | watcher::Error::WatchFailed(_)
            | watcher::Error::WatchError(_)
    )
}

/// The longest pause before a view lists again whose watches keep failing after their lists:
/// also how long a member whose watches are allowed again may still show failing.
const MAX_RELIST_PAUSE: Duration = Duration::from_secs(60);

/// After a watch failed following its list (`held`: it ran [`WATCH_HELD`] first): the streak
/// of watches that did not hold, and the pause before listing again. The first failure lists
/// again at once (an API server restarted); each further one that follows its list within
/// [`WATCH_HELD`] (lists served, watches refused) waits 10 s doubling to
/// [`MAX_RELIST_PAUSE`], so such a member costs a list a minute, not one every backoff.
fn relist_pause(unheld: u32, held: bool) -> (u32, Option<Duration>) {
    let unheld = match held {
        true => 1,
        false => unheld.saturating_add(1),
    };
    let pause = (unheld > 1).then(|| penalty(unheld - 1).min(MAX_RELIST_PAUSE));
    (unheld, pause)
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

#[cfg(test)]
mod tests;
