//! Emulated RDMA: `btl_put` / `btl_get` over the core's PUT/GET, and the registrations that say
//! which local memory a peer may write (PUT target) or read (GET source).
//!
//! A registration handle is what the PML ships to the peer: `{region, base}`. The peer names the
//! region and an offset from `base`; this side checks both against what is registered before
//! touching memory, and refuses (the core reports `RemoteRefused` to the initiator) otherwise.
//! A GET's local destination gets a temporary region of its own for the duration of the GET.
use core::ffi::c_void;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use crate::fabric;
use crate::proto::{Cookie, Lent, Payload, PeerId};

use super::endpoint::Endpoint;
use super::module::ModuleCell;
use super::status::*;
use super::sys;

/// The registration handle as it travels to peers (`btl_registration_handle_size` bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RegHandle {
    pub region: u64,
    pub base: u64,
}

pub const HANDLE_SIZE: usize = core::mem::size_of::<RegHandle>();

#[derive(Copy, Clone, Debug)]
struct Region {
    base: usize,
    len: usize,
    access: Access,
}

/// What peers may do to a region: `btl_register_mem`'s access flags and endpoint. ob1 asks for
/// everything from the peer it ships the handle to; honouring the flags keeps memory registered
/// only to be read (or only for one peer) out of reach of a PUT from anyone holding the id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Peers may PUT into it (`MCA_BTL_REG_FLAG_REMOTE_WRITE`).
    pub write: bool,
    /// Peers may GET from it (`MCA_BTL_REG_FLAG_REMOTE_READ`).
    pub read: bool,
    /// The one peer allowed; None for all (registered without an endpoint).
    pub peer: Option<PeerId>,
}

impl Access {
    pub fn from_flags(flags: u32, peer: Option<PeerId>) -> Access {
        Access {
            write: flags & sys::MCA_BTL_REG_FLAG_REMOTE_WRITE != 0,
            read: flags & sys::MCA_BTL_REG_FLAG_REMOTE_READ != 0,
            peer,
        }
    }

    fn admits(&self, peer: PeerId) -> bool {
        self.peer.is_none_or(|p| p == peer)
    }
}

/// Who reads lent region bytes: this side (a PUT's source) or a peer's GET.
#[derive(Copy, Clone, Debug)]
pub enum Reader {
    Local,
    Peer(PeerId),
}

/// Memory of this module that peers may touch.
pub struct Regions {
    map: HashMap<u64, Region>,
    next: u64,
    /// SipHash under a random 128-bit key: region ids are a keyed pseudorandom function of a
    /// counter, so a datagram forged with the job key still has to name a live region, and
    /// one id seen (ob1 ships handles in its headers) tells nothing of the others. Small
    /// sequential ids made region 1 a safe guess; a keyless bijection (splitmix64 of the
    /// counter xor a key) gave the counter back, and with it the next id in 64 tries.
    ids: RandomState,
}

impl Regions {
    pub fn new() -> Regions {
        Regions {
            map: HashMap::new(),
            next: 0,
            ids: RandomState::new(),
        }
    }

    fn add(&mut self, base: usize, len: usize, access: Access) -> u64 {
        let id = loop {
            self.next += 1;
            let id = self.ids.hash_one(self.next);
            // Not a bijection: a live id drawn again (p = 2^-64 per pair) is skipped.
            if id != 0 && !self.map.contains_key(&id) {
                break id;
            }
        };
        self.map.insert(id, Region { base, len, access });
        id
    }

    /// Called only by `ModuleState::forget_region`, which first copies what GET replies still
    /// read from the region.
    pub fn remove_region(&mut self, id: u64) {
        self.map.remove(&id);
    }

    /// Address of `[offset, offset + len)` inside region `id`, if entirely inside it and
    /// `allowed` by the region's access.
    fn locate(
        &self,
        id: u64,
        offset: u64,
        len: usize,
        allowed: impl Fn(&Access) -> bool,
    ) -> Option<*mut u8> {
        let r = self.map.get(&id).filter(|r| allowed(&r.access))?;
        let off = usize::try_from(offset).ok()?;
        let end = off.checked_add(len)?;
        (end <= r.len).then(|| (r.base + off) as *mut u8)
    }

    /// Where `peer` may write `len` bytes at `offset` of region `id` (a PUT, a GET's reply).
    pub fn write_target(&self, peer: PeerId, id: u64, offset: u64, len: usize) -> Option<*mut u8> {
        self.locate(id, offset, len, |a| a.write && a.admits(peer))
    }

    /// Bytes `[offset, offset + len)` of region `id`, if entirely inside it and readable by
    /// `reader`, lent where they lie (a GET reply, a PUT source): copying them cost a fresh
    /// allocation, page faults included, per operation (4 MiB GET bandwidth 1.6 against
    /// 10 GB/s).
    pub fn lend(&self, reader: Reader, id: u64, offset: u64, len: usize) -> Option<Payload> {
        let src = self.locate(id, offset, len, |a| match reader {
            Reader::Local => true,
            Reader::Peer(p) => a.read && a.admits(p),
        })?;
        // SAFETY: `locate` checked that [src, src + len) lies inside live region `id`;
        // `ModuleState::forget_region` copies the bytes out before that region goes.
        let lent = unsafe { RegionLent::new(id, src, len) };
        Some(Payload::from(Box::new(lent) as Box<dyn Lent>))
    }
}

/// Bytes of a registered region lent to an operation where they lie.
#[derive(Debug)]
struct RegionLent {
    region: u64,
    ptr: *const u8,
    len: usize,
}

// SAFETY: only read, and only by the engine, which lives under the module lock.
unsafe impl Send for RegionLent {}

impl RegionLent {
    /// # Safety
    /// `[ptr, ptr + len)` must lie inside live region `region` of this module, which must stay
    /// registered until the reply is acknowledged or `ModuleState::forget_region` copies the
    /// bytes out of it (it does before the region goes).
    unsafe fn new(region: u64, ptr: *const u8, len: usize) -> RegionLent {
        RegionLent { region, ptr, len }
    }
}

impl Lent for RegionLent {
    fn pieces(&self) -> [&[u8]; 2] {
        if self.len == 0 {
            // A region of no bytes may be registered at NULL, which no slice may point at.
            return [&[], &[]];
        }
        // SAFETY: per `new`'s contract the bytes are inside a region that is still registered
        // (a region is never forgotten while a reply still lends from it); len > 0, so the
        // pointer is the region's, not NULL.
        [
            unsafe { core::slice::from_raw_parts(self.ptr, self.len) },
            &[],
        ]
    }

    fn owner(&self) -> u64 {
        self.region
    }
}

/// One PUT or GET in flight: everything its completion callback needs.
pub struct RdmaOp {
    pub cb: sys::mca_btl_base_rdma_completion_fn_t,
    pub context: *mut c_void,
    pub data: *mut c_void,
    pub local: *mut c_void,
    pub local_handle: *mut sys::mca_btl_base_registration_handle_t,
    pub endpoint: *mut Endpoint,
    /// The temporary region of a GET's destination.
    pub temp_region: Option<u64>,
}

/// `endpoint` NULL registers for every peer; an endpoint this module does not know registers
/// nothing (NULL: the PML then goes without RDMA for this buffer).
pub fn register(
    m: &ModuleCell,
    endpoint: *mut sys::mca_btl_base_endpoint_t,
    base: *mut c_void,
    size: usize,
    flags: u32,
) -> *mut RegHandle {
    if base.is_null() && size > 0 {
        return core::ptr::null_mut();
    }
    let mut st = m.state.borrow_mut();
    let peer = if endpoint.is_null() {
        None
    } else {
        let Some(ep) = st.check_endpoint(endpoint.cast::<Endpoint>()) else {
            return core::ptr::null_mut();
        };
        // SAFETY: found in the peer table, so live.
        Some(unsafe { (*ep).peer })
    };
    let region = st
        .regions
        .add(base as usize, size, Access::from_flags(flags, peer));
    Box::into_raw(Box::new(RegHandle {
        region,
        base: base as u64,
    }))
}

pub fn deregister(m: &ModuleCell, h: *mut RegHandle) -> i32 {
    if h.is_null() {
        return OPAL_ERR_BAD_PARAM;
    }
    // SAFETY: the PML returns a handle `register` made, exactly once.
    let h = unsafe { Box::from_raw(h) };
    m.state.borrow_mut().forget_region(h.region);
    OPAL_SUCCESS
}

/// Where `remote_address` lies in the peer's registration.
fn remote_offset(
    handle: *const sys::mca_btl_base_registration_handle_t,
    addr: u64,
) -> Option<(u64, u64)> {
    if handle.is_null() {
        return None;
    }
    // SAFETY: the PML passes the peer's handle bytes (HANDLE_SIZE of them, as we declared);
    // read unaligned since they come out of a PML message.
    let h = unsafe { core::ptr::read_unaligned(handle as *const RegHandle) };
    Some((h.region, addr.checked_sub(h.base)?))
}

pub struct RdmaArgs {
    pub endpoint: *mut sys::mca_btl_base_endpoint_t,
    pub local: *mut c_void,
    pub remote: u64,
    pub local_handle: *mut sys::mca_btl_base_registration_handle_t,
    pub remote_handle: *mut sys::mca_btl_base_registration_handle_t,
    pub size: usize,
    pub cb: sys::mca_btl_base_rdma_completion_fn_t,
    pub context: *mut c_void,
    pub data: *mut c_void,
}

fn live_endpoint(
    m: &ModuleCell,
    ep: *mut sys::mca_btl_base_endpoint_t,
) -> Option<(*mut Endpoint, PeerId)> {
    let ep = m.state.borrow().check_endpoint(ep.cast::<Endpoint>())?;
    // SAFETY: found in the peer table, so live.
    let e = unsafe { &*ep };
    (!e.failed.get() && e.module == m.index).then_some((ep, e.peer))
}

pub fn put(m: &ModuleCell, a: RdmaArgs) -> i32 {
    let Some((ep, peer)) = live_endpoint(m, a.endpoint) else {
        return OPAL_ERR_UNREACH;
    };
    let Some((region, offset)) = remote_offset(a.remote_handle, a.remote) else {
        return OPAL_ERR_BAD_PARAM;
    };
    if a.local.is_null() && a.size > 0 {
        return OPAL_ERR_BAD_PARAM;
    }
    let op = Box::into_raw(Box::new(RdmaOp {
        cb: a.cb,
        context: a.context,
        data: a.data,
        local: a.local,
        local_handle: a.local_handle,
        endpoint: ep,
        temp_region: None,
    }));
    let mut st = m.state.borrow_mut();
    let bytes = put_source(&st.regions, &a);
    let now = fabric::now();
    match st
        .engine
        .submit_put(now, peer, region, offset, bytes, Cookie(op as u64))
    {
        Ok(()) => {
            st.puts += 1;
            st.transmit(now);
            OPAL_SUCCESS
        }
        Err(_) => {
            // SAFETY: never handed to the core.
            drop(unsafe { Box::from_raw(op) });
            OPAL_ERR_UNREACH
        }
    }
}

/// A PUT's source: lent from the PML's registration of it when it lies inside (the PML leaves
/// the bytes alone until the completion callback), copied otherwise.
fn put_source(regions: &Regions, a: &RdmaArgs) -> Payload {
    if a.size == 0 {
        return Payload::from(Vec::new());
    }
    if !a.local_handle.is_null() {
        // SAFETY: a local handle is one `register` of a usnic module made (the PML registers
        // with the BTL it puts through); a handle of another module names no region here.
        let h = unsafe { *(a.local_handle as *const RegHandle) };
        if let Some(lent) = (a.local as u64)
            .checked_sub(h.base)
            .and_then(|off| regions.lend(Reader::Local, h.region, off, a.size))
        {
            return lent;
        }
    }
    // SAFETY: the PML's local buffer of `size` bytes, valid until the completion callback;
    // copied now, so it may be reused as soon as the callback says so.
    Payload::from(unsafe { core::slice::from_raw_parts(a.local as *const u8, a.size) }.to_vec())
}

pub fn get(m: &ModuleCell, a: RdmaArgs) -> i32 {
    let Some((ep, peer)) = live_endpoint(m, a.endpoint) else {
        return OPAL_ERR_UNREACH;
    };
    let Some((region, offset)) = remote_offset(a.remote_handle, a.remote) else {
        return OPAL_ERR_BAD_PARAM;
    };
    if a.local.is_null() && a.size > 0 {
        return OPAL_ERR_BAD_PARAM;
    }
    let mut st = m.state.borrow_mut();
    // The destination is writable only by this GET's target, only while it runs.
    let only_target = Access {
        write: true,
        read: false,
        peer: Some(peer),
    };
    let temp = st.regions.add(a.local as usize, a.size, only_target);
    let op = Box::into_raw(Box::new(RdmaOp {
        cb: a.cb,
        context: a.context,
        data: a.data,
        local: a.local,
        local_handle: a.local_handle,
        endpoint: ep,
        temp_region: Some(temp),
    }));
    let now = fabric::now();
    match st.engine.submit_get(
        now,
        peer,
        region,
        offset,
        temp,
        0,
        a.size as u64,
        Cookie(op as u64),
    ) {
        Ok(()) => {
            st.gets += 1;
            st.transmit(now);
            OPAL_SUCCESS
        }
        Err(_) => {
            st.forget_region(temp);
            // SAFETY: never handed to the core.
            drop(unsafe { Box::from_raw(op) });
            OPAL_ERR_UNREACH
        }
    }
}

/// Run a finished operation's callback (no state borrow live) and release it.
pub fn complete(m: &ModuleCell, op: *mut RdmaOp, status: i32) {
    // SAFETY: the cookie was made by put/get from a live box; each completes exactly once.
    let op = unsafe { Box::from_raw(op) };
    if let Some(t) = op.temp_region {
        m.state.borrow_mut().forget_region(t);
    }
    if let Some(cb) = op.cb {
        // SAFETY: the PML's RDMA completion callback with the arguments btl.h prescribes.
        unsafe {
            cb(
                m.btl.get(),
                Endpoint::as_c(op.endpoint),
                op.local,
                op.local_handle,
                op.context,
                op.data,
                status,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: Access = Access {
        write: true,
        read: true,
        peer: None,
    };

    #[test]
    fn region_ids_are_unique_and_not_sequential() {
        let mut r = Regions::new();
        let ids: Vec<u64> = (0..1000).map(|_| r.add(0x1000, 10, ANY)).collect();
        let set: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(set.len(), ids.len(), "unique");
        assert!(
            ids.iter().all(|&i| i > 1 << 16),
            "no small ids: {:?}",
            &ids[..4]
        );
        assert!(ids.windows(2).all(|w| w[1] != w[0].wrapping_add(1)));
        // Another module draws other ids.
        let mut other = Regions::new();
        assert_ne!(other.add(0x1000, 10, ANY), ids[0]);
    }

    /// splitmix64 undone step by step (each of its steps is invertible).
    fn unmix(mut y: u64) -> u64 {
        fn unxorshift(x: u64, s: u32) -> u64 {
            (0..64 / s + 1).fold(x, |r, _| x ^ (r >> s))
        }
        fn inverse(a: u64) -> u64 {
            (0..6).fold(a, |x, _| {
                x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)))
            })
        }
        y = unxorshift(y, 31).wrapping_mul(inverse(0x94D0_49BB_1331_11EB));
        y = unxorshift(y, 27).wrapping_mul(inverse(0xBF58_476D_1CE4_E5B9));
        unxorshift(y, 30).wrapping_sub(0x9E37_79B9_7F4A_7C15)
    }

    #[test]
    fn one_region_id_does_not_give_away_the_next() {
        assert_eq!(
            unmix(crate::proto::splitmix64(12345)),
            12345,
            "the inverse is right"
        );
        let mut r = Regions::new();
        let ids: Vec<u64> = (0..100).map(|_| r.add(0x1000, 10, ANY)).collect();
        for w in ids.windows(2) {
            // Were ids splitmix64(counter ^ key): counter ^ key from one id, and the next
            // counter differs from it in its lowest t + 1 bits for some t.
            let x = unmix(w[0]);
            let guess = (0..64).map(|t| crate::proto::splitmix64(x ^ ((2u128 << t) - 1) as u64));
            assert!(
                !guess.into_iter().any(|g| g == w[1]),
                "{:#x} from {:#x}",
                w[1],
                w[0]
            );
        }
    }

    #[test]
    fn locate_stays_inside_the_region() {
        let mut r = Regions::new();
        let id = r.add(0x1000, 100, ANY);
        let p = PeerId(3);
        assert_eq!(r.write_target(p, id, 0, 100), Some(0x1000 as *mut u8));
        assert_eq!(r.write_target(p, id, 99, 1), Some(0x1063 as *mut u8));
        assert_eq!(r.write_target(p, id, 99, 2), None);
        assert_eq!(r.write_target(p, id, 100, 0), Some(0x1064 as *mut u8));
        assert_eq!(r.write_target(p, id, u64::MAX, 1), None);
        assert_eq!(r.write_target(p, id + 1, 0, 1), None);
        r.remove_region(id);
        assert_eq!(r.write_target(p, id, 0, 1), None);
    }

    #[test]
    fn peers_touch_a_region_only_as_registered() {
        let mut r = Regions::new();
        let buf = [7u8; 16];
        let base = buf.as_ptr() as usize;
        let (a, b) = (PeerId(1), PeerId(2));
        let lendable = |r: &Regions, who, id| r.lend(who, id, 0, 16).is_some();
        let flags = |f, peer| Access::from_flags(f, peer);

        let read_only = r.add(base, 16, flags(sys::MCA_BTL_REG_FLAG_REMOTE_READ, None));
        assert_eq!(
            r.write_target(a, read_only, 0, 1),
            None,
            "PUT into read-only"
        );
        assert!(lendable(&r, Reader::Peer(a), read_only));

        let write_only = r.add(base, 16, flags(sys::MCA_BTL_REG_FLAG_REMOTE_WRITE, None));
        assert!(r.write_target(a, write_only, 0, 1).is_some());
        assert!(
            !lendable(&r, Reader::Peer(a), write_only),
            "GET from write-only"
        );
        // This side's own PUT source is not a peer's access.
        assert!(lendable(&r, Reader::Local, write_only));

        let local = r.add(base, 16, flags(sys::MCA_BTL_REG_FLAG_LOCAL_WRITE, None));
        assert_eq!(r.write_target(a, local, 0, 1), None);
        assert!(!lendable(&r, Reader::Peer(a), local));

        let for_a = r.add(base, 16, flags(sys::MCA_BTL_REG_FLAG_ACCESS_ANY, Some(a)));
        assert!(r.write_target(a, for_a, 0, 1).is_some());
        assert!(lendable(&r, Reader::Peer(a), for_a));
        assert_eq!(
            r.write_target(b, for_a, 0, 1),
            None,
            "another peer's region"
        );
        assert!(!lendable(&r, Reader::Peer(b), for_a));
    }

    #[test]
    fn handle_offsets() {
        let h = RegHandle {
            region: 7,
            base: 5000,
        };
        let p = &h as *const RegHandle as *const sys::mca_btl_base_registration_handle_t;
        assert_eq!(remote_offset(p, 5010), Some((7, 10)));
        assert_eq!(remote_offset(p, 4999), None);
        assert_eq!(remote_offset(core::ptr::null(), 1), None);
    }
}
