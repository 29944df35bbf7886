//! COM_QUERY.

use super::exec::Target;
use super::pipeline::{Body, Stmt};
use super::scan::Expect;
use super::session::{Fatal, Session};
use crate::wire::consts::err;
use crate::wire::ok::OkPacket;
use sluice_runtime::off_loop::{off_loop, OFF_LOOP_TEXT};
use sluice_sqlscan::digest::normalize_into;
use sluice_sqlscan::{scan_with, Command, Effects, Options, Route, Scan};

impl Session {
    /// Runs a text-protocol statement (or several).
    pub(crate) async fn query(&mut self, mut payload: bytes::BytesMut) -> Result<(), Fatal> {
        let opts = Options {
            no_backslash_escapes: self.st.no_backslash_escapes,
        };
        let scan = match payload.len() > OFF_LOOP_TEXT {
            // (Boxed: the hand-off's state is not carried by every command's future.)
            true => Box::pin(self.scan_long(&mut payload, opts)).await?,
            false => scan_with(&payload[1..], opts),
        };
        let sql = &payload[1..];
        self.handle.set_statement(Some(sql));
        let r = self.query_scanned(&payload, &scan).await;
        self.handle.set_statement(None);
        self.long_digest = None;
        r
    }

    /// Scans a long text off the event loop ([`sluice_runtime::off_loop`]), and computes its
    /// digest there too (kept in `long_digest` for the digest table, unless that is off):
    /// both take time in proportion to its length. The digest is of the text as written under
    /// the `sql_mode` it was scanned with, the one in force when it arrived.
    async fn scan_long(
        &mut self,
        payload: &mut bytes::BytesMut,
        opts: Options,
    ) -> Result<Scan, Fatal> {
        let counted = self.proxy.rt.digests.capacity() != 0;
        let (scan, digest) = off_loop(payload, move |payload| {
            let sql = &payload[1..];
            let digest = counted.then(|| {
                let mut text = Vec::new();
                let id = normalize_into(sql, opts.no_backslash_escapes, &mut text);
                Box::new((id, text))
            });
            (scan_with(sql, opts), digest)
        })
        .await
        .ok_or_else(|| Fatal("scanning a long statement failed".into()))?;
        self.long_digest = digest;
        Ok(scan)
    }

    async fn query_scanned(&mut self, payload: &[u8], scan: &Scan) -> Result<(), Fatal> {
        let sql = &payload[1..];
        if scan.statements == 1 && matches!(scan.command, Command::Show | Command::Select) {
            match super::local::recognise(sql) {
                // ROW_COUNT()/FOUND_ROWS() are exact on the previous statement's connection
                // when it was kept; otherwise the proxy knows them.
                Some(super::local::Local::RowCount(_) | super::local::Local::FoundRows(_))
                    if self.prev.is_some() || self.prev_is_held => {}
                // A pinned connection may hold a newer LAST_INSERT_ID(): ask it.
                Some(super::local::Local::LastInsertId(_))
                    if self.held.as_ref().is_some_and(|h| h.insert_dirty) => {}
                Some(local) => {
                    self.drop_previous_unless_needed(Effects::default()).await;
                    return self.answer_local(local).await;
                }
                None => {}
            }
        }
        if scan.command == Command::Kill && scan.statements == 1 {
            if let Some(k) = scan.kill {
                return self.kill(k.id, k.query_only).await;
            }
        }
        if scan.effects.intersects(Effects::SESSION_TRACK_SET) {
            // The proxy relies on the session trackers; a client's own settings would break
            // state tracking, so they are acknowledged and not applied.
            if scan.statements == 1 {
                let st = self.st.status();
                self.client.push_ok(
                    1,
                    &OkPacket {
                        status: st,
                        ..OkPacket::default()
                    },
                );
                return Ok(self.client.flush().await?);
            }
            let msg = "sluice: session_track_* variables are managed by the proxy and cannot be set in a multi-statement";
            return Ok(self
                .client
                .send_err(1, err::SESSION_STATE, b"HY000", msg)
                .await?);
        }
        self.drop_previous_unless_needed(scan.effects).await;
        let target: Target = match self.target(scan, sql) {
            Ok(t) => t,
            Err(msg) => {
                let msg = format!("sluice: {msg}");
                return Ok(self
                    .client
                    .send_err(1, err::ROUTING, b"HY000", &msg)
                    .await?);
            }
        };
        let read = scan.route() == Route::Read;
        let rewritten = self.session_function_values(scan.effects, sql, &target);
        let payload = rewritten.as_deref().unwrap_or(payload);
        self.run_stmt(Stmt {
            target,
            body: Body::Plain(payload),
            expect: Expect::Query,
            effects: scan.effects,
            sql: Some(sql),
            read,
            shown: true,
        })
        .await
    }

    /// Replaces what the session reads about itself: its connection ids (`CONNECTION_ID()`
    /// and the others, see `ids.rs`) and, when the previous statement's connection was not
    /// kept, `FOUND_ROWS()` and `ROW_COUNT()` with the session's values. Returns the
    /// rewritten COM_QUERY payload, if anything changed.
    fn session_function_values(
        &self,
        effects: Effects,
        sql: &[u8],
        target: &Target,
    ) -> Option<Vec<u8>> {
        let own = self.own_ids(effects, sql, Some(target));
        let mut sql_now = own.as_deref().unwrap_or(sql);
        let prev;
        if effects.intersects(Effects::PREV_STATEMENT) && self.prev.is_none() && !self.prev_is_held
        {
            let values = [
                ("FOUND_ROWS", self.st.found_rows.to_string()),
                ("ROW_COUNT", self.st.row_count.to_string()),
            ];
            prev = sluice_sqlscan::rewrite::replace_calls(sql_now, &values);
            if let Some(p) = &prev {
                sql_now = p;
            }
        } else {
            prev = None;
        }
        if own.is_none() && prev.is_none() {
            return None;
        }
        let mut payload = Vec::with_capacity(sql_now.len() + 1);
        payload.push(crate::wire::consts::com::QUERY);
        payload.extend_from_slice(sql_now);
        Some(payload)
    }
}
