//! Opening a channel: the CQ and endpoint, which of the endpoint's socket jobs the edge takes
//! over (sizing, batched sends, reading), the buffer slabs and their registration. Run once;
//! the data paths only read what it decided.

use super::{ChannelRes, RxState, Sizes, SocketUse, TxState};
use super::{CQ_BATCH, REPOST_BATCH_MAX, REPOST_BATCH_SHARE};
use crate::fabric::bufpool::Slab;
use crate::fabric::error::{check, FabricError};
use crate::fabric::fid::Fid;
use crate::fabric::gro::{Gro, READ_BUFS};
use crate::fabric::gso::{Batch, MAX_BATCH_BYTES as MAX_RUN_BYTES};
use crate::fabric::info::OwnedInfo;
use crate::fabric::sockbuf;
use crate::fabric::sys;

/// A fresh `requested_key` for `fi_mr_reg`. Without `FI_MR_PROV_KEY` the application picks
/// the keys and they must be unique within the domain: registering the receive and send slabs
/// both with key 0 fails with `-FI_ENOKEY` (found by the emulated-registration test). Keys are
/// only ever used locally, so a process-wide counter is enough.
fn next_mr_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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
        // Receive buffers get one spare byte (see below). A provider's prefix is its own
        // number: past this check, `prefix + len` with `len <= mtu` cannot overflow anywhere.
        let rx_size = prefix
            .checked_add(sizes.mtu)
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| {
                FabricError::invalid(
                    "ChannelRes::open",
                    format!("message prefix {prefix} + MTU {} overflows", sizes.mtu),
                )
            })?;
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
            sockbuf::find_socket(&name)
        } else {
            None
        };
        let socket_buffers =
            socket.and_then(|fd| sockbuf::size_for(fd, sizes.mtu, sizes.sd, sizes.rd));
        // Sends and reads on the socket itself (batches written into our own buffer, runs read
        // into our own buffers) need neither a message prefix nor registration; providers
        // that ask for them get no socket here anyway.
        let raw = socket.filter(|_| prefix == 0 && !need_mr);
        let send_socket = raw.filter(|_| socket_use.send);
        let batch = raw
            .filter(|_| socket_use.batch)
            .and_then(|fd| Batch::new(fd, sizes.mtu));
        // Runs where datagrams can run together and a run finds a buffer per datagram (with
        // fewer than twice a read's worth the caller's held buffers would leave too few, and a
        // run's tail would be lost); otherwise (65507 bytes on `lo`, the priority channel's lone
        // tiny ones, few buffers) one `recv` of our own per datagram, the kernel splitting
        // runs, nothing lost (`gro.rs`).
        let runs = socket_use.runs && sizes.mtu <= MAX_RUN_BYTES / 2 && sizes.rd >= 2 * READ_BUFS;
        let gro = raw
            .filter(|_| socket_use.read)
            .and_then(|fd| Gro::new(fd, sizes.mtu, runs));

        // Receive buffers get one spare byte: a datagram longer than the MTU fills it, which is
        // how an oversized (and, by the provider, silently truncated) datagram is detected.
        let rx = Slab::new(sizes.rd, rx_size)?;
        let tx = Slab::new(sizes.sd, prefix + sizes.mtu)?;
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
            mrs,
            cq,
            rx,
            tx,
            rx_desc,
            tx_desc,
            prefix,
            iov_limit,
            sends_at_once: socket_use.sends_at_once,
            inject_size,
            mtu: sizes.mtu,
            name,
            socket_buffers,
            send_socket,
            batch,
            lost_unbatched: 0,
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

    /// The endpoint's bound UDP port, in host order.
    pub(crate) fn port(&self) -> u16 {
        u16::from_be(self.name.sin_port)
    }
}
