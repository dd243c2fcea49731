//! Fragments: the descriptors this BTL hands to the PML (`alloc`, `prepare_src`).
//!
//! A `Frag` starts with Open MPI's own `mca_btl_base_descriptor_t` (layout from bindgen), so a
//! `*mut Frag` *is* the descriptor pointer the PML sees. Segment 0 always lives in `buf` (the PML
//! writes its header there: `reserve` bytes for `prepare_src`, everything for `alloc`); segment 1,
//! when present, is the user's contiguous data, lent to the core in place (`LentFrag`) until it is
//! acknowledged.
use core::ptr;

use super::endpoint::Endpoint;
use super::sys;

/// A frag between `get` and `put` ("usnicFrg"): what another BTL's descriptor, whose bytes
/// past the descriptor are its own, is unlikely to hold there.
const LIVE: u64 = 0x7573_6e69_6346_7267;

#[repr(C)]
pub struct Frag {
    /// Must stay first: the descriptor pointer and the frag pointer are the same address.
    pub des: sys::mca_btl_base_descriptor_t,
    pub segs: [sys::mca_btl_base_segment_t; 2],
    /// `LIVE` from `get` to `put`: a descriptor the PML frees or sends twice, or one of
    /// another BTL's, is refused instead of corrupting the pool (see `is_live`).
    mark: u64,
    /// Index of the module that made it (checked on every use).
    pub module: u32,
    pub endpoint: *mut Endpoint,
    /// Backing store of segment 0.
    pub buf: Vec<u8>,
}

/// Largest buffer kept on a pooled frag (bigger ones are released on free).
const KEEP_CAPACITY: usize = 64 * 1024;
/// Frags kept for reuse per module.
const POOL_MAX: usize = 512;

impl Frag {
    fn blank(module: u32) -> Box<Frag> {
        Box::new(Frag {
            // SAFETY: the descriptor is a plain C struct (pointers, integers, an optional
            // function pointer); all-zero is its valid initial state, as OBJ_CONSTRUCT leaves it.
            des: unsafe { core::mem::zeroed() },
            // SAFETY: as above, segments are {pointer union, length}.
            segs: unsafe { core::mem::zeroed() },
            mark: 0,
            module,
            endpoint: ptr::null_mut(),
            buf: Vec::new(),
        })
    }

    /// Whether `f` is a frag of `module` between `get` and `put`. A frag given back is kept in
    /// the pool (up to `POOL_MAX`), so reading a second free's mark reads pooled memory. What
    /// it catches: a second free or a send of a frag still in the pool. Not caught: one handed
    /// out again since (the pool reuses the frag freed last first, for its warm buffer), which
    /// is live for its new owner; and for another BTL's descriptor this only makes misuse
    /// unlikely to pass.
    ///
    /// # Safety
    /// `f` must point to readable memory at least as large as a `Frag`.
    pub unsafe fn is_live(f: *const Frag, module: u32) -> bool {
        // SAFETY: readable per the contract.
        unsafe { (*f).mark == LIVE && (*f).module == module }
    }

    /// Point the descriptor at this frag's segments (the frag never moves: it is boxed).
    fn wire_segments(&mut self, count: usize) {
        self.des.des_segments = self.segs.as_mut_ptr();
        self.des.des_segment_count = count;
    }

    /// Length of segment `i`.
    pub fn seg_len(&self, i: usize) -> usize {
        self.segs[i].seg_len as usize
    }

    /// Bytes of segment 0 (the PML may have shrunk it below what `buf` holds).
    fn seg0_len(&self) -> usize {
        self.seg_len(0).min(self.buf.len())
    }

    /// The bytes of segment 0.
    pub fn segment0(&self) -> &[u8] {
        &self.buf[..self.seg0_len()]
    }

    /// Segment 0 as one owned buffer for the core (reusing `buf`): what `alloc` and packed
    /// `prepare_src` fragments carry when the BTL owns them (it frees them once sent). A
    /// fragment with user data in segment 1 is lent instead (`LentFrag`); one the PML keeps
    /// (no `BTL_OWNERSHIP`) is copied, its segment staying its own (see `send`).
    pub fn take_segment0(&mut self) -> Vec<u8> {
        let len0 = self.seg0_len();
        let mut data = core::mem::take(&mut self.buf);
        data.truncate(len0);
        data
    }
}

/// A fragment's bytes lent to the core where they are: segment 0 (the PML's header, in `buf`)
/// and segment 1 (the user's data), read each time a segment is cut or retransmitted. This
/// saves copying the user's data into a buffer of ours before it goes to the kernel.
#[derive(Debug)]
pub struct LentFrag(*const Frag);

// SAFETY: the frag is only read, and only by the engine, which lives under the module lock.
unsafe impl Send for LentFrag {}

impl LentFrag {
    /// # Safety
    /// `f` must be live, with segment 1 pointing to `seg_len(1)` readable bytes, and both
    /// segments must stay valid and unchanged until the core reports the send complete (the
    /// send is then called back on acknowledgement, not before: that is the PML's promise
    /// to keep the user's buffer and the descriptor).
    pub unsafe fn new(f: *const Frag) -> LentFrag {
        LentFrag(f)
    }
}

impl crate::proto::Lent for LentFrag {
    fn pieces(&self) -> [&[u8]; 2] {
        // SAFETY: per `new`'s contract, the frag and its segments are valid for as long as
        // the core holds this (it drops it before reporting the send complete).
        unsafe {
            let f = &*self.0;
            [
                &f.buf[..f.seg0_len()],
                core::slice::from_raw_parts(f.segs[1].seg_addr.pval as *const u8, f.seg_len(1)),
            ]
        }
    }
}

/// Frags of one module, reused so the send path does not allocate descriptors.
#[derive(Default)]
pub struct FragPool {
    // Boxed on purpose: a frag's address is handed to the PML and must never move.
    #[allow(clippy::vec_box)]
    free: Vec<Box<Frag>>,
    /// Frags currently held by the PML or in flight (for leak accounting).
    pub live: usize,
}

impl FragPool {
    /// A frag whose segment 0 is `seg0` bytes of `buf`, their contents unspecified: the PML's
    /// header and the packed data overwrite them before the frag is sent, so bytes a buffer
    /// already held are not zeroed again (an 8 KiB send's largest libc cost was that memset).
    /// A buffer too small for that is replaced by one from `spare`, which returns `seg0` bytes.
    pub fn get(
        &mut self,
        module: u32,
        endpoint: *mut Endpoint,
        seg0: usize,
        flags: u32,
        order: u8,
        spare: impl FnOnce(usize) -> Vec<u8>,
    ) -> *mut Frag {
        let mut f = self.free.pop().unwrap_or_else(|| Frag::blank(module));
        f.mark = LIVE;
        f.module = module;
        f.endpoint = endpoint;
        if f.buf.capacity() < seg0 {
            f.buf = spare(seg0);
        }
        // Truncates, or zeroes only the bytes added.
        f.buf.resize(seg0, 0);
        // Reset what the PML may have set on a previous life.
        // SAFETY: zero is the valid initial state of the descriptor (see `Frag::blank`).
        f.des = unsafe { core::mem::zeroed() };
        f.segs[0].seg_addr.pval = f.buf.as_mut_ptr().cast();
        f.segs[0].seg_len = seg0 as u64;
        f.segs[1].seg_addr.pval = ptr::null_mut();
        f.segs[1].seg_len = 0;
        f.wire_segments(1);
        f.des.des_flags = flags;
        f.des.order = order;
        self.live += 1;
        Box::into_raw(f)
    }

    /// Give a frag back. A large buffer is returned rather than kept on the pooled frag (it
    /// is better spent on whichever fragment next needs that much).
    ///
    /// # Safety
    /// `f` must come from `get` on this pool and not be used afterwards (by Rust or the PML).
    #[must_use]
    pub unsafe fn put(&mut self, f: *mut Frag) -> Option<Vec<u8>> {
        // SAFETY: per the contract, `f` is a live Box leaked by `get`.
        let mut b = unsafe { Box::from_raw(f) };
        self.live = self.live.saturating_sub(1);
        b.mark = 0;
        let big = (b.buf.capacity() > KEEP_CAPACITY).then(|| core::mem::take(&mut b.buf));
        b.endpoint = ptr::null_mut();
        if self.free.len() < POOL_MAX {
            self.free.push(b);
        }
        big
    }

    /// Set segment 1 to user memory (`prepare_src` of contiguous data).
    ///
    /// # Safety
    /// `f` must be a live frag of this pool.
    pub unsafe fn set_user_segment(f: *mut Frag, data: *mut u8, len: usize) {
        // SAFETY: per the contract `f` is live and exclusively ours right now.
        let f = unsafe { &mut *f };
        f.segs[1].seg_addr.pval = data.cast();
        f.segs[1].seg_len = len as u64;
        f.wire_segments(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_is_first() {
        let mut pool = FragPool::default();
        let f = pool.get(0, ptr::null_mut(), 14, 0x2, 255, |n| vec![0; n]);
        // SAFETY: f is live; we only read addresses and fields.
        unsafe {
            assert_eq!(f as usize, core::ptr::addr_of!((*f).des) as usize);
            assert_eq!((*f).des.des_segment_count, 1);
            assert_eq!((*f).des.des_flags, 0x2);
            assert_eq!((*f).segs[0].seg_len, 14);
            assert_eq!(
                (*f).segs[0].seg_addr.pval as usize,
                (*f).buf.as_ptr() as usize
            );
            assert!(pool.put(f).is_none());
        }
        assert_eq!(pool.live, 0);
    }

    #[test]
    fn lent_frag_reads_header_then_user_bytes_in_place() {
        use crate::proto::{Lent, Payload};
        let mut pool = FragPool::default();
        let mut user = *b"user data!";
        let f = pool.get(0, ptr::null_mut(), 4, 0, 255, |n| vec![0; n]);
        // SAFETY: f is live and `user` outlives the payload (dropped before both).
        unsafe {
            (&mut *f).buf.copy_from_slice(b"HDR:");
            let up = user.as_mut_ptr();
            FragPool::set_user_segment(f, up, user.len());
            assert_eq!((*f).des.des_segment_count, 2);
            let lent: Box<dyn Lent> = Box::new(LentFrag::new(f));
            let p = Payload::from(lent);
            assert_eq!(p.len(), 14);
            let mut out = [0u8; 14];
            p.copy_to(0, &mut out);
            assert_eq!(&out, b"HDR:user data!");
            // Read where it is: a change to the user's buffer shows (nothing was copied).
            *up = b'U';
            p.copy_to(4, &mut out[..4]);
            assert_eq!(&out[..4], b"User");
            drop(p);
            assert!(pool.put(f).is_none());
        }
    }

    #[test]
    fn segment0_is_read_without_being_taken() {
        let mut pool = FragPool::default();
        let f = pool.get(0, ptr::null_mut(), 8, 0, 255, |n| vec![0; n]);
        // SAFETY: f is live.
        unsafe {
            let fr = &mut *f;
            fr.buf.copy_from_slice(b"headdata");
            fr.segs[0].seg_len = 4;
            let addr = fr.segs[0].seg_addr.pval as usize;
            assert_eq!(fr.segment0(), b"head");
            assert_eq!(fr.segment0(), b"head", "read twice: still there");
            assert_eq!(fr.buf.as_ptr() as usize, addr, "the segment's memory stays");
            assert!(pool.put(f).is_none());
        }
    }

    #[test]
    fn pml_may_shrink_segment_zero() {
        let mut pool = FragPool::default();
        let f = pool.get(0, ptr::null_mut(), 100, 0, 255, |n| vec![0; n]);
        // SAFETY: f is live.
        unsafe {
            let fr = &mut *f;
            fr.buf[..3].copy_from_slice(b"abc");
            fr.segs[0].seg_len = 3;
            assert_eq!(fr.take_segment0(), b"abc");
            assert!(pool.put(f).is_none());
        }
    }

    #[test]
    fn a_reused_buffer_keeps_its_bytes_and_only_new_ones_are_zeroed() {
        let mut pool = FragPool::default();
        let roomy = |n| {
            let mut v = Vec::with_capacity(16);
            v.resize(n, 0);
            v
        };
        let f = pool.get(0, ptr::null_mut(), 8, 0, 255, roomy);
        // SAFETY: f is live until put; the second frag is the first one's reuse.
        unsafe {
            (&mut *f).buf.copy_from_slice(b"12345678");
            assert!(pool.put(f).is_none());
            let g = pool.get(0, ptr::null_mut(), 10, 0, 255, |_| {
                panic!("no spare needed")
            });
            assert_eq!(g, f, "the pooled frag");
            assert_eq!(
                (*g).buf,
                b"12345678\0\0",
                "old bytes kept, the new two zeroed"
            );
            assert_eq!((*g).segs[0].seg_len, 10);
            assert!(pool.put(g).is_none());
            let h = pool.get(0, ptr::null_mut(), 3, 0, 255, |_| panic!("no spare needed"));
            assert_eq!((*h).buf, b"123");
            assert!(pool.put(h).is_none());
        }
    }

    #[test]
    fn only_a_frag_in_use_of_its_module_is_live() {
        let mut pool = FragPool::default();
        let f = pool.get(3, ptr::null_mut(), 8, 0, 255, |n| vec![0; n]);
        // SAFETY: f is live, then pooled (still allocated: the pool keeps it); `other` is an
        // aligned buffer at least as large as a frag.
        unsafe {
            assert!(Frag::is_live(f, 3));
            assert!(!Frag::is_live(f, 2), "another module's");
            assert!(pool.put(f).is_none());
            assert!(
                !Frag::is_live(f, 3),
                "freed: a second free or a send is refused"
            );
            let other = vec![0xa5a5_a5a5_a5a5_a5a5u64; core::mem::size_of::<Frag>() / 8 + 1];
            assert!(!Frag::is_live(other.as_ptr().cast(), 3), "another BTL's");
            let g = pool.get(3, ptr::null_mut(), 8, 0, 255, |n| vec![0; n]);
            assert!(Frag::is_live(g, 3), "in use again");
            assert!(pool.put(g).is_none());
        }
    }
}
