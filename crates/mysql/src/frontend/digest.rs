//! Counting statements in the digest table: a text statement's digest is computed from its
//! text, a prepared statement's once, at its first execution.

use super::scan::Outcome;
use super::session::Session;
use sluice_core::{DigestKey, DigestSample};
use std::time::Duration;

/// What a statement's digest is computed from.
#[derive(Clone, Copy)]
pub(crate) enum DigestOf<'a> {
    /// Not counted (commands without a statement, hidden commands).
    Nothing,
    /// A text statement.
    Text(&'a [u8]),
    /// A prepared statement (its digest is kept with it).
    Prepared(&'a crate::backend::stmt_cache::StmtKey),
}

impl<'a> DigestOf<'a> {
    /// The statement's text, if it has one.
    pub(crate) fn text(self) -> Option<&'a [u8]> {
        match self {
            DigestOf::Nothing => None,
            DigestOf::Text(sql) => Some(sql),
            DigestOf::Prepared(key) => Some(&key.sql),
        }
    }
}

impl Session {
    /// Adds a statement to the digest table (schema as it was when the statement ran).
    pub(crate) fn count_digest(
        &mut self,
        of: DigestOf<'_>,
        hostgroup: &str,
        elapsed: Duration,
        out: &Outcome,
    ) {
        if self.proxy.rt.digests.capacity() == 0 {
            return;
        }
        let nbe = self.st.no_backslash_escapes;
        match of {
            DigestOf::Nothing => {}
            // A prepared statement's digest is computed once, not at every execution.
            DigestOf::Prepared(key) => key.digest(nbe, |id, text| {
                self.record_digest(id, text, hostgroup, elapsed, out)
            }),
            DigestOf::Text(sql) => {
                // A long text's, computed with its scan.
                if let Some(made) = self.long_digest.take() {
                    return self.record_digest(made.0, &made.1, hostgroup, elapsed, out);
                }
                thread_local! {
                    // One normalisation buffer per worker thread, not per session: the work
                    // below never waits, so no other session can interleave.
                    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
                }
                BUF.with_borrow_mut(|buf| {
                    let id = sluice_sqlscan::digest::normalize_into(sql, nbe, buf);
                    self.record_digest(id, buf, hostgroup, elapsed, out)
                });
            }
        }
    }

    fn record_digest(
        &self,
        id: u64,
        text: &[u8],
        hostgroup: &str,
        elapsed: Duration,
        out: &Outcome,
    ) {
        self.proxy.rt.digests.record(
            DigestKey {
                id,
                user: &self.user.name,
                schema: self.st.tracked.schema.as_deref().unwrap_or(""),
                hostgroup,
            },
            text,
            DigestSample {
                elapsed,
                rows_sent: out.rows,
                rows_affected: out.affected_rows,
                error: out.error.is_some(),
                ended: None,
            },
        );
    }
}
