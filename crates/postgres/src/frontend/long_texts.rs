//! A unit's long statement texts (a Query's or a Parse's of [`OFF_LOOP_TEXT`] bytes or more)
//! are classified on tokio's blocking pool ([`sluice_runtime::off_loop`]), the client's
//! buffer moved there and back: the session awaits their definitions while its thread serves
//! the other sessions. Such a unit takes the general path (`Session::unit`, which classifies
//! it first), never the plain-read one.

use super::session::{Session, SessionError};
use super::unit::{cstr, statement_defs_with, Defs, Unit};
use crate::backend::statements::StmtDef;
use sluice_runtime::off_loop::{off_loop, OFF_LOOP_TEXT};

/// Definitions made off the loop, by message index, in order, not charged to any budget yet
/// (see [`super::unit::statement_defs_with`]).
pub type Made = Vec<(usize, StmtDef)>;

/// Whether `unit` has a Query or a Parse message of [`OFF_LOOP_TEXT`] bytes or more.
#[inline]
pub fn has_long_text(unit: &Unit) -> bool {
    unit.len >= OFF_LOOP_TEXT
        && unit
            .iter()
            .any(|(tag, _, len)| matches!(tag, b'Q' | b'P') && len >= OFF_LOOP_TEXT)
}

/// The definitions of the long Query and Parse texts among `msgs` (in `buf`), as
/// [`super::unit::statement_defs`] would make them before charging them.
fn long_defs(buf: &[u8], msgs: &[(u8, u32, u32)]) -> Made {
    let mut made = Made::new();
    for (i, &(tag, at, len)) in msgs.iter().enumerate() {
        let (at, len) = (at as usize, len as usize);
        if len < OFF_LOOP_TEXT {
            continue;
        }
        let body = &buf[at + 5..at + len];
        let def = match tag {
            b'Q' => cstr(body).map(|(sql, _)| StmtDef::query(sql)),
            b'P' => cstr(body)
                .and_then(|(_, rest)| cstr(rest))
                .map(|(sql, types)| StmtDef::new(sql, types)),
            _ => None,
        };
        made.extend(def.map(|d| (i, d)));
    }
    made
}

impl Session {
    /// The statements of `unit`, which has long texts (see [`has_long_text`]), classified: the
    /// long ones off the loop.
    pub(super) async fn long_text_defs(&mut self, unit: &Unit) -> Result<Box<Defs>, SessionError> {
        let msgs = unit.msgs.to_vec();
        let made = off_loop(&mut self.client.buf, move |buf| long_defs(buf, &msgs))
            .await
            .ok_or_else(|| SessionError::Client("classifying a long statement failed".into()))?;
        let mut made = made.into_iter().peekable();
        let settings = self.analysis_settings();
        Ok(Box::new(statement_defs_with(
            &self.client.buf,
            unit,
            settings,
            &self.key,
            &mut self.statement_budget,
            &self.fe,
            |i| made.next_if(|(at, _)| *at == i).map(|(_, def)| def),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_long_query_and_parse_texts_are_made_off_the_loop() {
        let long = "x".repeat(OFF_LOOP_TEXT);
        let mut buf = Vec::new();
        let mut msgs = Vec::new();
        let mut push = |tag: u8, body: &[u8]| {
            let at = buf.len();
            buf.push(tag);
            buf.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
            buf.extend_from_slice(body);
            msgs.push((tag, at as u32, (buf.len() - at) as u32));
        };
        let query = format!("SELECT length('{long}')\0");
        let parse = format!("s1\0SELECT '{long}' IN ($1)\0\0\x01\0\0\0\x19");
        push(b'P', b"short\0SELECT 1\0\0\0");
        push(b'P', parse.as_bytes());
        push(b'B', format!("\0s1\0{long}").as_bytes());
        push(b'Q', query.as_bytes());
        let made = long_defs(&buf, &msgs);
        let at: Vec<usize> = made.iter().map(|(i, _)| *i).collect();
        assert_eq!(at, [1, 3]);
        let direct = StmtDef::new(
            &parse.as_bytes()[3..parse.len() - 7],
            &[0, 1, 0, 0, 0, 0x19],
        );
        assert_eq!(made[0].1.sql, direct.sql);
        assert_eq!(made[0].1.types, direct.types);
        assert_eq!(made[0].1.info, direct.info);
        let q = StmtDef::query(&query.as_bytes()[..query.len() - 1]);
        assert_eq!(made[1].1.info, q.info);
        assert_eq!(made[1].1.digest_text(), q.digest_text());
    }
}
