//! One channel: an FI_EP_DGRAM endpoint with its own CQ, posted receive buffers (batched
//! reposting) and send buffers (one per send credit).
use super::bufpool::Slab;
use super::error::{check, strerror, FabricError};
use super::fid::Fid;
use super::gro::{Gro, Layout, READ_BUFS};
use super::gso::{Batch, Dest, FlushError, MAX_BATCH_BYTES as MAX_RUN_BYTES};
use super::info::OwnedInfo;
use super::module::{BufId, Completion, Op, Posted};
use super::sys;
use std::os::raw::c_void;

/// What the edge does with the endpoint's socket (`udp` provider only: others have none).
#[derive(Copy, Clone, Debug)]
pub(crate) struct SocketUse {
    /// Size its buffers (`sockbuf.rs`).
    pub tune: bool,
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
    Free,
    /// Handed to the caller by `tx_buffer`, not yet accepted by `fi_send`.
    Lent,
    InFlight,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum RxState {
    Posted,
    /// Its datagram is with the caller until `repost`.
    Lent,
    Queued,
}

/// A fresh `requested_key` for `fi_mr_reg`. Without `FI_MR_PROV_KEY` the application picks
/// the keys and they must be unique within the domain: registering the receive and send slabs
/// both with key 0 fails with `-FI_ENOKEY` (found by the emulated-registration test). Keys are
/// only ever used locally, so a process-wide counter is enough.
fn next_mr_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// CQ entries fetched per `fi_cq_read`.
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

fn decode(ctx: *mut c_void) -> Option<(usize, bool)> {
    let v = ctx as usize;
    let idx = (v >> 1).checked_sub(1)?;
    Some((idx, v & 1 == 1))
}

pub(crate) struct ChannelRes {
    // Field order is close order: the endpoint first (it references CQ, AV and the posted
    // buffers), then the registrations, then the CQ, then the memory itself.
    ep: Fid<sys::fid_ep>,
    _mrs: Vec<Fid<sys::fid_mr>>,
    cq: Fid<sys::fid_cq>,
    rx: Slab,
    tx: Slab,
    rx_desc: *mut c_void,
    tx_desc: *mut c_void,
    /// `FI_MSG_PREFIX` bytes reserved before every payload (0 for `udp`).
    prefix: usize,
    /// The provider's `tx_attr.iov_limit`: buffers one `fi_sendv` may gather.
    iov_limit: usize,
    /// The provider's `tx_attr.inject_size`: datagrams up to this long (prefix included) are
    /// sent with `fi_inject`.
    inject_size: usize,
    pub(crate) mtu: usize,
    /// The endpoint's bound address (network-order fields, as from getsockname).
    pub(crate) name: libc::sockaddr_in,
    /// (SO_RCVBUF, SO_SNDBUF) of the endpoint's socket after sizing (udp provider only).
    pub(crate) socket_buffers: Option<(usize, usize)>,
    /// Datagrams waiting to leave together in one system call (udp provider, `gso.rs`).
    batch: Option<Batch>,
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

impl ChannelRes {
    pub(crate) fn open(
        domain: &Fid<sys::fid_domain>,
        av: &Fid<sys::fid_av>,
        dev_info: &OwnedInfo,
        sizes: Sizes,
        need_mr: bool,
        prefix: usize,
        socket_use: SocketUse,
    ) -> Result<ChannelRes, FabricError> {
        let mut attr = sys::fi_cq_attr {
            size: sizes.cq,
            format: sys::FI_CQ_FORMAT_MSG,
            wait_obj: sys::FI_WAIT_NONE,
            ..Default::default()
        };
        let mut cq: *mut sys::fid_cq = std::ptr::null_mut();
        // SAFETY: domain is open; attr and cq are valid for the call.
        check("fi_cq_open", unsafe {
            sys::cq_open(domain.ptr(), &mut attr, &mut cq)
        })?;
        let cq = Fid::new(cq, "cq")
            .ok_or_else(|| FabricError::invalid("fi_cq_open", "returned NULL"))?;

        let mut info = dev_info.clone();
        let (iov_limit, inject_size);
        {
            let i = info.get_mut();
            // SAFETY: entries from fi_getinfo/fi_dupinfo have tx_attr and rx_attr allocated.
            unsafe {
                (*i.tx_attr).size = sizes.sd;
                (*i.rx_attr).size = sizes.rd;
                iov_limit = (*i.tx_attr).iov_limit;
                inject_size = (*i.tx_attr).inject_size;
            }
        }
        let mut ep: *mut sys::fid_ep = std::ptr::null_mut();
        // SAFETY: domain open; info is a valid single entry of this provider.
        check("fi_endpoint", unsafe {
            sys::endpoint(domain.ptr(), info.as_ptr(), &mut ep)
        })?;
        drop(info);
        let ep = Fid::new(ep, "endpoint")
            .ok_or_else(|| FabricError::invalid("fi_endpoint", "returned NULL"))?;
        let flags = sys::FI_TRANSMIT as u64 | sys::FI_RECV as u64;
        // SAFETY: ep, cq and av are open objects of the same domain.
        unsafe {
            check("fi_ep_bind(cq)", sys::ep_bind(ep.ptr(), cq.fid(), flags))?;
            check("fi_ep_bind(av)", sys::ep_bind(ep.ptr(), av.fid(), 0))?;
            check("fi_enable", sys::enable(ep.ptr()))?;
        }
        // SAFETY: sockaddr_in is plain data; all-zero is valid.
        let mut name: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>();
        // SAFETY: ep enabled; name/len describe a writable sockaddr_in.
        check("fi_getname", unsafe {
            sys::getname(
                ep.ptr(),
                (&mut name as *mut libc::sockaddr_in).cast(),
                &mut len,
            )
        })?;
        if i32::from(name.sin_family) != libc::AF_INET
            || len != std::mem::size_of::<libc::sockaddr_in>()
        {
            return Err(FabricError::invalid(
                "fi_getname",
                "endpoint address is not IPv4 sockaddr_in",
            ));
        }

        let socket = if socket_use.tune {
            super::sockbuf::find_socket(&name)
        } else {
            None
        };
        let socket_buffers =
            socket.and_then(|fd| super::sockbuf::size_for(fd, sizes.mtu, sizes.sd, sizes.rd));
        // Sends and reads on the socket itself (batches written into our own buffer, runs read
        // into our own buffers) need neither a message prefix nor registration; providers
        // that ask for them get no socket here anyway.
        let raw = socket.filter(|_| prefix == 0 && !need_mr);
        let batch = raw
            .filter(|_| socket_use.batch)
            .and_then(|fd| Batch::new(fd, sizes.mtu));
        // Runs where datagrams can run together and a run finds a buffer per datagram (with
        // fewer than twice a read's worth the caller's held buffers would leave too few, and a
        // run's tail would be lost); otherwise (65507 bytes on `lo`, the priority channel's lone
        // tiny ones, few buffers) one `recv` of our own per datagram, the kernel splitting
        // runs, nothing lost (`gro.rs`).
        let runs = socket_use.runs && 2 * sizes.mtu <= MAX_RUN_BYTES && sizes.rd >= 2 * READ_BUFS;
        let gro = raw
            .filter(|_| socket_use.read)
            .and_then(|fd| Gro::new(fd, sizes.mtu, runs));

        // Receive buffers get one spare byte: a datagram longer than the MTU fills it, which is
        // how an oversized (and, by the provider, silently truncated) datagram is detected.
        let rx = Slab::new(sizes.rd, prefix + sizes.mtu + 1);
        let tx = Slab::new(sizes.sd, prefix + sizes.mtu);
        let mut mrs = Vec::new();
        let (mut rx_desc, mut tx_desc) = (std::ptr::null_mut(), std::ptr::null_mut());
        if need_mr {
            for (slab, access, desc) in [
                (&rx, sys::FI_RECV as u64, &mut rx_desc),
                (&tx, sys::FI_SEND as u64, &mut tx_desc),
            ] {
                let mut mr: *mut sys::fid_mr = std::ptr::null_mut();
                // SAFETY: the slab is live for as long as the MR (declared after ep, before
                // the slabs, so closed first).
                check("fi_mr_reg", unsafe {
                    sys::mr_reg(
                        domain.ptr(),
                        slab.base().cast(),
                        slab.bytes(),
                        access,
                        next_mr_key(),
                        &mut mr,
                    )
                })?;
                let mr = Fid::new(mr, "mr")
                    .ok_or_else(|| FabricError::invalid("fi_mr_reg", "returned NULL"))?;
                // SAFETY: fi_mr_desc(mr) is `mr->mem_desc`.
                *desc = unsafe { (*mr.ptr()).mem_desc };
                mrs.push(mr);
            }
        }
        let mut ch = ChannelRes {
            ep,
            _mrs: mrs,
            cq,
            rx,
            tx,
            rx_desc,
            tx_desc,
            prefix,
            iov_limit,
            inject_size,
            mtu: sizes.mtu,
            name,
            socket_buffers,
            batch,
            gro,
            provider_sends: 0,
            tx_free: (0..sizes.sd as u32).rev().collect(),
            tx_state: vec![TxState::Free; sizes.sd],
            rx_state: vec![RxState::Queued; sizes.rd],
            reposts: (0..sizes.rd as u32).collect(),
            read_bufs: Vec::with_capacity(READ_BUFS),
            repost_batch: (sizes.rd / REPOST_BATCH_SHARE).clamp(1, REPOST_BATCH_MAX),
            entries: vec![sys::fi_cq_msg_entry::default(); CQ_BATCH],
        };
        ch.flush()?;
        Ok(ch)
    }

    pub(crate) fn port(&self) -> u16 {
        u16::from_be(self.name.sin_port)
    }

    /// Longest datagram `post_send` injects.
    pub(crate) fn inject_limit(&self) -> usize {
        self.inject_size.saturating_sub(self.prefix).min(self.mtu)
    }

    pub(crate) fn tx_capacity(&self) -> usize {
        self.tx_state.len()
    }

    pub(crate) fn tx_available(&self) -> usize {
        self.tx_free.len()
    }

    pub(crate) fn tx_buffer(&mut self) -> Option<(BufId, &mut [u8])> {
        let i = self.tx_free.pop()?;
        self.tx_state[i as usize] = TxState::Lent;
        let (prefix, mtu) = (self.prefix, self.mtu);
        Some((BufId(i), self.tx.slice_mut(i as usize, prefix, mtu)))
    }

    /// Receive buffers this channel posts.
    pub(crate) fn rx_count(&self) -> usize {
        self.rx_state.len()
    }

    pub(crate) fn lent_tx(&self, buf: BufId) -> Result<usize, FabricError> {
        let i = buf.0 as usize;
        match self.tx_state.get(i) {
            Some(TxState::Lent) => Ok(i),
            Some(s) => Err(FabricError::invalid(
                "post_send",
                format!("send buffer {i} is not lent out (state {s:?})"),
            )),
            None => Err(FabricError::invalid(
                "post_send",
                format!("no send buffer {i}"),
            )),
        }
    }

    /// The bytes of lent send buffer `buf` again (as `tx_buffer` gave them).
    pub(crate) fn lent_bytes(&mut self, buf: BufId) -> Result<&mut [u8], FabricError> {
        let i = self.lent_tx(buf)?;
        let (prefix, mtu) = (self.prefix, self.mtu);
        Ok(self.tx.slice_mut(i, prefix, mtu))
    }

    pub(crate) fn release_tx(&mut self, buf: BufId) {
        match self.lent_tx(buf) {
            Ok(i) => {
                self.tx_state[i] = TxState::Free;
                self.tx_free.push(i as u32);
            }
            Err(e) => tracing::warn!("release_tx ignored: {e}"),
        }
    }

    /// Datagrams that fit the provider's inject size go by `fi_inject`: for the udp provider
    /// that skips its CQ lock, the completion it writes, and our read of that completion
    /// (which, found alone, made the next `fi_cq_read` one more `recvmsg` in a ping-pong).
    pub(crate) fn post_send(
        &mut self,
        buf: BufId,
        len: usize,
        to: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        let i = self.checked_tx(buf, len)?;
        if self.prefix + len <= self.inject_size {
            return self.inject_index(i, len, to);
        }
        self.send_index(i, len, to).map(|()| Posted::Pending)
    }

    /// `fi_inject` of buffer `i`: on success the provider has copied it, no completion follows
    /// and the buffer is free again.
    fn inject_index(
        &mut self,
        i: usize,
        len: usize,
        to: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        // SAFETY: buffer i is lent (checked_tx), lives in tx which outlives the ep, and
        // prefix + len <= its size; fi_inject reads it during the call only.
        let ret =
            unsafe { sys::inject(self.ep.ptr(), self.tx.at(i).cast(), self.prefix + len, to) };
        if ret < 0 {
            return Err(FabricError::with_detail(
                "fi_inject",
                ret,
                format_args!("{len} bytes to fi_addr {to}"),
            ));
        }
        self.tx_state[i] = TxState::Free;
        self.tx_free.push(i as u32);
        Ok(Posted::Done)
    }

    /// The index of lent send buffer `buf` if `len` bytes of it may be sent.
    pub(crate) fn checked_tx(&self, buf: BufId, len: usize) -> Result<usize, FabricError> {
        let i = self.lent_tx(buf)?;
        if len > self.mtu {
            return Err(FabricError {
                call: "post_send",
                code: sys::FI_EMSGSIZE as i32,
                message: format!(
                    "datagram of {len} bytes exceeds the channel MTU of {} bytes",
                    self.mtu
                ),
            });
        }
        Ok(i)
    }

    /// `fi_send` of buffer `i` (lent, or held by the fault injector), checked by `checked_tx`.
    pub(crate) fn send_index(
        &mut self,
        i: usize,
        len: usize,
        to: sys::fi_addr_t,
    ) -> Result<(), FabricError> {
        // SAFETY: buffer i is lent or held (not posted to the provider), lives in tx which
        // outlives the ep; prefix + len <= its size; the context is a tag, never dereferenced.
        let ret = unsafe {
            sys::send(
                self.ep.ptr(),
                self.tx.at(i).cast(),
                self.prefix + len,
                self.tx_desc,
                to,
                context(i, false),
            )
        };
        self.posted(i, ret, "fi_send", len, to)
    }

    /// Buffer `i` is in flight if the send call returned success, else the call's error.
    fn posted(
        &mut self,
        i: usize,
        ret: i64,
        call: &'static str,
        len: usize,
        to: sys::fi_addr_t,
    ) -> Result<(), FabricError> {
        if ret < 0 {
            return Err(FabricError::with_detail(
                call,
                ret,
                format_args!("{len} bytes to fi_addr {to}"),
            ));
        }
        self.tx_state[i] = TxState::InFlight;
        self.provider_sends += 1;
        Ok(())
    }

    /// Whether `post_send_gather` may be used: the provider gathers three buffers, and needs no
    /// registration (a body lies in memory we never registered); or sends are batched, which
    /// copies the body into the batch.
    pub(crate) fn can_gather(&self) -> bool {
        (self.iov_limit >= 3 && self._mrs.is_empty()) || self.batch.is_some()
    }

    /// Whether sends go through the batch (`batch_slot` and `commit_batched`, or
    /// `post_batched`).
    #[inline]
    pub(crate) fn batching(&self) -> bool {
        self.batch.is_some()
    }

    /// Datagrams one batched send carries at most (0: no batching).
    pub(crate) fn batch_room(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| b.room())
    }

    /// (batched sends, datagrams they carried).
    pub(crate) fn batch_stats(&self) -> (u64, u64) {
        self.batch
            .as_ref()
            .map_or((0, 0), |b| (b.batches, b.batched))
    }

    pub(crate) fn reads_socket(&self) -> bool {
        self.gro.is_some()
    }

    pub(crate) fn gro_stats(&self) -> (u64, u64) {
        self.gro.as_ref().map_or((0, 0), |g| (g.reads, g.datagrams))
    }

    /// Copies the first `len` bytes of lent send buffer `buf` and `body` into the batch for
    /// `to`, and frees the buffer (`Posted::Done`). A batch for another peer, a full one, one
    /// ended by a short datagram or one with a datagram parked behind it is sent first; if that
    /// finds the socket full, nothing is taken and the caller keeps `buf` (`-FI_EAGAIN`). Only
    /// where `batching`.
    pub(crate) fn post_batched(
        &mut self,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
        to: Dest,
        fi_addr: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        let (i, total) = self.checked_gather(buf, len, body)?;
        // A full socket: the caller keeps `buf` and retries after progress. Lost datagrams:
        // this one was never tried and joins a new batch.
        self.make_room(Some(to))?;
        let alone = total < self.mtu && self.batch.as_ref().is_some_and(|b| b.len() == 0);
        let Some(batch) = self.batch.as_mut().filter(|_| !alone) else {
            // A short datagram with nothing before it gains nothing from a batch: it goes
            // the provider's way, without the copy (a 1 KiB ping-pong across hosts read
            // 6.6-7.0 us either way). Also where batching stopped during that flush.
            return if body.iter().all(|b| b.is_empty()) {
                self.post_send(buf, len, fi_addr)
            } else {
                self.post_send_gather(buf, len, body, fi_addr)
            };
        };
        // SAFETY: buffer i is lent (checked_tx): nothing else reads or writes it, and
        // prefix (0 when batching) + len <= its size.
        let head = unsafe { std::slice::from_raw_parts(self.tx.at(i), len) };
        let complete = batch.push(to, [head, body[0], body[1]]);
        self.tx_state[i] = TxState::Free;
        self.tx_free.push(i as u32);
        if complete {
            // A full socket keeps it in the batch for the next flush.
            let _ = self.flush_or_log();
        }
        Ok(Posted::Done)
    }

    /// Room for the next datagram of the batch, written in place and then sent by
    /// `commit_batched` (a slot left uncommitted adds nothing). `None` where the channel does
    /// not batch, or while the socket is too full to take what waits ahead (retry after
    /// progress). The datagram is not copied again, and no send buffer is taken for it.
    pub(crate) fn batch_slot(&mut self) -> Option<&mut [u8]> {
        self.make_room(None).ok()?;
        self.batch.as_mut()?.slot()
    }

    /// Adds the first `len` bytes of the `batch_slot` as a datagram to `to`; sent at once if
    /// that completes the batch, else by a later flush. Never refused: a datagram for another
    /// peer than the batch's waits behind it while the socket is full.
    pub(crate) fn commit_batched(&mut self, len: usize, to: Dest) {
        if self.batch.as_mut().is_some_and(|b| b.commit(to, len)) {
            // A full socket keeps it for the next flush.
            let _ = self.flush_or_log();
        }
    }

    /// Flushes until the batch has room for a datagram (to `to`, if given). `Err` only for a
    /// full socket (`-FI_EAGAIN`); a batch lost or ended by the kernel makes room too.
    fn make_room(&mut self, to: Option<Dest>) -> Result<(), FabricError> {
        while let Some(b) = self.batch.as_ref() {
            if !to.map_or(b.blocked(), |to| b.must_flush_for(to)) {
                break;
            }
            // Each flush sends or drops what waits, a parked datagram moving up: progress.
            self.flush_or_log()?;
        }
        Ok(())
    }

    /// `flush_once`, with lost datagrams only logged: `Err` is `-FI_EAGAIN` alone.
    fn flush_or_log(&mut self) -> Result<(), FabricError> {
        match self.flush_once() {
            Err(e) if !e.is_would_block() => {
                tracing::debug!("{e}");
                Ok(())
            }
            r => r,
        }
    }

    /// The index of lent send buffer `buf` and the length of the datagram its first `len`
    /// bytes and `body` make, if that fits the MTU (the head alone fits, then, too).
    fn checked_gather(
        &self,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
    ) -> Result<(usize, usize), FabricError> {
        let total = len + body[0].len() + body[1].len();
        Ok((self.checked_tx(buf, total)?, total))
    }

    /// Sends everything that waits in the batch, a datagram parked behind it included (it
    /// leaves alone, in a second send). `-FI_EAGAIN`: the socket is full and what is left
    /// stays for the next call; any other error: the batch's datagrams are lost like on a
    /// wire, and a parked one, never tried, is sent after them.
    pub(crate) fn flush_sends(&mut self) -> Result<(), FabricError> {
        let mut lost = Ok(());
        // At most twice: the first send moves a parked datagram up, the second takes it.
        while self.batch.as_ref().is_some_and(|b| b.len() > 0) {
            match self.flush_once() {
                Err(e) if e.is_would_block() => return Err(e),
                Err(e) => lost = Err(e),
                Ok(()) => {}
            }
        }
        lost
    }

    /// Sends the batch once; a parked datagram then starts the next one. `-FI_EAGAIN`: the
    /// socket is full and both stay; any other error: the batch's datagrams are lost like on
    /// a wire (the parked one stays).
    fn flush_once(&mut self) -> Result<(), FabricError> {
        let Some(batch) = self.batch.as_mut() else {
            return Ok(());
        };
        let n = batch.len();
        match batch.flush() {
            Ok(()) => Ok(()),
            Err(FlushError::WouldBlock) => Err(FabricError::from_ret(
                "sendmsg(UDP_SEGMENT)",
                -(sys::FI_EAGAIN as i64),
            )),
            Err(FlushError::Lost(e)) => Err(FabricError::with_detail(
                "sendmsg(UDP_SEGMENT)",
                -i64::from(e),
                format_args!("{n} datagrams lost"),
            )),
            Err(FlushError::Unsupported(e)) => {
                tracing::info!(
                    "usnic: sending datagrams one per system call from now on: the kernel \
                     cannot segment them on this route ({})",
                    super::error::strerror(e)
                );
                self.batch = None;
                Ok(())
            }
        }
    }

    /// `fi_sendv` of the first `len` bytes of lent send buffer `buf` followed by `body`, as one
    /// datagram of at most the MTU. Only where `can_gather`.
    pub(crate) fn post_send_gather(
        &mut self,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
        to: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        let (i, total) = self.checked_gather(buf, len, body)?;
        if !self.can_gather() {
            return Err(FabricError {
                call: "post_send_gather",
                code: sys::FI_EMSGSIZE as i32,
                message: format!(
                    "this channel does not gather (iov_limit {}, registered buffers {})",
                    self.iov_limit,
                    !self._mrs.is_empty()
                ),
            });
        }
        let mut iov = [sys::iovec {
            iov_base: self.tx.at(i).cast(),
            iov_len: self.prefix + len,
        }; 3];
        let mut count = 1;
        for piece in body.iter().filter(|p| !p.is_empty()) {
            iov[count] = sys::iovec {
                iov_base: piece.as_ptr() as *mut c_void,
                iov_len: piece.len(),
            };
            count += 1;
        }
        // SAFETY: buffer i is lent (not posted), lives in tx which outlives the ep; the body
        // slices are borrowed for this call, and the provider is done with every buffer when
        // it returns (udp sends synchronously inside fi_sendv and writes the completion
        // there, see fabric/mod.rs; `can_gather` excludes registration-requiring providers).
        // The iovecs are only read; the context is a tag, never dereferenced.
        let ret = unsafe {
            sys::sendv(
                self.ep.ptr(),
                iov.as_ptr(),
                std::ptr::null_mut(),
                count,
                to,
                context(i, false),
            )
        };
        self.posted(i, ret, "fi_sendv", total, to)
            .map(|()| Posted::Pending)
    }

    /// Fault injector: keep lent buffer `i` out of the free list as if it were in flight.
    pub(crate) fn hold_tx(&mut self, i: usize) {
        self.tx_state[i] = TxState::InFlight;
    }

    /// Fault injector: free a buffer held by `hold_tx` whose send never reached the provider.
    pub(crate) fn free_held_tx(&mut self, i: usize) {
        if self.tx_state[i] == TxState::InFlight {
            self.tx_state[i] = TxState::Free;
            self.tx_free.push(i as u32);
        }
    }

    /// Fault injector: copy the first `len` bytes of send buffer `from` into send buffer `to`.
    pub(crate) fn copy_tx(&mut self, from: usize, to: usize, len: usize) {
        let n = self.prefix + len;
        let src = self.tx.slice(from, 0, n).to_vec();
        self.tx.slice_mut(to, 0, n).copy_from_slice(&src);
    }

    pub(crate) fn rx_bytes(&self, buf: BufId, len: usize) -> &[u8] {
        assert!(
            len <= self.mtu,
            "rx_bytes: length {len} beyond the channel MTU {}",
            self.mtu
        );
        self.rx.slice(buf.0 as usize, self.prefix, len)
    }

    pub(crate) fn rx_ptr(&self, buf: BufId) -> *mut u8 {
        // SAFETY: prefix < buffer size, so the pointer stays inside buffer `buf`.
        unsafe { self.rx.at(buf.0 as usize).add(self.prefix) }
    }

    pub(crate) fn repost(&mut self, buf: BufId) {
        let i = buf.0 as usize;
        match self.rx_state.get(i) {
            Some(RxState::Lent) => {
                self.rx_state[i] = RxState::Queued;
                self.reposts.push(buf.0);
            }
            // Posting a buffer twice would let two datagrams land in it: refuse.
            other => tracing::warn!("repost of receive buffer {i} ignored (state {other:?})"),
        }
    }

    /// Post the queued receive buffers once `repost_batch` of them have gathered. Inlined:
    /// called twice per progress call, where a channel reading its socket has nothing to do.
    #[inline]
    pub(crate) fn flush_batch(&mut self) -> Result<(), FabricError> {
        if self.gro.is_some() || self.reposts.len() < self.repost_batch {
            return Ok(());
        }
        self.flush()
    }

    /// Post the queued receive buffers, `FI_MORE` on all but the last. Reading its socket,
    /// the channel keeps them.
    pub(crate) fn flush(&mut self) -> Result<(), FabricError> {
        if self.gro.is_some() {
            return Ok(());
        }
        // Indexed rather than taken, so the queue keeps its allocation from call to call.
        let n = self.reposts.len();
        for k in 0..n {
            let i = self.reposts[k];
            let more = if k + 1 < n { sys::FI_MORE as u64 } else { 0 };
            let iov = sys::iovec {
                iov_base: self.rx.at(i as usize).cast(),
                iov_len: self.prefix + self.mtu + 1,
            };
            let mut desc = self.rx_desc;
            let msg = sys::fi_msg {
                msg_iov: &iov,
                desc: &mut desc,
                iov_count: 1,
                addr: sys::FI_ADDR_UNSPEC_,
                context: context(i as usize, true),
                data: 0,
            };
            // SAFETY: buffer i is not posted (Queued) and lives in rx, which outlives the ep;
            // iov/desc/msg are read during the call only (the provider copies the iov).
            let ret = unsafe { sys::recvmsg(self.ep.ptr(), &msg, more) };
            if ret < 0 {
                self.reposts.drain(..k);
                if ret == -(sys::FI_EAGAIN as i64) {
                    return Ok(());
                }
                return Err(FabricError::from_ret("fi_recvmsg", ret));
            }
            self.rx_state[i as usize] = RxState::Posted;
        }
        self.reposts.clear();
        Ok(())
    }

    pub(crate) fn poll(
        &mut self,
        max: usize,
        stop_after_recv: bool,
        out: &mut Vec<Completion>,
    ) -> Result<(), FabricError> {
        let mut got = 0;
        let mut received = false;
        let idle_cq = self.gro.is_some() && self.provider_sends == 0;
        while !idle_cq && got < max && !(stop_after_recv && received) {
            let n = (max - got).min(CQ_BATCH);
            // SAFETY: entries holds CQ_BATCH >= n fi_cq_msg_entry, the CQ's format.
            let ret = unsafe { sys::cq_read(self.cq.ptr(), self.entries.as_mut_ptr().cast(), n) };
            if ret == -(sys::FI_EAGAIN as i64) || ret == 0 {
                break;
            }
            if ret == -(sys::FI_EAVAIL as i64) {
                out.push(self.read_error()?);
                got += 1;
                continue;
            }
            check("fi_cq_read", ret)?;
            for k in 0..ret as usize {
                let e = self.entries[k];
                if let Some(c) = self.complete(e.op_context, e.len) {
                    received |= matches!(c, Completion::Recv { .. });
                    out.push(c);
                }
            }
            got += ret as usize;
        }
        if self.gro.is_some() && got < max && !(stop_after_recv && received) {
            self.read_runs(max - got, stop_after_recv, out);
        }
        Ok(())
    }

    /// Reads the socket (`gro.rs`), runs of datagrams or one at a time, until it is empty,
    /// `max` datagrams are out (a run is never split: one read may overshoot), or, with
    /// `first`, after the first read. Each datagram is a `Completion::Recv` of a buffer of its
    /// own, as from the provider. A read of runs is offered up to `READ_BUFS` free buffers;
    /// with fewer free (the caller holds many), what does not fit a run is lost like
    /// datagrams on a wire, rather than the channel going deaf while its caller waits for
    /// them. A failed read ends the pass (the provider ignored them as well).
    fn read_runs(&mut self, max: usize, first: bool, out: &mut Vec<Completion>) {
        let mut got = 0;
        while got < max && !self.reposts.is_empty() {
            let Some(gro) = self.gro.as_mut() else {
                return;
            };
            let per_read = gro.per_read();
            let k = self.reposts.len().min(per_read);
            let at = self.reposts.len() - k;
            // The buffers read into are free ones (`reposts`, neither posted nor lent),
            // distinct slab entries of `mtu + 1` bytes each (no prefix on this path).
            let read = if per_read == 1 {
                // SAFETY: one free buffer, as above; the slab outlives the call.
                unsafe { gro.read_one(self.rx.at(self.reposts[at] as usize)) }
            } else {
                // Kept between reads: a fresh array was zeroed on every poll.
                let bufs = &mut self.read_bufs;
                bufs.clear();
                bufs.extend(self.reposts[at..].iter().map(|&i| self.rx.at(i as usize)));
                // SAFETY: `k` free buffers, as above; the slab outlives the call.
                unsafe { gro.read(bufs) }
            };
            let layout = match read {
                Ok(Some(l)) => l,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(
                        "reading the socket of port {}: {}",
                        self.port(),
                        strerror(e)
                    );
                    return;
                }
            };
            match layout {
                Layout::Split {
                    count,
                    size,
                    last,
                    cut,
                    ..
                } => {
                    if cut > 0 {
                        tracing::debug!("{cut} datagrams of a run did not fit {k} free buffers");
                    }
                    for (j, &i) in self.reposts[at..at + count].iter().enumerate() {
                        self.rx_state[i as usize] = RxState::Lent;
                        let len = if j + 1 == count { last } else { size };
                        out.push(Completion::Recv { buf: BufId(i), len });
                    }
                    self.reposts.drain(at..at + count);
                    got += count;
                }
                // The error names a buffer that stays free (as the provider path's, reposted
                // before its error is returned): nothing was received into it.
                Layout::Oversize { len } => {
                    out.push(Completion::Error {
                        op: Op::Recv,
                        buf: BufId(self.reposts[at]),
                        error: oversize(len, self.mtu),
                    });
                    got += 1;
                }
            }
            if first {
                return;
            }
        }
    }

    fn complete(&mut self, ctx: *mut c_void, len: usize) -> Option<Completion> {
        let Some((i, rx)) = decode(ctx) else {
            tracing::error!("completion with unknown context {ctx:?} ignored");
            return None;
        };
        if rx {
            if self.rx_state.get(i) != Some(&RxState::Posted) {
                tracing::error!("receive completion for buffer {i} that is not posted ignored");
                return None;
            }
            self.rx_state[i] = RxState::Lent;
            let buf = BufId(i as u32);
            let payload = len.checked_sub(self.prefix);
            match payload {
                Some(p) if p <= self.mtu => Some(Completion::Recv { buf, len: p }),
                _ => {
                    self.repost(buf);
                    Some(Completion::Error {
                        op: Op::Recv,
                        buf,
                        error: oversize(len, self.mtu),
                    })
                }
            }
        } else {
            if self.tx_state.get(i) != Some(&TxState::InFlight) {
                tracing::error!("send completion for buffer {i} that is not in flight ignored");
                return None;
            }
            self.tx_state[i] = TxState::Free;
            self.tx_free.push(i as u32);
            self.provider_sends = self.provider_sends.saturating_sub(1);
            Some(Completion::SendDone {
                buf: BufId(i as u32),
            })
        }
    }

    fn read_error(&mut self) -> Result<Completion, FabricError> {
        let mut err = sys::fi_cq_err_entry::default();
        // SAFETY: err is a writable fi_cq_err_entry with err_data_size 0 (provider-owned
        // err_data, valid until the next CQ call; used right below only).
        let ret = unsafe { sys::cq_readerr(self.cq.ptr(), &mut err, 0) };
        check("fi_cq_readerr", ret)?;
        // SAFETY: cq open; the provider formats prov_errno (NULL when it cannot).
        let text = unsafe { sys::cq_strerror(self.cq.ptr(), err.prov_errno, err.err_data) };
        let message = if text.is_null() {
            strerror(err.err)
        } else {
            // SAFETY: a NUL-terminated string owned by the provider.
            unsafe { std::ffi::CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        let error = FabricError {
            call: "fi_cq_read",
            code: err.err,
            message,
        };
        let Some((i, rx)) = decode(err.op_context) else {
            return Err(error);
        };
        let buf = BufId(i as u32);
        if rx && self.rx_state.get(i) == Some(&RxState::Posted) {
            self.rx_state[i] = RxState::Lent;
            self.repost(buf);
            Ok(Completion::Error {
                op: Op::Recv,
                buf,
                error,
            })
        } else if !rx && self.tx_state.get(i) == Some(&TxState::InFlight) {
            self.tx_state[i] = TxState::Free;
            self.tx_free.push(i as u32);
            self.provider_sends = self.provider_sends.saturating_sub(1);
            Ok(Completion::Error {
                op: Op::Send,
                buf,
                error,
            })
        } else {
            Err(error)
        }
    }
}

/// The error of a received datagram longer than the channel MTU (`len`: what was seen of it).
fn oversize(len: usize, mtu: usize) -> FabricError {
    FabricError {
        call: "fi_cq_read",
        code: sys::FI_ETRUNC as i32,
        message: format!(
            "received datagram of {len} bytes or more does not fit the channel MTU of {mtu} bytes; dropped"
        ),
    }
}
