//! Who may log in, and how: passwords (SASLprep), TLS as each user is configured, the
//! `[login]` throttle, a role's and a user's connection limits, and a server's refusal of a
//! login passed on whole.

use super::pg::raw::Raw;
use super::pg::start;
use std::time::{Duration, Instant};

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
/// refused on plain TCP (28000); one configured with its SCRAM secret logs in with its
/// password in cleartext (and sluice to the server with what it gives), never with the
/// secret; a client that requires channel binding, which sluice does not offer, gets libpq's
/// own clear error at once, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_logs_in_over_tls_as_each_user_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = super::pg::certs::signed(dir.path(), "proxy");
    let env = super::pg::start_prepared(
        0,
        |topo| {
            for role in ["clear", "stored"] {
                topo.primary()
                    .sql(&format!("CREATE ROLE {role} LOGIN PASSWORD '{role}'"))
                    .unwrap();
            }
        },
        |topo| {
            let secret = topo
                .primary()
                .sql("SELECT rolpassword FROM pg_authid WHERE rolname = 'stored'")
                .unwrap();
            super::pg::config(
                topo,
                &format!(
                    "\n[proxy]\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n\n[[users]]\nname = \"clear\"\npassword = \"clear\"\nauth_method = \"password\"\n\n[[users]]\nname = \"stored\"\npassword = \"{}\"\nauth_method = \"password\"\n",
                    secret.trim()
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
    // The secret's password in cleartext logs in, and its session reaches the server; the
    // secret itself is not the password.
    let query = |password: &str| {
        let mut cmd = super::pg::psql_command(env.port, "stored", password, "postgres");
        cmd.envs(verified);
        let out = cmd.args(["-c", "SELECT current_user"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (String::from_utf8_lossy(&out.stdout).trim().to_string(), err)
    };
    assert_eq!(query("stored").0, "stored");
    let secret = env
        .topo
        .primary()
        .sql("SELECT rolpassword FROM pg_authid WHERE rolname = 'stored'")
        .unwrap();
    let (out, err) = query(secret.trim());
    assert!(
        out.is_empty() && err.contains("password authentication failed for user \"stored\""),
        "{out} {err}"
    );
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

/// A reload that changes a user keeps counting the sessions already open against its
/// `max_connections` (it counted from zero again: a limit of 2 let 6 in); one that removes a
/// user lets its open sessions carry on, new server connections included (they failed with
/// "no longer configured"), while no one logs in as it any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_users_open_sessions_keep_counting_and_carry_on() {
    let user = |max: u32| {
        format!("\n[[users]]\nname = \"temp\"\npassword = \"temp\"\nmax_connections = {max}\n")
    };
    let base = std::sync::Mutex::new(String::new());
    let env = super::pg::start_prepared(
        0,
        |topo| {
            topo.primary()
                .sql("CREATE ROLE temp LOGIN PASSWORD 'temp'")
                .unwrap();
        },
        |topo| {
            let text = super::pg::config(topo, "");
            *base.lock().unwrap() = text.clone();
            text + &user(4)
        },
    )
    .await;
    let base = base.into_inner().unwrap();
    let reload = |text: String| {
        let cfg = sluice_config::Config::from_toml(&text).unwrap();
        let process = env.process.clone();
        async move { process.reload(cfg).await.unwrap() }
    };
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(Raw::connect(env.port, "temp", "temp", "postgres").await);
    }
    reload(base.clone() + &user(2)).await;
    let e = Raw::try_connect(env.port, "temp", "temp", "postgres")
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("too many connections for role \"temp\""), "{e}");

    reload(base).await;
    let e = Raw::try_connect(env.port, "temp", "temp", "postgres")
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("28P01"), "{e}");
    // Three transactions at once take three server connections: new ones, logged in as the
    // removed user.
    for s in &mut open {
        s.try_simple("BEGIN").await.unwrap();
        assert_eq!(
            Raw::column(&s.try_simple("SELECT current_user").await.unwrap()),
            ["temp"]
        );
    }
    for s in &mut open {
        s.try_simple("COMMIT").await.unwrap();
    }
}

/// A user name longer than PostgreSQL's 63 bytes is cut to them, as PostgreSQL cuts a startup
/// packet's: a client that sends the long name logs in as the role of the first 63 bytes. It
/// was refused (28P01: no configured user of the long name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_user_name_is_cut_as_postgresql_cuts_it() {
    let role = "u".repeat(63);
    let env = super::pg::start_prepared(
        0,
        {
            let role = role.clone();
            move |topo| {
                topo.primary()
                    .sql(&format!("CREATE ROLE {role} LOGIN PASSWORD 'pw'"))
                    .unwrap();
            }
        },
        |topo| {
            super::pg::config(
                topo,
                &format!("\n[[users]]\nname = \"{role}\"\npassword = \"pw\"\n"),
            )
        },
    )
    .await;
    let mut c = Raw::connect(env.port, &"u".repeat(70), "pw", "postgres").await;
    assert_eq!(
        Raw::column(&c.try_simple("SELECT current_user").await.unwrap()),
        [role.as_str()]
    );
}
