//! The small control-plane queries the proxy runs itself on a connection (state sync,
//! the monitor's checks, learning a server's facts): statements whose whole answer is read
//! here, never relayed to a client.

use super::conn::*;
use crate::wire::buf::Reader;
use crate::wire::consts::{cap, com};
use crate::wire::ok::{is_eof, parse_ok};

impl BackendConn {
    /// Runs a statement that returns no rows; returns the OK packet's status flags and the
    /// raw session-state data (owned).
    pub async fn exec(&mut self, sql: &str) -> Result<OkInfo, BackendError> {
        self.send_command(com::QUERY, sql.as_bytes()).await?;
        let mut last = OkInfo::default();
        loop {
            let p = self.read().await?;
            match p.payload.first() {
                Some(0x00) => {
                    let ok = parse_ok(&p.payload)
                        .ok_or_else(|| BackendError::Protocol("malformed OK".into()))?;
                    last = OkInfo::from(&ok);
                    if ok.status & crate::wire::status::MORE_RESULTS_EXISTS == 0 {
                        return Ok(last);
                    }
                }
                Some(0xff) => return Err(BackendError::from_err_packet(&p.payload)),
                _ => {
                    // A result set: drain it.
                    let st = self.drain_resultset(&p.payload, None).await?;
                    last.status = st;
                    if st & crate::wire::status::MORE_RESULTS_EXISTS == 0 {
                        return Ok(last);
                    }
                }
            }
        }
    }

    /// Runs a query and returns the rows of its first result set as text.
    pub async fn query_rows(&mut self, sql: &str) -> Result<Rows, BackendError> {
        self.send_command(com::QUERY, sql.as_bytes()).await?;
        let p = self.read().await?;
        match p.payload.first() {
            Some(0xff) => Err(BackendError::from_err_packet(&p.payload)),
            Some(0x00) => Ok(Vec::new()),
            _ => {
                let mut rows = Vec::new();
                let st = self.drain_resultset(&p.payload, Some(&mut rows)).await?;
                if st & crate::wire::status::MORE_RESULTS_EXISTS != 0 {
                    self.drain_more_results().await?;
                }
                Ok(rows)
            }
        }
    }

    /// Runs a query and returns its first result set's column names and rows (as text).
    pub async fn query_table(&mut self, sql: &str) -> Result<(Vec<String>, Rows), BackendError> {
        self.send_command(com::QUERY, sql.as_bytes()).await?;
        let p = self.read().await?;
        match p.payload.first() {
            Some(0xff) => Err(BackendError::from_err_packet(&p.payload)),
            Some(0x00) => Ok((Vec::new(), Vec::new())),
            _ => {
                let mut names = Vec::new();
                let mut rows = Vec::new();
                let st = self
                    .drain_resultset_named(&p.payload, Some(&mut names), Some(&mut rows))
                    .await?;
                if st & crate::wire::status::MORE_RESULTS_EXISTS != 0 {
                    self.drain_more_results().await?;
                }
                Ok((names, rows))
            }
        }
    }

    async fn drain_more_results(&mut self) -> Result<(), BackendError> {
        loop {
            let p = self.read().await?;
            let st = match p.payload.first() {
                Some(0x00) => parse_ok(&p.payload).map(|o| o.status).unwrap_or(0),
                Some(0xff) => return Err(BackendError::from_err_packet(&p.payload)),
                _ => self.drain_resultset(&p.payload, None).await?,
            };
            if st & crate::wire::status::MORE_RESULTS_EXISTS == 0 {
                return Ok(());
            }
        }
    }

    /// Reads the rest of a text result set whose column-count packet was `first`. Returns the
    /// terminator's status flags.
    async fn drain_resultset(
        &mut self,
        first: &[u8],
        rows: Option<&mut Rows>,
    ) -> Result<u16, BackendError> {
        self.drain_resultset_named(first, None, rows).await
    }

    async fn drain_resultset_named(
        &mut self,
        first: &[u8],
        mut names: Option<&mut Vec<String>>,
        mut rows: Option<&mut Rows>,
    ) -> Result<u16, BackendError> {
        let ncols = Reader::new(first)
            .lenenc()
            .ok_or_else(|| BackendError::Protocol("malformed column count".into()))?
            as usize;
        for _ in 0..ncols {
            let p = self.read().await?;
            if let Some(names) = names.as_deref_mut() {
                // catalog, schema, table, org_table, name, ...
                let mut r = Reader::new(&p.payload);
                for _ in 0..4 {
                    r.lenenc_bytes();
                }
                let name = r
                    .lenenc_bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned());
                names.push(name.unwrap_or_default());
            }
        }
        let deprecate_eof = self.caps & cap::DEPRECATE_EOF != 0;
        if !deprecate_eof {
            self.read().await?; // EOF after column definitions
        }
        loop {
            let p = self.read().await?;
            let b = p.payload.first().copied();
            if b == Some(0xff) {
                return Err(BackendError::from_err_packet(&p.payload));
            }
            if b == Some(0xfe) && p.payload.len() < crate::wire::consts::MAX_PAYLOAD {
                if deprecate_eof {
                    return Ok(parse_ok(&p.payload).map(|o| o.status).unwrap_or(0));
                }
                if is_eof(&p.payload) {
                    return Ok(crate::wire::ok::parse_eof(&p.payload)
                        .map(|e| e.status)
                        .unwrap_or(0));
                }
            }
            if let Some(rows) = rows.as_deref_mut() {
                if rows.len() < 100_000 {
                    let mut r = Reader::new(&p.payload);
                    let mut row = Vec::with_capacity(ncols);
                    for _ in 0..ncols {
                        if r.rest().first() == Some(&0xfb) {
                            r.u8();
                            row.push(None);
                        } else {
                            row.push(
                                r.lenenc_bytes()
                                    .map(|b| String::from_utf8_lossy(b).into_owned()),
                            );
                        }
                    }
                    rows.push(row);
                }
            }
        }
    }

    /// Sends COM_PING and returns the server status flags.
    pub async fn ping(&mut self) -> Result<u16, BackendError> {
        self.simple(com::PING, &[]).await.map(|ok| ok.status)
    }

    /// Sends a command the server answers with one OK, EOF or ERR packet (COM_INIT_DB,
    /// COM_PING, COM_SET_OPTION, COM_RESET_CONNECTION, COM_STMT_RESET).
    pub async fn simple(&mut self, command: u8, arg: &[u8]) -> Result<OkInfo, BackendError> {
        self.send_command(command, arg).await?;
        let p = self.read().await?;
        if let Some(eof) = crate::wire::ok::parse_eof(&p.payload) {
            return Ok(OkInfo {
                status: eof.status,
                warnings: eof.warnings,
                ..OkInfo::default()
            });
        }
        match p.payload.first() {
            Some(0x00 | 0xfe) => parse_ok(&p.payload)
                .map(|o| OkInfo::from(&o))
                .ok_or_else(|| BackendError::Protocol("malformed OK packet".into())),
            Some(0xff) => Err(BackendError::from_err_packet(&p.payload)),
            _ => Err(BackendError::Protocol(format!(
                "unexpected answer to command {command:#04x}"
            ))),
        }
    }
}
