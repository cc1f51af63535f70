//! The fake's token routes: Entra ID client credentials and IMDS managed identity, each with
//! its scripted faults.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::*;

/// The next scripted token fault: `Some(answer)` to send instead of a token. A `Slow` fault
/// sleeps here and lets the request be answered normally.
async fn token_fault(inner: &Inner, form: &HashMap<String, String>) -> Option<Response> {
    let fault = inner.token_faults.lock().unwrap().pop_front()?;
    match fault {
        Fault::Throttle { retry_after_secs } => {
            let mut response = (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({"error": "temporarily_unavailable", "error_description": "throttled"})),
            )
                .into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                retry_after_secs.to_string().parse().unwrap(),
            );
            Some(response)
        }
        Fault::Status(code) => Some(
            (
                StatusCode::from_u16(code).unwrap(),
                Json(json!({"error": "server_error", "error_description": "try again"})),
            )
                .into_response(),
        ),
        Fault::Malformed => Some(
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"access_token": "#,
            )
                .into_response(),
        ),
        Fault::Slow(d) => {
            tokio::time::sleep(d).await;
            None
        }
        Fault::Echo => {
            let echoed: Vec<String> = form.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let echoed = echoed.join("&");
            Some(
                (
                    StatusCode::UNAUTHORIZED,
                    Json(json!({
                        "error": "invalid_client",
                        "error_description": format!("rejected request {echoed}"),
                        "request": form,
                    })),
                )
                    .into_response(),
            )
        }
    }
}

fn issue(inner: &Inner) -> Response {
    let n = inner.token_counter.fetch_add(1, Ordering::SeqCst);
    let token = format!("fake-access-token-{n}");
    if !inner.reject_tokens.load(Ordering::SeqCst) {
        inner.issued.lock().unwrap().push(token.clone());
    }
    let lifetime = inner.token_lifetime_secs.load(Ordering::SeqCst);
    Json(json!({
        "token_type": "Bearer",
        "expires_in": lifetime,
        "ext_expires_in": lifetime,
        "access_token": token,
    }))
    .into_response()
}

pub(super) async fn token(
    State(inner): State<Arc<Inner>>,
    Path(tenant): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    count(&inner, &format!("/{tenant}/oauth2/v2.0/token"));
    inner.token_requests.fetch_add(1, Ordering::SeqCst);
    inner.token_forms.lock().unwrap().push(form.clone());
    if let Some(fault) = token_fault(&inner, &form).await {
        return fault;
    }
    let bad = |description: &str| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_client", "error_description": description})),
        )
            .into_response()
    };
    if tenant != TENANT {
        return bad("unknown tenant");
    }
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return bad("grant_type must be client_credentials");
    }
    if form.get("client_id").map(String::as_str) != Some(CLIENT_ID) {
        return bad("unknown client_id");
    }
    let secret_ok = form.get("client_secret").map(String::as_str) == Some(CLIENT_SECRET);
    let assertion_ok = form.get("client_assertion_type").map(String::as_str)
        == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        && form.get("client_assertion").is_some_and(|a| !a.is_empty());
    if !(secret_ok || assertion_ok) {
        return bad("no valid client secret or assertion");
    }
    if !form.get("scope").is_some_and(|s| s.ends_with("/.default")) {
        return bad("scope must be <resource>/.default");
    }
    issue(&inner)
}

pub(super) async fn imds(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    count(&inner, "/metadata/identity/oauth2/token");
    inner.token_requests.fetch_add(1, Ordering::SeqCst);
    inner.imds_queries.lock().unwrap().push(query.clone());
    if let Some(fault) = token_fault(&inner, &query).await {
        return fault;
    }
    if headers.get("metadata").and_then(|v| v.to_str().ok()) != Some("true") {
        return (
            StatusCode::BAD_REQUEST,
            "Required metadata header not specified",
        )
            .into_response();
    }
    if !query.contains_key("resource") || !query.contains_key("api-version") {
        return (StatusCode::BAD_REQUEST, "resource and api-version required").into_response();
    }
    let n = inner.token_counter.fetch_add(1, Ordering::SeqCst);
    let token = format!("fake-imds-token-{n}");
    inner.issued.lock().unwrap().push(token.clone());
    let lifetime = inner.token_lifetime_secs.load(Ordering::SeqCst);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // IMDS really does send these numbers as strings.
    Json(json!({
        "access_token": token,
        "client_id": query.get("client_id").cloned().unwrap_or_default(),
        "expires_in": lifetime.to_string(),
        "expires_on": (now + lifetime).to_string(),
        "ext_expires_in": lifetime.to_string(),
        "not_before": now.to_string(),
        "resource": query.get("resource").cloned().unwrap_or_default(),
        "token_type": "Bearer",
    }))
    .into_response()
}
