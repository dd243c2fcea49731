//! Datagrams leaving the engine: standalone ACKs and tiny fragments on the priority channel;
//! retransmissions (first, within the per-pass budget) and everything else on the data channel.

use super::Engine;
use crate::proto::api::*;
use crate::proto::fragment::OpKind;
use crate::proto::payload::Payload;
use crate::proto::peer::{Peer, RESENT_MEMORY};
use crate::proto::seq::Seq;
use crate::proto::window::{SegRec, SegState};
use crate::proto::wire::{AckInfo, Header, Kind, BASE_LEN, MAX_ACK_MAP};

impl Engine {
    /// Next datagram to send on `channel`, written into `buf` (at least that channel's MTU,
    /// else `None`). Consumes one credit of the channel; `None` when nothing is due or no
    /// credit is left (then counted in `credits_exhausted` if something was waiting).
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        channel: Channel,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.poll_transmit_gather(now, channel, buf, usize::MAX)
    }

    /// `poll_transmit`, except that a segment payload of at least `gather_min` bytes is not
    /// copied into `buf`: `buf[..len]` then holds the header and `Transmit::body` says where
    /// the payload is (`Engine::body`), for an edge that sends from several buffers at once
    /// and so spares a copy of every large segment.
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        channel: Channel,
        buf: &mut [u8],
        gather_min: usize,
    ) -> Option<Transmit> {
        self.commit_write();
        self.touch(now);
        let need = match channel {
            Channel::Priority => self.cfg.priority_mtu,
            Channel::Data => self.cfg.data_mtu,
        };
        if buf.len() < need {
            return None;
        }
        if self.credits[channel as usize] == 0 {
            if self.wants_transmit(channel) {
                self.stats.credits_exhausted += 1;
            }
            return None;
        }
        let t = match channel {
            Channel::Priority => match self.tx_ack(buf) {
                Some(t) => Some(t),
                None => self.tx_new(now, Channel::Priority, buf, gather_min),
            },
            Channel::Data => match self.tx_resend(now, buf, gather_min) {
                Some(t) => Some(t),
                None => self.tx_new(now, Channel::Data, buf, gather_min),
            },
        }?;
        self.credits[channel as usize] -= 1;
        self.posted[channel as usize] += 1;
        self.stats.sends += 1;
        self.stats.bytes_sent += t.datagram_len() as u64;
        Some(t)
    }

    /// The payload of a gathered transmit, as at most two slices laid end to end; empty if
    /// the engine has changed since (the segment's operation is gone).
    pub fn body(&self, b: &Body) -> [&[u8]; 2] {
        self.peers
            .get(b.peer as usize)
            .and_then(|p| p.as_ref())
            .and_then(|p| p.ops.get(b.op))
            .filter(|op| (b.off as usize + b.len as usize) <= op.data.len())
            .map_or([&[], &[]], |op| {
                op.data.slices(b.off as usize, b.len as usize)
            })
    }

    /// Whether `poll_transmit` on `channel` may have a datagram now (something is queued;
    /// credits are its own check, and counted there): lets an edge skip fetching a send
    /// buffer for nothing.
    pub fn wants_transmit(&self, channel: Channel) -> bool {
        match channel {
            Channel::Priority => !self.ack_list.is_empty() || !self.prio_ready.is_empty(),
            Channel::Data => {
                (!self.resend_list.is_empty() && self.resend_budget > 0)
                    || !self.data_ready.is_empty()
            }
        }
    }

    fn tx_ack(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(pid) = self.ack_list.pop_front() {
            let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) else {
                continue;
            };
            p.in_ack_list = false;
            // (An ACK flagged HELD goes even when a segment carried the ordinary one: only it
            // tells the peer we are alive.)
            if p.failed || !(p.ack_due || p.held_ack) || p.refusals_unsent > MAX_UNSENT_REFUSALS {
                // (Held ACK information leaves on the refusal itself.)
                continue;
            }
            let mut h = Header::new(Kind::Ack);
            h.src = self.cfg.local_id;
            h.key = p.info.remote_key;
            h.ack = Some(AckInfo {
                dsack: p.dsacks.pop_front(),
                // Not once the hold has ended: the retransmissions will be taken.
                held: p.held_ack && self.rx_held,
                ..ack_info(p)
            });
            p.held_ack = false;
            // The rest of the SACK bitmap, up to the highest arrival, as payload.
            let extra_bits = p.rw.sack_span().saturating_sub(32);
            let room = (p.prio_mtu - BASE_LEN).min(MAX_ACK_MAP);
            let nbytes = extra_bits.div_ceil(8).min(room);
            h.payload_len = nbytes as u16;
            let n = h.emit(buf);
            let mut i = 0;
            while i < nbytes {
                let w = p.rw.sack_word(32 + i * 8).to_le_bytes();
                let k = (nbytes - i).min(8);
                buf[n + i..n + i + k].copy_from_slice(&w[..k]);
                i += k;
            }
            if p.dsacks.is_empty() {
                p.ack_owed = false;
                p.ack_due = false;
            } else {
                p.in_ack_list = true;
                self.ack_list.push_back(pid);
            }
            self.stats.acks_alone += 1;
            return Some(Transmit {
                peer: PeerId(pid),
                len: n + nbytes,
                body: None,
            });
        }
        None
    }

    fn tx_new(
        &mut self,
        now: Instant,
        channel: Channel,
        buf: &mut [u8],
        gather_min: usize,
    ) -> Option<Transmit> {
        let prio = channel == Channel::Priority;
        loop {
            let list = if prio {
                &mut self.prio_ready
            } else {
                &mut self.data_ready
            };
            let pid = list.pop_front()?;
            let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) else {
                continue;
            };
            if prio {
                p.in_prio_ready = false;
            } else {
                p.in_data_ready = false;
            }
            if p.failed || !p.sw.is_open() {
                continue;
            }
            if prio && p.refusals_unsent > 0 {
                // The refusals (first in the data queue) must take the next sequence numbers:
                // that is what the barrier in our ACKs promises. The data channel sending
                // them puts this peer back in the ready lists.
                continue;
            }
            let q = if prio { &mut p.prio_q } else { &mut p.data_q };
            let Some(&idx) = q.front() else {
                continue;
            };
            let mtu = if prio { p.prio_mtu } else { p.mtu };
            let Some(op) = p.ops.get_mut(idx) else {
                q.pop_front();
                self.ensure_ready(pid);
                continue;
            };
            let (off, len) = op.next_segment(mtu);
            let kind = op.wire_kind();
            if op.advance(len) {
                q.pop_front();
                if let (OpKind::Send { .. }, Payload::Lent(_)) = (&op.kind, &op.data) {
                    if op.data.len() < self.cfg.lent_copy_below {
                        op.release_at = Some(now);
                        p.copy_q.push_back((idx, now));
                    } else if let Some(hold) = self.cfg.lent_hold {
                        op.release_at = Some(now + hold);
                        p.lent_q.push_back((idx, now + hold));
                    }
                }
            }
            let rto = p.rtt.rto();
            let seq = p.sw.next;
            p.tx_count += 1;
            let room = p.hotel.checkin(seq.0 as u32, now + Duration(rto));
            let rec = SegRec {
                state: SegState::InFlight,
                op: idx,
                off,
                len,
                sent_at: now,
                tx: p.tx_count,
                retx: false,
                fast: false,
                prio,
                room,
            };
            p.sw.push(rec);
            let refusals_few_again = kind == Kind::PutRefuse && {
                p.refusals_unsent = p.refusals_unsent.saturating_sub(1);
                p.refusals_unsent == MAX_UNSENT_REFUSALS
            };
            let (n, body) = emit_segment(
                p,
                (pid, self.cfg.local_id),
                seq,
                &rec,
                buf,
                gather_min,
                &mut self.stats,
            );
            if body.is_some() {
                mark_read_in_place(p, idx, channel, self.posted);
            }
            if kind == Kind::Frag {
                self.stats.frag_sends += 1;
            } else {
                self.stats.chunk_sends += 1;
            }
            self.ensure_ready(pid);
            if !prio {
                self.keep_data_turn(pid);
            }
            if refusals_few_again {
                // An ACK tx_ack passed over while too many refusals waited, and that this
                // segment did not carry, goes on its own again: nothing else would put the
                // peer back on the ACK list.
                let p = self.peers[pid as usize].as_ref().expect("live");
                if p.ack_due && !p.in_ack_list {
                    self.ack_now(pid);
                }
            }
            return Some(Transmit {
                peer: PeerId(pid),
                len: n,
                body,
            });
        }
    }

    /// After a data segment to `pid` (just put back at the end of `data_ready` if it has more):
    /// keeps the peer in front until its turn is used up. Retransmissions go first on every
    /// call and neither count in a turn nor end it.
    fn keep_data_turn(&mut self, pid: u32) {
        let (last, n) = self.data_turn;
        // Saturating: a peer that empties its queue after every segment keeps counting.
        let n = if last == pid { n.saturating_add(1) } else { 1 };
        self.data_turn = (pid, n);
        if self.data_ready.back() != Some(&pid) {
            // Out of data or window: the next peer's turn.
            return;
        }
        if self.data_ready.len() == 1 || n >= self.cfg.data_turn {
            // Alone, its turn starts over, so a peer whose data comes now waits a whole turn
            // rather than ending the batch under way after one more segment.
            self.data_turn = (pid, 0);
            return;
        }
        self.data_ready.rotate_right(1);
    }

    fn tx_resend(&mut self, now: Instant, buf: &mut [u8], gather_min: usize) -> Option<Transmit> {
        if self.resend_budget == 0 {
            return None;
        }
        while let Some(pid) = self.resend_list.pop_front() {
            let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) else {
                continue;
            };
            p.in_resend_list = false;
            if p.failed {
                continue;
            }
            while let Some(seq) = p.resend_q.pop_front() {
                let s = Seq(seq);
                if !p.sw.contains(s) || p.sw.get(s).state != SegState::Lost {
                    continue;
                }
                let rto = p.rtt.rto();
                p.tx_count += 1;
                let tx = p.tx_count;
                let room = p.hotel.checkin(seq as u32, now + Duration(rto));
                let r = p.sw.get_mut(s);
                r.state = SegState::InFlight;
                r.sent_at = now;
                r.tx = tx;
                r.retx = true;
                r.prio = false;
                r.room = room;
                let rec = *r;
                let (n, body) = emit_segment(
                    p,
                    (pid, self.cfg.local_id),
                    s,
                    &rec,
                    buf,
                    gather_min,
                    &mut self.stats,
                );
                if body.is_some() {
                    mark_read_in_place(p, rec.op, Channel::Data, self.posted);
                }
                if p.resent.len() == RESENT_MEMORY {
                    p.resent.pop_front();
                }
                p.resent.push_back((seq, rec.fast));
                if rec.fast {
                    self.stats.resends_fast += 1;
                } else {
                    self.stats.resends_timeout += 1;
                }
                self.resend_budget -= 1;
                self.ensure_resend(pid);
                return Some(Transmit {
                    peer: PeerId(pid),
                    len: n,
                    body,
                });
            }
        }
        None
    }
}

/// The datagram about to be posted on `channel` reads op `idx`'s bytes where they lie: the op
/// may not be released before the edge has completed it.
fn mark_read_in_place(p: &mut Peer, idx: u32, channel: Channel, posted: [u64; 2]) {
    if let Some(op) = p.ops.get_mut(idx) {
        op.tx_mark[channel as usize] = posted[channel as usize] + 1;
    }
}

/// Refusals queued but not yet sequenced that an ACK can still vouch for (see `ack_info`).
/// More than this under a flood of forged PUTs, and ACK information is held until the backlog
/// drains: a peer cannot tell a barrier further ahead from a forged ACK.
pub(super) const MAX_UNSENT_REFUSALS: u32 = 64;

/// `snd_next` is the ACK barrier (docs/wire.md 7): the origin of a PUT holds it complete until
/// it has received everything below it. Refusals not yet given a sequence number will take
/// the next ones (they are first in line, before any new segment on either channel), so they
/// are counted in: an ACK need not wait for them, and two peers refusing each other's PUTs
/// with full windows cannot both withhold the ACKs that would open them.
///
/// Duplicates are named by standalone ACKs only (`tx_ack`): one riding a data segment can
/// arrive behind a backlog so late that the peer ignores it as old, and its report with it.
fn ack_info(p: &Peer) -> AckInfo {
    AckInfo {
        cum: p.rw.cum(),
        sack: p.rw.sack_word(0) as u32,
        snd_next: p.sw.next_ext.wrapping_add(p.refusals_unsent),
        dsack: None,
        echo: p.tx_seen,
        held: false,
    }
}

/// Writes segment `seq` (a first transmission or a resend) into `buf`, with the current
/// acknowledgement piggy-backed (which cancels an owed standalone ACK). A payload of
/// `gather_min` bytes or more stays where it is: returned as the body instead of copied.
fn emit_segment(
    p: &mut Peer,
    (pid, local_id): (u32, u64),
    seq: Seq,
    rec: &SegRec,
    buf: &mut [u8],
    gather_min: usize,
    stats: &mut Stats,
) -> (usize, Option<Body>) {
    let op = p
        .ops
        .get(rec.op)
        .expect("segment's op lives until acknowledged");
    let mut h = Header::new(op.wire_kind());
    h.seq = p.sw.ext(seq);
    // Only the data channel is first in, first out: a priority datagram's number could vouch
    // for data sent before it that is still queued.
    h.tx = if rec.prio { 0 } else { rec.tx as u32 };
    h.src = local_id;
    h.key = p.info.remote_key;
    h.payload_len = rec.len as u16;
    let hold = p.refusals_unsent > MAX_UNSENT_REFUSALS;
    h.ack = if hold { None } else { Some(ack_info(p)) };
    match op.kind {
        OpKind::Send { tag, chunked } => {
            h.tag = tag;
            if chunked {
                h.id = op.id;
                h.total = op.total;
                h.offset = rec.off;
            }
        }
        OpKind::Put { region, offset } => {
            h.id = op.id;
            h.total = op.total;
            h.offset = rec.off;
            h.region = region;
            h.region_offset = offset;
        }
        OpKind::GetReq { region, offset } => {
            h.id = op.id;
            h.total = op.total;
            h.region = region;
            h.region_offset = offset;
        }
        OpKind::GetReply => {
            h.id = op.id;
            h.total = op.total;
            h.offset = rec.off;
        }
        OpKind::PutRefuse | OpKind::GetRefuse => h.id = op.id,
    }
    let n = h.emit(buf);
    let (o, l) = (rec.off as usize, rec.len as usize);
    let body = if l >= gather_min {
        Some(Body {
            peer: pid,
            op: rec.op,
            off: rec.off,
            len: rec.len,
        })
    } else {
        op.data.copy_to(o, &mut buf[n..n + l]);
        None
    };
    // An ACK riding a data-channel segment queues at the peer behind everything still in
    // flight on that channel; with a backlog that is longer than the peer's timeout (4 MiB of
    // 64 KiB datagrams take a millisecond to read), so the standalone ACK stays due. So it
    // does while it has a duplicate to name (`ack_info`).
    if p.ack_owed
        && !hold
        && p.dsacks.is_empty()
        && (rec.prio || p.sw.in_flight() <= PIGGYBACK_BACKLOG)
    {
        p.ack_owed = false;
        p.ack_due = false;
        stats.acks_piggybacked += 1;
    }
    match body {
        Some(_) => (n, body),
        None => (n + l, None),
    }
}

/// Data segments in flight to a peer beyond which an ACK piggy-backed on the data channel
/// does not count as sent.
const PIGGYBACK_BACKLOG: u16 = 8;
