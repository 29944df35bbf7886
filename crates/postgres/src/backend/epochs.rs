//! Result epochs: how often DDL has been seen to change the result of the prepared
//! statements of a bucket of statement keys (see `StmtDef::epoch`), and the fields of the
//! error PostgreSQL gives for such a statement, which sluice gives in its place.

/// Buckets of [`result_epoch`]s: statements whose keys share one share their epoch (a change
/// in one makes the others' clients get the error once, and their copies prepared again).
const EPOCH_BUCKETS: usize = 4096;

/// How often a change of result has come to light, per bucket of statement keys.
static RESULT_EPOCHS: [std::sync::atomic::AtomicU32; EPOCH_BUCKETS] =
    [const { std::sync::atomic::AtomicU32::new(0) }; EPOCH_BUCKETS];

/// The result epoch of the statements whose epoch key (their text, types, settings and pool)
/// is `key`: moved on whenever a copy of one showed that DDL changed its result.
pub(super) fn result_epoch(key: u64) -> u32 {
    RESULT_EPOCHS[(key as usize) % EPOCH_BUCKETS].load(std::sync::atomic::Ordering::Relaxed)
}

/// The line of the servers' `plancache.c` that raises 0A000 `cached plan must not change
/// result type`, as the last such error said (0: none seen).
static RESULT_CHANGED_LINE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Where PostgreSQL raises 0A000 `cached plan must not change result type`: the fields of the
/// error that sluice gives in its place after the statement's result changed. Drivers tell
/// it from other 0A000s by its routine (asyncpg prepares the statement again and retries
/// only then).
pub fn result_changed_fields() -> Vec<(u8, String)> {
    let mut fields = vec![(b'F', "plancache.c".to_string())];
    let line = RESULT_CHANGED_LINE.load(std::sync::atomic::Ordering::Relaxed);
    if line > 0 {
        fields.push((b'L', line.to_string()));
    }
    fields.push((b'R', "RevalidateCachedQuery".to_string()));
    fields
}

pub(super) fn bump_result_epoch(key: u64) {
    RESULT_EPOCHS[(key as usize) % EPOCH_BUCKETS]
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Notes the line a server's 0A000 `cached plan must not change result type` named.
pub(super) fn note_line(line: u32) {
    RESULT_CHANGED_LINE.store(line, std::sync::atomic::Ordering::Relaxed);
}
