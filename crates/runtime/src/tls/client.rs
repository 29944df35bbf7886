//! The client's byte stream: plain TCP, or TLS after the client asked for it with an
//! SSLRequest packet (rustls, certificate and key from `[proxy] tls_cert` / `tls_key`).

use super::MaybeTls;
use bytes::{Buf, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A TCP stream that first replays bytes already read from it (a client sends its TLS
/// ClientHello right behind the SSLRequest, so it may already be in the read buffer).
pub struct Rewound {
    prefix: BytesMut,
    inner: TcpStream,
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The client stream.
pub type ClientStream = MaybeTls<TlsStream<Rewound>>;

impl ClientStream {
    /// Resolves when there may be something to read, consuming nothing. (A poll function,
    /// not a readiness future: an idle session waits here, and this keeps its state small.)
    pub async fn readable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_readable(cx)).await
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            MaybeTls::Plain(s) => s.poll_read_ready(cx),
            MaybeTls::Tls(t) => {
                let (io, conn) = t.get_ref();
                // Decrypted bytes already buffered, or a replayed prefix: readable now.
                if !conn.wants_read() || !io.prefix.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                io.inner.poll_read_ready(cx)
            }
            MaybeTls::Upgrading => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    /// After an error that ends the session: sluice's side of the stream ends (over TLS with a
    /// `close_notify`), and what the client still sends is read and dropped until it closes
    /// its side, for `limit` at most, so that a client still sending (a request over the size
    /// limit, a pipeline) reads the error: a socket closed with bytes unread is reset, and a
    /// client whose write fails on the reset reports that instead of the error waiting for it.
    pub async fn close_after_error(&mut self, limit: std::time::Duration) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = self.shutdown().await;
        let drain = async {
            // Small: a session that waits for its client to leave holds it meanwhile.
            let mut scratch = vec![0u8; 8 * 1024];
            while self.read(&mut scratch).await? > 0 {}
            Ok::<(), io::Error>(())
        };
        let _ = tokio::time::timeout(limit, drain).await;
    }

    /// Runs the TLS handshake on this (plain) stream; `already_read` holds bytes read past
    /// the SSLRequest.
    pub async fn upgrade(
        &mut self,
        acceptor: &tokio_rustls::TlsAcceptor,
        already_read: BytesMut,
    ) -> io::Result<()> {
        let tcp = self.take_plain()?;
        let tls = acceptor
            .accept(Rewound {
                prefix: already_read,
                inner: tcp,
            })
            .await?;
        *self = MaybeTls::Tls(Box::new(tls));
        Ok(())
    }
}

/// A TLS acceptor from PEM files (certificate chain, private key).
pub fn acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}
