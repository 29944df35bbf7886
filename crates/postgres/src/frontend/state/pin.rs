//! Why a session keeps its server connection between transactions (bit flags, as the admin
//! API lists them).

/// A temporary table, view or sequence.
pub const TEMP_TABLE: u32 = 1;
/// A session-level advisory lock.
pub const ADVISORY_LOCK: u32 = 1 << 1;
/// `LISTEN`.
pub const LISTEN: u32 = 1 << 2;
/// A `WITH HOLD` cursor.
pub const WITH_HOLD: u32 = 1 << 3;
/// A prepared statement made with SQL `PREPARE`.
pub const PREPARE: u32 = 1 << 4;
/// `LOAD`.
pub const LOAD: u32 = 1 << 5;
/// `SET SESSION AUTHORIZATION`.
pub const SESSION_AUTHORIZATION: u32 = 1 << 6;
/// `SET SESSION CHARACTERISTICS AS TRANSACTION`.
pub const SESSION_CHARACTERISTICS: u32 = 1 << 7;
/// A `SET` inside a transaction whose savepoint was rolled back (sluice cannot tell
/// which settings survived).
pub const SET_IN_SAVEPOINT: u32 = 1 << 8;
/// A named portal or the COPY protocol left open across a transaction boundary.
pub const OPEN_PROTOCOL_STATE: u32 = 1 << 9;
/// `set_config(name, value, false)`: a setting sluice cannot carry to another connection
/// (PostgreSQL reports most parameters to no one).
pub const SET_CONFIG: u32 = 1 << 10;
/// `standard_conforming_strings` turned off: the scanner, which reads strings as
/// PostgreSQL does with it on, can no longer be sure what the session's statements do
/// (they all go to the primary, and the session stays there until `DISCARD ALL`).
pub const BACKSLASH_QUOTES: u32 = 1 << 11;
/// A text of several statements that ends, opens or rolls back a transaction itself and
/// also sets a parameter or releases state (or such a pipeline: `Session::track`): which
/// of them took effect depends on where they stand against its `COMMIT` or `ROLLBACK`,
/// and on where it failed, which sluice does not follow. The connection keeps the truth;
/// the session keeps the connection.
pub const TEXT_TRANSACTION: u32 = 1 << 12;
/// `setseed()` or `SET seed`: the session's `random()` sequence (kept by `DISCARD ALL`
/// too).
pub const SETSEED: u32 = 1 << 13;
/// A call of a name the scanner cannot read (`U&"..."`), or a FunctionCall message of a
/// function other than the large-object ones (`frontend::calls`): it may be any function
/// that makes session state.
pub const UNREAD_CALL: u32 = 1 << 14;
/// `SET search_path` naming `pg_temp`: unqualified `CREATE`s make temporary objects.
pub const TEMP_SEARCH_PATH: u32 = 1 << 15;
/// A `client_encoding` whose characters may hold the bytes of `\` or `'` after their
/// first (SJIS, BIG5, GBK, UHC, JOHAB, GB18030): the scanner, which reads bytes, can no
/// longer tell where a string ends (the session's statements all go to the primary, and
/// the session stays there until `DISCARD ALL`).
pub const UNREADABLE_ENCODING: u32 = 1 << 16;
/// A `SET` whose value has bytes outside ASCII, made while the client's encoding is not
/// UTF-8: sluice keeps settings as UTF-8 text, and could not say the same thing again
/// on another connection.
pub const NON_ASCII_SET: u32 = 1 << 17;

/// Not a pin: published with the pins while the session is inside a transaction block
/// (which keeps its connection too), for the admin API's sessions view.
pub const TRANSACTION: u32 = 1 << 18;

/// Pins of temporary objects.
pub const TEMP: u32 = TEMP_TABLE | TEMP_SEARCH_PATH;

/// Pins that say the scanner cannot be sure of a session's statements, not that the
/// connection holds state of the session's.
pub const SCANNER_DOUBTS: u32 = BACKSLASH_QUOTES | TEXT_TRANSACTION | UNREADABLE_ENCODING;

const NAMES: [&str; 19] = [
    "temporary table",
    "session advisory lock",
    "LISTEN",
    "WITH HOLD cursor",
    "SQL PREPARE",
    "LOAD",
    "SET SESSION AUTHORIZATION",
    "SET SESSION CHARACTERISTICS",
    "SET rolled back to a savepoint",
    "open portal",
    "set_config(..., false)",
    "standard_conforming_strings off",
    "SET or release in a text or pipeline with its own COMMIT/ROLLBACK",
    "setseed() or SET seed",
    "call of a function sluice cannot name",
    "search_path naming pg_temp",
    "client_encoding sluice cannot scan",
    "SET of a non-ASCII value in a client_encoding other than UTF8",
    "transaction",
];

/// The names of the bits set in `bits`.
pub fn labels(bits: u32) -> Vec<&'static str> {
    NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect()
}
