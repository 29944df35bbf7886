//! Work too long for the event loop, on tokio's blocking pool. Scanning a statement text costs
//! up to about 12 ns a byte (a long `IN` list, its digest), so a 50 MB text scanned in place
//! kept every other session of its thread waiting for up to half a second, and a client
//! sending such texts one after another could keep them waiting. Each protocol's front end
//! sends a text of [`OFF_LOOP_TEXT`] bytes or more here, with the buffer that holds it.

/// The length from which a statement text is scanned off the event loop (below it, at most
/// about 3 ms of scanning stays on the loop; from it, the scan takes milliseconds, beside
/// which waking a thread of the blocking pool is small).
pub const OFF_LOOP_TEXT: usize = 256 * 1024;

/// Runs `f` on tokio's blocking pool while the awaiting task's thread serves its other tasks.
/// `None` if the thread could not finish (`f` panicked, the runtime is shutting down).
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// As [`run`], `f` given `buf`, moved there and back (not copied); lost if `f` could not
/// finish.
pub async fn off_loop<T: Send + 'static>(
    buf: &mut bytes::BytesMut,
    f: impl FnOnce(&[u8]) -> T + Send + 'static,
) -> Option<T> {
    let moved = std::mem::take(buf);
    let (back, out) = run(move || {
        let out = f(&moved);
        (moved, out)
    })
    .await?;
    *buf = back;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The work runs while the thread that awaits it serves another task: on a current-thread
    /// runtime, the closure waits for a message that only another task of that runtime sends.
    /// Run in place, it would wait out its 30 s and say so.
    #[test]
    fn off_loop_work_leaves_the_thread_to_other_tasks() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (tx, rx) = mpsc::channel::<()>();
            let other = tokio::spawn(async move {
                tx.send(()).unwrap();
            });
            let mut buf = bytes::BytesMut::from(&b"kept"[..]);
            let heard = off_loop(&mut buf, move |b| {
                (rx.recv_timeout(Duration::from_secs(30)).is_ok(), b.to_vec())
            })
            .await;
            other.await.unwrap();
            assert_eq!(heard, Some((true, b"kept".to_vec())));
            assert_eq!(&buf[..], b"kept", "the buffer comes back");
        });
    }

    #[test]
    fn a_panic_off_the_loop_is_none() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut buf = bytes::BytesMut::from(&b"x"[..]);
        let out: Option<()> = rt.block_on(off_loop(&mut buf, |_| panic!("scanner bug")));
        assert_eq!(out, None);
    }
}
