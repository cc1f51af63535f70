//! Events (events.k8s.io/v1) on the objects a job reconciles, each created once, after the
//! object's writes.
//!
//! Not kube-runtime's `Recorder`: it keeps every event it published for six minutes to count
//! repeats into a series, which is ~1 KiB per event (two per fresh export) held by every member,
//! and ours never repeat: a decision emits an event only when a condition changes.
//!
//! A reconcile never waits for an Event: [`Events::publish`] queues it, and one task per member
//! creates the queued Events in order through the member's Events client (its own budget). A
//! member's exports are thus bound by its write budget only, even while thousands of Events
//! wait for theirs. A stopping exporter waits (at most 5 s) for its queue to empty. Waiting
//! Events are bounded per member and in all: an Event dropped is logged and counted
//! (`fleetnet_queue_dropped_total{queue="events"}`). The room for all is shared fairly: each
//! member has a few places of its own ([`RESERVED`]) before it takes any of the shared room,
//! so members flooding Events (however many) never keep another member's Events out.

use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit, mpsc};
use tokio_util::task::AbortOnDropHandle;

use k8s_openapi::api::core::v1::ObjectReference;

use super::observer::ReconcileObserver;

const CONTROLLER: &str = "fleetnet-hub";
/// Events a member may have waiting for its Events budget; more are dropped (and logged), as
/// client-go's broadcaster does, rather than held without bound. Two per fresh export: a
/// member cold-starting 2,000 exports fits.
const QUEUE: usize = 4096;
/// Events the whole process may have waiting (~1.2 KiB each: ~40 MiB at most), whatever the
/// number of members: a thousand members cold-starting ten exports each fit.
const TOTAL: usize = 32_768;
static WAITING: Semaphore = Semaphore::const_new(TOTAL);
/// Events each member may have waiting before it takes places of the shared room
/// ([`WAITING`]): its own, whatever other members queue. A fresh export's two Events, for a
/// few exports at a time; at most ~10 KiB per member.
const RESERVED: usize = 8;

/// Whether an Event tells of something normal or of something to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// An Event a decision asks for on the object it decided about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub kind: EventKind,
    pub reason: &'static str,
    pub note: String,
}

impl EventSpec {
    pub fn new(kind: EventKind, reason: &'static str, note: String) -> Self {
        Self { kind, reason, note }
    }
}

/// An Event's place among the waiting ones: one of its member's own, or of the shared room.
/// Freed (dropped) once the Event is handled.
enum Place {
    Own { _permit: OwnedSemaphorePermit },
    Shared { _permit: SemaphorePermit<'static> },
}

/// A queued Event and its place among the process's waiting Events.
type Queued = (Box<Event>, Place);

/// Publishes a member's Events through its own client (its own budget), in the background.
pub(crate) struct Events {
    /// Boxed: a channel allocates its slots 32 at a time, and an `Event` is over 1 KiB inline
    /// (a 35 KiB block per member, most of it never used).
    queue: mpsc::Sender<Queued>,
    /// The reporting instance (pod name).
    instance: String,
    member: String,
    observer: Arc<dyn ReconcileObserver>,
    /// Places among the process's waiting Events ([`WAITING`]; a smaller one in tests).
    waiting: &'static Semaphore,
    /// This member's own places ([`RESERVED`]), taken before any shared one.
    own: Arc<Semaphore>,
}

/// The task creating a member's queued Events; it ends once the [`Events`] is dropped and
/// what was queued is created, or when this handle is dropped.
pub(crate) struct Creator(AbortOnDropHandle<()>);

/// How long a stopping exporter waits for its queued Events to be created.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

impl Creator {
    /// Waits (bounded) until the queued Events are created; stops the rest, logged.
    pub(crate) async fn drain(mut self, member: &str) {
        if tokio::time::timeout(DRAIN, &mut self.0).await.is_err() {
            tracing::warn!(member = %member, "queued events not all created within {DRAIN:?} of stopping; dropped");
        }
    }
}

impl Events {
    pub(crate) fn new(
        client: kube::Client,
        instance: String,
        member: String,
        observer: Arc<dyn ReconcileObserver>,
    ) -> (Self, Creator) {
        let (queue, queued) = mpsc::channel(QUEUE);
        let creator = tokio::spawn(create_each(client, queued, member.clone()));
        let events = Self {
            queue,
            instance,
            member,
            observer,
            waiting: &WAITING,
            own: Arc::new(Semaphore::new(RESERVED)),
        };
        (events, Creator(AbortOnDropHandle::new(creator)))
    }

    /// Queues `events` on the object `regarding`. One that cannot be recorded is logged, never
    /// retried: it is not worth failing (and repeating) the reconcile.
    pub(crate) fn publish(&self, regarding: ObjectReference, events: &[EventSpec]) {
        let ns = regarding.namespace.clone().unwrap_or_default();
        let name = regarding.name.as_deref().unwrap_or(CONTROLLER);
        for spec in events {
            let now = Timestamp::now();
            let event = Box::new(Event {
                metadata: ObjectMeta {
                    name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                action: Some("Export".into()),
                reason: Some(spec.reason.into()),
                note: Some(spec.note.clone()),
                type_: Some(
                    match spec.kind {
                        EventKind::Normal => "Normal",
                        EventKind::Warning => "Warning",
                    }
                    .into(),
                ),
                event_time: Some(MicroTime(now)),
                regarding: Some(regarding.clone()),
                reporting_controller: Some(CONTROLLER.into()),
                reporting_instance: Some(self.instance.clone()),
                ..Default::default()
            });
            let place = match self.own.clone().try_acquire_owned() {
                Ok(own) => Ok(Place::Own { _permit: own }),
                Err(_) => {
                    (self.waiting.try_acquire()).map(|shared| Place::Shared { _permit: shared })
                }
            };
            let queued = place
                .map_err(|_| "events of all members (the process's limit)".to_string())
                .and_then(|place| {
                    self.queue
                        .try_send((event, place))
                        .map_err(|_| format!("{QUEUE} events of this member"))
                });
            if let Err(waiting) = queued {
                self.observer.dropped(&self.member, "events");
                tracing::warn!(
                    member = %self.member,
                    // The field's name is from when only ServiceExports had Events: log
                    // queries read it.
                    serviceexport = %format!("{ns}/{name}"),
                    reason = spec.reason,
                    "event dropped: {waiting} already wait for their Events budget"
                );
            }
        }
    }
}

/// Creates the queued Events one after the other, until the queue's sender is gone. When this
/// replica may not write for the member (it does not hold the lease), what is queued then is
/// dropped at once, in one log line; Events queued later (the lease back) are created.
async fn create_each(client: kube::Client, mut queued: mpsc::Receiver<Queued>, member: String) {
    // The permit is the Event's place among all waiting ones: freed once it is handled.
    while let Some((event, _place)) = queued.recv().await {
        let ns = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(client.clone(), &ns);
        // Boxed: the task waits most of its life, and would otherwise hold room for a request.
        let created = Box::pin(api.create(&PostParams::default(), &event)).await;
        if let Err(e) = &created
            && crate::ownership::refused(e)
        {
            let dropped = 1 + std::iter::from_fn(|| queued.try_recv().ok()).count();
            tracing::info!(member = %member, dropped, "this replica does not hold the member's lease: queued events dropped");
            continue;
        }
        if let Err(e) = created {
            let regarding = event.regarding.as_ref().and_then(|r| r.name.as_deref());
            tracing::warn!(
                member = %member,
                serviceexport = %format!("{ns}/{}", regarding.unwrap_or_default()),
                reason = event.reason.as_deref().unwrap_or_default(),
                error = %e,
                "could not record event"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ServiceExport, ServiceExportVersion};
    use crate::controller::queue::Drops;
    use kube::Resource;

    /// A member client whose requests never answer: Events stay waiting.
    fn hung_client() -> kube::Client {
        let never = tower::service_fn(|_: http::Request<kube::client::Body>| {
            futures::future::pending::<
                Result<http::Response<kube::client::Body>, std::convert::Infallible>,
            >()
        });
        kube::Client::new(never, "default")
    }

    #[tokio::test]
    async fn waiting_events_are_bounded_in_all_members_together_and_drops_counted() {
        let all: &'static Semaphore = Box::leak(Box::new(Semaphore::new(3)));
        let drops = Arc::new(Drops::default());
        let mut members = vec![];
        for m in ["m1", "m2"] {
            let (mut events, creator) =
                Events::new(hung_client(), "pod".into(), m.into(), drops.clone());
            events.waiting = all;
            // No places of their own here: the shared room alone is under test.
            events.own = Arc::new(Semaphore::new(0));
            members.push((events, creator));
        }
        let se = ServiceExport::new("shop", "cart", ServiceExportVersion::V1Alpha1);
        let spec = EventSpec {
            kind: EventKind::Normal,
            reason: "Exported",
            note: "exported".into(),
        };
        // Two Events for m1 and two for m2: four, and three may wait in all.
        for (events, _) in &members {
            events.publish(
                se.object_ref(&ServiceExportVersion::V1Alpha1),
                &[spec.clone(), spec.clone()],
            );
        }
        assert_eq!(*drops.0.lock(), vec![("m2".to_string(), "events")]);
        assert_eq!(all.available_permits(), 0);
        // A stopped member frees its places (its creator task aborted, its queue dropped).
        let (m1, creator) = members.remove(0);
        drop((m1, creator));
        tokio::task::yield_now().await;
        assert_eq!(
            all.available_permits(),
            2,
            "m1's two places freed; m2 holds one"
        );
    }

    /// A member's client that answers every request at once, counting them.
    fn counting_client(sent: Arc<std::sync::atomic::AtomicUsize>) -> kube::Client {
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = kube::client::Body::from(br#"{"metadata":{}}"#.to_vec());
            let mut created = http::Response::new(body);
            *created.status_mut() = http::StatusCode::CREATED;
            futures::future::ready(Ok::<_, std::convert::Infallible>(created))
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_flooding_member_does_not_keep_another_members_event_out() {
        let all: &'static Semaphore = Box::leak(Box::new(Semaphore::new(4)));
        let drops = Arc::new(Drops::default());
        let se = ServiceExport::new("shop", "cart", ServiceExportVersion::V1Alpha1);
        let spec = EventSpec {
            kind: EventKind::Normal,
            reason: "Exported",
            note: "exported".into(),
        };
        // Two members flood Events their server never takes: their own places and the whole
        // shared room fill, and the rest of their Events are dropped.
        let mut flooders = vec![];
        for m in ["flood-1", "flood-2"] {
            let (mut events, creator) =
                Events::new(hung_client(), "pod".into(), m.into(), drops.clone());
            events.waiting = all;
            events.publish(
                se.object_ref(&ServiceExportVersion::V1Alpha1),
                &vec![spec.clone(); 50],
            );
            flooders.push((events, creator));
        }
        assert_eq!(all.available_permits(), 0, "the shared room is full");
        let dropped = drops.0.lock().len();
        assert_eq!(
            dropped,
            2 * 50 - 2 * RESERVED - 4,
            "all but their places dropped"
        );
        // A quiet member's one Event is queued, not dropped, and sent.
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (mut quiet, creator) = Events::new(
            counting_client(sent.clone()),
            "pod".into(),
            "quiet".into(),
            drops.clone(),
        );
        quiet.waiting = all;
        quiet.publish(
            se.object_ref(&ServiceExportVersion::V1Alpha1),
            std::slice::from_ref(&spec),
        );
        assert_eq!(
            drops.0.lock().len(),
            dropped,
            "nothing of the quiet member dropped"
        );
        assert!(
            !drops.0.lock().iter().any(|(m, _)| m == "quiet"),
            "{:?}",
            drops.0.lock()
        );
        drop(quiet);
        creator.drain("quiet").await;
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1, "sent");
    }
}
