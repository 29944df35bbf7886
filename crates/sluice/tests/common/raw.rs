//! A minimal raw-protocol client for tests that need to see or send exact packets.
#![allow(dead_code)]

use bytes::BytesMut;
use sluice_mysql::auth;
use sluice_mysql::wire::consts::{cap, CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};
use sluice_mysql::wire::handshake::{Greeting, HandshakeResponse};
use sluice_mysql::wire::packet::{frame, read_packet, Packet, ReadError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    pub greeting: Greeting,
}

pub const CLIENT_CAPS: u64 = cap::LONG_PASSWORD
    | cap::LONG_FLAG
    | cap::PROTOCOL_41
    | cap::TRANSACTIONS
    | cap::SECURE_CONNECTION
    | cap::MULTI_STATEMENTS
    | cap::MULTI_RESULTS
    | cap::PLUGIN_AUTH
    | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA
    | cap::CONNECT_WITH_DB;

impl Raw {
    /// Connects and reads the greeting.
    pub async fn connect(port: u16) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        Raw::greeted(stream)
            .await
            .expect("a greeting, not an error")
    }

    /// Connects from source address `from` (e.g. 127.0.0.2); the first packet is the
    /// greeting, or the error packet sent in its place.
    pub async fn connect_from(from: std::net::Ipv4Addr, port: u16) -> Result<Raw, Packet> {
        let stream = connect_from(from, port).await;
        Raw::greeted(stream).await
    }

    async fn greeted(stream: TcpStream) -> Result<Raw, Packet> {
        let mut r = Raw {
            stream,
            buf: BytesMut::new(),
            greeting: Greeting::decode(&[10, 0]).unwrap_or_else(|| Greeting {
                server_version: String::new(),
                connection_id: 0,
                scramble: [0; 20],
                capabilities: 0,
                collation: 0,
                status: 0,
                auth_plugin: String::new(),
            }),
        };
        let p = r.recv().await.expect("greeting");
        if p.payload.first() == Some(&0xff) {
            return Err(p);
        }
        r.greeting = Greeting::decode(&p.payload).expect("valid greeting");
        Ok(r)
    }

    pub async fn send(&mut self, seq: u8, payload: &[u8]) {
        let mut out = Vec::new();
        frame(&mut out, seq, payload);
        self.stream.write_all(&out).await.expect("send");
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send raw");
    }

    pub async fn recv(&mut self) -> Result<Packet, ReadError> {
        read_packet(&mut self.stream, &mut self.buf, 1 << 30).await
    }

    /// Sends a handshake response for `plugin` and returns the next packet.
    pub async fn hello(
        &mut self,
        user: &str,
        password: &str,
        plugin: &str,
        caps: u64,
        db: Option<&str>,
    ) -> Packet {
        self.hello_seq(user, password, plugin, caps, db, 1).await
    }

    /// [`Raw::hello`] with the handshake response sent with sequence id `seq`.
    pub async fn hello_seq(
        &mut self,
        user: &str,
        password: &str,
        plugin: &str,
        caps: u64,
        db: Option<&str>,
        seq: u8,
    ) -> Packet {
        let nonce = self.greeting.scramble;
        let auth_response = scramble_for(plugin, password, &nonce);
        let hr = HandshakeResponse {
            capabilities: caps
                | if db.is_some() {
                    cap::CONNECT_WITH_DB
                } else {
                    0
                },
            max_packet: 1 << 24,
            collation: 45,
            user: user.into(),
            auth_response,
            database: db.map(str::to_string),
            auth_plugin: Some(plugin.into()),
            attributes: vec![],
        };
        let mut p = Vec::new();
        hr.encode(&mut p);
        self.send(seq, &p).await;
        self.recv().await.expect("auth answer")
    }

    /// Sends COM_CHANGE_USER computed for `plugin` with the greeting's nonce; returns the next
    /// packet.
    pub async fn change_user(
        &mut self,
        user: &str,
        password: &str,
        plugin: &str,
        db: Option<&str>,
    ) -> Packet {
        let auth = scramble_for(plugin, password, &self.greeting.scramble);
        self.change_user_with(user, &auth, plugin, db).await
    }

    /// Sends COM_CHANGE_USER with the authentication answer `auth`; returns the next packet.
    pub async fn change_user_with(
        &mut self,
        user: &str,
        auth: &[u8],
        plugin: &str,
        db: Option<&str>,
    ) -> Packet {
        let mut p = vec![0x11];
        p.extend_from_slice(user.as_bytes());
        p.push(0);
        p.push(auth.len() as u8);
        p.extend_from_slice(auth);
        p.extend_from_slice(db.unwrap_or("").as_bytes());
        p.push(0);
        p.extend_from_slice(&45u16.to_le_bytes());
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        self.command(&p).await
    }

    /// Completes an authentication exchange that answered `p`: follows auth switches and
    /// caching_sha2's fast-auth success; returns the final OK or ERR.
    pub async fn finish_auth(&mut self, mut p: Packet, password: &str) -> Packet {
        for _ in 0..4 {
            match p.payload.first() {
                Some(0xfe) => {
                    let (plugin, nonce) =
                        sluice_mysql::wire::handshake::decode_auth_switch(&p.payload)
                            .expect("auth switch");
                    let answer = scramble_for(&plugin, password, &nonce);
                    self.send(p.last_seq.wrapping_add(1), &answer).await;
                }
                Some(0x01) => {
                    assert_eq!(
                        &p.payload[..],
                        &[0x01, auth::sha2::FAST_AUTH_SUCCESS],
                        "only the fast path is used"
                    );
                }
                _ => return p,
            }
            p = self.recv().await.expect("auth exchange");
        }
        panic!("authentication exchange does not end");
    }

    /// Runs a text query and returns the rows of its result set (text values, `None` for
    /// NULL), or the error. Counts on the classic EOF packets (no CLIENT_DEPRECATE_EOF).
    pub async fn query_rows(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, (u16, String)> {
        let mut q = vec![0x03];
        q.extend_from_slice(sql.as_bytes());
        let first = self.command(&q).await;
        if let Some(e) = err_text(&first) {
            return Err(e);
        }
        if first.payload[0] == 0x00 {
            return Ok(vec![]);
        }
        let mut eofs = 0;
        let mut rows = Vec::new();
        while eofs < 2 {
            let p = self.recv().await.expect("result set");
            if let Some(e) = err_text(&p) {
                return Err(e);
            }
            if p.payload[0] == 0xfe && p.payload.len() < 9 {
                eofs += 1;
            } else if eofs == 1 {
                rows.push(text_row(&p.payload));
            }
        }
        Ok(rows)
    }

    /// Logs in with mysql_native_password and asserts success.
    pub async fn login(port: u16) -> Raw {
        let mut r = Raw::connect(port).await;
        let p = r
            .hello("app", "app", NATIVE_PASSWORD, CLIENT_CAPS, Some("test"))
            .await;
        assert_eq!(
            p.payload[0],
            0,
            "login OK expected, got {:?}",
            String::from_utf8_lossy(&p.payload)
        );
        r
    }

    /// Sends a command (seq 0) and returns the first response packet.
    pub async fn command(&mut self, payload: &[u8]) -> Packet {
        self.send(0, payload).await;
        self.recv().await.expect("response")
    }

    /// Reads packets until an OK/ERR/EOF-terminated exchange ends (counting on a simple
    /// response shape: used with statements returning small results).
    pub async fn recv_until_eof(&mut self) -> Vec<Packet> {
        let mut v = Vec::new();
        loop {
            let p = self.recv().await.expect("packet");
            let end = matches!(p.payload.first(), Some(0xff))
                || (p.payload.first() == Some(&0xfe) && p.payload.len() < 9);
            v.push(p);
            if end {
                return v;
            }
        }
    }
}

/// A TCP connection to `port` on 127.0.0.1 from source address `from`.
pub async fn connect_from(from: std::net::Ipv4Addr, port: u16) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind((from, 0).into()).expect("bind source address");
    sock.connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect")
}

/// The authentication answer `plugin` computes for `password` and `nonce` (garbage for a
/// plugin this client does not speak).
pub fn scramble_for(plugin: &str, password: &str, nonce: &[u8]) -> Vec<u8> {
    match plugin {
        CACHING_SHA2_PASSWORD => auth::sha2::scramble(password.as_bytes(), nonce),
        NATIVE_PASSWORD => auth::native::scramble(password.as_bytes(), nonce),
        _ => b"whatever".to_vec(),
    }
}

/// The values of a text-protocol row (length-encoded strings shorter than 251 bytes).
fn text_row(mut p: &[u8]) -> Vec<Option<String>> {
    let mut v = Vec::new();
    while let Some((&len, rest)) = p.split_first() {
        if len == 0xfb {
            v.push(None);
            p = rest;
        } else {
            let n = (len as usize).min(rest.len());
            v.push(Some(String::from_utf8_lossy(&rest[..n]).into_owned()));
            p = &rest[n..];
        }
    }
    v
}

/// Text of an ERR packet, `None` if not an error.
pub fn err_text(p: &Packet) -> Option<(u16, String)> {
    sluice_mysql::wire::ok::parse_err(&p.payload).map(|e| (e.code, e.message_str()))
}
