//! `GET /api/monitor`: the monitor's own state — whether failover is possible and, if not,
//! why; the last failed attempt; what it is still repairing.

use crate::{error, Ctx};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

#[derive(Serialize)]
struct RepairView {
    server: String,
    action: &'static str,
    attempts: u32,
    last_error: Option<String>,
}

#[derive(Serialize)]
struct MonitorView {
    /// The server the monitor considers the primary (it may be unreachable).
    primary: Option<String>,
    failover_enabled: bool,
    /// Why failover would be refused now, if it would.
    failover_refused: Option<String>,
    /// Problems with the monitor user's privileges, per server.
    warnings: Vec<String>,
    last_failover_error: Option<String>,
    failover_attempts: u32,
    next_failover_in_ms: Option<u64>,
    repairs: Vec<RepairView>,
    failovers: u64,
    switchovers: u64,
}

/// `?protocol=`: which protocol's monitor (default: the first front end's).
#[derive(serde::Deserialize)]
pub(crate) struct MonitorParams {
    protocol: Option<sluice_config::Protocol>,
}

pub(crate) async fn monitor(
    State(ctx): State<Ctx>,
    axum::extract::Query(q): axum::extract::Query<MonitorParams>,
) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let m = match ctx.monitor_for(q.protocol, None) {
        Ok(m) => m,
        Err(e) => return error(StatusCode::NOT_FOUND, e),
    };
    let s = m.status();
    Json(MonitorView {
        primary: m.primary().map(|p| p.name.to_string()),
        failover_enabled: s.failover_enabled,
        failover_refused: s.failover_refused,
        warnings: s.warnings,
        last_failover_error: s.last_failover_error,
        failover_attempts: s.failover_attempts,
        next_failover_in_ms: s.next_failover_in_ms,
        repairs: s
            .repairs
            .into_iter()
            .map(|r| RepairView {
                server: r.server,
                action: r.action,
                attempts: r.attempts,
                last_error: r.last_error,
            })
            .collect(),
        failovers: m.stats.failovers.load(Relaxed),
        switchovers: m.stats.switchovers.load(Relaxed),
    })
    .into_response()
}
