//! One BTL module: a fabric module (one interface, two channels) driven by one protocol engine.
//!
//! `ModuleState` is the mutable part, in a `RefCell`. Everything that calls back into Open MPI
//! (PML receive callbacks, send completions, the error callback) is first collected as an
//! [`Upcall`] while the state is borrowed, and only run after the borrow ended: the PML may call
//! straight back into this module (`btl_send` from a receive callback).
//!
//! Files: `receive` (completions and core events in, upcalls collected), `transmit` (the core's
//! datagrams out on the channels), `progress` (the passes that drive both: progress calls and
//! the ACK helper's), `dispatch` (upcalls run into Open MPI), `deliver` (received fragments
//! handed to the PML), `resources` (descriptors, endpoints and regions for the entry points),
//! `cookie` (inline sends' cookies).
mod cookie;
mod deliver;
mod dispatch;
mod progress;
mod receive;
mod resources;
mod transmit;

use std::cell::{Cell, RefCell};

use crate::fabric::{self, BufId, Completion, PeerAddr};
use crate::proto::{Channel, Engine, PeerId, Piece, Stats};

use super::endpoint::Endpoint;
use super::frag::{Frag, FragPool};
use super::modex::ModexEntry;
use super::rdma::{RdmaOp, Regions};
use super::sys;

/// Completions read per channel per progress call (the original reads up to 500).
const CQ_BATCH: usize = 64;
/// Unacknowledged inline-completed bytes above which sends wait for their ACK instead
/// (back-pressure: the PML otherwise could queue without bound).
pub const INLINE_BACKLOG_LIMIT: usize = 32 << 20;

/// Both channels, in the order every pass serves them: the priority channel first, so that
/// ACKs and small messages are not kept behind bulk data.
const CHANNELS: [Channel; 2] = [Channel::Priority, Channel::Data];

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

/// What the module keeps for a peer the core knows: where its datagrams go and the endpoint
/// the PML names it by.
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
    pending_tx: [Option<(BufId, usize, PeerId)>; CHANNELS.len()],
    /// Bytes completed to the PML at submission and not yet acknowledged.
    pub inline_backlog: usize,
    pub finalized: bool,
    pub stats_base: Stats,
    /// Upcalls collected by the ACK helper thread, run by the next progress call.
    pub deferred: Vec<Upcall>,
    /// Bytes of the deliveries in `deferred`: at `progress::DEFERRED_CAP` the helper holds
    /// the engine's receive side until the next progress call.
    pub deferred_bytes: usize,
    /// Times the helper held the receive side (statistics).
    pub holds: u64,
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
    /// Times the fabric refused a lone datagram as busy (a full socket or provider queue;
    /// a retry refused again counts again), and transmit passes whose closing batched send it
    /// refused so; either is kept and offered again on a later pass (statistics).
    pub busy_sends: u64,
    pub busy_batches: u64,
    /// Lone datagrams the fabric refused for good or whose send completed in error (lost like
    /// on a wire; the core repairs them). Refused batches are the fabric's `lost_batched`.
    pub lost_sends: u64,
    /// Progress calls skipped while the module has no peer (it is polled every
    /// `IDLE_POLL_EVERY`th call, so stray datagrams are drained and counted).
    idle_skips: u32,
    /// Consecutive empty polls of the data channel, and progress calls since it was last
    /// polled while quiet.
    data_empty: u32,
    data_skipped: u32,
    /// Per channel: the last poll brought a datagram, so drain the queue this time; else stop
    /// at the first datagram (see `collect`).
    draining: [bool; CHANNELS.len()],
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
            deferred_bytes: 0,
            holds: 0,
            regions: Regions::new(),
            npeers: 0,
            puts: 0,
            gets: 0,
            oversize_recvs: 0,
            busy_sends: 0,
            lost_sends: 0,
            busy_batches: 0,
            idle_skips: 0,
            data_empty: 0,
            data_skipped: 0,
            draining: [false; CHANNELS.len()],
        }
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
}
