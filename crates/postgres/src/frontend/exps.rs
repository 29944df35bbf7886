//! What a unit's messages draw from the server, in order: the [`Exp`]ectations the relay
//! matches the server's responses against (which ones the client sees, which ones sluice
//! answers itself, what to do when one succeeds or fails).

use super::names::NameMap;
use crate::backend::statements::{Cached, StmtDef};
use std::sync::Arc;

/// The responses one client message (or one sluice adds) draws from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resp {
    /// ParseComplete.
    Parse,
    /// BindComplete.
    Bind,
    /// CloseComplete.
    Close,
    /// ParameterDescription, then RowDescription or NoData.
    DescribeStatement,
    /// RowDescription or NoData.
    DescribePortal,
    /// Rows, then CommandComplete, EmptyQueryResponse or PortalSuspended (or COPY).
    Execute,
    /// ReadyForQuery.
    Sync,
    /// Everything up to ReadyForQuery.
    Query,
}

/// A statement to register when its ParseComplete arrives.
#[derive(Debug)]
pub struct Register {
    /// The client's name for it.
    pub client_name: Box<[u8]>,
    /// The statement.
    pub def: Arc<StmtDef>,
    /// Already the session's: its Parse went in a part of a batch forwarded without its end
    /// (see [`super::unit::End::Partial`]), and the parts after it name it before the server
    /// answers. Its ParseComplete registers nothing more; if the server fails it or skips
    /// it, the session lets it go again.
    pub provisional: bool,
}

impl Register {
    /// A statement the session took as its own before the server answered, whose Parse
    /// failed or was skipped: no longer the session's, unless its name was given to another
    /// since.
    pub fn let_go(self, statements: &mut NameMap<Arc<StmtDef>>) {
        if statements
            .get(&self.client_name)
            .is_some_and(|def| Arc::ptr_eq(def, &self.def))
        {
            statements.remove(&self.client_name);
        }
    }
}

/// One expected response, in order.
#[derive(Debug)]
pub struct Exp {
    /// What the server sends for it.
    pub resp: Resp,
    /// The client sees it (it asked); otherwise sluice added the message and consumes the
    /// answer.
    pub forward: bool,
    /// sluice answers it itself (nothing was sent to the server): this message type, empty.
    pub synth: Option<u8>,
    /// To do when it succeeds.
    pub register: Option<Box<Register>>,
    /// What it does to the connection's shared statements.
    pub shared: Shared,
    /// The server's error for this message is replaced by this one (SQLSTATE, message, and
    /// the fields after them): sluice makes the server fail where PostgreSQL would, for its
    /// own reason.
    pub replace_error: Option<Box<Replacement>>,
}

/// An error sluice gives in place of the server's: SQLSTATE, message, the fields after them.
pub type Replacement = (std::borrow::Cow<'static, str>, String, Vec<(u8, String)>);

impl Exp {
    /// The response to a client's message: the client sees it.
    pub(super) fn pass(resp: Resp) -> Exp {
        Exp {
            resp,
            forward: true,
            synth: None,
            register: None,
            shared: Shared::None,
            replace_error: None,
        }
    }
    /// The response to a message sluice added: consumed.
    pub(super) fn swallow(resp: Resp) -> Exp {
        Exp {
            forward: false,
            ..Exp::pass(resp)
        }
    }
    /// A response sluice gives itself (nothing was sent): this message type, empty.
    pub(super) fn synth(tag: u8) -> Exp {
        Exp {
            synth: Some(tag),
            ..Exp::pass(Resp::Close)
        }
    }
}

/// What a message does to the statements the connection holds under shared names (its
/// record is changed when the message is forwarded; an error or a skip undoes that).
#[derive(Debug, Default)]
pub enum Shared {
    /// Nothing.
    #[default]
    None,
    /// sluice prepares this statement (by key): forgotten if its Parse fails or is skipped.
    Prepares(u64),
    /// A Bind or Describe names this statement (by key: marked stale if the server refuses to
    /// run it as prepared).
    Uses(u64),
    /// A client's Describe of its statement (by key, as [`Shared::Uses`]): the shape of the
    /// result the client is given is noted on the statement (see
    /// [`StmtDef::note_described`]).
    Describes(u64, Arc<StmtDef>),
    /// A client's Describe of a portal bound to one of its named statements: the shape of
    /// the result noted as for [`Shared::Describes`] (drivers such as PgJDBC keep the
    /// portal's description for the statement's later executions).
    DescribesPortal(Arc<StmtDef>),
    /// sluice closes this statement (by key: to make room, or to prepare it afresh): held
    /// again if the server skips the Close, which leaves it there.
    Closes(u64, Box<Cached>),
    /// sluice describes this statement after its first analysis on a server: the
    /// ParameterDescription gives the parameter types that analysis fixed
    /// ([`StmtDef::resolve`]).
    Learns(Arc<StmtDef>),
}

impl Shared {
    /// Undoes, on the connection's record, what messages the server skipped (after an
    /// error) would have done: latest first, so a statement closed and prepared again in the
    /// skipped part ends as it was before.
    pub fn undo_skipped(
        skipped: impl DoubleEndedIterator<Item = Shared>,
        statements: &mut crate::backend::statements::ServerStatements,
    ) {
        for s in skipped.rev() {
            match s {
                Shared::Prepares(key) => statements.forget(key),
                Shared::Closes(key, def) => statements.restore(key, *def),
                Shared::Uses(_)
                | Shared::Describes(..)
                | Shared::DescribesPortal(_)
                | Shared::Learns(_)
                | Shared::None => {}
            }
        }
    }
}

/// Expected responses, oldest first: a queue on the stack for the usual units (up to four
/// answers: a simple query, or libpq's Bind, Describe, Execute and Sync of a prepared
/// statement), taken from the front as the server's responses arrive. Each [`Exp`] is kept
/// at 48 bytes (the rare [`Shared::Closes`] boxed) so that the unit's future, which holds
/// four, fits the allocator's per-thread cache.
#[derive(Debug, Default)]
pub struct Exps {
    items: smallvec::SmallVec<[Exp; 4]>,
    /// Items before it were taken (u32: with `copy_ends`, in the room a usize took; a
    /// statement's future holds this).
    head: u32,
    /// CopyDone or CopyFail messages that went with the unit (a COPY FROM STDIN whose data
    /// the client sent with its Execute): that many COPYs take no data from the client.
    pub copy_ends: u32,
}

impl Exps {
    /// The oldest one not taken.
    pub fn front(&self) -> Option<&Exp> {
        self.items.get(self.head as usize)
    }

    /// The `i`-th of those left, to change.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Exp> {
        self.items.get_mut(self.head as usize + i)
    }

    /// Takes the oldest one.
    pub fn pop_front(&mut self) -> Option<Exp> {
        let slot = self.items.get_mut(self.head as usize)?;
        self.head += 1;
        // What is left in the slot is never read again.
        Some(std::mem::replace(slot, Exp::pass(Resp::Close)))
    }

    /// Keeps the first `n` of those left, drops the rest.
    pub fn truncate(&mut self, n: usize) {
        self.items.truncate(self.head as usize + n);
    }

    /// Adds one at the end.
    pub fn push_back(&mut self, e: Exp) {
        if self.head as usize == self.items.len() && self.head > 0 {
            // All taken: start over, keeping the room.
            self.items.clear();
            self.head = 0;
        }
        self.items.push(e);
    }

    /// The bytes of the heap room the queue took (none while it fits inline).
    pub fn heap_bytes(&self) -> usize {
        if self.items.spilled() {
            self.items.capacity() * std::mem::size_of::<Exp>()
        } else {
            0
        }
    }

    /// The bytes the ones left hold on the heap beyond their slots: boxed registrations
    /// with their names, replacing errors with their texts.
    pub fn held_bytes(&self) -> usize {
        self.iter()
            .map(|e| {
                let register = e
                    .register
                    .as_ref()
                    .map_or(0, |r| std::mem::size_of::<Register>() + r.client_name.len());
                let error = e.replace_error.as_ref().map_or(0, |r| {
                    std::mem::size_of::<Replacement>()
                        + r.0.len()
                        + r.1.len()
                        + r.2.iter().map(|f| 32 + f.1.len()).sum::<usize>()
                });
                register + error
            })
            .sum()
    }

    /// How many are left.
    pub fn len(&self) -> usize {
        self.items.len() - self.head as usize
    }

    /// None left.
    pub fn is_empty(&self) -> bool {
        self.head as usize == self.items.len()
    }

    /// The ones left, oldest first.
    pub fn iter(&self) -> std::slice::Iter<'_, Exp> {
        self.items[self.head as usize..].iter()
    }

    /// The ones left, oldest first, to change.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Exp> {
        self.items[self.head as usize..].iter_mut()
    }

    /// The statements these (a part of a batch forwarded without its end) parse are the
    /// session's at once (see [`Register::provisional`]): the parts after it bind, describe
    /// and close them, or are refused a second Parse of their names, as PostgreSQL would,
    /// and no part looks through the answers the batch owes (a million at most) for them.
    pub fn take_provisionally(&mut self, statements: &mut NameMap<Arc<StmtDef>>) {
        for e in self.iter_mut() {
            if let Some(reg) = &mut e.register {
                reg.provisional = true;
                statements.insert(reg.client_name.clone(), reg.def.clone());
            }
        }
    }

    /// Moves all of `other` after these.
    pub fn append(&mut self, other: &mut Exps) {
        while let Some(e) = other.pop_front() {
            self.push_back(e);
        }
        self.copy_ends += std::mem::take(&mut other.copy_ends);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::statements::{Ensure, ServerStatements};

    fn def(sql: &str) -> Arc<StmtDef> {
        Arc::new(StmtDef::new(sql.as_bytes(), &[0, 0]))
    }

    #[test]
    fn what_the_server_skipped_is_undone_latest_first() {
        let mut s = ServerStatements::new(1);
        let (old, new) = (def("select 1"), def("select 2"));
        let (old_key, _) = s.ensure(&old);
        // Full: preparing `new` closes `old` first; the server skips both.
        let (
            new_key,
            Ensure::Prepare {
                evict: Some((k, closed)),
            },
        ) = s.ensure(&new)
        else {
            panic!("must evict")
        };
        let skipped = [
            Shared::Closes(k, Box::new(closed)),
            Shared::Prepares(new_key),
        ];
        Shared::undo_skipped(skipped.into_iter(), &mut s);
        assert!(
            matches!(s.ensure(&old).1, Ensure::Held),
            "still on the server"
        );
        // Prepared afresh (Close, then Parse of the same name), both skipped: still held.
        let skipped = [
            Shared::Closes(old_key, Box::new(Cached::of(&old))),
            Shared::Prepares(old_key),
        ];
        Shared::undo_skipped(skipped.into_iter(), &mut s);
        assert!(matches!(s.ensure(&old).1, Ensure::Held));
        // Prepared in the skipped part, then closed there: never on the server.
        let mut s = ServerStatements::new(4);
        let (k, _) = s.ensure(&new);
        let skipped = [
            Shared::Prepares(k),
            Shared::Closes(k, Box::new(Cached::of(&new))),
        ];
        Shared::undo_skipped(skipped.into_iter(), &mut s);
        assert!(s.is_empty());
    }
}
