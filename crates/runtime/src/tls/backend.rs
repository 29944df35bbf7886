//! The byte stream to a server: plain TCP, or TLS (`[pool] tls`), verified against
//! `[pool] tls_ca` and the server's address.

use super::MaybeTls;
use std::io;
use std::sync::Arc;
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

/// The stream to a server.
pub type BackendStream = MaybeTls<TlsStream<TcpStream>>;

impl BackendStream {
    /// Reads without waiting (plain TCP only; TLS records cannot be read partially).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            MaybeTls::Plain(s) => s.try_read(buf),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Writes without waiting (plain TCP only).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            MaybeTls::Plain(s) => s.try_write(buf),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
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
