//! Unit tests of `statements.rs`: statement definitions, their copies on server connections,
//! result epochs.

use super::*;

fn def(sql: &str) -> Arc<StmtDef> {
    Arc::new(StmtDef::new(sql.as_bytes(), &[0, 0]))
}

#[test]
fn statements_are_held_up_to_the_limit_and_the_least_recently_used_goes() {
    let mut s = ServerStatements::new(2);
    let (a, b, c) = (def("select 1"), def("select 2"), def("select 3"));
    assert!(matches!(s.ensure(&a).1, Ensure::Prepare { evict: None }));
    assert!(matches!(s.ensure(&b).1, Ensure::Prepare { evict: None }));
    assert!(matches!(s.ensure(&a).1, Ensure::Held));
    assert!(matches!(s.ensure(&c).1, Ensure::Prepare { evict: Some((_, e)) } if e.clone().is(&b)));
    assert_eq!(s.len(), 2);
    s.forget(s.key(&c));
    assert_eq!(s.len(), 1);
    // A stale one is closed and prepared again under its name, then held.
    s.mark_stale(s.key(&a));
    assert!(matches!(s.ensure(&a).1, Ensure::Prepare { evict: Some((_, e)) } if e.clone().is(&a)));
    assert!(matches!(s.ensure(&a).1, Ensure::Held));
    assert_eq!(s.len(), 1);
}

/// Copies are shared by the types a statement's analysis fixed: before its first analysis a
/// statement has a copy of its own (analysed afresh, as a direct client's Parse is); after,
/// it shares the copies prepared with the same types, given explicitly, and never one with
/// other types; where it has its own copy still, that one.
#[test]
fn copies_are_shared_by_the_parameter_types_the_analysis_fixed() {
    let budget = sluice_core::MemoryBudget::new(1 << 20);
    let charged = |sql: &str| Arc::new(StmtDef::charged(sql.as_bytes(), &[0, 0], 0, 0, &budget));
    let text = "select $1";
    let (int4, int8) = (&[0, 1, 0, 0, 0, 23][..], &[0, 1, 0, 0, 0, 20][..]);
    let mut s = ServerStatements::new(8);
    let (a, b) = (charged(text), charged(text));
    let (a_own, _) = s.ensure(&a);
    assert!(
        matches!(s.ensure(&b), (k, Ensure::Prepare { .. }) if k != a_own),
        "not analysed yet: each its own copy"
    );
    a.resolve(int4);
    a.resolve(int8);
    assert_eq!(a.prepared_types(), int4, "the first analysis stays");
    assert!(
        matches!(s.ensure(&a), (k, Ensure::Held) if k == a_own),
        "its own copy still"
    );
    let mut parse = Vec::new();
    a.parse_message(s.key(&a), &mut parse);
    assert!(parse.ends_with(b"select $1\0\0\x01\0\0\0\x17"), "{parse:?}");
    // Elsewhere: the shared copy of the text with those types.
    let mut t = ServerStatements::new(8);
    let (shared, _) = t.ensure(&a);
    assert_ne!(shared, a_own);
    b.resolve(int4);
    assert!(matches!(t.ensure(&b), (k, Ensure::Held) if k == shared));
    let c = charged(text);
    c.resolve(int8);
    assert!(matches!(t.ensure(&c), (k, Ensure::Prepare { .. }) if k != shared));
    // A simple query's record is never prepared, and never resolved.
    let q = Arc::new(StmtDef::query(text.as_bytes()));
    q.resolve(int4);
    assert!(!q.is_resolved());
}

#[test]
fn a_connection_holds_no_text_and_no_charge_and_still_knows_its_statements() {
    let budget = sluice_core::MemoryBudget::new(20);
    let charged = |sql: &str| Arc::new(StmtDef::charged(sql.as_bytes(), &[0, 0], 0, 0, &budget));
    let mut s = ServerStatements::new(4);
    let a = charged("select 1");
    assert_eq!(budget.used(), 10);
    // The types its analysis fixed are charged as its own.
    a.resolve(&[0, 0]);
    assert_eq!(budget.used(), 12);
    assert!(
        charged("select 22").charge.is_err(),
        "12 + 11 bytes are over 20"
    );
    s.ensure(&a);
    drop(a);
    assert_eq!(budget.used(), 0, "the connection's copy holds no charge");
    let again = charged("select 1");
    again.resolve(&[0, 0]);
    assert!(
        matches!(s.ensure(&again).1, Ensure::Held),
        "known by its hashes"
    );
    let other = Arc::new(StmtDef::new(b"select 2", &[0, 0]));
    assert!(!Cached::of(&again).is(&other));
    // Recognised by its hash once, then by its pointer.
    let mut held = Cached::of(&again);
    drop(again);
    let third = charged("select 1");
    third.resolve(&[0, 0]);
    assert!(held.is(&third) && std::ptr::eq(held.def.as_ptr(), Arc::as_ptr(&third)));
}

/// Every setting the analysis reads counts (the list is searched by halves: it must stay
/// sorted), each with a fingerprint of its own.
#[test]
fn every_analysis_setting_changes_the_fingerprint() {
    let mut sorted = ANALYSIS_SETTINGS;
    sorted.sort_unstable();
    assert_eq!(sorted, ANALYSIS_SETTINGS);
    let mut seen = std::collections::HashSet::new();
    for name in ANALYSIS_SETTINGS {
        let applied = BTreeMap::from([(name.to_string(), format!("SET {name} = 'x'"))]);
        let f = analysis_fingerprint(&applied);
        assert_ne!(f, 0, "{name}");
        assert!(seen.insert(f), "{name}");
    }
}

#[test]
fn a_text_is_a_statement_of_its_own_under_each_set_of_analysis_settings() {
    let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let utc = analysis_fingerprint(&set(&[("timezone", "SET timezone = 'UTC'")]));
    let tokyo = analysis_fingerprint(&set(&[("timezone", "SET timezone = 'Asia/Tokyo'")]));
    let app = analysis_fingerprint(&set(&[("application_name", "SET application_name = 'x'")]));
    assert_eq!(
        app, 0,
        "settings analysis does not read leave the name alone"
    );
    assert_ne!(utc, 0);
    assert_ne!(utc, tokyo);
    let mut s = ServerStatements::new(8);
    let text = "select '2020-01-01'::timestamptz";
    let under = |settings: u64| {
        Arc::new(StmtDef {
            settings,
            ..StmtDef::new(text.as_bytes(), &[0, 0])
        })
    };
    let (a_utc, a_tokyo) = (under(utc), under(tokyo));
    // Parsed under each connection's settings: a copy each, under its own key.
    s.set_settings(utc);
    let (k_utc, e) = s.ensure(&a_utc);
    assert!(matches!(e, Ensure::Prepare { evict: None }));
    s.set_settings(tokyo);
    let (k_tokyo, e) = s.ensure(&a_tokyo);
    assert!(k_tokyo != k_utc && matches!(e, Ensure::Prepare { evict: None }));
    // The connection has the copy of the Parse's settings: used whatever its settings now.
    assert!(matches!(s.ensure(&a_utc), (k, Ensure::Held) if k == k_utc));
    // Not here under the Parse's settings: prepared under the connection's, keyed by both.
    let other = under(analysis_fingerprint(&set(&[(
        "datestyle",
        "SET datestyle = 'SQL'",
    )])));
    let (k_mixed, e) = s.ensure(&other);
    assert!(matches!(e, Ensure::Prepare { evict: None }));
    assert!(k_mixed != k_utc && k_mixed != k_tokyo && k_mixed != s.key(&a_tokyo));
    assert_eq!(s.len(), 3);
}

#[test]
fn the_parse_message_names_the_statement_by_its_key() {
    let d = def("select $1");
    let mut out = Vec::new();
    d.parse_message(d.hash, &mut out);
    assert_eq!(out[0], b'P');
    let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
    assert_eq!(len + 1, out.len());
    assert!(out.windows(7).any(|w| w == b"sluice_"));
    assert_ne!(def("select 1").hash, def("select 2").hash);
    assert_eq!(def("select 1").hash, def("select 1").hash);
    let name = server_name(d.hash);
    assert_eq!(
        std::str::from_utf8(&name).unwrap(),
        format!("sluice_{:016x}", d.hash)
    );
    assert_eq!(key_of_name(&name), Some(d.hash));
    assert_eq!(key_of_name(b"sluice_12"), None);
}

/// A RowDescription body: each column's name, table, column number, type, length,
/// modifier and format.
fn row_description(cols: &[(&str, u32, u16, u32, i16, i32)]) -> Vec<u8> {
    let mut b = (cols.len() as u16).to_be_bytes().to_vec();
    for (name, table, col, ty, len, modifier) in cols {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&table.to_be_bytes());
        b.extend_from_slice(&col.to_be_bytes());
        b.extend_from_slice(&ty.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&modifier.to_be_bytes());
        b.extend_from_slice(&0u16.to_be_bytes());
    }
    b
}

#[test]
fn a_results_shape_is_its_columns_names_and_types_not_where_they_come_from() {
    let shape =
        |cols: &[(&str, u32, u16, u32, i16, i32)]| result_shape(b'T', &row_description(cols));
    let a = shape(&[("id", 16384, 1, 23, 4, -1), ("a", 16384, 2, 23, 4, -1)]);
    // The table dropped and made again alike: the same.
    assert_eq!(
        a,
        shape(&[("id", 16390, 1, 23, 4, -1), ("a", 16390, 3, 23, 4, -1)])
    );
    for other in [
        shape(&[("id", 16384, 1, 23, 4, -1), ("a", 16384, 2, 701, 8, -1)]),
        shape(&[("id", 16384, 1, 23, 4, -1), ("b", 16384, 2, 23, 4, -1)]),
        shape(&[("id", 16384, 1, 23, 4, -1)]),
        shape(&[("id", 16384, 1, 1043, -1, 14), ("a", 16384, 2, 23, 4, -1)]),
        shape(&[("id", 16384, 1, 1043, -1, 20), ("a", 16384, 2, 23, 4, -1)]),
        result_shape(b'n', &[]),
    ] {
        assert_ne!(a, other);
    }
    assert_ne!(result_shape(b'n', &[]), 0);
    // A description noted first stays.
    let d = def("select 1");
    assert_eq!(d.described(), 0);
    d.note_described(a);
    d.note_described(7);
    assert_eq!(d.described(), a);
}
