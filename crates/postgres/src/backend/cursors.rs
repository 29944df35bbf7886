//! The `WITH HOLD` cursors a connection holds for the session pinned to it, by name. A held
//! cursor pins the session to its connection; closing the last one by name (`CLOSE name`)
//! releases it, as `CLOSE ALL` and `DISCARD ALL` do.
//!
//! The names are kept from the `DECLARE` on, whatever becomes of it: one that failed or was
//! rolled back (its cursor never was) keeps the session pinned until `CLOSE ALL` or `DISCARD
//! ALL` — longer than needed, never shorter. A `CLOSE` takes effect at once in PostgreSQL
//! (a rollback does not bring the cursor back), so a name goes when its `CLOSE` succeeds;
//! inside a block the release itself waits for the commit, as every release does.

/// Names kept at most: past them, and after a `DECLARE` whose name sluice cannot read, only
/// `CLOSE ALL` or `DISCARD ALL` release the session.
pub const MAX_HELD: usize = 64;

/// The held cursors' names (see the module).
#[derive(Debug, Default)]
pub struct HeldCursors {
    names: Vec<String>,
    /// A held cursor sluice cannot name may exist.
    unknown: bool,
}

impl HeldCursors {
    /// A `DECLARE … WITH HOLD` ran, or may have.
    pub fn declared(&mut self, name: Option<&str>) {
        match name {
            Some(n) if self.names.iter().any(|k| k == n) => {}
            Some(n) if self.names.len() < MAX_HELD => self.names.push(n.to_string()),
            _ => self.unknown = true,
        }
    }

    /// A `CLOSE name` succeeded: true if no held cursor is left.
    pub fn closed(&mut self, name: &str) -> bool {
        self.names.retain(|k| k != name);
        self.names.is_empty() && !self.unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_name_closed_releases_unless_one_was_not_read() {
        let mut h = HeldCursors::default();
        h.declared(Some("a"));
        h.declared(Some("b"));
        h.declared(Some("a"));
        assert!(!h.closed("a"));
        assert!(!h.closed("c"));
        assert!(h.closed("b"));
        h.declared(None);
        h.declared(Some("d"));
        assert!(!h.closed("d"));
        let mut h = HeldCursors::default();
        for i in 0..=MAX_HELD {
            h.declared(Some(&i.to_string()));
        }
        for i in 0..MAX_HELD {
            assert!(!h.closed(&i.to_string()));
        }
        assert!(
            !h.closed(&MAX_HELD.to_string()),
            "past the bound: not known"
        );
    }
}
