//! Spare byte buffers, so large fragments do not cost an allocation each.
//!
//! A fragment of 150 KiB is above glibc's mmap/trim thresholds: allocating one per send and per
//! reassembly made the kernel map, fault in and unmap pages for every fragment (a quarter of a
//! bandwidth run's CPU time). Buffers of acknowledged sends, of delivered reassemblies and of
//! freed descriptors come back here instead and are handed out again.
//!
//! Tiny messages (a PML header and a few bytes) come from a separate list of buffers of one
//! size: malloc and free were 3 % of the instructions of an 8-byte ping-pong.
//!
//! The lists that carry a kept fragment's pieces (`chunk::Reassembler`, then the edge) come
//! back too: allocating, shrinking and freeing them cost about 300 instructions per fragment
//! of 2-16 datagrams.

use super::api::Piece;
use super::chunk::MAX_PIECES;

/// Room of every buffer of the tiny list: more than the priority channel carries.
pub const TINY_ROOM: usize = 1024;
/// Larger buffers are kept in the size-ordered pool from this size up: everything the tiny
/// list does not take. A send of 1-4 KiB hands its descriptor's buffer to the core, which gave
/// it back here at the ACK; when the pool started at 4 KiB it was freed, and the next send's
/// descriptor allocated and zeroed a new one (a `calloc`, a `memset` of its length and a `free`
/// per message of a 2 KiB ping-pong).
pub const SPARE_MIN: usize = TINY_ROOM + 1;
/// At most this many tiny buffers are kept.
const TINY_COUNT: usize = 64;
/// At most this many buffers are kept ...
const MAX_COUNT: usize = 64;
/// ... holding at most this many bytes of capacity together.
const MAX_BYTES: usize = 64 << 20;
/// Room of a new piece list: the most pieces a kept fragment has.
const LIST_ROOM: usize = MAX_PIECES;
/// At most this many piece lists of each kind are kept.
const LIST_COUNT: usize = 16;

#[derive(Debug, Default)]
pub struct Spares {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
    /// Empty buffers of capacity exactly `TINY_ROOM`.
    tiny: Vec<Vec<u8>>,
    /// A kept fragment's pieces by offset, while it is reassembled.
    by_offset: Lists<(u32, Piece)>,
    /// A whole fragment's pieces in order, on their way to the edge and back.
    in_order: Lists<Piece>,
}

/// Empty lists of one kind, each with room for `LIST_ROOM` elements.
#[derive(Debug)]
struct Lists<T>(Vec<Vec<T>>);

impl<T> Default for Lists<T> {
    fn default() -> Self {
        Lists(Vec::new())
    }
}

impl<T> Lists<T> {
    fn take(&mut self) -> Vec<T> {
        self.0
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(LIST_ROOM))
    }

    /// Keeps `v` emptied, unless the pool is full or `v` grew far beyond a fragment's pieces
    /// (a peer sending many short chunks): that one is not worth its memory.
    fn keep(&mut self, mut v: Vec<T>) {
        if self.0.len() < LIST_COUNT && (LIST_ROOM..=4 * LIST_ROOM).contains(&v.capacity()) {
            v.clear();
            self.0.push(v);
        }
    }
}

impl Spares {
    /// An empty buffer with room for at least `cap` bytes.
    pub fn with_capacity(&mut self, cap: usize) -> Vec<u8> {
        if cap <= TINY_ROOM {
            return self
                .tiny
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(TINY_ROOM));
        }
        match self.pick(cap, 0) {
            Some(mut v) => {
                v.clear();
                v
            }
            None => Vec::with_capacity(cap),
        }
    }

    /// A buffer of exactly `len` bytes whose contents are unspecified (the caller overwrites
    /// them all). Prefers a spare that already holds `len` bytes, so nothing is zeroed.
    pub fn filled(&mut self, len: usize) -> Vec<u8> {
        if len <= TINY_ROOM {
            let mut v = self.with_capacity(len);
            v.resize(len, 0);
            return v;
        }
        match self.pick(len, len) {
            Some(mut v) => {
                v.resize(len, 0);
                v
            }
            None => vec![0; len],
        }
    }

    /// Keeps `v` for reuse if it is worth it. When the pool is full, smaller spares make room
    /// for it: the sizes in use change (a run of 64 KiB messages, then 1 MiB ones), and a pool
    /// stuck with the old small buffers would turn every new fragment into an allocation.
    pub fn give(&mut self, mut v: Vec<u8>) {
        let cap = v.capacity();
        if cap == TINY_ROOM {
            if self.tiny.len() < TINY_COUNT {
                v.clear();
                self.tiny.push(v);
            }
            return;
        }
        if !(SPARE_MIN..=MAX_BYTES).contains(&cap) {
            return;
        }
        while self.bufs.len() >= MAX_COUNT || self.bytes + cap > MAX_BYTES {
            let (i, small) = self
                .bufs
                .iter()
                .enumerate()
                .map(|(i, b)| (i, b.capacity()))
                .min_by_key(|&(_, c)| c)
                .expect("a full pool is not empty");
            if small >= cap {
                return;
            }
            self.bufs.swap_remove(i);
            self.bytes -= small;
        }
        self.bytes += cap;
        self.bufs.push(v);
    }

    /// An empty list for a kept fragment's pieces by offset.
    pub fn piece_list(&mut self) -> Vec<(u32, Piece)> {
        self.by_offset.take()
    }

    pub fn give_piece_list(&mut self, v: Vec<(u32, Piece)>) {
        self.by_offset.keep(v);
    }

    /// An empty list for a whole fragment's pieces in order.
    pub fn pieces(&mut self) -> Vec<Piece> {
        self.in_order.take()
    }

    /// Takes back a list of pieces the edge has delivered. Pieces still in it are dropped:
    /// the edge takes out what it must give back (held buffers, owned bytes) first.
    pub fn give_pieces(&mut self, v: Vec<Piece>) {
        self.in_order.keep(v);
    }

    /// Piece lists kept: by offset, in order.
    #[cfg(test)]
    pub fn lists_kept(&self) -> (usize, usize) {
        (self.by_offset.0.len(), self.in_order.0.len())
    }

    /// Bytes of capacity held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Best spare for `cap` bytes of room: one already `len` long if any (no zeroing), else the
    /// smallest that fits.
    fn pick(&mut self, cap: usize, len: usize) -> Option<Vec<u8>> {
        if cap < SPARE_MIN {
            return None;
        }
        let mut best: Option<(usize, bool, usize)> = None;
        for (i, v) in self.bufs.iter().enumerate() {
            if v.capacity() < cap {
                continue;
            }
            let ready = v.len() >= len;
            let better = match best {
                None => true,
                Some((_, r, c)) => (ready && !r) || (ready == r && v.capacity() < c),
            };
            if better {
                best = Some((i, ready, v.capacity()));
            }
        }
        let (i, _, _) = best?;
        let v = self.bufs.swap_remove(i);
        self.bytes -= v.capacity();
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_same_allocation() {
        let mut s = Spares::default();
        let v = vec![7u8; 100_000];
        let p = v.as_ptr();
        s.give(v);
        let w = s.filled(90_000);
        assert_eq!(w.as_ptr(), p, "the spare was not reused");
        assert_eq!(w.len(), 90_000);
        assert_eq!(s.bytes(), 0);
        s.give(w);
        let e = s.with_capacity(100_000);
        assert_eq!(e.as_ptr(), p);
        assert!(e.is_empty());
    }

    #[test]
    fn a_buffer_of_a_few_kib_comes_back_as_it_went() {
        let mut s = Spares::default();
        let v = s.filled(2100);
        let (p, cap) = (v.as_ptr(), v.capacity());
        s.give(v);
        // The pointer alone would not tell: malloc hands a just-freed block out again.
        assert_eq!(s.bytes(), cap, "a 2 KiB send's buffer was not kept");
        let w = s.filled(2100);
        assert_eq!((w.as_ptr(), s.bytes()), (p, 0), "it was not reused");
        assert_eq!(w.len(), 2100);
    }

    #[test]
    fn too_small_spares_are_not_used() {
        let mut s = Spares::default();
        s.give(vec![1u8; 10_000]);
        let v = s.filled(20_000);
        assert_eq!(v.len(), 20_000);
        assert!(v.iter().all(|&b| b == 0), "a fresh buffer is zeroed");
        assert_eq!(s.bytes(), 10_000, "the small spare stays");
    }

    #[test]
    fn prefers_a_spare_that_needs_no_zeroing() {
        let mut s = Spares::default();
        let mut short = Vec::with_capacity(200_000);
        short.extend_from_slice(&[1u8; 10]);
        s.give(short);
        let long = vec![2u8; 150_000];
        let p = long.as_ptr();
        s.give(long);
        let v = s.filled(150_000);
        assert_eq!(v.as_ptr(), p);
    }

    #[test]
    fn larger_buffers_displace_smaller_ones() {
        let mut s = Spares::default();
        for _ in 0..MAX_COUNT {
            s.give(vec![0u8; SPARE_MIN]);
        }
        let big = vec![0u8; 4 * SPARE_MIN];
        let p = big.as_ptr();
        s.give(big);
        assert_eq!(s.bytes(), (MAX_COUNT - 1) * SPARE_MIN + 4 * SPARE_MIN);
        let kept = s.filled(4 * SPARE_MIN);
        assert_eq!(kept.as_ptr(), p, "the big buffer was kept");
        s.give(vec![0u8; SPARE_MIN]);
        s.give(vec![0u8; SPARE_MIN - 1]);
        assert_eq!(
            s.bytes(),
            MAX_COUNT * SPARE_MIN,
            "a small one is not kept when full"
        );
    }

    #[test]
    fn tiny_buffers_come_back_without_an_allocation() {
        let mut s = Spares::default();
        let v = s.with_capacity(22);
        assert_eq!(v.capacity(), TINY_ROOM);
        let p = v.as_ptr();
        s.give(v);
        let mut w = s.with_capacity(TINY_ROOM);
        assert_eq!(w.as_ptr(), p, "the tiny buffer was not reused");
        assert!(w.is_empty());
        w.extend_from_slice(&[1; 10]);
        s.give(w);
        assert!(
            s.with_capacity(8).is_empty(),
            "a reused tiny buffer is empty"
        );
        assert_eq!(
            s.bytes(),
            0,
            "tiny buffers are not in the pool's byte count"
        );
        for _ in 0..TINY_COUNT + 5 {
            s.give(Vec::with_capacity(TINY_ROOM));
        }
        assert_eq!(s.tiny.len(), TINY_COUNT, "the tiny list is bounded");
        let grown = s.with_capacity(TINY_ROOM + 1);
        assert!(grown.capacity() > TINY_ROOM);
    }

    #[test]
    fn piece_lists_come_back_empty_and_bounded() {
        let mut s = Spares::default();
        let mut v = s.pieces();
        assert_eq!(v.capacity(), LIST_ROOM);
        let p = v.as_ptr();
        v.push(Piece::Owned(vec![1, 2, 3]));
        s.give_pieces(v);
        let w = s.pieces();
        assert_eq!(w.as_ptr(), p, "the list was not reused");
        assert!(w.is_empty(), "a reused list is empty");
        let mut l = s.piece_list();
        l.push((0, Piece::Owned(vec![4])));
        s.give_piece_list(l);
        assert_eq!(s.lists_kept(), (1, 0));
        assert!(s.piece_list().is_empty());
        for _ in 0..LIST_COUNT + 3 {
            s.give_pieces(Vec::with_capacity(LIST_ROOM));
        }
        assert_eq!(s.lists_kept().1, LIST_COUNT, "the lists are bounded");
        let mut t = Spares::default();
        t.give_pieces(Vec::with_capacity(1));
        t.give_pieces(Vec::with_capacity(100 * LIST_ROOM));
        assert_eq!(t.lists_kept(), (0, 0), "lists of odd sizes are not kept");
    }

    #[test]
    fn bounded() {
        let mut s = Spares::default();
        for _ in 0..(MAX_COUNT + 10) {
            s.give(vec![0u8; SPARE_MIN]);
        }
        assert_eq!(s.bytes(), MAX_COUNT * SPARE_MIN);
        s.give(vec![0u8; SPARE_MIN - 1]);
        assert_eq!(s.bytes(), MAX_COUNT * SPARE_MIN);
        let mut t = Spares::default();
        t.give(vec![0u8; MAX_BYTES]);
        t.give(vec![0u8; SPARE_MIN]);
        assert_eq!(t.bytes(), MAX_BYTES, "the byte bound holds");
        t.give(vec![0u8; MAX_BYTES + 1]);
        assert_eq!(
            t.bytes(),
            MAX_BYTES,
            "nothing larger than the bound is kept"
        );
    }
}
