//! What the entry points ask of a module's state besides traffic: descriptors from the pool
//! and back, their endpoint checked, and a region peers may no longer touch.
use crate::ompi::endpoint::Endpoint;
use crate::ompi::frag::Frag;
use crate::ompi::log;
use crate::proto::PeerId;

use super::{ModuleState, PeerSlot};

impl ModuleState {
    /// A descriptor from the pool whose buffer, if it must grow, is a spare of the core.
    pub fn new_frag(
        &mut self,
        module: u32,
        endpoint: *mut Endpoint,
        seg0: usize,
        flags: u32,
        order: u8,
    ) -> *mut Frag {
        let engine = &mut self.engine;
        self.frags.get(module, endpoint, seg0, flags, order, |len| {
            engine.filled_buffer(len)
        })
    }

    /// Gives a descriptor back to the pool (and a large buffer of it to the core's spares).
    ///
    /// # Safety
    /// As `FragPool::put`: `f` came from `new_frag` and nobody uses it afterwards.
    pub unsafe fn free_frag(&mut self, f: *mut Frag) {
        // SAFETY: forwarded contract.
        if let Some(buf) = unsafe { self.frags.put(f) } {
            self.engine.recycle(buf);
        }
    }

    /// `ep` if it is one of this module's live endpoints (O(1): its peer slot must point back
    /// at it).
    pub fn check_endpoint(&self, ep: *mut Endpoint) -> Option<*mut Endpoint> {
        if ep.is_null() {
            return None;
        }
        // SAFETY: the PML only passes endpoints this BTL returned from add_procs and never
        // after del_procs; the slot comparison below rejects anything else we could detect.
        let peer = unsafe { (*ep).peer };
        (self.endpoint_of(peer) == ep).then_some(ep)
    }

    /// The endpoint the PML knows `peer` by; NULL once the peer was removed.
    pub fn endpoint_of(&self, peer: PeerId) -> *mut Endpoint {
        self.slot(peer)
            .map_or(core::ptr::null_mut(), |s| s.endpoint)
    }

    /// The slot of `peer`; None once the peer was removed (the core may still name it in
    /// what it queued before).
    pub(super) fn slot(&self, peer: PeerId) -> Option<&PeerSlot> {
        self.peers.get(peer.0 as usize).and_then(|s| s.as_ref())
    }

    /// Memory peers may no longer touch. GET replies still reading it are given a copy
    /// first (the PML deregisters once the requester reports the GET done, which can come
    /// before the last reply segment is acknowledged).
    pub fn forget_region(&mut self, id: u64) {
        let copied = self.engine.own_lent(id);
        if copied > 0 {
            log::verbose(10, || {
                format!("region {id:#x} forgotten: {copied} GET replies copied out")
            });
        }
        self.regions.remove_region(id);
    }
}
