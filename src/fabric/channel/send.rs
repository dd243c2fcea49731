//! The send path of one datagram: send buffers lent and given back (one per send credit),
//! sent on the provider's socket by the channel itself (udp) or by `fi_inject` / `fi_send` /
//! `fi_sendv`, and the fault injector's hooks on them. Batched sends are in `batch.rs`.

use super::{context, ChannelRes, TxState};
use crate::fabric::error::FabricError;
use crate::fabric::module::{BufId, Posted};
use crate::fabric::socket::{self, Dest};
use crate::fabric::sys;
use std::io::IoSlice;
use std::os::fd::RawFd;
use std::os::raw::c_void;

impl ChannelRes {
    /// Longest datagram `post_send` injects where the provider sends.
    pub(crate) fn inject_limit(&self) -> usize {
        self.inject_size.saturating_sub(self.prefix).min(self.mtu)
    }

    /// Buffer `i` back on the free list: one send credit again.
    pub(super) fn free_tx(&mut self, i: usize) {
        self.tx_state[i] = TxState::Free;
        self.tx_free.push(i as u32);
    }

    /// Send buffers in all: the channel's send credits.
    pub(crate) fn tx_capacity(&self) -> usize {
        self.tx_state.len()
    }

    /// Send buffers free now.
    pub(crate) fn tx_available(&self) -> usize {
        self.tx_free.len()
    }

    /// Lend a free send buffer, `mtu` bytes behind the provider's prefix; None when every
    /// credit is in use.
    pub(crate) fn tx_buffer(&mut self) -> Option<(BufId, &mut [u8])> {
        let i = self.tx_free.pop()?;
        self.tx_state[i as usize] = TxState::Lent;
        let (prefix, mtu) = (self.prefix, self.mtu);
        Some((BufId(i), self.tx.slice_mut(i as usize, prefix, mtu)))
    }

    fn lent_tx(&self, buf: BufId) -> Result<usize, FabricError> {
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
            Ok(i) => self.free_tx(i),
            Err(e) => tracing::warn!("release_tx ignored: {e}"),
        }
    }

    /// Sends the first `len` bytes of lent buffer `buf` to `to` (`fi_addr` in the AV). Where the
    /// channel sends on the socket itself, and else for datagrams that fit the provider's
    /// inject size (`fi_inject`), the buffer is free again at once (`Posted::Done`): that
    /// skips the provider's CQ lock, the completion it writes, and our read of it (which,
    /// found alone, made the next `fi_cq_read` one more `recvmsg` in a ping-pong).
    pub(crate) fn post_send(
        &mut self,
        buf: BufId,
        len: usize,
        to: Dest,
        fi_addr: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        let i = self.checked_tx(buf, len)?;
        self.send_lent(i, len, to, fi_addr)
    }

    /// `post_send` of lent buffer `i`, already checked (`checked_tx`).
    pub(super) fn send_lent(
        &mut self,
        i: usize,
        len: usize,
        to: Dest,
        fi_addr: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        if let Some(fd) = self.send_socket {
            return self.send_on_socket(fd, i, len, [&[], &[]], to);
        }
        if self.prefix + len <= self.inject_size {
            return self.inject_index(i, len, fi_addr);
        }
        self.send_index(i, len, fi_addr).map(|()| Posted::Pending)
    }

    /// One system call on the provider's socket for lent buffer `i`'s first `len` bytes and
    /// `body`: the kernel has the datagram when it returns, so the buffer is free again and
    /// no completion follows. A full socket is `-FI_EAGAIN` (the caller keeps the buffer and
    /// retries after progress); any other error is `-errno`, as the provider reports it.
    fn send_on_socket(
        &mut self,
        fd: RawFd,
        i: usize,
        len: usize,
        body: [&[u8]; 2],
        to: Dest,
    ) -> Result<Posted, FabricError> {
        // Buffer i is lent (checked_tx), so nothing else writes it; the socket is used only
        // without a prefix, so its datagram starts there.
        let head = self.tx.slice(i, self.prefix, len);
        let (call, sent) = if body.iter().all(|b| b.is_empty()) {
            ("sendto", socket::send_one(fd, head, to))
        } else {
            // Empty pieces are empty iovecs, which the kernel skips.
            let pieces = [head, body[0], body[1]].map(IoSlice::new);
            ("sendmsg", socket::send_to(fd, &pieces, None, to))
        };
        match sent {
            Ok(()) => {
                self.free_tx(i);
                Ok(Posted::Done)
            }
            Err(e) if socket::is_full(e) => {
                Err(FabricError::from_ret(call, -(sys::FI_EAGAIN as i64)))
            }
            Err(e) => Err(FabricError::with_detail(
                call,
                -i64::from(e),
                format_args!("{} bytes to {to}", len + body[0].len() + body[1].len()),
            )),
        }
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
        self.free_tx(i);
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

    /// Whether the channel writes lone datagrams to its socket itself (else through the provider).
    pub(crate) fn sends_on_socket(&self) -> bool {
        self.send_socket.is_some()
    }

    /// Whether `post_send_gather` may be used: the channel sends on the socket itself, or the
    /// provider gathers three buffers, needs no registration (a body lies in memory we never
    /// registered) and has sent when `fi_sendv` returns (the body may change right after); or
    /// sends are batched, which copies the body into the batch.
    pub(crate) fn can_gather(&self) -> bool {
        self.send_socket.is_some()
            || (self.iov_limit >= 3 && self.mrs.is_empty() && self.sends_at_once)
            || self.batch.is_some()
    }

    /// The index of lent send buffer `buf` and the length of the datagram its first `len`
    /// bytes and `body` make, if that fits the MTU (the head alone fits, then, too).
    pub(super) fn checked_gather(
        &self,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
    ) -> Result<(usize, usize), FabricError> {
        let total = len + body[0].len() + body[1].len();
        Ok((self.checked_tx(buf, total)?, total))
    }

    /// The first `len` bytes of lent send buffer `buf` followed by `body`, as one datagram of
    /// at most the MTU, sent on the socket or by `fi_sendv`. Only where `can_gather`.
    pub(crate) fn post_send_gather(
        &mut self,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
        to: Dest,
        fi_addr: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        let (i, total) = self.checked_gather(buf, len, body)?;
        self.gather_lent(i, len, total, body, to, fi_addr)
    }

    /// `post_send_gather` of lent buffer `i`, already checked for the `total` bytes it makes
    /// with `body` (`checked_gather`).
    pub(super) fn gather_lent(
        &mut self,
        i: usize,
        len: usize,
        total: usize,
        body: [&[u8]; 2],
        to: Dest,
        fi_addr: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        if let Some(fd) = self.send_socket {
            return self.send_on_socket(fd, i, len, body, to);
        }
        if !self.can_gather() {
            return Err(FabricError {
                call: "post_send_gather",
                code: sys::FI_EMSGSIZE as i32,
                message: format!(
                    "this channel does not gather (iov_limit {}, registered buffers {})",
                    self.iov_limit,
                    !self.mrs.is_empty()
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
                fi_addr,
                context(i, false),
            )
        };
        self.posted(i, ret, "fi_sendv", total, fi_addr)
            .map(|()| Posted::Pending)
    }

    /// Fault injector: keep lent buffer `i` out of the free list as if it were in flight.
    pub(crate) fn hold_tx(&mut self, i: usize) {
        self.tx_state[i] = TxState::InFlight;
    }

    /// Fault injector: free a buffer held by `hold_tx` whose send never reached the provider.
    pub(crate) fn free_held_tx(&mut self, i: usize) {
        if self.tx_state[i] == TxState::InFlight {
            self.free_tx(i);
        }
    }

    /// Fault injector: copy the first `len` bytes of send buffer `from` into send buffer `to`.
    pub(crate) fn copy_tx(&mut self, from: usize, to: usize, len: usize) {
        let n = self.prefix + len;
        let src = self.tx.slice(from, 0, n).to_vec();
        self.tx.slice_mut(to, 0, n).copy_from_slice(&src);
    }
}
