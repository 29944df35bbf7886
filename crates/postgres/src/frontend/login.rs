//! The connection phase: the startup packet (answering SSLRequest with TLS when configured,
//! refusing GSSENCRequest so the client falls back, negotiating the protocol version down),
//! and the password exchange the user is configured for (see [`super::password`]):
//! SCRAM-SHA-256, MD5, or cleartext over TLS. A wrong password (or an unknown user) gets
//! PostgreSQL's own 28P01.

use super::client::Client;
use super::password::{cleartext, md5, scram, Verifiers};
use crate::wire::{read_startup, Startup, StartupParams, WireError};
use sluice_config::{PasswordForm, PgAuthMethod};
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
    throttle: &Throttle<'_>,
) -> Result<Outcome, LoginError> {
    let (mut ssl_done, mut gss_done) = (false, false);
    let params = loop {
        let (startup, used) = loop {
            match read_startup(&client.buf) {
                Ok(Some(x)) => break x,
                Ok(None) => client.fill().await?,
                Err(e) => {
                    let code = match e {
                        WireError::NoUser => "28000",
                        WireError::Version { .. } => "0A000",
                        _ => "08P01",
                    };
                    let _ = client.fatal(code, &e.to_string()).await;
                    return Err(e.into());
                }
            }
        };
        client.consume(used);
        // A second request of either kind is an unknown protocol to PostgreSQL.
        let again = match startup {
            Startup::SslRequest => std::mem::replace(&mut ssl_done, true),
            Startup::GssEncRequest => std::mem::replace(&mut gss_done, true),
            _ => false,
        };
        if again {
            let e = WireError::Version {
                major: 1234,
                minor: match startup {
                    Startup::SslRequest => 5679,
                    _ => 5680,
                },
            };
            let _ = client.fatal("0A000", &e.to_string()).await;
            return Err(e.into());
        }
        match startup {
            Startup::SslRequest | Startup::GssEncRequest => {
                let ssl = matches!(startup, Startup::SslRequest);
                let tls = tls.filter(|_| ssl && !client.stream.is_tls());
                client.send(if tls.is_some() { b"S" } else { b"N" }).await?;
                // Answered first; then bytes the client sent before the answer are refused,
                // as PostgreSQL refuses them: they would be read as if they had come after
                // the handshake (CVE-2021-23214).
                if !client.buf.is_empty() {
                    let what = if ssl { "SSL" } else { "GSSAPI encryption" };
                    let msg = format!("received unencrypted data after {what} request");
                    let _ = client.fatal("08P01", &msg).await;
                    return Err(LoginError::Refused(msg));
                }
                if let Some(acceptor) = tls {
                    let none = client.buf.split();
                    client.stream.upgrade(acceptor, none).await?;
                    // Encrypted: a GSSAPI encryption request now is an unknown protocol, as
                    // to PostgreSQL.
                    gss_done = true;
                }
            }
            Startup::Cancel { pid, secret } => return Ok(Outcome::Cancel { pid, secret }),
            Startup::Start(params) => break params,
        }
    };
    if let Some(remaining) = throttle.blocked() {
        let msg = format!(
            "sluice: host {} is blocked because of many failed logins; try again in {} s",
            throttle.ip,
            remaining.as_secs().max(1)
        );
        let _ = client.fatal("28000", &msg).await;
        return Err(LoginError::Refused(msg));
    }
    if params.needs_negotiation() {
        client.send(&params.negotiate_protocol_version()).await?;
    }
    let [name, replication] = params.get_all(["user", "replication"]);
    let name = clip_name(name.unwrap_or_default());
    if let Some(r) = replication {
        // As PostgreSQL reads it: a boolean, or `database` (logical replication).
        let (code, msg) = match super::state::parse_bool(&r.to_ascii_lowercase()) {
            Some(false) => ("", String::new()),
            Some(true) => (
                "08P01",
                "sluice does not proxy replication connections".to_string(),
            ),
            None if r == "database" => (
                "08P01",
                "sluice does not proxy replication connections".to_string(),
            ),
            None => (
                "22023",
                format!("invalid value for parameter \"replication\": \"{r}\""),
            ),
        };
        if !code.is_empty() {
            let _ = client.fatal(code, &msg).await;
            return Err(LoginError::Refused(msg));
        }
    }
    let user = users.get(name).cloned();
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
    // A SCRAM secret can be checked by SCRAM only: PostgreSQL, too, runs SCRAM for an `md5`
    // user whose stored password is one.
    let scram_secret = user
        .as_ref()
        .is_some_and(|u| PasswordForm::of(&u.password) == PasswordForm::ScramSecret);
    let method = match method {
        PgAuthMethod::Md5 if scram_secret => PgAuthMethod::ScramSha256,
        m => m,
    };
    let (ok, client_key) = match method {
        PgAuthMethod::ScramSha256 => {
            match scram(client, verifiers.get(name, user.as_deref())).await? {
                Some(key) => (true, Some(key)),
                None => (false, None),
            }
        }
        PgAuthMethod::Md5 => (md5(client, user.as_deref()).await?, None),
        PgAuthMethod::Password => match cleartext(client, user.as_deref()).await? {
            Some(key) => (true, key),
            None => (false, None),
        },
    };
    match (ok, user) {
        (true, Some(u)) => {
            throttle.succeeded();
            Ok(Outcome::LoggedIn(params, u, client_key))
        }
        _ => {
            // Counted, and answered only after the configured delay.
            throttle.failed(name).await;
            let msg = format!("password authentication failed for user \"{name}\"");
            let _ = client.fatal("28P01", &msg).await;
            Err(LoginError::Password(name.to_string()))
        }
    }
}

/// The `[login]` throttle for one client address: failed logins counted, delayed and, past
/// the configured count, the address blocked for a while (as on the MySQL listeners).
pub struct Throttle<'a> {
    /// The process's throttle.
    pub throttle: &'a sluice_core::login_throttle::LoginThrottle,
    /// The client's address.
    pub ip: std::net::IpAddr,
}

impl Throttle<'_> {
    fn blocked(&self) -> Option<std::time::Duration> {
        self.throttle.blocked(self.ip, std::time::Instant::now())
    }

    fn succeeded(&self) {
        self.throttle.succeeded(self.ip);
    }

    async fn failed(&self, user: &str) {
        self.throttle.failed_login(self.ip, user).await;
    }
}

/// A user name as PostgreSQL takes it from a startup packet: its first `NAMEDATALEN - 1` bytes
/// (at a character's boundary: a configured name is UTF-8, and no name cut inside a
/// character is one).
fn clip_name(name: &str) -> &str {
    let mut n = name.len().min(super::names::NAME_BYTES);
    while !name.is_char_boundary(n) {
        n -= 1;
    }
    &name[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_name_is_cut_as_postgresql_cuts_it() {
        let long = "u".repeat(70);
        assert_eq!(clip_name(&long), &long[..63]);
        assert_eq!(clip_name("app"), "app");
        let wide = "é".repeat(40); // 80 bytes: cut at 62, not inside the 32nd character
        assert_eq!(clip_name(&wide).len(), 62);
    }
}
