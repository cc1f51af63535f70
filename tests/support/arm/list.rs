//! The fake's public-IP LIST: bearer token and api-version checked, pages with an absolute
//! `nextLink`, scripted faults, requests in flight counted.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::*;

struct InFlight<'a>(&'a Inner);

impl<'a> InFlight<'a> {
    fn enter(inner: &'a Inner) -> Self {
        let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(inner)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn public_ip_json(sub: &str, rg: &str, ip: &FakeIp) -> Value {
    let base_id = format!(
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/publicIPAddresses"
    );
    let mut properties = json!({
        "provisioningState": "Succeeded",
        "resourceGuid": "00000000-0000-0000-0000-000000000000",
        "ipAddress": ip.address,
        "publicIPAddressVersion": if ip.address.contains(':') { "IPv6" } else { "IPv4" },
        "publicIPAllocationMethod": "Static",
        "idleTimeoutInMinutes": 4,
        "ipTags": [],
        "ipConfiguration": {
            "id": format!(
                "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/loadBalancers/kubernetes/frontendIPConfigurations/{}",
                ip.name
            )
        }
    });
    if let Some(label) = &ip.dns_label {
        properties["dnsSettings"] = json!({
            "domainNameLabel": label,
            "fqdn": format!("{label}.eastus.cloudapp.azure.com"),
        });
    }
    json!({
        "name": ip.name,
        "id": format!("{base_id}/{}", ip.name),
        "etag": "W/\"00000000-0000-0000-0000-000000000001\"",
        "location": "eastus",
        "tags": {"k8s-azure-service": "default/svc"},
        "zones": ["1", "2", "3"],
        "type": "Microsoft.Network/publicIPAddresses",
        "sku": {"name": "Standard", "tier": "Regional"},
        "properties": properties,
    })
}

pub(super) async fn list(
    State(inner): State<Arc<Inner>>,
    Path((sub, rg)): Path<(String, String)>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let path = FakeArm::list_path(&sub, &rg);
    count(&inner, &path);
    let skip: usize = query
        .get("$skiptoken")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    inner.lists.lock().unwrap().push(SeenList {
        at: Instant::now(),
        subscription: sub.clone(),
        resource_group: rg.clone(),
        first_page: skip == 0,
        bearer: auth.map(str::to_owned),
    });
    let _in_flight = InFlight::enter(&inner);
    let authorized = auth.is_some_and(|t| inner.issued.lock().unwrap().iter().any(|i| i == t));
    if !authorized {
        return arm_error(
            StatusCode::UNAUTHORIZED,
            if auth.is_none() {
                "AuthenticationFailed"
            } else {
                "InvalidAuthenticationToken"
            },
            "Authentication failed. The 'Authorization' header is missing or invalid.",
        );
    }
    if !query.contains_key("api-version") {
        return arm_error(
            StatusCode::BAD_REQUEST,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        );
    }

    let delay = *inner.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let fault = inner.faults.lock().unwrap().pop_front();
    match fault {
        Some(Fault::Throttle { retry_after_secs }) => {
            let mut response = arm_error(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                "The request is being throttled.",
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                retry_after_secs.to_string().parse().unwrap(),
            );
            return response;
        }
        Some(Fault::Status(code)) => {
            return arm_error(
                StatusCode::from_u16(code).unwrap(),
                "InternalServerError",
                "Encountered internal server error.",
            );
        }
        Some(Fault::Malformed) => {
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"value": [{"id": 42, "properties": "#,
            )
                .into_response();
        }
        Some(Fault::Slow(d)) => tokio::time::sleep(d).await,
        Some(Fault::Echo) => {
            return arm_error(
                StatusCode::UNAUTHORIZED,
                "InvalidAuthenticationToken",
                &format!(
                    "The access token is invalid: Bearer {}",
                    auth.unwrap_or_default()
                ),
            );
        }
        None => {}
    }

    let ips = inner
        .groups
        .lock()
        .unwrap()
        .get(&(sub.to_ascii_lowercase(), rg.to_ascii_lowercase()))
        .cloned();
    let Some(ips) = ips else {
        return arm_error(
            StatusCode::NOT_FOUND,
            "ResourceGroupNotFound",
            &format!("Resource group '{rg}' could not be found."),
        );
    };
    let page_size = inner.page_size.load(Ordering::SeqCst);
    let value: Vec<Value> = ips
        .iter()
        .skip(skip)
        .take(page_size)
        .map(|ip| public_ip_json(&sub, &rg, ip))
        .collect();
    let mut body = json!({ "value": value });
    if skip + page_size < ips.len() {
        let base = inner
            .next_link_base
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| inner.base.clone());
        body["nextLink"] = json!(format!(
            "{base}{path}?api-version=2024-03-01&$skiptoken={}",
            skip + page_size
        ));
    }
    Json(body).into_response()
}
