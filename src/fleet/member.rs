//! One engagement of one member: its own client, limiter, watches, queue and cancellation.
//! Lives exactly as long as the member's kubeconfig content is unchanged.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::admission::{Candidate, Member};
use super::state::{Event, FleetState, JobPhase, Phase};
use super::vet::{self, TrustPolicy, Vetted};
use super::{Error, Shared};
use crate::api::ServiceExportVersion;
use crate::client::{self, ClientStats};
use crate::controller::{MemberInputs, Running, Synced};
use crate::export::{PublicIpAccess, Settings};
use crate::jobs::{self, Inputs};
use crate::member_watches::MemberWatches;
use crate::service_exports::ServiceExportFeed;
use futures::FutureExt;

/// Admits the member, then runs it until `cancel`: connect, discover, start the exporter,
/// track its phase; any failure is retried with the member's own backoff, never affecting
/// other members.
pub(super) async fn run(
    name: String,
    hub_namespace: String,
    file: String,
    kubeconfig: Arc<str>,
    credentials: Option<Arc<client::credentials::Credentials>>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    // Its state on the hub for as long as it is engaged here, refused or failing included.
    let _status = AbortOnDropHandle::new(tokio::spawn(publish_status(
        shared.clone(),
        name.clone(),
        hub_namespace.clone(),
        cancel.clone(),
    )));
    let candidate = Candidate {
        name: &name,
        hub_namespace: &hub_namespace,
        origin: &file,
        trust: shared.config.trust,
        azure: azure_access(&shared, &name),
    };
    // A refused kubeconfig stays refused until its content changes (a new engagement): no
    // retries, and never a connection to its server.
    let member = match Member::admit(candidate, kubeconfig) {
        Ok(member) => member,
        Err(e) => {
            tracing::error!(member = %name, error = %e, "member kubeconfig refused; not connecting");
            shared.state.record(&name, Event::Refused(e.to_string()));
            shared.hooks.member_engaged(&name, Arc::default());
            cancel.cancelled().await;
            return;
        }
    };
    let mut failures = 0u32;
    while !cancel.is_cancelled() {
        shared.state.record(&name, Event::Connecting);
        let started = tokio::time::Instant::now();
        // A panic in this member's attempt (outside data nothing else caught) costs this
        // member an attempt, not its task: it is failing and tried again like any failure.
        let ended = std::panic::AssertUnwindSafe(run_once(
            &member,
            credentials.clone(),
            &shared,
            &cancel,
            failures,
        ))
        .catch_unwind()
        .await;
        let Some(e) = settle(ended, cancel.is_cancelled()) else {
            break;
        };
        failures = failures_after(failures, started.elapsed());
        let delay = retry_delay(failures, rand::random::<f64>());
        tracing::warn!(member = %name, error = %e, retry_in = ?delay, "member failing");
        shared.state.record(&name, Event::Failed(e.to_string()));
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    tracing::info!(member = %name, "member stopped");
}

/// The longest wait before a failing member is tried again: a member whose API server comes
/// back is engaged within this (plus its sync), and an unreachable one costs one connection
/// attempt per this period (1,000 members down: ~70 attempts/s, each refused or timing out).
const MAX_RETRY_DELAY: Duration = Duration::from_secs(15);

/// An attempt that ran this long was a working engagement: its failure starts the backoff anew.
const RAN_WELL: Duration = Duration::from_secs(60);

/// Failures in a row after an attempt that lasted `ran`.
fn failures_after(failures: u32, ran: Duration) -> u32 {
    if ran >= RAN_WELL {
        1
    } else {
        failures.saturating_add(1)
    }
}

/// The wait before the next attempt after `failures` in a row (`jitter` in 0..1): from 1 s,
/// doubling, jittered, never over [`MAX_RETRY_DELAY`].
fn retry_delay(failures: u32, jitter: f64) -> Duration {
    crate::policy::backoff(
        Duration::from_secs(1),
        failures.saturating_sub(1),
        MAX_RETRY_DELAY,
        jitter,
    )
}

/// How one attempt at running a member ended (`Err` when it panicked), and whether it was
/// asked to stop: `None` to stop, else why the member is failing until its next attempt. An
/// attempt that returns while nobody asked it to stop ended unexpectedly: its watches and
/// exporters are gone, so it is a failure too, never a member left showing its last phase.
fn settle(
    ended: Result<Result<(), Error>, Box<dyn std::any::Any + Send>>,
    cancelled: bool,
) -> Option<Error> {
    match ended {
        _ if cancelled => None,
        Ok(Ok(())) => Some(Error::Ended),
        Ok(Err(e)) => Some(e),
        // The panic's message is not repeated: it may quote what the member sent (the panic
        // hook has logged it already).
        Err(_) => Some(Error::Panicked),
    }
}

/// The member's Azure settings, with the Traffic Manager feature on.
fn azure_access(shared: &Shared, name: &str) -> Option<PublicIpAccess> {
    let azure = shared.azure.as_ref()?;
    shared
        .config
        .traffic_manager
        .then(|| azure.for_member(name))
}

#[cfg(test)]
mod supervision_tests;

/// A member's clients, built from its vetted kubeconfig.
pub struct MemberClient {
    pub clients: client::MemberClients,
    /// TLS verification is off for this member (allowed by the trust policy).
    pub tls_verify_disabled: bool,
}

/// A client for a member kubeconfig (from `origin`, its file, named in errors) that passes
/// `trust`, through a fresh limiter counted in `stats`. A refused kubeconfig never gets as far
/// as a connection.
pub async fn member_client(
    name: &str,
    origin: &str,
    kubeconfig: &str,
    trust: TrustPolicy,
    limits: &client::Limits,
    stats: Arc<ClientStats>,
    fence: client::Fence,
) -> Result<MemberClient, Error> {
    let vetted = vet::vet(kubeconfig, origin, trust).map_err(Error::Refused)?;
    connect(name, origin, vetted, limits, stats, fence, None).await
}

/// Clients for a member whose kubeconfig (from `origin`) was vetted; with `credentials`,
/// authenticating with what that cell holds (rotated in place by the engagement).
async fn connect(
    name: &str,
    origin: &str,
    vetted: Vetted,
    limits: &client::Limits,
    stats: Arc<ClientStats>,
    fence: client::Fence,
    credentials: Option<Arc<client::credentials::Credentials>>,
) -> Result<MemberClient, Error> {
    let mut clients =
        client::member_clients(name, vetted.kubeconfig, limits, stats, fence, credentials)
            .await
            .map_err(|e| redacted(origin, e))?;
    // Shown on /members, in `check` and in logs: the vetting refuses credentials in the URL,
    // and this keeps it so should a URL ever get past it.
    clients.server = crate::client::printable_server(&clients.server);
    Ok(MemberClient {
        clients,
        tls_verify_disabled: vetted.tls_verify_disabled,
    })
}

/// One attempt at running `member`, the `failures`-th in a row after failures.
async fn run_once(
    member: &Member,
    credentials: Option<Arc<client::credentials::Credentials>>,
    shared: &Arc<Shared>,
    cancel: &CancellationToken,
    failures: u32,
) -> Result<(), Error> {
    let (cfg, name) = (&shared.config, member.name.as_str());
    // Dropped (the slot freed) when this attempt ends, once the views have listed, or after
    // its hold, whichever comes first.
    let Some(engaging) = engaging_slot(&shared.engaging, cancel, slot_hold(failures)).await else {
        return Ok(());
    };
    let stats = Arc::new(ClientStats::default());
    let MemberClient {
        clients:
            client::MemberClients {
                client,
                server,
                proxy,
            },
        tls_verify_disabled,
    } = Box::pin(connect(
        name,
        &member.origin,
        member.connection.vetted(&member.origin)?,
        &cfg.member_limits,
        stats.clone(),
        shared.ownership.fence_of(name),
        credentials,
    ))
    .await?;
    if tls_verify_disabled {
        tracing::warn!(member = %name, server = %server, "TLS verification of this member is DISABLED (--allow-insecure-member-tls)");
    }
    shared.state.set_server(name, &server, tls_verify_disabled);
    if let Some(proxy) = &proxy {
        tracing::info!(member = %name, server = %server, proxy = %proxy, "connects through the proxy its kubeconfig names (--allow-member-proxy)");
    }
    shared.state.set_proxy(name, proxy);
    shared.hooks.member_engaged(name, stats);
    // Both boxed: the member's task waits most of its life at its end, and would otherwise
    // hold room for the requests of its start.
    let version = tokio::time::timeout(
        cfg.member_sync_timeout,
        Box::pin(ServiceExportVersion::discover(&client)),
    )
    .await
    .map_err(|_| Error::DiscoveryTimeout(cfg.member_sync_timeout))?
    .map_err(Error::Discovery)?;
    shared.state.record(name, Event::Syncing);
    let probe_client = client.clone();
    // The member's view of the shared hub client, for both exporters: one line in the hub
    // budget, every write fenced by this member's hold; kept until its tasks are over.
    let hub_namespace = &member.hub_namespace;
    let _hub_view = shared
        .hub_views
        .add(hub_namespace, shared.ownership.fence_of(name));
    let hub = shared.hub_views.client();
    // One ServiceExport watch for the jobs; the member's client serves its Events too, in
    // their own budget.
    let exports = ServiceExportFeed::watch(&client, version, name, shared.observer_for());
    let watches = MemberWatches::of(&client);
    let mut inputs = inputs(member, shared, client, hub, (exports, watches));
    let mut runs = Vec::new();
    let mut jobs = Vec::new();
    shared
        .state
        .jobs_started(name, cfg.controllers.selected().map(|job| job.name()));
    for job in cfg.controllers.selected() {
        let Running { run, synced } = job.start(&mut inputs, cancel.clone());
        runs.push(run);
        jobs.push((job.name(), synced));
    }
    let exports = inputs.shared.service_exports;
    let stop = cancel.clone();
    runs.push(exports.run(async move { stop.cancelled().await }).boxed());
    runs.push(inputs.shared.member_watches.run(cancel.clone()).boxed());
    let span = tracing::info_span!("member", fleet.member = %name);
    // Handles that abort on drop: when a stopping member outlives its drain period and its
    // task is aborted, its exporters, sync tracker and prober go with it (a dropped JoinHandle
    // would leave them running detached, reconciling and recording a member that is gone).
    let run = AbortOnDropHandle::new(tokio::spawn(
        futures::future::join_all(runs).instrument(span),
    ));
    let state = shared.state.clone();
    let _watcher = AbortOnDropHandle::new(tokio::spawn(track_sync(
        state.clone(),
        name.to_string(),
        jobs,
        cfg.member_sync_timeout,
        engaging,
    )));
    let _prober =
        AbortOnDropHandle::new(tokio::spawn(probe(state, name.to_string(), probe_client)));
    // A JoinError's text quotes the panic's message, which may quote what the member sent.
    run.await.map(drop).map_err(|e| match e.is_panic() {
        true => Error::Panicked,
        false => Error::Abnormal,
    })
}

/// Publishes the member's state on the hub ([`crate::status`]) while this engagement runs,
/// fenced by the member's hold (written only while owned here).
pub(super) async fn publish_status(
    shared: Arc<Shared>,
    name: String,
    hub_namespace: String,
    cancel: CancellationToken,
) {
    let hub = client::member_view(&shared.hub_client, shared.ownership.fence_of(&name));
    // The Lease that gives the right to write, not this replica: a rollout (new pod names)
    // changes its holder, not the object (`status` reads the holder).
    let owner = match shared.ownership.lease_of(&name) {
        Some(lease) => format!("{}{lease}", crate::status::LEASE_OWNER),
        None => crate::status::NO_ELECTION_OWNER.to_string(),
    };
    let state = shared.state.clone();
    let read = move || state.member(&name).map(|s| s.published(&name, &owner));
    crate::status::publish(hub, hub_namespace, read, cancel).await;
}

/// What the member gives every job it runs.
fn inputs(
    member: &Member,
    shared: &Arc<Shared>,
    client: kube::Client,
    hub_client: kube::Client,
    (service_exports, member_watches): (ServiceExportFeed, MemberWatches),
) -> Inputs {
    let (cfg, name) = (&shared.config, member.name.as_str());
    let (public_ips, default_resource_group, allowed_resource_groups) = match &member.azure {
        Some(access) => {
            let access = access.clone();
            let groups = access.allowed_resource_groups;
            (Some(access.lookup), access.default_resource_group, groups)
        }
        _ => (None, String::new(), vec![]),
    };
    MemberInputs {
        member: name.to_string(),
        hub_namespace: member.hub_namespace.clone(),
        member_client: client.clone(),
        events_client: client,
        hub_client,
        claim: shared.ownership.claim_of(name),
        observer: shared.observer_for(),
        instance: cfg.instance.clone(),
        concurrency: cfg.member_limits.reconcile_concurrency,
        shared: jobs::Shared {
            service_exports,
            member_watches,
            hub_watches: shared.hub_watches.clone(),
            export_settings: Settings {
                member: name.to_string(),
                traffic_manager: cfg.traffic_manager,
                default_resource_group,
                quotas: cfg.quotas,
                allowed_resource_groups,
            },
            public_ips,
            max_export_bytes: cfg.quotas.max_export_bytes,
            fleet_system_namespace: cfg.fleet_system_namespace.clone(),
            agent_types: cfg.agent_types,
            controllers: cfg.controllers,
        },
    }
}

/// How long an attempt may hold its engaging slot: a first attempt [`super::ENGAGING_SLOT`];
/// an attempt after failures [`super::RETRY_ENGAGING_SLOT`], so that members failing over and
/// over (a server that hangs: ~70 of them would fill every slot at the first's hold) cost the
/// others' engagement little.
fn slot_hold(failures: u32) -> Duration {
    if failures == 0 {
        super::ENGAGING_SLOT
    } else {
        super::RETRY_ENGAGING_SLOT
    }
}

/// Waits for one of the `slots` of members engaging at once; `None` if cancelled meanwhile.
/// The slot is held until the returned sender is dropped, at most `hold`.
async fn engaging_slot(
    slots: &Arc<tokio::sync::Semaphore>,
    cancel: &CancellationToken,
    hold: Duration,
) -> Option<tokio::sync::oneshot::Sender<()>> {
    let permit = tokio::select! {
        _ = cancel.cancelled() => return None,
        permit = slots.clone().acquire_owned() => permit.ok()?,
    };
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(hold, released).await;
    });
    Some(release)
}

/// Frees the member's engaging slot once its own watches have listed, moves its phase to Ready
/// once every job's watches have, and each job's to Ready once its own have. Past `timeout`
/// the jobs not listed yet show failing (a CRD the member or the hub lacks costs that job, not
/// the others) and the member is Ready, unless none of its jobs could list the member at all:
/// then the member shows Failing until one can. Never blocks anything else.
async fn track_sync(
    state: Arc<FleetState>,
    member: String,
    jobs: Vec<(&'static str, Synced)>,
    timeout: Duration,
    engaging: tokio::sync::oneshot::Sender<()>,
) {
    let all = jobs.iter().fold(Synced::default(), |all, (_, synced)| {
        all.and(synced.clone())
    });
    let each_job = futures::future::join_all(jobs.iter().map(|(job, synced)| {
        let (state, member) = (&state, &member);
        async move {
            synced.wait().await;
            state.job_ready(member, job);
        }
    }));
    let member_synced = async {
        let listed = tokio::time::timeout(timeout, async {
            // The engaging slot bounds the work of connecting and listing the member; the
            // hub's list waits in the hub budget's line, which is no reason to hold back the
            // others. A job whose kind is not served will not list: it is settled as failing.
            tokio::select! {
                () = all.member_listed() => {}
                () = settled(&state, &member, &jobs) => {}
            }
            drop(engaging);
            tokio::select! {
                () = all.wait() => {}
                () = settled(&state, &member, &jobs) => {}
            }
        })
        .await;
        if listed.is_err() {
            let e = Error::SyncTimeout(timeout).to_string();
            tracing::warn!(member = %member, "{e}");
            for (job, synced) in &jobs {
                if !synced.listed_now() {
                    state.job_failed(&member, job, &e, false);
                }
            }
            if !jobs.is_empty() && !jobs.iter().any(|(_, synced)| synced.member_listed_now()) {
                state.record(&member, Event::Failed(e));
                let listing = jobs
                    .iter()
                    .map(|(_, synced)| Box::pin(synced.member_listed()));
                futures::future::select_all(listing).await;
            }
        }
        state.record(&member, Event::Synced);
        tracing::info!(member = %member, exports = all.objects(), "member synced");
    };
    futures::future::join(member_synced, each_job).await;
}

/// Resolves once every job has listed or fails on its own (its kind not served, see
/// `controller::views`), and at least one has listed the member: nothing is left to wait for.
async fn settled(state: &FleetState, member: &str, jobs: &[(&'static str, Synced)]) {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(status) = state.member(member) else {
            continue;
        };
        let alone = |job: &str| {
            status
                .jobs
                .get(job)
                .is_some_and(|j| j.phase == JobPhase::Failing && !j.member_side)
        };
        let done = jobs
            .iter()
            .all(|(job, synced)| synced.listed_now() || alone(job));
        if done && jobs.iter().any(|(_, synced)| synced.member_listed_now()) {
            return;
        }
    }
}

/// How often a running member's API server is asked whether it answers, and how long it may take.
const PROBE_EVERY: Duration = Duration::from_secs(10);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Shows the member failing while its API server does not answer: a hung or partitioned server
/// leaves the watches silent rather than failing them. Once it answers again the member is
/// Ready, unless something else (a failing watch) reported it failing meanwhile.
async fn probe(state: Arc<FleetState>, member: String, client: kube::Client) {
    let mut ticker = tokio::time::interval(PROBE_EVERY);
    // The error this probe recorded, while it stands.
    let mut recorded: Option<String> = None;
    loop {
        ticker.tick().await;
        // Boxed: the prober waits most of its life, and would otherwise hold room for a request.
        match Box::pin(super::answers(&client, PROBE_TIMEOUT)).await {
            Err(e) => {
                // Also after a reconcile that needed no member request showed it ready.
                let failing = state
                    .member(&member)
                    .is_some_and(|s| s.phase == Phase::Failing);
                if !failing {
                    let error = Error::NotAnswering(e).to_string();
                    tracing::warn!(member = %member, error = %error, "member failing");
                    state.record(&member, Event::Failed(error.clone()));
                    recorded = Some(error);
                }
            }
            Ok(()) => {
                let error = recorded.take();
                if error.is_some_and(|e| state.record(&member, Event::Recovered(Some(e)))) {
                    tracing::info!(member = %member, "API server answers again");
                }
            }
        }
    }
}

/// A member client that could not be built from the kubeconfig of `origin`, told without
/// kube's message past its fixed heads: nothing is sent yet at this point, so every failure is
/// about the kubeconfig, and kube's messages quote it (a base64 symbol, a context name, a PEM
/// line).
fn redacted(origin: &str, e: client::Error) -> Error {
    use super::vet::parse_error::kube_message;
    Error::Unusable(match e {
        client::Error::Config(e) => format!("unusable kubeconfig ({origin}): {}", kube_message(&e)),
        client::Error::Kube { client, source } => format!(
            "unusable kubeconfig ({origin}): client {client}: {}",
            kube_message(&source.to_string())
        ),
        // The limits, or an exec plugin's failure (told without its command, environment or
        // output): nothing of the file.
        e => e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::redacted;
    use crate::client;

    #[test]
    fn kube_errors_of_a_kubeconfig_never_reach_the_member_error() {
        let e = redacted(
            "/k/m.yaml",
            client::Error::Config(
                "failed to load client key: failed to decode base64 data: Invalid symbol 36, offset 12.".into(),
            ),
        )
        .to_string();
        assert_eq!(
            e,
            "unusable kubeconfig (/k/m.yaml): failed to load client key: failed to decode base64 data (details withheld: they may quote the kubeconfig)"
        );
        let e = redacted(
            "/k/m.yaml",
            client::Error::Config("failed to load current context: SECRET-CONTEXT".into()),
        )
        .to_string();
        assert!(
            e.contains("failed to load current context") && !e.contains("SECRET"),
            "{e}"
        );
        let e = redacted(
            "/k/m.yaml",
            client::Error::Kube {
                client: "m".into(),
                source: kube::Error::Service("invalid tls-server-name \"SECRET-SNI\"".into()),
            },
        )
        .to_string();
        assert!(
            e.contains("client m: ServiceError: invalid tls-server-name") && !e.contains("SECRET"),
            "{e}"
        );
    }
}
