//! A PostgreSQL client at the message level (postgres-protocol's builders, SCRAM): for the
//! protocol cases no driver lets a test spell out — a duplicate Parse, a Parse on its own,
//! several Syncs in one write, COPY through the extended protocol.
#![allow(dead_code)]

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use sluice_runtime::tls::{BackendStream, BackendTls};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any answer may take (generous: a busy machine).
const DEADLINE: Duration = Duration::from_secs(60);

/// One message from the server: its type byte and body.
#[derive(Debug, Clone)]
pub struct Msg {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl Msg {
    /// An ErrorResponse's (or NoticeResponse's) SQLSTATE.
    pub fn sqlstate(&self) -> Option<String> {
        self.field(b'C')
    }

    /// An ErrorResponse's (or NoticeResponse's) SQLSTATE and message: `SQLSTATE message`.
    pub fn text(&self) -> String {
        format!(
            "{} {}",
            self.sqlstate().unwrap_or_default(),
            self.field(b'M').unwrap_or_default()
        )
    }

    /// An ErrorResponse's (or NoticeResponse's) field.
    pub fn field(&self, kind: u8) -> Option<String> {
        if self.tag != b'E' && self.tag != b'N' {
            return None;
        }
        let mut rest = &self.body[..];
        while let Some((&k, after)) = rest.split_first() {
            if k == 0 {
                break;
            }
            let end = after.iter().position(|&b| b == 0)?;
            if k == kind {
                return Some(String::from_utf8_lossy(&after[..end]).into_owned());
            }
            rest = &after[end + 1..];
        }
        None
    }
}

/// A logged-in connection.
pub struct Raw {
    stream: BackendStream,
    rbuf: BytesMut,
    /// Bytes to send.
    pub out: BytesMut,
    /// The BackendKeyData the login gave (process id, secret).
    pub key: (u32, u32),
    /// The ParameterStatus values the login gave, in order.
    pub params: Vec<(String, String)>,
}

impl Raw {
    /// Connects and logs in with SCRAM (or no password) to `database`.
    pub async fn connect(port: u16, user: &str, password: &str, database: &str) -> Raw {
        match Raw::try_connect(port, user, password, database).await {
            Ok(raw) => raw,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`Raw::connect`], an error instead of a panic.
    pub async fn try_connect(
        port: u16,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<Raw, String> {
        Raw::connect_with(port, password, &[("user", user), ("database", database)]).await
    }

    /// As [`Raw::try_connect`], with these startup parameters (in this order).
    pub async fn connect_with(
        port: u16,
        password: &str,
        params: &[(&str, &str)],
    ) -> Result<Raw, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        Raw::login(BackendStream::Plain(stream), password, params).await
    }

    /// As [`Raw::connect`], over TLS (an SSLRequest first; the server's certificate checked
    /// by `tls`), with a small socket receive buffer: what the client does not read soon
    /// fills sluice's socket to it.
    pub async fn connect_tls(
        port: u16,
        user: &str,
        password: &str,
        database: &str,
        tls: &BackendTls,
    ) -> Raw {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(8192).unwrap();
        let mut tcp = socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .unwrap();
        tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
            .await
            .unwrap();
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"S", "TLS refused");
        let stream = tls
            .connect(&format!("127.0.0.1:{port}"), tcp)
            .await
            .unwrap();
        let params = [("user", user), ("database", database)];
        match Raw::login(stream, password, &params).await {
            Ok(raw) => raw,
            Err(e) => panic!("{e}"),
        }
    }

    /// Logs in over `stream`.
    async fn login(
        stream: BackendStream,
        password: &str,
        params: &[(&str, &str)],
    ) -> Result<Raw, String> {
        let mut raw = Raw {
            stream,
            rbuf: BytesMut::new(),
            out: BytesMut::new(),
            key: (0, 0),
            params: Vec::new(),
        };
        frontend::startup_message(params.iter().copied(), &mut raw.out).unwrap();
        raw.try_flush().await?;
        let mut scram = None;
        loop {
            let m = raw.try_next().await?;
            match m.tag {
                b'R' => {
                    let kind = u32::from_be_bytes(m.body[..4].try_into().unwrap());
                    match kind {
                        0 => {}
                        10 => {
                            let s = ScramSha256::new(
                                password.as_bytes(),
                                ChannelBinding::unsupported(),
                            );
                            frontend::sasl_initial_response(
                                "SCRAM-SHA-256",
                                s.message(),
                                &mut raw.out,
                            )
                            .unwrap();
                            scram = Some(s);
                            raw.try_flush().await?;
                        }
                        11 => {
                            let s = scram.as_mut().ok_or("SASL continue before start")?;
                            s.update(&m.body[4..]).map_err(|e| e.to_string())?;
                            frontend::sasl_response(s.message(), &mut raw.out).unwrap();
                            raw.try_flush().await?;
                        }
                        12 => scram
                            .as_mut()
                            .ok_or("SASL final before start")?
                            .finish(&m.body[4..])
                            .map_err(|e| e.to_string())?,
                        other => return Err(format!("authentication request {other} not handled")),
                    }
                }
                b'E' => return Err(format!("login failed: {}", m.text())),
                b'K' if m.body.len() == 8 => {
                    let word = |i: usize| u32::from_be_bytes(m.body[i..i + 4].try_into().unwrap());
                    raw.key = (word(0), word(4));
                }
                b'S' => {
                    let mut parts = m.body.split(|&b| b == 0).map(String::from_utf8_lossy);
                    if let (Some(k), Some(v)) = (parts.next(), parts.next()) {
                        raw.params.push((k.into_owned(), v.into_owned()));
                    }
                }
                b'Z' => return Ok(raw),
                _ => {}
            }
        }
    }

    /// Runs `sql` as a simple query: its messages up to ReadyForQuery, or the error
    /// (`SQLSTATE message`) it failed with, or why the connection failed.
    pub async fn try_simple(&mut self, sql: &str) -> Result<Vec<Msg>, String> {
        frontend::query(sql, &mut self.out).unwrap();
        self.try_flush().await?;
        let mut got = Vec::new();
        let mut failed = None;
        loop {
            let m = self.try_next().await?;
            match m.tag {
                b'Z' => break,
                b'E' => failed = Some(m.text()),
                b'S' | b'N' => {}
                _ => got.push(m),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(got),
        }
    }

    /// Runs `sql` as a simple query: every message up to and including its ReadyForQuery,
    /// ParameterStatus and notices among them.
    pub async fn simple_all(&mut self, sql: &str) -> Vec<Msg> {
        frontend::query(sql, &mut self.out).unwrap();
        self.flush().await;
        let mut got = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.tag == b'Z';
            got.push(m);
            if done {
                return got;
            }
        }
    }

    async fn try_flush(&mut self) -> Result<(), String> {
        let out = self.out.split();
        self.stream
            .write_all_sent(&out)
            .await
            .map_err(|e| format!("send: {e}"))
    }

    /// The whole message at the front of what was read, taken.
    fn buffered(&mut self) -> Option<Msg> {
        let len = u32::from_be_bytes(self.rbuf.get(1..5)?.try_into().unwrap()) as usize;
        if self.rbuf.len() <= len {
            return None;
        }
        let m = self.rbuf.split_to(len + 1);
        Some(Msg {
            tag: m[0],
            body: m[5..].to_vec(),
        })
    }

    /// The next message, or why there is none (an error message the server closed the
    /// connection after included).
    pub async fn try_next(&mut self) -> Result<Msg, String> {
        let mut last_error: Option<Msg> = None;
        loop {
            if let Some(msg) = self.buffered() {
                if msg.tag == b'E' && msg.field(b'S').as_deref() == Some("FATAL") {
                    last_error = Some(msg);
                    continue;
                }
                return Ok(msg);
            }
            let n = tokio::time::timeout(DEADLINE, self.stream.read_buf(&mut self.rbuf))
                .await
                .map_err(|_| "the server did not answer within 60 s".to_string())?
                .map_err(|e| format!("receive: {e}"))?;
            if n == 0 {
                return Err(match last_error {
                    Some(m) => m.text(),
                    None => "the connection closed".into(),
                });
            }
        }
    }

    /// Sends `bytes` as they are; why the connection would not take them, if it would not.
    pub async fn try_send_raw(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all_sent(bytes)
            .await
            .map_err(|e| format!("send: {e}"))
    }

    /// Sends what `out` holds.
    pub async fn flush(&mut self) {
        let out = self.out.split();
        self.stream.write_all_sent(&out).await.unwrap();
    }

    /// The next message (notices and parameter changes included).
    pub async fn next(&mut self) -> Msg {
        loop {
            if let Some(msg) = self.buffered() {
                return msg;
            }
            let n = tokio::time::timeout(DEADLINE, self.stream.read_buf(&mut self.rbuf))
                .await
                .expect("the server did not answer within 60 s")
                .unwrap();
            assert!(n > 0, "the connection closed");
        }
    }

    /// Every message until the server closes the connection (within the deadline), FATALs
    /// included.
    pub async fn until_closed(&mut self) -> Vec<Msg> {
        let mut got = Vec::new();
        loop {
            while let Some(msg) = self.buffered() {
                got.push(msg);
            }
            let n = tokio::time::timeout(DEADLINE, self.stream.read_buf(&mut self.rbuf))
                .await
                .expect("the server did not close the connection within 60 s")
                .unwrap_or(0);
            if n == 0 {
                return got;
            }
        }
    }

    /// Messages up to and including the next ReadyForQuery (ParameterStatus and notices
    /// left out).
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut got = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.tag == b'Z';
            if !matches!(m.tag, b'S' | b'N') {
                got.push(m);
            }
            if done {
                return got;
            }
        }
    }

    /// Sends `out` and reads up to `n` ReadyForQuery messages; the type bytes as a string
    /// (`1` ParseComplete, `2` BindComplete, `D` DataRow, `C` CommandComplete, `E` error,
    /// `Z` ReadyForQuery, ...) and the messages.
    pub async fn round(&mut self, n: usize) -> (String, Vec<Msg>) {
        self.flush().await;
        let mut all = Vec::new();
        for _ in 0..n {
            all.extend(self.until_ready().await);
        }
        (all.iter().map(|m| m.tag as char).collect(), all)
    }

    /// Parse, Bind, Execute of `sql` with text parameters (no Sync).
    pub fn extended(&mut self, statement: &str, sql: Option<&str>, params: &[Option<&str>]) {
        if let Some(sql) = sql {
            frontend::parse(statement, sql, [], &mut self.out).unwrap();
        }
        frontend::bind(
            "",
            statement,
            [0i16],
            params.iter(),
            |p, buf| match p {
                Some(v) => {
                    buf.extend_from_slice(v.as_bytes());
                    Ok(postgres_protocol::IsNull::No)
                }
                None => Ok(postgres_protocol::IsNull::Yes),
            },
            [0i16],
            &mut self.out,
        )
        .map_err(|_| "bind")
        .unwrap();
        frontend::execute("", 0, &mut self.out).unwrap();
    }

    /// The text of the first column of each DataRow in `msgs`.
    pub fn column(msgs: &[Msg]) -> Vec<String> {
        msgs.iter()
            .filter(|m| m.tag == b'D')
            .map(|m| {
                let len = i32::from_be_bytes(m.body[2..6].try_into().unwrap());
                if len < 0 {
                    "NULL".to_string()
                } else {
                    String::from_utf8_lossy(&m.body[6..6 + len as usize]).into_owned()
                }
            })
            .collect()
    }
}

/// Sends a CancelRequest with `key` (a login's BackendKeyData) to `port`, as libpq does: on a
/// connection of its own, closed by the other side once it has read it.
pub async fn cancel(port: u16, key: (u32, u32)) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut packet = Vec::with_capacity(16);
    packet.extend_from_slice(&16u32.to_be_bytes());
    packet.extend_from_slice(&80_877_102u32.to_be_bytes());
    packet.extend_from_slice(&key.0.to_be_bytes());
    packet.extend_from_slice(&key.1.to_be_bytes());
    s.write_all(&packet).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, s.read_to_end(&mut rest)).await;
}
