//! The monitor's connections to PostgreSQL: a login to database `postgres`, and simple
//! queries read as text.

use crate::backend::connect::open_as;
use crate::backend::PgConn;
use crate::wire::error_fields;
use sluice_monitor::agent::{within, AgentError, AgentResult};
use std::time::Duration;

/// The database the monitor logs in to.
pub const MONITOR_DATABASE: &str = "postgres";

/// How long an operation may take.
pub const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// How the monitor logs in: its user and password (a reload replaces them) and `[pool] tls`.
#[derive(Clone)]
pub struct Login {
    pub user: String,
    pub password: String,
    pub tls: Option<sluice_runtime::tls::BackendTls>,
}

/// Logs in to `address` as the monitor.
pub async fn login(address: &str, login: &Login) -> AgentResult<PgConn> {
    let Login {
        user,
        password,
        tls,
    } = login;
    open_as(address, user, password, MONITOR_DATABASE, tls.as_ref())
        .await
        .map_err(|e| {
            if e.server_down {
                AgentError::unreachable(e.message)
            } else {
                AgentError::denied(format!("monitor login as \"{user}\": {}", e.message))
            }
        })
}

/// The first column of the first row of `sql`, on a fresh connection, within
/// [`OP_TIMEOUT`].
pub async fn value_on(address: &str, who: &Login, sql: &str) -> AgentResult<String> {
    within(OP_TIMEOUT, async {
        let mut conn = login(address, who).await?;
        let row = first_row(&mut conn, sql).await?;
        Ok(row.into_iter().next().flatten().unwrap_or_default())
    })
    .await
}

/// The first row of `sql` (an empty row if it returned none).
pub async fn first_row(conn: &mut PgConn, sql: &str) -> AgentResult<Vec<Option<String>>> {
    Ok(rows(conn, sql)
        .await?
        .into_iter()
        .next()
        .unwrap_or_default())
}

/// The rows of a simple query, as text.
pub async fn rows(conn: &mut PgConn, sql: &str) -> AgentResult<Vec<Vec<Option<String>>>> {
    let mut w = crate::wire::Writer::new();
    w.begin(b'Q');
    w.cstr(sql);
    w.end();
    let broken = |e: std::io::Error| AgentError::unreachable(format!("monitor connection: {e}"));
    conn.send(w.as_bytes()).await.map_err(broken)?;
    let mut out = Vec::new();
    let mut failure = None;
    loop {
        let (tag, body) = conn.next_owned().await.map_err(broken)?;
        match tag {
            b'D' => {
                out.push(data_row(&body).ok_or_else(|| {
                    AgentError::unreachable("monitor connection: malformed DataRow")
                })?)
            }
            b'E' => {
                let fields = error_fields(&body).unwrap_or_default();
                let get = |c: u8| fields.iter().find(|(k, _)| *k == c).map(|(_, v)| v.clone());
                let code = get(b'C').unwrap_or_default();
                let message = format!("{} ({code})", get(b'M').unwrap_or_default());
                failure = Some(if code == "42501" || code.starts_with("28") {
                    AgentError::denied(message)
                } else {
                    AgentError::failed(message)
                });
            }
            b'S' => conn.note_parameter(&body),
            b'Z' => break,
            _ => {}
        }
    }
    match failure {
        Some(e) => Err(e.context(sql)),
        None => Ok(out),
    }
}

/// A DataRow's columns as text (`None` for NULL).
fn data_row(body: &[u8]) -> Option<Vec<Option<String>>> {
    let n = u16::from_be_bytes(body.get(..2)?.try_into().ok()?);
    let mut at = 2;
    let mut cols = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if len < 0 {
            cols.push(None);
            continue;
        }
        let v = body.get(at..at + len as usize)?;
        at += len as usize;
        cols.push(Some(String::from_utf8_lossy(v).into_owned()));
    }
    Some(cols)
}

#[cfg(test)]
mod tests {
    use super::data_row;

    #[test]
    fn data_rows_parse_with_nulls_and_refuse_truncation() {
        let mut b = vec![0, 2];
        b.extend_from_slice(&1i32.to_be_bytes());
        b.push(b't');
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(data_row(&b), Some(vec![Some("t".into()), None]));
        assert_eq!(data_row(&b[..b.len() - 1]), None);
    }
}
