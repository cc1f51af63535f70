//! The two views of the ServiceImport jobs, each of a projection (`model`): the member's
//! ServiceImports (all namespaces) and the InternalServiceImports of the member's hub
//! namespace; and what each change triggers. A ServiceImport's change triggers its forward
//! reconcile and the back reconcile of every InternalServiceImport referring to it; an
//! InternalServiceImport's change triggers its back reconcile and the forward reconcile of
//! the ServiceImport it refers to (a deleted copy is made again).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::model::{ImportView, InternalView};
use crate::api::ServiceImport;
use crate::controller::hub_tap::Followed;
use crate::controller::pace::Pace;
use crate::controller::tap::{Keep, Tap, every};
use crate::controller::views::{View, WatchHealth};

/// The member's ServiceImports.
const SERVICE_IMPORTS: View = View::member(0, "ServiceImports");
/// The InternalServiceImports of the member's hub namespace.
const INTERNAL_SERVICE_IMPORTS: View = View::hub(1, "InternalServiceImports");

/// The watches whose first lists the jobs wait for.
pub(super) const WATCHED: [View; 2] = [SERVICE_IMPORTS, INTERNAL_SERVICE_IMPORTS];

/// The paces of the halves that run: the forward one only when the `serviceimport` job does.
pub(super) struct Paces {
    pub(super) forward: Option<Arc<Pace<ImportView>>>,
    pub(super) back: Arc<Pace<InternalView>>,
}

pub(super) struct Views {
    pub(super) imports: Store<ImportView>,
    pub(super) internals: Store<InternalView>,
}

impl Views {
    /// Takes the job's part of the replica's watch of the hub's copies (`hub`: the store and
    /// events of the member's namespace) and the job's view of the member's shared
    /// ServiceImport watch; the future feeds the copies' changes to `paces` (never ends), the
    /// view feeds its own.
    pub(super) fn watch(
        member: &mut Tap<ServiceImport>,
        (internals, followed): (Store<InternalView>, Followed<InternalView>),
        health: &Arc<WatchHealth>,
        paces: Paces,
    ) -> (Self, BoxFuture<'static, ()>) {
        let paces = Arc::new(paces);
        let imports = {
            let (paces, by_reference) = (paces.clone(), internals.clone());
            let project = Keep::new(every, ImportView::from);
            member.view((health, SERVICE_IMPORTS), project, move |event| {
                if let Event::Apply(si) | Event::InitApply(si) | Event::Delete(si) = event {
                    paces.trigger(&Changed::Import(si), &by_reference);
                }
            })
        };
        let internal_events = followed
            .inspect(health.inspector(INTERNAL_SERVICE_IMPORTS))
            .touched_objects()
            .filter_map(|i| futures::future::ready(i.ok()));
        let by_reference = internals.clone();
        let triggers = internal_events
            .for_each(move |isi| {
                paces.trigger(&Changed::Internal(&isi), &by_reference);
                futures::future::ready(())
            })
            .boxed();
        let views = Self { imports, internals };
        (views, triggers)
    }
}

/// One object a watch delivered (applied or deleted).
enum Changed<'a> {
    Import(&'a ImportView),
    Internal(&'a InternalView),
}

impl Paces {
    fn trigger(&self, changed: &Changed<'_>, internals: &Store<InternalView>) {
        match changed {
            Changed::Import(si) => {
                if let Some(forward) = &self.forward {
                    forward.trigger(import_key(&si.id.namespace, &si.id.name));
                }
                self.back
                    .trigger_all(referring(internals, &si.id.namespace, &si.id.name));
            }
            Changed::Internal(isi) => {
                if let Some(forward) = &self.forward {
                    let (ns, name) = isi.referred();
                    forward.trigger(import_key(ns, name));
                }
                self.back
                    .trigger(internal_key(&isi.id.namespace, &isi.id.name));
            }
        }
    }
}

/// A ServiceImport's name as the pace keeps it.
pub(super) fn import_key(namespace: &str, name: &str) -> ObjectRef<ImportView> {
    ObjectRef::new(name).within(namespace)
}

/// An InternalServiceImport's name as the pace keeps it.
pub(super) fn internal_key(namespace: &str, name: &str) -> ObjectRef<InternalView> {
    ObjectRef::new(name).within(namespace)
}

/// The InternalServiceImports in the view that refer to the ServiceImport `ns/name`.
pub(super) fn referring(
    internals: &Store<InternalView>,
    ns: &str,
    name: &str,
) -> Vec<ObjectRef<InternalView>> {
    internals
        .state()
        .iter()
        .filter(|i| i.referred() == (ns, name))
        .map(|i| internal_key(&i.id.namespace, &i.id.name))
        .collect()
}
