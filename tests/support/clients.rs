//! Clients with fleetnet-hub's counting and limiting stack.

use std::sync::Arc;

use fleetnet_hub::client::{self, ClientStats, Limits};

/// A client for `kubeconfig` with fleetnet-hub's counting stack.
pub async fn counted_client(
    name: &str,
    kubeconfig: &std::path::Path,
    stats: Arc<ClientStats>,
) -> kube::Client {
    limited_client(
        name,
        kubeconfig,
        &Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        },
        stats,
    )
    .await
}

/// A client for `kubeconfig` through a limiter of `limits`.
pub async fn limited_client(
    name: &str,
    kubeconfig: &std::path::Path,
    limits: &Limits,
    stats: Arc<ClientStats>,
) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig valid");
    client::build(name, config, limits, stats).expect("client")
}
