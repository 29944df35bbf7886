//! Logging in to a server: its greeting (refused at once when it cannot be one, see
//! `greeting.rs`), the handshake response (over TLS with `[pool] tls`), and the exchange that
//! follows — auth switches and caching_sha2_password messages — up to OK or ERR.

use super::conn::{BackendConn, BACKEND_CAPS, BACKEND_COLLATION};
use super::greeting::{greeting_problem, preview, HEAD};
use crate::auth;
use crate::wire::consts::{cap, CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};
use crate::wire::handshake::{decode_auth_switch, Greeting, HandshakeResponse};
use crate::wire::ok::parse_err;
use crate::wire::packet::{Packet, ReadError};
use sluice_core::ConnectError;
use tokio::io::AsyncReadExt;

impl BackendConn {
    /// Reads the greeting, answers it (over TLS with `tls`) and completes the exchange.
    pub(super) async fn login(
        &mut self,
        address: &str,
        user: &str,
        password: &str,
        flavour_caps: u64,
        tls: Option<&sluice_runtime::tls::backend::BackendTls>,
    ) -> Result<(), ConnectError> {
        let down = |what: String| ConnectError::down(format!("{address}: {what}"));
        let p = self.read_greeting().await.map_err(down)?;
        if p.payload.first() == Some(&0xff) {
            let e = parse_err(&p.payload);
            return Err(match e {
                Some(e) => ConnectError::refused(e.code, e.sqlstate, e.message_str()),
                None => down("malformed greeting".into()),
            });
        }
        let g = Greeting::decode(&p.payload).ok_or_else(|| down("malformed greeting".into()))?;
        if g.capabilities & cap::PROTOCOL_41 == 0 {
            return Err(down("server does not speak protocol 4.1".into()));
        }
        self.thread_id = g.connection_id;
        self.server_version = g.server_version.clone();
        self.caps = (BACKEND_CAPS | flavour_caps) & (g.capabilities | cap::LONG_PASSWORD);
        let mut seq = 1;
        if let Some(tls) = tls {
            if g.capabilities & cap::SSL == 0 {
                return Err(ConnectError::refused(
                    2026,
                    *b"HY000",
                    format!("{address} does not offer TLS, and [pool] tls requires it"),
                ));
            }
            self.caps |= cap::SSL;
            // SSLRequest: the first 32 bytes of a handshake response, then TLS.
            let mut req = Vec::with_capacity(32);
            req.extend_from_slice(&(self.caps as u32).to_le_bytes());
            req.extend_from_slice(&(1u32 << 30).to_le_bytes());
            req.push(BACKEND_COLLATION);
            req.extend_from_slice(&[0; 23]);
            self.send(seq, &req)
                .await
                .map_err(|e| down(e.to_string()))?;
            seq += 1;
            let tcp = self.stream.take_plain().map_err(|e| down(e.to_string()))?;
            self.stream = tls.connect(address, tcp).await.map_err(|e| {
                // (As for PostgreSQL: a certificate that does not verify is refused, a
                // connection lost during the handshake is the server's.)
                match sluice_runtime::tls::backend::handshake_refused(&e) {
                    true => ConnectError::refused(2026, *b"HY000", format!("{address}: TLS: {e}")),
                    false => down(format!("TLS: {e}")),
                }
            })?;
        }
        let (plugin, response) = auth_response(&g.auth_plugin, password.as_bytes(), &g.scramble);
        let hr = HandshakeResponse {
            capabilities: self.caps,
            max_packet: 1 << 30,
            collation: BACKEND_COLLATION,
            user: user.to_string(),
            auth_response: response,
            database: None,
            auth_plugin: Some(plugin.to_string()),
            attributes: vec![("program_name".into(), "sluice".into())],
        };
        let mut payload = Vec::with_capacity(128);
        hr.encode(&mut payload);
        self.send(seq, &payload)
            .await
            .map_err(|e| down(e.to_string()))?;
        self.nonce = g.scramble.to_vec();
        self.auth_exchange(address, password, plugin).await
    }

    /// Completes an authentication exchange after the response was sent: auth switches,
    /// caching_sha2_password messages, up to OK or ERR.
    pub(super) async fn auth_exchange(
        &mut self,
        address: &str,
        password: &str,
        plugin: &str,
    ) -> Result<(), ConnectError> {
        let down = |what: String| ConnectError::down(format!("{address}: {what}"));
        let mut nonce = self.nonce.clone();
        let mut plugin = plugin.to_string();
        loop {
            let p = self.read().await.map_err(|e| down(login_read_failure(e)))?;
            let seq = p.last_seq.wrapping_add(1);
            match p.payload.first() {
                Some(0x00) => return Ok(()),
                Some(0xff) => {
                    let e = parse_err(&p.payload).ok_or_else(|| down("malformed error".into()))?;
                    return Err(ConnectError::refused(e.code, e.sqlstate, e.message_str()));
                }
                Some(0xfe) => {
                    let (new_plugin, data) = decode_auth_switch(&p.payload)
                        .ok_or_else(|| down("malformed auth switch".into()))?;
                    nonce = data;
                    let (pl, resp) = auth_response(&new_plugin, password.as_bytes(), &nonce);
                    if pl != new_plugin {
                        return Err(ConnectError::refused(
                            1251,
                            *b"08004",
                            format!(
                                "server asked for unsupported authentication plugin {new_plugin}"
                            ),
                        ));
                    }
                    plugin = new_plugin;
                    self.send(seq, &resp)
                        .await
                        .map_err(|e| down(e.to_string()))?;
                }
                Some(0x01) if plugin == CACHING_SHA2_PASSWORD => match p.payload.get(1) {
                    Some(&auth::sha2::FAST_AUTH_SUCCESS) => {}
                    Some(&auth::sha2::PERFORM_FULL_AUTHENTICATION) => {
                        self.send(seq, &[auth::sha2::REQUEST_PUBLIC_KEY])
                            .await
                            .map_err(|e| down(e.to_string()))?;
                        let k = self
                            .read()
                            .await
                            .map_err(|e| down(login_read_failure(e)))?;
                        let seq = k.last_seq.wrapping_add(1);
                        let pem = k.payload.get(1..).unwrap_or(&[]);
                        let ct = auth::rsa::encrypt_password(pem, password.as_bytes(), &nonce)
                            .map_err(|e| down(format!("caching_sha2_password: {e}")))?;
                        self.send(seq, &ct).await.map_err(|e| down(e.to_string()))?;
                    }
                    _ => {
                        return Err(down(format!(
                            "malformed caching_sha2_password message {}",
                            preview(&p.payload)
                        )))
                    }
                },
                _ => {
                    return Err(down(format!(
                        "malformed packet during login: expected OK, ERR or an authentication request, got {}",
                        preview(&p.payload)
                    )))
                }
            }
        }
    }

    /// Reads the server's first packet, refusing at once what cannot be a greeting. Err
    /// says what the server sent instead.
    async fn read_greeting(&mut self) -> Result<Packet, String> {
        while self.rbuf.len() < HEAD {
            let n = self
                .stream
                .read_buf(&mut self.rbuf)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(match self.rbuf.len() {
                    0 => "closed the connection without sending a greeting".to_string(),
                    _ => format!(
                        "malformed greeting: the server closed the connection after {}",
                        preview(&self.rbuf)
                    ),
                });
            }
        }
        if let Some(why) = greeting_problem(&self.rbuf) {
            return Err(format!("malformed greeting: {why}"));
        }
        self.read().await.map_err(|e| e.to_string())
    }
}

/// The plugin and response the proxy uses to answer a server's auth request.
pub(super) fn auth_response(
    plugin: &str,
    password: &[u8],
    nonce: &[u8],
) -> (&'static str, Vec<u8>) {
    match plugin {
        CACHING_SHA2_PASSWORD => (CACHING_SHA2_PASSWORD, auth::sha2::scramble(password, nonce)),
        _ => (NATIVE_PASSWORD, auth::native::scramble(password, nonce)),
    }
}

/// Why a read during login failed, for the reason a server is shunned with.
fn login_read_failure(e: ReadError) -> String {
    match e {
        ReadError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            format!("during login, {e}")
        }
        ReadError::Closed => "closed the connection during login".into(),
        other => format!("during login: {other}"),
    }
}
