use super::*;

const ISSUE_EXAMPLE: &str = r#"
[proxy]
listen = "127.0.0.1:6033"          # read/write-splitting listener

[[listeners]]                       # optional: a port pinned to one hostgroup (apps that split on their side)
listen = "127.0.0.1:6034"
hostgroup = "reader"

[[users]]
name = "app"
password = "app"                    # used to authenticate the client and to log in to the servers

[[servers]]
address = "127.0.0.1:3306"
hostgroup = "writer"
[[servers]]
address = "127.0.0.1:3307"
hostgroup = "reader"
weight = 2
max_connections = 200

[[rules]]                           # evaluated in order; first match wins
match = "(?i)^\\s*SELECT .* FOR UPDATE"
hostgroup = "writer"
"#;

#[test]
fn accepts_the_documented_example() {
    let cfg = Config::from_toml(ISSUE_EXAMPLE).expect("example must be accepted");
    assert_eq!(cfg.proxy.listen.as_deref(), Some("127.0.0.1:6033"));
    assert_eq!(cfg.listeners[0].hostgroup.as_deref(), Some("reader"));
    assert_eq!(cfg.servers[1].weight, 2);
    assert_eq!(cfg.servers[1].max_connections(&cfg.pool), 200);
    assert_eq!(cfg.servers[0].max_connections(&cfg.pool), 100);
    assert_eq!(cfg.rules[0].hostgroup, "writer");
    assert_eq!(cfg.hostgroup_names(), vec!["writer", "reader"]);
}

#[test]
fn effective_config_round_trips() {
    let cfg = Config::from_toml(ISSUE_EXAMPLE).unwrap();
    let again = Config::from_toml(&cfg.to_toml()).expect("dumped config must parse");
    assert_eq!(cfg, again);
}

fn err_of(text: &str) -> ConfigError {
    Config::from_toml(text).expect_err("config must be rejected")
}

#[test]
fn errors_name_the_field() {
    let bad_addr = ISSUE_EXAMPLE.replace("127.0.0.1:3307", "127.0.0.1:99999");
    assert_eq!(err_of(&bad_addr).field, "servers[1].address");

    let bad_rule = ISSUE_EXAMPLE.replace("(?i)^\\\\s*SELECT .* FOR UPDATE", "(unclosed");
    assert_eq!(err_of(&bad_rule).field, "rules[0].match");

    let bad_hg = ISSUE_EXAMPLE.replace(
        "hostgroup = \"reader\"\n\n[[users]]",
        "hostgroup = \"nope\"\n\n[[users]]",
    );
    let e = err_of(&bad_hg);
    assert_eq!(e.field, "listeners[0].hostgroup");
    assert!(e.message.contains("nope"), "{e}");

    let typo = ISSUE_EXAMPLE.replace("weight = 2", "wieght = 2");
    let e = err_of(&typo);
    assert!(e.field.starts_with("servers[1]"), "{e}");
    assert!(e.message.contains("wieght"), "{e}");

    let bad_type = ISSUE_EXAMPLE.replace("weight = 2", "weight = \"heavy\"");
    assert!(err_of(&bad_type).field.starts_with("servers[1].weight"));

    let dup_user = ISSUE_EXAMPLE.replace(
        "[[servers]]\naddress = \"127.0.0.1:3306\"",
        "[[users]]\nname = \"app\"\npassword = \"x\"\n[[servers]]\naddress = \"127.0.0.1:3306\"",
    );
    assert_eq!(err_of(&dup_user).field, "users[1].name");
}

#[test]
fn accepts_the_failover_example() {
    let text = r#"
[proxy]
listen = "127.0.0.1:6033"
[monitor]
user = "monitor"
password = "monitor"
[failover]
enabled = true
[[users]]
name = "app"
password = "app"
[[servers]]
address = "127.0.0.1:3306"
[[servers]]
address = "127.0.0.1:3307"
[[servers]]
address = "127.0.0.1:3308"
"#;
    let cfg = Config::from_toml(text).expect("the failover example must be accepted");
    assert!(cfg.failover.enabled);
    assert_eq!(cfg.hostgroup_names(), vec!["writer", "reader"]);
    assert!(cfg.servers.iter().all(|s| cfg.is_managed(s)));
    assert_eq!(
        cfg.monitor_credentials(),
        ("monitor".to_string(), "monitor".to_string())
    );
    assert_eq!(cfg.failover.detection_time.get().as_millis(), 1000);
    let again = Config::from_toml(&cfg.to_toml()).unwrap();
    assert_eq!(cfg, again);
}

#[test]
fn admin_off_loopback_needs_a_token() {
    let text = format!("{ISSUE_EXAMPLE}\n[admin]\nlisten = \"0.0.0.0:6080\"\n");
    assert_eq!(err_of(&text).field, "admin.token");
    let text = format!("{ISSUE_EXAMPLE}\n[admin]\nlisten = \"127.0.0.1:6080\"\n");
    assert!(Config::from_toml(&text).is_ok());
}

#[test]
fn admin_http_bounds_have_defaults_and_named_errors() {
    let text = format!("{ISSUE_EXAMPLE}\n[admin]\nlisten = \"127.0.0.1:6080\"\n");
    let a = Config::from_toml(&text).unwrap().admin.unwrap();
    assert_eq!(a, AdminConfig::new("127.0.0.1:6080"));
    assert_eq!(a.max_connections, 32);
    assert_eq!(a.header_timeout.get().as_secs(), 10);
    assert_eq!(a.idle_timeout.get().as_secs(), 60);
    assert_eq!(a.max_body_size, 65536);
    for (line, field) in [
        ("max_connections = 0", "admin.max_connections"),
        ("max_connections = 10001", "admin.max_connections"),
        ("header_timeout = \"0s\"", "admin.header_timeout"),
        ("idle_timeout = \"10ms\"", "admin.idle_timeout"),
        ("max_body_size = 10", "admin.max_body_size"),
    ] {
        let text = format!("{ISSUE_EXAMPLE}\n[admin]\nlisten = \"127.0.0.1:6080\"\n{line}\n");
        assert_eq!(err_of(&text).field, field, "{line}");
    }
    let text = format!(
        "{ISSUE_EXAMPLE}\n[admin]\nlisten = \"127.0.0.1:6080\"\nmax_connections = 4\nheader_timeout = \"2s\"\nidle_timeout = \"5s\"\nmax_body_size = 4096\n"
    );
    let a = Config::from_toml(&text).unwrap().admin.unwrap();
    assert_eq!(
        (
            a.max_connections,
            a.header_timeout.get().as_secs(),
            a.idle_timeout.get().as_secs(),
            a.max_body_size
        ),
        (4, 2, 5, 4096)
    );
}

#[test]
fn requires_a_writer() {
    let text = r#"
[proxy]
listen = "127.0.0.1:6033"
[[users]]
name = "app"
password = "app"
[[servers]]
address = "127.0.0.1:3307"
hostgroup = "reader"
"#;
    let e = err_of(text);
    assert_eq!(e.field, "servers");
    assert!(e.message.contains("writer"));
}

#[test]
fn durations_accept_units() {
    let text =
        format!("{ISSUE_EXAMPLE}\n[pool]\nqueue_timeout = \"250ms\"\nconnect_timeout = 1500\n");
    let cfg = Config::from_toml(&text).unwrap();
    assert_eq!(cfg.pool.queue_timeout.get().as_millis(), 250);
    assert_eq!(cfg.pool.connect_timeout.get().as_millis(), 1500);
    let bad = format!("{ISSUE_EXAMPLE}\n[pool]\nqueue_timeout = \"5 fortnights\"\n");
    assert!(err_of(&bad).field.starts_with("pool.queue_timeout"));
}

/// A pool opens one connection at a time per server unless told otherwise (the limit then
/// doubles while none come back: `sluice_core::pool_growth`).
#[test]
fn pools_open_one_connection_at_a_time_by_default() {
    let cfg = Config::from_toml(ISSUE_EXAMPLE).unwrap();
    assert_eq!(cfg.pool.max_connecting, 1);
    let text = format!("{ISSUE_EXAMPLE}\n[pool]\nmax_connecting = 4\n");
    assert_eq!(Config::from_toml(&text).unwrap().pool.max_connecting, 4);
}

#[test]
fn login_settings_have_defaults_and_are_validated() {
    let cfg = Config::from_toml(ISSUE_EXAMPLE).unwrap();
    assert_eq!(cfg.login, LoginConfig::default());
    assert_eq!(cfg.login.connecting_budget(10_000), 10_000);
    let with = |keys: &str| format!("{ISSUE_EXAMPLE}\n[login]\n{keys}\n");
    let cfg = Config::from_toml(&with("max_connecting = 64\nblock_time = \"1m\"")).unwrap();
    assert_eq!(cfg.login.connecting_budget(10_000), 64);
    for (keys, field) in [
        ("handshake_timeout = \"10ms\"", "login.handshake_timeout"),
        (
            "handshake_timeout = \"2s\"\nfailure_delay = \"2s\"",
            "login.failure_delay",
        ),
        ("failure_window = 0", "login.failure_window"),
        ("block_time = 0", "login.block_time"),
        ("max_tracked_addresses = 0", "login.max_tracked_addresses"),
    ] {
        assert_eq!(err_of(&with(keys)).field, field, "{keys}");
    }
    // Without blocking, the window and block time do not matter.
    Config::from_toml(&with("max_failures = 0\nblock_time = 0")).unwrap();
    let admin = format!(
        "{ISSUE_EXAMPLE}\n[admin]\nlisten = \"127.0.0.1:0\"\nsql_listen = \"127.0.0.1:0\"\nsql_password = \"x\"\nsql_max_connections = 0\n"
    );
    assert_eq!(err_of(&admin).field, "admin.sql_max_connections");
}

#[test]
fn read_timeout_and_request_memory_are_checked() {
    let cfg = Config::from_toml(ISSUE_EXAMPLE).unwrap();
    assert_eq!(
        cfg.pool.read_timeout.get(),
        std::time::Duration::from_secs(8 * 3600)
    );
    assert_eq!(cfg.proxy.max_request_memory, 256 << 20);

    let off = format!("{ISSUE_EXAMPLE}\n[pool]\nread_timeout = 0\n");
    assert!(Config::from_toml(&off)
        .unwrap()
        .pool
        .read_timeout
        .get()
        .is_zero());
    let tiny = format!("{ISSUE_EXAMPLE}\n[pool]\nread_timeout = \"10ms\"\n");
    assert_eq!(err_of(&tiny).field, "pool.read_timeout");

    let small = ISSUE_EXAMPLE.replace(
        "listen = \"127.0.0.1:6033\"",
        "listen = \"127.0.0.1:6033\"\nmax_packet_size = 1048576\nmax_request_memory = 1000000",
    );
    let e = err_of(&small);
    assert_eq!(e.field, "proxy.max_request_memory");
    assert!(e.message.contains("max_packet_size"), "{e}");

    let share = format!("{ISSUE_EXAMPLE}\n[postgres]\nmax_statement_memory_per_session = 100\n");
    assert_eq!(
        err_of(&share).field,
        "postgres.max_statement_memory_per_session"
    );
    let share = format!("{ISSUE_EXAMPLE}\n[mysql]\nmax_statement_memory_per_session = 1000\n");
    assert_eq!(
        err_of(&share).field,
        "mysql.max_statement_memory_per_session"
    );
}

#[test]
fn mysql_keys_live_in_their_section_and_are_still_accepted_where_they_were() {
    let legacy = ISSUE_EXAMPLE.replace(
        "listen = \"127.0.0.1:6033\"",
        "listen = \"127.0.0.1:6033\"\nmax_packet_size = 4096\nserver_version = \"10.11.9-sluice\"\ndefault_auth_plugin = \"caching_sha2_password\"",
    ) + "\n[pool]\nstmt_cache_size = 10\n";
    let c = Config::from_toml(&legacy).expect("the first places are still accepted");
    let expected = MysqlConfig {
        max_packet_size: 4096,
        server_version: Some("10.11.9-sluice".into()),
        default_auth_plugin: AuthPlugin::CachingSha2Password,
        stmt_cache_size: 10,
        ..MysqlConfig::default()
    };
    assert_eq!(c.mysql, expected);
    assert_eq!(c.proxy.max_packet_size, None, "moved, not copied");

    let section = format!(
        "{ISSUE_EXAMPLE}\n[mysql]\nmax_packet_size = 4096\nserver_version = \"10.11.9-sluice\"\ndefault_auth_plugin = \"caching_sha2_password\"\nstmt_cache_size = 10\n"
    );
    let c = Config::from_toml(&section).expect("[mysql]");
    assert_eq!(c.mysql, expected);
    // Written back in its own section only, and read back the same.
    let dumped = c.to_toml();
    assert!(dumped.contains("[mysql]"), "{dumped}");
    assert_eq!(
        Config::from_toml(&dumped).expect("round trip").mysql,
        expected
    );

    // The same value in both places is fine; different values name both places.
    let both_same = format!("{legacy}\n[mysql]\nstmt_cache_size = 10\n");
    assert_eq!(
        Config::from_toml(&both_same)
            .expect("same")
            .mysql
            .stmt_cache_size,
        10
    );
    let both = format!("{legacy}\n[mysql]\nstmt_cache_size = 20\n");
    let e = err_of(&both);
    assert_eq!(e.field, "mysql.stmt_cache_size");
    assert!(e.message.contains("pool.stmt_cache_size"), "{e}");

    assert_eq!(
        Config::from_toml(ISSUE_EXAMPLE).expect("defaults").mysql,
        MysqlConfig::default()
    );
    let zero = format!("{ISSUE_EXAMPLE}\n[mysql]\nstmt_cache_size = 0\n");
    assert_eq!(err_of(&zero).field, "mysql.stmt_cache_size");
}

#[test]
fn the_postgres_example_is_accepted_as_written() {
    let text = r#"
[[listeners]]
listen = "127.0.0.1:6432"
protocol = "postgres"

[[users]]
name = "app"
password = "app"

[[servers]]
address = "127.0.0.1:5432"
protocol = "postgres"
hostgroup = "writer"
[[servers]]
address = "127.0.0.1:5433"
protocol = "postgres"
hostgroup = "reader"
"#;
    let cfg = Config::from_toml(text).unwrap();
    assert_eq!(cfg.proxy.listen, None);
    assert_eq!(cfg.protocols(), vec![crate::Protocol::Postgres]);
    assert_eq!(cfg.listeners[0].hostgroup, None);
    let pg = cfg.for_protocol(crate::Protocol::Postgres);
    assert_eq!(pg.hostgroup_names(), vec!["writer", "reader"]);
    assert!(cfg.for_protocol(crate::Protocol::Mysql).servers.is_empty());
    // Written back and read again, it is the same.
    assert_eq!(Config::from_toml(&cfg.to_toml()).unwrap(), cfg);
}

#[test]
fn protocols_need_their_listeners_and_servers() {
    let base = "[[users]]\nname = \"app\"\npassword = \"app\"\n";
    let pg_server = "[[servers]]\naddress = \"127.0.0.1:5432\"\nprotocol = \"postgres\"\nhostgroup = \"writer\"\n";
    let my_server = "[[servers]]\naddress = \"127.0.0.1:3306\"\nhostgroup = \"writer\"\n";
    // No listener at all.
    let e = Config::from_toml(&format!("{base}{pg_server}")).unwrap_err();
    assert_eq!(e.field, "proxy.listen");
    // PostgreSQL servers but only a MySQL listener.
    let e = Config::from_toml(&format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n{base}{my_server}{pg_server}"
    ))
    .unwrap_err();
    assert_eq!(e.field, "listeners");
    assert!(e.message.contains("no listener speaks postgres"), "{e}");
    // A PostgreSQL listener without PostgreSQL servers.
    let e = Config::from_toml(&format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n{base}{my_server}"
    ))
    .unwrap_err();
    assert_eq!(e.field, "listeners[0].protocol");
    // Both side by side: a writer in each; hostgroup names resolve within a protocol.
    let both = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\n[[listeners]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"postgres\"\n{base}{my_server}{pg_server}\n[[servers]]\naddress = \"127.0.0.1:3307\"\nhostgroup = \"olap\"\n[[rules]]\nmatch = \"report\"\nhostgroup = \"olap\"\n"
    );
    let cfg = Config::from_toml(&both).unwrap();
    assert_eq!(cfg.for_protocol(crate::Protocol::Mysql).rules.len(), 1);
    // TLS to the servers, for both protocols.
    let tls = Config::from_toml(&format!(
        "{both}\n[pool]\ntls = true\ntls_ca = \"/ca.pem\"\n"
    ))
    .unwrap();
    assert!(tls.for_protocol(crate::Protocol::Postgres).pool.tls);
    assert!(cfg.for_protocol(crate::Protocol::Postgres).rules.is_empty());
    // A PostgreSQL listener pinned to a MySQL-only hostgroup.
    let e = Config::from_toml(&both.replace(
        "protocol = \"postgres\"\n[[users]]",
        "protocol = \"postgres\"\nhostgroup = \"olap\"\n[[users]]",
    ))
    .unwrap_err();
    assert_eq!(e.field, "listeners[0].hostgroup");
}

#[test]
fn discovery_sources_are_checked() {
    let base = "[proxy]\nlisten = \"127.0.0.1:3306\"\n[[users]]\nname = \"a\"\npassword = \"a\"\n[[servers]]\naddress = \"127.0.0.1:3307\"\n[monitor]\nuser = \"m\"\npassword = \"m\"\n";
    let ok = format!("{base}[[discovery]]\ndns = \"replicas.internal:3306\"\n[[discovery]]\nfrom_primary = true\n[[discovery]]\ncommand = \"cat list\"\nmax_servers = 3\n");
    let c = Config::from_toml(&ok).unwrap();
    assert_eq!(c.discovery.len(), 3);
    assert_eq!(c.discovery[0].describe(), "dns replicas.internal:3306");
    assert_eq!(c.discovery[1].describe(), "mysql primary");
    let two = format!("{base}[[discovery]]\ndns = \"r:3306\"\nfrom_primary = true\n");
    assert_eq!(err_of(&two).field, "discovery[0]");
    let none = format!("{base}[[discovery]]\ninterval = \"1s\"\n");
    assert_eq!(err_of(&none).field, "discovery[0]");
    let no_port = format!("{base}[[discovery]]\ndns = \"replicas.internal\"\n");
    assert_eq!(err_of(&no_port).field, "discovery[0].dns");
    let too_many = format!("{base}[[discovery]]\ncommand = \"x\"\nmax_servers = 1000\n");
    assert_eq!(err_of(&too_many).field, "discovery[0].max_servers");
    let pg_only = format!("{base}[[discovery]]\nfrom_primary = true\nport = 5432\n");
    assert_eq!(err_of(&pg_only).field, "discovery[0]");
    let no_monitor = ok
        .replace(
            "[monitor]\nuser = \"m\"\npassword = \"m\"\n",
            "[monitor]\nenabled = false\n",
        )
        .replace(
            "address = \"127.0.0.1:3307\"\n",
            "address = \"127.0.0.1:3307\"\nhostgroup = \"writer\"\n",
        );
    assert_eq!(err_of(&no_monitor).field, "discovery[0]");
}

#[test]
fn a_stored_password_form_needs_a_method_that_can_check_it() {
    use crate::{PasswordForm, PgAuthMethod};
    let hash = "md5f47de2e3bd4e8f7b4e0b2d61d9e3f00a";
    assert_eq!(PasswordForm::of(hash), PasswordForm::Md5Hash);
    assert_eq!(PasswordForm::of("md5-not-a-hash"), PasswordForm::Plain);
    assert_eq!(PasswordForm::of(&hash.to_uppercase()), PasswordForm::Plain);
    assert_eq!(
        PasswordForm::of("SCRAM-SHA-256$4096:c2FsdA==$a:b"),
        PasswordForm::ScramSecret
    );
    let with = |password: &str, method: &str| {
        Config::from_toml(&format!(
            "{ISSUE_EXAMPLE}\n[[users]]\nname = \"u\"\npassword = \"{password}\"\n{method}"
        ))
    };
    let e = with(hash, "").unwrap_err();
    assert_eq!(e.field, "users[1].password");
    assert!(e.message.contains("auth_method = \"md5\""), "{e}");
    let md5 = with(hash, "auth_method = \"md5\"\n").unwrap();
    assert_eq!(md5.users[1].auth_method, PgAuthMethod::Md5);
    with(hash, "auth_method = \"password\"\n").unwrap();
}

#[test]
fn max_lifetime_is_an_hour_unless_set_and_checked() {
    let cfg = Config::from_toml(ISSUE_EXAMPLE).unwrap();
    assert_eq!(
        cfg.pool.max_lifetime.get(),
        std::time::Duration::from_secs(3600)
    );
    let off = format!("{ISSUE_EXAMPLE}\n[pool]\nmax_lifetime = 0\n");
    assert!(Config::from_toml(&off)
        .unwrap()
        .pool
        .max_lifetime
        .get()
        .is_zero());
    let tiny = format!("{ISSUE_EXAMPLE}\n[pool]\nmax_lifetime = \"500ms\"\n");
    assert_eq!(err_of(&tiny).field, "pool.max_lifetime");
}
