//! The answers a batch forwarded without its end owes (the client pipelines past a unit's
//! bounds without a Sync or Flush; docs/sessions.md, "Long batches"): kept in sluice's memory
//! until the part that ends the batch is relayed, so bounded in count per session and in
//! bytes for the whole process.

use super::session::Session;
use crate::front::OWED_ANSWER_BYTES;
use sluice_core::Charge;

/// What the owed answers hold, charged.
pub(super) struct OwedCharge {
    charge: Charge,
    /// What the answers owed by the batch's parts forwarded so far hold beyond their slots
    /// (see [`super::unit::Exps::held_bytes`]; the parts' own bytes were the read buffer's,
    /// charged as it grew, and are gone once forwarded).
    held: usize,
}

impl Session {
    /// A part of a batch forwarded without its end owes answers that hold `held` bytes
    /// beyond their slots (charged by [`Session::charge_owed`]).
    pub(super) fn owe_part(&mut self, held: usize) {
        let budget = &self.fe.rt.request_memory;
        let owed = self.owed_charge.get_or_insert_with(|| {
            Box::new(OwedCharge {
                charge: budget.charge(),
                held: 0,
            })
        });
        owed.held += held;
    }

    /// Why a session whose unit `relayed` so must end for what its batch owes, if it must:
    /// the server's answers read ahead while its parts were sent went past
    /// [`OWED_ANSWER_BYTES`], or [`Session::charge_owed`] refuses (`read_ahead`: the bytes
    /// read ahead so far).
    pub(super) fn owed_refusal(
        &mut self,
        relayed: &Result<super::relay::Relayed, super::relay::RelayError>,
        read_ahead: usize,
    ) -> Option<(&'static str, String)> {
        use super::relay::RelayError;
        if matches!(relayed, Err(RelayError::Server(e)) if e.kind() == std::io::ErrorKind::OutOfMemory)
        {
            let msg = format!("sluice: a batch without a Sync or Flush owes more than {OWED_ANSWER_BYTES} bytes of answers that the server sent while its parts were forwarded (they wait in sluice's memory until the batch ends)");
            return Some(("54000", msg));
        }
        self.charge_owed(read_ahead)
    }

    /// Keeps what the answers owed by a batch forwarded without its end hold within
    /// `[proxy] max_request_memory` and their count within
    /// [`crate::front::OWED_ANSWERS_PER_SESSION`]; gives the charge back once none are owed.
    /// `read_ahead`: the server's answers read into its connection's buffer meanwhile (see
    /// [`crate::backend::PgConn::send_reading`]), charged too. The SQLSTATE and message that
    /// end the session when a bound is passed.
    pub(super) fn charge_owed(&mut self, read_ahead: usize) -> Option<(&'static str, String)> {
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
        let held = owed.heap_bytes() + read_ahead + self.owed_charge.as_ref().map_or(0, |c| c.held);
        let charge = &mut self.owed_charge.as_mut()?.charge;
        let over = charge.cover(held).err()?;
        let msg = format!(
            "sluice: out of memory for the answers a batch without a Sync or Flush owes: {answers} messages of it wait for their answers, but the requests of all clients may hold at most {} bytes ([proxy] max_request_memory) and {} are in use; the connection is closed, retry later",
            over.limit, over.used
        );
        Some(("53200", msg))
    }
}
