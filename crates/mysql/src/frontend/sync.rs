//! Restoring a session's state on a backend connection before a statement runs on it: only
//! the differences, computed by [`crate::state::plan`].

use super::exec::Attached;
use super::scan::ServerError;
use super::session::Session;
use crate::state;
use crate::wire::consts::com;
use sluice_sqlscan::Effects;

impl Session {
    /// Brings the connection's session state to the session's, telling the client nothing.
    pub(crate) async fn sync_quiet(
        &mut self,
        att: &mut Attached,
        effects: Effects,
    ) -> Result<(), SyncError> {
        let lid = self.st.last_insert_id;
        let conn = att.lease.conn();
        let extra = (effects.intersects(Effects::LAST_INSERT_ID_READ)
            && !att.insert_dirty
            && conn.state.last_insert_id != Some(lid))
        .then(|| format!("@@session.last_insert_id={lid}"));
        let plan = state::plan(&self.st.tracked, &conn.state.tracked, extra.clone());
        if plan.is_empty() {
            return Ok(());
        }
        self.apply_plan(att, plan).await?;
        if extra.is_some() {
            att.conn().state.last_insert_id = Some(lid);
            // Not 0 any more: restore it before the connection is pooled again.
            att.insert_dirty = true;
        }
        Ok(())
    }

    pub(crate) async fn apply_plan(
        &mut self,
        att: &mut Attached,
        plan: state::SyncPlan,
    ) -> Result<(), SyncError> {
        let user = self.user.clone();
        let conn = att.conn();
        if plan.needs_reset {
            conn.change_user(&user.name, &user.password, None).await?;
        }
        if let Some(db) = &plan.init_db {
            let ok = conn.simple(com::INIT_DB, db.as_bytes()).await?;
            conn.state.tracked.apply(&ok.session_state);
            conn.state.tracked.schema = Some(db.clone());
        }
        if let Some(sql) = &plan.set_sql {
            conn.exec(sql).await.map_err(SyncError::from)?;
            conn.state.tracked.vars = self.st.tracked.vars.clone();
        }
        if let Some(on) = plan.multi_statements {
            // MYSQL_OPTION_MULTI_STATEMENTS_ON = 0, _OFF = 1
            conn.simple(com::SET_OPTION, &[if on { 0 } else { 1 }, 0])
                .await?;
            conn.state.tracked.multi_statements = on;
        }
        Ok(())
    }
}

/// Why session state could not be restored on a connection.
pub(crate) enum SyncError {
    Server(ServerError),
    Io(std::io::Error),
}

impl From<std::io::Error> for SyncError {
    fn from(e: std::io::Error) -> Self {
        SyncError::Io(e)
    }
}

impl From<crate::backend::BackendError> for SyncError {
    fn from(e: crate::backend::BackendError) -> Self {
        match e {
            crate::backend::BackendError::Server {
                code,
                sqlstate,
                message,
            } => SyncError::Server(ServerError {
                kind: sluice_core::ErrorKind::Server,
                code,
                sqlstate,
                message,
            }),
            crate::backend::BackendError::Io(e) => SyncError::Io(e),
            crate::backend::BackendError::Protocol(m) => SyncError::Io(std::io::Error::other(m)),
        }
    }
}
