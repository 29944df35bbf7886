//! What a hostgroup's mutex guards: each server's pool (idle connections and counts) and the
//! queue of statements waiting, and the grant that hands a connection to a waiter.

use super::Hostgroup;
use crate::balance::Candidate;
use crate::error::ConnectError;
use crate::hostgroup::PoolKey;
use crate::pool_growth::Growth;
use crate::server::Server;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub(super) struct Idle<C> {
    pub(super) key: PoolKey,
    pub(super) conn: C,
    /// When the once-a-second sweep ([`Hostgroup::close_idle`]) first found it idle: not
    /// stamped when it comes back (a clock read on every release), so it closes between the
    /// idle timeout and a second more after its last use.
    pub(super) since: Option<Instant>,
}

/// A member's number in its hostgroup: what a lease, a grant and a connect carry back, so
/// that a connection lent by a member that has left since (its server removed, even if the
/// same server was put back) is never taken for one of the new member's. 32 bits, which fit
/// in a lease's padding (every session holding a connection holds a lease): numbers would
/// come round again after four billion servers joined and left one hostgroup.
pub(super) type MemberId = u32;

pub(super) struct Member<C> {
    pub(super) id: MemberId,
    pub(super) server: Arc<Server>,
    pub(super) idle: Vec<Idle<C>>,
    /// Connections that exist or are being opened (idle + lent + connecting).
    pub(super) open: u32,
    /// Connections lent out.
    pub(super) lent: u32,
    /// Connections being opened.
    pub(super) connecting: u32,
    /// The most connections it ever had open at once.
    pub(super) peak_open: u32,
    /// How far the connect limit has grown while nothing came back.
    pub(super) growth: Growth,
    /// Connections to the same address still lent (or being opened) by members that left
    /// ([`Departed`]): counted in `open`, so the server's limit holds across a removal, and
    /// closed as they come back.
    pub(super) ghosts: u32,
}

/// A member that left its hostgroup while connections of its were lent or being opened.
pub(super) struct Departed {
    pub(super) id: MemberId,
    /// When it left, on the scale of member ids: members numbered above count its
    /// connections as their ghosts.
    pub(super) left: MemberId,
    pub(super) address: Arc<str>,
    /// Connections still out.
    pub(super) out: u32,
}

impl<C> Member<C> {
    pub(super) fn new(id: MemberId, server: Arc<Server>) -> Self {
        Member {
            id,
            server,
            idle: Vec::new(),
            open: 0,
            lent: 0,
            connecting: 0,
            peak_open: 0,
            growth: Growth::default(),
            ghosts: 0,
        }
    }

    /// May one more connect to this server start now (possibly by closing an idle connection
    /// of another key to make room)?
    pub(super) fn can_open(&self, max_connecting: u32) -> bool {
        let max = self.server.max_connections();
        self.server.is_usable()
            && self.connecting < self.growth.limit(max_connecting, max)
            && (self.open < max || !self.idle.is_empty())
    }

    pub(super) fn candidate(&self) -> Candidate {
        Candidate {
            weight: self.server.weight(),
            in_flight: self.in_use(),
        }
    }

    /// Closes its idle connections (into `closing`, to be dropped outside the lock).
    pub(super) fn close_idle(&mut self, closing: &mut Vec<C>) {
        self.open -= self.idle.len() as u32;
        closing.extend(self.idle.drain(..).map(|idle| idle.conn));
    }

    /// Lent out or being opened, by this member or by one that left ([`Member::ghosts`]).
    pub(super) fn in_use(&self) -> u32 {
        self.lent + self.connecting + self.ghosts
    }
}

/// A connection handed to a waiter. If the waiter gave up before taking it, dropping it gives
/// it back to the hostgroup, so no capacity leaks.
pub(super) struct Grant<C> {
    pub(super) hostgroup: Weak<Hostgroup<C>>,
    pub(super) member: MemberId,
    pub(super) server: Arc<Server>,
    pub(super) key: PoolKey,
    pub(super) conn: Option<C>,
}

impl<C> Grant<C> {
    pub(super) fn take(mut self) -> (MemberId, Arc<Server>, Option<C>) {
        (self.member, self.server.clone(), self.conn.take())
    }
}

impl<C> Drop for Grant<C> {
    fn drop(&mut self) {
        if let (Some(c), Some(hg)) = (self.conn.take(), self.hostgroup.upgrade()) {
            hg.release(self.member, self.key.clone(), Some(c), false);
        }
    }
}

/// What a waiter is woken with.
pub(super) enum Handoff<C> {
    /// A connection (coming back, or just opened).
    Conn(Grant<C>),
    /// A connect made for the queue failed; the first waiter for its key hears why.
    Failed(ConnectError),
    /// Its deadline passed (told by the hostgroup's sweeper: see [`super::sweep`]).
    Expired,
}

pub(super) struct Waiter<C> {
    pub(super) key: PoolKey,
    pub(super) tx: oneshot::Sender<Handoff<C>>,
    /// When it stops waiting.
    pub(super) deadline: tokio::time::Instant,
}

/// Starts a task that opens a connection to `server` for `key` and reports to the hostgroup.
/// Returns false if it could not be started (no runtime).
pub(super) type Opener = Arc<dyn Fn(Arc<Server>, PoolKey, Opening) -> bool + Send + Sync>;

/// What a connect task carries back.
#[derive(Clone, Copy)]
pub(super) struct Opening {
    /// The member it opens for.
    pub(super) member: MemberId,
    /// The hostgroup's count of returns when the connect started.
    pub(super) returns: u64,
    /// Time allowed.
    pub(super) timeout: Duration,
}

pub(super) struct State<C> {
    pub(super) members: Vec<Member<C>>,
    /// Oldest first. Waiters that gave up stay until they reach the front (or the queue is
    /// full), so that no operation costs as much as the queue is long.
    pub(super) waiters: VecDeque<Waiter<C>>,
    /// Connections that came back (reusable), ever: tells a connect whether any did while it
    /// ran.
    pub(super) returns: u64,
    /// Opens connections for the queue, with the connector statements came with; and that
    /// connector's address, to notice a different one.
    pub(super) opener: Option<(Opener, usize)>,
    /// The most statements that ever held or waited for a connection at once.
    pub(super) peak_demand: u32,
    /// While anyone waits: when the sweeper of deadlines wakes next (`None`: it does not run).
    pub(super) sweep_at: Option<tokio::time::Instant>,
    /// Members that left with connections still out.
    pub(super) departed: Vec<Departed>,
    /// The last number given to a member or a departure (see [`State::serial`]).
    pub(super) next_member: MemberId,
}

impl<C> State<C> {
    /// Removes waiters that gave up from the front of the queue.
    pub(super) fn drop_stale_front(&mut self) {
        while self.waiters.front().is_some_and(|w| w.tx.is_closed()) {
            self.waiters.pop_front();
        }
    }

    /// Hands `h` to the oldest live waiter for `key`; gives it back if there is none.
    pub(super) fn hand_to_waiter(
        &mut self,
        key: &PoolKey,
        mut h: Handoff<C>,
    ) -> Option<Handoff<C>> {
        self.drop_stale_front();
        loop {
            // Almost always the front one: keys differ only between users and client flavours.
            let Some(pos) = self
                .waiters
                .iter()
                .position(|w| &w.key == key && !w.tx.is_closed())
            else {
                return Some(h);
            };
            let Some(w) = self.waiters.remove(pos) else {
                return Some(h);
            };
            match w.tx.send(h) {
                Ok(()) => return None,
                Err(back) => h = back, // it left just now: the next one
            }
        }
    }

    /// A statement was lent a connection or joined the queue.
    pub(super) fn note_demand(&mut self) {
        let lent: u32 = self.members.iter().map(|m| m.lent).sum();
        let demand = lent.saturating_add(self.waiters.len() as u32);
        self.peak_demand = self.peak_demand.max(demand);
    }

    pub(super) fn member(&self, server: &Arc<Server>) -> Option<usize> {
        self.members
            .iter()
            .position(|m| Arc::ptr_eq(&m.server, server))
    }

    /// The member numbered `id`, if it is still one.
    pub(super) fn member_by_id(&self, id: MemberId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// The next number on the scale of member ids and departures.
    pub(super) fn serial(&mut self) -> MemberId {
        self.next_member = self.next_member.wrapping_add(1);
        self.next_member
    }

    /// A new member for `server`, counting the connections to its address that members
    /// which left still have out.
    pub(super) fn new_member(&mut self, server: Arc<Server>) -> Member<C> {
        let mut m = Member::new(self.serial(), server);
        m.ghosts = self
            .departed
            .iter()
            .filter(|d| d.address == m.server.address)
            .map(|d| d.out)
            .sum();
        m.open = m.ghosts;
        m.peak_open = m.open;
        m
    }

    /// A connection of member `id` came back (closed by the caller), or a connect for it ended,
    /// after the member left: it is no longer counted. Its address, if the member was known.
    pub(super) fn departed_returned(&mut self, id: MemberId) -> Option<Arc<str>> {
        let pos = self.departed.iter().position(|d| d.id == id)?;
        let d = &mut self.departed[pos];
        d.out -= 1;
        let (address, left) = (d.address.clone(), d.left);
        if d.out == 0 {
            self.departed.swap_remove(pos);
        }
        // Every member that counted it (one, unless the address is in the hostgroup twice).
        for m in self.members.iter_mut() {
            if m.id > left && m.server.address == address {
                m.ghosts -= 1;
                m.open -= 1;
            }
        }
        Some(address)
    }
}
