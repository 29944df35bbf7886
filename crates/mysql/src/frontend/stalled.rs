//! A client stalled in the middle of a request (`[mysql] net_read_timeout`, MariaDB's
//! `net_read_timeout`): once part of a request has arrived, each further part must come
//! within the limit, or the read fails with `TimedOut` and the session ends. The wait for a
//! request to begin is not bounded (an idle client keeps its session), nor is a client that
//! keeps sending: what is bounded is a request that stops half-way, which otherwise holds its
//! session, and the bytes it was charged against `[proxy] max_request_memory`, for as long
//! as its client keeps the connection open.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

/// `inner`, read with a limit on how long a read may wait once the request has begun.
pub struct Stalled<'a, S> {
    inner: &'a mut S,
    limit: Duration,
    /// Some part of the request has arrived: from now on a read that waits is timed.
    begun: bool,
    /// The running wait's deadline, set when a read first waits and cleared when bytes come.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<'a, S> Stalled<'a, S> {
    /// Reads from `inner`; `begun`: part of the request is already in hand (buffered).
    pub fn new(inner: &'a mut S, limit: Duration, begun: bool) -> Self {
        Stalled {
            inner,
            limit,
            begun,
            timer: None,
        }
    }
}

/// The error of a request stalled for `limit`.
fn stalled_error(limit: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "Got timeout reading communication packets: no part of the request arrived for {} ms ([mysql] net_read_timeout)",
            limit.as_millis()
        ),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalled<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut *this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.begun = true;
                    this.timer = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending if !this.begun => Poll::Pending,
            Poll::Pending => {
                let limit = this.limit;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(stalled_error(limit))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A request that stops half-way fails after the limit; one that has not begun waits on.
    #[tokio::test(start_paused = true)]
    async fn a_read_that_waits_mid_request_fails_after_the_limit() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let limit = Duration::from_secs(30);

        // Not begun: the wait is not timed.
        let mut s = Stalled::new(&mut server, limit, false);
        let mut byte = [0u8; 1];
        let idle = tokio::time::timeout(Duration::from_secs(3600), s.read(&mut byte)).await;
        assert!(idle.is_err(), "an idle wait is not cut by the limit");

        // Begun (bytes buffered): a read that waits fails after the limit.
        let mut s = Stalled::new(&mut server, limit, true);
        let e = s.read(&mut byte).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("net_read_timeout"), "{e}");

        // Bytes that keep coming within the limit restart it each time.
        let mut s = Stalled::new(&mut server, limit, false);
        let writer = async {
            for _ in 0..5 {
                client.write_all(b"x").await.unwrap();
                tokio::time::sleep(Duration::from_secs(20)).await;
            }
        };
        let reader = async {
            let mut got = [0u8; 5];
            s.read_exact(&mut got).await.map(|_| got)
        };
        let (_, got) = tokio::join!(writer, reader);
        assert_eq!(&got.unwrap(), b"xxxxx");
    }
}
