//! The receive side: completions of both channels read and fed to the core, and the core's
//! events turned into upcalls (or handled here when they need no Open MPI call).
use crate::fabric::{BufId, Completion, Op};
use crate::ompi::frag::Frag;
use crate::ompi::log;
use crate::ompi::rdma::{RdmaOp, Reader};
use crate::ompi::status::*;
use crate::proto::{Channel, Event, Failure, Instant, RxOutcome};

use super::cookie::inline_len;
use super::{ModuleState, Upcall, CHANNELS, CQ_BATCH};

/// Empty polls after which the data channel counts as quiet ...
const DATA_QUIET_AFTER: u32 = 64;
/// ... and is then polled only every this many progress calls (until it yields something).
/// Every poll of the udp provider is a recvmsg system call; small messages and ACKs travel on
/// the priority channel, so while the data channel is quiet half of each progress loop was an
/// empty system call, which a ping-pong pays for in detection delay on every hop.
const DATA_QUIET_POLL_EVERY: u32 = 4;
/// `FI_ETRUNC` of `<rdma/fi_errno.h>`: a receive longer than the posted buffer.
const FI_ETRUNC: i32 = 265;

impl ModuleState {
    /// Read completions of both channels and feed them to the core.
    pub(super) fn collect(&mut self, now: Instant, out: &mut Vec<Upcall>) -> usize {
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
                        match self.regions.write_target(peer, region, offset, n) {
                            Some(dst) if payload.end <= len => {
                                let src = &self.fabric.rx_bytes(ch, buf, len)[payload];
                                // SAFETY: `write_target` checked that [dst, dst + n) lies inside
                                // memory registered for `peer` to write (a PUT target or a
                                // GET's destination);
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
                    self.lost_sends += 1;
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
                        .and_then(|len| self.regions.lend(Reader::Peer(peer), region, offset, len))
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

    /// Give back receive buffers the PML is done with (in-place deliveries, and the kept
    /// chunks of delivered fragments), and post them.
    pub(super) fn repost_all(&mut self, bufs: &[(Channel, BufId)]) {
        for &(ch, buf) in bufs {
            self.fabric.repost(ch, buf);
        }
        self.flush_reposts();
    }

    /// Post the receive buffers given back so far. A failure is logged and the buffers stay
    /// queued for the next pass.
    pub(super) fn flush_reposts(&mut self) {
        if let Err(e) = self.fabric.flush_reposts() {
            log::error(&format!("reposting receive buffers failed: {e}"));
        }
    }
}

/// The OPAL status a send, put or get completes with.
fn failure_code(r: Result<(), Failure>) -> i32 {
    match r {
        Ok(()) => OPAL_SUCCESS,
        Err(Failure::PeerUnreachable) => OPAL_ERR_UNREACH,
        Err(Failure::RemoteRefused) => OPAL_ERROR,
    }
}

/// The handle by which the core names a kept receive buffer (only the data channel's are
/// offered: chunks travel there).
fn held_handle(buf: BufId) -> u64 {
    u64::from(buf.0)
}

/// The receive buffer a [`held_handle`] names.
pub(super) fn held_buffer(handle: u64) -> (Channel, BufId) {
    (Channel::Data, BufId(handle as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric;

    #[test]
    fn fi_etrunc_is_libfabrics_truncation_code() {
        // libfabric's own text for the code, so a wrong constant cannot go unnoticed.
        let e = fabric::FabricError::from_ret("test", -(FI_ETRUNC as i64));
        assert!(e.message.to_lowercase().contains("trunc"), "{e}");
    }
}
