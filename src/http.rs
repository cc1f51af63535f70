//! HTTP endpoints: `/healthz`, `/readyz` and `/members` on the health port; `/metrics` on the
//! metrics port.
//!
//! Both ports are reachable by whoever can reach the pod, so neither may be held by a client:
//! every connection gets a header deadline, an idle deadline and a per-request deadline, and a
//! listener serves at most [`ServerLimits::max_connections`] connections at once (the rest wait
//! in the kernel's listen backlog, served in arrival order as slots free up). `/members` names
//! every member and its last error, so it is answered only to loopback peers (`kubectl
//! port-forward` and `kubectl exec` arrive from 127.0.0.1 inside the pod) unless the operator
//! opts out with [`HttpOptions::members_allow_remote`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::fleet::{FleetState, Phase};

mod connection;

use connection::accept_loop;
pub use connection::{Activity, Peer, ServerLimits, Verdict, serve_connection, verdict};

/// Renders the Prometheus text exposition.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Binding failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for {what}: {source}")]
pub struct BindError {
    pub addr: String,
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// How the health and metrics servers are run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpOptions {
    /// Per-listener connection and time limits.
    pub limits: ServerLimits,
    /// Answer `/members` to any peer, not only to loopback ones (`--members-allow-remote`, off
    /// by default): for operators who put their own authentication in front of the health port.
    pub members_allow_remote: bool,
}

/// Binds `addr` and serves the health endpoints until `shutdown`. Returns the bound address.
pub async fn serve_health(
    addr: &str,
    state: Arc<FleetState>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<SocketAddr, BindError> {
    let app = health_router(state, options.members_allow_remote);
    serve(addr, "health probes", app, options.limits, shutdown).await
}

/// The health endpoints: `/healthz`, `/readyz` (anyone: the kubelet probes from the node's
/// address) and `/members` (loopback peers only, unless `members_allow_remote`).
pub fn health_router(state: Arc<FleetState>, members_allow_remote: bool) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route(
            "/members",
            get(move |state, peer| members(state, peer, members_allow_remote)),
        )
        .with_state(state)
}

/// Binds `addr` and serves `/metrics` until `shutdown`, under the default [`ServerLimits`].
/// Returns the bound address.
pub async fn serve_metrics(
    addr: &str,
    render: RenderMetrics,
    shutdown: CancellationToken,
) -> Result<SocketAddr, BindError> {
    serve_metrics_with(addr, render, ServerLimits::default(), shutdown).await
}

/// [`serve_metrics`] under `limits`.
pub async fn serve_metrics_with(
    addr: &str,
    render: RenderMetrics,
    limits: ServerLimits,
    shutdown: CancellationToken,
) -> Result<SocketAddr, BindError> {
    serve(addr, "metrics", metrics_router(render), limits, shutdown).await
}

/// `/metrics`: the OpenMetrics text of `render`.
pub fn metrics_router(render: RenderMetrics) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move {
                let content_type = crate::metrics::OPENMETRICS_CONTENT_TYPE;
                ([(header::CONTENT_TYPE, content_type)], render())
            }
        }),
    )
}

async fn serve(
    addr: &str,
    what: &'static str,
    app: Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) -> Result<SocketAddr, BindError> {
    let bind_err = |source| BindError {
        addr: addr.to_string(),
        what,
        source,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    tokio::spawn(accept_loop(listener, what, app, limits, shutdown));
    tracing::info!(address = %local, "serving {what}");
    Ok(local)
}

/// Whether a peer is on this host's loopback (IPv4-mapped IPv6 included, for a listener bound
/// to `[::]`).
pub fn is_loopback_peer(peer: &SocketAddr) -> bool {
    peer.ip().to_canonical().is_loopback()
}

/// Live while the fleet runtime runs: a runtime task that died (or never started) fails the
/// probe, so the pod is restarted instead of serving stale health.
async fn healthz(State(state): State<Arc<FleetState>>) -> Response {
    if state.runtime_alive() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "fleet runtime not running").into_response()
    }
}

async fn readyz(State(state): State<Arc<FleetState>>) -> Response {
    if state.ready() {
        return (StatusCode::OK, "ok").into_response();
    }
    let mut reasons = vec![];
    if !state.hub_reachable() {
        reasons.push("hub not reachable".to_string());
    }
    for (name, m) in state.members() {
        if m.phase != Phase::Failing && m.last_sync.is_none() {
            reasons.push(format!("member {name} {}", m.phase.as_str()));
        }
    }
    (StatusCode::SERVICE_UNAVAILABLE, reasons.join("\n")).into_response()
}

/// The text a refused `/members` request gets: where to read it from instead.
pub const MEMBERS_LOOPBACK_ONLY: &str = "/members is answered to loopback clients only: \
     kubectl -n <namespace> port-forward pod/<pod> 8081, then curl http://127.0.0.1:8081/members \
     (or --members-allow-remote behind your own authentication)\n";

async fn members(
    State(state): State<Arc<FleetState>>,
    peer: Option<Extension<Peer>>,
    allow_remote: bool,
) -> Response {
    // No peer recorded (a router served some other way) counts as remote.
    let local = peer.is_some_and(|Extension(Peer(addr))| is_loopback_peer(&addr));
    if !local && !allow_remote {
        return (StatusCode::FORBIDDEN, MEMBERS_LOOPBACK_ONLY).into_response();
    }
    Json(serde_json::json!({
        "hubReachable": state.hub_reachable(),
        "ready": state.ready(),
        "members": state.members(),
        "owners": state.owners(),
        "pendingCleanups": state.cleanups(),
    }))
    .into_response()
}

#[cfg(test)]
mod tests;
