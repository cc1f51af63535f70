//! Events on ServiceExports (events.k8s.io/v1), each created once.
//!
//! Not kube-runtime's `Recorder`: it keeps every event it published for six minutes to count
//! repeats into a series, which is ~1 KiB per event (two per fresh export) held by every member,
//! and ours never repeat: a decision emits an event only when a condition changes.

use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Resource;
use kube::api::{Api, ObjectMeta, PostParams};

use super::decide::{EventKind, EventSpec};
use crate::api::{ServiceExport, ServiceExportVersion};

const CONTROLLER: &str = "fleetnet-hub";

/// Publishes a member's Events through its own client (its own budget).
pub(super) struct Events {
    client: kube::Client,
    /// The reporting instance (pod name).
    instance: String,
}

impl Events {
    pub(super) fn new(client: kube::Client, instance: String) -> Self {
        Self { client, instance }
    }

    /// Records `events` on `se`. One that cannot be recorded is logged, never retried: it is
    /// not worth failing (and repeating) the export.
    pub(super) async fn publish(
        &self,
        se: &ServiceExport,
        version: ServiceExportVersion,
        events: &[EventSpec],
    ) {
        let regarding = se.object_ref(&version);
        let ns = regarding.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        for spec in events {
            let now = Timestamp::now();
            let name = regarding.name.as_deref().unwrap_or(CONTROLLER);
            let event = Event {
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
            };
            if let Err(e) = api.create(&PostParams::default(), &event).await {
                tracing::warn!(error = %e, reason = spec.reason, "could not record event");
            }
        }
    }
}
