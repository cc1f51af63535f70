//! HTTP endpoints: `/healthz`, `/readyz` and `/members` on the health port; `/metrics` on the
//! metrics port.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::fleet::{FleetState, Phase};

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

/// Binds `addr` and serves the health endpoints until `shutdown`. Returns the bound address.
pub async fn serve_health(
    addr: &str,
    state: Arc<FleetState>,
    shutdown: CancellationToken,
) -> Result<SocketAddr, BindError> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/members", get(members))
        .with_state(state);
    serve(addr, "health probes", app, shutdown).await
}

/// Binds `addr` and serves `/metrics` until `shutdown`. Returns the bound address.
pub async fn serve_metrics(
    addr: &str,
    render: RenderMetrics,
    shutdown: CancellationToken,
) -> Result<SocketAddr, BindError> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move {
                let content_type = crate::metrics::OPENMETRICS_CONTENT_TYPE;
                ([(header::CONTENT_TYPE, content_type)], render())
            }
        }),
    );
    serve(addr, "metrics", app, shutdown).await
}

async fn serve(
    addr: &str,
    what: &'static str,
    app: Router,
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
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "{what} server failed");
        }
    });
    tracing::info!(address = %local, "serving {what}");
    Ok(local)
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

async fn members(State(state): State<Arc<FleetState>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "hubReachable": state.hub_reachable(),
        "ready": state.ready(),
        "members": state.members(),
        "owners": state.owners(),
        "pendingCleanups": state.cleanups(),
    }))
}
