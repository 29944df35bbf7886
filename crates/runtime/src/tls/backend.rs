//! The byte stream to a server: plain TCP, or TLS (`[pool] tls`), verified against
//! `[pool] tls_ca` and the server's address.

use super::MaybeTls;
use bytes::BytesMut;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// TLS settings for backend connections.
#[derive(Clone)]
pub struct BackendTls {
    connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackendTls")
    }
}

impl BackendTls {
    /// Verifies servers against the CA certificates in the PEM file `ca`.
    pub fn from_ca_file(ca: &std::path::Path) -> Result<BackendTls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        for cert in
            CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))?
        {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        if roots.is_empty() {
            return Err(format!("{}: no CA certificate", ca.display()));
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(BackendTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// Runs the TLS handshake with the server at `address` (`host:port`); its certificate
    /// must name `host`.
    pub async fn connect(&self, address: &str, tcp: TcpStream) -> io::Result<BackendStream> {
        let host = address
            .rsplit_once(':')
            .map_or(address, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let tls = self.connector.connect(name, tcp).await?;
        Ok(BackendStream::Tls(Box::new(tls)))
    }
}

/// Whether a failed [`BackendTls::connect`] is the configuration's: the server's certificate
/// does not chain to `[pool] tls_ca` or name its host, the host is no server name, or the
/// server does not speak TLS. The connection is refused then, and the client hears why.
/// Otherwise the connection was lost during the handshake (a server restarting): the
/// server's, counted as down like a connection refused by the operating system.
pub fn handshake_refused(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput
    )
}

/// What one step of [`BackendStream::poll_send_reading`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum SendStep {
    /// This many bytes were written.
    Wrote(usize),
    /// This many bytes were read (0: the server closed the stream).
    Read(usize),
    /// Nothing was left to write, and all of it went to the socket.
    Sent,
}

/// The stream to a server.
pub type BackendStream = MaybeTls<TlsStream<TcpStream>>;

impl BackendStream {
    /// Says goodbye before the stream is closed, without waiting: `last` (the protocol's
    /// own goodbye, or nothing) and, over TLS, a `close_notify`, as far as the socket takes
    /// them now (a closing stream's few bytes fit an idle socket; if they do not, closing
    /// is enough). Without the `close_notify` a server on OpenSSL sees the TLS stream cut
    /// and logs it as an error (PostgreSQL: "could not receive data from client: Connection
    /// reset by peer"); without the protocol's goodbye MariaDB counts an aborted client.
    pub fn goodbye(&mut self, last: &[u8]) {
        match self {
            MaybeTls::Plain(s) => {
                if !last.is_empty() {
                    let _ = s.try_write(last);
                }
            }
            MaybeTls::Tls(t) => {
                use std::io::Write;
                let (tcp, session) = t.get_mut();
                if !last.is_empty() && session.writer().write_all(last).is_err() {
                    return;
                }
                session.send_close_notify();
                // (Records rustls still holds from an earlier write go first, whole.)
                let mut out = Vec::new();
                while session.wants_write() {
                    match session.write_tls(&mut out) {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    }
                }
                let _ = tcp.try_write(&out);
            }
            MaybeTls::Upgrading => {}
        }
    }

    /// True if this idle stream can no longer carry a request: the server closed it, or sent
    /// something nobody asked for (an error before it closes; over TLS also an alert or a
    /// `close_notify`). Never waits, and takes no part of the task's budget (a pool checks
    /// many connections in one poll: a probe that ran out of budget would call a dead one
    /// alive). A byte found is read (the connection is done then anyway, over TLS too).
    pub fn idle_closed(&self) -> bool {
        let tcp = match self {
            MaybeTls::Plain(s) => s,
            MaybeTls::Tls(t) => {
                let (tcp, session) = t.get_ref();
                // Decrypted bytes not read, or the server's close_notify: not idle.
                if !session.wants_read() {
                    return true;
                }
                tcp
            }
            MaybeTls::Upgrading => return true,
        };
        let mut probe = [0u8; 1];
        !matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Resolves when the server may have sent something, consuming nothing (at once over TLS
    /// when decrypted bytes are waiting to be read).
    pub async fn readable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| match self {
            MaybeTls::Plain(s) => s.poll_read_ready(cx),
            MaybeTls::Tls(t) => {
                let (tcp, session) = t.get_ref();
                if !session.wants_read() {
                    return Poll::Ready(Ok(()));
                }
                tcp.poll_read_ready(cx)
            }
            MaybeTls::Upgrading => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        })
        .await
    }

    /// Reads what the server has sent into `buf` without waiting: the bytes read (0: the
    /// server closed the stream), or `WouldBlock` if nothing is there.
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            MaybeTls::Plain(s) => s.try_read_buf(buf),
            _ => {
                let mut cx = Context::from_waker(Waker::noop());
                match self.poll_read_into(&mut cx, buf) {
                    Poll::Ready(r) => r,
                    Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                }
            }
        }
    }

    /// One step of sending `bytes` while reading what the server sends meanwhile into `read`
    /// (`None`: reading is held back): how many bytes were written, or read, or that `bytes`
    /// is empty and all of it was sent on. A server that answers a request in parts as they
    /// come stops reading when nobody reads its answers; this keeps both directions moving.
    pub fn poll_send_reading(
        &mut self,
        cx: &mut Context<'_>,
        bytes: &[u8],
        read: Option<&mut BytesMut>,
    ) -> Poll<io::Result<SendStep>> {
        use tokio::io::AsyncWrite;
        if !bytes.is_empty() {
            match Pin::new(&mut *self).poll_write(cx, bytes) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => return Poll::Ready(Ok(SendStep::Wrote(n))),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        } else if Pin::new(&mut *self).poll_flush(cx)?.is_ready() {
            return Poll::Ready(Ok(SendStep::Sent));
        }
        match read {
            Some(buf) => self.poll_read_into(cx, buf).map_ok(SendStep::Read),
            None => Poll::Pending,
        }
    }

    /// Reads into the spare room of `buf` (uninitialised room is not filled first).
    fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        use std::future::Future;
        use tokio::io::AsyncReadExt;
        // (Dropped when pending: nothing was read, and the next poll reads afresh.)
        let read = std::pin::pin!(self.read_buf(buf));
        read.poll(cx)
    }

    /// The server's address.
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            MaybeTls::Plain(s) => s.peer_addr(),
            MaybeTls::Tls(t) => t.get_ref().0.peer_addr(),
            MaybeTls::Upgrading => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}
