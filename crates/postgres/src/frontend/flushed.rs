//! A connection a session keeps after a batch it ended with a Flush outside a transaction
//! (asyncpg prepares with Parse, Describe, Flush; psycopg's pipeline mode fetches rows so):
//! the server holds the batch's implicit transaction open. When the next unit belongs
//! elsewhere, sluice ends that transaction with a Sync of its own and gives the connection
//! back; what the batch changed takes effect then, as at the client's own Sync.

use super::session::{Session, SessionError};
use super::unit::{self, Unit};
use crate::wire::ReadyStatus;

impl Session {
    /// After a unit that ended with a Flush outside a transaction (no portal open, nothing
    /// pinned): if the next unit belongs elsewhere (a write after a prepared read), the
    /// connection's implicit transaction is ended with a Sync and the connection goes back,
    /// so that the unit is routed afresh.
    pub(super) async fn leave_flushed(
        &mut self,
        unit: &Unit,
        defs: &unit::Defs,
    ) -> Result<(), SessionError> {
        let Some(held) = self.lease.as_ref().map(|l| l.hostgroup().clone()) else {
            return Ok(());
        };
        if !self.portals.is_empty() && !self.portal_may_go(unit, &held) {
            return Ok(());
        }
        match self.route(unit, defs) {
            // (Else the batch opened a transaction block itself: the session is in it, on
            // this connection, wherever its next statement would go.)
            Ok(d) if d.hostgroup != held && self.sync_flushed().await? == ReadyStatus::Idle => {
                self.release();
            }
            _ => {}
        }
        Ok(())
    }

    /// Ends the implicit transaction a batch the client ended with a Flush left open on the
    /// leased connection, with a Sync of sluice's own: what the batch changed takes effect
    /// with it (or is the block's the batch opened, whose status is returned); outside a
    /// block, read-your-writes reads where the primary's WAL is now, what its `set_config`
    /// calls set is read back, and its portals are gone.
    pub(super) async fn sync_flushed(&mut self) -> Result<ReadyStatus, SessionError> {
        let status = self.hidden(crate::wire::SYNC).await?;
        self.implicit_synced(status);
        if status == ReadyStatus::Idle {
            self.ryw_after(&[], true).await?;
            if self.read_back_due() {
                self.ask_after_unit(false, true).await?;
            }
            self.portals.empty();
        }
        Ok(status)
    }

    /// The connection the session holds has the implicit transaction of a batch the client
    /// ended with a Flush open (outside a transaction block).
    pub(super) fn flushed_batch_open(&self) -> bool {
        self.status == ReadyStatus::Idle
            && self.lease.as_ref().is_some_and(|l| l.conn_ref().unsynced)
    }

    /// A unit sluice refuses (see [`Session::refuse_unit`]) while the connection it holds
    /// since a Flush has the batch's implicit transaction open: the client is told of an
    /// error before its Sync, and directly that error rolls the batch back (or fails the
    /// block the batch opened). The server is given an error of its own (answers not
    /// relayed), so that it does the same; what the batch changed is forgotten as after any
    /// failed batch, and an idle connection goes back. (Else the batch's writes would commit
    /// at the next Sync sent there: the client was told they failed.)
    pub(super) async fn fail_flushed_batch(&mut self) -> Result<(), SessionError> {
        let status = self
            .fail_on_server(Vec::new(), "cannot roll back the batch on the server")
            .await?;
        self.implicit_failed = true;
        self.implicit_synced(status);
        if status == ReadyStatus::Idle {
            // The rollback closed the implicit transaction's portals.
            self.portals.empty();
            if self.pins == 0 {
                self.release();
            }
        }
        Ok(())
    }

    /// After a Flush-ended batch: the only portal open is the unnamed one, and everything
    /// the implicit transaction ran is a read (psycopg's pipeline mode fetches a query's rows
    /// with a Flush, before the Sync): leaving it takes nothing that has to commit. (Not
    /// where the session's transactions keep one snapshot: the read and what follows it
    /// would see two.)
    pub(super) fn only_unnamed_read_portal(&self) -> bool {
        self.implicit_reads_only
            && self.portals.len() == 1
            && self.portals.get(b"").is_some()
            && !self.settings.one_snapshot_by_default()
    }

    /// Whether the next unit may go elsewhere although the unnamed portal is open on the
    /// connection held since a Flush (see [`Session::only_unnamed_read_portal`]): not from
    /// the writer's hostgroup (there the unit runs in the same implicit transaction, as
    /// directly), not when the unit goes on with the portal, and not when the portal is
    /// suspended unless the unit replaces it (a later unit could take more rows).
    fn portal_may_go(&self, unit: &Unit, held: &str) -> bool {
        if *held == *self.fe.topology.router.writer {
            return false;
        }
        match unit::unnamed_portal_use(&self.client.buf, unit) {
            unit::PortalUse::Continues => false,
            unit::PortalUse::Rebinds => true,
            unit::PortalUse::Untouched => !self.implicit_suspended,
        }
    }

    /// The Sync sluice sent after a batch the client ended with a Flush ended its implicit
    /// transaction (`status`: the server's answer, a block the batch opened, or none): what
    /// the batch changed took effect with it (or is now the block's), as after a unit that
    /// brought that ReadyForQuery.
    pub(super) fn implicit_synced(&mut self, status: ReadyStatus) {
        self.status = status;
        if let Some(mut lease) = self.lease.take() {
            let relayed = super::relay::Relayed {
                status: Some(status),
                ..Default::default()
            };
            self.track(&[], ReadyStatus::Idle, &relayed, &mut lease);
            self.lease = Some(lease);
        }
    }
}
