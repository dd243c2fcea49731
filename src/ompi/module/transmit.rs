//! The transmit side: every datagram the core has ready handed to the fabric, batched,
//! gathered from where its payload lies, or copied, while buffers and credits last.
use crate::fabric::{self, BufId, PeerAddr, Posted};
use crate::ompi::log;
use crate::proto::{Body, Channel, Instant, PeerId};

use super::{ModuleState, CHANNELS};

/// Segment payloads at least this long are sent from where they lie (one gathered send of
/// header and payload) instead of being copied behind the header first.
const GATHER_MIN: usize = 4096;
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

impl ModuleState {
    /// Hand every datagram the core has ready to the fabric, while buffers and credits last.
    pub fn transmit(&mut self, now: Instant) {
        for ch in CHANNELS {
            self.transmit_channel(now, ch);
            if !self.fabric.has_batch(ch) {
                continue;
            }
            match self.fabric.flush_sends(ch) {
                // Kept by the fabric for the next pass.
                Err(e) if e.is_would_block() => self.busy_batches += 1,
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
            if let Some(addr) = self.slot(t.peer).map(|s| s.addr) {
                self.fabric.commit_batched(ch, t.len, &addr);
            }
            // Done once in the batch: no completion gives the credit back.
            self.engine.handle_send_complete(ch);
        }
    }

    /// Where datagrams to `peer` go; `None` (buffer and credit given back) when the peer was
    /// removed after the core queued the datagram.
    fn destination(&mut self, ch: Channel, buf: BufId, peer: PeerId) -> Option<PeerAddr> {
        let addr = self.slot(peer).map(|s| s.addr);
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
            match self.fabric.tx_bytes(ch, buf) {
                Ok(bytes) => {
                    bytes[len..len + pieces[0].len()].copy_from_slice(pieces[0]);
                    bytes[len + pieces[0].len()..whole].copy_from_slice(pieces[1]);
                }
                // Not reached (the post has just found the buffer lent), but a datagram whose
                // body is not behind its header must never be queued: it would go out with
                // stale bytes. Lost instead, which retransmission repairs.
                Err(e) => return self.sent(ch, buf, len, peer, Err(e)),
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
            // Sent on the socket or injected: no completion will give the credit back.
            Ok(Posted::Done) => {
                self.engine.handle_send_complete(ch);
                true
            }
            Err(e) if e.is_would_block() => {
                self.busy_sends += 1;
                self.pending_tx[ch as usize] = Some((buf, len, peer));
                false
            }
            Err(e) => {
                // Lost like a dropped datagram: the core's retransmission repairs it.
                self.lost_sends += 1;
                log::verbose(5, || format!("post_send on {ch:?} failed: {e}"));
                self.fabric.release_tx(ch, buf);
                self.engine.handle_send_complete(ch);
                true
            }
        }
    }
}
