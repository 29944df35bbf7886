//! Names that may be followed by `(` in a read-only statement: PostgreSQL's built-in functions
//! without side effects, and grammar keywords that precede a parenthesis (`IN (`, `AS (`,
//! `EXTRACT(`, `ROW(` ...).
//!
//! A name not listed here, followed by `(`, is taken for a call to a user function, which may
//! write: the statement goes to the primary. The lists err that way: a missing builtin costs
//! read scaling for the statements that use it, never correctness.

/// Built-in functions that neither write nor depend on the primary (lower case; kept sorted for
/// the reader, a unit test checks). Lookups go through a hash table built at compile time. Function-style casts to built-in types
/// (`int4(x)`, `text(x)`) are here too. Deliberately absent: the sequence functions, the
/// advisory lock functions, `set_config`, `setseed`, `pg_notify`, `txid_current` and
/// `pg_current_xact_id` (they assign a transaction id), `pg_current_wal_lsn` (fails on a standby),
/// `query_to_xml` and friends (run arbitrary SQL), the large-object functions, and the
/// administration functions (`pg_terminate_backend`, `pg_reload_conf` ...).
#[rustfmt::skip]
const FUNCTIONS: &[&str] = &[
    "abbrev", "abs", "acos", "acosd", "acosh", "age", "any_value", "array_agg", "array_append",
    "array_cat", "array_dims", "array_fill", "array_length", "array_lower", "array_ndims",
    "array_position", "array_positions", "array_prepend", "array_remove", "array_replace",
    "array_reverse", "array_sample", "array_shuffle", "array_sort", "array_to_json",
    "array_to_string", "array_to_tsvector", "array_upper", "ascii", "asin", "asind", "asinh",
    "atan", "atan2", "atan2d", "atand", "atanh", "avg", "bit", "bit_and", "bit_count", "bit_length",
    "bit_or", "bit_xor", "bool", "bool_and", "bool_or", "bpchar", "broadcast", "btrim", "bytea",
    "cardinality", "casefold", "cbrt", "ceil", "ceiling", "char", "char_length", "character_length",
    "chr", "cidr", "clock_timestamp", "col_description", "concat", "concat_ws", "convert",
    "convert_from", "convert_to", "corr", "cos", "cosd", "cosh", "cot", "cotd", "count",
    "covar_pop", "covar_samp", "crc32", "crc32c", "cume_dist", "current_database", "current_query",
    "current_schema", "current_schemas", "current_setting", "date", "date_add", "date_bin",
    "date_part", "date_subtract", "date_trunc", "datemultirange", "daterange", "decode", "degrees",
    "dense_rank", "div", "encode", "enum_first", "enum_last", "enum_range", "erf", "erfc", "every",
    "exp", "extract", "factorial", "first_value", "float4", "float8", "floor", "format",
    "format_type", "gcd", "gen_random_uuid", "generate_series", "generate_subscripts", "get_bit",
    "get_byte", "get_current_ts_config", "has_any_column_privilege", "has_column_privilege",
    "has_database_privilege", "has_foreign_data_wrapper_privilege", "has_function_privilege",
    "has_language_privilege", "has_parameter_privilege", "has_schema_privilege",
    "has_sequence_privilege", "has_server_privilege", "has_table_privilege",
    "has_tablespace_privilege", "has_type_privilege", "host", "hostmask", "inet",
    "inet_client_addr", "inet_client_port", "inet_merge", "inet_same_family", "inet_server_addr",
    "inet_server_port", "initcap", "int2", "int4", "int4multirange", "int4range", "int8",
    "int8multirange", "int8range", "interval", "isempty", "isfinite", "json", "json_agg",
    "json_agg_strict", "json_array_elements", "json_array_elements_text", "json_array_length",
    "json_build_array", "json_build_object", "json_each", "json_each_text", "json_extract_path",
    "json_extract_path_text", "json_object", "json_object_agg", "json_object_agg_strict",
    "json_object_agg_unique", "json_object_agg_unique_strict", "json_object_keys",
    "json_populate_record", "json_populate_recordset", "json_strip_nulls", "json_to_record",
    "json_to_recordset", "json_typeof", "jsonb", "jsonb_agg", "jsonb_agg_strict",
    "jsonb_array_elements", "jsonb_array_elements_text", "jsonb_array_length", "jsonb_build_array",
    "jsonb_build_object", "jsonb_each", "jsonb_each_text", "jsonb_extract_path",
    "jsonb_extract_path_text", "jsonb_insert", "jsonb_object", "jsonb_object_agg",
    "jsonb_object_agg_strict", "jsonb_object_agg_unique", "jsonb_object_agg_unique_strict",
    "jsonb_object_keys", "jsonb_path_exists", "jsonb_path_exists_tz", "jsonb_path_match",
    "jsonb_path_match_tz", "jsonb_path_query", "jsonb_path_query_array",
    "jsonb_path_query_array_tz", "jsonb_path_query_first", "jsonb_path_query_first_tz",
    "jsonb_path_query_tz", "jsonb_populate_record", "jsonb_populate_record_valid",
    "jsonb_populate_recordset", "jsonb_pretty", "jsonb_set", "jsonb_set_lax", "jsonb_strip_nulls",
    "jsonb_to_record", "jsonb_to_recordset", "jsonb_typeof", "justify_days", "justify_hours",
    "justify_interval", "lag", "last_value", "lcm", "lead", "left", "length", "ln", "log", "log10",
    "lower", "lower_inc", "lower_inf", "lpad", "ltrim", "macaddr", "macaddr8", "make_date",
    "make_interval", "make_time", "make_timestamp", "make_timestamptz", "masklen", "max", "md5",
    "min", "min_scale", "mod", "mode", "money", "multirange", "mxid_age", "name", "netmask",
    "network", "normalize", "now", "nth_value", "ntile", "num_nonnulls", "num_nulls", "numeric",
    "nummultirange", "numnode", "numrange", "obj_description", "octet_length", "oid", "overlaps",
    "overlay", "parse_ident", "percent_rank", "percentile_cont", "percentile_disc",
    "pg_backend_pid", "pg_blocking_pids", "pg_char_to_encoding", "pg_client_encoding",
    "pg_collation_is_visible", "pg_column_compression", "pg_column_size", "pg_conf_load_time",
    "pg_conversion_is_visible", "pg_current_logfile", "pg_current_snapshot", "pg_database_size",
    "pg_describe_object", "pg_encoding_to_char", "pg_function_is_visible", "pg_get_constraintdef",
    "pg_get_expr", "pg_get_function_arguments", "pg_get_function_identity_arguments",
    "pg_get_function_result", "pg_get_functiondef", "pg_get_indexdef", "pg_get_keywords",
    "pg_get_object_address", "pg_get_partkeydef", "pg_get_ruledef", "pg_get_serial_sequence",
    "pg_get_statisticsobjdef", "pg_get_triggerdef", "pg_get_userbyid", "pg_get_viewdef",
    "pg_get_wal_replay_pause_state", "pg_has_role", "pg_identify_object",
    "pg_identify_object_as_address", "pg_index_column_has_property", "pg_index_has_property",
    "pg_indexam_has_property", "pg_indexes_size", "pg_input_error_info", "pg_input_is_valid",
    "pg_is_in_recovery", "pg_is_wal_replay_paused", "pg_jit_available", "pg_last_wal_receive_lsn",
    "pg_last_wal_replay_lsn", "pg_last_xact_replay_timestamp", "pg_listening_channels",
    "pg_notification_queue_usage", "pg_opclass_is_visible", "pg_operator_is_visible",
    "pg_opfamily_is_visible", "pg_options_to_table", "pg_postmaster_start_time",
    "pg_relation_filenode", "pg_relation_filepath", "pg_relation_size",
    "pg_safe_snapshot_blocking_pids", "pg_size_bytes", "pg_size_pretty", "pg_sleep", "pg_sleep_for",
    "pg_sleep_until", "pg_snapshot_xip", "pg_snapshot_xmax", "pg_snapshot_xmin",
    "pg_statistics_obj_is_visible", "pg_table_is_visible", "pg_table_size",
    "pg_tablespace_databases", "pg_tablespace_location", "pg_tablespace_size",
    "pg_total_relation_size", "pg_trigger_depth", "pg_ts_config_is_visible",
    "pg_ts_dict_is_visible", "pg_ts_parser_is_visible", "pg_ts_template_is_visible",
    "pg_type_is_visible", "pg_typeof", "pg_visible_in_snapshot", "pg_wal_lsn_diff",
    "pg_xact_commit_timestamp", "phraseto_tsquery", "pi", "plainto_tsquery", "position", "pow",
    "power", "querytree", "quote_ident", "quote_literal", "quote_nullable", "radians", "random",
    "random_normal", "range_agg", "range_intersect_agg", "range_merge", "rank", "regclass",
    "regexp_count", "regexp_instr", "regexp_like", "regexp_match", "regexp_matches",
    "regexp_replace", "regexp_split_to_array", "regexp_split_to_table", "regexp_substr",
    "regr_avgx", "regr_avgy", "regr_count", "regr_intercept", "regr_r2", "regr_slope", "regr_sxx",
    "regr_sxy", "regr_syy", "regtype", "repeat", "replace", "reverse", "right", "round",
    "row_number", "row_security_active", "row_to_json", "rpad", "rtrim", "scale", "set_bit",
    "set_byte", "set_masklen", "setweight", "sha224", "sha256", "sha384", "sha512",
    "shobj_description", "sign", "sin", "sind", "sinh", "split_part", "sqrt", "starts_with",
    "statement_timestamp", "stddev", "stddev_pop", "stddev_samp", "string_agg", "string_to_array",
    "string_to_table", "strpos", "substr", "substring", "sum", "tan", "tand", "tanh", "text",
    "time", "timeofday", "timestamp", "timestamptz", "timetz", "timezone", "to_ascii", "to_bin",
    "to_char", "to_date", "to_hex", "to_json", "to_jsonb", "to_number", "to_oct", "to_regclass",
    "to_regcollation", "to_regnamespace", "to_regoper", "to_regoperator", "to_regproc",
    "to_regprocedure", "to_regrole", "to_regtype", "to_regtypemod", "to_timestamp", "to_tsquery",
    "to_tsvector", "transaction_timestamp", "translate", "trim_array", "trim_scale", "trunc",
    "ts_delete", "ts_filter", "ts_headline", "ts_rank", "ts_rank_cd", "tsmultirange", "tsrange",
    "tstzmultirange", "tstzrange", "tsvector_to_array", "txid_current_snapshot",
    "txid_snapshot_xip", "txid_snapshot_xmax", "txid_snapshot_xmin", "txid_visible_in_snapshot",
    "unistr", "unnest", "upper", "upper_inc", "upper_inf", "uuid", "uuid_extract_timestamp",
    "uuid_extract_version", "uuidv4", "uuidv7", "var_pop", "var_samp", "varbit", "varchar",
    "variance", "version", "websearch_to_tsquery", "width_bucket", "xml_is_well_formed",
    "xml_is_well_formed_content", "xml_is_well_formed_document", "xmlagg", "xmlcomment", "xmltext",
    "xpath", "xpath_exists",
];

/// Reserved and column-name keywords that can precede `(` without being a call (lower case,
/// sorted). Only unquoted, unqualified names are looked up here: `"exists"(1)` calls a function.
#[rustfmt::skip]
const KEYWORDS: &[&str] = &[
    "all", "and", "any", "array", "as", "asymmetric", "between", "both", "case", "cast", "coalesce",
    "collate", "current_date", "current_time", "current_timestamp", "default", "distinct", "do",
    "else", "end", "except", "exists", "extract", "fetch", "for", "from", "greatest", "group",
    "grouping", "having", "ilike", "in", "intersect", "into", "is", "join", "json", "json_array",
    "json_arrayagg", "json_exists", "json_object", "json_objectagg", "json_query", "json_scalar",
    "json_serialize", "json_table", "json_value", "lateral", "leading", "least", "like", "limit",
    "localtime", "localtimestamp", "merge_action", "normalize", "not", "nullif", "offset", "on",
    "only", "operator", "or", "order", "overlaps", "overlay", "placing", "position", "returning",
    "row", "select", "similar", "some", "substring", "symmetric", "then", "to", "trailing", "treat",
    "trim", "union", "using", "values", "when", "where", "window", "with", "xmlattributes",
    "xmlconcat", "xmlelement", "xmlexists", "xmlforest", "xmlnamespaces", "xmlparse", "xmlpi",
    "xmlroot", "xmlserialize", "xmltable",
];

/// FNV-1a over the bytes: the hash of the open-addressing tables below.
const fn hash(name: &[u8]) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < name.len() {
        h ^= name[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h as usize
}

/// An open-addressing table over `list`, built at compile time: slot `hash & (N - 1)` and the
/// slots after it hold `index + 1` of the names with that hash, 0 ends the probe. `N` must be a
/// power of two larger than the list.
const fn table<const N: usize>(list: &[&str]) -> [u16; N] {
    let mut t = [0u16; N];
    let mut i = 0;
    while i < list.len() {
        let mut slot = hash(list[i].as_bytes()) & (N - 1);
        while t[slot] != 0 {
            slot = (slot + 1) & (N - 1);
        }
        t[slot] = (i + 1) as u16;
        i += 1;
    }
    t
}

static FUNCTIONS_TABLE: [u16; 2048] = table(FUNCTIONS);
static KEYWORDS_TABLE: [u16; 256] = table(KEYWORDS);

/// Looks `name` (lower case) up in `list` through its table.
fn listed<const N: usize>(list: &[&str], table: &[u16; N], name: &[u8]) -> bool {
    let mut slot = hash(name) & (N - 1);
    loop {
        let Some(i) = usize::from(table[slot]).checked_sub(1) else {
            return false;
        };
        let entry = list[i].as_bytes();
        if entry.len() == name.len() && entry.iter().zip(name).all(|(a, b)| a == b) {
            return true;
        }
        slot = (slot + 1) & (N - 1);
    }
}

/// What a name followed by `(` means for routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// A keyword, or a builtin without side effects.
    Safe,
    /// `nextval`, `setval`, `currval`, `lastval`: advance a sequence or read the session's
    /// sequence state.
    Sequence,
    /// `pg_advisory_lock`, `pg_advisory_lock_shared`, `pg_try_advisory_lock`,
    /// `pg_try_advisory_lock_shared`: session-level locks, held past the transaction.
    AdvisoryLock,
    /// `pg_advisory_unlock_all()`.
    AdvisoryUnlockAll,
    /// `set_config(name, value, is_local)`: a write, and a session setting unless `is_local`.
    SetConfig,
    /// `setseed(seed)`: a write, and the session's random sequence.
    SetSeed,
    /// Anything else, including the transaction-level advisory locks and the single-lock
    /// unlocks: a write.
    Unknown,
}

/// How a call's name was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// Unquoted and unqualified: a keyword or a function, case-insensitive.
    Bare,
    /// Qualified with `pg_catalog.`, unquoted: a function, case-insensitive.
    Catalog,
    /// A quoted identifier's content: a function, case-sensitive.
    Quoted,
}

/// Classifies a called name.
pub(crate) fn classify_call(name: &[u8], spelling: Spelling) -> Call {
    let mut buf = [0u8; 64];
    if name.len() > buf.len() {
        return Call::Unknown;
    }
    let low = &mut buf[..name.len()];
    for (d, s) in low.iter_mut().zip(name) {
        *d = if spelling == Spelling::Quoted {
            *s
        } else {
            s.to_ascii_lowercase()
        };
    }
    let low: &[u8] = low;
    match low {
        b"nextval" | b"setval" | b"currval" | b"lastval" => return Call::Sequence,
        b"pg_advisory_lock"
        | b"pg_advisory_lock_shared"
        | b"pg_try_advisory_lock"
        | b"pg_try_advisory_lock_shared" => return Call::AdvisoryLock,
        b"pg_advisory_unlock_all" => return Call::AdvisoryUnlockAll,
        b"set_config" => return Call::SetConfig,
        b"setseed" => return Call::SetSeed,
        _ => {}
    }
    if (spelling == Spelling::Bare && listed(KEYWORDS, &KEYWORDS_TABLE, low))
        || listed(FUNCTIONS, &FUNCTIONS_TABLE, low)
    {
        Call::Safe
    } else {
        Call::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_unique_and_lower_case() {
        for list in [FUNCTIONS, KEYWORDS] {
            for w in list.windows(2) {
                assert!(w[0] < w[1], "{} must sort before {}", w[0], w[1]);
            }
            for w in list {
                assert_eq!(*w, w.to_ascii_lowercase());
                assert!(w.as_bytes()[0].is_ascii_lowercase(), "{w}");
                assert!(w.len() <= 64);
            }
        }
    }

    #[test]
    fn every_listed_name_is_found() {
        for w in FUNCTIONS {
            assert!(listed(FUNCTIONS, &FUNCTIONS_TABLE, w.as_bytes()), "{w}");
            assert_eq!(
                classify_call(w.as_bytes(), Spelling::Quoted),
                Call::Safe,
                "{w}"
            );
        }
        for w in KEYWORDS {
            assert!(listed(KEYWORDS, &KEYWORDS_TABLE, w.as_bytes()), "{w}");
            let up = w.to_ascii_uppercase();
            assert_eq!(
                classify_call(up.as_bytes(), Spelling::Bare),
                Call::Safe,
                "{w}"
            );
        }
        assert!(FUNCTIONS.len() < FUNCTIONS_TABLE.len() / 2);
        assert!(KEYWORDS.len() < KEYWORDS_TABLE.len() / 2);
        for name in [&b""[..], b"_x", b"{x", b"counts", b"coun", b"nextval"] {
            assert!(!listed(FUNCTIONS, &FUNCTIONS_TABLE, name));
        }
    }

    #[test]
    fn classifies() {
        assert_eq!(classify_call(b"COUNT", Spelling::Bare), Call::Safe);
        assert_eq!(classify_call(b"exists", Spelling::Bare), Call::Safe);
        assert_eq!(classify_call(b"exists", Spelling::Quoted), Call::Unknown);
        assert_eq!(classify_call(b"now", Spelling::Quoted), Call::Safe);
        assert_eq!(classify_call(b"NOW", Spelling::Quoted), Call::Unknown);
        assert_eq!(classify_call(b"Now", Spelling::Catalog), Call::Safe);
        assert_eq!(classify_call(b"nextval", Spelling::Quoted), Call::Sequence);
        assert_eq!(
            classify_call(b"pg_advisory_lock", Spelling::Bare),
            Call::AdvisoryLock
        );
        assert_eq!(
            classify_call(b"pg_advisory_xact_lock", Spelling::Bare),
            Call::Unknown
        );
        assert_eq!(
            classify_call(b"set_config", Spelling::Catalog),
            Call::SetConfig
        );
        assert_eq!(
            classify_call(b"SET_CONFIG", Spelling::Quoted),
            Call::Unknown
        );
        assert_eq!(classify_call(b"my_func", Spelling::Bare), Call::Unknown);
        assert_eq!(classify_call(&[b'a'; 100], Spelling::Bare), Call::Unknown);
    }
}
