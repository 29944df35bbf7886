//! The answers a batch forwarded without its end owes (the client pipelines past a unit's
//! bounds without a Sync or Flush; docs/sessions.md, "Long batches"): kept in sluice's memory
//! until the part that ends the batch is relayed, so bounded in count per session and in
//! bytes for the whole process.

use super::session::Session;
use sluice_core::Charge;

/// What an owed answer may hold on the heap beyond its slot in the queue, apart from what it
/// copied of its message: a boxed registration or replacing error, and that error's text.
const OWED_ANSWER_EXTRA: usize = 112;

/// What the owed answers hold, charged.
pub(super) struct OwedCharge {
    charge: Charge,
    /// The bytes of the batch's parts forwarded without its end (what the answers they owe
    /// copied of them, statement names and errors naming them, is within it).
    parts: usize,
}

impl Session {
    /// Keeps what the answers owed by a batch forwarded without its end hold (after a unit of
    /// `unit_bytes`) within `[proxy] max_request_memory` and their count within
    /// [`crate::front::OWED_ANSWERS_PER_SESSION`]; gives the charge back once none are owed.
    /// The SQLSTATE and message that end the session when a bound is passed.
    pub(super) fn charge_owed(&mut self, unit_bytes: usize) -> Option<(&'static str, String)> {
        let Some(owed) = &self.owed else {
            self.owed_charge = None;
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
        let budget = &self.fe.rt.request_memory;
        let held = self.owed_charge.get_or_insert_with(|| {
            Box::new(OwedCharge {
                charge: budget.charge(),
                parts: 0,
            })
        });
        held.parts += unit_bytes;
        let bytes = owed.heap_bytes() + held.parts + answers * OWED_ANSWER_EXTRA;
        let over = held.charge.cover(bytes).err()?;
        let msg = format!(
            "sluice: out of memory for the answers a batch without a Sync or Flush owes: {answers} messages of it wait for their answers, but the requests of all clients may hold at most {} bytes ([proxy] max_request_memory) and {} are in use; the connection is closed, retry later",
            over.limit, over.used
        );
        Some(("53200", msg))
    }
}
