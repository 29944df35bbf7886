//! Spare I/O buffers shared by all client sessions of the process. A session hands its read
//! and write buffers back here whenever it waits for the client's next command, and takes a
//! pair when the client sends one: an idle client owns no buffer at all (100,000 idle clients
//! cost no buffer memory), while a busy one does not allocate per command. The shelf is
//! bounded in count and in the size of what it keeps.

use bytes::BytesMut;
use parking_lot::Mutex;

/// Buffers kept at most, per kind.
const SHELF: usize = 256;
/// Initial capacity of a new buffer (a typical command or small result fits).
const START: usize = 4096;
/// Buffers grown beyond this are freed instead of kept (a 1 GiB result must not stay).
const KEEP_AT_MOST: usize = 64 * 1024;

static READ: Mutex<Vec<BytesMut>> = Mutex::new(Vec::new());
static WRITE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A read buffer, empty, with some capacity.
pub fn read_buffer() -> BytesMut {
    READ.lock()
        .pop()
        .unwrap_or_else(|| BytesMut::with_capacity(START))
}

/// A write buffer, empty, with some capacity.
pub fn write_buffer() -> Vec<u8> {
    WRITE
        .lock()
        .pop()
        .unwrap_or_else(|| Vec::with_capacity(START))
}

/// Gives an empty read buffer back (dropped if it holds data, is shared or too big).
pub fn give_read(mut b: BytesMut) {
    if !b.is_empty() {
        return;
    }
    // Commands are split off the front of the buffer; once they are dropped, the sole owner
    // gets the whole allocation back. A buffer still shared with a live payload cannot, and
    // is dropped below for being too small.
    if !b.try_reclaim(START) || b.capacity() > KEEP_AT_MOST {
        return;
    }
    let mut shelf = READ.lock();
    if shelf.len() < SHELF {
        shelf.push(b);
    }
}

/// Gives a write buffer back (its content is discarded).
pub fn give_write(mut b: Vec<u8>) {
    if !(START..=KEEP_AT_MOST).contains(&b.capacity()) {
        return;
    }
    b.clear();
    let mut shelf = WRITE.lock();
    if shelf.len() < SHELF {
        shelf.push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_reclaims_and_bounds() {
        let mut b = read_buffer();
        b.extend_from_slice(b"abc");
        give_read(b); // not empty: dropped
        let b = read_buffer();
        assert!(b.is_empty() && b.capacity() >= START);
        give_read(b);
        let w = Vec::with_capacity(KEEP_AT_MOST * 2);
        give_write(w); // too big: dropped
        assert!(WRITE.lock().iter().all(|w| w.capacity() <= KEEP_AT_MOST));
        for _ in 0..SHELF + 10 {
            give_write(Vec::with_capacity(START));
        }
        assert!(WRITE.lock().len() <= SHELF);

        // A command split off the front and dropped: the whole buffer comes back.
        let mut b = BytesMut::with_capacity(START);
        b.extend_from_slice(b"payload");
        drop(b.split_to(7));
        let before = READ.lock().len();
        give_read(b);
        assert_eq!(READ.lock().len(), before + 1);
        assert!(READ.lock().last().unwrap().capacity() >= START);
        // Still shared with a live payload: not kept.
        let mut b = BytesMut::with_capacity(START);
        b.extend_from_slice(b"payload");
        let payload = b.split_to(7);
        give_read(b);
        assert_eq!(READ.lock().len(), before + 1);
        drop(payload);
    }
}
