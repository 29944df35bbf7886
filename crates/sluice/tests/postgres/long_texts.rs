//! Statement texts of 256 KiB or more are classified off the event loop
//! (`sluice_runtime::off_loop`), the client's buffer moved to a blocking thread and back:
//! they are routed, tracked, pinned and counted as the same statements written short.

use super::pg::raw::Raw;
use super::pg::{self, start};
use postgres_protocol::message::frontend;

/// `sql` with a comment that makes it longer than the length classified off the loop.
fn padded(sql: &str) -> String {
    let text = format!("{sql} /* {} */", "x".repeat(300 << 10));
    assert!(text.len() > sluice_runtime::off_loop::OFF_LOOP_TEXT);
    text
}

/// One thread, as with `worker_threads = 1`: the hand-off works on a current-thread runtime.
#[tokio::test(flavor = "current_thread")]
async fn long_texts_are_routed_tracked_and_counted_as_short_ones() {
    let env = start(1, "").await;
    let admin = env.admin().await;
    env.topo
        .primary()
        .sql("CREATE TABLE longs (x int)")
        .unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let simple = |msgs: Result<Vec<_>, String>| Raw::column(&msgs.unwrap());

    // Simple queries: a read on the replica, a write on the primary.
    let read = c.try_simple(&padded("SELECT pg_is_in_recovery()")).await;
    assert_eq!(simple(read), ["t"]);
    c.try_simple(&padded("INSERT INTO longs VALUES (1)"))
        .await
        .unwrap();
    c.try_simple("INSERT INTO longs VALUES (2)").await.unwrap();
    // A setting it makes is the session's, on whichever connection serves it next.
    c.try_simple(&padded("SET application_name = 'long_one'"))
        .await
        .unwrap();
    let shown = c.try_simple("SHOW application_name").await;
    assert_eq!(simple(shown), ["long_one"]);

    // Extended: a long Parse of a read runs on the replica, and again when bound later.
    c.extended("r", Some(&padded("SELECT pg_is_in_recovery()")), &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(
        (tags.as_str(), Raw::column(&msgs)),
        ("12DCZ", vec!["t".into()])
    );
    c.extended("r", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(
        (tags.as_str(), Raw::column(&msgs)),
        ("2DCZ", vec!["t".into()])
    );
    // A unit with a short Parse before a long one, and a Bind of each: a write, on the
    // primary, both statements where the client put them.
    c.extended("s", Some("SELECT pg_is_in_recovery()"), &[]);
    let insert = padded("INSERT INTO longs VALUES ($1) RETURNING pg_is_in_recovery()");
    c.extended("w", Some(&insert), &[Some("3")]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12DC12DCZ", "{msgs:?}");
    assert_eq!(Raw::column(&msgs), ["f", "f"]);

    // A lock a long text takes pins the session to its connection: only that one can unlock it.
    let locked = c.try_simple(&padded("SELECT pg_advisory_lock(4711)")).await;
    assert_eq!(simple(locked), [""]);
    let unlocked = c.try_simple("SELECT pg_advisory_unlock(4711)").await;
    assert_eq!(simple(unlocked), ["t"]);

    let rows = env
        .topo
        .primary()
        .sql("SELECT string_agg(x::text, ',' ORDER BY x) FROM longs")
        .unwrap();
    assert_eq!(rows.trim(), "1,2,3");
    // The long INSERT and the short one: one digest, counted twice, on the primary.
    // (From another thread: the admin API is served by this one.)
    let addr = admin.addr;
    let digests = tokio::task::spawn_blocking(move || pg::http::get_json(addr, "/api/digests"))
        .await
        .unwrap();
    let insert = digests["digests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["text"] == "INSERT INTO longs VALUES (...)")
        .unwrap_or_else(|| panic!("no INSERT digest in {digests}"));
    assert_eq!(
        (&insert["count"], &insert["hostgroup"]),
        (&2.into(), &"writer".into()),
        "{insert}"
    );
}
