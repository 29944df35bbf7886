//! Read-only views (hostgroups, rules, users, sessions, drift from the file) and operator
//! actions on servers (weight, drain, back online).

use crate::{error, Ctx};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use sluice_core::{Health, Server};
use sluice_runtime::tables;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The reason an operator's drain is recorded with (and the only one `online` clears).
pub const DRAINED: &str = "drained by operator";

#[derive(Serialize)]
pub(crate) struct HostgroupView {
    name: String,
    protocol: &'static str,
    balance: &'static str,
    servers: Vec<String>,
    pool_in_use: u32,
    pool_idle: u32,
    waiting: usize,
    queue_timeouts: u64,
    statements: u64,
    latency_avg_ms: f64,
}

pub(crate) async fn hostgroups(State(ctx): State<Ctx>) -> Json<Vec<HostgroupView>> {
    let rows = tables::hostgroups(&ctx.process.clusters());
    let views = rows
        .into_iter()
        .map(|h| HostgroupView {
            name: h.name.to_string(),
            protocol: h.protocol.as_str(),
            balance: tables::balance_name(h.balance),
            servers: h.servers,
            pool_in_use: h.pool_in_use,
            pool_idle: h.pool_idle,
            waiting: h.waiting,
            queue_timeouts: h.queue_timeouts,
            statements: h.latency.count,
            latency_avg_ms: if h.latency.count == 0 {
                0.0
            } else {
                h.latency.sum * 1000.0 / h.latency.count as f64
            },
        })
        .collect();
    Json(views)
}

#[derive(Serialize)]
pub(crate) struct RuleView {
    name: String,
    protocol: &'static str,
    #[serde(rename = "match")]
    pattern: String,
    hostgroup: String,
    user: Option<String>,
    schema: Option<String>,
    hits: u64,
}

pub(crate) async fn rules(State(ctx): State<Ctx>) -> Json<Vec<RuleView>> {
    let rows = tables::rules(&ctx.process.clusters());
    Json(
        rows.into_iter()
            .map(|r| RuleView {
                name: r.name,
                protocol: r.protocol.as_str(),
                pattern: r.pattern,
                hostgroup: r.hostgroup,
                user: r.user,
                schema: r.schema,
                hits: r.hits,
            })
            .collect(),
    )
}

#[derive(Serialize)]
pub(crate) struct UserView {
    name: String,
    max_connections: u32,
    connections: u32,
}

pub(crate) async fn users(State(ctx): State<Ctx>) -> Json<Vec<UserView>> {
    let users = ctx.rt().users.load();
    let mut v: Vec<UserView> = users
        .all()
        .map(|u| UserView {
            name: u.name.to_string(),
            max_connections: u.max_connections,
            connections: u.connections.load(Relaxed),
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Json(v)
}

#[derive(Serialize)]
pub(crate) struct SessionView {
    id: u32,
    protocol: &'static str,
    user: String,
    client: String,
    connected_s: u64,
    pinned: bool,
    /// Why the session holds its backend connection (`transaction`, `temporary_tables`, ...).
    pinned_by: Vec<&'static str>,
    backend: Option<String>,
    backend_thread: Option<u32>,
    statement: Option<String>,
    statement_ms: Option<u64>,
}

pub(crate) async fn sessions(State(ctx): State<Ctx>) -> Json<Vec<SessionView>> {
    let rows = tables::sessions(&ctx.rt().sessions);
    Json(
        rows.into_iter()
            .map(|h| SessionView {
                id: h.id,
                protocol: h.protocol.as_str(),
                user: h.user,
                client: h.client,
                connected_s: h.connected_s,
                pinned: !h.pinned_by.is_empty(),
                pinned_by: h.pinned_by,
                backend: h.backend,
                backend_thread: h.backend_thread,
                statement: h.statement,
                statement_ms: h.statement_ms,
            })
            .collect(),
    )
}

/// The servers `name` means: every entry with that address (the host: a drain for its
/// maintenance reaches all of its roles), or else the entry of that name (an address added
/// to a second hostgroup has an entry there named `address@hostgroup`).
fn find(ctx: &Ctx, name: &str) -> Result<Vec<Arc<Server>>, Box<Response>> {
    let servers = ctx.servers();
    let mut named: Vec<Arc<Server>> = servers
        .iter()
        .filter(|s| &*s.address == name)
        .cloned()
        .collect();
    if named.is_empty() {
        named.extend(servers.iter().find(|s| &*s.name == name).cloned());
    }
    if named.is_empty() {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            format!("no server {name:?}"),
        )));
    }
    Ok(named)
}

/// The result of an action on `servers`: what each line says, in one JSON answer.
fn done(servers: &[Arc<Server>], line: impl Fn(&Server) -> String) -> Response {
    let lines: Vec<String> = servers.iter().map(|s| line(s)).collect();
    Json(serde_json::json!({ "result": lines.join("; ") })).into_response()
}

#[derive(Deserialize)]
pub(crate) struct WeightParams {
    value: u32,
}

/// `POST /api/servers/{name}/weight?value=N`.
pub(crate) async fn set_weight(
    State(ctx): State<Ctx>,
    Path(name): Path<String>,
    Query(q): Query<WeightParams>,
) -> Response {
    let servers = match find(&ctx, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    done(&servers, |s| {
        let old = s.weight();
        s.set_weight(q.value);
        tracing::info!(server = %s.name, old, new = q.value, "weight changed over the admin API");
        format!("{} weight {} -> {}", s.name, old, q.value)
    })
}

/// The first of `servers` held offline by anything but an operator's drain (the monitor), and
/// why: an operator's action does not override it.
fn held_offline(servers: &[Arc<Server>]) -> Option<(&Server, String)> {
    servers.iter().find_map(|s| match s.health() {
        Health::Offline { reason } if reason != DRAINED => Some((&**s, reason)),
        _ => None,
    })
}

/// `POST /api/servers/{name}/drain`: no new statements; sessions holding a connection there
/// (transactions, locks, temporary tables) finish on it. Nothing changes if one of the
/// servers is offline for the monitor.
pub(crate) async fn drain(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    let servers = match find(&ctx, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Some((s, reason)) = held_offline(&servers) {
        let why = format!("{} is already offline: {reason}", s.name);
        return error(StatusCode::CONFLICT, why);
    }
    done(&servers, |s| {
        s.set_offline(Some(DRAINED.into()));
        tracing::info!(server = %s.name, "server drained over the admin API");
        format!("{} drained", s.name)
    })
}

/// `POST /api/servers/{name}/online`: undoes a drain (never a monitor's verdict: then
/// nothing changes).
pub(crate) async fn online(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    let servers = match find(&ctx, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Some((s, reason)) = held_offline(&servers) {
        let why = format!(
            "{} is offline for the monitor ({reason}); not overridden",
            s.name
        );
        return error(StatusCode::CONFLICT, why);
    }
    done(&servers, |s| match s.health() {
        Health::Offline { .. } => {
            s.set_offline(None);
            tracing::info!(server = %s.name, "server back online over the admin API");
            format!("{} online", s.name)
        }
        _ => format!("{} was online", s.name),
    })
}

/// `POST /api/reload`: re-reads the configuration file and applies it.
pub(crate) async fn reload(State(ctx): State<Ctx>) -> Response {
    match ctx.process.reload_from_file().await {
        Ok(changes) => Json(serde_json::json!({ "result": changes })).into_response(),
        Err(e) => error(StatusCode::CONFLICT, e.to_string()),
    }
}

/// `GET /api/config`: the effective configuration as TOML: the file as last applied, with
/// the runtime weights folded in (so that writing it back ends the drift).
pub(crate) async fn config(State(ctx): State<Ctx>) -> Response {
    let mut cfg = (*ctx.rt().effective.load_full()).clone();
    for (s, server) in cfg.servers.iter_mut().zip(ctx.servers().iter()) {
        s.weight = server.weight();
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        cfg.to_toml(),
    )
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct AddServer {
    address: String,
    hostgroup: Option<String>,
    weight: Option<u32>,
    max_connections: Option<u32>,
    protocol: Option<sluice_config::Protocol>,
}

/// Why a server cannot be added to `hostgroup` (`None`: the monitor would place it) in `c`:
/// a hostgroup is never created by a typo.
fn hostgroup_refusal(c: &sluice_config::Config, hostgroup: Option<&str>) -> Option<String> {
    let mut known = c.hostgroup_names();
    for h in [&c.proxy.writer_hostgroup, &c.proxy.reader_hostgroup] {
        if !known.contains(h) {
            known.push(h.clone());
        }
    }
    let listed = known
        .iter()
        .map(|h| format!("{h:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    match hostgroup {
        None if !c.monitor.enabled => Some(format!(
            "a hostgroup is required: the monitor is disabled, so nothing would place the server (hostgroups: {listed})"
        )),
        None => None,
        Some(h) if known.iter().any(|k| k == h) => None,
        Some(h) => Some(format!(
            "no hostgroup {h:?}; the hostgroups are {listed} (add a [[hostgroups]] entry and reload to make a new one)"
        )),
    }
}

/// `POST /api/servers?address=A[&hostgroup=H][&weight=W][&max_connections=N]`: adds a server
/// at runtime to an existing hostgroup (without one, the monitor places it).
pub(crate) async fn add_server(State(ctx): State<Ctx>, Query(q): Query<AddServer>) -> Response {
    let mut refused = None;
    let result = ctx
        .process
        .change_servers(|c| {
            let protocol = q.protocol.unwrap_or_default();
            if let Some(why) = hostgroup_refusal(&c.for_protocol(protocol), q.hostgroup.as_deref())
            {
                refused = Some(why.clone());
                return Err(why);
            }
            if c.servers.iter().any(|s| {
                s.address == q.address && s.hostgroup == q.hostgroup && s.protocol == protocol
            }) {
                return Err(format!("{} is already configured there", q.address));
            }
            c.servers.push(sluice_config::ServerConfig {
                address: q.address.clone(),
                protocol,
                hostgroup: q.hostgroup.clone(),
                weight: q.weight.unwrap_or(1),
                max_connections: q.max_connections,
                max_replication_lag: None,
                max_replication_lag_bytes: None,
                discovered: None,
            });
            Ok(())
        })
        .await;
    match result {
        Ok(changes) => Json(serde_json::json!({ "result": changes })).into_response(),
        Err(e) if refused.is_some() => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => error(StatusCode::CONFLICT, e.to_string()),
    }
}

/// `DELETE /api/servers/{name}`: removes a server at runtime (it drains; the server taking
/// the writes cannot be removed): every entry with the address given, or the entry of that
/// name (see [`find`]).
pub(crate) async fn remove_server(State(ctx): State<Ctx>, Path(name): Path<String>) -> Response {
    // The entry a name that is no address means: its address and hostgroup.
    let entry = ctx
        .servers()
        .iter()
        .find(|s| *s.name == name && *s.address != name)
        .map(|s| (s.address.to_string(), s.hostgroup()));
    let result = ctx
        .process
        .change_servers(|c| {
            let before = c.servers.len();
            let by_address = c.servers.iter().any(|s| s.address == name);
            c.servers.retain(|s| match &entry {
                _ if by_address => s.address != name,
                Some((address, hostgroup)) => {
                    s.address != *address || s.hostgroup.as_deref() != Some(&**hostgroup)
                }
                None => true,
            });
            if c.servers.len() == before {
                return Err(format!("no server {name:?}"));
            }
            Ok(())
        })
        .await;
    match result {
        Ok(changes) => Json(serde_json::json!({ "result": changes })).into_response(),
        Err(e @ sluice_runtime::ReloadError::Refused(_)) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Err(e) => error(StatusCode::CONFLICT, e.to_string()),
    }
}

/// `GET /api/drift`: runtime changes not in the configuration file.
pub(crate) async fn drift(State(ctx): State<Ctx>) -> Json<Vec<String>> {
    let file = ctx.rt().loaded.load_full();
    let cfg = ctx.rt().effective.load_full();
    let key = |s: &sluice_config::ServerConfig| (s.address.clone(), s.hostgroup.clone());
    let mut out = Vec::new();
    // (Servers `[[discovery]]` found are not drift: the file names their source.)
    for s in cfg.servers.iter().filter(|s| s.discovered.is_none()) {
        if !file.servers.iter().any(|f| key(f) == key(s)) {
            out.push(format!(
                "{}: added over the admin API (file: absent)",
                s.address
            ));
        }
    }
    for f in &file.servers {
        if !cfg.servers.iter().any(|s| key(f) == key(s)) {
            out.push(format!(
                "{}: removed over the admin API (file: present)",
                f.address
            ));
        }
    }
    let configured: HashMap<&str, u32> = cfg
        .servers
        .iter()
        .map(|s| (s.address.as_str(), s.weight))
        .collect();
    for s in ctx.servers().iter() {
        if let Some(w) = configured.get(&*s.address) {
            if *w != s.weight() {
                out.push(format!("{}: weight {} (file: {w})", s.name, s.weight()));
            }
        }
        if matches!(s.health(), Health::Offline { reason } if reason == DRAINED) {
            out.push(format!("{}: drained (file: in service)", s.name));
        }
    }
    Json(out)
}

#[cfg(test)]
mod tests {
    use super::hostgroup_refusal;
    use sluice_config::Config;

    fn config(servers: &str, monitor: bool) -> Config {
        Config::from_toml(&format!(
            "[proxy]\nlisten = \"127.0.0.1:0\"\n[monitor]\nenabled = {monitor}\n[[users]]\nname = \"app\"\npassword = \"app\"\n{servers}"
        ))
        .unwrap()
    }

    #[test]
    fn servers_join_existing_hostgroups_only() {
        let fixed = config(
            "[[servers]]\naddress = \"127.0.0.1:3306\"\nhostgroup = \"writer\"\n[[servers]]\naddress = \"127.0.0.1:3307\"\nhostgroup = \"olap\"\n",
            false,
        );
        assert_eq!(hostgroup_refusal(&fixed, Some("writer")), None);
        assert_eq!(hostgroup_refusal(&fixed, Some("olap")), None);
        // The reader hostgroup is the router's, even while empty.
        assert_eq!(hostgroup_refusal(&fixed, Some("reader")), None);
        let typo = hostgroup_refusal(&fixed, Some("olpa")).expect("refused");
        assert!(
            typo.starts_with(
                "no hostgroup \"olpa\"; the hostgroups are \"writer\", \"olap\", \"reader\""
            ),
            "{typo}"
        );
        let unplaced = hostgroup_refusal(&fixed, None).expect("refused without the monitor");
        assert!(unplaced.contains("monitor is disabled"), "{unplaced}");

        let managed = config("[[servers]]\naddress = \"127.0.0.1:3306\"\n", true);
        assert_eq!(
            hostgroup_refusal(&managed, None),
            None,
            "the monitor places it"
        );
        assert!(hostgroup_refusal(&managed, Some("olap")).is_some());
    }
}
