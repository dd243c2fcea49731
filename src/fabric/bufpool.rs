//! `Slab`: one channel's send or receive buffers in a single page-aligned allocation, so
//! buffer addresses are stable for the module's lifetime and one registration covers them all.
//!
//! The memory comes from an anonymous `mmap`: with 64 KiB datagrams on `lo` a data channel
//! has 64 MiB of receive buffers, and the kernel only backs the pages a datagram touches
//! (an aligned `alloc_zeroed` would memset, and so commit, all of it up front).
use super::error::{last_errno, strerror, FabricError};
use super::sys;
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
    /// `count` buffers of at least `size` bytes each. Memory that cannot be mapped (the
    /// address-space limit, `ulimit -v`, or the host's memory) is a `-FI_ENOMEM` error of
    /// `mmap`, so the caller can give up on the interface rather than the process abort.
    pub(crate) fn new(count: usize, size: usize) -> Result<Slab, FabricError> {
        let Some((stride, bytes)) = size
            .max(1)
            .checked_next_multiple_of(CACHE_LINE)
            .and_then(|stride| Some((stride, stride.checked_mul(count.max(1))?)))
        else {
            return Err(FabricError {
                call: "mmap",
                code: sys::FI_ENOMEM as i32,
                message: format!("{count} buffers of {size} bytes exceed the address space"),
            });
        };
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
            let errno = last_errno();
            return Err(FabricError {
                call: "mmap",
                code: sys::FI_ENOMEM as i32,
                message: format!(
                    "cannot map {bytes} bytes of buffers ({count} of {stride} bytes): {}",
                    strerror(errno)
                ),
            });
        }
        let ptr = NonNull::new(p.cast()).expect("mmap returned NULL");
        Ok(Slab {
            ptr,
            bytes,
            stride,
            count,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_the_address_space_cannot_hold_is_an_error() {
        // 2^60 bytes: more than any x86-64 process can map, whatever the limits.
        let e = Slab::new(1 << 40, 1 << 20)
            .err()
            .expect("mapped 2^60 bytes?");
        assert_eq!((e.call, e.code), ("mmap", libc::ENOMEM), "{e}");
        for (count, size) in [(2, usize::MAX), (usize::MAX, 128)] {
            let e = Slab::new(count, size).err().expect("size overflowed");
            assert_eq!((e.call, e.code), ("mmap", libc::ENOMEM), "{e}");
        }
        let s = Slab::new(4, 100).unwrap();
        assert_eq!(
            (s.bytes(), s.at(1) as usize - s.base() as usize),
            (512, 128)
        );
    }
}
