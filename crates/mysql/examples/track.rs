//! Prints what a server's session trackers report for each statement given on the command
//! line: `cargo run -p sluice-mysql --example track -- 127.0.0.1:3306 user pass "SQL" ...`
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_mysql::backend::stmt_cache::StmtCache;
use sluice_mysql::backend::BackendConn;
use sluice_mysql::wire::ok::state_changes;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, user, pass) = (&args[0], &args[1], &args[2]);
    let mut c = BackendConn::connect(addr, user, pass, 0, StmtCache::new(16, Default::default()))
        .await
        .expect("connect");
    for sql in &args[3..] {
        match c.exec(sql).await {
            Ok(ok) => {
                let changes: Vec<String> = state_changes(&ok.session_state)
                    .map(|c| format!("{c:?}").replace("[", "").replace("]", ""))
                    .collect();
                println!(
                    "{sql}\n    status={:#06x} {}",
                    ok.status,
                    changes.join(" | ")
                );
            }
            Err(e) => println!("{sql}\n    ERROR {e}"),
        }
    }
}
