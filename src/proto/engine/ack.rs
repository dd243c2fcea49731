//! Acknowledgement processing on the sending side and loss detection.
//!
//! An ACK carries the cumulative ACK and a selective-ACK bitmap (32 bits in every header, up
//! to 4064 more in a standalone ACK). A segment is declared lost without waiting for its
//! timeout when a segment transmitted after it has been delivered and it has itself been out
//! for at least that segment's round trip plus a reordering allowance (RACK-style: a quarter
//! of the minimum RTT, widened when a repair turns out to have been spurious, at most the
//! smoothed RTT). A segment is thus fast-repaired at most once per round trip. The peer tells
//! us when it received a segment twice (D-SACK), which is how a repair of a segment that was
//! only reordered shows, and echoes the latest of our transmissions it has received, which
//! tells the ACK of a resent segment's late original from the ACK of the resend.

use super::tx::MAX_UNSENT_REFUSALS;
use super::{finish_op, Engine};
use crate::proto::api::*;
use crate::proto::peer::{HeldPut, Peer};
use crate::proto::seq::{Seq, MAX_WINDOW};
use crate::proto::spare::Spares;
use crate::proto::window::recv::ext_diff;
use crate::proto::window::{SegRec, SegState};
use crate::proto::wire::AckInfo;
use std::collections::VecDeque;

impl Engine {
    pub(super) fn process_ack(&mut self, now: Instant, pid: u32, ack: AckInfo, ext: &[u8]) {
        self.stats.ack_recvs += 1;
        let peer = PeerId(pid);
        let p = self.peers[pid as usize].as_mut().expect("live");
        // Extended values (wire v2): an ACK replayed after the 16-bit space wrapped is a
        // multiple of 65536 away from anything in flight, so it fails these checks instead
        // of acknowledging segments that may never have arrived.
        let d = ext_diff(ack.cum.wrapping_add(1), p.sw.una_ext());
        if d < 0 || d > p.sw.in_flight() as i32 {
            // Older than what we know, or acknowledging what was never sent.
            self.stats.old_acks += 1;
            return;
        }
        // No genuine sender is more than a window ahead of what we have received (it only
        // sends what our acknowledgements let into its window), plus the refusals it has
        // queued but not sequenced yet: a forgery.
        if ext_diff(ack.snd_next, p.rw.next()) > (MAX_WINDOW as u32 + MAX_UNSENT_REFUSALS) as i32 {
            self.stats.old_acks += 1;
            return;
        }
        if let Some(s) = ack.dsack {
            received_twice(p, Seq(s), now, &mut self.stats);
        }
        let cum_next = Seq(ack.cum as u16).plus(1);
        // Once the window has passed the barrier it holds nothing back, whatever replaces it
        // (and it never falls 2^31 behind on a peer that only streams to us).
        if ext_diff(ack.snd_next, p.ack_barrier) > 0 || ext_diff(p.rw.next(), p.ack_barrier) >= 0 {
            p.ack_barrier = ack.snd_next;
        }
        let barrier = p.ack_barrier;
        let mut progress = d > 0;
        let echo = echoed_tx(p.tx_count, ack.echo);
        for _ in 0..d {
            let s = p.sw.una;
            let rec = *p.sw.get(s);
            p.sw.get_mut(s).state = SegState::Free;
            p.sw.una = s.plus(1);
            if matches!(rec.state, SegState::InFlight | SegState::Lost) {
                if rec.state == SegState::InFlight {
                    p.hotel.checkout(rec.room);
                }
                let (events, spares) = (&mut self.events, &mut self.spares);
                delivered(p, peer, &rec, now, barrier, events, spares, echo);
            }
        }
        let base = cum_next.plus(1);
        let mut sack_new = false;
        let mut mark =
            |k: usize, p: &mut Peer, events: &mut VecDeque<Event>, spares: &mut Spares| {
                let s = base.plus(k as u16);
                if !p.sw.contains(s) {
                    return;
                }
                let rec = *p.sw.get(s);
                match rec.state {
                    SegState::InFlight => {
                        p.hotel.checkout(rec.room);
                    }
                    SegState::Lost => {}
                    SegState::Sacked | SegState::Free => return,
                }
                p.sw.get_mut(s).state = SegState::Sacked;
                delivered(p, peer, &rec, now, barrier, events, spares, echo);
                sack_new = true;
            };
        let mut bits = ack.sack;
        while bits != 0 {
            let k = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            mark(k, p, &mut self.events, &mut self.spares);
        }
        for (i, &byte) in ext.iter().enumerate() {
            let mut b = byte;
            while b != 0 {
                let k = b.trailing_zeros() as usize;
                b &= b - 1;
                mark(32 + i * 8 + k, p, &mut self.events, &mut self.spares);
            }
        }
        progress |= sack_new;
        if ack.held {
            // The peer holds its receive side (docs/wire.md §5b) and drops what we send until it
            // is back: no loss inferred (not a duplicate ACK), no RTT sample, the timeout left
            // backed off, one probe per timeout (`peer_holds`). What it acknowledges of what it
            // took before the hold is progress, and such an ACK is no replay. One that
            // acknowledges nothing proves the peer alive only if it answers a transmission
            // sent since the failure clock last started: a replay of an old one (or a second
            // answer to the same probe) vouches for nothing recent and leaves `peer_holds` as
            // it was.
            if progress || echo > p.progress_tx {
                p.progressed(now);
                p.peer_holds = true;
            }
            // What acknowledged segments freed of the window may go: at worst a window's worth
            // dropped once, where waiting for a probe would hang if nothing were left in flight
            // to time out.
            if progress {
                self.ensure_ready(pid);
            }
            return;
        }
        if progress {
            p.progressed(now);
            p.rtt.backoff = 0;
        } else {
            p.peer_holds = false;
            if p.sw.in_flight() > 0 {
                self.stats.dup_acks += 1;
            }
        }
        if detect_losses(p, now) {
            self.ensure_resend(pid);
        }
        self.ensure_ready(pid);
    }
}

/// The extended transmission number `echo` names: the latest of ours at most `tx_count` with
/// those low 32 bits (0, vouching for nothing, if there was none).
fn echoed_tx(tx_count: u64, echo: u32) -> u64 {
    let back = (tx_count as u32).wrapping_sub(echo) as u64;
    tx_count.saturating_sub(back)
}

fn advance_rack(p: &mut Peer, tx: u64, rtt: u64) {
    if tx > p.rack_tx {
        p.rack_tx = tx;
        p.rack_rtt = rtt;
    }
}

/// A segment reached the peer (first time we learn it): RTT sample (Karn), RACK state, and
/// the op's accounting.
#[allow(clippy::too_many_arguments)]
fn delivered(
    p: &mut Peer,
    peer: PeerId,
    rec: &SegRec,
    now: Instant,
    barrier: u32,
    events: &mut VecDeque<Event>,
    spares: &mut Spares,
    echo: u64,
) {
    let rtt = now.0.saturating_sub(rec.sent_at.0);
    // For data, no later than the echo: the ACK of a late original names the resend, which may
    // still be in a queue, with the segments sent before it.
    let tx = if rec.prio { rec.tx } else { rec.tx.min(echo) };
    let acked = &mut p.acked_tx[rec.prio as usize];
    *acked = (*acked).max(tx);
    p.acked_at[rec.prio as usize] = now;
    if !rec.retx {
        p.rtt.sample(rtt);
    } else if rec.fast {
        // Acknowledged sooner after the repair than any round trip takes: the original
        // arrived after all, it was only reordered. Widen the reordering allowance.
        if rtt < p.rtt.min_rtt() / 2 {
            p.reo_mult = p.reo_mult.max((p.reo_mult + 1).min(MAX_REO_MULT_BY_TIMING));
            p.good_repairs = 0;
        } else {
            // Saturating: with no allowance to narrow it counts every good repair.
            p.good_repairs = p.good_repairs.saturating_add(1);
            if p.good_repairs >= 64 && p.reo_mult > 1 {
                p.reo_mult -= 1;
                p.good_repairs = 0;
            }
        }
    }
    // A transmission at least as recent as this segment's latest reached the peer (the data
    // channel is first in, first out). Below the echo, the ACK is for an earlier transmission
    // that was only late: taken as the resend's, it would declare lost everything sent
    // between the two, whose resends would do the same in turn (bidirectional runs across
    // hosts resent a fifth of their datagrams so). The same tells the ACK of a timeout probe
    // from that of an original a descheduled peer is only now reading.
    if !rec.prio && rec.tx <= echo {
        advance_rack(p, rec.tx, rtt);
    }
    if let Some(op) = p.ops.get_mut(rec.op) {
        op.segs_out = op.segs_out.saturating_sub(1);
        if op.is_complete() {
            let id = op.id;
            let op = p.ops.remove(rec.op).expect("present");
            if op.release_at.is_some() {
                p.prune_lent();
            }
            if matches!(op.kind, crate::proto::fragment::OpKind::Put { .. }) {
                p.puts.remove(&id);
                if !op.reported && ext_diff(p.rw.next(), barrier) < 0 {
                    // The peer may have refused it in a segment we have not received yet.
                    p.held_puts.push(HeldPut {
                        barrier,
                        id,
                        cookie: op.cookie,
                    });
                    return;
                }
            }
            finish_op(peer, op, Ok(()), events, spares);
        }
    }
}

/// The peer received segment `s` twice (D-SACK). If we had resent it, the resend was
/// needless: the original was only late. A needless fast repair widens the reordering
/// allowance, at most once per round trip, since one burst of reordering yields a report per
/// segment it delayed (the rule of RFC 8985's reordering window). A duplicate we never resent
/// (or resent longer ago than we remember) says nothing about us.
fn received_twice(p: &mut Peer, s: Seq, now: Instant, stats: &mut Stats) {
    // The latest resend of `s` first; each resend is matched by one report at most.
    let Some(i) = p.resent.iter().rposition(|&(q, _)| q == s.0) else {
        return;
    };
    let (_, fast) = p.resent.remove(i).expect("found");
    stats.spurious_resends += 1;
    // Resent more than once, the two copies may both be repairs: a repair repeated after a
    // round trip, which says nothing about reordering (at 30 % loss, widening on these cost
    // 5 % of the simulated goodput).
    let again = p.resent.iter().any(|&(q, _)| q == s.0);
    if fast && !again {
        p.good_repairs = 0;
        if now.0 >= p.reo_widened_at.0.saturating_add(p.rtt.srtt()) {
            p.reo_mult = (p.reo_mult + 1).min(MAX_REO_MULT);
            p.reo_widened_at = now;
        }
    }
}

/// How far the timing rule alone (a repair acknowledged within half the minimum RTT) widens the
/// allowance, in quarters of the minimum RTT: its bound before the peer's reports existed, and
/// the one the simulated goodput figures were measured with. Only reports widen it further.
const MAX_REO_MULT_BY_TIMING: u32 = 8;

/// Upper bound of the reordering allowance, in quarters of the minimum RTT. The smoothed RTT
/// is the real bound (a segment later than a whole round trip is better repaired than waited
/// for); this one only keeps the product small. Across hosts a datagram's round trip can be
/// 20 us and the reordering of a jittery path a millisecond.
const MAX_REO_MULT: u32 = 4096;

/// Walks the hotel from its oldest room: segments transmitted before a delivered one and out
/// for that one's round trip plus the reordering allowance are declared lost. Returns true if
/// any was.
pub(super) fn detect_losses(p: &mut Peer, now: Instant) -> bool {
    let min_rtt = p.rtt.min_rtt();
    let reordering = (min_rtt / 4 * p.reo_mult as u64).min(p.rtt.srtt());
    let wait = p.rack_rtt.max(min_rtt) + reordering;
    let mut any = false;
    p.rack_deadline = None;
    while let Some((room, seq, _)) = p.hotel.peek() {
        let s = Seq(seq as u16);
        let rec = p.sw.get(s);
        if rec.tx >= p.rack_tx {
            break;
        }
        let lost_at = rec.sent_at + Duration(wait);
        if now < lost_at {
            p.rack_deadline = Some(lost_at);
            break;
        }
        p.hotel.checkout(room);
        p.declare_lost(s, true);
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::echoed_tx;

    #[test]
    fn an_echo_names_the_latest_transmission_with_its_low_bits() {
        assert_eq!(echoed_tx(0, 0), 0, "nothing sent, nothing vouched for");
        assert_eq!(echoed_tx(10, 7), 7);
        assert_eq!(echoed_tx(10, 10), 10);
        // Across the 2^32 wrap of the wire's 32 bits.
        let n = (1u64 << 32) + 5;
        assert_eq!(echoed_tx(n, u32::MAX), (1 << 32) - 1);
        assert_eq!(echoed_tx(n, 3), (1 << 32) + 3);
        // An echo of something not yet sent is taken as a wrap ago: it vouches for nothing
        // recent.
        assert_eq!(echoed_tx(10, 11), 0);
        assert_eq!(echoed_tx(n, 6), 6);
    }
}
