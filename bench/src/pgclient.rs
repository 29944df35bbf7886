//! A minimal PostgreSQL client for the benchmarks: the startup message, a login by whatever
//! the server asks (trust, cleartext, MD5, SCRAM-SHA-256 through sluice's own client-side
//! SCRAM), and simple queries with text results. Enough to hold thousands of idle logged-in
//! connections and to sample `pg_stat_activity`.

use sluice_postgres::scram_client::{md5_response, ClientExchange};
use sluice_postgres::wire::message::{error_fields, read_message};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest message accepted from the server.
const MAX_MESSAGE: usize = 1 << 24;

/// One logged-in connection.
pub struct PgClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// A frontend message: tag, length, body.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(5 + body.len());
    m.push(tag);
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Fresh printable nonce characters for SCRAM.
fn nonce() -> String {
    let mut raw = [0u8; 18];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::getrandom(raw.as_mut_ptr().cast(), raw.len(), 0) };
    if n != raw.len() as isize {
        // Unreachable on Linux for 18 bytes; a time-based nonce still works for a benchmark.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        raw[..16].copy_from_slice(&t.to_le_bytes());
    }
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// An ErrorResponse body as `SQLSTATE message`.
fn error_text(body: &[u8]) -> String {
    match error_fields(body) {
        Ok(f) => {
            let get = |k: u8| {
                f.iter()
                    .find(|(c, _)| *c == k)
                    .map(|(_, v)| v.as_str())
                    .unwrap_or("")
            };
            format!("{} {}", get(b'C'), get(b'M'))
        }
        Err(e) => format!("malformed error response: {e}"),
    }
}

impl PgClient {
    /// Connects to 127.0.0.1:`port` and logs in; ready for queries when it returns.
    pub async fn connect(
        port: u16,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<PgClient, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect to port {port}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut c = PgClient {
            stream,
            buf: Vec::with_capacity(512),
        };
        let mut body = 196_608u32.to_be_bytes().to_vec(); // protocol 3.0
        for (k, v) in [
            ("user", user),
            ("database", database),
            ("application_name", "sluice-bench"),
        ] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        startup.extend_from_slice(&body);
        c.send(&startup).await?;
        let mut scram: Option<ClientExchange> = None;
        loop {
            let (tag, body) = c.next().await?;
            match tag {
                b'R' => {
                    let kind = body
                        .get(..4)
                        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .ok_or("short authentication request")?;
                    let data = &body[4..];
                    match kind {
                        0 => {}
                        3 => {
                            let mut p = password.as_bytes().to_vec();
                            p.push(0);
                            c.send(&message(b'p', &p)).await?;
                        }
                        5 => {
                            let salt: [u8; 4] = data
                                .get(..4)
                                .and_then(|s| s.try_into().ok())
                                .ok_or("short MD5 salt")?;
                            let mut p = md5_response(user, password, salt).into_bytes();
                            p.push(0);
                            c.send(&message(b'p', &p)).await?;
                        }
                        10 => {
                            let offered = String::from_utf8_lossy(data);
                            if !offered.split('\0').any(|m| m == "SCRAM-SHA-256") {
                                return Err(format!("no SCRAM-SHA-256 among {offered:?}"));
                            }
                            let (ex, first) = ClientExchange::start(
                                sluice_postgres::scram_client::ClientSecret::Password(
                                    password.to_string(),
                                ),
                                &nonce(),
                            );
                            let mut p = b"SCRAM-SHA-256\0".to_vec();
                            p.extend_from_slice(&(first.len() as u32).to_be_bytes());
                            p.extend_from_slice(first.as_bytes());
                            c.send(&message(b'p', &p)).await?;
                            scram = Some(ex);
                        }
                        11 => {
                            let ex = scram.as_mut().ok_or("SASLContinue before SASL")?;
                            let fin = ex
                                .respond(&String::from_utf8_lossy(data))
                                .map_err(|e| format!("SCRAM: {e}"))?;
                            c.send(&message(b'p', fin.as_bytes())).await?;
                        }
                        12 => scram
                            .as_ref()
                            .ok_or("SASLFinal before SASL")?
                            .verify(&String::from_utf8_lossy(data))
                            .map_err(|e| format!("SCRAM server signature: {e}"))?,
                        other => {
                            return Err(format!("authentication method {other} not supported"))
                        }
                    }
                }
                b'E' => return Err(error_text(&body)),
                b'Z' => return Ok(c),
                _ => {} // ParameterStatus, BackendKeyData, NoticeResponse
            }
        }
    }

    /// [`PgClient::connect`] bounded by `timeout`.
    pub async fn connect_within(
        timeout: Duration,
        port: u16,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<PgClient, String> {
        tokio::time::timeout(timeout, PgClient::connect(port, user, password, database))
            .await
            .map_err(|_| format!("login to port {port} took more than {timeout:?}"))?
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    /// The next message from the server: tag and body.
    async fn next(&mut self) -> Result<(u8, Vec<u8>), String> {
        loop {
            if let Some((m, used)) =
                read_message(&self.buf, MAX_MESSAGE).map_err(|e| e.to_string())?
            {
                let out = (m.tag, m.body.to_vec());
                self.buf.drain(..used);
                return Ok(out);
            }
            let mut chunk = [0u8; 4096];
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Runs `sql` (simple query protocol); the rows of its last result, as text.
    pub async fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.send(&message(b'Q', &body)).await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let (tag, body) = self.next().await?;
            match tag {
                b'T' => rows.clear(),
                b'D' => rows.push(parse_row(&body)?),
                b'E' => error = Some(error_text(&body)),
                b'Z' => {
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(rows),
                    }
                }
                _ => {}
            }
        }
    }

    /// [`PgClient::query`] for a single value.
    pub async fn query_one(&mut self, sql: &str) -> Result<String, String> {
        self.query(sql)
            .await?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten())
            .ok_or_else(|| format!("{sql:?} returned no value"))
    }

    /// Says goodbye (Terminate) and closes.
    pub async fn close(mut self) {
        let _ = self.send(&message(b'X', &[])).await;
    }
}

/// A DataRow body: its columns as text (None for NULL).
fn parse_row(body: &[u8]) -> Result<Vec<Option<String>>, String> {
    let bad = || "malformed DataRow".to_string();
    let n = u16::from_be_bytes(
        body.get(..2)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let mut at = 2;
    let mut row = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = i32::from_be_bytes(
            body.get(at..at + 4)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        at += 4;
        if len < 0 {
            row.push(None);
            continue;
        }
        let v = body.get(at..at + len as usize).ok_or_else(bad)?;
        row.push(Some(String::from_utf8_lossy(v).into_owned()));
        at += len as usize;
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_parses() {
        assert_eq!(message(b'X', &[]), [b'X', 0, 0, 0, 4]);
        let row = [0, 2, 0, 0, 0, 2, b'4', b'2', 0xff, 0xff, 0xff, 0xff];
        assert_eq!(parse_row(&row).unwrap(), [Some("42".to_string()), None]);
        assert!(parse_row(&[0, 1, 0, 0, 0, 9, b'x']).is_err());
        assert_eq!(nonce().len(), 36);
    }
}
