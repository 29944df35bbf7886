//! The settings a client's startup packet asks for, as statements: the `options` parameter
//! read as PostgreSQL reads it, each setting turned into the `set_config` that makes it
//! (what a session's settings start from, see [`super::state::Settings`]), and the quoting
//! those statements use.

/// The settings in a startup packet's `options` (libpq's `options`, `PGOPTIONS`):
/// `-c name=value`, `-cname=value` and `--name=value`, split as PostgreSQL splits them (on
/// white space; a backslash takes the next character as it is; a `-` in a name is a `_`).
/// Anything else there (the server's other command-line switches) is an error naming it:
/// sluice would otherwise drop it silently.
pub fn startup_options(options: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut escaped = false;
    for c in options.chars() {
        if escaped {
            word.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c.is_ascii_whitespace() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let setting = if w == "-c" {
            words.next()
        } else {
            w.strip_prefix("-c")
                .or_else(|| w.strip_prefix("--"))
                .map(str::to_string)
        };
        let parsed = setting.as_deref().and_then(|s| s.split_once('='));
        let Some((name, value)) = parsed.filter(|(name, _)| !name.is_empty()) else {
            let shown = match setting {
                Some(s) if w == "-c" => format!("-c {s}"),
                _ => w,
            };
            return Err(format!(
                "sluice: startup option \"{shown}\" is not supported in \"options\" (only -c name=value and --name=value)"
            ));
        };
        settings.push((name.replace('-', "_"), value.to_string()));
    }
    Ok(settings)
}

/// Startup parameters (name, value) as settings keep them: lower-case name → the statement
/// setting it, sorted by name.
pub(super) fn startup_statements<'a>(
    params: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<(Box<str>, Box<str>)> {
    // A DateStyle of one part (`ISO`, as PgJDBC sends it) keeps the other from the value in
    // force: on a login, the server's default, or the part an earlier DateStyle of the
    // packet set (`options` first: `-c DateStyle=DMY`, then `DateStyle=ISO` is `ISO, DMY`);
    // on a pooled connection, whatever another session left. So the statement resets it
    // first, as a login starts from the default, then sets each of the packet's in order.
    let mut datestyle: Option<String> = None;
    let mut startup: Vec<(Box<str>, Box<str>)> = params
        .filter_map(|(n, v)| {
            let name = n.to_ascii_lowercase();
            if name == "datestyle" {
                let stmt = datestyle.get_or_insert_with(|| RESET_DATESTYLE.to_string());
                if !stmt.ends_with(';') {
                    stmt.push(';');
                }
                stmt.push_str(&set_config(n, v));
                return None;
            }
            Some((name.into(), set_config(n, v).into()))
        })
        .collect();
    if let Some(stmt) = datestyle {
        startup.push(("datestyle".into(), stmt.into()));
    }
    // A name given twice takes its last value, as PostgreSQL applies the packet's options in
    // order: reversed, the stable sort puts the last one first, and dedup keeps the first.
    startup.reverse();
    startup.sort_by(|a, b| a.0.cmp(&b.0));
    startup.dedup_by(|a, b| a.0 == b.0);
    startup
}

/// What a startup `DateStyle`'s statement starts with (see [`startup_statements`]).
const RESET_DATESTYLE: &str = "RESET datestyle;";

/// The statements of a startup parameter's statement ([`startup_statements`]: its literals
/// are `'…'` with `''` for a quote), one by one.
pub(super) fn one_by_one(stmt: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    stmt.split(move |c| {
        if c == '\'' {
            quoted = !quoted;
        }
        c == ';' && !quoted
    })
}

/// `SELECT set_config(...)`: sets a parameter from a startup-packet value (parsed as the
/// server parses it there, so that `search_path = 'a, b'` is two schemas). Built at its exact
/// size (it is kept as it is).
pub(super) fn set_config(name: &str, value: &str) -> String {
    const HEAD: &str = "SELECT pg_catalog.set_config(";
    const TAIL: &str = ", false)";
    let quoted = |s: &str| s.len() + 2 + s.bytes().filter(|&b| b == b'\'').count();
    let mut sql = String::with_capacity(HEAD.len() + quoted(name) + 2 + quoted(value) + TAIL.len());
    sql.push_str(HEAD);
    push_literal(&mut sql, name);
    sql.push_str(", ");
    push_literal(&mut sql, value);
    sql.push_str(TAIL);
    sql
}

/// The value a statement of [`set_config`] sets `name` to (`None`: not such a statement).
pub(super) fn set_config_value(stmt: &str, name: &str) -> Option<String> {
    let mut head = String::from("SELECT pg_catalog.set_config(");
    push_literal(&mut head, name);
    head.push_str(", ");
    let literal = stmt.strip_prefix(&head)?.strip_suffix(", false)")?;
    let (escape, literal) = match literal.strip_prefix('E') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let inner = literal.strip_prefix('\'')?.strip_suffix('\'')?;
    // (A name without quotes, nearly every one, is copied as it is: no search for pairs.)
    let value = match inner.contains('\'') {
        true => inner.replace("''", "'"),
        false => inner.to_string(),
    };
    Some(match escape {
        true => value.replace("\\\\", "\\"),
        false => value,
    })
}

/// Appends `s` as a string literal (see [`quote_literal`]).
fn push_literal(out: &mut String, s: &str) {
    // With a backslash, an escape string: `'C:\dir\'` means something else (or does not
    // end) where standard_conforming_strings is off; `E'…'` reads alike either way.
    let escape = s.contains('\\');
    if escape {
        out.push('E');
    }
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' if escape => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// A string literal (`'…'`, or `E'…'` for a text with a backslash).
pub fn quote_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    push_literal(&mut out, s);
    out
}

/// An identifier, quoted when it is not a plain lower-case name.
pub fn quote_ident(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
        && !s.as_bytes()[0].is_ascii_digit();
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::{one_by_one, startup_statements};

    #[test]
    fn a_packets_datestyles_are_set_in_order_after_a_reset() {
        let params = [
            ("DateStyle", "DMY"),
            ("application_name", "a;b'c;"),
            ("datestyle", "ISO"),
            ("application_name", "x"),
        ];
        let s = startup_statements(params.into_iter());
        let names: Vec<&str> = s.iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["application_name", "datestyle"]);
        assert_eq!(
            &*s[1].1,
            "RESET datestyle;SELECT pg_catalog.set_config('DateStyle', 'DMY', false);\
             SELECT pg_catalog.set_config('datestyle', 'ISO', false)"
        );
        assert_eq!(
            one_by_one(&s[1].1).collect::<Vec<_>>(),
            [
                "RESET datestyle",
                "SELECT pg_catalog.set_config('DateStyle', 'DMY', false)",
                "SELECT pg_catalog.set_config('datestyle', 'ISO', false)"
            ]
        );
        // The last value of another name, its literal whole.
        assert_eq!(
            &*s[0].1,
            "SELECT pg_catalog.set_config('application_name', 'x', false)"
        );
        let quoted = startup_statements([("application_name", "a;b'c;")].into_iter());
        assert_eq!(one_by_one(&quoted[0].1).count(), 1);
    }

    #[test]
    fn a_value_with_a_backslash_is_an_escape_string_read_back_whole() {
        let stmt = super::set_config("application_name", "C:\\dir\\ it's;");
        assert_eq!(
            stmt,
            "SELECT pg_catalog.set_config('application_name', E'C:\\\\dir\\\\ it''s;', false)"
        );
        assert_eq!(one_by_one(&stmt).count(), 1);
        assert_eq!(
            super::set_config_value(&stmt, "application_name").as_deref(),
            Some("C:\\dir\\ it's;")
        );
        assert_eq!(super::quote_literal("a'b"), "'a''b'");
        assert_eq!(super::quote_literal("a\\b"), "E'a\\\\b'");
    }
}
