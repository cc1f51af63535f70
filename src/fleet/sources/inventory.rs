//! Members from fleet's inventory (`--member-inventory`): every MemberCluster fleet lists is a
//! member, connected as its ClusterProfile (`<profile namespace>/<member>`, written by fleet
//! once the member agent reported the cluster's properties) says, with the token of the Secret
//! `<consumer namespace>/<member>` (the cluster-inventory API's secret-reader convention, read
//! in-process). Three watches through the hub client; a member whose pieces are not all there
//! is shown "awaiting credentials: <what>" and engaged as soon as they are. A MemberCluster
//! being deleted keeps its member (as last seen) until the membership job has run the leave
//! ([`leave`]).

pub mod credentials;
pub mod leave;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::AgentTypes;
use crate::fleet::registry::{MemberSource, hub_namespace};
use credentials::{Lookup, Profile, Token, member_of, profile_of, reported_connection, token_of};

/// Where the inventory is read and what its members' leave waits for.
#[derive(Clone, Debug)]
pub struct Settings {
    /// fleet's ClusterProfiles (`--inventory-profile-namespace`, fleet's `fleet-system`).
    pub profile_namespace: String,
    /// The consumer namespace: the members' token Secrets (`--member-secrets-namespace`).
    pub secret_namespace: String,
    /// A member's hub namespace is `<prefix><member>` (its InternalMemberCluster's).
    pub namespace_prefix: String,
    /// The agent types whose leave is waited for.
    pub agents: AgentTypes,
}

/// fleet's MemberClusters (cluster-scoped).
pub fn member_clusters() -> ApiResource {
    let gvk = GroupVersionKind::gvk("cluster.kubernetes-fleet.io", "v1beta1", "MemberCluster");
    ApiResource::from_gvk_with_plural(&gvk, "memberclusters")
}

/// The cluster-inventory API's ClusterProfiles.
pub fn cluster_profiles() -> ApiResource {
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile");
    ApiResource::from_gvk_with_plural(&gvk, "clusterprofiles")
}

/// One kind's objects by name, once listed; a relist replaces them when done.
struct Listed<T> {
    listed: bool,
    items: BTreeMap<String, T>,
    relisting: Option<BTreeMap<String, T>>,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Self {
            listed: false,
            items: BTreeMap::new(),
            relisting: None,
        }
    }
}

impl<T: PartialEq> Listed<T> {
    /// Applies one watch event (`value`: what an object is kept as); whether the items changed.
    fn apply<K: kube::Resource>(
        &mut self,
        event: watcher::Event<K>,
        value: impl Fn(&K) -> T,
    ) -> bool {
        let name = |o: &K| o.meta().name.clone().unwrap_or_default();
        match event {
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                if let Some(relisting) = self.relisting.as_mut() {
                    relisting.insert(name(&o), value(&o));
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let changed = !self.listed || listed != self.items;
                self.listed = true;
                self.items = listed;
                changed
            }
            watcher::Event::Apply(o) => {
                let (n, v) = (name(&o), value(&o));
                let changed = self.items.get(&n) != Some(&v);
                self.items.insert(n, v);
                changed
            }
            watcher::Event::Delete(o) => self.items.remove(&name(&o)).is_some(),
        }
    }
}

/// A MemberCluster as the view keeps it.
#[derive(Clone, Debug, PartialEq)]
struct ClusterEntry {
    deleting: bool,
    /// Once it is being deleted: the connection it reports itself (read only then, when fleet
    /// deletes its profile: a member whose leave no replica saw start is still reachable).
    reported: Option<Profile>,
}

/// What the view keeps of a MemberCluster.
fn cluster_entry(member_cluster: &DynamicObject) -> ClusterEntry {
    let deleting = member_cluster.metadata.deletion_timestamp.is_some();
    ClusterEntry {
        deleting,
        reported: deleting.then(|| reported_connection(member_cluster)),
    }
}

/// What the three watches have seen, and the members leaving.
#[derive(Default)]
struct View {
    /// MemberClusters.
    clusters: Listed<ClusterEntry>,
    profiles: Listed<Profile>,
    tokens: Listed<Token>,
    /// Why no ClusterProfile can be listed (no CRD, forbidden); `None` once listed.
    profiles_unreadable: Option<String>,
    /// The members served, not leaving, as [`View::settle`] last made them: a member once
    /// served keeps its last kubeconfig while a piece is missing (fleet deletes the profile
    /// as it deletes the MemberCluster, in whatever order the watches tell it); leaving the
    /// inventory is its MemberCluster's deletion.
    active: BTreeMap<String, MemberSource>,
    /// Members whose MemberCluster is being deleted or gone, as they were last served, until
    /// their leave is done.
    leaving: BTreeMap<String, MemberSource>,
    /// Left, their MemberCluster still there (its finalizers pending): not served again.
    left: BTreeSet<String>,
}

impl View {
    fn listed(&self) -> bool {
        self.clusters.listed && self.profiles.listed && self.tokens.listed
    }

    fn member(&self, name: &str, s: &Settings) -> MemberSource {
        self.member_with(name, self.profiles.items.get(name), s)
    }

    /// Member `name` with `profile` for its connection and its token Secret.
    fn member_with(&self, name: &str, profile: Option<&Profile>, s: &Settings) -> MemberSource {
        let at = Lookup {
            profile_namespace: &s.profile_namespace,
            secret_namespace: &s.secret_namespace,
            profiles_unreadable: self.profiles_unreadable.as_deref(),
        };
        member_of(name, profile, self.tokens.items.get(name), &at)
    }

    /// Every member, one entry each; `None` until the three kinds have listed.
    fn members(&self) -> Option<Vec<(String, MemberSource)>> {
        self.listed().then(|| {
            let all = self.active.iter().chain(self.leaving.iter());
            all.map(|(n, m)| (n.clone(), m.clone())).collect()
        })
    }

    /// After a change: a member whose MemberCluster is being deleted or is gone starts
    /// leaving as it was last served (fleet deletes its profile meanwhile); one that could not
    /// be served has nothing to leave and goes at once.
    fn settle(&mut self, s: &Settings) {
        if !self.listed() {
            return;
        }
        let deleting = self
            .clusters
            .items
            .iter()
            .filter(|(_, c)| c.deleting)
            .map(|(n, _)| n);
        let gone = self
            .active
            .keys()
            .filter(|n| !self.clusters.items.contains_key(*n));
        let starting: BTreeSet<String> = deleting
            .chain(gone)
            .filter(|n| !self.leaving.contains_key(*n) && !self.left.contains(*n))
            .cloned()
            .collect();
        for name in starting {
            let source = self.leaving_with(&name, s);
            if source.kubeconfig.is_ok() {
                tracing::info!(member = %name, "MemberCluster deleted: the member stays until its leave is done");
                self.leaving.insert(name, source);
            } else {
                self.left.insert(name);
            }
        }
        let clusters = &self.clusters.items;
        self.left
            .retain(|n| clusters.get(n).is_some_and(|c| c.deleting));
        let active: Vec<String> = clusters
            .iter()
            .filter(|(n, c)| {
                !c.deleting && !self.leaving.contains_key(*n) && !self.left.contains(*n)
            })
            .map(|(n, _)| n.clone())
            .collect();
        self.active = active
            .into_iter()
            .map(|n| (n.clone(), self.served(&n, s)))
            .collect();
    }

    /// What member `name` is served with: its pieces now, else (one missing or refused) the
    /// kubeconfig it was last served with, if any.
    fn served(&self, name: &str, s: &Settings) -> MemberSource {
        let now = self.member(name, s);
        match self.active.get(name) {
            Some(last) if now.kubeconfig.is_err() && last.kubeconfig.is_ok() => last.clone(),
            _ => now,
        }
    }

    /// What a member starting to leave is served with: as [`View::served`], else (never
    /// served by this process, its profile deleted with its MemberCluster's deletion, as fleet
    /// does) the connection its MemberCluster reports, with its token.
    fn leaving_with(&self, name: &str, s: &Settings) -> MemberSource {
        let served = self.served(name, s);
        let reported = self
            .clusters
            .items
            .get(name)
            .and_then(|c| c.reported.as_ref());
        match reported {
            Some(reported) if served.kubeconfig.is_err() => {
                let source = self.member_with(name, Some(reported), s);
                if source.kubeconfig.is_ok() {
                    tracing::info!(member = %name, "its ClusterProfile is gone: leaving on the connection its MemberCluster reports");
                }
                source
            }
            _ => served,
        }
    }

    /// The leave of `name` is done: it is served no more.
    fn left(&mut self, name: &str) -> bool {
        let was = self.leaving.remove(name).is_some();
        if was && self.clusters.items.contains_key(name) {
            self.left.insert(name.to_string());
        }
        was
    }
}

/// fleet's inventory, watched until shutdown.
pub struct InventorySource {
    view: Arc<Mutex<View>>,
}

impl InventorySource {
    /// Starts the watches through `hub`; a change of the members sends on `rescan`.
    pub fn start(
        hub: &kube::Client,
        settings: Settings,
        rescan: mpsc::Sender<()>,
        shutdown: CancellationToken,
    ) -> Self {
        let view = Arc::new(Mutex::new(View::default()));
        let settings = Arc::new(settings);
        let watch = Watch {
            view: view.clone(),
            settings: settings.clone(),
            rescan: rescan.clone(),
            shutdown: shutdown.clone(),
        };
        let clusters = Api::<DynamicObject>::all_with(hub.clone(), &member_clusters());
        tokio::spawn(watch.clone().run(clusters, "MemberClusters", |v, e, _| {
            v.clusters.apply(e, cluster_entry)
        }));
        let ns = &settings.profile_namespace;
        let profiles = Api::<DynamicObject>::namespaced_with(hub.clone(), ns, &cluster_profiles());
        tokio::spawn(watch.clone().run(profiles, "ClusterProfiles", |v, e, s| {
            // Readable again once a list is done.
            let was = match e {
                watcher::Event::InitDone => v.profiles_unreadable.take(),
                _ => None,
            };
            let ns = s.profile_namespace.clone();
            v.profiles.apply(e, |p: &DynamicObject| profile_of(p, &ns)) || was.is_some()
        }));
        let tokens = Api::<Secret>::namespaced(hub.clone(), &settings.secret_namespace);
        tokio::spawn(watch.run(tokens, "token Secrets", |v, e, _| {
            v.tokens.apply(e, token_of)
        }));
        tokio::spawn(poll_leaves(
            hub.clone(),
            view.clone(),
            settings,
            rescan,
            shutdown,
        ));
        Self { view }
    }

    /// Every member fleet lists, one entry each; `None` until its first lists are done.
    pub fn members(&self) -> Option<Vec<(String, MemberSource)>> {
        self.view.lock().members()
    }
}

#[derive(Clone)]
struct Watch {
    view: Arc<Mutex<View>>,
    settings: Arc<Settings>,
    rescan: mpsc::Sender<()>,
    shutdown: CancellationToken,
}

impl Watch {
    /// Runs one kind's watch: each event applied by `apply` to the view, then the leaving
    /// members settled; a change starts a rescan.
    async fn run<K>(
        self,
        api: Api<K>,
        what: &'static str,
        apply: impl Fn(&mut View, watcher::Event<K>, &Settings) -> bool + Send + 'static,
    ) where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        loop {
            let event = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                event = events.next() => event,
            };
            let Some(event) = event else { return };
            let mut view = self.view.lock();
            let changed = match event {
                Ok(event) => apply(&mut view, event, &self.settings),
                Err(e) => failed(&mut view, what, &self.settings, &e),
            };
            if changed {
                view.settle(&self.settings);
                let _ = self.rescan.try_send(());
            }
        }
    }
}

/// A failed list or watch, retried with backoff. A first list the hub cannot answer (no such
/// CRD: 404; forbidden: 403) counts as an empty list, so the other kinds' members are served:
/// fleet's members without ClusterProfiles await them, naming why.
fn failed(view: &mut View, what: &'static str, s: &Settings, e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    };
    tracing::warn!(what, error = %e, "cannot watch fleet's inventory; retrying");
    let Some(code @ (403 | 404)) = code else {
        return false;
    };
    let why = match code {
        404 => format!("the hub does not serve {what} (its CRD is not installed)"),
        _ => format!("the hub forbids listing {what} (the hub Role lacks list and watch)"),
    };
    match what {
        "MemberClusters" => first_listed(&mut view.clusters),
        "ClusterProfiles" => {
            let ns = &s.profile_namespace;
            let why = Some(format!("{why}: no ClusterProfile in {ns} can be read"));
            let changed = view.profiles_unreadable != why;
            view.profiles_unreadable = why;
            first_listed(&mut view.profiles) || changed
        }
        _ => first_listed(&mut view.tokens),
    }
}

fn first_listed<T>(listed: &mut Listed<T>) -> bool {
    let was = listed.listed;
    listed.listed = true;
    !was
}

/// Reads the InternalMemberCluster of every leaving member until its leave is done.
async fn poll_leaves(
    hub: kube::Client,
    view: Arc<Mutex<View>>,
    settings: Arc<Settings>,
    rescan: mpsc::Sender<()>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(leave::POLL) => {}
        }
        let leaving: Vec<String> = view.lock().leaving.keys().cloned().collect();
        for name in leaving {
            let Ok(ns) = hub_namespace(&settings.namespace_prefix, &name) else {
                continue;
            };
            match leave::read(&hub, &ns, &name).await {
                Ok(imc) if leave::done(imc.as_ref(), settings.agents) => {
                    tracing::info!(member = %name, "its leave is done: the member is stopped");
                    if view.lock().left(&name) {
                        let _ = rescan.try_send(());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(member = %name, error = %e, "cannot read its InternalMemberCluster; still leaving")
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "inventory/tests.rs"]
mod tests;
