//! The receive path: receive buffers posted back in batches, the CQ read (received datagrams,
//! and the completions and errors of sends given to the provider), or the socket itself where
//! the channel reads it (`gro.rs`), each turned into `Completion`s.

use super::{context, decode, ChannelRes, RxState, TxState, CQ_BATCH};
use crate::fabric::error::{check, strerror, FabricError};
use crate::fabric::gro::Layout;
use crate::fabric::module::{BufId, Completion, Op};
use crate::fabric::sys;
use std::os::raw::c_void;

impl ChannelRes {
    /// Receive buffers this channel has (posted to the provider, or read into where the
    /// channel reads its socket).
    pub(crate) fn rx_count(&self) -> usize {
        self.rx_state.len()
    }

    pub(crate) fn reads_socket(&self) -> bool {
        self.gro.is_some()
    }

    pub(crate) fn gro_stats(&self) -> (u64, u64) {
        self.gro.as_ref().map_or((0, 0), |g| (g.reads, g.datagrams))
    }

    /// Datagrams of runs read at once that found no free buffer and were dropped.
    pub(crate) fn cut_recvs(&self) -> u64 {
        self.gro.as_ref().map_or(0, |g| g.cut)
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
            self.free_tx(i);
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
            self.free_tx(i);
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
