//! A minimal MySQL client for load generation: connect (optionally from a chosen source
//! address), log in with mysql_native_password, run text queries, quit. Small on purpose: a
//! load generator holding tens of thousands of connections should cost little per connection
//! and add little CPU per query, so what is measured is the server or the proxy.

use bytes::BytesMut;
use sluice_mysql::auth;
use sluice_mysql::wire::consts::{cap, NATIVE_PASSWORD};
use sluice_mysql::wire::handshake::{decode_auth_switch, Greeting, HandshakeResponse};
use sluice_mysql::wire::packet::{frame, read_packet, Packet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// Where and as whom to connect.
#[derive(Clone, Debug)]
pub struct Target {
    /// Server or proxy address.
    pub addr: SocketAddr,
    /// Local address to connect from (several loopback addresses multiply the ports
    /// available: each source address has its own ephemeral port range).
    pub source: Option<IpAddr>,
    /// User.
    pub user: String,
    /// Password.
    pub password: String,
    /// Initial schema.
    pub database: Option<String>,
}

/// How a query ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// OK or a complete result set.
    Ok,
    /// An ERR packet with this code.
    Err(u16),
}

/// A failure of the connection itself (not an ERR packet).
#[derive(Debug)]
pub enum ClientError {
    /// Socket error or the peer closed.
    Io(io::Error),
    /// Something that is not the MySQL protocol.
    Protocol(String),
    /// The server refused the login with this ERR.
    Refused(u16, String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Protocol(m) => write!(f, "protocol: {m}"),
            ClientError::Refused(c, m) => write!(f, "login refused: {c} {m}"),
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

impl From<sluice_mysql::wire::packet::ReadError> for ClientError {
    fn from(e: sluice_mysql::wire::packet::ReadError) -> Self {
        ClientError::Protocol(e.to_string())
    }
}

const CAPS: u64 = cap::LONG_PASSWORD
    | cap::LONG_FLAG
    | cap::PROTOCOL_41
    | cap::TRANSACTIONS
    | cap::SECURE_CONNECTION
    | cap::MULTI_RESULTS
    | cap::PLUGIN_AUTH
    | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// One logged-in connection.
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    out: Vec<u8>,
}

fn err_code(p: &Packet) -> u16 {
    if p.payload.len() >= 3 {
        u16::from_le_bytes([p.payload[1], p.payload[2]])
    } else {
        0
    }
}

fn err_text(p: &Packet) -> String {
    // 0xff, code (2), '#', sqlstate (5), message.
    let skip = if p.payload.get(3) == Some(&b'#') {
        9
    } else {
        3
    };
    String::from_utf8_lossy(p.payload.get(skip..).unwrap_or_default()).into_owned()
}

impl Conn {
    /// Connects and logs in.
    pub async fn connect(t: &Target) -> Result<Conn, ClientError> {
        let sock = if t.addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(src) = t.source {
            sock.bind(SocketAddr::new(src, 0))?;
        }
        let stream = sock.connect(t.addr).await?;
        stream.set_nodelay(true)?;
        let mut c = Conn {
            stream,
            buf: BytesMut::new(),
            out: Vec::new(),
        };
        let g = c.recv().await?;
        if g.payload.first() == Some(&0xff) {
            return Err(ClientError::Refused(err_code(&g), err_text(&g)));
        }
        let greeting = Greeting::decode(&g.payload)
            .ok_or_else(|| ClientError::Protocol("malformed greeting".into()))?;
        let mut caps = CAPS;
        if t.database.is_some() {
            caps |= cap::CONNECT_WITH_DB;
        }
        let hr = HandshakeResponse {
            capabilities: caps,
            max_packet: 1 << 24,
            collation: 45,
            user: t.user.clone(),
            auth_response: auth::native::scramble(t.password.as_bytes(), &greeting.scramble),
            database: t.database.clone(),
            auth_plugin: Some(NATIVE_PASSWORD.into()),
            attributes: vec![],
        };
        let mut payload = Vec::new();
        hr.encode(&mut payload);
        c.send(1, &payload).await?;
        let mut p = c.recv().await?;
        if p.payload.first() == Some(&0xfe) {
            // Auth switch: answer for the plugin asked (only native password here).
            let (plugin, data) = decode_auth_switch(&p.payload)
                .ok_or_else(|| ClientError::Protocol("malformed auth switch".into()))?;
            if plugin != NATIVE_PASSWORD {
                return Err(ClientError::Protocol(format!(
                    "unsupported plugin {plugin}"
                )));
            }
            let nonce = &data[..data.len().min(20)];
            let answer = auth::native::scramble(t.password.as_bytes(), nonce);
            c.send(p.seq.wrapping_add(1), &answer).await?;
            p = c.recv().await?;
        }
        match p.payload.first() {
            Some(0x00) => {
                // Nothing is read until the next query: give the buffer back.
                c.buf = BytesMut::new();
                Ok(c)
            }
            Some(0xff) => Err(ClientError::Refused(err_code(&p), err_text(&p))),
            _ => Err(ClientError::Protocol("unexpected login answer".into())),
        }
    }

    async fn send(&mut self, seq: u8, payload: &[u8]) -> io::Result<()> {
        self.out.clear();
        frame(&mut self.out, seq, payload);
        self.stream.write_all(&self.out).await
    }

    async fn recv(&mut self) -> Result<Packet, ClientError> {
        Ok(read_packet(&mut self.stream, &mut self.buf, 1 << 30).await?)
    }

    /// Runs a text query and reads its whole response.
    pub async fn query(&mut self, sql: &str) -> Result<Outcome, ClientError> {
        self.out.clear();
        let mut payload = Vec::with_capacity(sql.len() + 1);
        payload.push(0x03);
        payload.extend_from_slice(sql.as_bytes());
        frame(&mut self.out, 0, &payload);
        self.stream.write_all(&self.out).await?;
        let first = self.recv().await?;
        match first.payload.first() {
            Some(0x00) => return Ok(Outcome::Ok),
            Some(0xff) => return Ok(Outcome::Err(err_code(&first))),
            None => return Err(ClientError::Protocol("empty packet".into())),
            _ => {}
        }
        // Column definitions, EOF, rows, EOF (or ERR).
        let mut eofs = 0;
        loop {
            let p = self.recv().await?;
            match p.payload.first() {
                Some(0xff) => return Ok(Outcome::Err(err_code(&p))),
                Some(0xfe) if p.payload.len() < 9 => {
                    eofs += 1;
                    if eofs == 2 {
                        return Ok(Outcome::Ok);
                    }
                }
                _ => {}
            }
        }
    }

    /// Drops the read buffer (a held idle connection should cost as little as possible).
    pub fn shrink(&mut self) {
        self.buf = BytesMut::new();
        self.out = Vec::new();
    }

    /// Says goodbye (COM_QUIT) and closes.
    pub async fn quit(mut self) {
        let _ = self.send(0, &[0x01]).await;
        let _ = self.stream.shutdown().await;
    }
}
