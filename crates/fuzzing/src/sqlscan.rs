//! Target `sqlscan`: the SQL lexer, the router's classification, the digest normaliser and the
//! session-function rewrite. Input: `[flags][statement text...]`; flag bit 0 is sql_mode
//! NO_BACKSLASH_ESCAPES.
//!
//! Checked: tokens are non-empty, in order, inside the input, and end; a hint span lies in the
//! input; the digest text is bounded (by `MAX_TEXT` and by the input's size) and the same
//! through both entry points; a rewrite leaves no call to rewrite. The same text also goes to
//! the PostgreSQL scanner: its hint lies in the input, and the digest it computes while
//! classifying is the one `postgres::digest_text` gives, whose text is bounded.

use sluice_sqlscan::digest::{digest, normalize_into, MAX_TEXT};
use sluice_sqlscan::lexer::Lexer;
use sluice_sqlscan::{names, postgres, rewrite, scan_with, Options};

/// The harness body.
pub fn run(data: &[u8]) {
    let [flags, sql @ ..] = data else {
        return;
    };
    let nbe = flags & 1 != 0;
    let mut tokens = 0usize;
    let mut end = 0usize;
    let mut lx = Lexer::new(sql).no_backslash_escapes(nbe);
    while let Some(t) = lx.next() {
        assert!(
            end <= t.start && t.start < t.end && t.end <= sql.len(),
            "token {}..{} after {end}, input of {}",
            t.start,
            t.end,
            sql.len()
        );
        end = t.end;
        tokens += 1;
        let _ = lx.take_comment();
    }

    let s = scan_with(
        sql,
        Options {
            no_backslash_escapes: nbe,
        },
    );
    assert!(s.statements as usize <= tokens);
    if let Some((a, b)) = s.hint {
        assert!(
            a <= b && b <= sql.len(),
            "hint {a}..{b} in {} bytes",
            sql.len()
        );
    }
    let _ = s.hint(sql);
    let _ = s.route();

    let d = digest(sql, nbe);
    assert!(
        d.text.len() <= MAX_TEXT,
        "digest text of {} bytes",
        d.text.len()
    );
    let mut out = Vec::new();
    assert_eq!(normalize_into(sql, nbe, &mut out), d.id);
    assert!(out.len() <= MAX_TEXT);
    // One space at most before each token, and literal lists collapse to ` (...)`.
    assert!(
        out.len() <= 2 * sql.len() + 8,
        "normalised text of {} bytes for {} input bytes",
        out.len(),
        sql.len()
    );

    let values = [
        ("CONNECTION_ID", "42".to_string()),
        ("FOUND_ROWS", "7".to_string()),
        ("ROW_COUNT", "-1".to_string()),
    ];
    if let Some(r) = rewrite::replace_calls(sql, &values) {
        assert!(
            rewrite::replace_calls(&r, &values).is_none(),
            "calls left after a rewrite"
        );
    }

    let _ = names::created_temp_table(sql);
    assert!(names::dropped_tables(sql).len() <= tokens);
    let _ = names::prepared_statement_name(sql);

    run_postgres(sql, &mut out);
}

/// The PostgreSQL scanner and its digest.
fn run_postgres(sql: &[u8], out: &mut Vec<u8>) {
    let pg = postgres::scan(sql);
    if let Some((a, b)) = pg.hint {
        assert!(
            a <= b && b <= sql.len(),
            "hint {a}..{b} in {} bytes",
            sql.len()
        );
    }
    let id = postgres::digest_text(sql, out);
    assert_eq!(
        id,
        pg.digest,
        "scan and digest_text disagree on {:?}",
        String::from_utf8_lossy(sql)
    );
    assert!(
        out.len() <= postgres::MAX_TEXT,
        "PostgreSQL digest text of {} bytes",
        out.len()
    );
    // One space at most before each token (a `::` lexed from two bytes writes two bytes), and
    // a list replaced by ` (...)` is longer than its shortest form `(1)` by three bytes.
    assert!(
        out.len() <= 2 * sql.len() + 8,
        "PostgreSQL digest text of {} bytes for {} input bytes",
        out.len(),
        sql.len()
    );
}
