//! What an open transaction block does to a session's settings: its `SET`s wait for it to
//! commit, and the startup parameters its `RESET`s returned to the server's defaults are set
//! again inside it (see [`Settings::defer`]).

use super::{Change, Settings};

/// What an open transaction block changed.
#[derive(Debug, Default)]
pub(super) struct BlockChanges {
    /// `SET`s inside the block: applied if it commits.
    pub(super) pending: Vec<Change>,
    /// Startup parameters a `RESET` in the block returned to the server's defaults (its
    /// connections start without them): set to their startup values again before the
    /// block's next statement, as PostgreSQL's `RESET` returns to those.
    pub(super) resets: Vec<Box<str>>,
}

impl Settings {
    /// Records a change made inside a transaction block.
    pub fn defer(&mut self, change: Change) {
        match &change {
            Change::Set(name, _) => self.set_in_block(name),
            Change::SetLocal(name, _) => {
                // The block's value until it ends, whatever it commits.
                self.set_in_block(name);
                return;
            }
            Change::Reset(name) => self.reset_in_block(|n| n == name),
            Change::ResetAll | Change::DiscardAll => self.reset_in_block(|_| true),
        }
        self.block
            .get_or_insert_with(Default::default)
            .pending
            .push(change);
    }

    /// A startup parameter set in the open block is not one to set back to its startup
    /// value any more.
    fn set_in_block(&mut self, name: &str) {
        if let Some(block) = &mut self.block {
            block.resets.retain(|n| **n != *name);
        }
    }

    /// Notes the startup parameters `which` names as reset in the open block.
    fn reset_in_block(&mut self, which: impl Fn(&str) -> bool) {
        for (n, _) in self.startup.iter().filter(|(n, _)| which(n)) {
            let block = self.block.get_or_insert_with(Default::default);
            if !block.resets.contains(n) {
                block.resets.push(n.clone());
            }
        }
    }

    /// The statements that set the startup parameters a `RESET` in the open block returned
    /// to the server's defaults back to their startup values (once: the list is emptied).
    /// Run inside the block, they commit or roll back with the `RESET`.
    pub fn take_block_resets(&mut self) -> Option<Vec<Box<str>>> {
        let names = match &mut self.block {
            Some(block) if !block.resets.is_empty() => std::mem::take(&mut block.resets),
            _ => return None,
        };
        Some(
            names
                .iter()
                .filter_map(|n| self.startup.iter().find(|(s, _)| s == n))
                .map(|(_, stmt)| stmt.clone())
                .collect(),
        )
    }

    /// True if changes wait for the transaction block to end.
    pub fn has_pending(&self) -> bool {
        self.block.as_ref().is_some_and(|b| !b.pending.is_empty())
    }

    /// The transaction block ended with `COMMIT AND CHAIN` (`committed`) or `ROLLBACK AND
    /// CHAIN`, and the next one is open: as [`Settings::end_transaction`], and the startup
    /// parameters a committed `RESET` of the text that ended it returned to the server's
    /// defaults are set again in the new block, before its first statement.
    pub fn chain_transaction(&mut self, committed: bool) {
        let resets = match &mut self.block {
            Some(block) if committed => std::mem::take(&mut block.resets),
            _ => Vec::new(),
        };
        self.end_transaction(committed);
        if !resets.is_empty() {
            self.block = Some(Box::new(BlockChanges {
                pending: Vec::new(),
                resets,
            }));
        }
    }

    /// The transaction block ended: its changes apply if it committed.
    pub fn end_transaction(&mut self, committed: bool) {
        let Some(block) = self.block.take() else {
            return;
        };
        if committed {
            for c in block.pending {
                self.apply(c);
            }
        }
    }
}
