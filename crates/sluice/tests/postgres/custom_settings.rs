//! Custom settings (`prefix.name`) under a prefix an extension reserves once it loads: on a
//! pooled connection the setting outlives the session that made it, and PostgreSQL then
//! refuses its name. Neither the next client nor the session that made it may pay for that.
//! And how many settings of its own a session may have sluice keep.

use super::pg::raw::{Msg, Raw};
use super::pg::start;
use postgres_protocol::message::frontend;

/// One server connection: every client below is served by the same one.
const ONE: &str = "\n[pool]\nmax_connections = 1\nqueue_timeout = \"10s\"\n";
const DO: &str = "DO $$BEGIN RAISE NOTICE 'do'; END$$";
const BOGUS: &str = "SELECT current_setting('plpgsql.bogus_setting', true)";

fn warnings(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .filter(|m| m.tag == b'N' && m.field(b'S').as_deref() == Some("WARNING"))
        .map(|m| m.text())
        .collect()
}

/// The next client on the connection: the setting it never made is gone from the server
/// (PL/pgSQL reserved its prefix), so sluice's RESET of it must not fail its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_setting_removed_by_an_extension_hurts_no_other_session() {
    let env = start(0, ONE).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("SET plpgsql.bogus_setting = 1").await.unwrap();
    let loaded = a.simple_all(DO).await;
    assert_eq!(
        warnings(&loaded),
        ["42602 invalid configuration parameter name \"plpgsql.bogus_setting\", removing it"]
    );
    assert_eq!(Raw::column(&a.try_simple(BOGUS).await.unwrap()), ["NULL"]);
    assert_eq!(Raw::column(&b.try_simple("SELECT 1").await.unwrap()), ["1"]);
    assert_eq!(Raw::column(&a.try_simple("SELECT 2").await.unwrap()), ["2"]);
}

/// The session that made it, served next by a connection where the prefix is reserved: as
/// directly once the extension loads, the setting is removed with PostgreSQL's WARNING, and
/// the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_setting_the_next_connection_refuses_is_removed_with_a_warning() {
    let env = start(0, ONE).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("SET plpgsql.other_bogus = 1").await.unwrap();
    b.try_simple(DO).await.unwrap();
    let moved = a
        .simple_all("SELECT current_setting('plpgsql.other_bogus', true)")
        .await;
    assert_eq!(
        warnings(&moved),
        ["42602 invalid configuration parameter name \"plpgsql.other_bogus\", removing it"]
    );
    assert!(moved.iter().all(|m| m.tag != b'E'), "{moved:?}");
    assert_eq!(Raw::column(&moved), ["NULL"]);
    assert_eq!(Raw::column(&a.try_simple("SELECT 3").await.unwrap()), ["3"]);
    assert_eq!(Raw::column(&b.try_simple("SELECT 4").await.unwrap()), ["4"]);
}

/// A session's own settings are bounded (1,000 names, 1 MiB): one more `SET` is refused with
/// 54000 before it runs (it is set nowhere), inside a block too (which then fails, as after
/// an error), and so is a `SET` prepared earlier when it is bound; the session goes on, a
/// name already made is still replaced, and `RESET ALL` makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_own_settings_are_bounded() {
    let env = start(1, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::parse("over", "SET x.over = '1'", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    assert_eq!(c.round(1).await.0, "1Z");
    let sets: String = (0..1000).map(|i| format!("SET x.k{i} = '{i}';")).collect();
    c.try_simple(&sets).await.unwrap();
    let e = c.try_simple("SET x.over = '1'").await.unwrap_err();
    assert!(
        e.starts_with("54000 ") && e.contains("at most 1000 settings"),
        "{e}"
    );
    let e = c
        .try_simple("SELECT current_setting('x.over')")
        .await
        .unwrap_err();
    assert!(e.starts_with("42704 "), "never ran: {e}");
    // A `SET` prepared before the bound was reached and bound after is refused alike, before
    // it runs.
    c.extended("over", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("54000"));
    let e = c
        .try_simple("SELECT current_setting('x.over')")
        .await
        .unwrap_err();
    assert!(e.starts_with("42704 "), "never ran: {e}");
    c.try_simple("SET x.k5 = 'five'").await.unwrap();
    assert_eq!(
        Raw::column(&c.try_simple("SHOW x.k5").await.unwrap()),
        ["five"]
    );
    assert_eq!(
        Raw::column(&c.try_simple("SHOW x.k999").await.unwrap()),
        ["999"]
    );
    // Inside a block the server has: refused, and the block fails.
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("SELECT 1").await.unwrap();
    let e = c.try_simple("SET x.over = '1'").await.unwrap_err();
    assert!(e.starts_with("54000 "), "{e}");
    let e = c.try_simple("SELECT 1").await.unwrap_err();
    assert!(e.starts_with("25P02 "), "{e}");
    c.try_simple("ROLLBACK").await.unwrap();
    // Bytes: one value past 1 MiB.
    let big = format!("RESET ALL; SET x.big = '{}'", "v".repeat(1 << 20));
    let e = c.try_simple(&big).await.unwrap_err();
    assert!(e.starts_with("54000 "), "{e}");
    // RESET ALL makes room.
    c.try_simple("RESET ALL; SET x.over = '1'").await.unwrap();
    assert_eq!(
        Raw::column(&c.try_simple("SHOW x.over").await.unwrap()),
        ["1"]
    );
}

/// What `set_config(…, false)` sets is read back from the server and moves with the session
/// as a `SET` does, within the same bounds: a value over 1 MiB is not even fetched, and a
/// setting past 1,000 names is not kept either. Such a setting stays on the connection that
/// has it, and the session keeps that connection (pinned: `set_config`), its value intact,
/// until `DISCARD ALL`; no other client ever sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_set_config_made_past_the_bounds_keeps_its_session_on_its_connection() {
    let env = start(0, ONE).await;
    let sessions = || env.process.runtime.sessions.all();
    let pinned = |id: u32| {
        sessions()
            .iter()
            .any(|s| s.key().id == id && s.pin_reasons() == vec!["set_config(..., false)"])
    };
    let long = (1 << 20) + 1;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let big = format!("SELECT set_config('x.big', repeat('v', {long}), false) IS NOT NULL");
    a.try_simple(&big).await.unwrap();
    // (Pinned once the answer is relayed and the value read back: awaited, not raced.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !pinned(a.key.0) {
        assert!(std::time::Instant::now() < deadline, "not pinned");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let length = "SELECT octet_length(current_setting('x.big', true))";
    assert_eq!(
        Raw::column(&a.try_simple(length).await.unwrap()),
        [long.to_string()]
    );
    // Released: the one connection serves the next client, without the setting.
    a.try_simple("DISCARD ALL").await.unwrap();
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let seen = "SELECT coalesce(current_setting('x.big', true), '')";
    assert_eq!(Raw::column(&b.try_simple(seen).await.unwrap()), [""]);
    drop(b);
    // Past 1,000 names.
    let sets: String = (0..1000).map(|i| format!("SET x.k{i} = '{i}';")).collect();
    a.try_simple(&sets).await.unwrap();
    a.try_simple("SELECT set_config('x.more', 'm', false) IS NOT NULL")
        .await
        .unwrap();
    while !pinned(a.key.0) {
        assert!(std::time::Instant::now() < deadline, "not pinned");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        Raw::column(&a.try_simple("SHOW x.more").await.unwrap()),
        ["m"]
    );
    assert_eq!(
        Raw::column(&a.try_simple("SHOW x.k999").await.unwrap()),
        ["999"]
    );
}
