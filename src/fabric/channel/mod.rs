//! One channel: an FI_EP_DGRAM endpoint with its own CQ, posted receive buffers (batched
//! reposting) and send buffers (one per send credit).
//!
//! This file holds the channel's state and the operation contexts both paths tag; the methods
//! are split by job so each path reads on its own: `open` (endpoint, CQ, socket use, buffers
//! and their registration), `send` (send buffers, and a datagram sent on the socket or through the provider), `batch`
//! (sends through the batch on the endpoint's socket, `gso.rs`), `receive` (completions,
//! reads of the socket, reposting).

mod batch;
mod open;
mod receive;
mod send;

use super::bufpool::Slab;
use super::fid::Fid;
use super::gro::Gro;
use super::gso::Batch;
use super::sys;
use std::os::fd::RawFd;
use std::os::raw::c_void;

/// What the edge does with the endpoint's socket (`udp` provider only: others have none).
#[derive(Copy, Clone, Debug)]
pub(crate) struct SocketUse {
    /// The provider has sent a datagram when `fi_send`/`fi_sendv` returns (udp: one
    /// `sendmsg`), so a body gathered from memory it does not own may change right after.
    /// Others (`sockets`) keep the iovec and read it later.
    pub sends_at_once: bool,
    /// Size its buffers (`sockbuf.rs`).
    pub tune: bool,
    /// Send on it ourselves, one system call per datagram (`send.rs`).
    pub send: bool,
    /// Batch sends (`gso.rs`).
    pub batch: bool,
    /// Read the socket itself instead of through the provider (`gro.rs`).
    pub read: bool,
    /// ... in runs of datagrams, where they can run together.
    pub runs: bool,
}

/// Queue sizes and datagram size of one channel.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Sizes {
    pub sd: usize,
    pub rd: usize,
    pub cq: usize,
    pub mtu: usize,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum TxState {
    /// On the free list: one send credit.
    Free,
    /// Handed to the caller by `tx_buffer`, not yet sent.
    Lent,
    /// Accepted by the provider; its send completion (or the fault injector) frees it.
    InFlight,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum RxState {
    /// Posted to the provider (never on a channel that reads its socket: its free buffers stay
    /// `Queued`).
    Posted,
    /// Its datagram is with the caller until `repost`.
    Lent,
    /// Given back by `repost`, waiting for the next batch of posts (a channel that reads its
    /// socket reads into it again instead).
    Queued,
}

/// CQ entries fetched per `fi_cq_read`: one call drains a burst of a window's datagrams, and
/// 8 or 16 measured no better in bidirectional runs (`docs/levers.md`, "Tried and dropped").
const CQ_BATCH: usize = 64;
/// Returned receive buffers are posted in batches of up to this many...
const REPOST_BATCH_MAX: usize = 16;
/// ...and at most this share (1/n) of the channel's buffers is kept back waiting for a batch.
const REPOST_BATCH_SHARE: usize = 8;

/// Operation contexts are plain tagged integers, never dereferenced: the provider is not
/// asked for `FI_CONTEXT` mode, so it only hands them back. Bit 0: receive; above: index + 1
/// (so no context is NULL).
fn context(idx: usize, rx: bool) -> *mut c_void {
    (((idx + 1) << 1) | usize::from(rx)) as *mut c_void
}

/// The buffer index and direction of a context made by [`context`]; None for NULL.
fn decode(ctx: *mut c_void) -> Option<(usize, bool)> {
    let v = ctx as usize;
    let idx = (v >> 1).checked_sub(1)?;
    Some((idx, v & 1 == 1))
}

pub(crate) struct ChannelRes {
    // Field order is close order: the endpoint first (it references CQ, AV and the posted
    // buffers), then the registrations, then the CQ, then the memory itself.
    ep: Fid<sys::fid_ep>,
    /// The buffers' registrations, where the provider wants them (`FI_MR_LOCAL`); a channel
    /// with any cannot hand the provider user memory (`can_gather`).
    mrs: Vec<Fid<sys::fid_mr>>,
    cq: Fid<sys::fid_cq>,
    rx: Slab,
    tx: Slab,
    rx_desc: *mut c_void,
    tx_desc: *mut c_void,
    /// `FI_MSG_PREFIX` bytes reserved before every payload (0 for `udp`).
    prefix: usize,
    /// The provider's `tx_attr.iov_limit`: buffers one `fi_sendv` may gather.
    iov_limit: usize,
    /// `SocketUse::sends_at_once`.
    sends_at_once: bool,
    /// The provider's `tx_attr.inject_size`: where the provider sends, datagrams up to this long
    /// (prefix included) are sent with `fi_inject`.
    inject_size: usize,
    pub(crate) mtu: usize,
    /// The endpoint's bound address (network-order fields, as from getsockname).
    pub(crate) name: libc::sockaddr_in,
    /// (SO_RCVBUF, SO_SNDBUF) of the endpoint's socket after sizing (udp provider only).
    pub(crate) socket_buffers: Option<(usize, usize)>,
    /// The provider's socket where the channel sends on it itself (udp provider): the
    /// provider's `fi_inject` and `fi_send` make the same system call behind its own checks,
    /// address lookup and (for `fi_send`) a completion to read back.
    send_socket: Option<RawFd>,
    /// Datagrams waiting to leave together in one system call (udp provider, `gso.rs`).
    batch: Option<Batch>,
    /// `lost_batched` of a batcher given up (the route cannot segment).
    lost_unbatched: u64,
    /// Reads the socket itself (udp provider, `gro.rs`), in runs of datagrams or one at a
    /// time. The provider is then given no receive buffer (it reads only into posted ones),
    /// and `reposts` holds the free ones.
    gro: Option<Gro>,
    /// Sends given to the provider whose completion has not been read. Reading the socket
    /// itself with none of these, the channel has nothing in the provider's CQ, and `poll`
    /// skips `fi_cq_read` (the provider's lock pair and progress pass).
    provider_sends: usize,
    tx_free: Vec<u32>,
    tx_state: Vec<TxState>,
    rx_state: Vec<RxState>,
    reposts: Vec<u32>,
    /// The buffers offered to one read of runs (`read_runs`).
    read_bufs: Vec<*mut u8>,
    /// How many returned buffers `flush_batch` waits for: each post is a provider call, and a
    /// few buffers off the queue for a while cost nothing while the rest stay posted.
    repost_batch: usize,
    entries: Vec<sys::fi_cq_msg_entry>,
}
