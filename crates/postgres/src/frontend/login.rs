//! The connection phase: the startup packet (answering SSLRequest with TLS when configured,
//! refusing GSSENCRequest so the client falls back, negotiating the protocol version down),
//! and the password exchange the user is configured for: SCRAM-SHA-256, MD5, or cleartext
//! over TLS. A wrong password (or an unknown user) gets PostgreSQL's own 28P01.

use super::client::Client;
use crate::scram::{ScramError, ServerExchange, Verifier, DEFAULT_ITERATIONS, MECHANISM};
use crate::scram_client::md5_hex;
use crate::wire::{read_message, read_startup, Startup, StartupParams, WireError, Writer};
use sluice_config::PgAuthMethod;
use sluice_runtime::users::{User, Users};
use std::sync::Arc;

/// How the connection phase ended.
pub enum Outcome {
    /// Logged in: the startup parameters and the user.
    LoggedIn(StartupParams, Arc<User>, Option<[u8; 32]>),
    /// A cancel request (the connection carries nothing else).
    Cancel {
        /// The process id sluice gave the session.
        pid: u32,
        /// Its secret.
        secret: u32,
    },
}

/// Why the connection phase failed (the client was told, where the protocol allows).
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The client went away or the connection broke.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// A malformed packet.
    #[error("{0}")]
    Wire(#[from] WireError),
    /// Wrong password or unknown user.
    #[error("password authentication failed for user \"{0}\"")]
    Password(String),
    /// Refused for another reason (told to the client).
    #[error("{0}")]
    Refused(String),
}

/// Runs the connection phase up to a verified password.
pub async fn accept(
    client: &mut Client,
    users: &Users,
    verifiers: &Verifiers,
    tls: Option<&tokio_rustls::TlsAcceptor>,
) -> Result<Outcome, LoginError> {
    let params = loop {
        let (startup, used) = loop {
            match read_startup(&client.buf) {
                Ok(Some(x)) => break x,
                Ok(None) => client.fill().await?,
                Err(e) => {
                    let _ = client.fatal("08P01", &e.to_string()).await;
                    return Err(e.into());
                }
            }
        };
        client.consume(used);
        match startup {
            Startup::SslRequest => match tls {
                Some(acceptor) if !client.stream.is_tls() => {
                    client.send(b"S").await?;
                    let already = client.buf.split();
                    client.stream.upgrade(acceptor, already).await?;
                }
                _ => client.send(b"N").await?,
            },
            Startup::GssEncRequest => client.send(b"N").await?,
            Startup::Cancel { pid, secret } => return Ok(Outcome::Cancel { pid, secret }),
            Startup::Start(params) => break params,
        }
    };
    if params.needs_negotiation() {
        client.send(&params.negotiate_protocol_version()).await?;
    }
    let name = params.get("user").unwrap_or_default().to_string();
    if params
        .get("replication")
        .is_some_and(|r| r != "false" && r != "0")
    {
        let msg = "sluice does not proxy replication connections";
        let _ = client.fatal("08P01", msg).await;
        return Err(LoginError::Refused(msg.into()));
    }
    let user = users.get(&name).cloned();
    let method = user
        .as_ref()
        .map(|u| u.auth_method)
        .unwrap_or(PgAuthMethod::ScramSha256);
    if let Some(u) = &user {
        if (u.require_tls || method == PgAuthMethod::Password) && !client.stream.is_tls() {
            let msg = format!(
                "user \"{name}\" must connect with SSL ({})",
                if u.require_tls {
                    "require_tls"
                } else {
                    "cleartext password authentication"
                }
            );
            let _ = client.fatal("28000", &msg).await;
            return Err(LoginError::Refused(msg));
        }
    }
    let (ok, client_key) = match method {
        PgAuthMethod::ScramSha256 => match scram(client, verifiers.get(user.as_deref())).await? {
            Some(key) => (true, Some(key)),
            None => (false, None),
        },
        PgAuthMethod::Md5 => (md5(client, user.as_deref()).await?, None),
        PgAuthMethod::Password => (cleartext(client, user.as_deref()).await?, None),
    };
    match (ok, user) {
        (true, Some(u)) => Ok(Outcome::LoggedIn(params, u, client_key)),
        _ => {
            let msg = format!("password authentication failed for user \"{name}\"");
            let _ = client.fatal("28P01", &msg).await;
            Err(LoginError::Password(name))
        }
    }
}

/// Reads the client's next PasswordMessage / SASL message body.
async fn password_message(client: &mut Client) -> Result<Vec<u8>, LoginError> {
    loop {
        match read_message(&client.buf, 64 * 1024) {
            Ok(Some((m, used))) => {
                if m.tag != b'p' {
                    let msg = format!("expected a password message, got {:?}", m.tag as char);
                    let _ = client.fatal("08P01", &msg).await;
                    return Err(LoginError::Refused(msg));
                }
                let body = m.body.to_vec();
                client.consume(used);
                return Ok(body);
            }
            Ok(None) => client.fill().await?,
            Err(e) => {
                let _ = client.fatal("08P01", &e.to_string()).await;
                return Err(e.into());
            }
        }
    }
}

fn auth_request(kind: i32, data: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.begin(b'R');
    w.i32(kind);
    w.bytes(data);
    w.end();
    w.into_bytes()
}

/// SCRAM verifiers derived from configured passwords, per user with the password they
/// came from: PBKDF2 runs once per password, not at every login (one entry per configured
/// user name).
#[derive(Default)]
pub struct Verifiers(std::sync::Mutex<std::collections::HashMap<String, (String, Verifier)>>);

impl Verifiers {
    /// The verifier to check the user's password against (a throwaway one for an unknown
    /// user, so that the exchange looks the same).
    fn get(&self, user: Option<&User>) -> Verifier {
        let Some(u) = user.filter(|u| !u.password.starts_with("SCRAM-SHA-256$")) else {
            return verifier(user);
        };
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match cache.get(&*u.name) {
            Some((password, v)) if *password == u.password => v.clone(),
            _ => {
                let v = verifier(Some(u));
                cache.insert(u.name.to_string(), (u.password.clone(), v.clone()));
                v
            }
        }
    }
}

/// The verifier to check the user's password against (a throwaway one for an unknown user,
/// so that the exchange looks the same).
fn verifier(user: Option<&User>) -> Verifier {
    // Random keys no proof can match, with the iterations a real verifier has: the
    // exchange looks the same and costs no PBKDF2.
    let throwaway = || {
        let mut keys = [0u8; 80];
        let _ = aws_lc_rs::rand::fill(&mut keys);
        Verifier {
            iterations: DEFAULT_ITERATIONS,
            salt: keys[64..].to_vec(),
            stored_key: keys[..32].try_into().unwrap_or_default(),
            server_key: keys[32..64].try_into().unwrap_or_default(),
        }
    };
    match user {
        Some(u) if u.password.starts_with("SCRAM-SHA-256$") => {
            Verifier::parse(&u.password).unwrap_or_else(|_| throwaway())
        }
        Some(u) => {
            // The same salt for every login of a user: derived from the password, so that a
            // restart does not change it.
            let salt = md5_hex(&[u.name.as_bytes(), u.password.as_bytes()]);
            Verifier::from_password(&u.password, &salt.as_bytes()[..16], DEFAULT_ITERATIONS)
        }
        None => throwaway(),
    }
}

/// The SCRAM exchange; the client key its proof revealed when the password was right.
async fn scram(client: &mut Client, verifier: Verifier) -> Result<Option<[u8; 32]>, LoginError> {
    let mut offer = MECHANISM.as_bytes().to_vec();
    offer.extend_from_slice(b"\0\0");
    client.send(&auth_request(10, &offer)).await?;
    let body = password_message(client).await?;
    let Some(nul) = body.iter().position(|&b| b == 0) else {
        return refuse(client, "malformed SASLInitialResponse").await;
    };
    let mechanism = String::from_utf8_lossy(&body[..nul]).into_owned();
    if mechanism != MECHANISM {
        let msg = format!(
            "SASL mechanism {mechanism:?} is not supported: sluice offers SCRAM-SHA-256 without channel binding"
        );
        let _ = client.fatal("28000", &msg).await;
        return Err(LoginError::Refused(msg));
    }
    let first = body.get(nul + 5..).unwrap_or_default();
    let first = String::from_utf8_lossy(first).into_owned();
    let (exchange, server_first) = match ServerExchange::start(verifier, &first, &crate::nonce()) {
        Ok(x) => x,
        Err(ScramError::ChannelBinding) => {
            let msg = "channel binding is not supported: sluice offers SCRAM-SHA-256 without channel binding";
            let _ = client.fatal("28000", msg).await;
            return Err(LoginError::Refused(msg.into()));
        }
        Err(e) => return refuse(client, &e.to_string()).await,
    };
    client
        .send(&auth_request(11, server_first.as_bytes()))
        .await?;
    let fin = password_message(client).await?;
    match exchange.finish(&String::from_utf8_lossy(&fin)) {
        Ok((server_final, client_key)) => {
            // Sent with AuthenticationOk and the rest of the welcome, in one write.
            client.queue(&auth_request(12, server_final.as_bytes()));
            Ok(Some(client_key))
        }
        Err(ScramError::Proof) | Err(ScramError::Nonce) => Ok(None),
        Err(e) => refuse(client, &e.to_string()).await,
    }
}

async fn md5(client: &mut Client, user: Option<&User>) -> Result<bool, LoginError> {
    let mut salt = [0u8; 4];
    let _ = aws_lc_rs::rand::fill(&mut salt);
    client.send(&auth_request(5, &salt)).await?;
    let body = password_message(client).await?;
    let got = body.strip_suffix(b"\0").unwrap_or(&body);
    let Some(u) = user else { return Ok(false) };
    // The password, or PostgreSQL's stored form `md5<md5(password || user)>`.
    let inner = match u.password.strip_prefix("md5") {
        Some(h) if h.len() == 32 => h.to_string(),
        _ => md5_hex(&[u.password.as_bytes(), u.name.as_bytes()]),
    };
    let want = format!("md5{}", md5_hex(&[inner.as_bytes(), &salt]));
    Ok(aws_lc_rs::constant_time::verify_slices_are_equal(got, want.as_bytes()).is_ok())
}

async fn cleartext(client: &mut Client, user: Option<&User>) -> Result<bool, LoginError> {
    client.send(&auth_request(3, &[])).await?;
    let body = password_message(client).await?;
    let got = body.strip_suffix(b"\0").unwrap_or(&body);
    let Some(u) = user else { return Ok(false) };
    Ok(aws_lc_rs::constant_time::verify_slices_are_equal(got, u.password.as_bytes()).is_ok())
}

async fn refuse<T>(client: &mut Client, why: &str) -> Result<T, LoginError> {
    let _ = client.fatal("08P01", why).await;
    Err(LoginError::Refused(why.to_string()))
}
