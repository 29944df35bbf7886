//! The byte stream to a server: plain TCP, or TLS (`[pool] tls`), verified against
//! `[pool] tls_ca` and the server's address.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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
    pub(crate) async fn connect(&self, address: &str, tcp: TcpStream) -> io::Result<BackendStream> {
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

/// The stream to a server.
pub enum BackendStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<TlsStream<TcpStream>>),
    /// Being upgraded (only during the TLS handshake; any I/O fails).
    Upgrading,
}

impl BackendStream {
    /// True once TLS is in use.
    pub fn is_tls(&self) -> bool {
        matches!(self, BackendStream::Tls(_))
    }

    /// Reads without waiting (plain TCP only; TLS records cannot be read partially).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BackendStream::Plain(s) => s.try_read(buf),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Writes without waiting (plain TCP only).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            BackendStream::Plain(s) => s.try_write(buf),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// The server's address.
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            BackendStream::Plain(s) => s.peer_addr(),
            BackendStream::Tls(t) => t.get_ref().0.peer_addr(),
            BackendStream::Upgrading => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// Takes the plain TCP stream out (for the TLS handshake).
    pub(crate) fn take_plain(&mut self) -> io::Result<TcpStream> {
        match std::mem::replace(self, BackendStream::Upgrading) {
            BackendStream::Plain(s) => Ok(s),
            other => {
                *self = other;
                Err(io::Error::other("TLS already in use"))
            }
        }
    }
}

fn upgrading<T>() -> Poll<io::Result<T>> {
    Poll::Ready(Err(io::ErrorKind::NotConnected.into()))
}

impl AsyncRead for BackendStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            BackendStream::Upgrading => upgrading(),
        }
    }
}

impl AsyncWrite for BackendStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BackendStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            BackendStream::Upgrading => upgrading(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Plain(s) => Pin::new(s).poll_flush(cx),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            BackendStream::Upgrading => upgrading(),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            BackendStream::Upgrading => upgrading(),
        }
    }
}
