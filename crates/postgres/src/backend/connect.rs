//! Opens server connections for the pools: TCP, the StartupMessage with the pool's user and
//! database, the password exchange the server asks for (SCRAM-SHA-256, MD5 or cleartext),
//! then what the server reports until it is ready.

use super::conn::PgConn;
use crate::scram_client::{md5_response, ClientExchange};
use crate::wire::{error_fields, Writer};
use arc_swap::ArcSwap;
use sluice_core::{ConnectError, Connector, PoolKey, Server};
use sluice_runtime::users::Users;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpStream;

/// Logs in to servers as the client's user, to the client's database.
pub struct PgConnector {
    /// Users and passwords.
    pub users: Arc<ArcSwap<Users>>,
    /// Prepared statements held per server connection.
    pub statements_per_connection: usize,
}

impl Connector<Box<PgConn>> for PgConnector {
    fn connect<'a>(
        &'a self,
        server: &'a Arc<Server>,
        key: &'a PoolKey,
    ) -> Pin<Box<dyn Future<Output = Result<Box<PgConn>, ConnectError>> + Send + 'a>> {
        Box::pin(async move {
            let password = {
                let users = self.users.load();
                match users.get(&key.user) {
                    Some(u) => u.password.clone(),
                    None => {
                        return Err(refused(
                            *b"28000",
                            format!("user \"{}\" is no longer configured", key.user),
                        ))
                    }
                }
            };
            let database = key.database.as_deref().unwrap_or(&key.user);
            let stream = TcpStream::connect(&*server.address)
                .await
                .map_err(|e| ConnectError::down(format!("{}: {e}", server.address)))?;
            let _ = stream.set_nodelay(true);
            let mut conn = PgConn::new(stream, self.statements_per_connection);
            login(&mut conn, &key.user, database, &password).await?;
            Ok(Box::new(conn))
        })
    }
}

fn refused(sqlstate: [u8; 5], message: String) -> ConnectError {
    ConnectError::refused(0, sqlstate, message)
}

fn broken(e: impl std::fmt::Display) -> ConnectError {
    ConnectError::down(format!("login: {e}"))
}

/// The startup exchange on a new connection, until ReadyForQuery.
async fn login(
    conn: &mut PgConn,
    user: &str,
    database: &str,
    password: &str,
) -> Result<(), ConnectError> {
    // StartupMessage: no type byte.
    let mut body = Vec::new();
    body.extend_from_slice(&196_608u32.to_be_bytes());
    for (k, v) in [("user", user), ("database", database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(&body);
    conn.send(&startup).await.map_err(broken)?;
    let mut scram: Option<ClientExchange> = None;
    loop {
        let (tag, body) = conn.next_owned().await.map_err(broken)?;
        match tag {
            b'R' => {
                let kind = body
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                let mut w = Writer::new();
                match kind {
                    Some(0) => continue,
                    Some(3) => {
                        w.begin(b'p');
                        w.cstr(password);
                        w.end();
                    }
                    Some(5) => {
                        let salt: [u8; 4] = body
                            .get(4..8)
                            .and_then(|s| s.try_into().ok())
                            .ok_or_else(|| broken("short MD5 request"))?;
                        w.begin(b'p');
                        w.cstr(&md5_response(user, password, salt));
                        w.end();
                    }
                    Some(10) => {
                        let offers = String::from_utf8_lossy(&body[4..]);
                        if !offers.split('\0').any(|m| m == crate::scram::MECHANISM) {
                            return Err(refused(
                                *b"28000",
                                format!("the server offers no SASL mechanism sluice supports ({offers})"),
                            ));
                        }
                        let (ex, first) = ClientExchange::start(password, &crate::nonce());
                        scram = Some(ex);
                        w.begin(b'p');
                        w.cstr(crate::scram::MECHANISM);
                        w.i32(first.len() as i32);
                        w.bytes(first.as_bytes());
                        w.end();
                    }
                    Some(11) => {
                        let ex = scram.as_mut().ok_or_else(|| broken("SASL out of order"))?;
                        let server_first = String::from_utf8_lossy(&body[4..]);
                        let fin = ex.respond(&server_first).map_err(broken)?;
                        w.begin(b'p');
                        w.bytes(fin.as_bytes());
                        w.end();
                    }
                    Some(12) => {
                        let ex = scram.as_ref().ok_or_else(|| broken("SASL out of order"))?;
                        ex.verify(&String::from_utf8_lossy(&body[4..]))
                            .map_err(|e| broken(format!("the server's SCRAM signature: {e}")))?;
                        continue;
                    }
                    other => {
                        return Err(refused(
                            *b"28000",
                            format!("the server asks for an authentication method sluice does not support ({other:?})"),
                        ))
                    }
                }
                conn.send(w.as_bytes()).await.map_err(broken)?;
            }
            b'S' => conn.note_parameter(&body),
            b'K' => {
                if let Some(k) = body.get(..8) {
                    conn.backend_key = (
                        u32::from_be_bytes([k[0], k[1], k[2], k[3]]),
                        u32::from_be_bytes([k[4], k[5], k[6], k[7]]),
                    );
                }
            }
            b'Z' => return Ok(()),
            b'N' => {}
            b'E' => {
                let fields = error_fields(&body).map_err(broken)?;
                let get = |c: u8| fields.iter().find(|(k, _)| *k == c).map(|(_, v)| v.clone());
                let code = get(b'C').unwrap_or_else(|| "08006".into());
                let mut sqlstate = *b"08006";
                if code.len() == 5 {
                    sqlstate.copy_from_slice(code.as_bytes());
                }
                let message = get(b'M').unwrap_or_else(|| "the server refused the login".into());
                // Too many connections or starting up: the server is unavailable, not refusing us.
                if code == "53300" || code == "57P03" {
                    return Err(ConnectError::down(message));
                }
                return Err(refused(sqlstate, message));
            }
            other => return Err(broken(format!("unexpected message {:?}", other as char))),
        }
    }
}
