//! Names that may be followed by `(` in a read-only statement without making it a write:
//! MariaDB's built-in functions plus keywords that precede a parenthesis (`IN (`, `AS (` ...).
//!
//! A name not in this list, followed by `(`, is a call to a stored function, which may write:
//! such a statement goes to the writer. The list errs on the side of routing to the writer: a
//! missing builtin costs read scaling for that statement, never correctness.

/// Sorted, uppercase. Keep sorted: lookups are binary searches (a unit test checks).
static SAFE: &[&str] = &[
    "ABS", "ACOS", "ADDDATE", "ADDTIME", "ADD_MONTHS", "AES_DECRYPT", "AES_ENCRYPT", "AGAINST",
    "ALL", "AND", "ANY", "AREA", "AS", "ASBINARY", "ASC", "ASCII", "ASIN", "ASTEXT", "ASWKB",
    "ASWKT", "ATAN", "ATAN2", "AVG", "BENCHMARK", "BETWEEN", "BIGINT", "BIN", "BINARY",
    "BINLOG_GTID_POS", "BIT", "BIT_AND", "BIT_COUNT", "BIT_LENGTH", "BIT_OR", "BIT_XOR", "BLOB",
    "BOUNDARY", "BUFFER", "BY", "CASE", "CAST", "CEIL", "CEILING", "CENTROID", "CHAR",
    "CHARACTER_LENGTH", "CHARSET", "CHAR_LENGTH", "CHECK", "CHR", "COALESCE", "COERCIBILITY",
    "COLLATE", "COLLATION", "COLUMNS", "COLUMN_ADD", "COLUMN_CHECK", "COLUMN_CREATE",
    "COLUMN_DELETE", "COLUMN_EXISTS", "COLUMN_GET", "COLUMN_JSON", "COLUMN_LIST", "COMPRESS",
    "CONCAT", "CONCAT_WS", "CONNECTION_ID", "CONTAINS", "CONV", "CONVERT", "CONVERT_TZ",
    "CONVEXHULL", "COS", "COT", "COUNT", "CRC32", "CRC32C", "CROSSES", "CUME_DIST", "CURDATE",
    "CURRENT_DATE", "CURRENT_ROLE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "CURRENT_USER",
    "CURTIME", "DATABASE", "DATE", "DATEDIFF", "DATETIME", "DATE_ADD", "DATE_FORMAT",
    "DATE_SUB", "DAY", "DAYNAME", "DAYOFMONTH", "DAYOFWEEK", "DAYOFYEAR", "DEC", "DECIMAL",
    "DECODE", "DECODE_HISTOGRAM", "DECODE_ORACLE", "DEFAULT", "DEGREES", "DENSE_RANK", "DESC",
    "DES_DECRYPT", "DES_ENCRYPT", "DIMENSION", "DISJOINT", "DISTINCT", "DIV", "DOUBLE", "ELSE",
    "ELT", "ENCODE", "ENCRYPT", "ENDPOINT", "ENVELOPE", "EQUALS", "EXCEPT", "EXISTS", "EXP",
    "EXPORT_SET", "EXTERIORRING", "EXTRACT", "EXTRACTVALUE", "FIELD", "FILTER", "FIND_IN_SET",
    "FIRST_VALUE", "FIXED", "FLOAT", "FLOOR", "FOR", "FORCE", "FORMAT", "FORMAT_BYTES",
    "FORMAT_PICO_TIME", "FOUND_ROWS", "FROM", "FROM_BASE64", "FROM_DAYS", "FROM_UNIXTIME",
    "GEOMCOLLFROMTEXT", "GEOMCOLLFROMWKB", "GEOMETRYCOLLECTION", "GEOMETRYCOLLECTIONFROMTEXT",
    "GEOMETRYCOLLECTIONFROMWKB", "GEOMETRYFROMTEXT", "GEOMETRYFROMWKB", "GEOMETRYN",
    "GEOMETRYTYPE", "GEOMFROMTEXT", "GEOMFROMWKB", "GET_FORMAT", "GLENGTH", "GREATEST", "GROUP",
    "GROUP_CONCAT", "HAVING", "HEX", "HOUR", "IF", "IFNULL", "IGNORE", "IN", "INDEX",
    "INET4", "INET6", "INET6_ATON", "INET6_NTOA", "INET_ATON", "INET_NTOA", "INSERT", "INSTR",
    "INT", "INTEGER", "INTERIORRINGN", "INTERSECT", "INTERSECTS", "INTERVAL", "INTO", "IS",
    "ISCLOSED", "ISEMPTY", "ISNULL", "ISRING", "ISSIMPLE", "IS_IPV4", "IS_IPV4_COMPAT",
    "IS_IPV4_MAPPED", "IS_IPV6", "JOIN", "JSON", "JSON_ARRAY", "JSON_ARRAYAGG",
    "JSON_ARRAY_APPEND", "JSON_ARRAY_INSERT", "JSON_ARRAY_INTERSECT", "JSON_COMPACT",
    "JSON_CONTAINS", "JSON_CONTAINS_PATH", "JSON_DEPTH", "JSON_DETAILED", "JSON_EQUALS",
    "JSON_EXISTS", "JSON_EXTRACT", "JSON_INSERT", "JSON_KEYS", "JSON_KEY_VALUE", "JSON_LENGTH",
    "JSON_LOOSE", "JSON_MERGE", "JSON_MERGE_PATCH", "JSON_MERGE_PRESERVE", "JSON_NORMALIZE",
    "JSON_OBJECT", "JSON_OBJECTAGG", "JSON_OBJECT_FILTER_KEYS", "JSON_OBJECT_TO_ARRAY",
    "JSON_OVERLAPS", "JSON_PRETTY", "JSON_QUERY", "JSON_QUOTE", "JSON_REMOVE", "JSON_REPLACE",
    "JSON_SCHEMA_VALID", "JSON_SEARCH", "JSON_SET", "JSON_TABLE", "JSON_TYPE", "JSON_UNQUOTE",
    "JSON_VALID", "JSON_VALUE", "KDF", "KEY", "LAG", "LAST_DAY", "LAST_INSERT_ID", "LAST_VALUE",
    "LATERAL", "LCASE", "LEAD", "LEAST", "LEFT", "LENGTH", "LENGTHB", "LIKE", "LIMIT",
    "LINEFROMTEXT", "LINEFROMWKB", "LINESTRING", "LINESTRINGFROMTEXT", "LINESTRINGFROMWKB",
    "LN", "LOAD_FILE", "LOCALTIME", "LOCALTIMESTAMP", "LOCATE", "LOG", "LOG10", "LOG2",
    "LOWER", "LPAD", "LPAD_ORACLE", "LTRIM", "LTRIM_ORACLE", "MAKEDATE", "MAKETIME",
    "MAKE_SET", "MASTER_GTID_WAIT", "MASTER_POS_WAIT", "MATCH", "MAX", "MD5", "MEDIAN",
    "MEDIUMINT", "MICROSECOND", "MID", "MIN", "MINUTE", "MLINEFROMTEXT", "MLINEFROMWKB", "MOD",
    "MODE", "MONTH", "MONTHNAME", "MPOINTFROMTEXT", "MPOINTFROMWKB", "MPOLYFROMTEXT",
    "MPOLYFROMWKB", "MULTILINESTRING", "MULTILINESTRINGFROMTEXT", "MULTILINESTRINGFROMWKB",
    "MULTIPOINT", "MULTIPOINTFROMTEXT", "MULTIPOINTFROMWKB", "MULTIPOLYGON",
    "MULTIPOLYGONFROMTEXT", "MULTIPOLYGONFROMWKB", "NAME_CONST", "NATURAL_SORT_KEY", "NCHAR",
    "NESTED", "NOT", "NOW", "NTH_VALUE", "NTILE", "NULL", "NULLIF", "NUMERIC", "NUMGEOMETRIES",
    "NUMINTERIORRINGS", "NUMPOINTS", "NVL", "NVL2", "OCT", "OCTET_LENGTH", "OF", "OFFSET",
    "OLD_PASSWORD", "ON", "OR", "ORD", "ORDER", "ORDINALITY", "OVER", "OVERLAPS", "PARTITION",
    "PASSWORD", "PATH", "PERCENTILE_CONT", "PERCENTILE_DISC", "PERCENT_RANK", "PERIOD_ADD",
    "PERIOD_DIFF", "PI", "POINT", "POINTFROMTEXT", "POINTFROMWKB", "POINTN", "POLYFROMTEXT",
    "POLYFROMWKB", "POLYGON", "POLYGONFROMTEXT", "POLYGONFROMWKB", "POSITION", "POW", "POWER",
    "QUARTER", "QUOTE", "RADIANS", "RAND", "RANDOM_BYTES", "RANGE", "RANK", "REAL", "RECURSIVE",
    "REGEXP", "REGEXP_INSTR", "REGEXP_REPLACE", "REGEXP_SUBSTR", "REPEAT", "REPLACE",
    "REPLACE_ORACLE", "RETURNING", "REVERSE", "RIGHT", "RLIKE", "ROUND", "ROW", "ROWNUM", "ROWS",
    "ROW_COUNT", "ROW_NUMBER", "RPAD", "RPAD_ORACLE", "RTRIM", "RTRIM_ORACLE", "SCHEMA",
    "SECOND", "SEC_TO_TIME", "SELECT", "SESSION_USER", "SET", "SFORMAT", "SHA", "SHA1", "SHA2",
    "SIGN", "SIGNED", "SIN", "SLEEP", "SMALLINT", "SOME", "SOUNDEX", "SOUNDS", "SPACE", "SQRT",
    "SRID", "STARTPOINT", "STD", "STDDEV", "STDDEV_POP", "STDDEV_SAMP", "STRCMP", "STR_TO_DATE",
    "SUBDATE", "SUBSTR", "SUBSTRING", "SUBSTRING_INDEX", "SUBSTR_ORACLE", "SUBTIME", "SUM",
    "SYSDATE", "SYSTEM_USER", "SYS_GUID", "TABLE", "TAN", "TEXT", "THEN", "TIME", "TIMEDIFF",
    "TIMESTAMP", "TIMESTAMPADD", "TIMESTAMPDIFF", "TIME_FORMAT", "TIME_TO_SEC", "TINYINT",
    "TOUCHES", "TO_BASE64", "TO_CHAR", "TO_DAYS", "TO_SECONDS", "TRIM", "TRIM_ORACLE",
    "TRUNCATE", "UCASE", "UNCOMPRESS", "UNCOMPRESSED_LENGTH", "UNHEX", "UNION", "UNIQUE",
    "UNIX_TIMESTAMP", "UNSIGNED", "UPDATEXML", "UPPER", "USE", "USER", "USING", "UTC_DATE",
    "UTC_TIME", "UTC_TIMESTAMP", "UUID", "UUID_SHORT", "VALUE", "VALUES", "VARBINARY",
    "VARCHAR", "VARIANCE", "VAR_POP", "VAR_SAMP", "VERSION", "WEEK", "WEEKDAY", "WEEKOFYEAR",
    "WEIGHT_STRING", "WHEN", "WHERE", "WINDOW", "WITH", "WITHIN", "WSREP_LAST_SEEN_GTID",
    "WSREP_LAST_WRITTEN_GTID", "WSREP_SYNC_WAIT_UPTO_GTID", "X", "XOR", "Y", "YEAR", "YEARWEEK",
];

/// What a name followed by `(` means for routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A builtin without side effects, or a keyword.
    Safe,
    /// A user-level lock function (`GET_LOCK`, `RELEASE_LOCK` ...).
    Lock,
    /// A sequence function that advances or sets a sequence.
    Sequence,
    /// `LAST_INSERT_ID` (with or without an argument; the caller checks).
    LastInsertId,
    /// `FOUND_ROWS()` or `ROW_COUNT()`: results of the session's previous statement.
    PrevStatement,
    /// `CONNECTION_ID()`.
    ConnectionId,
    /// Anything else: a stored function, which may write.
    Unknown,
}

/// Classifies a function name (case-insensitive).
pub fn classify_call(name: &[u8]) -> Call {
    let mut buf = [0u8; 64];
    if name.len() > buf.len() {
        return Call::Unknown;
    }
    let up = &mut buf[..name.len()];
    for (d, s) in up.iter_mut().zip(name) {
        *d = s.to_ascii_uppercase();
    }
    let up: &[u8] = up;
    match up {
        b"GET_LOCK" | b"RELEASE_LOCK" | b"RELEASE_ALL_LOCKS" | b"IS_FREE_LOCK" | b"IS_USED_LOCK" => {
            return Call::Lock
        }
        b"NEXTVAL" | b"SETVAL" | b"LASTVAL" => return Call::Sequence,
        b"LAST_INSERT_ID" => return Call::LastInsertId,
        b"FOUND_ROWS" | b"ROW_COUNT" => return Call::PrevStatement,
        b"CONNECTION_ID" => return Call::ConnectionId,
        _ => {}
    }
    if up.starts_with(b"ST_") || up.starts_with(b"MBR") {
        return Call::Safe; // spatial functions
    }
    if SAFE.binary_search_by(|probe| probe.as_bytes().cmp(up)).is_ok() {
        Call::Safe
    } else {
        Call::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_sorted_and_unique() {
        for w in SAFE.windows(2) {
            assert!(w[0] < w[1], "{} must sort before {}", w[0], w[1]);
        }
    }

    #[test]
    fn classifies() {
        assert_eq!(classify_call(b"count"), Call::Safe);
        assert_eq!(classify_call(b"St_Distance"), Call::Safe);
        assert_eq!(classify_call(b"get_lock"), Call::Lock);
        assert_eq!(classify_call(b"nextval"), Call::Sequence);
        assert_eq!(classify_call(b"my_func"), Call::Unknown);
        assert_eq!(classify_call(&[b'A'; 100]), Call::Unknown);
    }
}
