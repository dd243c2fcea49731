//! `Slab`: one channel's send or receive buffers in a single page-aligned allocation, so
//! buffer addresses are stable for the module's lifetime and one registration covers them all.
//!
//! The memory comes from an anonymous `mmap`: with 64 KiB datagrams on `lo` a data channel
//! has 64 MiB of receive buffers, and the kernel only backs the pages a datagram touches
//! (an aligned `alloc_zeroed` would memset, and so commit, all of it up front).
use std::ptr::NonNull;

/// Buffers start on cache-line boundaries (the original rounds to the cache line too).
const CACHE_LINE: usize = 64;

pub(crate) struct Slab {
    ptr: NonNull<u8>,
    bytes: usize,
    stride: usize,
    count: usize,
}

// SAFETY: the slab is plain owned memory; access is governed by its owner's &/&mut.
unsafe impl Send for Slab {}

impl Slab {
    /// `count` buffers of at least `size` bytes each.
    pub(crate) fn new(count: usize, size: usize) -> Slab {
        let stride = size.max(1).div_ceil(CACHE_LINE) * CACHE_LINE;
        let bytes = stride
            .checked_mul(count.max(1))
            .expect("buffer pool size overflows");
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let layout =
                std::alloc::Layout::from_size_align(bytes, 4096).expect("buffer pool layout");
            std::alloc::handle_alloc_error(layout);
        }
        let ptr = NonNull::new(p.cast()).expect("mmap returned NULL");
        Slab {
            ptr,
            bytes,
            stride,
            count,
        }
    }

    /// Start of the whole allocation (for memory registration).
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes of the whole allocation.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Start of buffer `i` (< count).
    pub(crate) fn at(&self, i: usize) -> *mut u8 {
        assert!(
            i < self.count,
            "buffer index {i} out of range ({})",
            self.count
        );
        // SAFETY: i < count, so the offset stays inside the allocation.
        unsafe { self.ptr.as_ptr().add(i * self.stride) }
    }

    /// `len` bytes of buffer `i` starting at `offset` (offset + len <= stride).
    pub(crate) fn slice(&self, i: usize, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.stride, "slice beyond buffer");
        // SAFETY: inside buffer i of our allocation; &self keeps it alive and unmutated
        // through Rust (libfabric only writes to buffers that are posted, never handed out).
        unsafe { std::slice::from_raw_parts(self.at(i).add(offset), len) }
    }

    /// Mutable view of `len` bytes of buffer `i` starting at `offset`.
    pub(crate) fn slice_mut(&mut self, i: usize, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset + len <= self.stride, "slice beyond buffer");
        // SAFETY: as in `slice`, with &mut self giving exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.at(i).add(offset), len) }
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length, unmapped once; nothing refers to it any
        // more (the owning channel closes its endpoint and registrations first).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}
