//! One BTL module: a fabric module (one interface, two channels) driven by one protocol engine.
//!
//! `ModuleState` is the mutable part, in a `RefCell`. Everything that calls back into Open MPI
//! (PML receive callbacks, send completions, the error callback) is first collected as an
//! [`Upcall`] while the state is borrowed, and only run after the borrow ended: the PML may call
//! straight back into this module (`btl_send` from a receive callback).
use std::cell::{Cell, RefCell};

use crate::fabric::{self, BufId, Completion, Op, PeerAddr, Posted};
use crate::proto::{
    Body, Channel, Cookie, Engine, Event, Failure, Instant, PeerId, Piece, RxOutcome, Stats,
};

use super::endpoint::Endpoint;
use super::frag::{Frag, FragPool};
use super::help::show_help;
use super::log;
use super::modex::ModexEntry;
use super::rdma::{RdmaOp, Regions};
use super::status::*;
use super::sys;

/// Completions read per channel per progress call (the original reads up to 500).
const CQ_BATCH: usize = 64;
/// Segment payloads at least this long are sent from where they lie (`fi_sendv` of header
/// and payload) instead of being copied behind the header first.
const GATHER_MIN: usize = 4096;
/// Cookies with this bit are inline sends (no descriptor): counted, never called back; the
/// bits below it are the send's size.
const INLINE_COOKIE: u64 = 1 << 63;
/// A module without peers is polled on every this many progress calls only (each poll of the
/// udp provider costs a recvmsg per channel).
const IDLE_POLL_EVERY: u32 = 64;
/// Empty polls after which the data channel counts as quiet ...
const DATA_QUIET_AFTER: u32 = 64;
/// ... and is then polled only every this many progress calls (until it yields something).
/// Every poll of the udp provider is a recvmsg system call; small messages and ACKs travel on
/// the priority channel, so while the data channel is quiet half of each progress loop was an
/// empty system call, which a ping-pong pays for in detection delay on every hop.
const DATA_QUIET_POLL_EVERY: u32 = 4;
/// Data datagrams one transmit pass sends while the data channel is receiving too (its last
/// poll brought a datagram); the rest wait for the next progress call. A rank that sends its
/// whole window in one pass (31 datagrams of 64 KiB on `lo`, about 200 us) reads nothing for
/// that long: the peer's data and ACKs wait in the socket, the peer's window stalls and its
/// retransmit timer fires. Bidirectional 4 MiB, interleaved, 8 runs: 6.2 -> 7.6 GB/s in the
/// VM's slow state; in its fast one within the noise (8.3 -> 8.5, and 7.75 -> 7.75 in a later
/// 6-run A/B); 1 MiB +6-14 % in the slow state. A one-way stream is not capped
/// (its sender receives only ACKs, on the priority channel): one-way bandwidth and
/// latency unchanged. Capping every pass instead cost 8 % of one-way 4 MiB bandwidth.
const BURST_WHILE_RECEIVING: usize = 4;
/// `FI_ETRUNC` of `<rdma/fi_errno.h>`: a receive longer than the posted buffer.
const FI_ETRUNC: i32 = 265;
/// Unacknowledged inline-completed bytes above which sends wait for their ACK instead
/// (back-pressure: the PML otherwise could queue without bound).
pub const INLINE_BACKLOG_LIMIT: usize = 32 << 20;

pub const CHANNELS: [Channel; 2] = [Channel::Priority, Channel::Data];

/// Fixed facts about a module, given to the shim for the module struct.
#[derive(Clone, Debug)]
pub struct ModuleInfo {
    pub name: String,
    pub eager_limit: usize,
    pub rndv_eager_limit: usize,
    pub max_send_size: usize,
    pub bandwidth: u32,
    pub latency: u32,
    pub flags: u32,
    /// Largest single PUT/GET (0 when RDMA is off).
    pub rdma_limit: usize,
    /// Contiguous data shorter than this is copied by `prepare_src` (`btl_usnic_pack_lazy_threshold`).
    pub copy_below: usize,
}

impl ModuleInfo {
    /// Largest descriptor the PML may ask for: an eager message (up to the eager limit) or a
    /// pipeline fragment (up to the maximum send size), whichever is larger.
    pub fn send_limit(&self) -> usize {
        self.max_send_size.max(self.eager_limit)
    }
}

pub struct PeerSlot {
    pub addr: PeerAddr,
    /// Leaked box handed to the PML; freed by `drop_endpoint`.
    pub endpoint: *mut Endpoint,
}

/// Something to tell Open MPI once no borrow of the module state is live.
pub enum Upcall {
    /// A single-datagram fragment, still in receive buffer `buf` (reposted after the callback).
    DeliverInPlace {
        ch: Channel,
        buf: BufId,
        data: *const u8,
        len: usize,
        tag: u8,
    },
    /// A reassembled fragment.
    DeliverOwned { data: Vec<u8>, tag: u8 },
    /// A fragment left in the receive buffers its chunks arrived in (reposted after the
    /// callback), or partly in bytes of its own.
    DeliverPieces {
        pieces: Vec<Piece>,
        len: usize,
        tag: u8,
    },
    /// A descriptor's send is complete (or failed).
    SendDone { frag: *mut Frag, status: i32 },
    /// The core gave up on a peer.
    PeerFailed { endpoint: *mut Endpoint },
    /// A PUT or GET finished (or failed).
    RdmaDone { op: *mut RdmaOp, status: i32 },
}

pub struct ModuleState {
    pub fabric: fabric::Module,
    pub engine: Engine,
    /// Indexed by `PeerId.0`.
    pub peers: Vec<Option<PeerSlot>>,
    pub frags: FragPool,
    completions: Vec<Completion>,
    /// A datagram the fabric refused with EAGAIN, retried before asking the core for more.
    pending_tx: [Option<(BufId, usize, PeerId)>; 2],
    /// Bytes completed to the PML at submission and not yet acknowledged.
    pub inline_backlog: usize,
    pub finalized: bool,
    pub stats_base: Stats,
    /// Upcalls collected by the ACK helper thread, run by the next progress call.
    pub deferred: Vec<Upcall>,
    /// Memory peers may write or read (emulated RDMA).
    pub regions: Regions,
    /// Peers currently added (a module nobody is paired with is not polled: every poll of the
    /// udp provider costs a recvmsg per channel).
    pub npeers: usize,
    /// PUT / GET operations started by this module (statistics).
    pub puts: u64,
    pub gets: u64,
    /// Datagrams longer than the channel's MTU (the fabric reports them as truncated receives).
    pub oversize_recvs: u64,
    /// Progress calls skipped while the module has no peer (it is polled every
    /// `IDLE_POLL_EVERY`th call, so stray datagrams are drained and counted).
    idle_skips: u32,
    /// Consecutive empty polls of the data channel, and progress calls since it was last
    /// polled while quiet.
    data_empty: u32,
    data_skipped: u32,
    /// Per channel: the last poll brought a datagram, so drain the queue this time; else stop
    /// at the first datagram (see `collect`).
    draining: [bool; 2],
}

pub struct ModuleCell {
    pub index: u32,
    pub info: ModuleInfo,
    /// What this module published (its own modex entry).
    pub entry: ModexEntry,
    /// The shim's module struct (set right after init).
    pub btl: Cell<*mut sys::mca_btl_base_module_t>,
    pub error_cb: Cell<sys::mca_btl_base_module_error_cb_fn_t>,
    pub state: RefCell<ModuleState>,
    /// Reused upcall batch (taken while in use, so nested progress gets a fresh one).
    batch: Cell<Vec<Upcall>>,
    /// Reused list of receive buffers a dispatch gives back (taken the same way).
    reposts: Cell<Vec<(Channel, BufId)>>,
}

impl ModuleState {
    pub fn new(fabric: fabric::Module, engine: Engine) -> Self {
        ModuleState {
            fabric,
            engine,
            peers: Vec::new(),
            frags: FragPool::default(),
            completions: Vec::with_capacity(CQ_BATCH),
            pending_tx: [None, None],
            inline_backlog: 0,
            finalized: false,
            stats_base: Stats::default(),
            deferred: Vec::new(),
            regions: Regions::keyed(super::component::random_u64()),
            npeers: 0,
            puts: 0,
            gets: 0,
            oversize_recvs: 0,
            idle_skips: 0,
            data_empty: 0,
            data_skipped: 0,
            draining: [false; 2],
        }
    }

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

    pub fn endpoint_of(&self, peer: PeerId) -> *mut Endpoint {
        self.peers
            .get(peer.0 as usize)
            .and_then(|s| s.as_ref())
            .map_or(core::ptr::null_mut(), |s| s.endpoint)
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

    /// A cookie for a send completed inline; its size joins the backlog until the core
    /// completes it.
    pub fn inline_cookie(&mut self, len: usize) -> Cookie {
        self.inline_backlog += len;
        inline_cookie_of(len)
    }

    /// Turn core events into upcalls (and handle the ones that need no Open MPI call).
    pub fn drain_events(&mut self, now: Instant, out: &mut Vec<Upcall>) {
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                Event::Deliver { tag, data, .. } => out.push(Upcall::DeliverOwned { data, tag }),
                Event::DeliverPieces {
                    tag, len, pieces, ..
                } => out.push(Upcall::DeliverPieces { pieces, len, tag }),
                Event::Release { handles } => {
                    for h in handles {
                        let (ch, buf) = held_buffer(h);
                        self.fabric.repost(ch, buf);
                    }
                }
                Event::SendComplete { cookie, result, .. } => {
                    if let Some(len) = inline_len(cookie) {
                        self.inline_backlog = self.inline_backlog.saturating_sub(len);
                    } else if cookie.0 != 0 {
                        out.push(Upcall::SendDone {
                            frag: cookie.0 as *mut Frag,
                            status: failure_code(result),
                        });
                    }
                }
                Event::PeerFailed { peer, .. } => {
                    let endpoint = self.endpoint_of(peer);
                    if !endpoint.is_null() {
                        out.push(Upcall::PeerFailed { endpoint });
                    }
                }
                Event::GetRequest {
                    peer,
                    request,
                    region,
                    offset,
                    len,
                } => {
                    let answer = usize::try_from(len)
                        .ok()
                        .and_then(|len| self.regions.lend(region, offset, len))
                        .ok_or(());
                    self.engine.answer_get(now, peer, request, answer);
                }
                Event::PutComplete { cookie, result, .. }
                | Event::GetComplete { cookie, result, .. } => {
                    if cookie.0 != 0 {
                        out.push(Upcall::RdmaDone {
                            op: cookie.0 as *mut RdmaOp,
                            status: failure_code(result),
                        });
                    }
                }
            }
        }
    }

    /// Read completions of both channels and feed them to the core.
    pub fn collect(&mut self, now: Instant, out: &mut Vec<Upcall>) -> usize {
        let mut n = 0;
        let mut answer_first = false;
        for ch in CHANNELS {
            if answer_first {
                // A request arrived while we waited: the PML hears of it before another
                // system call looks at the data channel (polled on the next pass).
                break;
            }
            if ch == Channel::Data && self.data_empty >= DATA_QUIET_AFTER {
                self.data_skipped += 1;
                if self.data_skipped < DATA_QUIET_POLL_EVERY {
                    continue;
                }
                self.data_skipped = 0;
            }
            let mut comps = core::mem::take(&mut self.completions);
            comps.clear();
            // A datagram that arrives while we wait is answered before looking for the next
            // one, which costs a system call (EAGAIN in a ping-pong); a stream is drained in
            // batches from the poll after the first datagram until a poll finds nothing.
            let ci = ch as usize;
            let polled = if self.draining[ci] {
                self.fabric.poll(ch, CQ_BATCH, &mut comps)
            } else {
                self.fabric.poll_first(ch, &mut comps)
            };
            let received = comps.iter().any(|c| matches!(c, Completion::Recv { .. }));
            answer_first = received && !self.draining[ci];
            self.draining[ci] = received;
            if let Err(e) = polled {
                log::error(&format!("completion queue of channel {ch:?} failed: {e}"));
            }
            if ch == Channel::Data {
                self.data_empty = if comps.is_empty() {
                    self.data_empty.saturating_add(1)
                } else {
                    0
                };
            }
            n += comps.len();
            for c in comps.drain(..) {
                self.completion(now, ch, c, out);
                self.drain_events(now, out);
            }
            self.completions = comps;
        }
        if let Some(t) = self.engine.poll_timeout() {
            if t <= now {
                self.engine.handle_timeout(now);
                self.drain_events(now, out);
            }
        }
        n
    }

    fn completion(&mut self, now: Instant, ch: Channel, c: Completion, out: &mut Vec<Upcall>) {
        match c {
            Completion::Recv { buf, len } => {
                let datagram = self.fabric.rx_bytes(ch, buf, len);
                let outcome = if ch == Channel::Data {
                    self.engine
                        .handle_datagram_held(now, ch, datagram, held_handle(buf))
                } else {
                    self.engine.handle_datagram(now, ch, datagram)
                };
                match outcome {
                    // Stays out of the fabric until the core names it again.
                    RxOutcome::Held => {}
                    RxOutcome::Deliver { tag, payload, .. } if payload.end <= len => {
                        // SAFETY: rx_ptr is the start of the buffer's `len` received bytes and
                        // `payload` lies inside them; the buffer stays ours (not reposted) until
                        // the upcall has run.
                        let data = unsafe { self.fabric.rx_ptr(ch, buf).add(payload.start) };
                        out.push(Upcall::DeliverInPlace {
                            ch,
                            buf,
                            data,
                            len: payload.len(),
                            tag,
                        });
                    }
                    RxOutcome::Write {
                        peer,
                        region,
                        offset,
                        payload,
                    } => {
                        let n = payload.len();
                        match self.regions.locate(region, offset, n) {
                            Some(dst) if payload.end <= len => {
                                let src = &self.fabric.rx_bytes(ch, buf, len)[payload];
                                // SAFETY: `locate` checked that [dst, dst + n) lies inside memory
                                // registered for this (a PUT target or a GET's destination);
                                // it cannot overlap our receive buffer.
                                unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
                            }
                            // Outside registered memory: refuse, never write.
                            _ => self.engine.refuse_write(now, peer),
                        }
                        self.fabric.repost(ch, buf);
                    }
                    _ => self.fabric.repost(ch, buf),
                }
            }
            Completion::SendDone { .. } => self.engine.handle_send_complete(ch),
            Completion::Error { op, error, .. } => match op {
                // The buffer is free again: one credit back (the core retransmits if needed).
                Op::Send => {
                    log::verbose(5, || format!("send on {ch:?} failed: {error}"));
                    self.engine.handle_send_complete(ch);
                }
                Op::Recv => {
                    if error.code == FI_ETRUNC {
                        self.oversize_recvs += 1;
                    }
                    log::verbose(5, || format!("receive on {ch:?} failed: {error}"))
                }
            },
        }
    }

    /// Hand every datagram the core has ready to the fabric, while buffers and credits last.
    pub fn transmit(&mut self, now: Instant) {
        for ch in CHANNELS {
            self.transmit_channel(now, ch);
            if !self.fabric.has_batch(ch) {
                continue;
            }
            match self.fabric.flush_sends(ch) {
                // Kept by the fabric for the next pass.
                Err(e) if e.is_would_block() => {}
                Err(e) => log::verbose(5, || format!("batched send on {ch:?} failed: {e}")),
                Ok(()) => {}
            }
        }
    }

    fn transmit_channel(&mut self, now: Instant, ch: Channel) {
        let ci = ch as usize;
        if let Some((buf, len, peer)) = self.pending_tx[ci].take() {
            if !self.send_one(ch, buf, len, peer) {
                return;
            }
        }
        // Most progress calls have nothing to send: no send buffer taken and given back.
        if !self.engine.wants_transmit(ch) {
            return;
        }
        let batch_room = self.fabric.batch_room(ch);
        // A batched send costs the sending core about what one datagram did alone, so the
        // burst counts system calls rather than datagrams.
        let burst = if ch == Channel::Data && self.draining[ci] {
            BURST_WHILE_RECEIVING * batch_room.max(1)
        } else {
            usize::MAX
        };
        if batch_room > 0 {
            self.transmit_batched(now, ch, burst);
            return;
        }
        let gather_min = if self.fabric.can_gather(ch) {
            GATHER_MIN
        } else {
            usize::MAX
        };
        for _ in 0..burst {
            let Some((buf, bytes)) = self.fabric.tx_buffer(ch) else {
                break;
            };
            let Some(t) = self.engine.poll_transmit_gather(now, ch, bytes, gather_min) else {
                self.fabric.release_tx(ch, buf);
                break;
            };
            let sent = match t.body {
                Some(body) => self.send_gathered(ch, buf, t.len, body, t.peer),
                None => self.send_one(ch, buf, t.len, t.peer),
            };
            if !sent {
                break;
            }
        }
    }

    /// `transmit_channel` where the channel batches: the core writes each datagram, payload
    /// and all, straight into the batch, with no send buffer taken and no copy after it.
    fn transmit_batched(&mut self, now: Instant, ch: Channel, burst: usize) {
        for _ in 0..burst {
            let Some(slot) = self.fabric.batch_slot(ch) else {
                break;
            };
            let Some(t) = self.engine.poll_transmit(now, ch, slot) else {
                break;
            };
            // A peer removed since the core queued the datagram: dropped.
            if let Some(addr) = self.peers.get(t.peer.0 as usize).and_then(|s| s.as_ref()) {
                self.fabric.commit_batched(ch, t.len, &addr.addr);
            }
            // Done once in the batch: no completion gives the credit back.
            self.engine.handle_send_complete(ch);
        }
    }

    /// Where datagrams to `peer` go; `None` (buffer and credit given back) when the peer was
    /// removed after the core queued the datagram.
    fn destination(&mut self, ch: Channel, buf: BufId, peer: PeerId) -> Option<PeerAddr> {
        let addr = self
            .peers
            .get(peer.0 as usize)
            .and_then(|s| s.as_ref())
            .map(|s| s.addr);
        if addr.is_none() {
            self.fabric.release_tx(ch, buf);
            self.engine.handle_send_complete(ch);
        }
        addr
    }

    /// Post one datagram; false when the fabric is busy (kept for retry).
    fn send_one(&mut self, ch: Channel, buf: BufId, len: usize, peer: PeerId) -> bool {
        let Some(addr) = self.destination(ch, buf, peer) else {
            return true;
        };
        let r = self.fabric.post_send(ch, buf, len, &addr);
        self.sent(ch, buf, len, peer, r)
    }

    /// Post a header in `buf` and a payload the core leaves in place (`Transmit::body`).
    fn send_gathered(
        &mut self,
        ch: Channel,
        buf: BufId,
        len: usize,
        body: Body,
        peer: PeerId,
    ) -> bool {
        let Some(addr) = self.destination(ch, buf, peer) else {
            return true;
        };
        let pieces = self.engine.body(&body);
        let r = self.fabric.post_send_gather(ch, buf, len, pieces, &addr);
        if matches!(&r, Err(e) if e.is_would_block()) {
            // Kept for retry as a plain datagram: the body is valid only until the core
            // changes, so it is copied behind the header now.
            let whole = len + pieces[0].len() + pieces[1].len();
            if let Ok(bytes) = self.fabric.tx_bytes(ch, buf) {
                bytes[len..len + pieces[0].len()].copy_from_slice(pieces[0]);
                bytes[len + pieces[0].len()..whole].copy_from_slice(pieces[1]);
            }
            return self.sent(ch, buf, whole, peer, r);
        }
        self.sent(ch, buf, len, peer, r)
    }

    /// Account for one post: busy keeps it for retry (false), a failure is a loss.
    fn sent(
        &mut self,
        ch: Channel,
        buf: BufId,
        len: usize,
        peer: PeerId,
        r: Result<Posted, fabric::FabricError>,
    ) -> bool {
        match r {
            Ok(Posted::Pending) => true,
            // Injected: no completion will give the credit back.
            Ok(Posted::Done) => {
                self.engine.handle_send_complete(ch);
                true
            }
            Err(e) if e.is_would_block() => {
                self.pending_tx[ch as usize] = Some((buf, len, peer));
                false
            }
            Err(e) => {
                // Lost like a dropped datagram: the core's retransmission repairs it.
                log::verbose(5, || format!("post_send on {ch:?} failed: {e}"));
                self.fabric.release_tx(ch, buf);
                self.engine.handle_send_complete(ch);
                true
            }
        }
    }

    /// Give back the rx buffers of finished in-place deliveries, and post them.
    pub fn repost_all(&mut self, bufs: &[(Channel, BufId)]) {
        for &(ch, buf) in bufs {
            self.fabric.repost(ch, buf);
        }
        if let Err(e) = self.fabric.flush_reposts() {
            log::error(&format!("reposting receive buffers failed: {e}"));
        }
    }
}

/// The cookie of an inline send carries its size, so completing it needs no table entry per
/// tiny message; descriptor cookies are addresses, which never have the top bit set.
fn inline_cookie_of(len: usize) -> Cookie {
    Cookie(INLINE_COOKIE | (len as u64 & !INLINE_COOKIE))
}

/// The size of an inline send's cookie; `None` for a descriptor's cookie.
fn inline_len(cookie: Cookie) -> Option<usize> {
    (cookie.0 & INLINE_COOKIE != 0).then_some((cookie.0 & !INLINE_COOKIE) as usize)
}

fn failure_code(r: Result<(), Failure>) -> i32 {
    match r {
        Ok(()) => OPAL_SUCCESS,
        Err(Failure::PeerUnreachable) => OPAL_ERR_UNREACH,
        Err(Failure::RemoteRefused) => OPAL_ERROR,
    }
}

impl ModuleCell {
    pub fn new(index: u32, info: ModuleInfo, entry: ModexEntry, state: ModuleState) -> Self {
        ModuleCell {
            index,
            info,
            entry,
            btl: Cell::new(core::ptr::null_mut()),
            error_cb: Cell::new(None),
            state: RefCell::new(state),
            batch: Cell::new(Vec::new()),
            reposts: Cell::new(Vec::new()),
        }
    }

    /// One progress pass: completions in, upcalls out, datagrams out. Returns how many
    /// completions were handled.
    pub fn progress(&self, now: Instant) -> usize {
        let mut batch = self.batch.take();
        let n = {
            let mut st = self.state.borrow_mut();
            if st.finalized {
                self.batch.set(batch);
                return 0;
            }
            if st.npeers == 0 && st.deferred.is_empty() {
                st.idle_skips += 1;
                if st.idle_skips < IDLE_POLL_EVERY {
                    self.batch.set(batch);
                    return 0;
                }
                st.idle_skips = 0;
            }
            if !st.deferred.is_empty() {
                batch.append(&mut st.deferred);
            }
            let n = st.collect(now, &mut batch);
            st.transmit(now);
            if let Err(e) = st.fabric.flush_reposts() {
                log::error(&format!("reposting receive buffers failed: {e}"));
            }
            n
        };
        if !batch.is_empty() {
            self.dispatch(&mut batch);
        }
        self.batch.set(batch);
        n
    }

    /// The ACK helper's pass: feed the core what arrived (so it acknowledges), transmit, and
    /// keep every upcall for the next progress call. In-place deliveries are copied out so the
    /// receive buffers go back to the fabric at once.
    pub fn service_in_background(&self, now: Instant) {
        let mut st = self.state.borrow_mut();
        if st.finalized || st.npeers == 0 {
            return;
        }
        let mut ups = Vec::new();
        st.collect(now, &mut ups);
        for up in ups {
            match up {
                Upcall::DeliverInPlace {
                    ch,
                    buf,
                    data,
                    len,
                    tag,
                } => {
                    // SAFETY: `data` points at `len` received bytes of buffer `buf`, which is
                    // not reposted yet (it is reposted right after this copy).
                    let v = unsafe { core::slice::from_raw_parts(data, len) }.to_vec();
                    st.fabric.repost(ch, buf);
                    st.deferred.push(Upcall::DeliverOwned { data: v, tag });
                }
                other => st.deferred.push(other),
            }
        }
        st.transmit(now);
        if let Err(e) = st.fabric.flush_reposts() {
            log::error(&format!("reposting receive buffers failed: {e}"));
        }
    }

    /// Run upcalls with no borrow of the state live, then repost what they used.
    pub fn dispatch(&self, batch: &mut Vec<Upcall>) {
        let btl = self.btl.get();
        let mut reposts = self.reposts.take();
        for up in batch.drain(..) {
            match up {
                Upcall::DeliverInPlace {
                    ch,
                    buf,
                    data,
                    len,
                    tag,
                } => {
                    deliver(btl, tag, data as *mut u8, len);
                    reposts.push((ch, buf));
                }
                Upcall::DeliverOwned { mut data, tag } => {
                    let len = data.len();
                    deliver(btl, tag, data.as_mut_ptr(), len);
                    // The PML copied what it needed during its callback.
                    self.state.borrow_mut().engine.recycle(data);
                }
                Upcall::DeliverPieces {
                    mut pieces,
                    len,
                    tag,
                } => {
                    self.deliver_pieces(tag, &pieces, len);
                    let mut st = self.state.borrow_mut();
                    for p in pieces.drain(..) {
                        match p {
                            Piece::Held { handle, .. } => reposts.push(held_buffer(handle)),
                            Piece::Owned(v) => st.engine.recycle(v),
                        }
                    }
                    st.engine.recycle_pieces(pieces);
                }
                Upcall::SendDone { frag, status } => self.complete_send(frag, status),
                Upcall::PeerFailed { endpoint } => self.peer_failed(endpoint),
                Upcall::RdmaDone { op, status } => super::rdma::complete(self, op, status),
            }
        }
        let mut st = self.state.borrow_mut();
        if !reposts.is_empty() {
            st.repost_all(&reposts);
            reposts.clear();
        }
        self.reposts.set(reposts);
        // Callbacks may have queued sends (their own transmit already ran), and ACKs may be owed.
        st.transmit(crate::fabric::now());
    }

    /// One descriptor whose segments are the pieces where they lie; more pieces than a
    /// descriptor carries are copied into one buffer first.
    fn deliver_pieces(&self, tag: u8, pieces: &[Piece], len: usize) {
        const MAX: usize = sys::MCA_BTL_DES_MAX_SEGMENTS as usize;
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
        let mut whole = self.state.borrow_mut().engine.spare_buffer(len);
        {
            let st = self.state.borrow();
            for p in pieces {
                let (ptr, n) = piece_bytes(&st, p);
                // SAFETY: `n` received bytes in a buffer the core kept (not reposted until
                // after this delivery) or an owned piece alive in `pieces`.
                whole.extend_from_slice(unsafe { core::slice::from_raw_parts(ptr, n) });
            }
        }
        deliver(self.btl.get(), tag, whole.as_mut_ptr(), whole.len());
        self.state.borrow_mut().engine.recycle(whole);
    }

    /// Tell the PML a descriptor's send finished, then free it if the BTL owns it.
    fn complete_send(&self, frag: *mut Frag, status: i32) {
        // SAFETY: the cookie was made from a live frag by `send`; a frag whose send is
        // outstanding is never freed (neither the BTL nor the PML frees it before this callback).
        let (cb, ep, flags) = unsafe {
            (
                (*frag).des.des_cbfunc,
                (*frag).endpoint,
                (*frag).des.des_flags,
            )
        };
        if let Some(cb) = cb {
            // SAFETY: the PML's completion callback with the arguments btl.h prescribes.
            unsafe { cb(self.btl.get(), Endpoint::as_c(ep), frag.cast(), status) };
        }
        if flags & DES_FLAGS_BTL_OWNERSHIP != 0 {
            let mut st = self.state.borrow_mut();
            // SAFETY: BTL-owned and called back: nobody else refers to it any more.
            unsafe { st.free_frag(frag) };
        }
    }

    fn peer_failed(&self, endpoint: *mut Endpoint) {
        // SAFETY: endpoints stay allocated until del_procs/finalize, which drain events first.
        let ep = unsafe { &*endpoint };
        if ep.failed.replace(true) {
            return;
        }
        let timeout = self.state.borrow().engine.config().peer_timeout.0 / 1_000_000;
        let msg = format!(
            "{} stopped acknowledging on interface {} ({}): nothing for {} ms \
             (btl_usnic_peer_timeout); it is considered failed",
            ep.describe(),
            self.info.name,
            self.entry.ipv4,
            timeout
        );
        // (During component close the component is already taken out of its cell.)
        let (my_host, my_rank) =
            super::component::with_component(|c| (c.my_host.clone(), c.my_vpid.to_string()))
                .unwrap_or_else(|| (super::component::my_hostname(), "(closing)".into()));
        show_help!("peer unreachable", msg.clone();
            s(&my_host),
            s(format!("rank {my_rank}")),
            s(&ep.host),
            s(format!("rank {}", ep.vpid)),
            s(format!("{} (from local interface {} {})", ep.remote_ipv4, self.info.name, self.entry.ipv4)),
            i(timeout.min(i32::MAX as u64)));
        if let Some(cb) = self.error_cb.get() {
            let c = std::ffi::CString::new(msg).unwrap_or_default();
            // SAFETY: the PML's error callback (registered through btl_register_error) with the
            // failing proc; the string lives through the call. ob1 aborts the job from it.
            unsafe {
                cb(
                    self.btl.get(),
                    sys::MCA_BTL_ERROR_FLAGS_FATAL as i32,
                    ep.proc_,
                    c.as_ptr() as *mut _,
                )
            };
        }
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

/// The handle by which the core names a kept receive buffer (only the data channel's are
/// offered: chunks travel there).
fn held_handle(buf: BufId) -> u64 {
    u64::from(buf.0)
}

fn held_buffer(handle: u64) -> (Channel, BufId) {
    (Channel::Data, BufId(handle as u32))
}

/// Hand `len` bytes at `data` to the active-message callback of `tag`, with a descriptor that
/// lives on this stack frame (the PML may only read it during the callback).
fn deliver(btl: *mut sys::mca_btl_base_module_t, tag: u8, data: *mut u8, len: usize) {
    // SAFETY: plain C struct; zero is its valid initial state.
    let mut seg: sys::mca_btl_base_segment_t = unsafe { core::mem::zeroed() };
    seg.seg_addr.pval = data.cast();
    seg.seg_len = len as u64;
    deliver_descriptor(btl, tag, core::slice::from_mut(&mut seg));
}

/// Hand the PML one received fragment made of `segs` (at most `MCA_BTL_DES_MAX_SEGMENTS`,
/// the first holding the PML's header), each readable for its length.
fn deliver_segments(btl: *mut sys::mca_btl_base_module_t, tag: u8, segs: &[(*mut u8, usize)]) {
    const MAX: usize = sys::MCA_BTL_DES_MAX_SEGMENTS as usize;
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
    if rc != 0 {
        let len: u64 = segments.iter().map(|s| s.seg_len).sum();
        log::error(&format!(
            "dropped a {len}-byte fragment with tag {tag:#x}: no PML callback registered for it"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_cookies_carry_their_size_and_descriptor_cookies_none() {
        for len in [0, 1, 768, 525_312, 32 << 20] {
            assert_eq!(inline_len(inline_cookie_of(len)), Some(len));
        }
        let frag = Box::new(0u64);
        assert_eq!(inline_len(Cookie(&*frag as *const u64 as u64)), None);
        assert_eq!(inline_len(Cookie(0)), None);
    }

    #[test]
    fn fi_etrunc_is_libfabrics_truncation_code() {
        // libfabric's own text for the code, so a wrong constant cannot go unnoticed.
        let e = fabric::FabricError::from_ret("test", -(FI_ETRUNC as i64));
        assert!(e.message.to_lowercase().contains("trunc"), "{e}");
    }
}
