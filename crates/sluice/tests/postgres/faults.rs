//! What a broken or departing client leaves behind: nothing another session sees.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;

/// A client that runs an INSERT through the extended protocol, ends the batch with a Flush
/// instead of a Sync (the server answers, the implicit transaction stays open) and leaves
/// had its INSERT rolled back by its departure, as with PostgreSQL directly: its connection
/// is closed, not lent to the next client, whose own statement would commit it. And a
/// client that sends a message type no client sends gets PostgreSQL's FATAL from sluice,
/// after the answers to what came before it; no server connection is spent on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departing_or_broken_client_leaves_nothing_behind() {
    // One connection per server: the next client would be lent the very same one.
    let env = start(
        1,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    env.psql("CREATE TABLE abandoned (id int)");

    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    a.extended("", Some("INSERT INTO abandoned VALUES (1)"), &[]);
    frontend::flush(&mut a.out);
    a.flush().await;
    let mut answered = String::new();
    for _ in 0..3 {
        answered.push(a.next().await.tag as char);
    }
    assert_eq!(
        answered, "12C",
        "ParseComplete, BindComplete, CommandComplete"
    );
    drop(a);
    // The next write waits for the writer's one connection (or a new one).
    env.psql("INSERT INTO abandoned VALUES (2)");
    let rows = env
        .topo
        .primary()
        .sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM abandoned")
        .unwrap();
    assert_eq!(
        rows.trim(),
        "2",
        "the departed client's INSERT was committed"
    );

    // A message type no client sends ('Z'), after a query in the same write.
    let pids = || {
        (
            env.psql("SELECT pg_backend_pid()"),
            env.psql("INSERT INTO abandoned VALUES (3) RETURNING pg_backend_pid()"),
        )
    };
    let before = pids();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::query("SELECT 1", &mut c.out).unwrap();
    c.out.extend_from_slice(b"Z\0\0\0\x04");
    c.flush().await;
    let answer: String = c
        .until_ready()
        .await
        .iter()
        .map(|m| m.tag as char)
        .collect();
    assert_eq!(answer, "TDCZ");
    assert_eq!(
        c.try_next().await.unwrap_err(),
        "08P01 invalid frontend message type 90"
    );
    // Both servers' one connection is the one they had.
    assert_eq!(pids(), before);
}
