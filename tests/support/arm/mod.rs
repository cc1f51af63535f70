//! A fake Azure Resource Manager + Entra ID token endpoint + IMDS on 127.0.0.1, speaking the
//! real JSON shapes, with scriptable faults and per-path request counting.
//!
//! - `POST /{tenant}/oauth2/v2.0/token` — client credentials (secret or federated assertion).
//! - `GET /metadata/identity/oauth2/token` — managed identity (needs `Metadata: true`).
//!
//! Both token routes take their own scripted faults ([`FakeArm::push_token_faults`]); tokens
//! minted elsewhere (e.g. by a fake `az`) are accepted after [`FakeArm::accept_token`].
//! - `GET /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/publicIPAddresses`
//!   — needs `Authorization: Bearer <issued token>` and `api-version`; pages of `page_size`
//!   with an absolute `nextLink`.

mod list;
mod tokens;

use list::list;
use tokens::{imds, token};

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

pub const TENANT: &str = "tenant-1";
pub const CLIENT_ID: &str = "client-1";
pub const CLIENT_SECRET: &str = "s3cret-value";

/// One scripted misbehaviour, consumed by the next public IP LIST request (any group), or by
/// the next token request for the token queue.
#[derive(Debug, Clone)]
pub enum Fault {
    /// 429 with `Retry-After: secs`.
    Throttle { retry_after_secs: u64 },
    /// This 5xx status with an ARM error body.
    Status(u16),
    /// 200 with a body that is not the ARM shape.
    Malformed,
    /// Sleep this long, then answer normally.
    Slow(Duration),
    /// 401 echoing the request's credentials (the token route: its whole form, client secret
    /// included; ARM: the bearer token), as a careless proxy or endpoint might.
    Echo,
}

#[derive(Debug, Clone)]
pub struct FakeIp {
    pub name: String,
    pub address: String,
    pub dns_label: Option<String>,
}

impl FakeIp {
    pub fn new(name: &str, address: &str) -> Self {
        Self {
            name: name.to_owned(),
            address: address.to_owned(),
            dns_label: None,
        }
    }

    pub fn with_label(mut self, label: &str) -> Self {
        self.dns_label = Some(label.to_owned());
        self
    }
}

/// What one LIST request looked like, as the server saw it.
#[derive(Debug, Clone)]
pub struct SeenList {
    pub at: Instant,
    pub subscription: String,
    pub resource_group: String,
    pub first_page: bool,
    /// The `Authorization: Bearer` token sent, if any.
    pub bearer: Option<String>,
}

#[derive(Default)]
struct Inner {
    base: String,
    groups: Mutex<HashMap<(String, String), Vec<FakeIp>>>,
    page_size: AtomicUsize,
    faults: Mutex<VecDeque<Fault>>,
    token_faults: Mutex<VecDeque<Fault>>,
    delay: Mutex<Duration>,
    next_link_base: Mutex<Option<String>>,
    path_counts: Mutex<HashMap<String, u64>>,
    lists: Mutex<Vec<SeenList>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    issued: Mutex<Vec<String>>,
    token_requests: AtomicU64,
    token_lifetime_secs: AtomicU64,
    reject_tokens: AtomicBool,
    token_forms: Mutex<Vec<HashMap<String, String>>>,
    imds_queries: Mutex<Vec<HashMap<String, String>>>,
    token_counter: AtomicU64,
}

/// Handle to a running fake. Dropping it stops the server.
pub struct FakeArm {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeArm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The product's Azure configuration pointed at `arm`: the client secret credential the fake
/// accepts, quick retries, a generous budget. Tests override what they exercise.
pub fn client_secret_config(arm: &FakeArm) -> fleetnet_hub::azure::AzureConfig {
    fleetnet_hub::azure::AzureConfig {
        arm_endpoint: arm.base().to_owned(),
        authority_host: arm.base().to_owned(),
        credential: fleetnet_hub::azure::CredentialKind::ClientSecret,
        tenant_id: Some(TENANT.into()),
        client_id: Some(CLIENT_ID.into()),
        client_secret: Some(CLIENT_SECRET.into()),
        arm_qps: 1000.0,
        arm_burst: 1000,
        max_concurrency: 16,
        cache_ttl: Duration::from_secs(10),
        miss_refresh_interval: Duration::from_secs(1),
        request_timeout: Duration::from_secs(5),
        max_retries: 3,
        retry_base_delay: Duration::from_millis(20),
        max_retry_wait: Duration::from_secs(3),
        ..fleetnet_hub::azure::AzureConfig::default()
    }
}

fn arm_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

impl FakeArm {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let inner = Arc::new(Inner {
            base: format!("http://{addr}"),
            page_size: AtomicUsize::new(100),
            token_lifetime_secs: AtomicU64::new(3599),
            ..Inner::default()
        });
        let app = Router::new()
            .route("/{tenant}/oauth2/v2.0/token", post(token))
            .route("/metadata/identity/oauth2/token", get(imds))
            .route(
                "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/publicIPAddresses",
                get(list),
            )
            .with_state(Arc::clone(&inner));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, task }
    }

    /// `http://127.0.0.1:PORT` (serves as ARM endpoint, authority host and IMDS host).
    pub fn base(&self) -> &str {
        &self.inner.base
    }

    pub fn imds_endpoint(&self) -> String {
        format!("{}/metadata/identity/oauth2/token", self.inner.base)
    }

    pub fn list_path(subscription: &str, resource_group: &str) -> String {
        format!(
            "/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Network/publicIPAddresses"
        )
    }

    pub fn set_ips(&self, subscription: &str, resource_group: &str, ips: Vec<FakeIp>) {
        self.inner.groups.lock().unwrap().insert(
            (
                subscription.to_ascii_lowercase(),
                resource_group.to_ascii_lowercase(),
            ),
            ips,
        );
    }

    pub fn add_ip(&self, subscription: &str, resource_group: &str, ip: FakeIp) {
        self.inner
            .groups
            .lock()
            .unwrap()
            .entry((
                subscription.to_ascii_lowercase(),
                resource_group.to_ascii_lowercase(),
            ))
            .or_default()
            .push(ip);
    }

    pub fn set_page_size(&self, n: usize) {
        self.inner.page_size.store(n.max(1), Ordering::SeqCst);
    }

    /// Every LIST request sleeps this long before answering.
    pub fn set_delay(&self, d: Duration) {
        *self.inner.delay.lock().unwrap() = d;
    }

    pub fn push_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        self.inner.faults.lock().unwrap().extend(faults);
    }

    /// Faults for the next token requests (either token route), one per request.
    pub fn push_token_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        self.inner.token_faults.lock().unwrap().extend(faults);
    }

    /// ARM accepts `token` as if this server had issued it.
    pub fn accept_token(&self, token: &str) {
        self.inner.issued.lock().unwrap().push(token.to_owned());
    }

    /// `nextLink`s point at this base instead of the server's own.
    pub fn set_next_link_base(&self, base: &str) {
        *self.inner.next_link_base.lock().unwrap() = Some(base.to_owned());
    }

    /// Tokens issued from now on are not accepted by the ARM routes (→ 401).
    pub fn reject_tokens(&self, reject: bool) {
        self.inner.reject_tokens.store(reject, Ordering::SeqCst);
    }

    pub fn set_token_lifetime(&self, secs: u64) {
        self.inner.token_lifetime_secs.store(secs, Ordering::SeqCst);
    }

    /// HTTP requests (all pages, all retries) seen on `path`.
    pub fn requests(&self, path: &str) -> u64 {
        self.inner
            .path_counts
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// All requests on the public IP LIST route, in arrival order.
    pub fn lists(&self) -> Vec<SeenList> {
        self.inner.lists.lock().unwrap().clone()
    }

    /// LIST operations (first-page requests, retries included) for one group.
    pub fn list_operations(&self, subscription: &str, resource_group: &str) -> usize {
        self.lists()
            .iter()
            .filter(|l| {
                l.first_page
                    && l.subscription.eq_ignore_ascii_case(subscription)
                    && l.resource_group.eq_ignore_ascii_case(resource_group)
            })
            .count()
    }

    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn token_requests(&self) -> u64 {
        self.inner.token_requests.load(Ordering::SeqCst)
    }

    pub fn token_forms(&self) -> Vec<HashMap<String, String>> {
        self.inner.token_forms.lock().unwrap().clone()
    }

    pub fn imds_queries(&self) -> Vec<HashMap<String, String>> {
        self.inner.imds_queries.lock().unwrap().clone()
    }
}

fn count(inner: &Inner, path: &str) {
    *inner
        .path_counts
        .lock()
        .unwrap()
        .entry(path.to_owned())
        .or_default() += 1;
}
