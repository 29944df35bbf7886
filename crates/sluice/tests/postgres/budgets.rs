//! What one client may make sluice hold: a message larger than reading ahead takes is charged
//! to the process's budget (`[proxy] max_request_memory`) as it arrives; a message the budget
//! cannot hold ends its own session with PostgreSQL's out-of-memory code, and nobody else's.
//! Prepared statements are held within a budget of their own.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;

/// 6 MiB: a 3 MiB message (its buffer grows to just over 3 MiB) fits, two at once do not.
const BUDGET: &str =
    "\n[proxy]\nmax_request_memory = 6291456\n\n[mysql]\nmax_packet_size = 1048576\n";

fn select_of(bytes: usize) -> String {
    format!("SELECT length('{}')", "x".repeat(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_beyond_the_budget_ends_only_its_own_session() {
    let env = start(0, BUDGET).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let three = 3 << 20;
    let len = three.to_string();
    assert_eq!(
        Raw::column(&a.try_simple(&select_of(three)).await.unwrap()),
        [len.as_str()]
    );
    // Answered only once a's session read on, after giving its large buffer back.
    assert_eq!(Raw::column(&a.try_simple("SELECT 1").await.unwrap()), ["1"]);
    // Fits only if a's charge went with its message (two of 3 MiB and a little are over
    // the budget).
    assert_eq!(
        Raw::column(&b.try_simple(&select_of(three)).await.unwrap()),
        [len.as_str()]
    );
    assert_eq!(Raw::column(&b.try_simple("SELECT 2").await.unwrap()), ["2"]);

    // 20 MiB cannot fit: the client reads why, and its connection closes.
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let err = c.try_simple(&select_of(20 << 20)).await.unwrap_err();
    assert!(
        err.starts_with("53200 sluice: out of memory for client messages: ")
            && err.contains("at most 6291456 bytes ([proxy] max_request_memory)"),
        "{err}"
    );
    assert!(c.try_simple("SELECT 3").await.is_err(), "the session ended");

    // Everyone else carries on, and the refused message's charge went with its session.
    assert_eq!(
        Raw::column(&a.try_simple(&select_of(three)).await.unwrap()),
        [len.as_str()]
    );
    assert_eq!(Raw::column(&b.try_simple("SELECT 4").await.unwrap()), ["4"]);

    // A message above the limit of any one message is refused as its header arrives.
    let mut d = Raw::connect(env.port, "app", "app", "postgres").await;
    d.try_send_raw(&[b'Q', 0x7f, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    let err = d.try_next().await.unwrap_err();
    assert_eq!(
        err,
        "08P01 message of 2147483647 bytes is over the limit of 67108864"
    );
    assert_eq!(Raw::column(&a.try_simple("SELECT 5").await.unwrap()), ["5"]);
}

/// A message of most of the budget is held in about its own size, once: a 20 MiB query, and
/// a 20 MiB parameter of a Bind in a batch with its Sync (a batch that large is forwarded in
/// parts before its end), each fit in a budget of 24 MiB. The buffer grew by doubling (32 MiB
/// for either), and the Bind's part was charged a second time for the answers it owes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_most_of_the_budget_is_held_once() {
    let budget = "\n[proxy]\nmax_request_memory = 25165824\n\n[mysql]\nmax_packet_size = 1048576\n";
    let env = start(0, budget).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let twenty = 20 << 20;
    let len = twenty.to_string();
    assert_eq!(
        Raw::column(&c.try_simple(&select_of(twenty)).await.unwrap()),
        [len.as_str()]
    );
    let value = "y".repeat(twenty);
    frontend::parse("", "SELECT length($1)", [], &mut c.out).unwrap();
    c.extended("", None, &[Some(&value)]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    let error = msgs.iter().find(|m| m.tag == b'E').map(|m| m.text());
    assert_eq!((tags.as_str(), error), ("12DCZ", None));
    assert_eq!(Raw::column(&msgs), [len.as_str()]);
    assert_eq!(Raw::column(&c.try_simple("SELECT 1").await.unwrap()), ["1"]);
}

/// 1 MiB of prepared statements for the whole process: one of 600 KiB fits, two do not.
const STATEMENTS: &str = "\n[postgres]\nmax_statement_memory = 1048576\n";

/// Parse of `name` (`sql`) and Sync: the type bytes of the answer, and its error.
async fn prepare(c: &mut Raw, name: &str, sql: &str) -> (String, Option<String>) {
    frontend::parse(name, sql, [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    let error = msgs.iter().find(|m| m.tag == b'E').map(|m| m.text());
    (tags, error)
}

/// Bind and Execute of `name`, and Sync: the first column of its rows.
async fn execute(c: &mut Raw, name: &str) -> Vec<String> {
    c.extended(name, None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "2DCZ", "{msgs:?}");
    Raw::column(&msgs)
}

/// Prepared statements' texts are held against `[postgres] max_statement_memory` for as long
/// as a session holds them, whether the statement was answered by sluice alone (a Parse
/// while idle), prepared on a server, or prepared there again for another session: a Parse
/// that does not fit fails with 53200 and that session goes on. The copies prepared on
/// server connections hold no text, so a closed statement gives its bytes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_are_held_within_the_process_budget() {
    let env = start(0, STATEMENTS).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let big = 600 << 10;
    let len = big.to_string();
    assert_eq!(
        prepare(&mut a, "s1", &select_of(big)).await,
        ("1Z".into(), None)
    );
    assert_eq!(execute(&mut a, "s1").await, [len.as_str()]);

    let (tags, error) = prepare(&mut b, "s2", &select_of(big)).await;
    assert_eq!(tags, "EZ");
    let error = error.unwrap();
    assert!(
        error.starts_with("53200 sluice: out of memory for prepared statements: ")
            && error.contains("at most 1048576 bytes ([postgres] max_statement_memory)"),
        "{error}"
    );
    // Inside a transaction the Parse is forwarded with its unit: refused there alike.
    b.try_simple("BEGIN").await.unwrap();
    frontend::parse("s2", &select_of(big), [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    let (tags, _) = b.round(1).await;
    assert_eq!(tags, "EZ");
    // The transaction failed with it, as directly.
    let failed = b.try_simple("SELECT 1").await.unwrap_err();
    assert!(failed.starts_with("25P02 "), "{failed}");
    b.try_simple("ROLLBACK").await.unwrap();
    assert_eq!(Raw::column(&b.try_simple("SELECT 1").await.unwrap()), ["1"]);

    // Closed, s1 is still prepared on a server connection, but no longer held in memory.
    frontend::close(b'S', "s1", &mut a.out).unwrap();
    frontend::sync(&mut a.out);
    assert_eq!(a.round(1).await.0, "3Z");
    assert_eq!(
        prepare(&mut b, "s2", &select_of(big)).await,
        ("1Z".into(), None)
    );
    assert_eq!(execute(&mut b, "s2").await, [len.as_str()]);
    assert_eq!(Raw::column(&a.try_simple("SELECT 2").await.unwrap()), ["2"]);
}

/// Of 1 MiB for the whole process, 300 KiB for any one session.
const SHARES: &str =
    "\n[postgres]\nmax_statement_memory = 1048576\nmax_statement_memory_per_session = 307200\n";

/// One session's prepared statements hold at most `[postgres]
/// max_statement_memory_per_session` of the process's budget: past it that session's Parse
/// fails with 53200 (its unnamed statement counted as its named ones), it goes on with what
/// it holds, and every other session still prepares its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_holds_at_most_its_share_of_the_statement_budget() {
    let env = start(0, SHARES).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let size = 200 << 10;
    let len = size.to_string();
    assert_eq!(
        prepare(&mut a, "s1", &select_of(size)).await,
        ("1Z".into(), None)
    );
    for name in ["s2", ""] {
        let (tags, error) = prepare(&mut a, name, &select_of(size)).await;
        assert_eq!(tags, "EZ", "{name:?}");
        let error = error.unwrap();
        assert!(
            error.starts_with("53200 sluice: out of memory for prepared statements: ")
                && error.contains(
                    "one session may hold at most 307200 bytes ([postgres] max_statement_memory_per_session)"
                ),
            "{error}"
        );
    }
    // The refusal left the session as it was.
    assert_eq!(execute(&mut a, "s1").await, [len.as_str()]);
    // Everyone else prepares as much (the process's budget is far from full).
    for name in ["s1", "s2"] {
        let sql = select_of(size / 2);
        assert_eq!(prepare(&mut b, name, &sql).await, ("1Z".into(), None));
        assert_eq!(execute(&mut b, name).await, [(size / 2).to_string()]);
    }
    // Its statement closed, the session has its share again.
    frontend::close(b'S', "s1", &mut a.out).unwrap();
    frontend::sync(&mut a.out);
    assert_eq!(a.round(1).await.0, "3Z");
    assert_eq!(
        prepare(&mut a, "s2", &select_of(size)).await,
        ("1Z".into(), None)
    );
    assert_eq!(execute(&mut a, "s2").await, [len.as_str()]);
}

/// 1 MiB for the requests of the whole process (the least it may be with `[mysql]
/// max_packet_size` at 1 MiB).
const OWED: &str =
    "\n[proxy]\nmax_request_memory = 1048576\n\n[mysql]\nmax_packet_size = 1048576\n";

/// `n` Closes of a statement no one prepared (each answered by sluice itself), then Sync if
/// `end`.
fn closes(n: usize, end: bool) -> Vec<u8> {
    let mut one = bytes::BytesMut::new();
    frontend::close(b'S', "x", &mut one).unwrap();
    let mut all = one.repeat(n);
    if end {
        let mut sync = bytes::BytesMut::new();
        frontend::sync(&mut sync);
        all.extend_from_slice(&sync);
    }
    all
}

/// The answers a batch forwarded without its end owes are held against `[proxy]
/// max_request_memory`: 3,000 fit and are given back once the Sync came (two such batches at
/// once are more than the budget holds), 20,000 do not, and that session ends with 53200,
/// read by its client, while everyone else carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answers_a_batch_owes_are_held_within_the_process_budget() {
    let env = start(0, OWED).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let fine = closes(3_000, true);
    let answered = format!("{}Z", "3".repeat(3_000));
    // Each fits alone, two at once do not: each session's charge goes once its Sync came.
    for _ in 0..2 {
        for s in [&mut a, &mut c] {
            s.try_send_raw(&fine).await.unwrap();
            assert_eq!(s.round(1).await.0, answered);
        }
    }

    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    // Refused part way; sluice reads the rest of what the client sends until it leaves, so
    // the FATAL is not lost to a reset.
    b.try_send_raw(&closes(20_000, true)).await.unwrap();
    let e = b.try_next().await.unwrap_err();
    assert!(
        e.starts_with(
            "53200 sluice: out of memory for the answers a batch without a Sync or Flush owes: "
        ) && e.contains("at most 1048576 bytes ([proxy] max_request_memory)"),
        "{e}"
    );

    // Everyone else carries on, and the refused session's charge went with it.
    for s in [&mut a, &mut c] {
        s.try_send_raw(&fine).await.unwrap();
        assert_eq!(s.round(1).await.0, answered);
    }
    let mut d = Raw::connect(env.port, "app", "app", "postgres").await;
    assert_eq!(Raw::column(&d.try_simple("SELECT 1").await.unwrap()), ["1"]);
}

/// A Bind of a named statement is copied to carry the statement's name on the server
/// connection: parameters of more than 64 KiB are charged to `[proxy] max_request_memory`
/// a second time while the copy is held. In a budget of 24 MiB, a 20 MiB parameter (its
/// message charged as it arrived) leaves no room for its copy: that Bind fails with 53200
/// and the session goes on, as it does in a transaction block, which fails with it as
/// directly (a Bind nothing is copied for, of a statement that does not exist or in a failed
/// block, gets PostgreSQL's own error); a copy's charge is given back once it is sent, so Binds of 1 MiB fit one after
/// the other however many come; the unnamed statement's Bind, not copied, takes 20 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_bind_is_copied_within_the_budget() {
    let budget = "\n[proxy]\nmax_request_memory = 25165824\n\n[mysql]\nmax_packet_size = 1048576\n";
    let env = start(0, budget).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut other = Raw::connect(env.port, "app", "app", "postgres").await;
    assert_eq!(
        prepare(&mut c, "len", "SELECT length($1)").await,
        ("1Z".into(), None)
    );
    let bind = |c: &mut Raw, name: &str, bytes: usize| {
        let value = "y".repeat(bytes);
        c.extended(name, None, &[Some(&value)]);
        frontend::sync(&mut c.out);
    };

    bind(&mut c, "len", 20 << 20);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    let error = msgs[0].text();
    assert!(
        error.starts_with("53200 sluice: out of memory for client messages: this Bind's ")
            && error.contains("at most 25165824 bytes ([proxy] max_request_memory)"),
        "{error}"
    );
    assert_eq!(
        Raw::column(&other.try_simple("SELECT 1").await.unwrap()),
        ["1"]
    );
    // Nothing is copied for a statement that does not exist: PostgreSQL's error, as directly.
    bind(&mut c, "nope", 20 << 20);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(
        msgs[0].text(),
        "26000 prepared statement \"nope\" does not exist"
    );

    // 30 MiB of 1 MiB Binds in one pipeline (the client's buffer, within what reading ahead
    // takes, is charged nothing and seldom empties): each copy's charge goes once it is
    // sent, so they all fit one after the other in 24 MiB.
    let sizes: Vec<usize> = (0..30).map(|i| (1 << 20) + 1000 * i).collect();
    for &n in &sizes {
        bind(&mut c, "len", n);
    }
    let (tags, msgs) = c.round(sizes.len()).await;
    assert_eq!(tags, "2DCZ".repeat(sizes.len()), "{msgs:?}");
    let lengths: Vec<String> = sizes.iter().map(|n| n.to_string()).collect();
    assert_eq!(Raw::column(&msgs), lengths);
    frontend::parse("", "SELECT length($1)", [], &mut c.out).unwrap();
    bind(&mut c, "", 20 << 20);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "12DCZ");
    assert_eq!(Raw::column(&msgs), [(20 << 20).to_string()]);

    // In a transaction block the server refuses it alike: the block fails, as directly.
    c.try_simple("BEGIN").await.unwrap();
    bind(&mut c, "len", 20 << 20);
    assert_eq!(c.round(1).await.0, "EZ");
    let failed = c.try_simple("SELECT 3").await.unwrap_err();
    assert!(failed.starts_with("25P02 "), "{failed}");
    // In the failed block, the server's own error for any Bind, as directly.
    bind(&mut c, "len", 20 << 20);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert!(msgs[0].text().starts_with("25P02 "), "{msgs:?}");
    c.try_simple("ROLLBACK").await.unwrap();
    assert_eq!(Raw::column(&c.try_simple("SELECT 4").await.unwrap()), ["4"]);
}
