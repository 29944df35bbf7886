//! Opens backend connections for the core's pools.

use super::stmt_cache::{StmtBudget, StmtCache};
use super::BackendConn;
use crate::server_info::ServerInfo;
use arc_swap::ArcSwap;
use sluice_core::{ConnectError, Connector, PoolKey, Server};
use sluice_runtime::users::Users;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Logs in to servers as the client's user, with the client's flavour of capabilities.
pub struct MysqlConnector {
    /// Users and passwords.
    pub users: Arc<ArcSwap<Users>>,
    /// Prepared statements cached per connection.
    pub stmt_cache_size: usize,
    /// Learned server facts (filled by the first connection).
    pub info: Arc<ServerInfo>,
    /// TLS to the servers (`[pool] tls`).
    pub tls: Option<super::BackendTls>,
    /// `[pool] read_timeout`, shared by every connection it opens.
    pub read_timeout: super::ReadTimeout,
    /// `[pool] max_lifetime`, shared by every connection it opens.
    pub lifetime: sluice_core::Lifetime,
    /// Prepared statements the proxy's connections hold, per server address (bounded by
    /// the servers ever configured).
    pub budgets: parking_lot::Mutex<HashMap<Arc<str>, Arc<StmtBudget>>>,
}

impl MysqlConnector {
    /// The prepared-statement budget of `server` (looked up once per connection opened).
    pub fn budget_of(&self, server: &Server) -> Arc<StmtBudget> {
        self.budgets
            .lock()
            .entry(server.address.clone())
            .or_default()
            .clone()
    }
}

impl Connector<Box<BackendConn>> for MysqlConnector {
    fn connect<'a>(
        &'a self,
        server: &'a Arc<Server>,
        key: &'a PoolKey,
    ) -> Pin<Box<dyn Future<Output = Result<Box<BackendConn>, ConnectError>> + Send + 'a>> {
        Box::pin(async move {
            let password = {
                let users = self.users.load();
                match users.of_session(&key.user) {
                    Some(u) => u.password.clone(),
                    None => {
                        return Err(ConnectError::refused(
                            1045,
                            *b"28000",
                            format!("user '{}' is no longer configured", key.user),
                        ))
                    }
                }
            };
            // A connection attempt to a server that hangs gives up when the monitor declares
            // it failed, not only at the connect timeout.
            let mut failed = server.failed_watch();
            let attempt = BackendConn::connect_with(
                &server.address,
                &key.user,
                &password,
                key.variant,
                StmtCache::new(self.stmt_cache_size, self.budget_of(server)),
                self.tls.as_ref(),
            );
            let mut conn = tokio::select! {
                r = attempt => r?,
                () = failed.failed() => {
                    return Err(ConnectError::down(format!("{}: the server stopped answering and was declared failed", server.name)))
                }
            };
            conn.failed = Some(failed);
            server.set_version(&conn.server_version);
            conn.read_timeout = self.read_timeout.clone();
            conn.lifetime = self.lifetime.stamp();
            // Keep the proxy's statements to half the server's limit: other clients of the
            // server count against it too.
            if conn.server_stmt_limit > 0 {
                self.budget_of(server)
                    .set_limit((conn.server_stmt_limit / 2).max(1));
            }
            if !self.info.learned() {
                if let Err(e) = self.info.learn(&mut conn).await {
                    tracing::warn!(server = %server.name, error = %e, "could not read collations from server");
                }
            }
            tracing::debug!(server = %server.name, thread_id = conn.thread_id, user = %key.user, "backend connection opened");
            // Boxed: pools, leases and sessions move a pointer, not the whole connection.
            Ok(Box::new(conn))
        })
    }
}
