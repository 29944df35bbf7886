//! The answers a batch forwarded without its end owes (the client pipelines past a unit's
//! bounds without a Sync or Flush; docs/sessions.md, "Long batches"): kept in sluice's memory
//! until the part that ends the batch is relayed, so bounded in count per session and in
//! bytes for the whole process.

use super::session::Session;

/// What an owed answer may hold on the heap beyond its slot in the queue, apart from what it
/// copied of its message: a boxed registration or replacing error, and that error's text.
pub(super) const OWED_ANSWER_EXTRA: usize = 112;

impl Session {
    /// Keeps what the answers owed by a batch forwarded without its end hold (after a unit of
    /// `unit_bytes`) within `[proxy] max_request_memory` and their count within
    /// [`crate::front::OWED_ANSWERS_PER_SESSION`]; gives the charge back once none are owed.
    /// The SQLSTATE and message that end the session when a bound is passed.
    pub(super) fn charge_owed(&mut self, unit_bytes: usize) -> Option<(&'static str, String)> {
        let Some(owed) = &self.owed else {
            self.owed_charge.release();
            self.owed_parts = 0;
            return None;
        };
        let answers = owed.len();
        if answers > crate::front::OWED_ANSWERS_PER_SESSION {
            let msg = format!(
                "sluice: a batch of more than {} messages without a Sync or Flush",
                crate::front::OWED_ANSWERS_PER_SESSION
            );
            return Some(("54000", msg));
        }
        self.owed_parts += unit_bytes;
        let held = owed.heap_bytes() + self.owed_parts + answers * OWED_ANSWER_EXTRA;
        let over = self.owed_charge.cover(held).err()?;
        let msg = format!(
            "sluice: out of memory for the answers a batch without a Sync or Flush owes: {answers} messages of it wait for their answers, but the requests of all clients may hold at most {} bytes ([proxy] max_request_memory) and {} are in use; the connection is closed, retry later",
            over.limit, over.used
        );
        Some(("53200", msg))
    }
}
