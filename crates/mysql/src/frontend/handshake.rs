//! The connection phase with a client: greeting, capability negotiation and authentication
//! (`mysql_native_password`, `caching_sha2_password` fast and full, auth switch for anything
//! else). Also used for COM_CHANGE_USER.

use super::client::ClientConn;
use crate::auth::{self, rsa::RsaKey};
use crate::users::{User, Users};
use crate::wire::consts::{cap, err, status, CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};
use crate::wire::handshake::{encode_auth_switch, Greeting, HandshakeResponse, SSL_REQUEST_LEN};
use crate::wire::packet::{read_packet, ReadError};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Capabilities the proxy offers clients.
pub const SERVER_CAPS: u64 = cap::LONG_PASSWORD
    | cap::FOUND_ROWS
    | cap::LONG_FLAG
    | cap::CONNECT_WITH_DB
    | cap::ODBC
    | cap::LOCAL_FILES
    | cap::IGNORE_SPACE
    | cap::PROTOCOL_41
    | cap::INTERACTIVE
    | cap::IGNORE_SIGPIPE
    | cap::TRANSACTIONS
    | cap::SECURE_CONNECTION
    | cap::MULTI_STATEMENTS
    | cap::MULTI_RESULTS
    | cap::PS_MULTI_RESULTS
    | cap::PLUGIN_AUTH
    | cap::CONNECT_ATTRS
    | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA
    | cap::CAN_HANDLE_EXPIRED_PASSWORDS
    | cap::SESSION_TRACK
    | cap::DEPRECATE_EOF;

/// Largest packet accepted during the connection phase.
const HANDSHAKE_PACKET_LIMIT: usize = 64 * 1024;

/// A client that proved who it is.
#[derive(Debug)]
pub struct Authenticated {
    /// The user.
    pub user: Arc<User>,
    /// Initial schema requested.
    pub database: Option<String>,
    /// Client collation id.
    pub collation: u8,
    /// Connection attributes.
    pub attributes: Vec<(String, String)>,
    /// Sequence id for the packet that completes the phase (OK or ERR).
    pub next_seq: u8,
    /// The nonce of the greeting (COM_CHANGE_USER responses are computed with it).
    pub nonce: [u8; 20],
}

/// Why the connection phase failed. The client has been sent an error where possible.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The client went away or sent garbage.
    #[error("{0}")]
    Read(#[from] ReadError),
    /// Socket error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Authentication failed (the client got error 1045).
    #[error("access denied for user '{0}'")]
    Denied(String),
    /// Malformed handshake (the client got error 1043).
    #[error("bad handshake")]
    Malformed,
}

/// Everything the handshake needs from the proxy.
pub struct HandshakeContext<'a> {
    /// Users.
    pub users: &'a Users,
    /// RSA key for caching_sha2_password.
    pub rsa: &'a RsaKey,
    /// Version string to announce.
    pub server_version: &'a str,
    /// Connection id given to the client.
    pub connection_id: u32,
    /// Client address (for error messages).
    pub peer: SocketAddr,
    /// Plugin announced in the greeting.
    pub default_plugin: &'a str,
    /// TLS, when configured: the greeting offers it and an SSLRequest upgrades the stream.
    pub tls: Option<&'a tokio_rustls::TlsAcceptor>,
}

/// Runs the connection phase up to (not including) the final OK.
pub async fn accept(
    client: &mut ClientConn,
    cx: &HandshakeContext<'_>,
) -> Result<Authenticated, HandshakeError> {
    let nonce = auth::new_scramble();
    let greeting = Greeting {
        server_version: cx.server_version.to_string(),
        connection_id: cx.connection_id,
        scramble: nonce,
        capabilities: SERVER_CAPS | if cx.tls.is_some() { cap::SSL } else { 0 },
        collation: crate::backend::BACKEND_COLLATION,
        status: status::AUTOCOMMIT,
        auth_plugin: cx.default_plugin.to_string(),
    };
    let mut payload = Vec::with_capacity(128);
    greeting.encode(&mut payload);
    client.push_packet(0, &payload);
    client.flush().await?;

    let mut p = read_packet(&mut client.stream, &mut client.rbuf, HANDSHAKE_PACKET_LIMIT).await?;
    let mut seq = p.last_seq.wrapping_add(1);
    if let (Some(acceptor), SSL_REQUEST_LEN) = (cx.tls, p.payload.len()) {
        // TLS first, then the real handshake response over it.
        let already_read = client.rbuf.split();
        client.stream.upgrade(acceptor, already_read).await?;
        p = read_packet(&mut client.stream, &mut client.rbuf, HANDSHAKE_PACKET_LIMIT).await?;
        seq = p.last_seq.wrapping_add(1);
    }
    if p.payload.len() == SSL_REQUEST_LEN {
        client
            .send_err(
                seq,
                err::HANDSHAKE,
                b"08S01",
                "SSL connection requested, but TLS is not enabled on this sluice listener",
            )
            .await?;
        return Err(HandshakeError::Malformed);
    }
    let Some(resp) = HandshakeResponse::decode(&p.payload) else {
        client
            .send_err(seq, err::HANDSHAKE, b"08S01", "Bad handshake")
            .await?;
        return Err(HandshakeError::Malformed);
    };
    client.caps = resp.capabilities & (SERVER_CAPS | cap::SSL);
    let plugin = resp
        .auth_plugin
        .clone()
        .unwrap_or_else(|| NATIVE_PASSWORD.to_string());
    let (user, next_seq) = authenticate(
        client,
        cx,
        &resp.user,
        &plugin,
        &resp.auth_response,
        &nonce,
        seq,
    )
    .await?;
    if user.require_tls && !client.stream.is_tls() {
        let msg = format!(
            "Access denied for user '{}'@'{}': this user must connect with TLS",
            resp.user,
            cx.peer.ip()
        );
        client
            .send_err(next_seq, err::ACCESS_DENIED, b"28000", &msg)
            .await?;
        return Err(HandshakeError::Denied(resp.user));
    }
    Ok(Authenticated {
        user,
        database: resp.database,
        collation: resp.collation,
        attributes: resp.attributes,
        next_seq,
        nonce,
    })
}

/// Verifies `response` for `user_name`, running whatever extra exchange the plugin needs.
/// Returns the user and the sequence id for the final OK.
pub async fn authenticate(
    client: &mut ClientConn,
    cx: &HandshakeContext<'_>,
    user_name: &str,
    plugin: &str,
    response: &[u8],
    nonce: &[u8; 20],
    mut seq: u8,
) -> Result<(Arc<User>, u8), HandshakeError> {
    let user = cx.users.get(user_name).cloned();
    let password: &[u8] = user
        .as_ref()
        .map(|u| u.password.as_bytes())
        .unwrap_or(b"\x00unknown-user");
    let mut nonce: [u8; 20] = *nonce;
    let mut response = response.to_vec();
    let mut plugin = plugin;
    // Switch plugins the proxy does not speak to mysql_native_password; and ask again with
    // a fresh nonce when a client sent an empty answer for a password it has (some clients
    // do when their plugin is not the one the server announced).
    let supported = plugin == NATIVE_PASSWORD || plugin == CACHING_SHA2_PASSWORD;
    if !supported || (response.is_empty() && !password.is_empty()) {
        plugin = if plugin == CACHING_SHA2_PASSWORD {
            CACHING_SHA2_PASSWORD
        } else {
            NATIVE_PASSWORD
        };
        nonce = auth::new_scramble();
        let mut sw = Vec::with_capacity(64);
        encode_auth_switch(&mut sw, plugin, &nonce);
        client.push_packet(seq, &sw);
        client.flush().await?;
        let p = read_packet(&mut client.stream, &mut client.rbuf, HANDSHAKE_PACKET_LIMIT).await?;
        seq = p.last_seq.wrapping_add(1);
        response = p.payload.to_vec();
    }
    let using_password = !response.is_empty();
    let ok = if plugin == NATIVE_PASSWORD {
        auth::native::verify(password, &nonce, &response)
    } else {
        let cached = user.as_ref().is_some_and(|u| u.sha2_cached.load(Relaxed));
        if response.is_empty() {
            password.is_empty()
        } else if cached {
            let ok = auth::sha2::verify_fast(password, &nonce, &response);
            if ok {
                client.push_packet(seq, &[0x01, auth::sha2::FAST_AUTH_SUCCESS]);
                seq = seq.wrapping_add(1);
            }
            ok
        } else {
            // Full authentication: the password itself, in clear over TLS, otherwise
            // RSA-encrypted with the proxy's key.
            client.push_packet(seq, &[0x01, auth::sha2::PERFORM_FULL_AUTHENTICATION]);
            client.flush().await?;
            let mut p =
                read_packet(&mut client.stream, &mut client.rbuf, HANDSHAKE_PACKET_LIMIT).await?;
            seq = p.last_seq.wrapping_add(1);
            let over_tls = client.stream.is_tls();
            let mut asked_key = false;
            if p.payload[..] == [auth::sha2::REQUEST_PUBLIC_KEY] {
                asked_key = true;
                let mut pk = vec![0x01];
                pk.extend_from_slice(cx.rsa.public_pem().as_bytes());
                client.push_packet(seq, &pk);
                client.flush().await?;
                p = read_packet(&mut client.stream, &mut client.rbuf, HANDSHAKE_PACKET_LIMIT)
                    .await?;
                seq = p.last_seq.wrapping_add(1);
            }
            tracing::trace!(len = p.payload.len(), first = ?p.payload.first(), "caching_sha2 full authentication answer");
            let ok = if over_tls && !asked_key {
                auth::sha2::verify_cleartext(password, &p.payload)
            } else {
                match cx.rsa.decrypt(&p.payload) {
                    Ok(plain) => {
                        auth::sha2::verify_cleartext(password, &auth::xor_cycle(&plain, &nonce))
                    }
                    Err(_) => false,
                }
            };
            if ok {
                if let Some(u) = &user {
                    u.sha2_cached.store(true, Relaxed);
                }
            }
            ok
        }
    };
    match user {
        Some(u) if ok => Ok((u, seq)),
        _ => {
            let msg = format!(
                "Access denied for user '{}'@'{}' (using password: {})",
                user_name,
                cx.peer.ip(),
                if using_password { "YES" } else { "NO" }
            );
            client
                .send_err(seq, err::ACCESS_DENIED, b"28000", &msg)
                .await?;
            Err(HandshakeError::Denied(user_name.to_string()))
        }
    }
}
