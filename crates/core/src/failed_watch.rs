//! What a server connection watches while it waits for its server: the monitor declaring
//! that server failed. A hung server answers nothing, and only the monitor's verdict (or a
//! failover replacing it) ends the wait of the statement in flight.
//!
//! The registration is made once, when the connection is opened, not at every read: a read
//! polls it beside the socket for the cost of a state check, where a fresh `watch::changed()`
//! future per read linked and unlinked itself on every statement.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::{watch, Notify};

/// A connection's view of its server being declared failed.
pub struct FailedWatch {
    /// Tells, without waiting, whether it happened since the connection was opened.
    rx: watch::Receiver<u64>,
    /// Woken when it happens (registered since creation, so nothing is missed).
    notified: Pin<Box<OwnedNotified>>,
}

impl std::fmt::Debug for FailedWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailedWatch")
            .field("failed", &self.has_failed())
            .finish()
    }
}

impl FailedWatch {
    /// Watches a server's failures from now on.
    pub(crate) fn new(rx: watch::Receiver<u64>, notify: Arc<Notify>) -> FailedWatch {
        FailedWatch {
            rx,
            notified: Box::pin(notify.notified_owned()),
        }
    }

    /// True if the server was declared failed since the watch was made.
    pub fn has_failed(&self) -> bool {
        self.rx.has_changed().unwrap_or(false)
    }

    /// Ready once the server was declared failed.
    pub fn poll_failed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.has_failed() {
            return Poll::Ready(());
        }
        self.notified.as_mut().poll(cx)
    }

    /// Resolves once the server was declared failed.
    pub async fn failed(&mut self) {
        std::future::poll_fn(|cx| self.poll_failed(cx)).await
    }
}

/// Runs `work` unless the server behind `watch` is declared failed first (then `None`).
/// Without a watch, `work` alone.
pub async fn unless_failed<F: Future>(
    watch: Option<&mut FailedWatch>,
    work: F,
) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    let mut watch = watch;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        match watch.as_deref_mut() {
            Some(w) => w.poll_failed(cx).map(|()| None),
            None => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;

    #[tokio::test]
    async fn a_watch_made_before_the_failure_sees_it_once_polled_or_not() {
        let s = Server::new("127.0.0.1:1", "writer", 1, 10);
        let mut before = s.failed_watch();
        let pending = unless_failed(Some(&mut before), std::future::pending::<()>());
        tokio::pin!(pending);
        // Polled once (registered) before the failure, once after.
        assert!(futures_poll(&mut pending).is_pending());
        let mut unpolled = s.failed_watch();
        s.fail_in_flight();
        assert_eq!(pending.await, None);
        assert!(unpolled.has_failed());
        unpolled.failed().await;
        // A watch made after the failure does not see it.
        let after = s.failed_watch();
        assert!(!after.has_failed());
        let mut after = after;
        assert_eq!(unless_failed(Some(&mut after), async { 7 }).await, Some(7));
        assert_eq!(unless_failed(None, async { 8 }).await, Some(8));
    }

    fn futures_poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let waker = std::task::Waker::noop();
        Pin::new(f).poll(&mut Context::from_waker(waker))
    }
}
