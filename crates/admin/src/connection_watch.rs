//! What one admin HTTP connection is doing, seen from its bytes and its requests, and when it
//! must be closed: a request head that takes too long (`admin.header_timeout`), or nothing
//! moving while nothing is being answered (`admin.idle_timeout`). A request being answered
//! (a switchover waits for transactions and a catch-up) is never cut short.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `head_since` when no request head is awaited.
const NONE: u64 = u64::MAX;

/// A connection's activity. Its bytes, its requests and its watchdog all run in the
/// connection's one task; atomics only make it shareable between them.
pub(crate) struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` of the last byte read or written, or request begun or ended.
    last_ms: AtomicU64,
    /// Milliseconds after `opened` since which a request head is awaited: the opening, or
    /// the first byte read after the previous request was answered. `NONE` otherwise.
    head_since: AtomicU64,
    /// Requests being answered.
    in_flight: AtomicUsize,
}

/// What the watchdog decides.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Leave it; look again after this long.
    Open(Duration),
    /// Close it, for this reason.
    Close(&'static str),
}

/// The decision, from the connection's clock (all in milliseconds since it opened).
pub(crate) fn verdict(
    now: u64,
    last: u64,
    head_since: Option<u64>,
    in_flight: usize,
    header_timeout: Duration,
    idle_timeout: Duration,
) -> Verdict {
    let (header, idle) = (millis(header_timeout), millis(idle_timeout));
    if in_flight > 0 {
        return Verdict::Open(idle_timeout);
    }
    let mut next = (last + idle).saturating_sub(now);
    if let Some(h) = head_since {
        if now >= h + header {
            return Verdict::Close("request head not complete within admin.header_timeout");
        }
        next = next.min(h + header - now);
    }
    if now >= last + idle {
        return Verdict::Close("nothing moved within admin.idle_timeout");
    }
    Verdict::Open(Duration::from_millis(next.max(1)))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 4)
}

impl Activity {
    /// A connection just opened: its first request head is awaited from now.
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        millis(self.opened.elapsed())
    }

    fn read(&self) {
        let now = self.now_ms();
        self.last_ms.store(now, Relaxed);
        if self.in_flight.load(Relaxed) == 0 && self.head_since.load(Relaxed) == NONE {
            self.head_since.store(now, Relaxed);
        }
    }

    fn wrote(&self) {
        self.last_ms.store(self.now_ms(), Relaxed);
    }

    /// A request's head arrived and its handler starts; the guard marks its end.
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.head_since.store(NONE, Relaxed);
        self.last_ms.store(self.now_ms(), Relaxed);
        InFlight(self.clone())
    }

    /// Whether to close the connection now.
    pub(crate) fn verdict(&self, header_timeout: Duration, idle_timeout: Duration) -> Verdict {
        let head = self.head_since.load(Relaxed);
        verdict(
            self.now_ms(),
            self.last_ms.load(Relaxed),
            (head != NONE).then_some(head),
            self.in_flight.load(Relaxed),
            header_timeout,
            idle_timeout,
        )
    }
}

/// A request being answered (dropped when its handler ends, or is dropped).
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
        self.0.last_ms.store(self.0.now_ms(), Relaxed);
    }
}

/// A stream that records every byte moved in an [`Activity`].
pub(crate) struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(60);

    /// What, now, last byte, head awaited since, requests in flight, expected verdict.
    type Case = (&'static str, u64, u64, Option<u64>, usize, Verdict);

    #[test]
    fn verdicts() {
        use Verdict::*;
        let s = Duration::from_secs;
        let cases: &[Case] = &[
            ("just opened", 0, 0, Some(0), 0, Open(s(10))),
            (
                "opened, silent past the header timeout",
                10_000,
                0,
                Some(0),
                0,
                Close("request head not complete within admin.header_timeout"),
            ),
            (
                "a head trickling in, byte after byte, past the header timeout",
                12_000,
                11_900,
                Some(1_000),
                0,
                Close("request head not complete within admin.header_timeout"),
            ),
            (
                "a head trickling in, in time",
                5_000,
                4_900,
                Some(1_000),
                0,
                Open(s(6)),
            ),
            (
                "answered, idle keep-alive",
                30_000,
                20_000,
                None,
                0,
                Open(s(50)),
            ),
            (
                "answered, idle past the idle timeout",
                80_000,
                20_000,
                None,
                0,
                Close("nothing moved within admin.idle_timeout"),
            ),
            (
                "a long request being answered (a switchover)",
                500_000,
                0,
                None,
                1,
                Open(IDLE),
            ),
        ];
        for (what, now, last, head, in_flight, want) in cases {
            assert_eq!(
                verdict(*now, *last, *head, *in_flight, HEADER, IDLE),
                *want,
                "{what}"
            );
        }
    }

    #[test]
    fn activity_tracks_heads_and_requests() {
        let a = Activity::new();
        assert_eq!(
            a.head_since.load(Relaxed),
            0,
            "the first head is awaited from the opening"
        );
        a.read();
        let guard = a.request_started();
        assert_eq!(a.head_since.load(Relaxed), NONE);
        a.read(); // a body read by the handler does not start a head
        assert_eq!(a.head_since.load(Relaxed), NONE);
        assert!(matches!(a.verdict(HEADER, IDLE), Verdict::Open(_)));
        drop(guard);
        assert_eq!(a.in_flight.load(Relaxed), 0);
        assert_eq!(
            a.head_since.load(Relaxed),
            NONE,
            "idle keep-alive awaits no head"
        );
        a.read();
        assert_ne!(
            a.head_since.load(Relaxed),
            NONE,
            "the next request's first byte"
        );
    }
}
