//! `Module`: one device opened: fabric, domain, AV and the two channels. How it is opened and
//! its queues sized: `open.rs`.
mod open;

pub use open::{default_rd_num, Emulate, DATA_RX_BYTES};

use super::channel::ChannelRes;
use super::error::FabricError;
use super::fault::{FaultConfig, FaultStats, Faults};
use super::fid::Fid;
use super::socket::Dest;
use super::sys;
use crate::proto::Channel;
use std::net::Ipv4Addr;

/// Size of `Module::local_address()`: IPv4 address (4 bytes, network order), then the UDP
/// port of the priority endpoint and of the data endpoint (2 bytes each, network order).
pub const LOCAL_ADDRESS_LEN: usize = 8;

/// A buffer of one channel (index into that channel's send or receive pool).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// A peer inserted into the module's address vector: one `fi_addr_t` per channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    pub(crate) addr: [u64; 2],
    /// The same endpoints as socket addresses, for batched sends.
    pub(crate) dest: [Dest; 2],
}

impl PeerAddr {
    /// The libfabric address of the peer's endpoint on channel `ch`.
    pub fn fi_addr(&self, ch: Channel) -> u64 {
        self.addr[ch as usize]
    }
}

/// Which kind of operation an error completion belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Send,
    Recv,
}

/// One completion read by `Module::poll`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A datagram of `len` bytes arrived in receive buffer `buf` (read it with `rx_bytes` or
    /// `rx_ptr`, then give the buffer back with `repost`).
    Recv { buf: BufId, len: usize },
    /// Send buffer `buf` is free again (one send credit back).
    SendDone { buf: BufId },
    /// A send or receive failed. A failed send's buffer is already free again (count it as
    /// a send completion); a failed receive's buffer is already queued for repost. An
    /// oversized datagram (longer than the channel MTU, possibly truncated) is reported here
    /// with `FI_ETRUNC`.
    Error {
        op: Op,
        buf: BufId,
        error: FabricError,
    },
}

/// How `post_send` left a datagram.
#[must_use]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Posted {
    /// In flight: its buffer comes back with a `SendDone` (or `Error`) completion.
    Pending,
    /// Sent on the socket or injected: the kernel or the provider has it, its buffer is free
    /// again and no completion follows (count it as a send completion now).
    Done,
}

/// One device opened: fabric, domain, AV, and two channels [Priority, Data], each an FI_EP_DGRAM
/// endpoint with its own CQ, posted receive buffers and send buffers.
pub struct Module {
    // Field order is close order: channels (endpoints, then CQs) before the AV they are
    // bound to, the domain, and the fabric last.
    channels: [ChannelRes; 2],
    av: Fid<sys::fid_av>,
    _domain: Fid<sys::fid_domain>,
    _fabric: Fid<sys::fid_fabric>,
    name: String,
    ipv4: Ipv4Addr,
    /// The fault injector; None (the default) costs one branch per call.
    faults: Option<Box<Faults>>,
}

// SAFETY: the libfabric objects and buffers are owned exclusively by the Module; every call
// that touches them takes &mut self (or &self for read-only buffer access), so they are used
// by one thread at a time, which every libfabric threading level allows.
unsafe impl Send for Module {}

fn ch(c: Channel) -> usize {
    c as usize
}

impl Module {
    /// The interface this module was opened on.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// The IPv4 address both endpoints are bound to.
    pub fn ipv4(&self) -> Ipv4Addr {
        self.ipv4
    }

    /// Bytes to publish through the modex so a peer can reach both channels;
    /// `LOCAL_ADDRESS_LEN` bytes, layout documented there.
    pub fn local_address(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(LOCAL_ADDRESS_LEN);
        v.extend_from_slice(&self.ipv4.octets());
        v.extend_from_slice(&self.channels[0].port().to_be_bytes());
        v.extend_from_slice(&self.channels[1].port().to_be_bytes());
        v
    }

    /// Largest datagram of channel `ch`: `priority_mtu` (at most the device MTU) for the
    /// priority channel, the device's `mtu` for the data channel.
    pub fn channel_mtu(&self, ch_: Channel) -> usize {
        self.channels[ch(ch_)].mtu
    }

    /// Datagrams of channel `ch` that can arrive while nobody polls and still be received:
    /// the posted receives, and for the udp provider also what the socket buffer holds.
    pub fn rx_capacity(&self, c: Channel) -> usize {
        let res = &self.channels[ch(c)];
        let posted = res.rx_count();
        match res.socket_buffers {
            Some((rcv, _)) => posted.min(super::sockbuf::datagrams_in(rcv, res.mtu)),
            None => posted,
        }
    }

    /// (SO_RCVBUF, SO_SNDBUF) in bytes, as the kernel reports them, of channel `ch`'s socket
    /// after the edge sized it (udp provider only; None when not found or another provider).
    pub fn socket_buffers(&self, c: Channel) -> Option<(usize, usize)> {
        self.channels[ch(c)].socket_buffers
    }

    /// Number of receive buffers of channel `ch` (posted, or lent to the caller).
    pub fn rx_buffers(&self, c: Channel) -> usize {
        self.channels[ch(c)].rx_count()
    }

    /// Longest datagram of channel `c` that `post_send` injects (`Posted::Done`) when it goes
    /// through the provider and no fault injector is set: the provider's inject size less the
    /// message prefix.
    pub fn inject_limit(&self, c: Channel) -> usize {
        self.channels[ch(c)].inject_limit()
    }

    /// Number of send buffers of channel `ch` (= its send credits).
    pub fn tx_capacity(&self, c: Channel) -> usize {
        self.channels[ch(c)].tx_capacity()
    }

    /// Number of send buffers of channel `ch` free right now.
    pub fn tx_available(&self, c: Channel) -> usize {
        self.channels[ch(c)].tx_available()
    }

    /// Insert a peer's `local_address()` bytes into the AV (both channels). A malformed
    /// address (wrong length, address 0.0.0.0 or broadcast, port 0) is an error naming what is
    /// wrong. The `udp` provider does not probe reachability here: an unreachable peer shows up
    /// as send errors (`ENETUNREACH`, ...) or, on a silent network, as loss.
    pub fn insert_peer(&mut self, remote_address: &[u8]) -> Result<PeerAddr, FabricError> {
        let bad = |why: String| FabricError::invalid("insert_peer", why);
        let a: [u8; LOCAL_ADDRESS_LEN] = remote_address.try_into().map_err(|_| {
            bad(format!(
                "peer address has {} bytes, expected {LOCAL_ADDRESS_LEN}",
                remote_address.len()
            ))
        })?;
        let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
        let ports = [
            u16::from_be_bytes([a[4], a[5]]),
            u16::from_be_bytes([a[6], a[7]]),
        ];
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return Err(bad(format!(
                "peer address {ip} is not a unicast IPv4 address"
            )));
        }
        if ports.contains(&0) {
            return Err(bad(format!(
                "peer {ip} has port 0 (priority {}, data {})",
                ports[0], ports[1]
            )));
        }
        let dest = ports.map(|port| Dest {
            ip: u32::from(ip).to_be(),
            port: port.to_be(),
        });
        let addrs = dest.map(Dest::sockaddr);
        let mut out = [sys::FI_ADDR_NOTAVAIL_; 2];
        // SAFETY: av open; addrs is an array of 2 sockaddr_in (the AV's FI_SOCKADDR_IN format),
        // out has room for 2 fi_addr_t.
        let ret =
            unsafe { sys::av_insert(self.av.ptr(), addrs.as_ptr().cast(), 2, out.as_mut_ptr(), 0) };
        if ret == 2 && !out.contains(&sys::FI_ADDR_NOTAVAIL_) {
            return Ok(PeerAddr { addr: out, dest });
        }
        let mut inserted: Vec<u64> = out
            .iter()
            .copied()
            .filter(|a| *a != sys::FI_ADDR_NOTAVAIL_)
            .collect();
        if !inserted.is_empty() {
            // SAFETY: these fi_addr were just inserted into this AV.
            unsafe { sys::av_remove(self.av.ptr(), inserted.as_mut_ptr(), inserted.len(), 0) };
        }
        let detail = format!("peer {ip} ports {}/{}", ports[0], ports[1]);
        if ret < 0 {
            Err(FabricError::with_detail("fi_av_insert", ret, detail))
        } else {
            Err(FabricError::with_detail(
                "fi_av_insert",
                -(sys::FI_EADDRNOTAVAIL as i64),
                detail,
            ))
        }
    }

    /// Remove a peer from the AV (both channels).
    pub fn remove_peer(&mut self, p: &PeerAddr) {
        if let Some(f) = self.faults.as_deref_mut() {
            for c in [Channel::Priority, Channel::Data] {
                f.forget_destination(ch(c), p.fi_addr(c));
            }
        }
        let mut a = p.addr;
        // SAFETY: av open; a holds 2 fi_addr_t from insert_peer.
        let ret = unsafe { sys::av_remove(self.av.ptr(), a.as_mut_ptr(), 2, 0) };
        if ret < 0 {
            tracing::warn!("{}", FabricError::from_ret("fi_av_remove", ret));
        }
    }

    /// A free send buffer of channel `ch` (its length is the channel MTU), or None when every
    /// buffer is in flight. The buffer is the caller's until `post_send` succeeds or
    /// `release_tx` gives it back.
    pub fn tx_buffer(&mut self, c: Channel) -> Option<(BufId, &mut [u8])> {
        self.channels[ch(c)].tx_buffer()
    }

    /// The bytes of a send buffer obtained from `tx_buffer` and not yet sent.
    pub fn tx_bytes(&mut self, c: Channel, buf: BufId) -> Result<&mut [u8], FabricError> {
        self.channels[ch(c)].lent_bytes(buf)
    }

    /// Give back a send buffer obtained from `tx_buffer` without sending it.
    pub fn release_tx(&mut self, c: Channel, buf: BufId) {
        self.channels[ch(c)].release_tx(buf)
    }

    /// Send the first `len` bytes of send buffer `buf` to `to` on channel `ch`.
    /// On any `Err` nothing was sent and the caller still owns the buffer; `e.is_would_block()`
    /// (`-FI_EAGAIN`: socket or CQ full) means retry after `poll`. `len` larger than the
    /// channel MTU is refused with `FI_EMSGSIZE` before reaching libfabric. Datagrams sent on
    /// the socket (udp with `FabricConfig::gso`), and else those within the provider's inject
    /// size, are `Posted::Done` at once (never with a fault injector set, which holds and
    /// replays buffers).
    pub fn post_send(
        &mut self,
        c: Channel,
        buf: BufId,
        len: usize,
        to: &PeerAddr,
    ) -> Result<Posted, FabricError> {
        if let Some(f) = self.faults.as_deref_mut() {
            let now = super::now();
            return f
                .post_send(
                    &mut self.channels[ch(c)],
                    ch(c),
                    buf,
                    len,
                    to.fi_addr(c),
                    now,
                )
                .map(|()| Posted::Pending);
        }
        let res = &mut self.channels[ch(c)];
        if res.batching() {
            return res.post_batched(buf, len, [&[], &[]], to.dest[ch(c)], to.fi_addr(c));
        }
        res.post_send(buf, len, to.dest[ch(c)], to.fi_addr(c))
    }

    /// Whether `post_send_gather` works on channel `c`: the channel sends on its socket, or the
    /// provider gathers and needs no registration; and no fault injector is set (it holds and
    /// copies whole buffers).
    pub fn can_gather(&self, c: Channel) -> bool {
        self.faults.is_none() && self.channels[ch(c)].can_gather()
    }

    /// `post_send` of the first `len` bytes of `buf` followed by `body`, without copying the
    /// body into `buf` (sent or copied into the batch before this returns); only where
    /// `can_gather(c)`, else refused with `FI_EMSGSIZE` like a datagram longer than the MTU.
    /// Same `Ok` and `Err` contract as `post_send`.
    pub fn post_send_gather(
        &mut self,
        c: Channel,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
        to: &PeerAddr,
    ) -> Result<Posted, FabricError> {
        if self.faults.is_some() {
            return Err(FabricError::invalid(
                "post_send_gather",
                "not with the fault injector set",
            ));
        }
        let res = &mut self.channels[ch(c)];
        if res.batching() {
            return res.post_batched(buf, len, body, to.dest[ch(c)], to.fi_addr(c));
        }
        res.post_send_gather(buf, len, body, to.dest[ch(c)], to.fi_addr(c))
    }

    /// Room for the next datagram of channel `c`'s batch, written in place and then sent by
    /// `commit_batched`; no send buffer is taken and nothing is copied again. `None` where `c`
    /// does not batch (`batch_room` 0) or while its socket is too full to take what waits
    /// ahead (retry after `poll`).
    pub fn batch_slot(&mut self, c: Channel) -> Option<&mut [u8]> {
        if self.faults.is_some() {
            return None;
        }
        self.channels[ch(c)].batch_slot()
    }

    /// Sends the first `len` bytes of channel `c`'s `batch_slot` to `to`, now or with the
    /// batch (`flush_sends`). Done when this returns, like an injected send: no completion
    /// follows. A datagram the kernel refuses is lost like on a wire.
    pub fn commit_batched(&mut self, c: Channel, len: usize, to: &PeerAddr) {
        self.channels[ch(c)].commit_batched(len, to.dest[ch(c)])
    }

    /// Sends the datagrams batched on channel `c` by `commit_batched` or `post_send` (runs of
    /// full datagrams to one peer leave in one system call, `gso.rs`), a datagram parked
    /// behind the batch for another peer included; call it when a transmit pass ends.
    /// `-FI_EAGAIN`: the socket is full, what is left stays for the next call; any other
    /// error: the batch's datagrams are lost like on a wire (the protocol core repairs them).
    pub fn flush_sends(&mut self, c: Channel) -> Result<(), FabricError> {
        self.channels[ch(c)].flush_sends()
    }

    /// Whether channel `c` may hold a batch for `flush_sends` (checked before calling it: on
    /// `lo` the call and its `Result` cost 160 instructions per ping-pong message).
    #[inline]
    pub fn has_batch(&self, c: Channel) -> bool {
        self.channels[ch(c)].batching()
    }

    /// Datagrams one batched send of channel `c` carries at most; 0 when `c` does not batch
    /// (another provider, `btl_usnic_gso` 0, a kernel without `UDP_SEGMENT`, datagrams too
    /// large to pair, or the fault injector set).
    pub fn batch_room(&self, c: Channel) -> usize {
        if self.faults.is_some() {
            return 0;
        }
        self.channels[ch(c)].batch_room()
    }

    /// Datagrams of channel `c`'s batched sends the kernel refused for good so far (lost like
    /// on a wire; those refused alone are the caller's `post_send` errors).
    pub fn lost_batched(&self, c: Channel) -> u64 {
        self.channels[ch(c)].lost_batched()
    }

    /// (batched sends, datagrams they carried) of channel `c` so far.
    pub fn batch_stats(&self, c: Channel) -> (u64, u64) {
        self.channels[ch(c)].batch_stats()
    }

    /// Whether channel `c` writes lone datagrams to its socket itself (udp provider, `btl_usnic_gso`),
    /// else through the provider (`fi_inject`, `fi_send`).
    pub fn sends_on_socket(&self, c: Channel) -> bool {
        self.channels[ch(c)].sends_on_socket()
    }

    /// Whether channel `c` reads its socket itself (`gro.rs`): the udp provider with
    /// `FabricConfig::gro`; runs of datagrams at a time on a data channel whose datagrams can
    /// run together, with enough buffers and a kernel with `UDP_GRO`, else one at a time.
    pub fn reads_socket(&self, c: Channel) -> bool {
        self.channels[ch(c)].reads_socket()
    }

    /// (reads that returned more than one datagram, datagrams they returned) of channel `c`.
    pub fn gro_stats(&self, c: Channel) -> (u64, u64) {
        self.channels[ch(c)].gro_stats()
    }

    /// Datagrams of runs read at once on channel `c` that found no free receive buffer and
    /// were dropped (the protocol repairs them like any loss).
    pub fn cut_recvs(&self, c: Channel) -> u64 {
        self.channels[ch(c)].cut_recvs()
    }

    /// Inject faults from now on (see `fault.rs` for the exact semantics); an all-zero
    /// `FaultConfig` switches injection off (held buffers are still released by `poll`, and
    /// `fault_stats` keeps counting nothing new).
    /// A fraction outside `[0, 1]` is an error naming it, and changes nothing.
    pub fn set_faults(&mut self, cfg: FaultConfig) -> Result<(), FabricError> {
        cfg.validate()?;
        match self.faults.as_deref_mut() {
            Some(f) => f.reconfigure(cfg),
            None if cfg.is_off() => {}
            None => self.faults = Some(Box::new(Faults::new(cfg))),
        }
        Ok(())
    }

    /// What the fault injector has done since it was first set (zeros when never set).
    pub fn fault_stats(&self) -> FaultStats {
        self.faults
            .as_deref()
            .map(Faults::stats)
            .unwrap_or_default()
    }

    /// Read up to `max` completions of channel `ch` into `out` (send completions free their
    /// buffer); a channel that reads runs of datagrams (`gro.rs`) never splits one, so the
    /// last run read may take it up to 63 past `max`. Never blocks. An `Err` is a failure of
    /// the CQ itself, not of one operation.
    pub fn poll(
        &mut self,
        c: Channel,
        max: usize,
        out: &mut Vec<Completion>,
    ) -> Result<(), FabricError> {
        self.poll_inner(c, max, false, out)
    }

    /// `poll`, but it stops once a datagram has arrived. The udp provider reads at most one
    /// datagram from its socket per `fi_cq_read`, so looking for a second one costs a system
    /// call that fails with EAGAIN in a ping-pong, on the critical path between a request and
    /// its reply.
    pub fn poll_first(&mut self, c: Channel, out: &mut Vec<Completion>) -> Result<(), FabricError> {
        self.poll_inner(c, usize::MAX, true, out)
    }

    fn poll_inner(
        &mut self,
        c: Channel,
        max: usize,
        first: bool,
        out: &mut Vec<Completion>,
    ) -> Result<(), FabricError> {
        let Some(f) = self.faults.as_deref_mut() else {
            return self.channels[ch(c)].poll(max, first, out);
        };
        let chan = &mut self.channels[ch(c)];
        let added = f.before_poll(chan, ch(c), max, out, super::now());
        let start = out.len();
        let r = chan.poll(max - added, first, out);
        if f.after_poll(chan, ch(c), out, start) {
            chan.flush()?;
        }
        r
    }

    /// The `len` bytes received in receive buffer `buf` of channel `ch`.
    pub fn rx_bytes(&self, c: Channel, buf: BufId, len: usize) -> &[u8] {
        self.channels[ch(c)].rx_bytes(buf, len)
    }

    /// Address of receive buffer `buf`'s payload: stable for the module's lifetime, valid to read
    /// until the buffer is reposted (the Open MPI edge hands it to the PML with no borrow live).
    pub fn rx_ptr(&self, c: Channel, buf: BufId) -> *mut u8 {
        self.channels[ch(c)].rx_ptr(buf)
    }

    /// Queue receive buffer `buf` of channel `ch` for reposting (batched: see `flush_reposts`).
    /// Reposting a buffer that is not with the caller is ignored (with a warning).
    pub fn repost(&mut self, c: Channel, buf: BufId) {
        if let Some(f) = self.faults.as_deref_mut() {
            if f.repost(ch(c), buf) {
                return;
            }
        }
        self.channels[ch(c)].repost(buf)
    }

    /// Post the queued receive buffers of each channel where a batch has gathered (at most 16,
    /// and at most an eighth of the channel's buffers, wait), all but the last with `FI_MORE`.
    pub fn flush_reposts(&mut self) -> Result<(), FabricError> {
        let r0 = self.channels[0].flush_batch();
        let r1 = self.channels[1].flush_batch();
        r0.and(r1)
    }
}
