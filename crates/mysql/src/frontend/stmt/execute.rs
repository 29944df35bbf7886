//! COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA.

use super::params::ExecuteTypes;
use super::{with_backend_id, Session};
use crate::frontend::exec::Target;
use crate::frontend::pipeline::{Body, Execute, Stmt};
use crate::frontend::scan::Expect;
use crate::frontend::session::Fatal;
use crate::wire::consts::err;
use sluice_sqlscan::{Effects, Route};

impl Session {
    /// COM_STMT_EXECUTE: routed like the statement's text; prepared on the chosen connection
    /// if it has not seen it, with the parameter types re-sent when needed.
    pub(crate) async fn stmt_execute(&mut self, payload: bytes::BytesMut) -> Result<(), Fatal> {
        let Some(id) = self.known_stmt(&payload, "mysqld_stmt_execute").await? else {
            return Ok(());
        };
        // `known_stmt` found it.
        let Some(stmt) = self.stmts.map.get_mut(&id) else {
            return Ok(());
        };
        if let Some(msg) = stmt.deferred_error.take() {
            stmt.long_data = false;
            self.refresh_stmt_pins();
            return self.reply_err(err::BACKEND_LOST, b"08S01", &msg).await;
        }
        // Where the parameter types are, and whether this execute carries them.
        let params = stmt.params as usize;
        let layout = ExecuteTypes::read(&payload, stmt.params);
        if let Some(t) = layout.types {
            stmt.types = Some(t.into());
        }
        let key = stmt.key.clone();
        let scan = stmt.scan.clone();
        let types = stmt.types.clone();
        let needs_held = stmt.long_data || stmt.cursor;
        let effects = scan.effects;
        let read = scan.route() == Route::Read;

        self.handle.set_statement(Some(&key.sql));
        self.drop_previous_unless_needed(effects).await;
        let target = if needs_held && self.held.is_some() {
            Target::Held
        } else {
            match self.target(&scan, &key.sql) {
                Ok(t) => t,
                Err(msg) => {
                    return self
                        .reply_err(err::ROUTING, b"HY000", &format!("sluice: {msg}"))
                        .await
                }
            }
        };
        let stmt = Stmt {
            target,
            body: Body::Execute(Execute {
                id,
                payload: &payload,
                layout,
                key: key.clone(),
                types,
                params,
            }),
            expect: Expect::Execute,
            effects,
            sql: None,
            read,
            shown: true,
        };
        let result = self.run_stmt(stmt).await;
        self.handle.set_statement(None);
        result
    }

    /// COM_STMT_SEND_LONG_DATA (no response): delivered to the connection that will execute
    /// the statement, which stays pinned until then. The command has no answer, so failures
    /// are kept and reported by the next execute.
    pub(crate) async fn stmt_send_long_data(
        &mut self,
        payload: bytes::BytesMut,
    ) -> Result<(), Fatal> {
        let Some(id) = super::stmt_id(&payload) else {
            return Ok(());
        };
        let Some(stmt) = self.stmts.map.get(&id) else {
            return Ok(()); // the server, too, reports this only at execute
        };
        let (key, scan) = (stmt.key.clone(), stmt.scan.clone());
        self.drop_previous_unless_needed(Effects::default()).await;
        let target = if self.held.is_some() {
            Target::Held
        } else {
            match self.target(&scan, &key.sql) {
                Ok(t) => t,
                Err(msg) => {
                    self.defer_stmt_error(id, format!("sluice: {msg}"));
                    return Ok(());
                }
            }
        };
        let from_held = matches!(target, Target::Held);
        let Some(mut att) = self.attach_quiet(&target).await else {
            self.defer_stmt_error(id, "sluice: no backend connection for long data".into());
            return Ok(());
        };
        let delivered = match self.sync_quiet(&mut att, Effects::default()).await {
            Err(_) => Err("cannot restore session state for long data".to_string()),
            Ok(()) => match self.prepare_on(&mut att, &key).await {
                Err(_) => Err("cannot prepare the statement for long data".to_string()),
                Ok(b) => att
                    .conn()
                    .send(0, &with_backend_id(&payload, b.id))
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        att.lease.discard();
                        format!("lost the backend connection while sending long data: {e}")
                    }),
            },
        };
        match delivered {
            Ok(()) => {
                if let Some(stmt) = self.stmts.map.get_mut(&id) {
                    stmt.long_data = true;
                }
            }
            Err(msg) => self.defer_stmt_error(id, format!("sluice: {msg}")),
        }
        self.refresh_stmt_pins();
        self.settle(att, from_held, false).await;
        Ok(())
    }

    fn defer_stmt_error(&mut self, id: u32, msg: String) {
        if let Some(s) = self.stmts.map.get_mut(&id) {
            s.deferred_error = Some(msg);
        }
    }
}
