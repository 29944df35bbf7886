//! FunctionCall messages: a function named by its OID, a call the scanner never reads.
//! libpq and PgJDBC call the large-object functions so (their OIDs are fixed in PostgreSQL's
//! catalog, and the descriptors they open end with their transaction); the sequence
//! functions' state (`currval`, `lastval`) is followed for any FunctionCall already
//! (`sequences`). Any other function may make state that cannot move to another connection
//! (`set_config(…, false)`, a session advisory lock, `setseed`), so a call of one pins the
//! session, as a call of a name the scanner cannot read does (`pin::UNREAD_CALL`).

use super::unit::Unit;

/// The built-in large-object and sequence functions' OIDs (PostgreSQL's `pg_proc.dat`),
/// sorted: `lo_create`, `lo_import` (2), `lo_export`, `lo_open`, `lo_close`, `loread`,
/// `lowrite`, `lo_lseek`, `lo_creat`, `lo_tell`, `lo_unlink`, `lo_truncate`, `nextval`,
/// `currval`, `setval`, `setval` (3 arguments), `lastval`, `lo_lseek64`, `lo_tell64`,
/// `lo_truncate64`, `lo_from_bytea`, `lo_get` (2), `lo_put`.
const FOLLOWED: [u32; 25] = [
    715, 764, 765, 767, 952, 953, 954, 955, 956, 957, 958, 964, 1004, 1574, 1575, 1576, 1765, 2559,
    3170, 3171, 3172, 3457, 3458, 3459, 3460,
];

/// True if `unit` (its bytes in `buf`) calls a function other than those of [`FOLLOWED`]
/// with a FunctionCall message.
pub(super) fn makes_state(unit: &Unit, buf: &[u8]) -> bool {
    unit.iter().any(|(tag, at, len)| {
        tag == b'F'
            && buf
                .get(at + 5..at + len)
                .and_then(|body| body.first_chunk::<4>())
                .is_none_or(|oid| FOLLOWED.binary_search(&u32::from_be_bytes(*oid)).is_err())
    })
}

#[cfg(test)]
mod tests {
    use super::FOLLOWED;

    #[test]
    fn the_oids_are_sorted() {
        assert!(FOLLOWED.windows(2).all(|w| w[0] < w[1]));
    }
}
