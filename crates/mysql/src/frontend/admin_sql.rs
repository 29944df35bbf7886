//! The MySQL-protocol admin listener (`[admin] sql_listen`), for people who live in the
//! `mysql` client: `SHOW SERVERS`, `SHOW POOLS`, `SHOW SESSIONS`, `SHOW DIGESTS`,
//! `SHOW RULES`, `SHOW HOSTGROUPS` answer with the same data as the HTTP API (both render
//! the rows of `sluice_runtime::tables`). Only the admin
//! user (`[admin] sql_user` / `sql_password`) logs in; no statement reaches a server.

use super::client::ClientConn;
use super::handshake::HandshakeContext;
use super::login::{self, Admission};
use crate::front::MysqlFrontend;
use crate::wire::consts::{cap, status};
use crate::wire::resultset::column_type;
use crate::wire::resultset::{write_resultset, Column};
use sluice_core::connecting::Connecting;
use sluice_core::{Cluster, Protocol};
use sluice_runtime::tables;
use sluice_runtime::users::Users;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::UNIX_EPOCH;
use tokio::net::TcpStream;

/// The commands, and what each shows.
pub const COMMANDS: &[&str] = &[
    "SHOW SERVERS",
    "SHOW POOLS",
    "SHOW HOSTGROUPS",
    "SHOW SESSIONS",
    "SHOW DIGESTS",
    "SHOW RULES",
];

/// A result set: column names (all text unless listed as numeric) and rows.
struct Table {
    columns: Vec<&'static str>,
    numeric: Vec<&'static str>,
    rows: Vec<Vec<Option<String>>>,
}

/// Serves one admin client.
pub async fn serve(
    proxy: Arc<MysqlFrontend>,
    users: Arc<Users>,
    stream: TcpStream,
    peer: SocketAddr,
    admission: Arc<Admission>,
    place: Connecting,
) {
    let mut client = ClientConn::new(stream, 1 << 20);
    let version = proxy.announced_version();
    let cx = HandshakeContext {
        tls: None,
        users: &users,
        server_version: &version,
        connection_id: proxy.rt.sessions.next_id(),
        peer,
        default_plugin: proxy.rt.config.mysql.default_auth_plugin.name(),
        throttle: &proxy.rt.throttle,
    };
    let timeout = proxy.rt.effective.load().login.handshake_timeout.get();
    let (auth, _permit) = match login::admit(&mut client, &cx, &admission, place, timeout).await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "admin SQL client not admitted");
            return;
        }
    };
    let st = status::AUTOCOMMIT;
    if client.send_ok(auth.next_seq, st).await.is_err() {
        return;
    }
    tracing::info!(%peer, user = %auth.user.name, "admin SQL session");
    loop {
        let Ok(pkt) = client.read_command().await else {
            return;
        };
        let seq = pkt.last_seq.wrapping_add(1);
        let (cmd, body) = match pkt.payload.split_first() {
            Some((c, b)) => (*c, b),
            None => return,
        };
        let result = match cmd {
            0x01 => return,                               // COM_QUIT
            0x0e | 0x02 => client.send_ok(seq, st).await, // COM_PING, COM_INIT_DB
            0x03 => match table(&proxy, body) {
                Ok(t) => {
                    let cols: Vec<Column<'_>> = t
                        .columns
                        .iter()
                        .map(|name| Column {
                            name,
                            kind: if t.numeric.contains(name) {
                                column_type::LONGLONG
                            } else {
                                column_type::VAR_STRING
                            },
                        })
                        .collect();
                    let (deprecate, tracks) = (
                        client.has(cap::DEPRECATE_EOF),
                        client.has(cap::SESSION_TRACK),
                    );
                    write_resultset(&mut client.wbuf, &cols, &t.rows, st, deprecate, tracks);
                    client.flush().await
                }
                Err(msg) => client.send_err(seq, 1047, b"08S01", &msg).await,
            },
            _ => {
                client
                    .send_err(
                        seq,
                        1047,
                        b"08S01",
                        "sluice admin: only text queries are understood here",
                    )
                    .await
            }
        };
        if result.is_err() {
            return;
        }
    }
}

/// The statement, upper-cased, whitespace collapsed, without a trailing `;`.
fn normalise(sql: &[u8]) -> String {
    String::from_utf8_lossy(sql)
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase()
}

fn table(proxy: &MysqlFrontend, sql: &[u8]) -> Result<Table, String> {
    let s = |v: &dyn ToString| Some(v.to_string());
    let clusters = [(Protocol::Mysql, proxy.topology.clone() as Arc<dyn Cluster>)];
    Ok(match normalise(sql).as_str() {
        "SHOW SERVERS" => Table {
            columns: vec![
                "server",
                "hostgroup",
                "role",
                "state",
                "weight",
                "reachable",
                "read_only",
                "lag_s",
                "latency_us",
                "replicates_from",
                "gtid_position",
                "queries",
                "errors",
            ],
            numeric: vec!["weight", "lag_s", "latency_us", "queries", "errors"],
            rows: tables::servers(&clusters)
                .into_iter()
                .map(|row| {
                    let (srv, o) = (&row.server, row.observed);
                    vec![
                        s(&srv.name),
                        s(&srv.hostgroup()),
                        s(&o.role.as_str()),
                        s(&srv.state_text()),
                        s(&srv.weight()),
                        s(&yes(o.reachable)),
                        o.read_only.map(yes).map(String::from),
                        o.lag.map(|l| l.as_secs().to_string()),
                        o.rtt.map(|d| d.as_micros().to_string()),
                        o.source.clone(),
                        Some(o.position.clone()),
                        s(&srv.stats.queries.load(Relaxed)),
                        s(&srv.stats.errors.load(Relaxed)),
                    ]
                })
                .collect(),
        },
        "SHOW POOLS" => Table {
            columns: vec![
                "hostgroup",
                "server",
                "in_use",
                "idle",
                "open",
                "max_connections",
            ],
            numeric: vec!["in_use", "idle", "open", "max_connections"],
            rows: tables::pools(&clusters)
                .iter()
                .map(|row| {
                    let p = &row.stats;
                    vec![
                        s(&row.hostgroup),
                        s(&p.server.name),
                        s(&p.in_use),
                        s(&p.idle),
                        s(&p.open),
                        s(&p.server.max_connections()),
                    ]
                })
                .collect(),
        },
        "SHOW HOSTGROUPS" => Table {
            columns: vec![
                "hostgroup",
                "servers",
                "waiting",
                "queue_timeouts",
                "statements",
            ],
            numeric: vec!["waiting", "queue_timeouts", "statements"],
            rows: tables::hostgroups(&clusters)
                .iter()
                .map(|h| {
                    vec![
                        s(&h.name),
                        Some(h.servers.join(",")),
                        s(&h.waiting),
                        s(&h.queue_timeouts),
                        s(&h.latency.count),
                    ]
                })
                .collect(),
        },
        "SHOW SESSIONS" => Table {
            columns: vec![
                "id",
                "user",
                "client",
                "connected_s",
                "pinned_by",
                "backend",
                "backend_thread",
                "statement",
                "statement_ms",
            ],
            numeric: vec!["id", "connected_s", "backend_thread", "statement_ms"],
            rows: tables::sessions(&proxy.rt.sessions)
                .into_iter()
                .map(|h| {
                    vec![
                        s(&h.id),
                        Some(h.user),
                        Some(h.client),
                        s(&h.connected_s),
                        Some(h.pinned_by.join(",")),
                        h.backend,
                        h.backend_thread.map(|t| t.to_string()),
                        h.statement,
                        h.statement_ms.map(|t| t.to_string()),
                    ]
                })
                .collect(),
        },
        "SHOW DIGESTS" => {
            let all = tables::digests(&proxy.rt.digests, tables::DigestOrder::Time, 100);
            let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
            Table {
                columns: vec![
                    "digest",
                    "digest_text",
                    "user",
                    "schema",
                    "hostgroup",
                    "count",
                    "total_ms",
                    "avg_ms",
                    "p99_ms",
                    "rows_sent",
                    "rows_affected",
                    "errors",
                    "last_seen",
                ],
                numeric: vec!["count", "rows_sent", "rows_affected", "errors"],
                rows: all
                    .iter()
                    .map(|e| {
                        vec![
                            Some(format!("{:016x}", e.id)),
                            s(&e.text),
                            s(&e.user),
                            s(&e.schema),
                            s(&e.hostgroup),
                            s(&e.count),
                            Some(ms(e.sum_us)),
                            Some(ms(e.sum_us / e.count.max(1))),
                            Some(ms(e.quantile(0.99).as_micros() as u64)),
                            s(&e.rows_sent),
                            s(&e.rows_affected),
                            s(&e.errors),
                            e.last_seen
                                .duration_since(UNIX_EPOCH)
                                .ok()
                                .map(|d| d.as_secs().to_string()),
                        ]
                    })
                    .collect(),
            }
        }
        "SHOW RULES" => Table {
            columns: vec!["rule", "match", "hostgroup", "user", "schema", "hits"],
            numeric: vec!["hits"],
            rows: tables::rules(&clusters)
                .into_iter()
                .map(|r| {
                    vec![
                        Some(r.name),
                        Some(r.pattern),
                        Some(r.hostgroup),
                        r.user,
                        r.schema,
                        s(&r.hits),
                    ]
                })
                .collect(),
        },
        // What the mysql/mariadb CLI asks when it starts interactively.
        "SELECT @@VERSION_COMMENT LIMIT 1" => Table {
            columns: vec!["@@version_comment"],
            numeric: vec![],
            rows: vec![vec![s(&"sluice admin")]],
        },
        _ => {
            return Err(format!(
                "sluice admin: unknown command; try {}",
                COMMANDS.join(", ")
            ))
        }
    })
}

fn yes(b: bool) -> &'static str {
    if b {
        "YES"
    } else {
        "NO"
    }
}
