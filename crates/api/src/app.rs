//! The routes: salt-api's URL map on axum, with salt-api's status codes and bodies.
//!
//! | path | verbs | session | what |
//! |---|---|---|---|
//! | `/` | GET, POST | POST | welcome and client list; lowstate |
//! | `/login` | GET, POST | – | "Please log in"; eauth login |
//! | `/logout` | POST | yes | revokes the token |
//! | `/minions[/<mid>]` | GET, POST | yes | `grains.items`; `local_async` (202) |
//! | `/jobs[/<jid>]` | GET | yes | `jobs.list_jobs`; `jobs.list_job` |
//! | `/keys[/<mid>]` | GET | (chunk) | wheel `key.list_all`; `key.finger` |
//! | `/keys` | POST | – | wheel `key.gen_accept`: the key-pair tarball (see [`crate::keys`]) |
//! | `/run` | POST | – | lowstate with credentials in each chunk |
//! | `/token` | POST | – | eauth tokens |
//! | `/events` | GET | yes | SSE (see [`crate::events`]) |
//! | `/ws[/<token>]` | GET | yes (or in the path) | WebSocket events (see [`crate::ws`]) |
//! | `/<webhook_url>[/...]` | POST | unless `webhook_disable_auth` | fires `salt/netapi/hook/...` |
//! | `/stats` | GET | unless `stats_disable_auth` | request counters |
//! | `/metrics` | GET | unless `metrics_disable_auth` | Prometheus metrics (see [`crate::metrics`]) |
//! | `<static_path>/...`, `<app_path>[/...]` | GET | – | static files, the single-page app |
//!
//! Every response carries salt-api's CORS headers, with `X-Auth-Token` exposed (stock
//! exposes the nonsense `GET, POST`); a preflight (`OPTIONS`) is answered 200 on every
//! path (stock: 500 wherever sessions are on, salt#55087). `authorized_ips` refuses other
//! addresses with 403 "Bad IP"; unknown paths are 404 and unsupported verbs 405 with
//! `Allow`, as CherryPy error pages.
//!
//! Deviations: `/hook` leaves the caller's `X-Auth-Token` and `Cookie` out of the event it
//! fires (stock puts them in, for every `/events` reader to see); `/token` asks the master
//! for a token directly (`mk_token`), so it needs neither the `runner` client nor
//! `@runner` rights (stock runs the `auth.mk_token` runner); `GET /run`, `GET /token`,
//! `GET /logout` are 405 (stock: the welcome page, or 500); `/stats` reports Halite's own
//! counters under `"Halite API"` (stock: CherryPy's); the `/login` token works on `/run`
//! and a `/token` token works as a session (they are the same kind of token here).

use crate::body;
use crate::config::{ApiConfig, CLIENTS};
use crate::events::{self, AclSettings, Hub, JobFilter, StreamSpec, Wire};
use crate::link::MasterLink;
use crate::lowstate::Executor;
use crate::render::{self, error_page, negotiate, respond, Failure, Format};
use crate::session::{self, presented_token, Session, Sessions};
use axum::body::{Body, Bytes};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use halite_journal::TagFilter;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The client address of a request (set by the server for each connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// Request counters for `/stats`.
struct Stats {
    start: Instant,
    start_epoch: f64,
    total: AtomicU64,
    current: AtomicUsize,
    streams: AtomicUsize,
}

/// Decrements a counter when dropped.
struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Everything the handlers share.
pub struct Api {
    cfg: Arc<ApiConfig>,
    link: Arc<MasterLink>,
    sessions: Arc<Sessions>,
    exec: Executor,
    hub: Arc<Hub>,
    /// `events_acl`: what the event streams' ACL filter reads, when on.
    events_acl: Option<Arc<AclSettings>>,
    limiter: Semaphore,
    stats: Stats,
    /// `/metrics`: the API's own metrics and where the master's are read.
    metrics: crate::metrics::ApiMetrics,
    shutdown: CancellationToken,
}

impl Api {
    /// The API for `cfg` in front of `link`'s master. Event streams end at `shutdown`.
    pub fn new(cfg: ApiConfig, link: MasterLink, shutdown: CancellationToken) -> Arc<Api> {
        let cfg = Arc::new(cfg);
        let link = Arc::new(link);
        let hub = Hub::new(link.bus().clone(), cfg.events_acl);
        let events_acl = cfg.events_acl.then(|| {
            Arc::new(AclSettings::from_master(link.config()).unwrap_or_else(|e| {
                tracing::error!("events_acl: {e}; every job event is hidden from event streams");
                AclSettings::deny_all()
            }))
        });
        tokio::spawn(hub.clone().run(shutdown.clone()));
        let sessions = Arc::new(Sessions::new(link.clone()));
        Arc::new(Api {
            exec: Executor::new(link.clone(), cfg.clone(), sessions.clone()),
            sessions,
            limiter: Semaphore::new(cfg.thread_pool),
            stats: Stats {
                start: Instant::now(),
                start_epoch: session::unix_now(),
                total: AtomicU64::new(0),
                current: AtomicUsize::new(0),
                streams: AtomicUsize::new(0),
            },
            hub,
            events_acl,
            metrics: crate::metrics::ApiMetrics::new(&link.config().sock_dir),
            link,
            cfg,
            shutdown,
        })
    }

    /// The API's metrics.
    pub(crate) fn metrics(&self) -> &crate::metrics::ApiMetrics {
        &self.metrics
    }

    /// Event streams (`/events`, `/ws`) open now.
    pub(crate) fn event_streams(&self) -> usize {
        self.stats.streams.load(Ordering::Relaxed)
    }

    /// The configuration.
    pub fn config(&self) -> &ApiConfig {
        &self.cfg
    }

    /// The router (paths without `root_prefix`, which the server strips).
    pub fn router(self: &Arc<Self>) -> Router {
        let mut r = Router::new()
            .route("/", get(welcome).post(lowstate))
            .route("/run", axum::routing::post(run))
            .route("/run/", axum::routing::post(run))
            .route("/token", axum::routing::post(token))
            .route("/token/", axum::routing::post(token))
            .route("/keys", get(keys).post(crate::keys::gen_accept))
            .route("/keys/", get(keys).post(crate::keys::gen_accept))
            .route("/keys/{mid}", get(key))
            .route("/events", get(events))
            .route("/events/", get(events))
            .route("/ws", get(ws_session))
            .route("/ws/", get(ws_session))
            .route("/ws/{token}", get(ws_token))
            .route("/stats", get(stats))
            .route("/stats/", get(stats))
            .route("/metrics", get(crate::metrics::scrape))
            .route("/metrics/", get(crate::metrics::scrape));
        if self.cfg.enable_sessions {
            r = r
                .route("/login", get(login_page).post(login))
                .route("/login/", get(login_page).post(login))
                .route("/logout", axum::routing::post(logout))
                .route("/logout/", axum::routing::post(logout))
                .route("/minions", get(minions).post(minions_post))
                .route("/minions/", get(minions).post(minions_post))
                .route("/minions/{mid}", get(minion))
                .route("/jobs", get(jobs))
                .route("/jobs/", get(jobs))
                .route("/jobs/{jid}", get(job));
        }
        r.fallback(fallback)
            .layer(axum::middleware::from_fn_with_state(self.clone(), frame))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                crate::metrics::track,
            ))
            .with_state(self.clone())
    }

    /// Reads a request body, refusing one over `max_request_body_size` with 413.
    async fn read_body(&self, req: Request) -> Result<(HeaderMap, Bytes), Failure> {
        let too_large = || {
            Failure::http(
                StatusCode::PAYLOAD_TOO_LARGE,
                "The entity sent with the request exceeds the maximum allowed bytes.",
            )
        };
        let limit = self.cfg.max_request_body_size;
        let (parts, body) = req.into_parts();
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let bytes = http_body_util::Limited::new(body, limit)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    too_large()
                } else {
                    Failure::bad_request("The request body could not be read.")
                }
            })?
            .to_bytes();
        Ok((parts.headers, bytes))
    }

    /// A body parsed by its content type.
    pub(crate) async fn parsed(&self, req: Request) -> Result<(HeaderMap, body::Parsed), Failure> {
        let (headers, bytes) = self.read_body(req).await?;
        let ct = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let parsed = body::parse(ct.as_deref(), &bytes)?;
        Ok((headers, parsed))
    }

    /// Runs `lowstate` with the session token (if any) and forced client (if any), at most
    /// `thread_pool` at once.
    pub(crate) async fn execute(
        &self,
        lowstate: Option<Value>,
        token: Option<&str>,
        client: Option<&str>,
    ) -> Result<Vec<Value>, Failure> {
        let _permit = self
            .limiter
            .acquire()
            .await
            .map_err(|_| Failure::master_down())?;
        self.exec.run(lowstate, token, client).await
    }

    /// `value` as a 200 in `format`, or the failure.
    fn answer(&self, format: Format, result: Result<Value, Failure>) -> Response {
        match result {
            Ok(v) => respond(StatusCode::OK, format, &v),
            Err(f) => f.into_response_as(format, self.cfg.debug),
        }
    }

    /// The ACL filter of an event stream of `session`, when `events_acl` is on.
    fn job_filter(&self, session: &Session) -> Option<JobFilter> {
        self.events_acl
            .as_ref()
            .map(|settings| JobFilter::new(settings.clone(), session))
    }

    /// The session of a request whose endpoint needs one.
    pub(crate) async fn session(&self, headers: &HeaderMap) -> Result<Session, Failure> {
        self.sessions.require(headers).await
    }
}

/// `Cache-Control: private`, which salt-api's `salt_auth` adds to authenticated answers.
fn private(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    resp
}

/// `{"return": elements}`.
fn returns(elements: Vec<Value>) -> Value {
    map([("return", Value::Array(elements))])
}

/// Runs `f` with the negotiated format, answering 406 first when there is none.
macro_rules! negotiated {
    ($api:expr, $headers:expr) => {
        match negotiate($headers) {
            Ok(f) => f,
            Err(e) => return e.into_response_as(Format::Json, $api.cfg.debug),
        }
    };
}

/// `GET /`.
async fn welcome(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    let format = negotiated!(api, &headers);
    let clients = Value::Array(CLIENTS.iter().map(|c| s(*c)).collect());
    respond(
        StatusCode::OK,
        format,
        &map([("return", s("Welcome")), ("clients", clients)]),
    )
}

/// `POST /`.
async fn lowstate(State(api): State<Arc<Api>>, req: Request) -> Response {
    let format = negotiated!(api, req.headers());
    let result = async {
        let session = api.session(req.headers()).await?;
        let (_, parsed) = api.parsed(req).await?;
        let out = api
            .execute(body::lowstate(parsed.data), Some(&session.token), None)
            .await?;
        Ok(returns(out))
    }
    .await;
    private(api.answer(format, result))
}

/// `POST /run`.
async fn run(State(api): State<Arc<Api>>, req: Request) -> Response {
    let format = negotiated!(api, req.headers());
    let result = async {
        let (_, parsed) = api.parsed(req).await?;
        let out = api.execute(body::lowstate(parsed.data), None, None).await?;
        Ok(returns(out))
    }
    .await;
    api.answer(format, result)
}

/// `GET /login`.
async fn login_page(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    let format = negotiated!(api, &headers);
    let mut resp = respond(
        StatusCode::OK,
        format,
        &map([("status", Value::Nil), ("return", s("Please log in"))]),
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Session"),
    );
    resp
}

/// The credentials of a login body: the mapping, or the first element of a list.
fn login_creds(data: Option<Value>) -> Option<Value> {
    match body::lowstate(data)? {
        Value::Array(items) => items
            .into_iter()
            .next()
            .filter(|c| matches!(c, Value::Map(_))),
        m @ Value::Map(_) => Some(m),
        _ => None,
    }
}

/// `POST /login`.
async fn login(State(api): State<Arc<Api>>, req: Request) -> Response {
    let format = negotiated!(api, req.headers());
    let peer = req.extensions().get::<Peer>().copied();
    let secure = api.cfg.tls.is_some();
    let result = async {
        if !api.link.is_running() {
            return Err(Failure::master_down());
        }
        let (_, parsed) = api.parsed(req).await?;
        let refused = || Failure::unauthorized("Could not authenticate using provided credentials");
        let creds = login_creds(parsed.data).ok_or_else(refused)?;
        let username = value::get(&creds, "username")
            .map(halite_output::py_str)
            .unwrap_or_else(|| "None".to_owned());
        if let Some(acl) = &api.cfg.api_acl {
            let ip = peer.map(|p| p.0.ip().to_string()).unwrap_or_default();
            if !acl.allows(&username, &ip) {
                tracing::info!("[api_acl] Authentication failed for user {username} from IP {ip}");
                return Err(Failure::unauthorized(
                    "You are not authorized to access that resource",
                ));
            }
        }
        let _permit = api
            .limiter
            .acquire()
            .await
            .map_err(|_| Failure::master_down())?;
        let token = match api.link.mk_token(&creds).await {
            Ok(t) => t,
            Err(e) if e.is_authentication() || e.is_authorization() => return Err(refused()),
            Err(e) => return Err(e.into()),
        };
        let id = value::get_str(&token, "token").unwrap_or("").to_owned();
        let expire = session::number(value::get(&token, "expire")).unwrap_or(0.0);
        let field = |k: &str| value::get(&token, k).cloned().unwrap_or(Value::Nil);
        let perms = session::perms(api.link.config().get("external_auth"), &token);
        let body = returns(vec![map([
            ("token", s(id.clone())),
            ("expire", field("expire")),
            ("start", field("start")),
            ("user", field("name")),
            ("eauth", field("eauth")),
            ("perms", perms),
        ])]);
        Ok((id, expire, body))
    }
    .await;
    match result {
        Ok((id, expire, body)) => {
            let mut resp = respond(StatusCode::OK, format, &body);
            let h = resp.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&id) {
                h.insert("x-auth-token", v);
            }
            if let Ok(v) = HeaderValue::from_str(&session::session_cookie(&id, expire, secure)) {
                h.insert(header::SET_COOKIE, v);
            }
            resp
        }
        Err(f) => f.into_response_as(format, api.cfg.debug),
    }
}

/// `POST /logout`: the master is asked to remove the token (`rm_token`), and this process
/// refuses it from now on whatever the master answers.
async fn logout(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    let format = negotiated!(api, &headers);
    let session = match api.session(&headers).await {
        Ok(s) => s,
        Err(f) => return f.into_response_as(format, api.cfg.debug),
    };
    api.sessions.revoke(&session.token, session.expire());
    if let Err(e) = api.link.rm_token(&session.token).await {
        tracing::warn!("Logout: the master could not be asked to remove the token: {e}");
    }
    let mut resp = private(respond(
        StatusCode::OK,
        format,
        &map([("return", s("Your token has been cleared"))]),
    ));
    if let Ok(v) = HeaderValue::from_str(&session::expired_cookie(api.cfg.tls.is_some())) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// The chunk `GET /minions[/<mid>]` runs.
async fn grains(api: Arc<Api>, headers: HeaderMap, mid: Option<String>) -> Response {
    let format = negotiated!(api, &headers);
    let result = async {
        let session = api.session(&headers).await?;
        let chunk = map([
            ("client", s("local")),
            ("tgt", s(mid.unwrap_or_else(|| "*".to_owned()))),
            ("fun", s("grains.items")),
        ]);
        let out = api
            .execute(Some(Value::Array(vec![chunk])), Some(&session.token), None)
            .await?;
        Ok(returns(out))
    }
    .await;
    private(api.answer(format, result))
}

/// `GET /minions`.
async fn minions(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    grains(api, headers, None).await
}

/// `GET /minions/<mid>`.
async fn minion(
    State(api): State<Arc<Api>>,
    Path(mid): Path<String>,
    headers: HeaderMap,
) -> Response {
    grains(api, headers, Some(mid)).await
}

/// `POST /minions`: `local_async`, 202 with links to the jobs.
async fn minions_post(State(api): State<Arc<Api>>, req: Request) -> Response {
    let format = negotiated!(api, req.headers());
    let result = async {
        let session = api.session(req.headers()).await?;
        let (_, parsed) = api.parsed(req).await?;
        api.execute(
            body::lowstate(parsed.data),
            Some(&session.token),
            Some("local_async"),
        )
        .await
    }
    .await;
    match result {
        Ok(jobs) => {
            let links: Vec<Value> = jobs
                .iter()
                .filter_map(|j| value::get_str(j, "jid"))
                .map(|jid| map([("href", s(format!("/jobs/{jid}")))]))
                .collect();
            let body = map([
                ("return", Value::Array(jobs)),
                ("_links", map([("jobs", Value::Array(links))])),
            ]);
            private(respond(StatusCode::ACCEPTED, format, &body))
        }
        Err(f) => private(f.into_response_as(format, api.cfg.debug)),
    }
}

/// `GET /jobs[/<jid>]`: runner `jobs.list_jobs`, or `jobs.list_job` with the returns
/// picked out of its `Result`.
async fn job_list(api: Arc<Api>, headers: HeaderMap, jid: Option<String>) -> Response {
    let format = negotiated!(api, &headers);
    let result = async {
        let session = api.session(&headers).await?;
        let chunk = match &jid {
            Some(j) => map([
                ("client", s("runner")),
                ("fun", s("jobs.list_job")),
                ("jid", s(j.clone())),
            ]),
            None => map([("client", s("runner")), ("fun", s("jobs.list_jobs"))]),
        };
        let out = api
            .execute(Some(Value::Array(vec![chunk])), Some(&session.token), None)
            .await?;
        let first = out.into_iter().next().unwrap_or(Value::Nil);
        if jid.is_none() {
            return Ok(returns(vec![first]));
        }
        let minion_ret: Vec<(Value, Value)> = match value::get(&first, "Result") {
            Some(Value::Map(results)) => results
                .iter()
                .map(|(mid, r)| {
                    (
                        mid.clone(),
                        value::get(r, "return").cloned().unwrap_or(Value::Nil),
                    )
                })
                .collect(),
            _ => vec![],
        };
        Ok(map([
            ("info", Value::Array(vec![first])),
            ("return", Value::Array(vec![Value::Map(minion_ret)])),
        ]))
    }
    .await;
    private(api.answer(format, result))
}

/// `GET /jobs`.
async fn jobs(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    job_list(api, headers, None).await
}

/// `GET /jobs/<jid>`.
async fn job(State(api): State<Arc<Api>>, Path(jid): Path<String>, headers: HeaderMap) -> Response {
    job_list(api, headers, Some(jid)).await
}

/// `GET /keys[/<mid>]`: wheel `key.list_all` or `key.finger`; `return` is the wheel's
/// return itself. Without a session the chunk has no credentials (401).
async fn key_list(api: Arc<Api>, headers: HeaderMap, mid: Option<String>) -> Response {
    let format = negotiated!(api, &headers);
    let result = async {
        let token = match presented_token(&headers) {
            Some(t) => api.sessions.check(&t).await?.map(|s| s.token),
            None => None,
        };
        let chunk = match mid {
            Some(m) => map([
                ("client", s("wheel")),
                ("fun", s("key.finger")),
                ("match", s(m)),
            ]),
            None => map([("client", s("wheel")), ("fun", s("key.list_all"))]),
        };
        let out = api
            .execute(Some(Value::Array(vec![chunk])), token.as_deref(), None)
            .await?;
        let ret = out
            .first()
            .and_then(|r| value::get(r, "data"))
            .and_then(|d| value::get(d, "return"))
            .cloned()
            .unwrap_or(Value::Map(vec![]));
        Ok(map([("return", ret)]))
    }
    .await;
    api.answer(format, result)
}

/// `GET /keys`.
async fn keys(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    key_list(api, headers, None).await
}

/// `GET /keys/<mid>`.
async fn key(State(api): State<Arc<Api>>, Path(mid): Path<String>, headers: HeaderMap) -> Response {
    key_list(api, headers, Some(mid)).await
}

/// `POST /token`: a token per chunk, as a bare list.
async fn token(State(api): State<Arc<Api>>, req: Request) -> Response {
    let format = negotiated!(api, req.headers());
    let result = async {
        let (_, parsed) = api.parsed(req).await?;
        let Some(Value::Array(chunks)) = body::lowstate(parsed.data) else {
            return Err(Failure::bad_request("Lowstates must be a list"));
        };
        let required = "Require \"username\", \"password\", and \"eauth\" params";
        if chunks.iter().any(|c| {
            ["username", "password", "eauth"]
                .iter()
                .any(|k| value::get(c, k).is_none())
        }) {
            return Err(Failure::bad_request(required));
        }
        if !api.link.is_running() {
            return Err(Failure::master_down());
        }
        let _permit = api
            .limiter
            .acquire()
            .await
            .map_err(|_| Failure::master_down())?;
        let mut out = Vec::new();
        for creds in &chunks {
            let fields = map(["username", "password", "eauth"]
                .map(|k| (k, value::get(creds, k).cloned().unwrap_or(Value::Nil))));
            match api.link.mk_token(&fields).await {
                Ok(t) => out.push(t),
                Err(e) if e.is_authentication() || e.is_authorization() => {
                    return Err(Failure::unauthorized(
                        "Could not authenticate using provided credentials",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Value::Array(out))
    }
    .await;
    api.answer(format, result)
}

/// `GET /events`.
async fn events(State(api): State<Arc<Api>>, req: Request) -> Response {
    let headers = req.headers().clone();
    let mut filter = TagFilter::All;
    if let Some(query) = req.uri().query() {
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if k == "tag" {
                filter = TagFilter::glob(&v);
            } else {
                return error_page(
                    StatusCode::BAD_REQUEST,
                    "The /events endpoint takes no query parameters other than Halite's \
                     'tag' filter; in particular, tokens must not be passed via the query \
                     string -- they end up in access logs and the Referer header. Use the \
                     'X-Auth-Token' header (for non-browser clients) or the session cookie \
                     set by /login (for browser EventSource clients) instead.",
                    None,
                );
            }
        }
    }
    let session = match api.session(&headers).await {
        Ok(s) => s,
        Err(f) => return f.into_response_as(Format::Json, api.cfg.debug),
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(events::CLIENT_QUEUE);
    let spec = StreamSpec {
        filter,
        after,
        acl: api.job_filter(&session),
        session,
        keepalive: api.cfg.sse_keepalive,
        wire: Wire::Sse,
    };
    let task_api = api.clone();
    tokio::spawn(async move {
        let streams = &task_api.stats.streams;
        streams.fetch_add(1, Ordering::Relaxed);
        let _held = Held(streams);
        events::serve(
            task_api.hub.clone(),
            task_api.sessions.clone(),
            spec,
            tx,
            task_api.shutdown.clone(),
        )
        .await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream;charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// `GET /ws`: the session of the request.
async fn ws_session(
    State(api): State<Arc<Api>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    req: Request,
) -> Response {
    let token = presented_token(req.headers());
    ws_events(api, upgrade, req, token).await
}

/// `GET /ws/<token>`.
async fn ws_token(
    State(api): State<Arc<Api>>,
    Path(token): Path<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    req: Request,
) -> Response {
    ws_events(api, upgrade, req, Some(token)).await
}

/// `/ws` (see [`crate::ws`]): the handshake (400), the session (401), then the stream.
async fn ws_events(
    api: Arc<Api>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    req: Request,
    token: Option<String>,
) -> Response {
    let upgrade = match upgrade {
        Ok(u) => u,
        Err(rejection) => {
            return error_page(StatusCode::BAD_REQUEST, &rejection.body_text(), None);
        }
    };
    let session = match token {
        Some(t) => api
            .sessions
            .check(&t)
            .await
            .and_then(|s| s.ok_or_else(Failure::no_session)),
        None => Err(Failure::no_session()),
    };
    let session = match session {
        Ok(s) => s,
        Err(f) => return f.into_response_as(Format::Json, api.cfg.debug),
    };
    let mut filter = TagFilter::All;
    let mut format_events = false;
    let mut ids = false;
    let mut after = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(query) = req.uri().query() {
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "format_events" => format_events = true,
                "tag" => filter = TagFilter::glob(&v),
                "ids" => ids = true,
                "last_event_id" => after = v.trim().parse::<u64>().ok().or(after),
                _ => {}
            }
        }
    }
    let spec = crate::ws::WsSpec {
        stream: StreamSpec {
            filter,
            after,
            acl: api.job_filter(&session),
            keepalive: None,
            wire: Wire::Ws {
                ids: ids && !format_events,
            },
            session: session.clone(),
        },
        format_events,
        ping: api.cfg.sse_keepalive,
    };
    let task_api = api.clone();
    upgrade
        .max_message_size(crate::ws::MAX_MESSAGE)
        .max_frame_size(crate::ws::MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            let streams = &task_api.stats.streams;
            streams.fetch_add(1, Ordering::Relaxed);
            let _held = Held(streams);
            let grains_api = task_api.clone();
            let token = session.token;
            let grains = move |ids: Vec<String>| {
                let api = grains_api.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    let chunk = map([
                        ("client", s("local")),
                        (
                            "tgt",
                            Value::Array(ids.into_iter().map(Value::from).collect()),
                        ),
                        ("tgt_type", s("list")),
                        ("fun", s("grains.items")),
                    ]);
                    let lowstate = Some(Value::Array(vec![chunk]));
                    if let Err(f) = api.execute(lowstate, Some(&token), None).await {
                        tracing::debug!("/ws format_events: grains.items of new minions: {f:?}");
                    }
                });
            };
            crate::ws::serve_socket(
                socket,
                task_api.hub.clone(),
                task_api.sessions.clone(),
                spec,
                grains,
                task_api.shutdown.clone(),
            )
            .await;
        })
}

/// `GET /stats`.
async fn stats(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    let format = negotiated!(api, &headers);
    if !api.cfg.stats_disable_auth {
        if let Err(f) = api.session(&headers).await {
            return f.into_response_as(format, api.cfg.debug);
        }
    }
    let st = &api.stats;
    let uptime = st.start.elapsed().as_secs_f64();
    let total = st.total.load(Ordering::Relaxed);
    let body = map([(
        "Halite API",
        map([
            ("Enabled", Value::Boolean(true)),
            (
                "Server Version",
                s(format!("halite-api {}", env!("CARGO_PKG_VERSION"))),
            ),
            ("Start Time", Value::F64(st.start_epoch)),
            ("Current Time", Value::F64(session::unix_now())),
            ("Uptime", Value::F64(uptime)),
            ("Total Requests", Value::from(total)),
            (
                "Current Requests",
                Value::from(st.current.load(Ordering::Relaxed) as u64),
            ),
            (
                "Requests/Second",
                Value::F64(if uptime > 0.0 {
                    total as f64 / uptime
                } else {
                    0.0
                }),
            ),
            (
                "Event Streams",
                Value::from(st.streams.load(Ordering::Relaxed) as u64),
            ),
        ]),
    )]);
    private(respond(StatusCode::OK, format, &body))
}

/// `POST /<webhook_url>[/<path>]`: fires `salt/netapi/hook[/<path>]` with the body, the
/// parsed body and the request headers, less `X-Auth-Token` and `Cookie`.
async fn hook(api: Arc<Api>, req: Request, rest: &str) -> Response {
    let format = negotiated!(api, req.headers());
    let peer = req.extensions().get::<Peer>().copied();
    let result = async {
        if !api.cfg.webhook_disable_auth {
            api.session(req.headers()).await?;
        }
        let (headers, parsed) = api.parsed(req).await?;
        let mut tag = "salt/netapi/hook".to_owned();
        for segment in rest.split('/').filter(|p| !p.is_empty()) {
            tag.push('/');
            tag.push_str(&percent_decode(segment));
        }
        let mut fields: Vec<(Value, Value)> = Vec::new();
        for (name, v) in &headers {
            if matches!(name.as_str(), "x-auth-token" | "cookie") {
                continue;
            }
            let key = s(title_case(name.as_str()));
            let val = s(String::from_utf8_lossy(v.as_bytes()).into_owned());
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => {
                    let joined = format!(
                        "{}, {}",
                        value::str_of(&slot.1).unwrap_or(""),
                        value::str_of(&val).unwrap_or("")
                    );
                    slot.1 = s(joined);
                }
                None => fields.push((key, val)),
            }
        }
        if let Some(p) = peer {
            fields.push((s("Remote-Addr"), s(p.0.ip().to_string())));
        }
        let post = match parsed.data {
            Some(d) if value::truthy(&d) => d,
            _ => Value::Map(vec![]),
        };
        let data = map([
            ("body", s(parsed.raw)),
            ("post", post),
            ("headers", Value::Map(fields)),
        ]);
        let success = match api.link.bus().fire(&tag, data).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("Cannot fire {tag}: {e}");
                false
            }
        };
        Ok(map([("success", Value::Boolean(success))]))
    }
    .await;
    private(api.answer(format, result))
}

/// `content-type` as `Content-Type` (how CherryPy names request headers).
fn title_case(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(first) => first.to_uppercase().chain(c).collect::<String>(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A URL path segment with `%XX` escapes decoded (invalid UTF-8 replaced).
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |j: usize| bytes.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is `base` or below it.
fn under<'a>(path: &'a str, base: &str) -> Option<&'a str> {
    if base == "/" {
        return Some(path);
    }
    let rest = path.strip_prefix(base)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Everything the route table does not name: the webhook, static files, the app; else 404.
async fn fallback(State(api): State<Arc<Api>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if let Some(rest) = under(&path, &format!("/{}", api.cfg.webhook_url)) {
        if req.method() == Method::POST {
            return hook(api, req, rest).await;
        }
        return method_not_allowed("POST");
    }
    if req.method() == Method::GET || req.method() == Method::HEAD {
        if let (Some(dir), Some(rest)) = (&api.cfg.static_dir, under(&path, &api.cfg.static_path)) {
            return static_file(dir, rest).await;
        }
        if api.cfg.app.is_some() && under(&path, &api.cfg.app_path).is_some() {
            return app_page(&api).await;
        }
    }
    not_found(&path)
}

/// The 404 page for `path`.
fn not_found(path: &str) -> Response {
    error_page(
        StatusCode::NOT_FOUND,
        &format!("The path '{path}' was not found."),
        None,
    )
}

/// 405 with `Allow`.
fn method_not_allowed(allow: &'static str) -> Response {
    let mut resp = error_page(
        StatusCode::METHOD_NOT_ALLOWED,
        "Specified method is invalid for this resource",
        None,
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// The `app` file as `text/html`.
async fn app_page(api: &Api) -> Response {
    let Some(app) = &api.cfg.app else {
        return not_found(&api.cfg.app_path);
    };
    match tokio::fs::read(app).await {
        Ok(bytes) => {
            let mut resp = Response::new(Body::from(bytes));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html;charset=utf-8"),
            );
            resp
        }
        Err(e) => {
            tracing::warn!("Cannot read the app file {}: {e}", app.display());
            not_found(&api.cfg.app_path)
        }
    }
}

/// A file of the `static` directory: `rest` is the path below `static_path`; `..` and
/// hidden components are refused, and so is anything that is not a regular file.
async fn static_file(dir: &std::path::Path, rest: &str) -> Response {
    let mut path = dir.to_path_buf();
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        let part = percent_decode(part);
        if part.starts_with('.') || part.contains('/') || part.contains('\0') {
            return not_found(rest);
        }
        path.push(part);
    }
    match tokio::fs::metadata(&path).await {
        Ok(m) if m.is_file() => {}
        _ => return not_found(rest),
    }
    match tokio::fs::read(&path).await {
        Ok(bytes) => {
            let mut resp = Response::new(Body::from(bytes));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(content_type_of(&path)),
            );
            resp
        }
        Err(_) => not_found(rest),
    }
}

/// A `Content-Type` for a static file, by extension.
fn content_type_of(path: &std::path::Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("html" | "htm") => "text/html;charset=utf-8",
        Some("js" | "mjs") => "text/javascript;charset=utf-8",
        Some("css") => "text/css;charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("ico") => "image/x-icon",
        Some("txt") => "text/plain;charset=utf-8",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        _ => "application/octet-stream",
    }
}

/// What every request goes through: counters, `authorized_ips`, CORS (preflights answered
/// here), the app for browser navigation, and CherryPy-style pages for bare 405s.
async fn frame(State(api): State<Arc<Api>>, req: Request, next: Next) -> Response {
    api.stats.total.fetch_add(1, Ordering::Relaxed);
    api.stats.current.fetch_add(1, Ordering::Relaxed);
    let _held = Held(&api.stats.current);
    let origin = req.headers().get(header::ORIGIN).cloned();
    let mut resp = dispatch(&api, req, next).await;
    let h = resp.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        origin.unwrap_or_else(|| HeaderValue::from_static("*")),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("X-Auth-Token"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    resp
}

async fn dispatch(api: &Arc<Api>, req: Request, next: Next) -> Response {
    if let Some(allowed) = &api.cfg.authorized_ips {
        let ip = req
            .extensions()
            .get::<Peer>()
            .map(|p| p.0.ip().to_string())
            .unwrap_or_default();
        if !allowed.contains(&ip) {
            tracing::error!("Blocked IP: {ip}");
            return error_page(StatusCode::FORBIDDEN, "Bad IP", None);
        }
    }
    if req.method() == Method::OPTIONS {
        return preflight(req.headers());
    }
    if api.cfg.app.is_some() && req.method() == Method::GET && wants_app(&api.cfg, &req) {
        return app_page(api).await;
    }
    let resp = next.run(req).await;
    if resp.status() == StatusCode::METHOD_NOT_ALLOWED
        && !resp.headers().contains_key(header::CONTENT_TYPE)
    {
        let allow = resp.headers().get(header::ALLOW).cloned();
        let mut page = error_page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Specified method is invalid for this resource",
            None,
        );
        if let Some(a) = allow {
            page.headers_mut().insert(header::ALLOW, a);
        }
        return page;
    }
    resp
}

/// `html_override_tool`: a browser navigating to a path outside `app_path` and
/// `static_path` (its `Accept` prefers `text/html`, and is not exactly `*/*`) gets the app.
fn wants_app(cfg: &ApiConfig, req: &Request) -> bool {
    let path = req.uri().path();
    if under(path, &cfg.app_path).is_some() || under(path, &cfg.static_path).is_some() {
        return false;
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    if accept.is_none_or(|a| a.trim() == "*/*") {
        return false;
    }
    render::accept(
        accept,
        &["text/html", "application/json", "application/x-yaml"],
    ) == Some("text/html")
}

/// The answer to a CORS preflight: 200, empty, with the allowed methods and headers when
/// the requested method is GET or POST.
fn preflight(headers: &HeaderMap) -> Response {
    let mut resp = Response::new(Body::empty());
    let method = headers
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|v| v.to_str().ok());
    if matches!(method, Some("GET" | "POST")) {
        let h = resp.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "Content-Type, X-Auth-Token, X-Requested-With, Cache-Control, Last-Event-ID",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("1400"),
        );
    }
    resp.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_title_cased_as_cherrypy_does() {
        assert_eq!(title_case("content-type"), "Content-Type");
        assert_eq!(title_case("x-hub-signature-256"), "X-Hub-Signature-256");
        assert_eq!(title_case("host"), "Host");
    }

    #[test]
    fn path_segments_are_percent_decoded_without_panicking_on_bad_escapes() {
        assert_eq!(percent_decode("a%2Fb%20c"), "a/b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }

    #[test]
    fn under_matches_whole_components() {
        assert_eq!(under("/hook", "/hook"), Some(""));
        assert_eq!(under("/hook/a/b", "/hook"), Some("/a/b"));
        assert_eq!(under("/hooks", "/hook"), None);
        assert_eq!(under("/x", "/"), Some("/x"));
    }

    #[test]
    fn login_credentials_come_from_a_mapping_or_the_first_list_element() {
        let creds = map([("username", s("a"))]);
        assert_eq!(login_creds(Some(creds.clone())), Some(creds.clone()));
        assert_eq!(
            login_creds(Some(Value::Array(vec![creds.clone(), s("x")]))),
            Some(creds)
        );
        assert_eq!(login_creds(None), None);
        assert_eq!(login_creds(Some(s("x"))), None);
        assert_eq!(login_creds(Some(Value::Array(vec![s("x")]))), None);
    }

    #[test]
    fn preflights_allow_get_and_post_only() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_static("POST"),
        );
        let resp = preflight(&h);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()[header::ACCESS_CONTROL_ALLOW_METHODS],
            "GET, POST"
        );
        h.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_static("DELETE"),
        );
        assert!(!preflight(&h)
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_METHODS));
    }

    #[test]
    fn static_types_follow_the_extension() {
        assert_eq!(
            content_type_of(std::path::Path::new("a/b.JS")),
            "text/javascript;charset=utf-8"
        );
        assert_eq!(
            content_type_of(std::path::Path::new("x")),
            "application/octet-stream"
        );
    }
}
