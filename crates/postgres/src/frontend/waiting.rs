//! Between units: waiting for the client's next complete unit, and while the session holds a
//! connection (a transaction block, a pin) passing on what the server sends meanwhile
//! (notifications, notices, parameter changes).

use super::session::{client_err, Session, SessionError};
use super::unit::{self, Unit};
use crate::wire::WireError;

impl Session {
    /// Waits for the next complete unit (passing on what a pinned connection sends
    /// meanwhile: notifications).
    pub(super) async fn next_unit(&mut self) -> Result<Unit, SessionError> {
        loop {
            // The look-up's result is matched apart from any await: kept alive across one, it
            // would take its room (a unit's) in every idle session's future.
            let refused = match self.buffered_unit() {
                Ok(Some(u)) => return Ok(u),
                Ok(None) => None,
                Err(e @ (WireError::MessageType(_) | WireError::TooLong { .. })) => {
                    Some(e.to_string())
                }
                Err(e) => return Err(client_err(e)),
            };
            if let Some(msg) = refused {
                // As PostgreSQL answers a message type it does not know; PostgreSQL closes
                // the connection without a word for a message above its limit (boxed: an
                // idle session does not carry this).
                let _ = Box::pin(self.client.fatal("08P01", &msg)).await;
                return Err(SessionError::Refused(msg));
            }
            if self.lease.is_some() {
                // Boxed: an idle session without a connection does not carry this state.
                Box::pin(self.wait_on_lease()).await?;
            } else {
                self.client.fill_idle().await.map_err(client_err)?;
            }
        }
    }

    /// The next unit, if the client's buffer holds all of it.
    fn buffered_unit(&self) -> Result<Option<Unit>, WireError> {
        let client = &self.client;
        unit::next_unit(&client.buf, |at| {
            Ok(client.message_at(at)?.map(|(m, len)| (m.tag, len)))
        })
    }

    /// Waits for the client's next bytes while holding a connection, passing on what the
    /// server sends meanwhile. Not while a batch forwarded without its end is owed answers:
    /// those are the next unit's relay's to match (passed on here, they would be awaited
    /// there for ever); the server's socket buffers hold them until then.
    async fn wait_on_lease(&mut self) -> Result<(), SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        if self.owed.is_some() {
            return self.client.fill().await.map_err(client_err);
        }
        let conn = lease.conn();
        tokio::select! {
            r = self.client.fill() => r.map_err(client_err),
            r = conn.readable() => {
                r.map_err(client_err)?;
                self.pass_async().await
            }
        }
    }

    /// Passes on what the server sent on its own (notifications, notices, parameter
    /// changes) while the session is idle on its connection.
    async fn pass_async(&mut self) -> Result<(), SessionError> {
        let Some(lease) = &mut self.lease else {
            return Ok(());
        };
        let conn = lease.conn();
        // Never a read that waits: with stale readiness it would wait for the server while
        // the client's next unit sits unread (a transaction hung; seen in the driver suite).
        let lost = match conn.peek() {
            Ok(Some(_)) => false,
            Ok(None) => conn.try_fill().is_err(),
            Err(_) => true,
        };
        if lost {
            // As under a statement: inside a transaction block, that it was rolled back.
            let closed = std::io::Error::other("the server closed it");
            let (code, msg) = super::refuse::lost(self.status, &[], lease.server(), &closed);
            let _ = self.client.fatal(code, &msg).await;
            return Err(SessionError::Refused(msg));
        }
        let mut out = Vec::new();
        // The server's own FATAL (57P01 after `pg_terminate_backend`): the client hears it,
        // then the end of the connection, as directly, without a word of sluice's after it.
        let mut told_fatal = false;
        while let Ok(Some((m, len))) = conn.peek() {
            let tag = m.tag;
            told_fatal |= tag == b'E' && crate::wire::message::ends_session(m.body);
            if tag == b'S' {
                // The client sees it, and the connection has it (for the next session).
                let kv = crate::backend::conn::parameter_status(m.body)
                    .map(|(k, v)| (k.to_string(), v.to_string()));
                if let Some((k, v)) = kv {
                    crate::backend::conn::keep_parameter(&mut self.reported, &k, &v);
                    crate::backend::conn::keep_parameter(&mut conn.params, &k, &v);
                }
            }
            let own = match tag {
                b'A' => super::relay::own_notification(
                    &conn.buffered()[..len],
                    conn.backend_key.0,
                    self.handle.id,
                ),
                _ => None,
            };
            match own {
                Some(own) => out.extend_from_slice(&own),
                None => out.extend_from_slice(&conn.buffered()[..len]),
            }
            conn.consume(len);
        }
        self.client.send(&out).await.map_err(client_err)?;
        if told_fatal {
            lease.discard();
            return Err(SessionError::Refused("the server ended the session".into()));
        }
        Ok(())
    }
}
