//! MySQL `SET` statements: which variables they set (session, global, user), and
//! `SET STATEMENT ... FOR`, whose statement after `FOR` decides.

use super::{body_token, statement, word_is, Command, Cursor, Effects, Kind, Route, Stmt, Walk};

/// `SET ...`: session variables (reads), user variables, global variables, transaction
/// characteristics, names, roles, passwords, and `SET STATEMENT ... FOR`.
pub(super) fn set_statement(cur: &mut Cursor<'_>) -> Stmt {
    let src = cur.src;
    let mut st = Stmt {
        command: Command::Set,
        route: Route::Write,
        effects: Effects::default(),
        kill: None,
    };
    let mut walk = Walk::default();
    'assignments: while let Some(mut h) = cur.next() {
        if h.is_punct(b';') {
            break;
        }
        let mut global = false;
        let mut explicit_session = false;
        while word_is(
            src,
            &h,
            &["GLOBAL", "SESSION", "LOCAL", "PERSIST", "PERSIST_ONLY"],
        ) {
            if word_is(src, &h, &["GLOBAL", "PERSIST", "PERSIST_ONLY"]) {
                global = true;
            } else {
                explicit_session = true;
            }
            match cur.next() {
                Some(n) => h = n,
                None => break 'assignments,
            }
        }
        let is = |kw: &str| h.is_word(src, kw);
        let mut rest_of_statement = false;
        match h.kind {
            Kind::UserVar => st.effects |= Effects::USER_VAR_WRITE,
            Kind::SysVar => {
                let name = &h.text(src)[2..];
                let scoped_global = name.len() > 7 && name[..7].eq_ignore_ascii_case(b"global.");
                let bare = name.rsplit(|&b| b == b'.').next().unwrap_or(name);
                mark_var(&mut st, bare, global || scoped_global);
            }
            Kind::Word
                if is("NAMES") || is("CHARSET") || (is("CHARACTER") && cur.peek_word("SET")) =>
            {
                st.effects |= Effects::SESSION_SET;
            }
            Kind::Word if is("TRANSACTION") => {
                st.effects |= if global {
                    Effects::GLOBAL_SET
                } else if explicit_session {
                    Effects::SESSION_SET
                } else {
                    Effects::TRX_CHARACTERISTICS
                };
                rest_of_statement = true;
            }
            Kind::Word if is("ROLE") => {
                st.effects |= Effects::UNTRACKED;
                rest_of_statement = true;
            }
            Kind::Word if is("PASSWORD") || is("DEFAULT") => {
                st.effects |= Effects::GLOBAL_SET; // writes the grant tables
                rest_of_statement = true;
            }
            Kind::Word if is("STATEMENT") => return set_statement_for(cur),
            Kind::Word | Kind::QuotedIdent => {
                let mut name = h.text(src);
                if cur.peek().is_some_and(|n| n.is_punct(b'.')) {
                    cur.next();
                    if let Some(n) = cur.next() {
                        name = n.text(src);
                    }
                }
                mark_var(&mut st, name, global);
            }
            _ => {}
        }
        // The value: up to the next top-level ',' (or the end, for multi-word forms).
        let mut depth = 0;
        while let Some(t) = cur.peek() {
            if t.is_punct(b';') || (depth == 0 && t.is_punct(b',') && !rest_of_statement) {
                break;
            }
            cur.next();
            match t.kind {
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => depth -= 1,
                _ => {}
            }
            body_token(cur, &mut st, &mut walk, t);
        }
        match cur.next() {
            Some(t) if t.is_punct(b',') => continue,
            _ => break,
        }
    }
    let write = walk.write
        || st.effects.intersects(
            Effects::USER_VAR_WRITE
                | Effects::GLOBAL_SET
                | Effects::TRX_CHARACTERISTICS
                | Effects::UNTRACKED
                | Effects::LOCK_FUNCTION
                | Effects::LAST_INSERT_ID_SET,
        )
        || !st.effects.intersects(Effects::SESSION_SET);
    st.route = if write { Route::Write } else { Route::Read };
    st
}

fn mark_var(st: &mut Stmt, name: &[u8], global: bool) {
    if name.len() > 14 && name[..14].eq_ignore_ascii_case(b"session_track_") {
        st.effects |= Effects::SESSION_TRACK_SET;
    }
    if name.eq_ignore_ascii_case(b"last_insert_id") || name.eq_ignore_ascii_case(b"identity") {
        st.effects |= Effects::LAST_INSERT_ID_SET;
    }
    if name.eq_ignore_ascii_case(b"insert_id") {
        // A one-shot value for the next statement's auto-increment: it must stay with it.
        st.effects |= Effects::UNTRACKED;
    }
    st.effects |= if global {
        Effects::GLOBAL_SET
    } else {
        Effects::SESSION_SET
    };
}

/// `SET STATEMENT var=value [, ...] FOR <statement>`: the settings last one statement, so
/// the statement after `FOR` decides.
fn set_statement_for(cur: &mut Cursor<'_>) -> Stmt {
    let src = cur.src;
    let mut depth = 0;
    while let Some(n) = cur.next() {
        match n.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth -= 1,
            Kind::Punct(b';') => break,
            _ => {}
        }
        if depth == 0 && n.is_word(src, "FOR") {
            if let Some(first) = cur.next() {
                return statement(cur, first);
            }
        }
    }
    Stmt {
        command: Command::Set,
        route: Route::Write,
        effects: Effects::default(),
        kill: None,
    }
}
