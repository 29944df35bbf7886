//! A lent connection coming back: to the first waiter for its key, or idle; or closed, when
//! its session broke it, its server went over its limit or out of service, or the member
//! that lent it has left the hostgroup.

use super::{Handoff, Hostgroup, Idle, MemberId, PoolKey, State};

impl<C> Hostgroup<C> {
    /// A connection of `member` comes back (`None`: its lease closed it); `lost`: its server
    /// closed it under a statement (see [`super::Lease::lost`]).
    pub(super) fn release(&self, member: MemberId, key: PoolKey, conn: Option<C>, lost: bool) {
        let mut closing: Vec<C> = Vec::new();
        {
            let mut st = self.state.lock();
            match st.member_by_id(member) {
                Some(i) => self.returned(&mut st, i, key, conn, lost, &mut closing),
                None => {
                    // Its member left the hostgroup (a reload, the admin API, the monitor),
                    // even if its server came back since: it closes, and counts no more.
                    // Lost, it takes the idle connections to its address along (see
                    // `Lease::lost`).
                    closing.extend(conn);
                    let address = st.departed_returned(member);
                    if let Some(address) = address.filter(|_| lost) {
                        let same = st
                            .members
                            .iter_mut()
                            .filter(|m| m.server.address == address);
                        same.for_each(|m| m.close_idle(&mut closing));
                    }
                }
            }
            // Room may have been freed for waiters of another key.
            self.grow(&mut st, &mut closing);
        }
        drop(closing);
    }

    /// [`Hostgroup::release`] to member `i`, which lent it.
    fn returned(
        &self,
        st: &mut State<C>,
        i: usize,
        key: PoolKey,
        conn: Option<C>,
        lost: bool,
        closing: &mut Vec<C>,
    ) {
        let m = &mut st.members[i];
        m.lent = m.lent.saturating_sub(1);
        if lost {
            // Its server's other idle connections go too (see `Lease::lost`).
            m.close_idle(closing);
        }
        let keep = m.open <= m.server.max_connections() && m.server.is_usable();
        match conn {
            Some(c) if keep => {
                // Connections come back: the queue is served by returns again.
                st.returns += 1;
                st.members.iter_mut().for_each(|m| m.growth.returned());
                self.hand_out(st, i, key, c);
            }
            Some(c) => {
                closing.push(c);
                st.members[i].open -= 1;
            }
            None => st.members[i].open -= 1,
        }
    }

    /// Gives a connection of member `i` to the oldest waiter for `key`, or keeps it idle.
    pub(super) fn hand_out(&self, st: &mut State<C>, i: usize, key: PoolKey, conn: C) {
        if st.waiters.is_empty() {
            // No one waits (the usual case): it stays idle.
            st.members[i].idle.push(Idle {
                key,
                conn,
                since: None,
            });
            return;
        }
        let (member, server) = (st.members[i].id, st.members[i].server.clone());
        st.members[i].lent += 1;
        let grant = Handoff::Conn(self.grant(member, &server, &key, conn));
        if let Some(Handoff::Conn(back)) = st.hand_to_waiter(&key, grant) {
            // No one waits for this key: keep it.
            let m = &mut st.members[i];
            m.lent -= 1;
            if let (_, _, Some(conn)) = back.take() {
                m.idle.push(Idle {
                    key,
                    conn,
                    since: None,
                });
            }
        }
    }
}
