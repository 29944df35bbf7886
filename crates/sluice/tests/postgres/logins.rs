//! Logins as PostgreSQL answers them, where a client sends what libpq never does, and the
//! `[login]` throttle on the PostgreSQL listener.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;
use std::time::{Duration, Instant};
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

/// `[login]` on the PostgreSQL listener: a failed login is answered after `failure_delay`,
/// and past `max_failures` the address is refused whatever the password, until `block_time`
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_are_delayed_and_then_blocked() {
    let env = start(
        0,
        "\n[login]\nfailure_delay = \"300ms\"\nmax_failures = 3\nblock_time = \"5m\"\n",
    )
    .await;
    for _ in 0..3 {
        let started = Instant::now();
        let err = Raw::try_connect(env.port, "app", "wrong", "postgres")
            .await
            .err()
            .unwrap();
        assert!(err.contains("28P01"), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
    let err = Raw::try_connect(env.port, "app", "app", "postgres")
        .await
        .err()
        .expect("blocked");
    assert!(
        err.contains("28000") && err.contains("is blocked because of many failed logins"),
        "{err}"
    );
}

/// A role's or a database's `CONNECTION LIMIT` refuses that pool's logins (PostgreSQL's
/// 53300 and message), and only them: the server stays in use for every other session (it
/// was taken for unavailable, and every session's next statement failed with the other
/// pool's error for `[pool] retry_after`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_connection_limit_refuses_only_that_roles_logins() {
    let env = super::pg::start_prepared(
        0,
        |topo| {
            for sql in [
                "CREATE ROLE lim LOGIN PASSWORD 'lim' CONNECTION LIMIT 0",
                "CREATE ROLE plain LOGIN PASSWORD 'plain'",
                "CREATE DATABASE limdb",
                "ALTER DATABASE limdb CONNECTION LIMIT 0",
            ] {
                topo.primary().sql(sql).unwrap();
            }
        },
        |topo| {
            let users: String = ["lim", "plain"]
                .iter()
                .map(|u| format!("\n[[users]]\nname = \"{u}\"\npassword = \"{u}\"\n"))
                .collect();
            super::pg::config(topo, &format!("\n[pool]\nretry_after = \"60s\"\n{users}"))
        },
    )
    .await;
    let mut app = Raw::connect(env.port, "app", "app", "postgres").await;
    app.try_simple("CREATE TABLE lim_t (x int)").await.unwrap();
    // (A superuser is above a database's limit, as directly: `plain` meets it.)
    for (n, (user, db, what)) in [
        ("lim", "postgres", "role \"lim\""),
        ("plain", "limdb", "database \"limdb\""),
    ]
    .into_iter()
    .enumerate()
    {
        // At the login, or at the first statement (once a login of the pool proved the
        // database, logins are answered without a server connection).
        let e = match Raw::try_connect(env.port, user, user, db).await {
            Ok(mut c) => c.try_simple("SELECT 1").await.map(|_| ()).unwrap_err(),
            Err(e) => e,
        };
        assert!(
            e.contains(&format!("53300 too many connections for {what}")),
            "{e}"
        );
        app.try_simple("INSERT INTO lim_t VALUES (1)")
            .await
            .unwrap();
        let mut other = Raw::connect(env.port, "app", "app", "postgres").await;
        assert_eq!(
            Raw::column(
                &other
                    .try_simple("SELECT count(*) FROM lim_t")
                    .await
                    .unwrap()
            ),
            [(n + 1).to_string()]
        );
    }
}

/// A cancel request that came over TLS is closed as PostgreSQL closes it, with TLS's
/// close_notify: libpq 17's cancel (`PQcancelBlocking`, psycopg's `cancel_safe()`) takes a
/// bare end of the stream for its cancel's failure.
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
}

/// A password that SASLprep changes (a ligature, a no-break space) logs in as it does
/// directly: libpq, the drivers and PostgreSQL normalise it before SCRAM, and so does sluice,
/// for its clients and for its own logins to the servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_saslprep_changes_logs_in_as_directly() {
    const PASSWORD: &str = "\u{FB01}le\u{A0}pw";
    let env = super::pg::start_prepared(
        0,
        |topo| {
            topo.primary()
                .sql(&format!("CREATE ROLE u8 LOGIN PASSWORD '{PASSWORD}'"))
                .unwrap();
        },
        |topo| {
            super::pg::config(
                topo,
                &format!("\n[[users]]\nname = \"u8\"\npassword = \"{PASSWORD}\"\n"),
            )
        },
    )
    .await;
    let direct = super::pg::psql(
        env.topo.primary().port,
        "u8",
        PASSWORD,
        "postgres",
        &["-c", "SELECT current_user"],
    );
    assert!(direct.status.success(), "{}", super::stderr(&direct));
    let out = env.psql_as("u8", PASSWORD, "postgres", "SELECT current_user");
    assert!(out.status.success(), "{}", super::stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "u8");
    let mut raw = Raw::connect(env.port, "u8", PASSWORD, "postgres").await;
    assert_eq!(
        Raw::column(&raw.try_simple("SELECT current_user").await.unwrap()),
        ["u8"]
    );
}

/// A server's refusal of a login reaches the client whole, as from the server directly: its
/// SQLSTATE, message and detail (psql prints them; so do drivers), at the client's login
/// (FATAL: the database refused, or a startup parameter) and, when a later statement's pool
/// is the one refused, with that statement's ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_refusal_of_a_login_reaches_the_client_whole() {
    let env = super::pg::start_prepared(
        1,
        |topo| {
            for sql in [
                "CREATE ROLE nocon LOGIN PASSWORD 'nocon'",
                "CREATE DATABASE private",
                "REVOKE CONNECT ON DATABASE private FROM PUBLIC",
                "CREATE DATABASE later",
            ] {
                topo.primary().sql(sql).unwrap();
            }
        },
        |topo| {
            super::pg::config(
                topo,
                "\n[[users]]\nname = \"nocon\"\npassword = \"nocon\"\n",
            )
        },
    )
    .await;
    // psql's whole report of the failed login, from "FATAL:" on (what precedes it names
    // the address it connected to).
    let report_of = |port: u16, user: &str, db: &str, options: &str| {
        let out = super::pg::psql_command(port, user, user, db)
            .env("PGOPTIONS", options)
            .args(["-c", "SELECT 1"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        match err.find("FATAL:") {
            Some(at) => err[at..].to_string(),
            None => panic!("no FATAL in {err:?}"),
        }
    };
    let report = |port: u16| report_of(port, "nocon", "private", "");
    let direct = report(env.topo.primary().port);
    assert!(
        direct.contains("DETAIL:  User does not have CONNECT privilege."),
        "{direct}"
    );
    assert_eq!(report(env.port), direct);
    // A startup parameter the server refuses (sluice sets it on the pooled connection).
    let bad = |port: u16| report_of(port, "app", "postgres", "-c DateStyle=garbage");
    let direct = bad(env.topo.primary().port);
    assert!(direct.contains("DETAIL:  "), "{direct}");
    assert_eq!(bad(env.port), direct);

    // Refused later: the login (on the primary) is had, then the replica's pool is refused
    // the database once the REVOKE is replayed there.
    let mut c = Raw::connect(env.port, "nocon", "nocon", "later").await;
    env.topo
        .primary()
        .sql("REVOKE CONNECT ON DATABASE later FROM PUBLIC")
        .unwrap();
    super::pg::wait_replayed(&env.topo).await;
    let got = c.simple_all("SELECT 1").await;
    let e = got
        .iter()
        .find(|m| m.tag == b'E')
        .unwrap_or_else(|| panic!("no error in {got:?}"));
    assert_eq!(e.field(b'S').as_deref(), Some("ERROR"));
    assert_eq!(e.sqlstate().as_deref(), Some("42501"));
    assert_eq!(
        e.field(b'M').as_deref(),
        Some("permission denied for database \"later\"")
    );
    assert_eq!(
        e.field(b'D').as_deref(),
        Some("User does not have CONNECT privilege.")
    );
    // The session carries on, on the primary it logged in to.
    assert_eq!(
        Raw::column(&c.try_simple("SELECT /* sluice:writer */ 1").await.unwrap()),
        ["1"]
    );
}

/// psql (libpq) over TLS: an SSLRequest gets TLS with sluice's certificate (`verify-full`
/// against its CA passes); a user configured for cleartext passwords logs in over TLS and is
/// refused on plain TCP (28000); a client that requires channel binding, which sluice does
/// not offer, gets libpq's own clear error at once, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_logs_in_over_tls_as_each_user_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = super::pg::certs::signed(dir.path(), "proxy");
    let env = super::pg::start_prepared(
        0,
        |topo| {
            topo.primary()
                .sql("CREATE ROLE clear LOGIN PASSWORD 'clear'")
                .unwrap();
        },
        |topo| {
            super::pg::config(
                topo,
                &format!(
                    "\n[proxy]\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n\n[[users]]\nname = \"clear\"\npassword = \"clear\"\nauth_method = \"password\"\n"
                ),
            )
        },
    )
    .await;
    let run = |user: &str, env_vars: &[(&str, &str)]| {
        let mut cmd = super::pg::psql_command(env.port, user, user, "postgres");
        for (k, v) in env_vars {
            cmd.env(k, v);
        }
        let out = cmd.args(["-c", "\\conninfo"]).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let verified = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", ca.as_str())];
    for user in ["app", "clear"] {
        let (ok, out, err) = run(user, &verified);
        assert!(ok, "{user}: {err}");
        assert!(
            out.contains("SSL connection (protocol: TLSv1."),
            "{user}: {out}"
        );
    }
    // Plain TCP: SCRAM logs in; a cleartext password is not sent in the clear.
    let (ok, out, err) = run("app", &[("PGSSLMODE", "disable")]);
    assert!(ok && !out.contains("SSL connection"), "{out} {err}");
    let (ok, _, err) = run("clear", &[("PGSSLMODE", "disable")]);
    assert!(!ok);
    assert!(
        err.contains(
            "FATAL:  user \"clear\" must connect with SSL (cleartext password authentication)"
        ),
        "{err}"
    );
    // Channel binding required: refused by libpq itself, with its reason (PGCONNECT_TIMEOUT
    // would end a hang with "timeout expired" instead).
    let (ok, _, err) = run(
        "app",
        &[("PGSSLMODE", "require"), ("PGCHANNELBINDING", "require")],
    );
    assert!(!ok);
    assert!(
        err.contains("channel binding is required, but server did not offer an authentication method that supports channel binding"),
        "{err}"
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

/// A user's `max_connections` bounds its client connections on the PostgreSQL listener
/// (FATAL 53300 in PostgreSQL's words for a role's limit), counted where the admin API shows
/// them, and a connection that ends makes room again. It admitted any number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_max_connections_bounds_its_clients() {
    let env = super::pg::start_with(0, |topo| {
        let mut text = super::pg::config(topo, "");
        text = text.replacen(
            "name = \"app\"\npassword = \"app\"\n",
            "name = \"app\"\npassword = \"app\"\nmax_connections = 2\n",
            1,
        );
        text
    })
    .await;
    let a = Raw::connect(env.port, "app", "app", "postgres").await;
    let _b = Raw::connect(env.port, "app", "app", "postgres").await;
    let e = Raw::try_connect(env.port, "app", "app", "postgres")
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("too many connections for role \"app\""), "{e}");
    drop(a);
    // Room again once the registry let the first one go.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match Raw::try_connect(env.port, "app", "app", "postgres").await {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                assert!(e.contains("too many connections"), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no room after a connection ended: {e}"),
        }
    }
}
