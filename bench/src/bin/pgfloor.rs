//! The floor under sluice's CPU per transaction: the least a transaction pooler on tokio can
//! do for PostgreSQL's simple protocol, measured with pgbench beside sluice and PgBouncer.
//!
//! It is not a proxy anyone should run. It parses nothing, routes nothing, keeps no session
//! state and counts nothing: it accepts any client without a password, and for each `Query`
//! message takes an idle server connection (or opens one), writes the message, reads the
//! server's answer up to ReadyForQuery, writes it to the client and puts the connection
//! back. Everything runs on one thread (a current-thread runtime, as sluice with
//! `worker_threads = 1`), one task per client, as sluice's sessions do.
//!
//! Its server connections log in without a password (the server must trust them: connect
//! them from their own loopback address, `--source`, and give that address a `trust` line
//! in `pg_hba.conf`). Extended-protocol messages are refused: select-only with `-M simple`
//! is what it is for.
//!
//! ```sh
//! pgfloor --listen 127.0.0.1:7450 --server 127.0.0.1:5432 --source 127.0.0.2 \
//!     --user app --database postgres
//! ```

use bytes::{Buf, BytesMut};
use sluice_postgres::wire::{
    read_message, read_startup, startup_message, ReadyStatus, Startup, Writer,
};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Where to listen and which server to pool.
struct Opts {
    listen: SocketAddr,
    server: SocketAddr,
    source: std::net::IpAddr,
    user: String,
    database: String,
}

/// An idle server connection and its read buffer.
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

type Pool = Rc<RefCell<Vec<Conn>>>;

/// The largest message taken from a client or a server.
const MAX_MESSAGE: usize = 64 << 20;

fn main() -> std::process::ExitCode {
    let opts = match parse(std::env::args().skip(1).collect()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pgfloor: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgfloor: runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    if let Err(e) = local.block_on(&rt, serve(Rc::new(opts))) {
        eprintln!("pgfloor: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

const USAGE: &str = "usage: pgfloor [--listen 127.0.0.1:7450] [--server 127.0.0.1:5432] [--source 127.0.0.2] [--user app] [--database postgres]";

fn parse(args: Vec<String>) -> Result<Opts, String> {
    let addr = |flag: &str, v: &str| -> Result<SocketAddr, String> {
        v.parse().map_err(|_| format!("{flag} {v}: want HOST:PORT"))
    };
    let mut o = Opts {
        listen: addr("--listen", "127.0.0.1:7450")?,
        server: addr("--server", "127.0.0.1:5432")?,
        source: std::net::IpAddr::from([127, 0, 0, 2]),
        user: "app".into(),
        database: "postgres".into(),
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => o.listen = addr(&flag, &value)?,
            "--server" => o.server = addr(&flag, &value)?,
            "--source" => {
                o.source = value
                    .parse()
                    .map_err(|_| format!("--source {value}: want an address"))?
            }
            "--user" => o.user = value,
            "--database" => o.database = value,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

async fn serve(opts: Rc<Opts>) -> Res<()> {
    let listener = TcpListener::bind(opts.listen).await?;
    println!("pgfloor listening on {}", opts.listen);
    let pool: Pool = Rc::default();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (opts, pool) = (opts.clone(), pool.clone());
        tokio::task::spawn_local(async move {
            if let Err(e) = session(stream, &opts, &pool).await {
                eprintln!("pgfloor: session ended: {e}");
            }
        });
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Reads until `buf` holds a whole message; its tag and length (`None` at end of stream).
async fn message(stream: &mut TcpStream, buf: &mut BytesMut) -> Res<Option<(u8, usize)>> {
    loop {
        if let Some(m) = message_at(buf, 0)? {
            return Ok(Some(m));
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(8192);
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

async fn session(mut client: TcpStream, opts: &Opts, pool: &Pool) -> Res<()> {
    // SSLRequest (refused), then the StartupMessage, whose parameters are not used.
    let mut cbuf = BytesMut::with_capacity(4096);
    loop {
        match read_startup(&cbuf)? {
            Some((Startup::SslRequest, n)) => {
                cbuf.advance(n);
                client.write_all(b"N").await?;
            }
            Some((Startup::Start(_), n)) => {
                cbuf.advance(n);
                break;
            }
            Some(_) => return Err("only a StartupMessage or an SSLRequest is answered".into()),
            None => {
                if client.read_buf(&mut cbuf).await? == 0 {
                    return Ok(());
                }
            }
        }
    }
    let mut hello = Writer::new();
    hello.auth_ok();
    for (k, v) in [
        ("server_version", "15"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        hello.parameter_status(k, v);
    }
    hello.backend_key_data(1, 1);
    hello.ready_for_query(ReadyStatus::Idle);
    client.write_all(hello.as_bytes()).await?;

    loop {
        let Some((tag, len)) = message(&mut client, &mut cbuf).await? else {
            return Ok(());
        };
        match tag {
            b'X' => return Ok(()),
            b'Q' => {}
            other => return Err(format!("message {:?} not supported", other as char).into()),
        }
        let taken = pool.borrow_mut().pop();
        let mut conn = match taken {
            Some(c) => c,
            None => connect(opts).await?,
        };
        conn.stream.write_all(&cbuf[..len]).await?;
        cbuf.advance(len);
        // The answer, up to and including ReadyForQuery.
        let mut at = 0;
        loop {
            match message_at(&conn.buf, at)? {
                Some((b'Z', n)) => {
                    at += n;
                    break;
                }
                Some((_, n)) => at += n,
                None => {
                    if conn.buf.capacity() - conn.buf.len() < 1024 {
                        conn.buf.reserve(8192);
                    }
                    if conn.stream.read_buf(&mut conn.buf).await? == 0 {
                        return Err("server closed".into());
                    }
                }
            }
        }
        client.write_all(&conn.buf[..at]).await?;
        conn.buf.advance(at);
        pool.borrow_mut().push(conn);
    }
}

/// The message at `at` in `buf`, if whole: its tag and length.
fn message_at(buf: &[u8], at: usize) -> Res<Option<(u8, usize)>> {
    let rest = buf.get(at..).unwrap_or_default();
    Ok(read_message(rest, MAX_MESSAGE)?.map(|(m, len)| (m.tag, len)))
}

/// A new server connection, logged in (the server must trust it).
async fn connect(opts: &Opts) -> Res<Conn> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(opts.source, 0))?;
    let mut stream = socket.connect(opts.server).await?;
    stream.set_nodelay(true)?;
    let startup = startup_message(&[("user", &opts.user), ("database", &opts.database)]);
    stream.write_all(&startup).await?;
    let mut buf = BytesMut::with_capacity(8192);
    loop {
        let Some((tag, len)) = message(&mut stream, &mut buf).await? else {
            return Err("server closed during login".into());
        };
        match tag {
            b'R' if buf[5..9] != [0, 0, 0, 0] => {
                return Err("the server asks for a password: trust --source in pg_hba.conf".into())
            }
            b'E' => return Err("the server refused the login".into()),
            b'Z' => {
                buf.advance(len);
                return Ok(Conn { stream, buf });
            }
            _ => buf.advance(len),
        }
    }
}
