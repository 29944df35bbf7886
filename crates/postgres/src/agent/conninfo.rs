//! libpq connection strings (`key=value ...`, values optionally single-quoted with
//! backslash escapes), as a standby's `primary_conninfo` holds them: read, and rewritten to
//! point at another server while keeping everything else (user, password file, TLS
//! settings, `application_name`).

/// The `key=value` pairs of a connection string, in order; `None` if it is not one (a URI,
/// or malformed).
pub fn parse(s: &str) -> Option<Vec<(String, String)>> {
    if s.trim_start().starts_with("postgres") && s.contains("://") {
        return None;
    }
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') || key.is_empty() {
            return None;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => value.push(chars.next()?),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    value.push(chars.next()?);
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// Pairs back into a connection string, every value quoted.
pub fn render(pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(k);
        out.push_str("='");
        for c in v.chars() {
            if c == '\'' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('\'');
    }
    out
}

/// `conninfo` pointing at `host`:`port` instead (any `host`, `hostaddr` and `port` it had
/// are replaced); `None` if it cannot be read.
pub fn repoint(conninfo: &str, host: &str, port: &str) -> Option<String> {
    let mut pairs = parse(conninfo)?;
    pairs.retain(|(k, _)| !matches!(k.as_str(), "host" | "hostaddr" | "port"));
    pairs.push(("host".into(), host.into()));
    pairs.push(("port".into(), port.into()));
    Some(render(&pairs))
}

/// The `application_name` a standby streams under, from its WAL receiver's connection
/// string (`application_name`, else `fallback_application_name`, which PostgreSQL sets to
/// `cluster_name` or `walreceiver`).
pub fn application_name(conninfo: &str) -> String {
    let pairs = parse(conninfo).unwrap_or_default();
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    get("application_name")
        .or_else(|| get("fallback_application_name"))
        .unwrap_or_default()
}

/// A string as an SQL literal (standard conforming strings).
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_backup_conninfo_is_repointed_keeping_the_rest() {
        let s = "user=postgres passfile='/var/lib/postgresql/.pgpass' channel_binding=prefer host=127.0.0.1 port=5432 sslmode=prefer";
        let r = repoint(s, "10.0.0.2", "5433").unwrap();
        assert_eq!(
            r,
            "user='postgres' passfile='/var/lib/postgresql/.pgpass' channel_binding='prefer' sslmode='prefer' host='10.0.0.2' port='5433'"
        );
        assert_eq!(parse(&r).unwrap().len(), 6);
    }

    #[test]
    fn quotes_escapes_and_spaces_round_trip() {
        let s = r"password = 'it\'s a \\ secret'  application_name=a\ b host=x";
        let p = parse(s).unwrap();
        assert_eq!(p[0], ("password".into(), r"it's a \ secret".into()));
        assert_eq!(p[1], ("application_name".into(), "a b".into()));
        assert_eq!(parse(&render(&p)).unwrap(), p);
    }

    #[test]
    fn malformed_strings_and_uris_are_refused() {
        assert!(parse("host").is_none());
        assert!(parse("host='unterminated").is_none());
        assert!(parse("postgresql://u@h:5432/db").is_none());
        assert_eq!(parse("").unwrap(), vec![]);
    }

    #[test]
    fn the_streaming_name_prefers_application_name() {
        assert_eq!(
            application_name("user=a fallback_application_name=walreceiver"),
            "walreceiver"
        );
        assert_eq!(
            application_name("application_name=s1 fallback_application_name=walreceiver"),
            "s1"
        );
        assert_eq!(application_name(""), "");
    }

    #[test]
    fn literals_double_quotes() {
        assert_eq!(literal("a'b"), "'a''b'");
    }
}
