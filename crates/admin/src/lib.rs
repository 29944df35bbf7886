//! sluice's HTTP admin API: what the proxy sees (servers, roles, states, the monitor's
//! events) and what an operator can ask of it (switchover). JSON over HTTP/1.1 on its own
//! listener; every request carries `Authorization: Bearer <token>` when a token is set.
#![forbid(unsafe_code)]

pub mod metrics;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sluice_core::Server;
use sluice_mysql::Proxy;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::UNIX_EPOCH;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone)]
struct Ctx {
    proxy: Arc<Proxy>,
    token: Option<Arc<str>>,
    metrics: Arc<prometheus_client::registry::Registry>,
}

/// A running admin listener.
pub struct Admin {
    /// The bound address.
    pub addr: SocketAddr,
    /// The server task (ends on shutdown).
    pub task: JoinHandle<()>,
}

/// Binds `listen` and serves the API until `shutdown` turns true.
pub async fn serve(
    listen: &str,
    token: Option<String>,
    proxy: Arc<Proxy>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<Admin> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let ctx = Ctx {
        metrics: Arc::new(metrics::registry(proxy.clone())),
        proxy,
        token: token.filter(|t| !t.is_empty()).map(Arc::from),
    };
    let app = Router::new()
        .route("/api/servers", get(servers))
        .route("/api/events", get(events))
        .route("/api/switchover", post(switchover))
        .route("/metrics", get(prometheus))
        .layer(middleware::from_fn_with_state(ctx.clone(), auth))
        .with_state(ctx);
    tracing::info!(listen = %addr, "admin API listening");
    let task = tokio::spawn(async move {
        let stop = async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::warn!(error = %e, "admin API stopped");
        }
    });
    Ok(Admin { addr, task })
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

async fn auth(State(ctx): State<Ctx>, headers: HeaderMap, req: Request, next: Next) -> Response {
    if let Some(token) = &ctx.token {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(&**token) {
            return error(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token".into(),
            );
        }
    }
    next.run(req).await
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// One server as the API shows it.
#[derive(Serialize)]
pub struct ServerView {
    name: String,
    address: String,
    hostgroup: String,
    role: &'static str,
    /// `ONLINE`, `SHUNNED (reason)`, `OFFLINE (reason)`.
    state: String,
    weight: u32,
    reachable: bool,
    read_only: Option<bool>,
    lag_seconds: Option<u64>,
    latency_us: Option<u64>,
    replicates_from: Option<String>,
    replication_running: Option<bool>,
    gtid_position: String,
    error: Option<String>,
    pool_in_use: u32,
    pool_idle: u32,
    queries: u64,
    errors: u64,
}

fn server_view(proxy: &Proxy, s: &Arc<Server>) -> ServerView {
    let o = s.observed();
    let (mut in_use, mut idle) = (0, 0);
    for hg in &proxy.topology.hostgroups {
        for p in hg.pool_stats() {
            if Arc::ptr_eq(&p.server, s) {
                in_use += p.in_use;
                idle += p.idle;
            }
        }
    }
    ServerView {
        name: s.name.to_string(),
        address: s.address.to_string(),
        hostgroup: s.hostgroup().to_string(),
        role: o.role.as_str(),
        state: s.state_text(),
        weight: s.weight(),
        reachable: o.reachable,
        read_only: o.read_only,
        lag_seconds: o.lag.map(|d| d.as_secs()),
        latency_us: o.rtt.map(|d| d.as_micros() as u64),
        replicates_from: o.source,
        replication_running: o.replication_running,
        gtid_position: o.position,
        error: o.error,
        pool_in_use: in_use,
        pool_idle: idle,
        queries: s.stats.queries.load(Relaxed),
        errors: s.stats.errors.load(Relaxed),
    }
}

async fn servers(State(ctx): State<Ctx>) -> Json<Vec<ServerView>> {
    let p = &ctx.proxy;
    Json(p.topology.all.iter().map(|s| server_view(p, s)).collect())
}

#[derive(Serialize)]
struct EventView {
    /// Milliseconds since the Unix epoch.
    at_ms: u128,
    kind: &'static str,
    message: String,
}

async fn events(State(ctx): State<Ctx>) -> Response {
    let Some(m) = &ctx.proxy.monitor else {
        return error(StatusCode::NOT_FOUND, "the monitor is disabled".into());
    };
    let list: Vec<EventView> = m
        .events
        .all()
        .into_iter()
        .map(|e| EventView {
            at_ms: e
                .at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            kind: e.kind,
            message: e.message,
        })
        .collect();
    Json(list).into_response()
}

#[derive(Deserialize)]
struct SwitchoverParams {
    /// Address or name of the replica to promote (default: the most advanced one).
    to: Option<String>,
}

async fn switchover(State(ctx): State<Ctx>, Query(q): Query<SwitchoverParams>) -> Response {
    let Some(m) = &ctx.proxy.monitor else {
        return error(StatusCode::CONFLICT, "the monitor is disabled".into());
    };
    match m.switchover(q.to.as_deref()).await {
        Ok(msg) => Json(serde_json::json!({ "result": msg })).into_response(),
        Err(e) => error(StatusCode::CONFLICT, e),
    }
}
