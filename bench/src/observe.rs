use super::*;

// ---------------------------------------------------------------------------------------------
// What the harness sees: Valid ServiceExports per member, ISEs (and their port) on the hub.
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
pub(crate) struct State {
    /// Per member: ServiceExports with `Valid=True`.
    valid: Vec<HashSet<String>>,
    /// Per member: ISE name → its first port.
    ises: Vec<HashMap<String, i32>>,
    valid_total: usize,
    ise_total: usize,
    target: usize,
    converged_at: Option<Instant>,
    /// Watches whose initial list completed.
    listed: usize,
    /// Churn: (member, ISE name) → changes not seen on the hub yet, oldest first.
    pending: HashMap<(usize, String), VecDeque<(i32, Instant)>>,
    latencies: Vec<Duration>,
}

impl State {
    pub(crate) fn check_converged(&mut self) {
        if self.converged_at.is_none()
            && self.valid_total == self.target
            && self.ise_total == self.target
        {
            self.converged_at = Some(Instant::now());
        }
    }

    pub(crate) fn set_valid(&mut self, member: usize, name: String, valid: bool) {
        let set = &mut self.valid[member];
        if valid {
            if set.insert(name) {
                self.valid_total += 1;
            }
        } else if set.remove(&name) {
            self.valid_total -= 1;
        }
        self.check_converged();
    }

    pub(crate) fn set_ise(
        &mut self,
        member: usize,
        name: String,
        port: Option<i32>,
        seen: Instant,
    ) {
        match port {
            Some(port) => {
                if let Some(queue) = self.pending.get_mut(&(member, name.clone()))
                    && let Some(at) = queue.iter().position(|(p, _)| *p == port)
                {
                    // This change, and any earlier one it superseded, are on the hub now.
                    for (_, sent) in queue.drain(..=at) {
                        self.latencies.push(seen.duration_since(sent));
                    }
                }
                if self.ises[member].insert(name, port).is_none() {
                    self.ise_total += 1;
                }
            }
            None => {
                if self.ises[member].remove(&name).is_some() {
                    self.ise_total -= 1;
                }
            }
        }
        self.check_converged();
    }

    /// Whether `member` has `exports` ServiceExports valid and as many ISEs.
    pub(crate) fn member_converged(&self, member: usize, exports: usize) -> bool {
        self.valid[member].len() == exports && self.ises[member].len() == exports
    }

    pub(crate) fn pending_changes(&self) -> usize {
        self.pending.values().map(VecDeque::len).sum()
    }
}

#[derive(Clone)]
pub(crate) struct Observed {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl Observed {
    /// `members` members, converged when `target` ServiceExports are valid and exported.
    pub(crate) fn new(members: usize, target: usize) -> Self {
        let state = State {
            valid: vec![HashSet::new(); members],
            ises: vec![HashMap::new(); members],
            target,
            ..State::default()
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            changed: Arc::new(Notify::new()),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn spawn_watches(
        &self,
        hub: &kube::Client,
        members: &[kube::Client],
        fleet: &fleetnet_testenv::Fleet,
        names: &[String],
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![self.spawn_hub_watch(hub, fleet, names)];
        tasks.extend(self.spawn_export_watches(members));
        tasks
    }

    /// The hub's ISEs of member `names[i]` (its hub namespace), as member `i`'s.
    pub(crate) fn spawn_hub_watch(
        &self,
        hub: &kube::Client,
        fleet: &fleetnet_testenv::Fleet,
        names: &[String],
    ) -> tokio::task::JoinHandle<()> {
        let namespaces: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, m)| (fleet.hub_namespace(m), i))
            .collect();
        let ises: Api<InternalServiceExport> = Api::all(hub.clone());
        let me = self.clone();
        tokio::spawn(async move {
            let mut stream = watcher(ises, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let seen = Instant::now();
                let Ok(event) = event else { continue };
                let mut state = me.lock();
                match event {
                    watcher::Event::Init => {
                        for m in 0..state.ises.len() {
                            let names: Vec<String> = state.ises[m].keys().cloned().collect();
                            for n in names {
                                state.set_ise(m, n, None, seen);
                            }
                        }
                    }
                    watcher::Event::InitApply(ise) | watcher::Event::Apply(ise) => {
                        let ns = ise.metadata.namespace.clone().unwrap_or_default();
                        if let Some(&m) = namespaces.get(&ns) {
                            let port = ise.spec.ports.first().map_or(0, |p| p.port);
                            let name = ise.metadata.name.clone().unwrap_or_default();
                            state.set_ise(m, name, Some(port), seen);
                        }
                    }
                    watcher::Event::Delete(ise) => {
                        let ns = ise.metadata.namespace.clone().unwrap_or_default();
                        if let Some(&m) = namespaces.get(&ns) {
                            let name = ise.metadata.name.clone().unwrap_or_default();
                            state.set_ise(m, name, None, seen);
                        }
                    }
                    watcher::Event::InitDone => state.listed += 1,
                }
                drop(state);
                me.changed.notify_waiters();
            }
        })
    }

    /// Member `i`'s ServiceExports, from `members[i]`.
    fn spawn_export_watches(&self, members: &[kube::Client]) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![];
        for (m, client) in members.iter().enumerate() {
            let exports: Api<ServiceExport> =
                Api::namespaced_with(client.clone(), NAMESPACE, &ServiceExportVersion::V1Beta1);
            let me = self.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = watcher(exports, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else { continue };
                    let mut state = me.lock();
                    match event {
                        watcher::Event::Init => {
                            let names: Vec<String> = state.valid[m].iter().cloned().collect();
                            for n in names {
                                state.set_valid(m, n, false);
                            }
                        }
                        watcher::Event::InitApply(se) | watcher::Event::Apply(se) => {
                            let valid = se
                                .conditions()
                                .iter()
                                .any(|c| c.type_ == CONDITION_VALID && c.status == "True");
                            let name = se.metadata.name.clone().unwrap_or_default();
                            state.set_valid(m, name, valid);
                        }
                        watcher::Event::Delete(se) => {
                            let name = se.metadata.name.clone().unwrap_or_default();
                            state.set_valid(m, name, false);
                        }
                        watcher::Event::InitDone => state.listed += 1,
                    }
                    drop(state);
                    me.changed.notify_waiters();
                }
            }));
        }
        tasks
    }

    /// Waits until `watches` watches have completed their first list.
    pub(crate) async fn wait_listed(&self, watches: usize) {
        loop {
            let notified = self.changed.notified();
            if self.lock().listed >= watches {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    pub(crate) async fn wait_converged(
        &self,
        t0: Instant,
        limit: Duration,
        progress: bool,
    ) -> anyhow::Result<Instant> {
        let mut next_report = Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.changed.notified();
            let (at, valid, ises, target) = {
                let s = self.lock();
                (s.converged_at, s.valid_total, s.ise_total, s.target)
            };
            if let Some(at) = at {
                return Ok(at);
            }
            if t0.elapsed() > limit {
                anyhow::bail!(
                    "not converged within {limit:?}: {valid}/{target} ServiceExports Valid=True, {ises}/{target} ISEs"
                );
            }
            if Instant::now() >= next_report {
                say(
                    progress,
                    format!(
                        "  {:.0?}: {valid}/{target} Valid=True, {ises}/{target} ISEs",
                        t0.elapsed()
                    ),
                );
                next_report += Duration::from_secs(10);
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Churn.
// ---------------------------------------------------------------------------------------------

/// Every (member, Service) once, in the order [`run_churn`] changes them: round-robin over
/// members, then over exports.
pub(crate) fn churn_targets(clients: usize, services: &[String]) -> Vec<(usize, String)> {
    (0..clients * services.len())
        .map(|k| (k % clients, services[k / clients].clone()))
        .collect()
}

/// One churn change: Service `name`'s port set to `port`, awaited under `keys`.
struct PortChange {
    name: String,
    port: i32,
    keys: Vec<(usize, String)>,
}

impl PortChange {
    /// Sends the change; one that fails is counted in `failed` and awaited no more.
    async fn send(
        self,
        services: Api<Service>,
        observed: Observed,
        failed: Arc<std::sync::atomic::AtomicU64>,
    ) {
        let PortChange { name, port, keys } = self;
        let body = serde_json::json!({"spec": {"ports": [
            {"name": "http", "port": port, "protocol": "TCP"}
        ]}});
        if let Err(e) = services
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            tracing::warn!(error = %e, service = %name, "churn patch failed");
            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut state = observed.lock();
            for key in &keys {
                if let Some(queue) = state.pending.get_mut(key) {
                    queue.retain(|(p, _)| *p != port);
                }
            }
        }
    }
}

/// Changes the port of `targets[k % len]`'s Service (`(client, name)`) at `churn.rate` per
/// second for `churn.duration`, or until `stop` says so; then gives the changes 30 s to reach the
/// hub. A change is awaited in the ISE of every member `seen_by(client)` names (one member per
/// client, or every member name an apiserver serves in `--fleet-size`): one latency each.
pub(crate) async fn run_churn(
    observed: &Observed,
    members: &[kube::Client],
    targets: &[(usize, String)],
    churn: Churn,
    seen_by: impl Fn(usize) -> Vec<usize>,
    stop: impl Fn() -> bool,
) -> ChurnReport {
    let total = (churn.rate * churn.duration.as_secs_f64()).round().max(0.0) as u64;
    let period = Duration::from_secs_f64(1.0 / churn.rate.max(1e-3));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = tokio::time::Instant::now();
    let mut patches = vec![];
    let mut changes = 0;
    let mut awaited = 0;
    for k in 0..total {
        tokio::time::sleep_until(started + period.mul_f64(k as f64)).await;
        if stop() {
            break;
        }
        changes += 1;
        let (client, name) = targets[k as usize % targets.len()].clone();
        let port = CHURN_PORT_BASE + (k % 60_000) as i32;
        let ise = fleetnet_hub::export::decide::ise_name(NAMESPACE, &name);
        let keys: Vec<(usize, String)> = seen_by(client)
            .into_iter()
            .map(|m| (m, ise.clone()))
            .collect();
        let sent = Instant::now();
        let mut state = observed.lock();
        for key in &keys {
            state
                .pending
                .entry(key.clone())
                .or_default()
                .push_back((port, sent));
        }
        drop(state);
        awaited += keys.len() as u64;
        let services: Api<Service> = Api::namespaced(members[client].clone(), NAMESPACE);
        let change = PortChange { name, port, keys };
        patches.push(tokio::spawn(change.send(
            services,
            observed.clone(),
            failed.clone(),
        )));
    }
    futures::future::join_all(patches).await;
    // Every change is given 30 s to reach the hub.
    let drain_until = Instant::now() + Duration::from_secs(30);
    while observed.lock().pending_changes() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut state = observed.lock();
    let mut latencies_ms: Vec<f64> = state
        .latencies
        .drain(..)
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    latencies_ms.sort_by(f64::total_cmp);
    state.pending.clear();
    ChurnReport {
        rate: churn.rate,
        duration_s: churn.duration.as_secs_f64(),
        changes,
        reflected: latencies_ms.len() as u64,
        awaited,
        failed: failed.load(std::sync::atomic::Ordering::Relaxed),
        latencies_ms,
        writes: vec![],
        conflicts_409: 0,
    }
}

/// Churn over `servers` (member apiservers) whose Services `services` each is exported by every
/// member name `names_of[server]` lists (indices into `names`): changes round-robin over the
/// servers, then the Services; one latency per change and name, until its hub ISE carries it.
pub async fn churn_over_servers(
    hub: &kube::Client,
    fleet: &fleetnet_testenv::Fleet,
    servers: &[kube::Client],
    names: &[String],
    names_of: &[Vec<usize>],
    services: &[String],
    churn: Churn,
) -> anyhow::Result<ChurnReport> {
    let observed = Observed::new(names.len(), 0);
    let watch = observed.spawn_hub_watch(hub, fleet, names);
    let listed = tokio::time::timeout(Duration::from_secs(60), observed.wait_listed(1)).await;
    if listed.is_err() {
        watch.abort();
        anyhow::bail!("the hub's ISE watch did not list within 60 s");
    }
    let targets = churn_targets(servers.len(), services);
    let report = run_churn(
        &observed,
        servers,
        &targets,
        churn,
        |server| names_of[server].clone(),
        || false,
    )
    .await;
    watch.abort();
    Ok(report)
}
