//! Polling until something holds, or failing the test with what was awaited.

use std::future::Future;
use std::time::{Duration, Instant};

use fleetnet_hub::api::{InternalServiceExport, ServiceExport};
use kube::api::Api;

use super::*;

/// How long a test waits for convergence before failing.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// Polls `probe` until it returns `Some`, or panics after `CONVERGE` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(CONVERGE, what, probe).await
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after `limit` with `what`.
pub async fn within<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the export's condition `type_` has `status` and `reason`; returns the export.
pub async fn wait_condition(
    client: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> ServiceExport {
    let api = exports(client, ns);
    eventually(&format!("{ns}/{name} {type_}={status} ({reason})"), || {
        let api = api.clone();
        async move {
            let se = api.get_opt(name).await.ok().flatten()?;
            let (s, r, _) = condition(&se, type_)?;
            (s == status && r == reason).then_some(se)
        }
    })
    .await
}

/// Waits for the ISE `name` in `ns` to satisfy `pred`.
pub async fn wait_ise(
    hub: &kube::Client,
    ns: &str,
    name: &str,
    pred: impl Fn(&InternalServiceExport) -> bool,
) -> InternalServiceExport {
    let api = ises(hub, ns);
    let pred = &pred;
    eventually(&format!("ISE {ns}/{name}"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok().flatten().filter(|i| pred(i)) }
    })
    .await
}

/// Exports the Service shop/cart of `member` (namespace `shop` made already) and waits for its
/// ISE in the hub namespace `hub_ns` and its `Valid` condition.
pub async fn export_cart_and_wait(member: &kube::Client, hub: &kube::Client, hub_ns: &str) {
    create_service(member, &service("shop", "cart", 80)).await;
    create_export(member, "shop", "cart", &[]).await;
    wait_ise(hub, hub_ns, "shop-cart", |_| true).await;
    wait_condition(member, "shop", "cart", "Valid", "True", "ServiceIsValid").await;
}

/// Waits until the ISE `name` is gone from `ns`.
pub async fn wait_ise_gone(hub: &kube::Client, ns: &str, name: &str) {
    wait_gone(&ises(hub, ns), name).await;
}

/// Waits until `api` answers that `name` does not exist.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(
        &format!("{}/{name} deleted", api.resource_url()),
        || async {
            api.get_opt(name)
                .await
                .ok()
                .and_then(|o| o.is_none().then_some(()))
        },
    )
    .await
}

/// Polls `probe` every `every` until its answer has not changed for `quiet`, and returns it;
/// fails the test if that takes longer than `within`.
pub async fn until_unchanged<T, F, Fut>(
    every: Duration,
    quiet: Duration,
    within: Duration,
    probe: F,
) -> T
where
    T: PartialEq,
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + within;
    let mut last = probe().await;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let now = probe().await;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return now;
        }
        assert!(Instant::now() < deadline, "never settled within {within:?}");
    }
}

/// Waits until `writes()` stops changing for `quiet`, and returns it.
pub async fn settled_writes(exporter: &RunningExporter, quiet: Duration) -> u64 {
    let every = Duration::from_millis(100);
    until_unchanged(every, quiet, CONVERGE, || async { exporter.writes() }).await
}

/// The value `count` gives once it has not moved for `quiet` (sampled every 250 ms, within
/// 60 s): counted writes that have settled.
pub async fn settled_count<F, Fut>(what: &str, quiet: Duration, mut count: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = f64>,
{
    let mut last = count().await;
    let mut since = Instant::now();
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = count().await;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what} never settled"
        );
    }
}
