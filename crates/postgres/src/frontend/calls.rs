//! FunctionCall messages: a function named by its OID, a call the scanner never reads.
//! libpq and PgJDBC call the large-object functions so (their OIDs are fixed in PostgreSQL's
//! catalog, and the descriptors they open end with their transaction); any other function
//! may make state that cannot move to another connection (`set_config(…, false)`, a
//! session advisory lock, `setseed`), so a call of one pins the session, as a call of a name
//! the scanner cannot read does (`pin::UNREAD_CALL`).

use super::unit::Unit;

/// The built-in large-object functions' OIDs (PostgreSQL's `pg_proc.dat`), sorted:
/// `lo_create`, `lo_import` (2), `lo_export`, `lo_open`, `lo_close`, `loread`, `lowrite`,
/// `lo_lseek`, `lo_creat`, `lo_tell`, `lo_unlink`, `lo_truncate`, `lo_lseek64`,
/// `lo_tell64`, `lo_truncate64`, `lo_from_bytea`, `lo_get` (2), `lo_put`.
const LARGE_OBJECT: [u32; 20] = [
    715, 764, 765, 767, 952, 953, 954, 955, 956, 957, 958, 964, 1004, 3170, 3171, 3172, 3457, 3458,
    3459, 3460,
];

/// True if `unit` (its bytes in `buf`) calls a function other than the large-object ones
/// with a FunctionCall message.
pub(super) fn makes_state(unit: &Unit, buf: &[u8]) -> bool {
    unit.iter().any(|(tag, at, len)| {
        tag == b'F'
            && buf
                .get(at + 5..at + len)
                .and_then(|body| body.first_chunk::<4>())
                .is_none_or(|oid| {
                    LARGE_OBJECT
                        .binary_search(&u32::from_be_bytes(*oid))
                        .is_err()
                })
    })
}

#[cfg(test)]
mod tests {
    use super::LARGE_OBJECT;

    #[test]
    fn the_large_object_oids_are_sorted() {
        assert!(LARGE_OBJECT.windows(2).all(|w| w[0] < w[1]));
    }
}
