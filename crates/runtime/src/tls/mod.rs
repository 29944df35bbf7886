//! TLS for clients and servers alike: a TCP stream that may have been upgraded to TLS after
//! the connection opened (both MySQL and PostgreSQL ask for TLS inside their protocol), the
//! acceptor for clients and the verified connector for servers.

pub mod backend;
pub mod client;

pub use backend::{BackendStream, BackendTls};
pub use client::{acceptor, ClientStream, Rewound};

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Plain TCP, or the TLS stream `T` over it.
pub enum MaybeTls<T> {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<T>),
    /// Being upgraded (only during the TLS handshake; any I/O fails).
    Upgrading,
}

impl<T> MaybeTls<T> {
    /// True once TLS is in use.
    pub fn is_tls(&self) -> bool {
        matches!(self, MaybeTls::Tls(_))
    }

    /// Takes the plain TCP stream out for the TLS handshake (the stream is `Upgrading` until
    /// the caller puts the TLS stream back).
    pub fn take_plain(&mut self) -> io::Result<TcpStream> {
        match std::mem::replace(self, MaybeTls::Upgrading) {
            MaybeTls::Plain(s) => Ok(s),
            other => {
                *self = other;
                Err(io::Error::other("TLS already in use"))
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> MaybeTls<T> {
    /// Writes all of `bytes`, and over TLS sends them on: tokio-rustls keeps the last records
    /// when the socket is full, and nothing else would send them while sluice waits for the
    /// peer, which waits for them (the rest of a request, or of an answer and its end).
    pub async fn write_all_sent(&mut self, bytes: &[u8]) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.write_all(bytes).await?;
        if self.is_tls() {
            self.flush().await?;
        }
        Ok(())
    }
}

fn upgrading<R>() -> Poll<io::Result<R>> {
    Poll::Ready(Err(io::ErrorKind::NotConnected.into()))
}

impl<T: AsyncRead + Unpin> AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            MaybeTls::Upgrading => upgrading(),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            MaybeTls::Upgrading => upgrading(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            MaybeTls::Upgrading => upgrading(),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            MaybeTls::Upgrading => upgrading(),
        }
    }
}
