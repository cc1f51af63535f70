//! Kubernetes clients: kube's request building over our own transport ([`connections`]: HTTP/2
//! when the server offers it, several clients sharing a connection), under the process's
//! client policy ([`crate::policy`]: retry, counting and a client span per attempt, a token
//! bucket per client, a concurrency limit and a timeout for every request except long-running
//! watches), the write fence ([`crate::ownership::Fence`]), and every request named as fleetnet-hub (User-Agent,
//! `fieldManager`).
//!
//! kube's own stack (its builder) is not used: it speaks HTTP/1.1 only, a connection per watch,
//! and its retry layer would sit below our limiter, retrying up to 15 times with waits growing
//! to 1000 s, invisible to the client's counters.

pub mod bounded;
mod classify;
mod connections;
pub mod credentials;
pub mod exec;
mod printable;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use kube::client::{Body, ClientBuilder, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::policy::Turn;
use tower::BoxError;
use tower::filter::FilterLayer;
use tower::util::BoxCloneService;

/// What a client's layers go over, and what a member's clients share: their connections to
/// its API server (cloneable: each request and each retry waits for its token on a clone).
type Transport = BoxCloneService<Request<Body>, http::Response<Box<DynBody>>, BoxError>;

use crate::ownership::fence;
pub use crate::ownership::{Fence, Hold};
pub use crate::policy::{ClientStats, RequestCount, RequestKind, RetryLimits};
pub use classify::classify;
pub use connections::HUB_LANES;
use connections::{Bounds, Lane, Proxy, connections};
#[cfg(test)]
use connections::{MEMBERS_PER_LANE, lane_for};
pub use printable::{printable_proxy, printable_server};

/// Limits of one client's outbound requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Sustained requests per second (client-go's QPS).
    pub qps: f64,
    /// Bucket size (client-go's burst).
    pub burst: u32,
    /// Requests in flight at once, watches not counted.
    pub max_in_flight: usize,
    /// Deadline of one request, watches excluded.
    pub timeout: Duration,
    /// Retries of refused or failed requests.
    pub retry: RetryLimits,
    /// A member's Events have a bucket of their own (`--event-qps`, `--event-burst`): they
    /// never take a token an export needs.
    pub event_qps: f64,
    pub event_burst: u32,
    /// Reconciles of one member running at once (`--reconcile-concurrency`); the others wait
    /// in the queue, not on the limiter.
    pub reconcile_concurrency: u16,
    /// Bytes of one member answer that is not a watch (`--member-max-response-bytes`): a LIST
    /// page, a GET, discovery. Member clients only ([`bounded`]).
    pub max_response_bytes: u64,
    /// Bytes of one event of a member's watch (`--member-max-event-bytes`). Member clients only.
    pub max_event_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // `--kube-api-qps`'s and `--kube-api-burst`'s defaults (see there why).
            qps: 40.0,
            burst: 60,
            max_in_flight: 32,
            timeout: Duration::from_secs(30),
            retry: RetryLimits::default(),
            event_qps: 10.0,
            event_burst: 25,
            reconcile_concurrency: 16,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// 16 MiB: a LIST page of kube's watcher (500 objects) of Services or ServiceExports is well
/// under 1 MiB in real fleets; etcd's limit for one object is 1.5 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 16 << 20;

/// 4 MiB: one watch event is one object (etcd refuses objects over 1.5 MiB) in JSON.
pub const DEFAULT_MAX_EVENT_BYTES: u64 = 4 << 20;

impl Limits {
    /// What a member's answers may cost ([`bounded`]): the sizes above, the request timeout
    /// over the whole body.
    pub fn body_limits(&self) -> bounded::BodyLimits {
        bounded::BodyLimits {
            max_response_bytes: self.max_response_bytes,
            max_event_bytes: self.max_event_bytes,
            response_deadline: self.timeout,
            watch_idle: bounded::WATCH_IDLE,
            watch_margin: bounded::WATCH_MARGIN,
        }
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("client {client}: invalid limits: {message}")]
    Limits { client: String, message: String },
    #[error("client {client}: {source}")]
    Kube {
        client: String,
        #[source]
        source: kube::Error,
    },
    /// The client's exec credential plugin failed (told without its command, environment
    /// or output).
    #[error("client {client}: {source}")]
    ExecPlugin {
        client: String,
        #[source]
        source: exec::ExecPluginFailed,
    },
    /// The kubeconfig (or the in-cluster configuration) cannot be used; kube's message, which
    /// may quote a value of the file.
    #[error("{0}")]
    Config(String),
}

/// The one way from a kubeconfig to a client: `kubeconfig` is the hub's, the operator's own;
/// `None` is the in-cluster configuration. Returns the client ([`build_over`] with `lanes`
/// connections) and its API server's URL. Members' clients come from [`member_clients`].
pub async fn from_kubeconfig(
    name: &str,
    kubeconfig: Option<Kubeconfig>,
    lanes: usize,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: Fence,
) -> Result<(kube::Client, String), Error> {
    let config = config_of(kubeconfig).await?;
    let server = config.cluster_url.to_string();
    Ok((
        build_over(name, config, lanes, limits, stats, fence)?,
        server,
    ))
}

async fn config_of(kubeconfig: Option<Kubeconfig>) -> Result<kube::Config, Error> {
    match kubeconfig {
        Some(kc) => {
            let (kc, placeholder) = without_env_proxy(kc);
            let mut config =
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| Error::Config(e.to_string()))?;
            if config.proxy_url.as_ref() == Some(&placeholder) {
                config.proxy_url = None;
            }
            Ok(config)
        }
        None => kube::Config::incluster().map_err(|e| Error::Config(e.to_string())),
    }
}

/// `kc` with every cluster that names no `proxy-url` given a placeholder one, and that
/// placeholder: kube takes `HTTPS_PROXY` from the environment for a cluster that names none
/// (ignoring `NO_PROXY`), and the environment's proxy is for Azure and OTLP only. With a proxy
/// named, kube never reads the variable (not even to fail on a malformed one); the caller
/// drops the placeholder from the config. A cluster's own `proxy-url` is kept: a member's
/// vetting allows it only with `--allow-member-proxy` ([`connections`] tunnels through it).
fn without_env_proxy(mut kc: Kubeconfig) -> (Kubeconfig, http::Uri) {
    const PLACEHOLDER: &str = "http://no-proxy.fleetnet-hub.invalid";
    for named in &mut kc.clusters {
        if let Some(cluster) = named.cluster.as_mut()
            && cluster.proxy_url.as_deref().is_none_or(str::is_empty)
        {
            cluster.proxy_url = Some(PLACEHOLDER.to_string());
        }
    }
    (kc, http::Uri::from_static(PLACEHOLDER))
}

/// A member's client: its requests and watches over one connection to its API server, its
/// Events in a budget of their own.
pub struct MemberClients {
    pub client: kube::Client,
    /// The server URL.
    pub server: String,
    /// The proxy its connection goes through (its kubeconfig's `proxy-url`), as it may be
    /// printed: `http://host:port`, never its credentials.
    pub proxy: Option<String>,
}

/// The client of member `name` from its vetted kubeconfig. It sends over one HTTP/2
/// connection when the API server offers it (every kube-apiserver does; client-go's own
/// choice): the member's watches, its requests and its Events share one TLS session instead
/// of a connection each (kube's builder speaks HTTP/1.1 only).
/// With `credentials`, its requests authenticate with what that cell holds (rotated in place),
/// not with the kubeconfig's.
pub async fn member_clients(
    name: &str,
    kubeconfig: Kubeconfig,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: Fence,
    credentials: Option<Arc<credentials::Credentials>>,
) -> Result<MemberClients, Error> {
    let config = config_of(Some(kubeconfig)).await?;
    let server = config.cluster_url.to_string();
    let proxy = config
        .proxy_url
        .as_ref()
        .map(|url| printable::printable_proxy(&url.to_string()));
    let client = member_client_of(name, &config, limits, stats, fence, credentials)?;
    Ok(MemberClients {
        client,
        server,
        proxy,
    })
}

/// A member's client over `config`: one budget for its requests (`limits`), one of their own
/// for its Events (`event_qps`, `event_burst`): queued Events never delay an export's write,
/// and one client (one request buffer, one connection) serves both.
fn member_client_of(
    name: &str,
    config: &kube::Config,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: Fence,
    credentials: Option<Arc<credentials::Credentials>>,
) -> Result<kube::Client, Error> {
    // No kube retry layer to switch off here: `connections` builds the stack without one.
    let plugin = exec::plugin_of(config);
    let member = format!("member:{name}");
    if limits.max_response_bytes == 0 || limits.max_event_bytes == 0 {
        return Err(Error::Limits {
            client: member,
            message: "response and event size caps must be at least 1 byte".into(),
        });
    }
    let bounds = Bounds {
        member: name.into(),
        limits: limits.body_limits(),
    };
    let transport = connections(config, 1, Some(bounds), Proxy::Member, credentials)
        .map_err(|source| kube_error(&member, plugin.as_ref(), source))?;
    let events =
        crate::policy::bucket(limits.event_qps, limits.event_burst).map_err(|e| Error::Limits {
            client: member.clone(),
            message: format!("events: {e}"),
        })?;
    layered(
        &member,
        ClientBuilder::new(transport, &config.default_namespace),
        plugin,
        limits,
        vec![("events", events)],
        stats,
        fence,
    )
}

fn kube_error(client: &str, plugin: Option<&String>, source: kube::Error) -> Error {
    let client = client.to_string();
    let failed = match (plugin, &source) {
        (Some(plugin), kube::Error::Auth(e)) => exec::failed(plugin, e),
        _ => None,
    };
    match failed {
        Some(source) => Error::ExecPlugin { client, source },
        None => Error::Kube { client, source },
    }
}

/// Builds a client for `config` whose requests all pass through `limits`, counted in `stats`.
pub fn build(
    name: &str,
    config: kube::Config,
    limits: &Limits,
    stats: Arc<ClientStats>,
) -> Result<kube::Client, Error> {
    build_over(name, config, 1, limits, stats, Fence::open())
}

/// A client over `lanes` connections ([`connections`]) whose every write is refused unless
/// `fence` holds at the moment it is sent (each attempt, after its wait for a token), its
/// deadline clipped to what is left of the hold. A request that already carries a [`Fence`]
/// ([`member_view`]) keeps its own.
pub fn build_over(
    name: &str,
    config: kube::Config,
    lanes: usize,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: Fence,
) -> Result<kube::Client, Error> {
    let plugin = exec::plugin_of(&config);
    // kube runs an exec plugin once already here, for its first token.
    let transport = connections(&config, lanes, None, Proxy::Never, None)
        .map_err(|source| kube_error(name, plugin.as_ref(), source))?;
    let builder = ClientBuilder::new(transport, &config.default_namespace);
    layered(name, builder, plugin, limits, vec![], stats, fence)
}

/// The process's layers over the transport (`builder`): see [`build_over`].
fn layered(
    name: &str,
    builder: ClientBuilder<Transport>,
    plugin: Option<String>,
    limits: &Limits,
    own_buckets: Vec<(&'static str, Arc<crate::policy::Bucket>)>,
    stats: Arc<ClientStats>,
    fence: Fence,
) -> Result<kube::Client, Error> {
    let bad = |message: &str| Error::Limits {
        client: name.to_string(),
        message: message.to_string(),
    };
    if limits.max_in_flight == 0 {
        return Err(bad("max in flight must be at least 1"));
    }
    let policy = crate::policy::Policy {
        classify,
        retry: limits.retry.clone(),
        bucket: Some(crate::policy::bucket(limits.qps, limits.burst).map_err(bad)?),
        own_buckets,
        slots: Arc::new(Semaphore::new(limits.max_in_flight)),
        timeout: limits.timeout,
        stats,
        trace: true,
    };
    // The transport is cloneable, so each request (and each retry) waits for its token on a
    // clone of the stack; kube::Client::new puts the one buffer over it. Layers listed inner
    // to outer.
    Ok(builder
        // Innermost, right above kube's auth layer: nothing above sees a plugin's secrets.
        .with_layer(&tower::util::MapErrLayer::new(
            move |e: BoxError| match &plugin {
                Some(plugin) => exec::redact(plugin, e),
                None => e,
            },
        ))
        .with_layer(&FilterLayer::new(fence::AtSend))
        .with_layer(&tower::util::MapRequestLayer::new(identify))
        .with_layer(&policy.layers())
        .with_layer(&tower::util::MapRequestLayer::new(
            move |mut req: Request<Body>| {
                if req.extensions().get::<Fence>().is_none() {
                    req.extensions_mut().insert(fence.clone());
                }
                req
            },
        ))
        .build())
}

/// One member's view of a client shared by many (the hub's): it sends through `client` (its
/// budget, retries, counters), with every write refused unless `fence` holds when it is sent
/// (after its wait in the shared bucket, on every retry), and its requests in one line for the
/// shared bucket ([`Turn`]): a member's backlog never starves another member's change. Its
/// requests keep to one of the client's connections, its lane (see [`HUB_LANES`]). For a
/// member's short errands (its cleanup records, its withdrawal); the members' exporters share
/// one client, [`HubViews`], with the same routes.
pub fn member_view(client: &kube::Client, fence: Fence) -> kube::Client {
    let shared = client.clone();
    let route = Route::new(fence);
    let service = tower::service_fn(move |mut req: Request<Body>| {
        let shared = shared.clone();
        route.mark(&mut req);
        async move { shared.send(req).await.map_err(BoxError::from) }
    });
    kube::Client::new(service, client.default_namespace().to_string())
}

/// The members' long-lived views of the hub client ([`member_view`]) as one client: a request
/// is sent as the member's whose hub namespace it addresses (each member reads and writes only
/// in its own), with that member's line in the shared budget, its fence and its lane. A
/// `kube::Client` per member would cost each a request buffer (~11 KiB) and a task.
#[derive(Clone)]
pub struct HubViews {
    client: kube::Client,
    routes: Arc<Mutex<HashMap<String, Arc<Route>>>>,
}

/// One member's place in the shared hub client: its line in the budget, its fence, its lane.
struct Route {
    turn: Turn,
    fence: Fence,
    lane: Lane,
}

impl Route {
    fn new(fence: Fence) -> Self {
        Self {
            turn: Turn::default(),
            fence,
            lane: Lane::default(),
        }
    }

    /// Sends `req` as this member's.
    fn mark(&self, req: &mut Request<Body>) {
        req.extensions_mut().insert(self.turn.clone());
        req.extensions_mut().insert(self.fence.clone());
        req.extensions_mut().insert(self.lane.clone());
    }
}

/// Keeps a member's namespace routed ([`HubViews::add`]) until dropped.
#[must_use = "the namespace is routed only while this is kept"]
pub struct HubView {
    routes: Arc<Mutex<HashMap<String, Arc<Route>>>>,
    namespace: String,
    route: Arc<Route>,
}

impl HubViews {
    /// Views of `hub` (its budget, retries, counters).
    pub fn new(hub: &kube::Client) -> Self {
        let shared = hub.clone();
        let routes: Arc<Mutex<HashMap<String, Arc<Route>>>> = Arc::default();
        let known = routes.clone();
        // Requests of a namespace no member holds (none are sent: a member's tasks end with
        // its view) go under a fence that is never held: no write leaves unfenced.
        let unrouted = Fence::new(tokio::sync::watch::channel(fence::Hold::Never).1);
        let service = tower::service_fn(move |mut req: Request<Body>| {
            let shared = shared.clone();
            let route = namespace_of(req.uri().path()).and_then(|ns| known.lock().get(ns).cloned());
            match route {
                Some(route) => route.mark(&mut req),
                None => {
                    req.extensions_mut().insert(unrouted.clone());
                }
            }
            async move { shared.send(req).await.map_err(BoxError::from) }
        });
        Self {
            client: kube::Client::new(service, hub.default_namespace().to_string()),
            routes,
        }
    }

    /// The client every member's hub APIs are built on (each in its own namespace).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Requests addressed to `namespace` go as one member's, with writes fenced by `fence`,
    /// until the returned [`HubView`] is dropped.
    pub fn add(&self, namespace: &str, fence: Fence) -> HubView {
        let route = Arc::new(Route::new(fence));
        self.routes
            .lock()
            .insert(namespace.to_string(), route.clone());
        HubView {
            routes: self.routes.clone(),
            namespace: namespace.to_string(),
            route,
        }
    }
}

impl Drop for HubView {
    fn drop(&mut self) {
        let mut routes = self.routes.lock();
        // A member started again may hold the namespace already: its route stays.
        if routes
            .get(&self.namespace)
            .is_some_and(|r| Arc::ptr_eq(r, &self.route))
        {
            routes.remove(&self.namespace);
        }
    }
}

/// The namespace a request path addresses (`…/namespaces/<ns>/<resource>…`), if any.
fn namespace_of(path: &str) -> Option<&str> {
    let (_, rest) = path.split_once("/namespaces/")?;
    let (ns, resource) = rest.split_once('/')?;
    (!ns.is_empty() && !resource.is_empty()).then_some(ns)
}

/// The field manager every write of fleetnet-hub is recorded under (managedFields).
pub const FIELD_MANAGER: &str = "fleetnet-hub";

/// `fleetnet-hub/<version>`, the User-Agent of every request.
pub const USER_AGENT: &str = concat!("fleetnet-hub/", env!("CARGO_PKG_VERSION"));

/// Names the product on every request: its User-Agent, and `fieldManager` on every write
/// that does not name one already (server-side apply always does).
fn identify(mut req: Request<Body>) -> Request<Body> {
    req.headers_mut()
        .entry(http::header::USER_AGENT)
        .or_insert(http::HeaderValue::from_static(USER_AGENT));
    let write = matches!(
        *req.method(),
        http::Method::POST | http::Method::PUT | http::Method::PATCH
    );
    if write && let Some(uri) = with_field_manager(req.uri()) {
        *req.uri_mut() = uri;
    }
    req
}

/// `uri` with `fieldManager=fleetnet-hub` added, unless it already names a field manager.
fn with_field_manager(uri: &http::Uri) -> Option<http::Uri> {
    let query = uri.query().unwrap_or_default();
    if query.split('&').any(|kv| kv.starts_with("fieldManager=")) {
        return None;
    }
    let sep = if query.is_empty() { "" } else { "&" };
    let path_and_query = format!("{}?{query}{sep}fieldManager={FIELD_MANAGER}", uri.path());
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    http::Uri::from_parts(parts).ok()
}

/// Bodies that are streams cannot be sent twice: such requests get no retries.
impl crate::policy::Resend for Body {
    fn resend(&self) -> Option<Self> {
        self.try_clone()
    }
}

#[cfg(test)]
mod tests;
