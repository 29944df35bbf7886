//! A lent connection coming back: to the first waiter for its key, or idle; or closed, when
//! its session broke it, its server went over its limit or out of service, or the member
//! that lent it has left the hostgroup.

use super::{Handoff, Hostgroup, Idle, Member, MemberId, PoolKey, State};

impl<C> Hostgroup<C> {
    /// A connection of `member` comes back (`None`: its lease closed it); `lost`: its server
    /// closed it under a statement (see [`super::Lease::lost`]).
    pub(super) fn release(&self, member: MemberId, key: PoolKey, conn: Option<C>, lost: bool) {
        let mut closing: Vec<C> = Vec::new();
        {
            let mut st = self.state.lock();
            let Some(i) = st.member_by_id(member) else {
                // Its member left the hostgroup (a reload, the admin API, the monitor), even
                // if its server came back since: it closes, and counts no more. Lost, it
                // takes the idle connections to its address with it, as below.
                let address = st.departed_returned(member);
                closing.extend(conn);
                let same = |m: &&mut Member<C>| address.as_deref() == Some(&*m.server.address);
                for m in st.members.iter_mut().filter(same).filter(|_| lost) {
                    m.open -= m.idle.len() as u32;
                    closing.extend(m.idle.drain(..).map(|idle| idle.conn));
                }
                self.grow(&mut st, &mut closing);
                drop(st);
                drop(closing);
                return;
            };
            let m = &mut st.members[i];
            m.lent = m.lent.saturating_sub(1);
            if lost {
                // Its server's other idle connections go too (see `Lease::lost`).
                m.open -= m.idle.len() as u32;
                closing.extend(m.idle.drain(..).map(|idle| idle.conn));
            }
            let keep = m.open <= m.server.max_connections() && m.server.is_usable();
            match conn {
                Some(c) if keep => {
                    // Connections come back: the queue is served by returns again.
                    st.returns += 1;
                    st.members.iter_mut().for_each(|m| m.growth.returned());
                    self.hand_out(&mut st, i, key, c);
                }
                Some(c) => {
                    closing.push(c);
                    st.members[i].open -= 1;
                }
                None => st.members[i].open -= 1,
            }
            // Room may have been freed for waiters of another key.
            self.grow(&mut st, &mut closing);
        }
        drop(closing);
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
