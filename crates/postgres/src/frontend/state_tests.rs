//! Unit tests of `state.rs`: settings, their differences, startup options, pins.

use super::*;
use crate::frontend::startup::set_config;

#[test]
fn startup_values_are_set_as_quoted_literals() {
    for (name, value) in [
        ("application_name", "app"),
        ("x'y", "it's ''a'' test"),
        ("", ""),
    ] {
        assert_eq!(
            set_config(name, value),
            format!(
                "SELECT pg_catalog.set_config({}, {}, false)",
                quote_literal(name),
                quote_literal(value)
            )
        );
    }
    let s = Settings::from_startup(
        [("DateStyle", "ISO"), ("application_name", "a'b")].into_iter(),
        &Interner::new(4),
    );
    assert_eq!(
        s.statement("application_name"),
        Some("SELECT pg_catalog.set_config('application_name', 'a''b', false)")
    );
    assert!(s.statement("datestyle").is_some());
    // From the packet: the same, and shared with the packets alike.
    let interner = Interner::new(4);
    let params = [("application_name", "a'b"), ("DateStyle", "ISO")];
    let from = |packet: &[u8]| {
        Settings::from_startup_packet(packet, params.into_iter(), &interner).startup
    };
    let (a, b) = (from(b"p1"), from(b"p1"));
    assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&a, &from(b"p2")));
    assert_eq!(*a, *s.startup);
}

#[test]
fn what_routing_must_know_is_read_from_sets_and_startup_values() {
    for (stmt, value) in [
        ("SET standard_conforming_strings = off", Some(false)),
        ("set standard_conforming_strings to 'ON'", Some(true)),
        (
            "SELECT pg_catalog.set_config('standard_conforming_strings', 'off', false)",
            Some(false),
        ),
        ("SET standard_conforming_strings = maybe", None),
        ("SET \"standard_conforming_strings\" TO\tof", Some(false)),
        ("SET standard_conforming_strings = 'f'", Some(false)),
        ("SET standard_conforming_strings = o", None),
        ("SET standard_conforming_strings = E'off';", Some(false)),
        ("SET standard_conforming_strings = $$off$$", Some(false)),
    ] {
        assert_eq!(boolean_set(stmt, CONFORMING_STRINGS), value, "{stmt}");
    }
    let started =
        |params: &[(&str, &str)]| Settings::from_startup(params.iter().copied(), &Interner::new(4));
    let s = started(&[("standard_conforming_strings", "off")]);
    assert!(s.backslash_quotes() && !s.serializable_by_default());
    let mut s = started(&[("default_transaction_isolation", "serializable")]);
    assert!(s.serializable_by_default() && !s.backslash_quotes());
    s.apply(Change::Set(
        "default_transaction_isolation".into(),
        "SET default_transaction_isolation = 'read committed'".into(),
    ));
    assert!(!s.serializable_by_default());
    s.apply(Change::Set(
        CONFORMING_STRINGS.into(),
        "SET standard_conforming_strings = off".into(),
    ));
    assert!(s.backslash_quotes());
    s.apply(Change::DiscardAll);
    assert!(s.serializable_by_default() && !s.backslash_quotes());
    // One snapshot per transaction: repeatable read or serializable.
    assert!(s.one_snapshot_by_default());
    s.apply(Change::Set(
        "default_transaction_isolation".into(),
        "SET default_transaction_isolation TO 'REPEATABLE READ'".into(),
    ));
    assert!(s.one_snapshot_by_default() && !s.serializable_by_default());
    s.apply(Change::Set(
        "default_transaction_isolation".into(),
        "SET default_transaction_isolation = 'read committed'".into(),
    ));
    assert!(!s.one_snapshot_by_default());
}

#[test]
fn a_startup_parameter_given_twice_takes_its_last_value() {
    let s = Settings::from_startup(
        [
            ("application_name", "first"),
            ("DateStyle", "ISO"),
            ("application_name", "second"),
        ]
        .into_iter(),
        &Interner::new(4),
    );
    let names: Vec<&str> = s.startup.iter().map(|(n, _)| &**n).collect();
    assert_eq!(names, ["application_name", "datestyle"]);
    assert!(s.startup[0].1.contains("'second'"), "{}", s.startup[0].1);
}

#[test]
fn startup_options_are_read_as_postgres_reads_them() {
    let o =
        startup_options(r"-c statement_timeout=5s  --search-path=a,\ b -cwork_mem=64MB").unwrap();
    assert_eq!(
        o,
        [
            ("statement_timeout".to_string(), "5s".to_string()),
            ("search_path".to_string(), "a, b".to_string()),
            ("work_mem".to_string(), "64MB".to_string()),
        ]
    );
    assert_eq!(startup_options("  ").unwrap(), []);
    for bad in ["-B 100", "-c", "-c nothing", "--=x", "-e"] {
        let e = startup_options(bad).unwrap_err();
        assert!(e.contains("is not supported"), "{bad}: {e}");
    }
}

#[test]
fn settings_move_as_differences() {
    let mut s =
        Settings::from_startup([("application_name", "app")].into_iter(), &Interner::new(4));
    let conn = BTreeMap::new();
    let first = difference(&conn, &s.desired()).unwrap();
    assert_eq!(
        first,
        "SELECT pg_catalog.set_config('application_name', 'app', false)\n;"
    );
    let synced = s.desired();
    s.apply(Change::Set("timezone".into(), "SET TIME ZONE 'UTC'".into()));
    assert_eq!(
        difference(&synced, &s.desired()).unwrap(),
        "SET TIME ZONE 'UTC'\n;"
    );
    let synced = s.desired();
    s.apply(Change::Reset("timezone".into()));
    assert_eq!(
        difference(&synced, &s.desired()).unwrap(),
        "RESET timezone;"
    );
    // A custom setting is reset only if the server still has it (an extension that reserved
    // its prefix since removed it, and a RESET would fail).
    let before = s.desired();
    s.apply(Change::Set("my.x".into(), "SET my.x = 'v'".into()));
    let with_custom = s.desired();
    s.apply(Change::Reset("my.x".into()));
    assert_eq!(
        difference(&with_custom, &s.desired()).unwrap(),
        "SELECT pg_catalog.set_config('my.x', NULL, false) \
         WHERE pg_catalog.current_setting('my.x', true) IS NOT NULL;"
    );
    assert!(difference(&before, &s.desired()).is_none());
    // RESET of a startup parameter returns to its startup value.
    s.apply(Change::Set(
        "application_name".into(),
        "SET application_name = x".into(),
    ));
    assert!(s.take_startup_resets().is_empty());
    s.apply(Change::Reset("application_name".into()));
    assert_eq!(
        difference(&synced, &s.desired()).unwrap(),
        "RESET timezone;"
    );
    // On the server it went to the server's default: it is set again there.
    assert_eq!(s.take_startup_resets(), [Box::from("application_name")]);
    assert!(s.take_startup_resets().is_empty());
    // A SET ending in a comment ends its line: what follows is not commented out.
    let mut t = Settings::default();
    t.apply(Change::Set("a".into(), "SET a = 1 -- why".into()));
    t.apply(Change::Set("b".into(), "SET b = 2".into()));
    assert_eq!(
        difference(&BTreeMap::new(), &t.desired()).unwrap(),
        "SET a = 1 -- why\n;SET b = 2\n;"
    );
    // RESET ALL keeps the role (as PostgreSQL does); DISCARD ALL drops it.
    t.apply(Change::Set("role".into(), "SET ROLE r1".into()));
    t.apply(Change::ResetAll);
    assert_eq!(t.desired().keys().collect::<Vec<_>>(), ["role"]);
    t.apply(Change::DiscardAll);
    assert!(t.desired().is_empty());
    assert!(difference(&s.desired(), &s.desired()).is_none());
    assert!(s.matches(&s.desired()));
    assert!(!s.matches(&BTreeMap::new()) || s.desired().is_empty());
}

#[test]
fn a_transaction_blocks_changes_apply_only_if_it_commits() {
    let mut s = Settings::default();
    s.defer(Change::Set(
        "search_path".into(),
        "SET search_path = a".into(),
    ));
    s.end_transaction(false);
    assert!(s.desired().is_empty());
    s.defer(Change::Set(
        "search_path".into(),
        "SET search_path = a".into(),
    ));
    let g = s.generation();
    s.end_transaction(true);
    assert!(s.generation() > g);
    assert_eq!(s.desired().len(), 1);
    s.apply(Change::ResetAll);
    assert!(s.desired().is_empty());
}

#[test]
fn a_reset_in_a_block_sets_startup_values_again_unless_a_later_set_wins() {
    let mut s = Settings::from_startup(
        [("DateStyle", "SQL, MDY"), ("TimeZone", "UTC")].into_iter(),
        &Interner::new(4),
    );
    let set = |n: &str| Change::Set(n.into(), format!("SET {n} = x"));
    // Not a startup parameter: nothing to set again.
    s.defer(Change::Reset("search_path".into()));
    assert_eq!(s.take_block_resets(), None);
    s.defer(Change::Reset("datestyle".into()));
    assert_eq!(
        s.take_block_resets().map(|v| v.join(";")).as_deref(),
        Some("RESET datestyle;SELECT pg_catalog.set_config('DateStyle', 'SQL, MDY', false)")
    );
    assert_eq!(s.take_block_resets(), None, "once");
    s.defer(Change::ResetAll);
    s.defer(set("timezone"));
    assert_eq!(
        s.take_block_resets().map(|v| v.join(";")).as_deref(),
        Some("RESET datestyle;SELECT pg_catalog.set_config('DateStyle', 'SQL, MDY', false)")
    );
    // The block ended before another statement: nothing is owed.
    s.defer(Change::Reset("timezone".into()));
    s.end_transaction(false);
    assert_eq!(s.take_block_resets(), None);
}

#[test]
fn a_set_local_after_a_reset_wins_for_its_block_and_a_chain_owes_the_reset() {
    let mut s = Settings::from_startup([("DateStyle", "SQL, MDY")].into_iter(), &Interner::new(4));
    let local = || Change::SetLocal("datestyle".into(), "SET LOCAL datestyle = x".into());
    // Outside a block a SET LOCAL does nothing.
    let g = s.generation();
    s.apply(local());
    assert_eq!(s.generation(), g);
    s.defer(Change::Reset("datestyle".into()));
    s.defer(local());
    assert_eq!(s.take_block_resets(), None);
    assert_eq!(
        s.block.as_ref().map_or(0, |b| b.pending.len()),
        1,
        "the RESET, not the SET LOCAL, waits for the block"
    );
    s.end_transaction(true);
    assert!(
        !s.take_startup_resets().is_empty(),
        "the committed RESET is set again after the block"
    );
    // COMMIT AND CHAIN of a text with the RESET: owed in the chained block.
    s.defer(Change::Reset("datestyle".into()));
    s.chain_transaction(true);
    assert_eq!(
        s.take_block_resets().map(|v| v.join(";")).as_deref(),
        Some("RESET datestyle;SELECT pg_catalog.set_config('DateStyle', 'SQL, MDY', false)")
    );
    assert!(!s.take_startup_resets().is_empty());
    // ROLLBACK AND CHAIN: the RESET is undone, nothing is owed.
    s.defer(Change::Reset("datestyle".into()));
    s.chain_transaction(false);
    assert_eq!(s.take_block_resets(), None);
    assert!(s.take_startup_resets().is_empty());
    // A SET LOCAL of standard_conforming_strings = off is read as the SET is.
    assert!(turns_conforming_strings_off(&Change::SetLocal(
        "standard_conforming_strings".into(),
        "SET LOCAL standard_conforming_strings = off".into()
    )));
}

#[test]
fn the_role_is_replayed_after_the_settings_made_before_it() {
    let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let (role_a, role_b) = (("role", "SET ROLE a"), ("role", "SET ROLE b"));
    let srr = (
        "session_replication_role",
        "SET session_replication_role = replica",
    );
    assert_eq!(
        difference(&map(&[]), &map(&[role_a, srr])).as_deref(),
        Some("SET session_replication_role = replica\n;SET ROLE a\n;")
    );
    // A connection with a role: back to the login user for the settings, then the role.
    assert_eq!(
        difference(&map(&[role_a]), &map(&[role_a, srr])).as_deref(),
        Some("RESET ROLE;SET session_replication_role = replica\n;SET ROLE a\n;")
    );
    assert_eq!(
        difference(&map(&[role_a, srr]), &map(&[])).as_deref(),
        Some("RESET ROLE;RESET session_replication_role;")
    );
    assert_eq!(
        difference(&map(&[role_a, srr]), &map(&[role_b, srr])).as_deref(),
        Some("SET ROLE b\n;")
    );
    assert_eq!(difference(&map(&[role_a, srr]), &map(&[role_a, srr])), None);
}

#[test]
fn pins_are_named() {
    assert_eq!(
        pin::labels(pin::LISTEN | pin::TEMP_TABLE),
        vec!["temporary table", "LISTEN"]
    );
    assert_eq!(quote_ident("search_path"), "search_path");
    assert_eq!(quote_ident("DateStyle"), "\"DateStyle\"");
}

#[test]
fn the_client_encoding_a_statement_sets_is_read_as_postgresql_names_it() {
    for (stmt, want) in [
        ("SET client_encoding = 'SJIS'", Some("sjis")),
        ("set client_encoding to Shift_JIS", Some("shiftjis")),
        ("SET \"client_encoding\" = E'WIN-932'", Some("win932")),
        ("SET NAMES 'big5'", Some("big5")),
        ("SET client_encoding = $$gbk$$", Some("gbk")),
        (&set_config("client_encoding", "GB18030"), Some("gb18030")),
        ("SET client_encoding = 'UTF8';", Some("utf8")),
        ("SET client_encoding = ''", None),
    ] {
        assert_eq!(encoding_set(stmt).as_deref(), want, "{stmt}");
    }
    let set = |stmt: &str| Change::Set(CLIENT_ENCODING.into(), stmt.into());
    assert!(blinds_scanner(&set("SET NAMES 'UHC'")));
    assert!(sets_unreadable_encoding(&Change::SetLocal(
        CLIENT_ENCODING.into(),
        "SET LOCAL client_encoding = johab".into()
    )));
    assert!(!blinds_scanner(&set("SET client_encoding = 'LATIN1'")));
    assert!(!blinds_scanner(&set("SET client_encoding = 'EUC_JP'")));
    // At startup, and after a SET: the settings in force say so (until DISCARD ALL).
    let interner = Interner::new(8);
    let mut s = Settings::from_startup([("client_encoding", "SJIS")].into_iter(), &interner);
    assert_eq!(s.blind_pins(), pin::UNREADABLE_ENCODING);
    s.apply(set("SET client_encoding = 'UTF8'"));
    assert_eq!(s.blind_pins(), 0);
    s.apply(set("SET client_encoding = 'BIG5'"));
    assert_eq!(s.blind_pins(), pin::UNREADABLE_ENCODING);
}

#[test]
fn a_datestyle_set_is_kept_as_the_server_reports_it() {
    let reported: BTreeMap<String, String> =
        [("DateStyle".to_string(), "ISO, DMY".to_string())].into();
    let interner = Interner::new(8);
    let mut s = Settings::from_startup(std::iter::empty(), &interner);
    // Made by no SET: nothing to keep.
    s.settle_datestyle(&reported);
    assert_eq!(s.statement("datestyle"), None);
    s.apply(Change::Set(
        "datestyle".into(),
        "SET datestyle = 'iso'".into(),
    ));
    let generation = s.generation();
    s.settle_datestyle(&reported);
    assert_eq!(s.statement("datestyle"), Some("SET DateStyle = 'ISO, DMY'"));
    assert!(s.generation() > generation);
    let generation = s.generation();
    s.settle_datestyle(&reported);
    assert_eq!(s.generation(), generation);
}

#[test]
fn what_the_client_was_told_is_kept_where_a_connection_reports_otherwise() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let told = map(&[
        ("TimeZone", "UTC"),
        ("DateStyle", "ISO, MDY"),
        ("standard_conforming_strings", "on"),
        ("application_name", "a"),
        ("server_version", "15.18"),
    ]);
    let conn = map(&[
        ("TimeZone", "Asia/Tokyo"),
        ("DateStyle", "ISO, MDY"),
        ("standard_conforming_strings", "off"),
        ("application_name", "b"),
        ("server_version", "15.19"),
    ]);
    let interner = Interner::new(8);
    let mut s = Settings::from_startup(std::iter::empty(), &interner);
    // Only the kept parameters that differ; the others are the connection's to report.
    let kept = kept_reports(&told, &conn, &s);
    let names: Vec<&str> = kept
        .iter()
        .map(|c| match c {
            Change::Set(n, _) => n.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(names, ["timezone", "standard_conforming_strings"]);
    kept.into_iter().for_each(|c| s.apply(c));
    assert_eq!(
        s.statement("timezone"),
        Some("SELECT pg_catalog.set_config('TimeZone', 'UTC', false)")
    );
    assert_eq!(s.blind_pins(), 0);
    // Made the session's own, they are not added again.
    assert!(kept_reports(&told, &conn, &s).is_empty());
    // A value told that blinds the scanner counts as set; one that does not, not.
    let fresh = Settings::from_startup(std::iter::empty(), &interner);
    let off = map(&[
        ("standard_conforming_strings", "off"),
        ("client_encoding", "UTF8"),
    ]);
    let mut blind = Settings::from_startup(std::iter::empty(), &interner);
    blind_reports(&off, &fresh)
        .into_iter()
        .for_each(|c| blind.apply(c));
    assert_eq!(blind.blind_pins(), pin::BACKSLASH_QUOTES);
    let sjis = map(&[("client_encoding", "SJIS")]);
    assert_eq!(blind_reports(&sjis, &fresh).len(), 1);
    assert!(blind_reports(&told, &fresh).is_empty());
}

/// The settings a session makes are bounded: names beyond MAX_MADE, or bytes beyond
/// MAX_MADE_BYTES, are refused before they run; a SET of a name already made replaces it
/// outside a block (no new name), while inside one each change waits as an entry; RESET
/// ALL and DISCARD ALL start the count again, and SET LOCAL keeps nothing.
#[test]
fn the_settings_a_session_makes_are_bounded() {
    let set = |n: usize| Change::Set(format!("x.k{n}"), format!("SET x.k{n} = '{n}'"));
    let mut s = Settings::default();
    for n in 0..MAX_MADE {
        assert_eq!(s.over_bounds([set(n)].iter(), false), None, "{n}");
        s.apply(set(n));
    }
    assert!(s
        .over_bounds([set(MAX_MADE)].iter(), false)
        .is_some_and(|m| m.contains("at most 1000 settings")));
    // A name already made is replaced; RESET ALL or DISCARD ALL first makes room; SET
    // LOCAL keeps nothing.
    assert_eq!(s.over_bounds([set(7)].iter(), false), None);
    assert_eq!(
        s.over_bounds([Change::ResetAll, set(MAX_MADE)].iter(), false),
        None
    );
    assert_eq!(
        s.over_bounds([Change::DiscardAll, set(MAX_MADE)].iter(), false),
        None
    );
    let local = Change::SetLocal("x.l".into(), "SET LOCAL x.l = '1'".into());
    assert_eq!(s.over_bounds([local].iter(), true), None);
    // Inside a block, even a name already made is an entry of its own until the block ends.
    assert!(s.over_bounds([set(7)].iter(), true).is_some());
    // Bytes: one statement past the bound.
    let big = Change::Set(
        "x.big".into(),
        format!("SET x.big = '{}'", "v".repeat(MAX_MADE_BYTES)),
    );
    assert!(Settings::default()
        .over_bounds([big].iter(), false)
        .is_some());
}

#[test]
fn a_units_resets_of_startup_values_are_followed_statement_by_statement() {
    let s = Settings::from_startup(
        [
            ("application_name", "app"),
            ("DateStyle", "German"),
            ("TimeZone", "UTC"),
        ]
        .into_iter(),
        &Interner::new(4),
    );
    let mut r = s.unit_resets(false);
    assert_eq!(r.in_force(|| false), None);
    // Not a startup parameter: nothing to return to but the server's default.
    r.apply(&Change::Reset("work_mem".into()));
    r.apply(&Change::Reset("datestyle".into()));
    assert_eq!(r.in_force(|| false), Some("datestyle"));
    r.apply(&Change::Set(
        "datestyle".into(),
        "SET DateStyle = ISO".into(),
    ));
    assert_eq!(r.in_force(|| false), None);
    r.apply(&Change::ResetAll);
    assert_eq!(r.in_force(|| false), Some("datestyle"));
    r.apply(&Change::SetLocal(
        "datestyle".into(),
        "SET LOCAL DateStyle = ISO".into(),
    ));
    assert_eq!(r.in_force(|| false), Some("timezone"));
    r.apply(&Change::Set("timezone".into(), "SET TimeZone = UTC".into()));
    assert_eq!(r.in_force(|| false), None);
    // application_name is read only by name: let stand before other statements.
    r.apply(&Change::Reset("application_name".into()));
    assert_eq!(r.in_force(|| false), None);
    assert_eq!(r.in_force(|| true), Some("application_name"));
    r.apply(&Change::DiscardAll);
    assert_eq!(r.in_force(|| false), Some("datestyle"));
}
