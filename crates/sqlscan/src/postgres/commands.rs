//! Statements with their own grammar: `EXPLAIN`, `COPY`, transaction control, `SET`/`RESET`,
//! and the session statements (`DISCARD`, `DEALLOCATE`, `PREPARE`, `LISTEN`, `DECLARE` ...).

use super::classify::{inner_statement, Stmt};
use super::cursor::Cursor;
use super::keywords::Kw;
use super::lexer::{Kind, Token};
use super::walk::{rest_as_query, rest_of, subquery, unquote};
use super::{PgCommand, Pins, SetStmt, Unpins};
use crate::Route;

/// `EXPLAIN [ANALYZE] [VERBOSE] stmt` or `EXPLAIN (option [value], ...) stmt`. Without
/// `ANALYZE` nothing runs: a read, unless it needs the session's prepared statement
/// (`EXPLAIN EXECUTE`). With it the statement runs: its route and pins.
pub(super) fn explain(cur: &mut Cursor<'_>) -> Stmt {
    let src = cur.src;
    let mut analyze = false;
    if cur.peek_punct(b'(') {
        cur.next();
        let mut depth = 1u32;
        while let Some(t) = cur.next() {
            match t.kind {
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                // An option's name may be quoted (`("analyze")`), lower case as PostgreSQL
                // knows it.
                Kind::Word if depth == 1 && (t.is(Kw::Analyze) || t.is(Kw::Analyse)) => {
                    analyze = !cur.peek().is_some_and(|v| is_false(src, &v));
                }
                Kind::QuotedIdent
                    if depth == 1 && matches!(t.text(src), b"\"analyze\"" | b"\"analyse\"") =>
                {
                    analyze = !cur.peek().is_some_and(|v| is_false(src, &v));
                }
                _ => {}
            }
        }
    } else {
        loop {
            if cur.eat(Kw::Analyze) || cur.eat(Kw::Analyse) {
                analyze = true;
            } else if !cur.eat(Kw::Verbose) {
                break;
            }
        }
    }
    let Some(inner) = inner_statement(cur) else {
        return Stmt::new(PgCommand::Explain, Route::Write);
    };
    let mut st = Stmt::new(PgCommand::Explain, Route::Read);
    if analyze {
        st.route = inner.route;
        st.pins = inner.pins;
        st.unpins = inner.unpins;
    } else if matches!(inner.command, PgCommand::Execute | PgCommand::Other) {
        st.route = Route::Write;
    }
    st
}

/// A boolean option value that turns the option off: `false`, `off`, `0`, `'false'`, `'off'`,
/// `"off"`.
fn is_false(src: &[u8], t: &Token) -> bool {
    let text = t.text(src);
    let v = match t.kind {
        Kind::Word | Kind::Number => text,
        Kind::Str if text.len() >= 2 && text[0] == b'\'' => &text[1..text.len() - 1],
        Kind::QuotedIdent if text.len() >= 2 => &text[1..text.len() - 1],
        _ => return false,
    };
    v.eq_ignore_ascii_case(b"false") || v.eq_ignore_ascii_case(b"off") || v == b"0"
}

/// `COPY table ... FROM|TO ...` or `COPY (query) TO ...`. Only `TO STDOUT` of a table or of a
/// read-only query is a read; `TO 'file'` and `TO PROGRAM` act on the server's host, so they
/// stay with the primary.
pub(super) fn copy(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(
        PgCommand::Copy {
            from_stdin_or_file: false,
        },
        Route::Write,
    );
    let mut query_route = Route::Read;
    let mut t = cur.next();
    if let Some(open) = t.filter(|t| t.is_punct(b'(')) {
        let (route, pins, unpins) = subquery(cur, open);
        query_route = route;
        st.pins |= pins;
        st.unpins |= unpins;
        t = cur.next();
    }
    let mut depth = 0u32;
    while let Some(tok) = t {
        match tok.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            Kind::Word if depth == 0 && tok.is(Kw::From) => {
                st.command = PgCommand::Copy {
                    from_stdin_or_file: true,
                };
                break;
            }
            Kind::Word if depth == 0 && tok.is(Kw::To) => {
                if cur.eat(Kw::Stdout) {
                    st.route = query_route;
                }
                break;
            }
            _ => {}
        }
        t = cur.next();
    }
    st
}

/// `BEGIN [WORK | TRANSACTION] [modes]`, `START TRANSACTION [modes]`: a read only for
/// `READ ONLY` without `SERIALIZABLE`. Modes that are not PostgreSQL's (a typo, an unknown
/// level) make it no `Begin` but a statement for the server, whose syntax error the client
/// then gets, as directly: a `Begin` may be answered by a proxy before the server sees it.
pub(super) fn begin(cur: &mut Cursor<'_>, start: bool) -> Stmt {
    if start {
        if !cur.eat(Kw::Transaction) {
            return rest_of(cur, Stmt::new(PgCommand::Other, Route::Write));
        }
    } else {
        let _ = cur.eat(Kw::Work) || cur.eat(Kw::Transaction);
    }
    let Modes {
        read_only,
        serializable,
        valid: true,
    } = modes(cur)
    else {
        return Stmt::new(PgCommand::Other, Route::Write);
    };
    Stmt::new(
        PgCommand::Begin {
            read_only,
            serializable,
        },
        mode_route(read_only, serializable),
    )
}

fn mode_route(read_only: Option<bool>, serializable: bool) -> Route {
    if read_only == Some(true) && !serializable {
        Route::Read
    } else {
        Route::Write
    }
}

/// Transaction modes, as [`modes`] reads them.
struct Modes {
    /// The access mode, if one was given.
    read_only: Option<bool>,
    /// The isolation level is serializable.
    serializable: bool,
    /// Every token was part of a mode PostgreSQL has.
    valid: bool,
}

/// Transaction modes to the end of the statement: `ISOLATION LEVEL ...`, `READ ONLY`,
/// `READ WRITE`, `[NOT] DEFERRABLE`, with or without commas between them (a comma only
/// between two modes, as in PostgreSQL's grammar).
fn modes(cur: &mut Cursor<'_>) -> Modes {
    let mut m = Modes {
        read_only: None,
        serializable: false,
        valid: true,
    };
    // The last token ended a mode (a comma may follow); none yet.
    let mut after_mode = None;
    while let Some(t) = cur.next() {
        if t.is_punct(b',') {
            m.valid &= after_mode == Some(true);
            after_mode = Some(false);
            continue;
        }
        let known = if t.is(Kw::Isolation) {
            let level = cur.eat(Kw::Level);
            if cur.eat(Kw::Serializable) {
                m.serializable = true;
                level
            } else if cur.eat(Kw::Repeatable) {
                level && cur.eat(Kw::Read)
            } else if cur.eat(Kw::Read) {
                // READ COMMITTED, READ UNCOMMITTED: not an access mode.
                level && (cur.eat(Kw::Committed) || cur.eat(Kw::Uncommitted))
            } else {
                false
            }
        } else if t.is(Kw::Read) {
            if cur.eat(Kw::Only) {
                m.read_only = Some(true);
                true
            } else if cur.eat(Kw::Write) {
                m.read_only = Some(false);
                true
            } else {
                false
            }
        } else if t.is(Kw::Not) {
            cur.eat(Kw::Deferrable)
        } else {
            t.is(Kw::Deferrable)
        };
        m.valid &= known;
        after_mode = Some(known);
    }
    // Not ended by a comma.
    m.valid &= after_mode != Some(false);
    m
}

/// `SET [SESSION | LOCAL] ...`.
pub(super) fn set(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(PgCommand::Set, Route::Write);
    let mut local = false;
    if cur.eat(Kw::Local) {
        local = true;
    } else if cur.peek_is(Kw::Session) {
        cur.next();
        if cur.peek_is(Kw::Authorization) || cur.peek_is(Kw::Characteristics) {
            return session_setting(cur, local, st);
        }
    }
    if cur.eat(Kw::Session) {
        return session_setting(cur, local, st);
    }
    if cur.eat(Kw::Transaction) {
        // Also SET TRANSACTION SNAPSHOT 'id': no modes, a write.
        let Modes {
            read_only,
            serializable,
            ..
        } = modes(cur);
        return Stmt::new(
            PgCommand::SetTransaction {
                read_only,
                serializable,
            },
            mode_route(read_only, serializable),
        );
    }
    if cur.eat(Kw::Constraints) {
        st.command = PgCommand::Other;
        return st;
    }
    let Some(h) = cur.next() else { return st };
    if let Some((name, reset)) = parameter(cur, h) {
        if name == "session_authorization" {
            return authorization(st, local, reset);
        }
        if name == "seed" {
            // Seeds the session's `random()` sequence, which outlives the setting (with
            // LOCAL too), as `setseed()` does.
            st.pins |= Pins::SETSEED;
        }
        // The transaction's own parameters last until its end, as with LOCAL (outside a
        // block: the SET's own implicit transaction).
        let local = local || transaction_parameter(name.as_bytes());
        if name == "search_path" && names_pg_temp(cur) {
            // Also with LOCAL: what it creates outlives the transaction.
            st.pins |= Pins::TEMP_SEARCH_PATH;
        }
        st.set = Some(SetStmt { local, name, reset });
    }
    st
}

/// The parameters of the transaction itself (`SET TRANSACTION`'s, by their names): a `SET`
/// of one lasts until the transaction ends, as `SET LOCAL` does.
pub(super) fn transaction_parameter(name: &[u8]) -> bool {
    [
        &b"transaction_isolation"[..],
        b"transaction_read_only",
        b"transaction_deferrable",
    ]
    .iter()
    .any(|p| name.eq_ignore_ascii_case(p))
}

/// True if the rest of the statement (a `search_path` value) names the `pg_temp` schema.
fn names_pg_temp(cur: &mut Cursor<'_>) -> bool {
    const PG_TEMP: &[u8] = b"pg_temp";
    let src = cur.src;
    let mut found = false;
    while let Some(t) = cur.next() {
        found |= crate::find_ignore_case(t.text(src), PG_TEMP).is_some();
    }
    found
}

/// `SET [LOCAL] SESSION AUTHORIZATION ...` or `SET SESSION CHARACTERISTICS AS TRANSACTION ...`,
/// after `SESSION`. With `LOCAL` the setting ends with the transaction: no pin.
fn session_setting(cur: &mut Cursor<'_>, local: bool, mut st: Stmt) -> Stmt {
    if cur.eat(Kw::Authorization) {
        let reset = cur.peek_is(Kw::Default);
        return authorization(st, local, reset);
    }
    if cur.eat(Kw::Characteristics) && !local {
        st.pins |= Pins::SESSION_CHARACTERISTICS;
    }
    st
}

fn authorization(mut st: Stmt, local: bool, reset: bool) -> Stmt {
    if reset {
        if !local {
            st.unpins |= Unpins::RESET_SESSION_AUTHORIZATION;
        }
    } else if !local {
        st.pins |= Pins::SESSION_AUTHORIZATION;
    }
    st
}

/// `RESET name`, `RESET ALL`, `RESET TIME ZONE`, `RESET SESSION AUTHORIZATION`,
/// `RESET TRANSACTION ISOLATION LEVEL`.
pub(super) fn reset(cur: &mut Cursor<'_>) -> Stmt {
    let mut st = Stmt::new(PgCommand::Reset, Route::Write);
    if cur.peek_is(Kw::Session) {
        cur.next();
        if cur.eat(Kw::Authorization) {
            st.unpins |= Unpins::RESET_SESSION_AUTHORIZATION;
        }
        return st;
    }
    let name = if cur.eat(Kw::Transaction) {
        Some("transaction_isolation".to_owned())
    } else {
        cur.next()
            .and_then(|h| parameter(cur, h))
            .map(|(name, _)| name)
    };
    match name {
        Some(n) if n == "session_authorization" => authorization(st, false, true),
        Some(name) => {
            st.set = Some(SetStmt {
                local: transaction_parameter(name.as_bytes()),
                name,
                reset: true,
            });
            st
        }
        None => st,
    }
}

/// A parameter name starting at `h` and, for `SET`, whether the value is `DEFAULT`. Consumes
/// the `TO` or `=` after the name.
fn parameter(cur: &mut Cursor<'_>, h: Token) -> Option<(String, bool)> {
    let src = cur.src;
    let mut name = String::new();
    push_ident(&mut name, src, &h)?;
    let mut parts = 1;
    while cur.peek_punct(b'.') {
        cur.next();
        name.push('.');
        push_ident(&mut name, src, &cur.next()?)?;
        parts += 1;
    }
    let assign = cur.eat(Kw::To) || (cur.peek_punct(b'=') && cur.next().is_some());
    if !assign && parts == 1 && h.kind == Kind::Word {
        let special = if h.is(Kw::Time) && cur.eat(Kw::Zone) {
            Some("timezone")
        } else if h.is(Kw::Names) {
            Some("client_encoding")
        } else if h.is(Kw::Schema) {
            Some("search_path")
        } else if h.is(Kw::Xml) && cur.eat(Kw::Option) {
            Some("xmloption")
        } else {
            None
        };
        if let Some(s) = special {
            s.clone_into(&mut name);
        }
    }
    // Parameter names are case-insensitive, quoted ones too (`SET "DateStyle"` is datestyle).
    name.make_ascii_lowercase();
    // The old names PostgreSQL still takes for two parameters (its `map_old_guc_names`): one
    // setting, whichever name set it last.
    match name.as_str() {
        "sort_mem" => "work_mem".clone_into(&mut name),
        "vacuum_mem" => "maintenance_work_mem".clone_into(&mut name),
        _ => {}
    }
    let reset =
        cur.peek_is(Kw::Default) || (name == "timezone" && !assign && cur.peek_is(Kw::Local));
    Some((name, reset))
}

/// Appends an identifier as PostgreSQL names it: unquoted words fold to lower case, quoted
/// ones keep their case with `""` undoubled.
fn push_ident(out: &mut String, src: &[u8], t: &Token) -> Option<()> {
    let text = t.text(src);
    match t.kind {
        Kind::Word => out.push_str(&String::from_utf8_lossy(text).to_ascii_lowercase()),
        Kind::QuotedIdent => match unquote(text) {
            Some(inner) => out.push_str(&String::from_utf8_lossy(inner)),
            None => {
                let inner = text.strip_prefix(b"\"")?;
                let inner = inner.strip_suffix(b"\"").unwrap_or(inner);
                out.push_str(&String::from_utf8_lossy(inner).replace("\"\"", "\""));
            }
        },
        _ => return None,
    }
    Some(())
}

/// What an `EXECUTE` of a statement `PREPARE name [(types)] AS body` prepares may make: the
/// body's pins, taken at the `PREPARE` (sluice does not follow what an `EXECUTE` runs, and a
/// `DEALLOCATE ALL` must not release the state an `EXECUTE` made). What its `set_config`
/// calls set cannot be read back then: they pin as calls whose names cannot be read. What
/// the body would release is not taken: it has not run.
fn prepared_body_pins(cur: &mut Cursor<'_>) -> Pins {
    let mut depth = 0u32;
    while let Some(t) = cur.next() {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ if depth == 0 && t.is(Kw::As) => break,
            _ => {}
        }
    }
    let body = super::walk::rest_of(cur, Stmt::new(PgCommand::Other, Route::Write)).pins;
    match body.contains(Pins::SET_CONFIG_READ) {
        true => Pins(body.0 & !Pins::SET_CONFIG_READ.0) | Pins::SET_CONFIG,
        false => body,
    }
}

/// The session statements and everything not recognised (a write).
pub(super) fn session(cur: &mut Cursor<'_>, first: Token) -> Stmt {
    use PgCommand as C;
    let w = |kw: Kw| first.is(kw);
    let mut st = Stmt::new(C::Other, Route::Write);
    if w(Kw::Discard) {
        let all = cur.eat(Kw::All);
        if all {
            st.unpins |= Unpins::DISCARD_ALL;
        } else if cur.eat(Kw::Temp) || cur.eat(Kw::Temporary) {
            st.unpins |= Unpins::DISCARD_TEMP;
        }
        st.command = C::Discard { all };
    } else if w(Kw::Deallocate) {
        cur.eat(Kw::Prepare);
        let all = cur.eat(Kw::All);
        if all {
            st.unpins |= Unpins::DEALLOCATE_ALL;
        }
        st.command = C::Deallocate { all };
    } else if w(Kw::Prepare) {
        // PREPARE TRANSACTION 'gid' is two-phase commit; nothing of a prepared statement runs.
        let two_phase = cur.eat(Kw::Transaction) && cur.peek().is_some_and(|t| t.kind == Kind::Str);
        if two_phase {
            st.command = C::PrepareTransaction;
        } else {
            st.command = C::Prepare;
            st.pins |= Pins::PREPARE;
            st.pins |= prepared_body_pins(cur);
        }
        return st;
    } else if w(Kw::Execute) {
        st.command = C::Execute;
    } else if w(Kw::Listen) {
        st.command = C::Listen;
        st.pins |= Pins::LISTEN;
    } else if w(Kw::Unlisten) {
        st.command = C::Unlisten;
        if cur.peek_punct(b'*') {
            st.unpins |= Unpins::UNLISTEN_ALL;
        }
    } else if w(Kw::Notify) {
        st.command = C::Notify;
    } else if w(Kw::Call) {
        st.command = C::Call;
    } else if w(Kw::Do) {
        st.command = C::Do;
    } else if w(Kw::Declare) {
        while let Some(t) = cur.next() {
            if t.is(Kw::For) {
                return rest_as_query(cur, st);
            }
            if t.is(Kw::With) && cur.peek_is(Kw::Hold) {
                st.pins |= Pins::WITH_HOLD;
            }
        }
    } else if w(Kw::Close) {
        if cur.eat(Kw::All) {
            st.unpins |= Unpins::CLOSE_ALL;
        }
    } else if w(Kw::Load) {
        st.pins |= Pins::LOAD;
    }
    rest_of(cur, st)
}
