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
        r.greeting = Greeting::decode(&p.payload).expect("valid greeting");
        r
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
        let nonce = self.greeting.scramble;
        let auth_response = match plugin {
            CACHING_SHA2_PASSWORD => auth::sha2::scramble(password.as_bytes(), &nonce),
            NATIVE_PASSWORD => auth::native::scramble(password.as_bytes(), &nonce),
            _ => b"whatever".to_vec(),
        };
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
        self.send(1, &p).await;
        self.recv().await.expect("auth answer")
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

/// Text of an ERR packet, `None` if not an error.
pub fn err_text(p: &Packet) -> Option<(u16, String)> {
    sluice_mysql::wire::ok::parse_err(&p.payload).map(|e| (e.code, e.message_str()))
}
