use super::*;

// ---------------------------------------------------------------------------------------------
// Server-side counts: `apiserver_request_total` of every apiserver.
// ---------------------------------------------------------------------------------------------

/// `apiserver_request_total` of the counted resources (or of every resource, see
/// [`ServerCounts::every_resource`]), summed over every apiserver:
/// (resource[/subresource], verb, code) → requests.
#[derive(Debug, Clone, Default)]
pub struct ServerCounts {
    pub requests: BTreeMap<(String, String, String), u64>,
    /// Every `verb` label value seen (any resource).
    pub verbs: BTreeSet<String>,
    /// Keep every resource, not only [`COUNTED_RESOURCES`]; a non-resource request (`/metrics`,
    /// `/readyz`, …) is keyed by its path.
    pub all_resources: bool,
}

impl ServerCounts {
    /// Counts that keep every resource (leases, namespaces, …) and non-resource paths.
    pub fn every_resource() -> Self {
        Self {
            all_resources: true,
            ..Self::default()
        }
    }

    /// Parses one apiserver's `/metrics` text and adds it.
    pub fn add_metrics_text(&mut self, text: &str) {
        for line in text.lines() {
            let Some((labels, value)) = parse_sample(line, "apiserver_request_total") else {
                continue;
            };
            let get = |k: &str| {
                labels
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map_or("", |(_, v)| v.as_str())
            };
            let (resource, verb) = (get("resource"), get("verb"));
            if !verb.is_empty() {
                self.verbs.insert(verb.to_string());
            }
            if !self.all_resources && !COUNTED_RESOURCES.contains(&resource) {
                continue;
            }
            let resource = match (resource, get("subresource")) {
                (resource, "") => resource.to_string(),
                // A non-resource URL: its path is the subresource label.
                ("", path) => path.to_string(),
                (resource, sub) => format!("{resource}/{sub}"),
            };
            *self
                .requests
                .entry((resource, verb.to_string(), get("code").to_string()))
                .or_default() += value as u64;
        }
    }

    /// (resource, verb) → (requests, of which 409) since `before`, for the verbs `keep` takes.
    fn since(
        &self,
        before: &Self,
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<(String, String), (u64, u64)> {
        let mut out: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for ((resource, verb, code), n) in &self.requests {
            if !keep(verb) {
                continue;
            }
            let was = before
                .requests
                .get(&(resource.clone(), verb.clone(), code.clone()))
                .copied()
                .unwrap_or(0);
            let d = n.saturating_sub(was);
            if d > 0 {
                let entry = out.entry((resource.clone(), verb.clone())).or_default();
                entry.0 += d;
                if code == "409" {
                    entry.1 += d;
                }
            }
        }
        out
    }

    /// Writes (any response code) since `before`, by resource and verb.
    pub fn writes_since(&self, before: &Self) -> Vec<WriteCount> {
        self.counted_since(before, |verb| WRITE_VERBS.contains(&verb))
    }

    /// Requests (any verb, any response code) since `before`, by resource and verb.
    pub fn requests_since(&self, before: &Self) -> Vec<WriteCount> {
        self.counted_since(before, |_| true)
    }

    fn counted_since(&self, before: &Self, verbs: impl Fn(&str) -> bool) -> Vec<WriteCount> {
        self.since(before, verbs)
            .into_iter()
            .map(|((resource, verb), (count, conflicts))| WriteCount {
                resource,
                verb,
                count,
                conflicts,
            })
            .collect()
    }

    /// 409 responses since `before` (any verb).
    pub fn conflicts_since(&self, before: &Self) -> u64 {
        self.since(before, |_| true).values().map(|(_, c)| c).sum()
    }
}

/// Every apiserver's `/metrics`, read one line at a time (streamed rather than read whole with
/// `request_text`: an apiserver's metrics are megabytes, which would sit in this process's RSS).
pub(crate) async fn scrape(
    clients: &[kube::Client],
    cpu: &mut f64,
) -> anyhow::Result<ServerCounts> {
    let c = cpu_seconds();
    let mut counts = ServerCounts::default();
    scrape_into(clients, &mut counts).await?;
    *cpu += cpu_seconds() - c;
    Ok(counts)
}

/// Every request the apiservers of `clients` have counted so far, any resource (see
/// [`ServerCounts::every_resource`]), summed; streamed as [`scrape`] does.
pub async fn scrape_every_resource(clients: &[kube::Client]) -> anyhow::Result<ServerCounts> {
    let mut counts = ServerCounts::every_resource();
    scrape_into(clients, &mut counts).await?;
    Ok(counts)
}

async fn scrape_into(clients: &[kube::Client], counts: &mut ServerCounts) -> anyhow::Result<()> {
    use futures::{AsyncBufReadExt, TryStreamExt};
    for client in clients {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let mut lines = client
            .request_stream(req)
            .await
            .context("GET /metrics of an apiserver")?
            .lines();
        while let Some(line) = lines
            .try_next()
            .await
            .context("reading /metrics of an apiserver")?
        {
            if line.starts_with("apiserver_request_total{") {
                counts.add_metrics_text(&line);
            }
        }
    }
    Ok(())
}

/// One Prometheus text sample of `name`: its labels (unescaped) and value.
pub fn parse_sample<'a>(line: &'a str, name: &str) -> Option<(Vec<(&'a str, String)>, f64)> {
    let rest = line.strip_prefix(name)?.strip_prefix('{')?;
    let mut labels = vec![];
    let mut i = 0;
    loop {
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix('}') {
            let value = after.split_whitespace().next()?.parse().ok()?;
            return Some((labels, value));
        }
        let eq = tail.find("=\"")?;
        let key = tail[..eq].trim_start_matches(',').trim();
        let mut value = String::new();
        let mut chars = tail[eq + 2..].char_indices();
        let end = loop {
            let (k, c) = chars.next()?;
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    value.push(if e == 'n' { '\n' } else { e });
                }
                '"' => break eq + 2 + k + 1,
                c => value.push(c),
            }
        };
        labels.push((key, value));
        i += end;
    }
}

/// See [`Report::ideal_bound_s`].
pub fn ideal_bound(config: &Config) -> Duration {
    let (n, m) = (config.members as u64, config.exports as u64);
    let lists = HUB_LISTS_PER_REPLICA;
    let member = &config.member_limits;
    Duration::from_secs_f64(
        bucket_time(2 * m + 4, member.qps, member.burst).max(bucket_time(
            n * m + lists,
            config.hub_limits.qps,
            config.hub_limits.burst,
        )),
    )
}

/// The hub LISTs a replica makes at start, whatever its number of members: one per hub kind its
/// jobs read (ISEs, EndpointSliceExports, InternalServiceImports, EndpointSliceImports,
/// InternalMemberClusters; every job runs by default), each the replica's one watch of the kind
/// for all its members (`src/controller/hub_tap.rs`), not one per member.
pub const HUB_LISTS_PER_REPLICA: u64 = 5;

/// The least time a token bucket of `qps` and `burst` needs to let `requests` through.
pub(crate) fn bucket_time(requests: u64, qps: f64, burst: u32) -> f64 {
    requests.saturating_sub(u64::from(burst)) as f64 / qps
}

/// The controller's requests by client, verb, resource and code, summed over members.
pub(crate) fn client_requests(controller_metrics: &str) -> Vec<ClientRequests> {
    let mut sum: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    for line in controller_metrics.lines() {
        let Some((labels, value)) = parse_sample(line, "fleetnet_api_requests_total") else {
            continue;
        };
        let get = |k: &str| {
            labels
                .iter()
                .find(|(key, _)| *key == k)
                .map_or(String::new(), |(_, v)| v.clone())
        };
        *sum.entry((get("client"), get("verb"), get("resource"), get("code")))
            .or_default() += value as u64;
    }
    sum.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|((client, verb, resource, code), count)| ClientRequests {
            client,
            verb,
            resource,
            code,
            count,
        })
        .collect()
}

/// The least time the token buckets allow for the requests (watches excluded) the controller's
/// clients made so far: `max((requests - burst) / qps)` over the hub bucket and each member's
/// (Events excluded: they have their own bucket and no export waits for them).
/// Returns (bound, binding bucket, hub requests, busiest member's requests).
pub(crate) fn budget_bound(
    controller_metrics: &str,
    config: &Config,
) -> (Duration, String, u64, u64) {
    let mut hub = 0u64;
    // Per member: (requests through its bucket, Events through its Events bucket).
    let mut members: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in controller_metrics.lines() {
        let Some((labels, value)) = parse_sample(line, "fleetnet_api_requests_total") else {
            continue;
        };
        let get = |k: &str| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| v);
        if get("verb").is_some_and(|v| v == "watch") {
            continue;
        }
        let events = get("resource").is_some_and(|r| r == "events");
        match (get("client").map(String::as_str), get("member")) {
            (Some("hub"), None) => hub += value as u64,
            (Some("member"), Some(m)) => {
                let entry = members.entry(m.clone()).or_default();
                if events {
                    entry.1 += value as u64;
                } else {
                    entry.0 += value as u64;
                }
            }
            _ => {}
        }
    }
    let limits = &config.member_limits;
    let mut best = (
        bucket_time(hub, config.hub_limits.qps, config.hub_limits.burst),
        "hub".to_string(),
    );
    let mut member_max = 0;
    for (m, (requests, events)) in &members {
        member_max = member_max.max(requests + events);
        let t = bucket_time(*requests, limits.qps, limits.burst);
        if t > best.0 {
            best = (t, format!("member {m}"));
        }
    }
    (Duration::from_secs_f64(best.0), best.1, hub, member_max)
}
