//! The buffers a client connection reads requests into and encodes response heads in, kept
//! per thread while no connection uses them. A connection takes one when it has bytes to
//! read or a head to write and gives it back as soon as it is done with it (between
//! requests), so an idle keep-alive connection holds no buffer at all and a busy one
//! allocates none per request. Each pool is bounded: past it a buffer is freed, so a burst of
//! many connections at once leaves no hoard behind.

use std::cell::RefCell;

use bytes::BytesMut;

/// Size of a connection's read buffer.
pub const READ: usize = 8 * 1024;

/// Largest head buffer kept (one grown for an unusually large head is freed).
const HEAD_KEPT: usize = 4 * 1024;

/// Size a new head buffer starts with: most response heads fit.
const HEAD: usize = 1024;

/// Most buffers kept per thread and kind (512 KiB of read buffers).
const KEEP: usize = 64;

thread_local! {
    static READS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static HEADS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// A read buffer of [`READ`] bytes, empty.
pub fn take_read() -> BytesMut {
    take(&READS, READ)
}

/// Gives back a read buffer whose bytes were all consumed.
pub fn give_read(buf: BytesMut) {
    keep(&READS, buf, READ, READ);
}

/// A buffer to encode a response head in, empty.
pub fn take_head() -> BytesMut {
    take(&HEADS, HEAD)
}

/// Gives back a head buffer once the head encoded in it has been written.
pub fn give_head(buf: BytesMut) {
    keep(&HEADS, buf, HEAD, HEAD_KEPT);
}

type Pool = std::thread::LocalKey<RefCell<Vec<BytesMut>>>;

/// A buffer from `pool`, or a new one of `size` bytes.
fn take(pool: &'static Pool, size: usize) -> BytesMut {
    pool.with(|f| f.borrow_mut().pop())
        .unwrap_or_else(|| BytesMut::with_capacity(size))
}

/// Keeps `buf` (emptied) in `pool` if it is a whole buffer of its own with between `least`
/// and `most` bytes: one whose space is still shared with bytes in use elsewhere, or that
/// grew past `most`, is freed instead.
fn keep(pool: &'static Pool, mut buf: BytesMut, least: usize, most: usize) {
    buf.clear();
    if !buf.try_reclaim(least) || buf.capacity() > most {
        return;
    }
    pool.with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < KEEP {
            f.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_whole_and_shared_ones_do_not() {
        let mut b = take_read();
        b.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let at = b.as_ptr();
        bytes::Buf::advance(&mut b, 18);
        give_read(b);
        // The same allocation, whole again.
        let b = take_read();
        assert_eq!(b.as_ptr(), at);
        assert_eq!(b.capacity(), READ);
        assert!(b.is_empty());

        // A head buffer whose bytes are still being written is not kept.
        let mut h = take_head();
        h.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        let sent = h.split().freeze();
        give_head(h);
        let again = take_head();
        assert_ne!(again.as_ptr(), sent.as_ptr());
        drop(sent);
        // Once written, it is.
        let at = again.as_ptr();
        give_head(again);
        assert_eq!(take_head().as_ptr(), at);
    }
}
