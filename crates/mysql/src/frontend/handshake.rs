//! The connection phase with a client: greeting, capability negotiation and authentication
//! (`mysql_native_password` and `caching_sha2_password`, an auth switch for any other plugin;
//! see `auth::plugin`). Also used for COM_CHANGE_USER. Every packet the client sends must
//! carry the next sequence id; like MariaDB, anything else gets error 1156 and the
//! connection closes. Failed logins are counted per address (`LoginThrottle`).

use super::client::ClientConn;
use crate::auth::plugin::{plan, Plan};
use crate::auth::{self};
use crate::wire::consts::{cap, err, status, CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};
use crate::wire::handshake::{encode_auth_switch, Greeting, HandshakeResponse, SSL_REQUEST_LEN};
use crate::wire::packet::{read_packet, Packet, ReadError};
use sluice_core::login_throttle::LoginThrottle;
use sluice_runtime::users::{User, Users};
use std::net::SocketAddr;
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
    /// A packet with the wrong sequence id (the client got error 1156).
    #[error("got packets out of order")]
    OutOfOrder,
}

/// Everything the handshake needs from the proxy.
pub struct HandshakeContext<'a> {
    /// Users.
    pub users: &'a Users,
    /// Version string to announce.
    pub server_version: &'a str,
    /// Connection id given to the client.
    pub connection_id: u32,
    /// Client address (for error messages).
    pub peer: SocketAddr,
    /// Plugin announced in the greeting.
    pub default_plugin: &'static str,
    /// TLS, when configured: the greeting offers it and an SSLRequest upgrades the stream.
    pub tls: Option<&'a tokio_rustls::TlsAcceptor>,
    /// Failed logins per address.
    pub throttle: &'a LoginThrottle,
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

    let mut seq = 1;
    let mut p = read_answer(client, seq).await?;
    if let (Some(acceptor), SSL_REQUEST_LEN) = (cx.tls, p.payload.len()) {
        // TLS first, then the real handshake response over it.
        let already_read = client.rbuf.split();
        client.stream.upgrade(acceptor, already_read).await?;
        seq += 1;
        p = read_answer(client, seq).await?;
    }
    seq += 1;
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
    let plugin = resp.auth_plugin.as_deref().unwrap_or(NATIVE_PASSWORD);
    let (user, next_seq) = authenticate(
        client,
        cx,
        &resp.user,
        plugin,
        &resp.auth_response,
        &nonce,
        seq,
    )
    .await?;
    Ok(Authenticated {
        user,
        database: resp.database,
        collation: resp.collation,
        attributes: resp.attributes,
        next_seq,
        nonce,
    })
}

/// Verifies `response` for `user_name`, running whatever extra exchange the plugin needs;
/// `seq` is the sequence id of the proxy's next packet. Returns the user and the sequence id
/// for the final OK. A failure is counted against the client's address and answered (after
/// the configured delay) with error 1045.
pub async fn authenticate(
    client: &mut ClientConn,
    cx: &HandshakeContext<'_>,
    user_name: &str,
    plugin: &str,
    response: &[u8],
    nonce: &[u8; 20],
    seq: u8,
) -> Result<(Arc<User>, u8), HandshakeError> {
    // A user whose password is configured in one of PostgreSQL's stored forms (a SCRAM
    // secret, an MD5 hash) has no password a MySQL exchange could check: sending the stored
    // form must not log in. Such a user is answered as an unknown one.
    let user = cx
        .users
        .get(user_name)
        .filter(|u| {
            sluice_config::PasswordForm::of(&u.password) == sluice_config::PasswordForm::Plain
        })
        .cloned();
    // An unknown user goes through the same exchange as a known one with a password.
    let password: &[u8] = user
        .as_ref()
        .map(|u| u.password.as_bytes())
        .unwrap_or(b"\x00unknown-user");
    let mut answer = Answer {
        plugin: "",
        nonce: *nonce,
        response: response.to_vec(),
        seq,
    };
    settle_plugin(client, cx, plugin, password, &mut answer).await?;
    let ok = verify(client, password, &mut answer);
    admit(client, cx, user_name, user.filter(|_| ok), &answer).await
}

/// The client's answer to the proxy's challenge, and where the exchange is.
struct Answer {
    /// The plugin that verifies it.
    plugin: &'static str,
    /// The challenge it answers.
    nonce: [u8; 20],
    /// The client's scramble.
    response: Vec<u8>,
    /// The sequence id of the proxy's next packet.
    seq: u8,
}

/// Decides which plugin verifies the client (see `auth::plugin::plan`), switching the client
/// to another one (with a fresh challenge) when its own cannot be verified here.
async fn settle_plugin(
    client: &mut ClientConn,
    cx: &HandshakeContext<'_>,
    plugin: &str,
    password: &[u8],
    a: &mut Answer,
) -> Result<(), HandshakeError> {
    a.plugin = match plan(
        plugin,
        !a.response.is_empty(),
        !password.is_empty(),
        cx.default_plugin,
    ) {
        Plan::Verify(p) => p,
        Plan::Switch(p) => {
            a.nonce = auth::new_scramble();
            let mut sw = Vec::with_capacity(64);
            encode_auth_switch(&mut sw, p, &a.nonce);
            client.push_packet(a.seq, &sw);
            client.flush().await?;
            a.response = read_answer(client, a.seq.wrapping_add(1))
                .await?
                .payload
                .to_vec();
            a.seq = a.seq.wrapping_add(2);
            p
        }
    };
    Ok(())
}

/// Checks the scramble against the password (caching_sha2_password's fast path is told
/// its success, as a server does).
fn verify(client: &mut ClientConn, password: &[u8], a: &mut Answer) -> bool {
    match a.plugin {
        CACHING_SHA2_PASSWORD if a.response.is_empty() => password.is_empty(),
        CACHING_SHA2_PASSWORD => {
            let ok = auth::sha2::verify_fast(password, &a.nonce, &a.response);
            if ok {
                client.push_packet(a.seq, &[0x01, auth::sha2::FAST_AUTH_SUCCESS]);
                a.seq = a.seq.wrapping_add(1);
            }
            ok
        }
        _ => auth::native::verify(password, &a.nonce, &a.response),
    }
}

/// Lets a verified user in (`None`: unknown or wrong password), unless it must use TLS and
/// does not; a refusal is counted against the address and answered with error 1045.
async fn admit(
    client: &mut ClientConn,
    cx: &HandshakeContext<'_>,
    user_name: &str,
    user: Option<Arc<User>>,
    a: &Answer,
) -> Result<(Arc<User>, u8), HandshakeError> {
    // A name longer than any configured one is cut in messages and logs.
    let user_name = shown(user_name);
    let Some(user) = user else {
        let using = if a.response.is_empty() { "NO" } else { "YES" };
        let msg = format!(
            "Access denied for user '{user_name}'@'{}' (using password: {using})",
            cx.peer.ip()
        );
        cx.throttle.failed_login(cx.peer.ip(), user_name).await;
        client
            .send_err(a.seq, err::ACCESS_DENIED, b"28000", &msg)
            .await?;
        return Err(HandshakeError::Denied(user_name.to_string()));
    };
    if user.require_tls && !client.stream.is_tls() {
        let msg = format!(
            "Access denied for user '{user_name}'@'{}': this user must connect with TLS",
            cx.peer.ip()
        );
        client
            .send_err(a.seq, err::ACCESS_DENIED, b"28000", &msg)
            .await?;
        return Err(HandshakeError::Denied(user_name.to_string()));
    }
    cx.throttle.succeeded(cx.peer.ip());
    Ok((user, a.seq))
}

/// `name`, cut to the longest user name a configuration may hold (80 characters).
fn shown(name: &str) -> &str {
    match name.char_indices().nth(80) {
        Some((i, _)) => &name[..i],
        None => name,
    }
}

/// Reads the client's next packet, which must carry sequence id `expected`; otherwise
/// answers like MariaDB (error 1156, "Got packets out of order") and fails.
async fn read_answer(client: &mut ClientConn, expected: u8) -> Result<Packet, HandshakeError> {
    let p = read_packet(&mut client.stream, &mut client.rbuf, HANDSHAKE_PACKET_LIMIT).await?;
    if p.seq != expected {
        client
            .send_err(
                expected,
                err::PACKETS_OUT_OF_ORDER,
                b"08S01",
                "Got packets out of order",
            )
            .await?;
        return Err(HandshakeError::OutOfOrder);
    }
    Ok(p)
}
