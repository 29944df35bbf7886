//! Logins as PostgreSQL answers them, where a client sends what libpq never does; a login
//! answered from what an earlier one learnt (see `login_auth` for passwords and limits).

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the server sends until it closes the connection: each message as its type byte
/// (an ErrorResponse as `E:SQLSTATE:message`), a lone byte as `byte X`.
async fn answers(port: u16, bytes: &[u8]) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("the connection ends")
        .unwrap();
    let mut out = Vec::new();
    let mut rest = &buf[..];
    if let Some((&b, tail)) = rest.split_first() {
        if b == b'N' || b == b'S' {
            out.push(format!("byte {}", b as char));
            rest = tail;
        }
    }
    while rest.len() >= 5 {
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let (msg, tail) = rest.split_at(len + 1);
        out.push(match msg[0] {
            b'E' => {
                let m = super::pg::raw::Msg {
                    tag: b'E',
                    body: msg[5..].to_vec(),
                };
                format!(
                    "E:{}:{}",
                    m.sqlstate().unwrap_or_default(),
                    m.field(b'M').unwrap_or_default()
                )
            }
            t => (t as char).to_string(),
        });
        rest = tail;
    }
    out
}

fn ssl_request() -> Vec<u8> {
    [8u32.to_be_bytes(), 80_877_103u32.to_be_bytes()].concat()
}

fn startup(params: &[(&str, &str)]) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    frontend::startup_message(params.iter().copied(), &mut out).unwrap();
    out.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_startup_packets_are_answered_as_postgresql_answers_them() {
    let env = start(0, "").await;
    let port = env.port;
    // Bytes sent before the answer to an SSLRequest (CVE-2021-23214).
    let stuffed = [ssl_request(), startup(&[("user", "app")])].concat();
    assert_eq!(
        answers(port, &stuffed).await,
        [
            "byte N",
            "E:08P01:received unencrypted data after SSL request"
        ]
    );
    // A second SSLRequest is an unknown protocol.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&ssl_request()).await.unwrap();
    let mut n = [0u8; 1];
    s.read_exact(&mut n).await.unwrap();
    assert_eq!(&n, b"N");
    s.write_all(&ssl_request()).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&rest)
            .contains("unsupported frontend protocol 1234.5679: server supports 3.0 to 3.0"),
        "{rest:?}"
    );
    // No user: 28000, as PostgreSQL says it.
    assert_eq!(
        answers(port, &startup(&[("database", "postgres")])).await,
        ["E:28000:no PostgreSQL user name specified in startup packet"]
    );
    // replication: a boolean as PostgreSQL reads it.
    assert_eq!(
        answers(
            port,
            &startup(&[("user", "app"), ("replication", "garbage")])
        )
        .await,
        ["E:22023:invalid value for parameter \"replication\": \"garbage\""]
    );
}

/// A login with startup parameters PostgreSQL accepts in forms libpq does not send: the last
/// of a repeated parameter counts, `replication = off` is a normal login. A startup
/// parameter the server refuses ends the login with the server's error, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_are_read_as_postgresql_reads_them() {
    let env = start(0, "").await;
    let port = env.port;
    let login = |params: Vec<(&'static str, &'static str)>| async move {
        let mut c = Raw::connect_with(port, "app", &params).await?;
        let rows = c
            .try_simple("SELECT current_user || ' ' || current_database()")
            .await?;
        Ok::<_, String>(Raw::column(&rows).join(""))
    };
    assert_eq!(
        login(vec![
            ("user", "nosuch"),
            ("database", "nosuch"),
            ("user", "app"),
            ("database", "postgres"),
        ])
        .await
        .unwrap(),
        "app postgres"
    );
    assert_eq!(
        login(vec![
            ("user", "app"),
            ("database", "postgres"),
            ("replication", "off")
        ])
        .await
        .unwrap(),
        "app postgres"
    );
    let err = login(vec![
        ("user", "app"),
        ("database", "postgres"),
        ("DateStyle", "garbage"),
    ])
    .await
    .unwrap_err();
    assert_eq!(
        err,
        "22023 invalid value for parameter \"DateStyle\": \"garbage\""
    );
}

/// A cancel request that came over TLS is closed as PostgreSQL closes it, with TLS's
/// close_notify: libpq 17's cancel (`PQcancelBlocking`, psycopg's `cancel_safe()`) takes a
/// bare end of the stream for its cancel's failure. A GSSAPI encryption request inside TLS
/// is refused as PostgreSQL refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_over_tls_ends_with_close_notify() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = super::pg::certs::signed(dir.path(), "proxy");
    let env = start(
        0,
        &format!("\n[proxy]\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n"),
    )
    .await;
    let tls = sluice_runtime::tls::BackendTls::from_ca_file(std::path::Path::new(&ca)).unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", env.port)).await.unwrap();
    tcp.write_all(&ssl_request()).await.unwrap();
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"S");
    let address = format!("127.0.0.1:{}", env.port);
    let mut s = tls.connect(&address, tcp).await.unwrap();
    let cancel = [
        16u32.to_be_bytes(),
        80_877_102u32.to_be_bytes(),
        1u32.to_be_bytes(),
        2u32.to_be_bytes(),
    ]
    .concat();
    s.write_all(&cancel).await.unwrap();
    s.flush().await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest))
        .await
        .expect("closed");
    assert_eq!(read.map_err(|e| e.to_string()).unwrap(), 0);

    // A GSSAPI encryption request inside TLS is an unknown protocol, as to PostgreSQL (sluice
    // answered `N` and waited).
    let mut tcp = TcpStream::connect(("127.0.0.1", env.port)).await.unwrap();
    tcp.write_all(&ssl_request()).await.unwrap();
    tcp.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"S");
    let mut s = tls.connect(&address, tcp).await.unwrap();
    let gss = [8u32.to_be_bytes(), 80_877_104u32.to_be_bytes()].concat();
    s.write_all(&gss).await.unwrap();
    s.flush().await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest))
        .await
        .expect("closed");
    assert!(
        String::from_utf8_lossy(&rest)
            .contains("unsupported frontend protocol 1234.5680: server supports 3.0 to 3.0"),
        "{rest:?}"
    );
}

/// The first answer to a StartupMessage for protocol 3.2 with a protocol option (libpq 18
/// asks for 3.2; libpq 19's grease adds an option no server knows): NegotiateProtocolVersion
/// byte for byte as PostgreSQL 15 sends it, then the password request, on a connection that
/// first asked for GSS encryption and was told `N` (so libpq goes on without it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_protocol_is_negotiated_down_as_postgresql_does() {
    let env = start(0, "").await;
    let mut startup_32 = bytes::BytesMut::new();
    {
        // StartupMessage: length, version 3.2, parameters, a final NUL.
        let mut body = Vec::new();
        body.extend_from_slice(&((3u32 << 16) | 2).to_be_bytes());
        for (k, v) in [
            ("user", "app"),
            ("database", "postgres"),
            ("_pq_.test_grease", "1"),
        ] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        startup_32.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        startup_32.extend_from_slice(&body);
    }
    // The first two messages (each whole) a server answers the startup with.
    async fn first_two(s: &mut TcpStream, bytes: &[u8]) -> Vec<Vec<u8>> {
        s.write_all(bytes).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..2 {
            let mut head = [0u8; 5];
            tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut head))
                .await
                .expect("the server answers")
                .unwrap();
            let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
            let mut rest = vec![0u8; len - 4];
            s.read_exact(&mut rest).await.unwrap();
            out.push([&head[..], &rest[..]].concat());
        }
        out
    }
    let mut direct = TcpStream::connect(("127.0.0.1", env.topo.primary().port))
        .await
        .unwrap();
    let want = first_two(&mut direct, &startup_32).await;
    assert_eq!(want[0][0], b'v', "{want:?}");
    assert_eq!(want[1][0], b'R', "{want:?}");

    let mut s = TcpStream::connect(("127.0.0.1", env.port)).await.unwrap();
    s.write_all(&[0, 0, 0, 8, 4, 210, 22, 48]).await.unwrap();
    let mut n = [0u8; 1];
    s.read_exact(&mut n).await.unwrap();
    assert_eq!(&n, b"N");
    let got = first_two(&mut s, &startup_32).await;
    assert_eq!(got[0], want[0]);
    // Both ask for SASL (SCRAM-SHA-256); the mechanisms offered are the same.
    assert_eq!(got[1], want[1]);
}

/// Once a login succeeded, the next one alike (user, database, startup settings but a plain
/// `application_name`) is answered without a server connection, as PgBouncer answers it:
/// while the pool's only connection is held by an open transaction, a client still logs in
/// (told what the first one was told, with its own name) instead of waiting for
/// `queue_timeout` and a FATAL; its statement waits for the connection as statements do. A
/// login unlike any before (another startup setting) takes a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_like_an_earlier_one_needs_no_free_connection() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    let port = env.port;
    let login = move |extra: (&'static str, &'static str)| async move {
        Raw::connect_with(
            port,
            "app",
            &[("user", "app"), ("database", "postgres"), extra],
        )
        .await
    };
    let mut first = login(("application_name", "first")).await.unwrap();
    assert!(first.params.iter().any(|(k, _)| k == "server_version"));
    first.try_simple("BEGIN; SELECT 1").await.unwrap();
    let mut second = tokio::time::timeout(
        Duration::from_secs(20),
        login(("application_name", "second's")),
    )
    .await
    .expect("a login like an earlier one waits for no connection")
    .unwrap();
    let own_name = |params: &[(String, String)]| -> Vec<(String, String)> {
        params
            .iter()
            .map(|(k, v)| match k.as_str() {
                "application_name" => (k.clone(), format!("<{v}>")),
                _ => (k.clone(), v.clone()),
            })
            .collect()
    };
    let expected: Vec<_> = own_name(&first.params)
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "application_name" => (k, "<second's>".to_string()),
            _ => (k, v),
        })
        .collect();
    assert_eq!(own_name(&second.params), expected);
    let unlike = tokio::spawn(Raw::connect_with(
        env.port,
        "app",
        &[
            ("user", "app"),
            ("database", "postgres"),
            ("TimeZone", "Asia/Tokyo"),
        ],
    ));
    let statement = tokio::spawn(async move {
        let rows = second
            .try_simple("SELECT current_setting('application_name')")
            .await
            .map(|m| Raw::column(&m));
        (rows, second)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Neither can go on while the block holds the connection.
    assert!(!unlike.is_finished() && !statement.is_finished());
    first.try_simple("COMMIT").await.unwrap();
    let (rows, _) = statement.await.unwrap();
    assert_eq!(rows.unwrap(), ["second's"]);
    let unlike = unlike.await.unwrap().unwrap();
    let zone = unlike.params.iter().find(|(k, _)| k == "TimeZone");
    assert_eq!(zone.map(|(_, v)| v.as_str()), Some("Asia/Tokyo"));
}

/// What a login alike was told stands only while the servers accept sluice's logins: once a
/// database is dropped, the next login to it that is answered without a connection fails at
/// its first statement with PostgreSQL's 3D000, and every login after that is refused
/// with it as directly (FATAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_to_a_dropped_database_is_refused_again() {
    let env = start(0, "").await;
    env.topo.primary().sql("CREATE DATABASE dropped").unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "dropped").await;
    c.try_simple("SELECT 1").await.unwrap();
    drop(c);
    env.topo
        .primary()
        .sql("DROP DATABASE dropped WITH (FORCE)")
        .unwrap();
    let e = match Raw::try_connect(env.port, "app", "app", "dropped").await {
        Ok(mut c) => c.try_simple("SELECT 1").await.map(|_| ()).unwrap_err(),
        Err(e) => e,
    };
    assert!(e.contains("3D000"), "{e}");
    let e = Raw::try_connect(env.port, "app", "app", "dropped")
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.contains("database \"dropped\" does not exist"),
        "refused at the login: {e}"
    );
}
