//! COPY FROM STDIN through sluice, in the orders PostgreSQL accepts: what the client sees is
//! what PostgreSQL would send on a direct connection.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;

/// A frontend message of type `tag` with `body`.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// The types of the next `n` messages.
async fn tags(c: &mut Raw, n: usize) -> String {
    let mut got = String::new();
    for _ in 0..n {
        got.push(c.next().await.tag as char);
    }
    got
}

/// COPY FROM STDIN in the orders PostgreSQL accepts, answered as directly: through the
/// extended protocol with its Execute followed by a Flush (the COPY's CommandComplete comes
/// with the Sync after its data; sluice once waited for it for ever), with the data, its end
/// and the Sync in the Execute's own write (once taken as still to come: the next query went
/// to the server as COPY data and later queries got earlier answers), and with an error in
/// the data while the client waits (reported at once, not when the client ends the COPY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_is_answered_as_postgres_answers_it() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("CREATE TABLE cp (id int)").await.unwrap();
    let rows: Vec<u8> = (1..=3)
        .flat_map(|i| message(b'd', format!("{i}\n").as_bytes()))
        .collect();
    let done = message(b'c', b"");

    // Execute, then Flush: CopyInResponse at once; the rest after the data and a Sync.
    c.extended("", Some("COPY cp FROM STDIN"), &[]);
    frontend::flush(&mut c.out);
    c.flush().await;
    assert_eq!(tags(&mut c, 3).await, "12G");
    c.out.extend_from_slice(&rows);
    c.out.extend_from_slice(&done);
    c.flush().await;
    frontend::sync(&mut c.out);
    let (got, msgs) = c.round(1).await;
    assert_eq!(got, "CZ", "{msgs:?}");
    let n = c.try_simple("SELECT count(*) FROM cp").await.unwrap();
    assert_eq!(Raw::column(&n), ["3"]);

    // Everything in one write, its only Sync after the data.
    c.extended("", Some("COPY cp FROM STDIN"), &[]);
    c.out.extend_from_slice(&rows);
    c.out.extend_from_slice(&done);
    frontend::sync(&mut c.out);
    let (got, _) = c.round(1).await;
    assert_eq!(got, "12GCZ");
    let n = c.try_simple("SELECT count(*) FROM cp").await.unwrap();
    assert_eq!(Raw::column(&n), ["6"], "each query its own answer");
    let v = c.try_simple("SELECT 42").await.unwrap();
    assert_eq!(Raw::column(&v), ["42"]);

    // A bad row, and the client waits: the error and ReadyForQuery come at once.
    frontend::query("COPY cp FROM STDIN", &mut c.out).unwrap();
    c.flush().await;
    assert_eq!(tags(&mut c, 1).await, "G");
    c.out.extend_from_slice(&message(b'd', b"7\n"));
    c.out.extend_from_slice(&message(b'd', b"oops\n"));
    c.flush().await;
    let msgs = c.until_ready().await;
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("22P02"), "{msgs:?}");
    // What the client still sends of the COPY is dropped, as the server drops it.
    c.out.extend_from_slice(&message(b'd', b"8\n"));
    c.out.extend_from_slice(&done);
    c.flush().await;
    let n = c.try_simple("SELECT count(*) FROM cp").await.unwrap();
    assert_eq!(Raw::column(&n), ["6"], "the failed COPY wrote nothing");

    // Execute and Flush, then CopyFail and Sync: the error and ReadyForQuery, and the next
    // query is answered (the relay once went on skipping to a Sync already passed on).
    c.extended("", Some("COPY cp FROM STDIN"), &[]);
    frontend::flush(&mut c.out);
    c.flush().await;
    assert_eq!(tags(&mut c, 3).await, "12G");
    c.out.extend_from_slice(&message(b'f', b"client gave up\0"));
    frontend::sync(&mut c.out);
    let (got, _) = c.round(1).await;
    assert_eq!(got, "EZ");
    let v = c.try_simple("SELECT 42").await.unwrap();
    assert_eq!(Raw::column(&v), ["42"]);

    // A long COPY in the Execute's own write (forwarded in parts), and a stray CopyDone
    // after an Execute that starts no COPY (the server drops it) before one that does.
    c.extended("", Some("COPY cp FROM STDIN"), &[]);
    for i in 0..1500 {
        c.out
            .extend_from_slice(&message(b'd', format!("{i}\n").as_bytes()));
    }
    c.out.extend_from_slice(&done);
    frontend::sync(&mut c.out);
    let (got, _) = c.round(1).await;
    assert_eq!(got, "12GCZ");
    c.extended("", Some("SELECT 1"), &[]);
    c.out.extend_from_slice(&done);
    c.extended("", Some("COPY cp FROM STDIN"), &[]);
    frontend::sync(&mut c.out);
    c.flush().await;
    assert_eq!(tags(&mut c, 7).await, "12DC12G");
    c.out.extend_from_slice(&rows);
    c.out.extend_from_slice(&done);
    frontend::sync(&mut c.out);
    let (got, _) = c.round(1).await;
    assert_eq!(got, "CZ");
    let n = c.try_simple("SELECT count(*) FROM cp").await.unwrap();
    assert_eq!(Raw::column(&n), ["1509"]);
}

/// An extended COPY FROM STDIN sent with its Sync (ignored by the server in copy-in mode), its
/// data and CopyDone, then a simple query instead of a second Sync: the query runs in the
/// COPY's transaction, as directly (the COPY's CommandComplete, then the query's answer and
/// one ReadyForQuery; a query that fails rolls the COPY back with it). sluice waited for a
/// Sync that never came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_copy_followed_by_a_query_runs_it_in_the_copys_transaction() {
    let env = start(0, "").await;
    let primary = env.topo.primary().port;
    let mut setup = Raw::connect(primary, "app", "app", "postgres").await;
    setup.try_simple("CREATE TABLE cq (id int)").await.unwrap();
    let got = super::pins::direct_then_sluice(&env, async |port| {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        for (i, then) in ["SELECT 1", "SELECT 1/0", "SELECT 2"]
            .into_iter()
            .enumerate()
        {
            c.extended("", Some("COPY cq FROM STDIN"), &[]);
            frontend::sync(&mut c.out);
            c.flush().await;
            steps.push(tags(&mut c, 3).await);
            c.out
                .extend_from_slice(&message(b'd', format!("{i}\n").as_bytes()));
            c.out.extend_from_slice(&message(b'c', b""));
            frontend::query(then, &mut c.out).unwrap();
            let (got, msgs) = c.round(1).await;
            steps.push(super::pins::protocol_shown(&msgs));
            steps.push(got);
        }
        let n = c
            .try_simple("SELECT string_agg(id::text, ',' ORDER BY id) FROM cq")
            .await;
        steps.push(Raw::column(&n.unwrap()).concat());
        c.try_simple("TRUNCATE cq").await.unwrap();
        steps
    })
    .await;
    assert_eq!(got.last().map(String::as_str), Some("0,2"), "{got:?}");
}
