//! Writes counted server-side, from each apiserver's own `apiserver_request_total`.

use super::*;

// ---------------------------------------------------------------------------------------------
// Server-side write counts.
// ---------------------------------------------------------------------------------------------

/// Writes per (resource, verb, response code) as one apiserver counted them.
pub(super) type Writes = BTreeMap<(String, String, String), u64>;

/// The labels and value of one `apiserver_request_total` sample.
pub(super) fn request_sample(line: &str) -> Option<(BTreeMap<&str, &str>, f64)> {
    let rest = line.strip_prefix("apiserver_request_total{")?;
    let (labels, value) = rest.rsplit_once("} ")?;
    let mut map = BTreeMap::new();
    for pair in labels.split("\",") {
        let (k, v) = pair.split_once("=\"")?;
        map.insert(k, v.trim_end_matches('"'));
    }
    Some((map, value.trim().parse().ok()?))
}

pub(super) async fn apiserver_metrics(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    client.request_text(req).await.expect("apiserver /metrics")
}

pub(super) async fn apiserver_writes(client: &kube::Client) -> Writes {
    let text = apiserver_metrics(client).await;
    let mut writes = Writes::new();
    for (labels, value) in text.lines().filter_map(request_sample) {
        let (Some(resource), Some(verb)) = (labels.get("resource"), labels.get("verb")) else {
            continue;
        };
        if COUNTED_RESOURCES.contains(resource) && WRITE_VERBS.contains(verb) {
            let code = labels.get("code").copied().unwrap_or_default();
            *writes
                .entry((resource.to_string(), verb.to_string(), code.to_string()))
                .or_default() += value as u64;
        }
    }
    writes
}

/// The distinct `verb` labels of `apiserver_request_total`, to check the spellings.
pub(super) async fn apiserver_verbs(client: &kube::Client) -> BTreeSet<String> {
    apiserver_metrics(client)
        .await
        .lines()
        .filter_map(request_sample)
        .filter_map(|(labels, _)| labels.get("verb").map(|v| v.to_string()))
        .collect()
}

/// The clusters whose writes a test counts: the hub and every member, by name.
pub(super) struct Counted {
    pub(super) clusters: Vec<(String, kube::Client)>,
}

impl Counted {
    pub(super) async fn new(fleet: &Fleet) -> Self {
        let mut clusters = vec![(
            "hub".to_string(),
            fleet.hub().client().await.expect("hub client"),
        )];
        for m in fleet.members() {
            clusters.push((m.name().to_string(), m.client().await.expect("client")));
        }
        Self { clusters }
    }

    pub(super) async fn snapshot(&self) -> BTreeMap<String, Writes> {
        let mut all = BTreeMap::new();
        for (name, client) in &self.clusters {
            all.insert(name.clone(), apiserver_writes(client).await);
        }
        all
    }

    /// Waits until no counted write happens for `quiet`; returns the counts then.
    pub(super) async fn settled(&self, quiet: Duration) -> BTreeMap<String, Writes> {
        let (every, within) = (Duration::from_millis(500), Duration::from_secs(90));
        until_unchanged(every, quiet, within, || self.snapshot()).await
    }
}

/// Per cluster: (writes to ServiceExports and ISEs, Events written) between two snapshots,
/// with the detail of what changed. Failed attempts (409, 404, …) count: they are writes sent.
pub(super) fn delta(
    before: &BTreeMap<String, Writes>,
    after: &BTreeMap<String, Writes>,
) -> BTreeMap<String, (u64, u64, Vec<String>)> {
    let mut out = BTreeMap::new();
    for (cluster, now) in after {
        let empty = Writes::new();
        let was = before.get(cluster).unwrap_or(&empty);
        let (mut writes, mut events, mut detail) = (0, 0, vec![]);
        for (key, n) in now {
            let d = n.saturating_sub(was.get(key).copied().unwrap_or(0));
            if d == 0 {
                continue;
            }
            let (resource, verb, code) = key;
            detail.push(format!("{verb} {resource} ({code}) +{d}"));
            if resource == "events" {
                events += d;
            } else {
                writes += d;
            }
        }
        out.insert(cluster.clone(), (writes, events, detail));
    }
    out
}

/// Requests of `verb` on `resource`, whatever their answer.
pub(super) fn total(writes: &Writes, resource: &str, verb: &str) -> u64 {
    writes
        .iter()
        .filter(|((r, v, _), _)| r == resource && v == verb)
        .map(|(_, n)| n)
        .sum()
}
