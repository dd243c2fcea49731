//! Received fragments handed to the PML's active-message callbacks, with descriptors built on
//! the stack over the bytes where they lie.
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fabric::BufId;
use crate::ompi::log;
use crate::ompi::sys;
use crate::proto::{Channel, Piece};

use super::receive::held_buffer;
use super::{ModuleCell, ModuleState};

/// Segments one descriptor carries.
const MAX: usize = sys::MCA_BTL_DES_MAX_SEGMENTS as usize;

impl ModuleCell {
    /// One descriptor whose segments are the pieces where they lie; more pieces than a
    /// descriptor carries are copied into one buffer first.
    pub(super) fn deliver_pieces(&self, tag: u8, pieces: &[Piece], len: usize) {
        if pieces.len() <= MAX {
            // On the stack: this runs for every fragment of more than one datagram.
            let mut segs = [(core::ptr::null_mut(), 0); MAX];
            {
                let st = self.state.borrow();
                for (s, p) in segs.iter_mut().zip(pieces) {
                    *s = piece_bytes(&st, p);
                }
            }
            deliver_segments(self.btl.get(), tag, &segs[..pieces.len()]);
            return;
        }
        let mut whole = self.state.borrow_mut().gather_pieces(pieces, len);
        deliver(self.btl.get(), tag, whole.as_mut_ptr(), whole.len());
        self.state.borrow_mut().engine.recycle(whole);
    }
}

impl ModuleState {
    /// The `len` bytes of a fragment's pieces in one buffer (a spare of the core's).
    pub(super) fn gather_pieces(&mut self, pieces: &[Piece], len: usize) -> Vec<u8> {
        let mut whole = self.engine.spare_buffer(len);
        for p in pieces {
            let (ptr, n) = piece_bytes(self, p);
            // SAFETY: `n` received bytes in a buffer the core kept (not reposted until the
            // pieces are released) or an owned piece alive in `pieces`.
            whole.extend_from_slice(unsafe { core::slice::from_raw_parts(ptr, n) });
        }
        whole
    }

    /// Gives back what a delivered fragment's pieces hold: the kept receive buffers into
    /// `reposts` (the caller reposts them), owned bytes and the list to the core's spares.
    pub(super) fn release_pieces(
        &mut self,
        mut pieces: Vec<Piece>,
        reposts: &mut Vec<(Channel, BufId)>,
    ) {
        for p in pieces.drain(..) {
            match p {
                Piece::Held { handle, .. } => reposts.push(held_buffer(handle)),
                Piece::Owned(v) => self.engine.recycle(v),
            }
        }
        self.engine.recycle_pieces(pieces);
    }
}

/// Where a piece of a delivered fragment lies, and its length.
fn piece_bytes(st: &ModuleState, p: &Piece) -> (*mut u8, usize) {
    match p {
        Piece::Held { handle, range } => {
            let (ch, buf) = held_buffer(*handle);
            (
                st.fabric.rx_ptr(ch, buf).wrapping_add(range.start),
                range.len(),
            )
        }
        Piece::Owned(v) => (v.as_ptr() as *mut u8, v.len()),
    }
}

/// Hand `len` bytes at `data` to the active-message callback of `tag`, with a descriptor that
/// lives on this stack frame (the PML may only read it during the callback).
pub(super) fn deliver(btl: *mut sys::mca_btl_base_module_t, tag: u8, data: *mut u8, len: usize) {
    // SAFETY: plain C struct; zero is its valid initial state.
    let mut seg: sys::mca_btl_base_segment_t = unsafe { core::mem::zeroed() };
    seg.seg_addr.pval = data.cast();
    seg.seg_len = len as u64;
    deliver_descriptor(btl, tag, core::slice::from_mut(&mut seg));
}

/// Hand the PML one received fragment made of `segs` (at most `MCA_BTL_DES_MAX_SEGMENTS`,
/// the first holding the PML's header), each readable for its length.
fn deliver_segments(btl: *mut sys::mca_btl_base_module_t, tag: u8, segs: &[(*mut u8, usize)]) {
    // SAFETY: plain C structs; zero is their valid initial state.
    let mut segments: [sys::mca_btl_base_segment_t; MAX] = unsafe { core::mem::zeroed() };
    for (s, &(data, len)) in segments.iter_mut().zip(segs) {
        s.seg_addr.pval = data.cast();
        s.seg_len = len as u64;
    }
    deliver_descriptor(btl, tag, &mut segments[..segs.len().min(MAX)]);
}

/// The PML's callback for `tag` with a descriptor of `segments`; a single-datagram fragment
/// builds one segment only (the receive path of every small message).
fn deliver_descriptor(
    btl: *mut sys::mca_btl_base_module_t,
    tag: u8,
    segments: &mut [sys::mca_btl_base_segment_t],
) {
    // SAFETY: plain C struct; zero is its valid initial state.
    let mut des: sys::mca_btl_base_descriptor_t = unsafe { core::mem::zeroed() };
    des.des_segments = segments.as_mut_ptr();
    des.des_segment_count = segments.len();
    des.order = sys::MCA_BTL_NO_ORDER as u8;
    // SAFETY: the descriptor and segments outlive the call; each segment's bytes are readable
    // (received datagrams not yet reposted, or owned buffers alive in the caller).
    let rc = unsafe { sys::usnic_shim_am_deliver(btl, tag, &mut des) };
    if rc != 0 && first_drop_of(tag) {
        let len: u64 = segments.iter().map(|s| s.seg_len).sum();
        log::error(&format!(
            "dropped a {len}-byte fragment with tag {tag:#x}: no callback of the layers above \
             the BTL takes that tag (further fragments with it are dropped without a word)"
        ));
    }
}

/// Tags whose dropped fragments were reported: one line per tag, since a forged stream of them
/// would otherwise fill the log.
static DROPPED_TAGS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn first_drop_of(tag: u8) -> bool {
    let bit = 1u64 << (tag % 64);
    DROPPED_TAGS[tag as usize / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0
}

#[cfg(test)]
mod tests {
    use super::first_drop_of;

    #[test]
    fn a_dropped_tag_is_reported_once() {
        assert!(first_drop_of(0x23));
        assert!(!first_drop_of(0x23), "once per tag");
        assert!(first_drop_of(0xff), "another tag, another word");
        assert!(!first_drop_of(0xff));
    }
}
