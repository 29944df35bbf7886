//! Opens server connections for the pools: TCP, the StartupMessage with the pool's user and
//! database, the password exchange the server asks for (SCRAM-SHA-256, MD5 or cleartext),
//! then what the server reports until it is ready.

use super::conn::PgConn;
use crate::scram::Verifier;
use crate::scram_client::{md5_hex, md5_response, ClientExchange, ClientSecret};
use crate::wire::{error_parts, Writer};
use arc_swap::ArcSwap;
use sluice_core::{ConnectError, Connector, PoolKey, Server};
use sluice_runtime::tls::backend::{handshake_refused, BackendStream, BackendTls};
use sluice_runtime::users::Users;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Logs in to servers as the client's user, to the client's database.
pub struct PgConnector {
    /// Users and passwords.
    pub users: Arc<ArcSwap<Users>>,
    /// Prepared statements held per server connection.
    pub statements_per_connection: usize,
    /// For users configured with a SCRAM secret only: the client key a client's SCRAM proof
    /// revealed, with the secret it was checked against (SCRAM pass-through).
    pub client_keys: std::sync::Mutex<std::collections::HashMap<String, (String, [u8; 32])>>,
    /// `[pool] read_timeout`, shared with every connection (a reload changes it for open
    /// ones too).
    pub read_timeout: sluice_core::ReadTimeout,
    /// `[pool] max_lifetime`, shared with every connection as `read_timeout` is.
    pub lifetime: sluice_core::Lifetime,
    /// `[pool] tls`: every connection over TLS, the server's certificate verified.
    pub tls: Option<BackendTls>,
}

/// What sluice answers a server's password request with, from how the user is configured.
enum Credential {
    /// The password itself.
    Password(String),
    /// PostgreSQL's MD5 form (`md5` + md5(password + user)): MD5 requests only.
    Md5(String),
    /// A SCRAM secret: SCRAM requests only, once a client has logged in (its proof reveals
    /// the client key); `None` until then.
    Scram(Option<ClientSecret>),
}

impl PgConnector {
    /// Remembers the client key a client of `user` proved, when the user is configured
    /// with the SCRAM secret `secret`.
    pub fn remember_client_key(&self, user: &str, secret: &str, key: [u8; 32]) {
        if let Ok(mut keys) = self.client_keys.lock() {
            match keys.get_mut(user) {
                Some((s, k)) if s == secret => *k = key,
                _ => {
                    keys.insert(user.to_string(), (secret.to_string(), key));
                }
            }
        }
    }

    fn credential(&self, user: &str, password: &str) -> Credential {
        if password.starts_with("SCRAM-SHA-256$") {
            let key = self.client_keys.lock().ok().and_then(|keys| {
                keys.get(user)
                    .filter(|(secret, _)| secret == password)
                    .map(|(_, k)| *k)
            });
            return Credential::Scram(key.and_then(|client_key| {
                Some(ClientSecret::Keys {
                    verifier: Verifier::parse(password).ok()?,
                    client_key,
                })
            }));
        }
        Credential::plain(password)
    }
}

impl Credential {
    /// A configured password: PostgreSQL's `md5…` hash, or the password itself.
    fn plain(password: &str) -> Credential {
        match password.strip_prefix("md5") {
            Some(h) if h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Credential::Md5(h.to_string())
            }
            _ => Credential::Password(password.to_string()),
        }
    }
}

impl Connector<Box<PgConn>> for PgConnector {
    fn connect<'a>(
        &'a self,
        server: &'a Arc<Server>,
        key: &'a PoolKey,
    ) -> Pin<Box<dyn Future<Output = Result<Box<PgConn>, ConnectError>> + Send + 'a>> {
        Box::pin(async move {
            let credential = {
                let users = self.users.load();
                match users.of_session(&key.user) {
                    Some(u) => self.credential(&key.user, &u.password),
                    None => {
                        return Err(refused(
                            *b"28000",
                            format!("user \"{}\" is no longer configured", key.user),
                        ))
                    }
                }
            };
            let database = key.database.as_deref().unwrap_or(&key.user);
            let stream = open_stream(&server.address, self.tls.as_ref()).await?;
            let mut conn = PgConn::new(stream, self.statements_per_connection);
            // From now on: a login to a server that hangs gives up when it is declared failed.
            conn.failed = Some(server.failed_watch());
            login(&mut conn, &key.user, database, credential).await?;
            conn.timer.limit = self.read_timeout.clone();
            conn.lifetime = self.lifetime.stamp();
            conn.gate = sluice_core::CancelGate::new(conn.backend_key.1);
            Ok(Box::new(conn))
        })
    }
}

/// A connection to `address` logged in as `user` with `password` (plaintext, or PostgreSQL's
/// `md5…` hash) to `database`, over TLS with `tls`: the monitor's own connections.
pub async fn open_as(
    address: &str,
    user: &str,
    password: &str,
    database: &str,
    tls: Option<&BackendTls>,
) -> Result<PgConn, ConnectError> {
    let credential = Credential::plain(password);
    let stream = open_stream(address, tls).await?;
    let mut conn = PgConn::new(stream, 0);
    login(&mut conn, user, database, credential).await?;
    Ok(conn)
}

/// PostgreSQL's SSLRequest: its length, then the code 1234.5679.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A stream to the server at `address`, over TLS when `tls` is given: the SSLRequest, then
/// the handshake (the server's certificate must chain to `[pool] tls_ca` and name the host
/// of `address`). A server that does not accept TLS is refused, never used in plain text.
pub async fn open_stream(
    address: &str,
    tls: Option<&BackendTls>,
) -> Result<BackendStream, ConnectError> {
    let mut tcp = TcpStream::connect(address)
        .await
        .map_err(|e| ConnectError::down(format!("{address}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(BackendStream::Plain(tcp));
    };
    let down = |e: std::io::Error| ConnectError::down(format!("{address}: {e}"));
    tcp.write_all(&SSL_REQUEST).await.map_err(down)?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.map_err(down)?;
    match answer[0] {
        b'S' => {}
        b'N' => {
            return Err(refused(
                *b"08004",
                format!("{address} does not accept TLS (it answered the SSLRequest with N: ssl = off), and [pool] tls requires it"),
            ))
        }
        // What a server sends when it cannot start a session at all (out of processes or
        // memory: its postmaster answers before it reads the request). Its text is not read:
        // it comes before TLS.
        b'E' => {
            return Err(ConnectError::down(format!(
                "{address} answered the SSLRequest with an error: it cannot start a session now"
            )))
        }
        other => {
            return Err(refused(
                *b"08P01",
                format!("{address} answered the SSLRequest with {:?}, not S or N: not a PostgreSQL server that accepts TLS", other as char),
            ))
        }
    }
    // A certificate that does not verify is the configuration's (the client hears why); a
    // connection lost during the handshake is the server's (a restart: it is shunned for a
    // while, as for a connection refused).
    tls.connect(address, tcp)
        .await
        .map_err(|e| match handshake_refused(&e) {
            true => refused(*b"08006", format!("{address}: TLS: {e}")),
            false => ConnectError::down(format!("{address}: TLS: {e}")),
        })
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
    credential: Credential,
) -> Result<(), ConnectError> {
    let unanswerable = |what: &str| {
        refused(
            *b"28000",
            format!("the server asks for {what}, which sluice cannot answer for user \"{user}\": it is configured with a {}", match &credential {
                Credential::Md5(_) => "password hash (md5…) only",
                _ => "SCRAM secret only (and no client of the user has logged in with SCRAM since sluice started)",
            }),
        )
    };
    let startup = crate::wire::startup_message(&[("user", user), ("database", database)]);
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
                        let Credential::Password(password) = &credential else {
                            return Err(unanswerable("a cleartext password"));
                        };
                        w.begin(b'p');
                        w.cstr(password);
                        w.end();
                    }
                    Some(5) => {
                        let salt: [u8; 4] = body
                            .get(4..8)
                            .and_then(|s| s.try_into().ok())
                            .ok_or_else(|| broken("short MD5 request"))?;
                        let answer = match &credential {
                            Credential::Password(password) => md5_response(user, password, salt),
                            Credential::Md5(inner) => {
                                format!("md5{}", md5_hex(&[inner.as_bytes(), &salt]))
                            }
                            Credential::Scram(_) => return Err(unanswerable("an MD5 password")),
                        };
                        w.begin(b'p');
                        w.cstr(&answer);
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
                        let secret = match &credential {
                            Credential::Password(p) => ClientSecret::Password(p.clone()),
                            Credential::Scram(Some(keys)) => keys.clone(),
                            _ => return Err(unanswerable("SCRAM-SHA-256")),
                        };
                        let (ex, first) = ClientExchange::start(secret, &crate::nonce());
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
                        ex.derive_off_loop(&server_first).await;
                        let fin = ex.respond(&server_first).map_err(|e| match e {
                            crate::scram::ScramError::OtherSecret => {
                                refused(*b"28000", format!("user \"{user}\": {e}"))
                            }
                            e => broken(e),
                        })?;
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
                let parts = error_parts(&body).map_err(broken)?;
                let code = parts.code.unwrap_or_else(|| "08006".into());
                let mut sqlstate = *b"08006";
                if code.len() == 5 {
                    sqlstate.copy_from_slice(code.as_bytes());
                }
                let message = parts
                    .message
                    .unwrap_or_else(|| "the server refused the login".into());
                if server_unavailable(&code, &message) {
                    return Err(ConnectError::down(message));
                }
                // The severity is the session's to say (FATAL at the login, ERROR later);
                // everything else goes to the client as the server sent it.
                return Err(refused(sqlstate, message).with_fields(parts.rest));
            }
            other => return Err(broken(format!("unexpected message {:?}", other as char))),
        }
    }
}

/// A login error that says the server as a whole cannot take a connection now (it is
/// starting up, shutting down, restarting after a crash of one of its processes — 57P01 and
/// 57P02 end a login then — or all its connection slots are taken), not that it refuses this user or
/// database: the pool then tries the hostgroup's other servers and leaves this one for a
/// while. A role's or a database's `CONNECTION LIMIT` (53300 too, `too many connections for
/// role "…"` / `for database "…"`) refuses one pool only: its clients get the server's error,
/// and the server stays in use for every other pool. (A server whose messages are translated
/// says neither in English: its 53300s refuse the one pool, which is the safer reading.)
fn server_unavailable(code: &str, message: &str) -> bool {
    matches!(code, "57P01" | "57P02" | "57P03")
        || (code == "53300"
            && (message.starts_with("sorry, too many clients")
                || message.starts_with("remaining connection slots are reserved")))
}

#[cfg(test)]
mod tests {
    use super::server_unavailable;

    #[test]
    fn only_a_full_or_starting_server_is_unavailable() {
        assert!(server_unavailable(
            "53300",
            "sorry, too many clients already"
        ));
        assert!(server_unavailable(
            "53300",
            "remaining connection slots are reserved for non-replication superuser connections"
        ));
        assert!(server_unavailable(
            "57P03",
            "the database system is starting up"
        ));
        assert!(server_unavailable(
            "57P02",
            "terminating connection because of crash of another server process"
        ));
        assert!(!server_unavailable(
            "53300",
            "too many connections for role \"lim\""
        ));
        assert!(!server_unavailable(
            "53300",
            "too many connections for database \"lim\""
        ));
        assert!(!server_unavailable(
            "28P01",
            "sorry, too many clients already"
        ));
    }
}
