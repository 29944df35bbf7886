//! sluice's HTTP admin API: what the proxy sees (servers, roles, states, the monitor's
//! events) and what an operator can ask of it (switchover). JSON over HTTP/1.1 on its own
//! bounded listener; every API request carries `Authorization: Bearer <token>` when a token
//! is set.
#![forbid(unsafe_code)]

mod auth;
mod connection_watch;
mod dashboard;
mod http_listener;
pub mod metrics;
mod monitor_view;
mod views;

use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sluice_config::AdminConfig;
use sluice_core::Server;
use sluice_monitor::Monitor;
use sluice_runtime::tables::{self, DigestOrder};
use sluice_runtime::{Process, Runtime};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::UNIX_EPOCH;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

impl Ctx {
    /// The process's shared state.
    pub(crate) fn rt(&self) -> &Runtime {
        &self.process.runtime
    }

    /// Every server of every protocol, each front end's in configuration order.
    pub(crate) fn servers(&self) -> Vec<Arc<Server>> {
        self.process
            .clusters()
            .iter()
            .flat_map(|(_, c)| c.servers().iter().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The monitor (of the first front end that has one).
    /// Every protocol's monitor, in the order of the front ends.
    pub(crate) fn monitors(&self) -> Vec<(sluice_config::Protocol, Arc<Monitor>)> {
        self.process
            .frontends()
            .iter()
            .filter_map(|f| f.monitor().map(|m| (f.protocol(), m.clone())))
            .collect()
    }

    /// The monitor a request is about: the one of `protocol` if given, else the one whose
    /// servers include `server` if given, else the only one (or the first, with several).
    pub(crate) fn monitor_for(
        &self,
        protocol: Option<sluice_config::Protocol>,
        server: Option<&str>,
    ) -> Result<Arc<Monitor>, String> {
        let all = self.monitors();
        if let Some(p) = protocol {
            return all
                .into_iter()
                .find(|(q, _)| *q == p)
                .map(|(_, m)| m)
                .ok_or_else(|| format!("no monitor runs for {}", p.as_str()));
        }
        if let Some(s) = server {
            if let Some((_, m)) = all.iter().find(|(_, m)| m.has_server(s)) {
                return Ok(m.clone());
            }
        }
        all.into_iter()
            .next()
            .map(|(_, m)| m)
            .ok_or_else(|| "the monitor is disabled".to_string())
    }
}

#[derive(Clone)]
pub(crate) struct Ctx {
    process: Arc<Process>,
    token: Option<auth::Token>,
    metrics: Arc<prometheus_client::registry::Registry>,
}

/// A running admin listener.
pub struct Admin {
    /// The bound address.
    pub addr: SocketAddr,
    /// The server task (ends on shutdown, once every connection has).
    pub task: JoinHandle<()>,
}

/// Binds `cfg.listen` and serves the API, within `cfg`'s bounds, until `shutdown` turns true.
pub async fn serve(
    cfg: &AdminConfig,
    process: Arc<Process>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<Admin> {
    let listener = TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    let ctx = Ctx {
        metrics: Arc::new(metrics::registry(process.clone())),
        process,
        token: auth::Token::new(cfg.token.as_deref()),
    };
    let max_body = cfg.max_body_size as usize;
    let app = Router::new()
        .route("/api/servers", get(servers))
        .route("/api/events", get(events))
        .route("/api/monitor", get(monitor_view::monitor))
        .route("/api/switchover", post(switchover))
        .route("/api/digests", get(digests))
        .route("/api/hostgroups", get(views::hostgroups))
        .route("/api/rules", get(views::rules))
        .route("/api/users", get(views::users))
        .route("/api/sessions", get(views::sessions))
        .route("/api/drift", get(views::drift))
        .route("/api/reload", post(views::reload))
        .route("/api/config", get(views::config))
        .route("/api/servers", post(views::add_server))
        .route(
            "/api/servers/{name}",
            axum::routing::delete(views::remove_server),
        )
        .route("/api/servers/{name}/weight", post(views::set_weight))
        .route("/api/servers/{name}/drain", post(views::drain))
        .route("/api/servers/{name}/online", post(views::online))
        .route("/metrics", get(prometheus))
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            auth::require_token,
        ))
        // The dashboard page and script hold no data (the page's requests carry the token).
        .route("/", get(dashboard::html))
        .route("/dashboard.js", get(dashboard::script))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(max_body, limit_body))
        .with_state(ctx);
    tracing::info!(listen = %addr, "admin API listening");
    let limits = http_listener::Limits::of(cfg);
    let task = tokio::spawn(http_listener::serve(listener, app, limits, shutdown));
    Ok(Admin { addr, task })
}

/// Refuses a request whose declared body is over `admin.max_body_size` before anything reads it.
async fn limit_body(
    State(max): State<usize>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > max as u64 => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body of {n} bytes is over admin.max_body_size ({max} bytes)"),
        ),
        _ => next.run(req).await,
    }
}

async fn prometheus(State(ctx): State<Ctx>) -> Response {
    match metrics::render(&ctx.metrics) {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode metrics".into(),
        ),
    }
}

pub(crate) fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// One server as the API shows it.
#[derive(Serialize)]
pub struct ServerView {
    name: String,
    protocol: &'static str,
    address: String,
    hostgroup: String,
    role: &'static str,
    /// `ONLINE`, `SHUNNED (reason)`, `OFFLINE (reason)`.
    state: String,
    weight: u32,
    reachable: bool,
    read_only: Option<bool>,
    lag_seconds: Option<u64>,
    /// Bytes of WAL behind the primary (PostgreSQL standbys).
    lag_bytes: Option<u64>,
    latency_us: Option<u64>,
    replicates_from: Option<String>,
    replication_running: Option<bool>,
    gtid_position: String,
    /// The timeline its WAL is on (PostgreSQL).
    timeline: Option<u32>,
    /// Found by `[[discovery]]`: which source (absent for servers in the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    discovered: Option<String>,
    error: Option<String>,
    pool_in_use: u32,
    pool_idle: u32,
    queries: u64,
    errors: u64,
}

fn server_view(row: sluice_runtime::tables::ServerRow) -> ServerView {
    let (s, o) = (&row.server, row.observed);
    ServerView {
        name: s.name.to_string(),
        protocol: row.protocol.as_str(),
        address: s.address.to_string(),
        hostgroup: s.hostgroup().to_string(),
        role: o.role.as_str(),
        state: s.state_text(),
        weight: s.weight(),
        reachable: o.reachable,
        read_only: o.read_only,
        lag_seconds: o.lag.map(|d| d.as_secs()),
        lag_bytes: o.lag_bytes,
        latency_us: o.rtt.map(|d| d.as_micros() as u64),
        replicates_from: o.source,
        replication_running: o.replication_running,
        timeline: o.timeline,
        discovered: s.discovered.as_deref().map(str::to_string),
        gtid_position: o.position,
        error: o.error,
        pool_in_use: row.pool_in_use,
        pool_idle: row.pool_idle,
        queries: s.stats.queries.load(Relaxed),
        errors: s.stats.errors.load(Relaxed),
    }
}

async fn servers(State(ctx): State<Ctx>) -> Json<Vec<ServerView>> {
    let rows = sluice_runtime::tables::servers(&ctx.process.clusters());
    Json(rows.into_iter().map(server_view).collect())
}

#[derive(Serialize)]
struct EventView {
    /// Milliseconds since the Unix epoch.
    at_ms: u128,
    kind: &'static str,
    message: String,
    /// The protocol of the cluster it is about.
    protocol: &'static str,
}

async fn events(State(ctx): State<Ctx>) -> Response {
    let monitors = ctx.monitors();
    if monitors.is_empty() {
        return error(StatusCode::NOT_FOUND, "the monitor is disabled".into());
    }
    // Every protocol's events, in time order.
    let mut list: Vec<EventView> = monitors
        .iter()
        .flat_map(|(p, m)| {
            m.events.all().into_iter().map(move |e| EventView {
                at_ms: e
                    .at
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0),
                kind: e.kind,
                message: e.message,
                protocol: p.as_str(),
            })
        })
        .collect();
    list.sort_by_key(|e| e.at_ms);
    Json(list).into_response()
}

#[derive(Deserialize)]
struct DigestParams {
    /// Most entries returned (default 100).
    limit: Option<usize>,
    /// `count` (default), `time` (total time), `errors`, `p99`, `rows`.
    sort: Option<String>,
}

/// One digest entry as the API shows it.
#[derive(Serialize)]
struct DigestView {
    /// Digest id, 16 hex digits.
    digest: String,
    text: String,
    user: String,
    schema: String,
    hostgroup: String,
    count: u64,
    total_ms: f64,
    avg_ms: f64,
    min_ms: f64,
    max_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    rows_sent: u64,
    rows_affected: u64,
    errors: u64,
    /// Milliseconds since the Unix epoch.
    first_seen_ms: u128,
    last_seen_ms: u128,
}

async fn digests(State(ctx): State<Ctx>, Query(q): Query<DigestParams>) -> Response {
    let sort = q.sort.as_deref().unwrap_or("count");
    let Some(order) = DigestOrder::parse(sort) else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("sort must be count, time, errors, rows or p99, not {sort:?}"),
        );
    };
    let table = &ctx.rt().digests;
    let all = tables::digests(table, order, q.limit.unwrap_or(100));
    let ms = |us: u64| us as f64 / 1000.0;
    let epoch_ms = |t: std::time::SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    };
    let list: Vec<DigestView> = all
        .iter()
        .map(|e| DigestView {
            digest: format!("{:016x}", e.id),
            text: e.text.to_string(),
            user: e.user.to_string(),
            schema: e.schema.to_string(),
            hostgroup: e.hostgroup.to_string(),
            count: e.count,
            total_ms: ms(e.sum_us),
            avg_ms: ms(e.sum_us / e.count.max(1)),
            min_ms: ms(e.min_us),
            max_ms: ms(e.max_us),
            p50_ms: e.quantile(0.5).as_secs_f64() * 1000.0,
            p99_ms: e.quantile(0.99).as_secs_f64() * 1000.0,
            rows_sent: e.rows_sent,
            rows_affected: e.rows_affected,
            errors: e.errors,
            first_seen_ms: epoch_ms(e.first_seen),
            last_seen_ms: epoch_ms(e.last_seen),
        })
        .collect();
    Json(serde_json::json!({
        "capacity": table.capacity(),
        "entries": table.len(),
        "evicted": table.evicted.load(Relaxed),
        "digests": list,
    }))
    .into_response()
}

#[derive(Deserialize)]
struct SwitchoverParams {
    /// Address or name of the replica to promote (default: the most advanced one).
    to: Option<String>,
    /// Which protocol's cluster (default: the one `to` belongs to, else the first).
    protocol: Option<sluice_config::Protocol>,
}

async fn switchover(State(ctx): State<Ctx>, Query(q): Query<SwitchoverParams>) -> Response {
    let m = match ctx.monitor_for(q.protocol, q.to.as_deref()) {
        Ok(m) => m,
        Err(e) => return error(StatusCode::CONFLICT, e),
    };
    match m.switchover(q.to.as_deref()).await {
        Ok(msg) => Json(serde_json::json!({ "result": msg })).into_response(),
        Err(e) => error(StatusCode::CONFLICT, e),
    }
}
