//! The connections under a client: kube's request building (base URI, credentials, extra
//! headers) over pooled hyper clients, HTTP/2 when the server offers it, in lanes that several
//! clients share; a member's answers read under [`super::bounded`]; a member's own proxy's
//! tunnel when the operator allowed it.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use http::Request;
use kube::client::{Body, DynBody};
use parking_lot::Mutex;
use tower::BoxError;
use tower::util::BoxCloneService;

use super::credentials::{Credentials, FromCell};
use super::{Transport, bounded};

/// A member's answers are read under these ([`bounded`]); the hub's are not (the operator's own
/// cluster, whose lists of every member's objects may be large).
#[derive(Clone)]
pub(super) struct Bounds {
    pub(super) member: Arc<str>,
    pub(super) limits: bounded::BodyLimits,
}

/// Whether a client may go through the proxy its kubeconfig names ([`connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proxy {
    /// A member's: its vetted kubeconfig names a proxy only when the operator allowed it
    /// (`--allow-member-proxy`), and only `http://`.
    Member,
    /// The hub's: never through a proxy.
    Never,
}

/// How a connection to the API server is opened: directly, or through a proxy's tunnel.
type Connector = tower::util::BoxCloneSyncService<
    http::Uri,
    hyper_util::rt::TokioIo<tokio::net::TcpStream>,
    BoxError,
>;

/// `http` opening its connections through an HTTP CONNECT tunnel of the proxy `url` (user info
/// sent as `Proxy-Authorization: Basic`). TLS to the API server goes on inside the tunnel,
/// end to end: the proxy sees the CONNECT only. Only `http://` (the vetting refuses the other
/// schemes; this keeps the rule where the connection is made). No error quotes the URL: it
/// may hold the proxy's password.
fn tunnel(
    url: &http::Uri,
    http: hyper_util::client::legacy::connect::HttpConnector,
) -> Result<
    hyper_util::client::legacy::connect::proxy::Tunnel<
        hyper_util::client::legacy::connect::HttpConnector,
    >,
    kube::Error,
> {
    use hyper_util::client::legacy::connect::proxy::Tunnel;
    let unsupported =
        |why: &str| kube::Error::Service(format!("the kubeconfig's proxy-url: {why}").into());
    if url.scheme_str() != Some("http") {
        return Err(unsupported(
            "only an http:// proxy (HTTP CONNECT) is supported",
        ));
    }
    // Builder::default(), not from_env(): nothing of the environment (its proxy, NO_PROXY,
    // REQUEST_METHOD) has a say in a member's proxy.
    let matcher = hyper_util::client::proxy::matcher::Matcher::builder()
        .all(url.to_string())
        .build();
    let intercept = matcher
        .intercept(&http::Uri::from_static("https://member.invalid"))
        .ok_or_else(|| unsupported("not an http://host:port URL"))?;
    let tunnel = Tunnel::new(intercept.uri().clone(), http);
    Ok(match intercept.basic_auth() {
        Some(auth) => tunnel.with_auth(auth.clone()),
        None => tunnel,
    })
}

/// What kube's builder puts under its client (base URI, credentials, extra headers) over
/// `lanes` pooled hyper clients whose TLS offers HTTP/2 and HTTP/1.1, cloneable so that
/// several clients share their connections. A request goes out on the connection its [`Lane`]
/// names (the first without one): with HTTP/2, one connection per lane carries all of its
/// requests and watches. With `bounds`, every answer's body is read under them. With
/// `credentials`, every request and TLS handshake takes the credentials in that cell (which a
/// rotation updates) instead of the kubeconfig's.
pub(super) fn connections(
    config: &kube::Config,
    lanes: usize,
    bounds: Option<Bounds>,
    proxy: Proxy,
    credentials: Option<Arc<Credentials>>,
) -> Result<Transport, kube::Error> {
    use kube::client::ConfigExt;
    let connector = tls(config, dial(config, proxy)?, credentials.clone())?;
    let pooled = move || pooled(connector.clone());
    // Requests of no lane (a member's, the replica's own); each lane's connection, while a
    // member uses it. A rotated client certificate takes a new pool, so the next request opens
    // a connection that presents it; the old connection goes on carrying the streams already on
    // it (the watches, authorized when they started) and closes once they end.
    let generation = {
        let cell = credentials.clone();
        move || cell.as_ref().map_or(0, |c| c.identity_generation())
    };
    let unlaned = Arc::new(Mutex::new((generation(), pooled())));
    let lanes: Arc<Mutex<Vec<Weak<LaneConnection>>>> =
        Arc::new(Mutex::new((0..lanes.max(1)).map(|_| Weak::new()).collect()));
    let route = tower::service_fn(move |req: Request<Body>| {
        let client = match req.extensions().get::<Lane>() {
            Some(lane) => lane
                .0
                .get_or_init(|| {
                    lane_for(&mut lanes.lock(), MEMBERS_PER_LANE, || {
                        Arc::new(LaneConnection(pooled()))
                    })
                })
                .0
                .clone(),
            None => {
                let mut unlaned = unlaned.lock();
                let now = generation();
                if unlaned.0 != now {
                    *unlaned = (now, pooled());
                }
                unlaned.1.clone()
            }
        };
        send(&client, req, bounds.as_ref())
    });
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(match credentials {
            Some(_) => None,
            None => config.auth_layer()?,
        })
        .map_request(move |req: Request<Body>| match &credentials {
            Some(cell) => cell.authorize(req),
            None => req,
        })
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(route);
    Ok(BoxCloneService::new(service))
}

/// How TCP connections to the API server are opened: directly, or through the kubeconfig's
/// proxy when `proxy` allows it.
fn dial(config: &kube::Config, proxy: Proxy) -> Result<Connector, kube::Error> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    // As Go does: many small HTTP/2 frames share a connection, and Nagle's algorithm would
    // hold a request's last frame for the previous one's delayed ACK (~40 ms).
    http.set_nodelay(true);
    match (&config.proxy_url, proxy) {
        (None, _) => Ok(Connector::new(tower::ServiceExt::map_err(
            http,
            BoxError::from,
        ))),
        (Some(url), Proxy::Member) => Ok(Connector::new(tower::ServiceExt::map_err(
            tunnel(url, http)?,
            BoxError::from,
        ))),
        // Not kube's ProxyProtocolUnsupported: its message prints the URL, credentials and all.
        (Some(_), Proxy::Never) => Err(kube::Error::Service(
            "the kubeconfig names a proxy (proxy-url): not supported for this client".into(),
        )),
    }
}

/// TLS over `http`'s connections, as the kubeconfig says (its CA, client certificate,
/// `tls-server-name`), offering HTTP/2 and HTTP/1.1; the client certificate of
/// `credentials` when given, read at each handshake.
fn tls(
    config: &kube::Config,
    http: Connector,
    credentials: Option<Arc<Credentials>>,
) -> Result<hyper_rustls::HttpsConnector<Connector>, kube::Error> {
    use kube::client::ConfigExt;
    let mut tls = config.rustls_client_config()?;
    // rustls's default remembers tickets for 32 servers, allocated up front (~14 KiB per
    // client); these connections all go to one server.
    tls.resumption = rustls::client::Resumption::in_memory_sessions(SESSIONS_KEPT);
    if let Some(cell) = credentials {
        // A resumed session keeps the client certificate of the handshake it resumes: after a
        // rotation the server would still see the old one (as client-go, which resumes none).
        if cell.has_identity() {
            tls.resumption = rustls::client::Resumption::disabled();
        }
        tls.client_auth_cert_resolver = Arc::new(FromCell(cell));
    }
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match &config.tls_server_name {
        Some(name) => https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            name.clone().try_into().map_err(|_| {
                kube::Error::Service(format!("invalid tls-server-name {name:?}").into())
            })?,
        )),
        None => https,
    };
    Ok(https.enable_http1().enable_http2().wrap_connector(http))
}

/// One pooled hyper client over `connector`: the replica's own, or one lane's.
fn pooled(connector: hyper_rustls::HttpsConnector<Connector>) -> Pooled {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        // A lane keeps its connection however long it goes without a new request (the
        // pool would drop it after 90 s, and the lane's next request would open a second
        // one beside the one its watches still ride on); it closes when the last member
        // of the lane goes ([`Lane`]). A dead one is found by the ping and replaced at the
        // next request.
        .pool_idle_timeout(None)
        // A dead connection is found by a ping, not by the next request's timeout:
        // every request and watch of the lane rides on it.
        .http2_keep_alive_interval(HTTP2_PING)
        .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
        // An answer's headers are held whole before its body's bounds apply: h2's default
        // allows 16 MiB of them per answer; a kube-apiserver's are a few hundred bytes.
        .http2_max_header_list_size(MAX_HEADER_LIST)
        .timer(hyper_util::rt::TokioTimer::new())
        .build::<_, Body>(connector)
}

/// An answer of the API server, its body boxed (bounded or not).
type Answer = Result<http::Response<Box<DynBody>>, hyper_util::client::legacy::Error>;

/// `req` sent on `client`; with `bounds`, its answer's body is read under them.
fn send(
    client: &Pooled,
    req: Request<Body>,
    bounds: Option<&Bounds>,
) -> impl Future<Output = Answer> + Send + use<> {
    // What the answer's body is read under is known from the request, its deadline
    // counted from now.
    let bounded = bounds.map(|b| {
        let request = bounded::request_label(req.method(), req.uri());
        let at = tokio::time::Instant::now();
        (
            b.clone(),
            req.method().clone(),
            req.uri().clone(),
            request,
            at,
        )
    });
    let answer = client.request(req);
    async move {
        let response = answer.await?;
        let Some((bounds, method, uri, request, sent)) = bounded else {
            return Ok(response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            }));
        };
        let shape = bounded::shape_of(&method, &uri, response.status(), &bounds.limits);
        Ok(response.map(|body| {
            Box::new(bounded::Bounded::new(
                body,
                bounds.member,
                request,
                shape,
                sent,
            )) as Box<DynBody>
        }))
    }
}

/// The most header bytes of one HTTP/2 answer (HTTP/1.1's are bounded by hyper's read
/// buffer, ~400 KiB).
const MAX_HEADER_LIST: u32 = 256 << 10;

/// TLS 1.3 session tickets kept per client: rustls keeps up to 8 per server, so this is one
/// server's (a reconnect resumes instead of a full handshake).
const SESSIONS_KEPT: usize = 8;

/// Which of a client's connections a request goes out on ([`connections`]): one member
/// view's, chosen at its first request ([`lane_for`]). The views of one lane share its
/// connection, and the last of them to go closes it.
#[derive(Clone, Default)]
pub(super) struct Lane(Arc<OnceLock<Arc<LaneConnection>>>);

/// The lane of a member view's first request, among `lanes` (each alive while a view holds
/// it): the fullest with fewer than `per_lane` views, else a new one in a free place, else
/// (every place full) the least full. Members fill lanes instead of spreading over all of
/// them: each lane's connection costs ~60 KiB however few members use it, so 64 lanes for 100
/// members were 40 KiB per member; `per_lane` keeps a lane's streams under the server's limit.
pub(super) fn lane_for<T>(
    lanes: &mut [Weak<T>],
    per_lane: usize,
    open: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    let live: Vec<Arc<T>> = lanes.iter().filter_map(Weak::upgrade).collect();
    // A lane's views, each holding it once: its count less the upgrade just made.
    let views = |lane: &Arc<T>| Arc::strong_count(lane) - 1;
    if let Some(fullest) = live
        .iter()
        .filter(|lane| views(lane) < per_lane)
        .max_by_key(|lane| views(lane))
    {
        return fullest.clone();
    }
    if let Some(free) = lanes.iter_mut().find(|lane| lane.strong_count() == 0) {
        let opened = open();
        *free = Arc::downgrade(&opened);
        return opened;
    }
    match live.iter().min_by_key(|lane| views(lane)) {
        Some(least) => least.clone(),
        None => open(),
    }
}

type Pooled = hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<Connector>, Body>;

/// A lane's pooled client, dropped (its connection closed) with the last view of the lane.
struct LaneConnection(Pooled);

/// The hub client's connections. Each member's hub view keeps to one ([`member_view`]), so
/// a member's hub watches (one per job that watches the hub: InternalServiceExports,
/// EndpointSliceExports, InternalServiceImports, EndpointSliceImports, InternalMemberClusters)
/// and its writes share one HTTP/2 connection with the other members of its lane, instead of an
/// HTTP/1.1 connection per watch. kube-apiserver allows 100 streams per connection unless
/// `--http2-max-streams-per-connection` says otherwise (not Go's 250: it matches what Go clients
/// assume), and hyper waits for a free stream rather than open another connection, so a lane
/// whose watches took every stream would leave its members' requests waiting for good (seen
/// with 40 members of 5 watches a lane: not one write got through). 320 lanes of
/// [`MEMBERS_PER_LANE`] hold a replica of 5,120 members. A lane no member uses has no
/// connection.
pub const HUB_LANES: usize = 320;

/// The most hub watches one member keeps (every job that watches the hub running).
const HUB_WATCHES_PER_MEMBER: usize = 5;

/// Member views a lane takes before the next lane opens ([`lane_for`]): their watches (80 at
/// most) leave 20 of the server's 100 streams for requests.
pub(super) const MEMBERS_PER_LANE: usize = 80 / HUB_WATCHES_PER_MEMBER;

/// client-go's HTTP/2 health check: a ping after 30 s without a frame, 15 s for its answer.
const HTTP2_PING: Duration = Duration::from_secs(30);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(15);
