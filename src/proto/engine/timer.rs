//! Time passing: retransmit timeouts, fast-repair timers, delayed ACKs, peer failure.

use std::collections::VecDeque;

use super::ack::detect_losses;
use super::Engine;
use crate::proto::api::*;
use crate::proto::fragment::OpSlab;
use crate::proto::peer::{prune, Peer};
use crate::proto::spare::Spares;

/// Expired segments resent per peer per timeout (the rest wait for the probes' ACKs). A
/// small window recovers from heavy loss mostly by timeout, so a single probe would serialise
/// its repairs; a large one loses little by waiting a round trip for fast repair.
const TIMEOUT_PROBES: usize = 8;

impl Engine {
    /// Fire due timers: retransmissions, delayed ACKs, peer failure. Also starts a new
    /// progress pass: the retransmission budget is refilled to `max_resends_per_pass`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // The edge calls this as soon as a progress pass finds a timer due. Being late for the
        // earliest one by more than `rto_max` means this process did not run (stopped with
        // SIGSTOP, as a job suspension or gang scheduler does, or away from MPI with
        // `btl_usnic_ack_thread 0`), at the latest from that deadline on and at the earliest
        // from its last call into the engine: no probe left and no answer was read meanwhile,
        // so that time (taken from the last call, less `rto_max`) is not silence of the
        // peers' and their failure clocks do not count it. Otherwise every rank resumed after
        // `peer_timeout` would declare its peers failed at once, before they ran, whatever its
        // outstanding work (a retransmission, a GET waiting for its reply, a PUT for its
        // barrier), the failure deadline itself being the one found late.
        let rto_max = self.cfg.rto_max.0;
        let stalled = match self.poll_timeout() {
            Some(due) if now.0.saturating_sub(due.0) > rto_max => now
                .0
                .saturating_sub(self.last_now.0)
                .saturating_sub(rto_max),
            _ => 0,
        };
        self.commit_write();
        self.touch(now);
        self.resend_budget = self.cfg.max_resends_per_pass;
        for pid in 0..self.peers.len() as u32 {
            let Some(p) = self.peers[pid as usize].as_mut() else {
                continue;
            };
            if p.failed {
                continue;
            }
            if stalled > 0 {
                p.last_progress = (p.last_progress + Duration(stalled)).min(now);
            }
            // A few probes per timeout: the oldest expired segments are resent and the others
            // wait another (backed-off) timeout. When the timeout was spurious (ACKs only late, as
            // when a rank is descheduled or a burst is still being read), nothing else is
            // resent; when they were lost, the probe's ACK lets fast repair declare them lost
            // (it was transmitted after them), one round trip later.
            //
            // A segment transmitted after every one the peer has acknowledged on its channel
            // times out only an RTO after the peer's latest new acknowledgement there (RFC 6298, 5.3:
            // the timer restarts when new data is acknowledged): while those keep coming, the
            // segments ahead of it are still draining from a queue (a link slower than the
            // sender). Once one transmitted after it on its channel is acknowledged, it is not
            // waiting behind anything: its own timeout stands (fast repair may find it sooner,
            // on the data channel).
            // The RTO is today's, backed off by any timeout since, as RFC 6298's one timer
            // would be: after a timeout, the segments sent with it wait for the probes' ACKs.
            let mut expired = false;
            let mut probes = 0;
            // A peer that holds its receive side drops every probe until it is back: one per
            // timeout finds out when (its ACK then lets fast repair resend the rest).
            let max_probes = if p.peer_holds { 1 } else { TIMEOUT_PROBES };
            let rto = Duration(p.rtt.rto());
            self.rearm.clear();
            self.overflow.clear();
            while let Some(seq) = p.hotel.pop_expired(now) {
                let s = crate::proto::seq::Seq(seq as u16);
                let r = p.sw.get(s);
                let due = r.sent_at.max(p.acked_at[r.prio as usize]) + rto;
                if r.tx > p.acked_tx[r.prio as usize] && due > now {
                    self.rearm.push((s, due));
                    continue;
                }
                if probes == max_probes {
                    self.overflow.push(s);
                    continue;
                }
                probes += 1;
                p.declare_lost(s, false);
                expired = true;
            }
            if expired {
                p.rtt.backoff();
                let deadline = now + Duration(p.rtt.rto());
                self.rearm
                    .extend(self.overflow.iter().map(|&s| (s, deadline)));
            }
            for &(s, deadline) in &self.rearm {
                p.sw.get_mut(s).room = p.hotel.checkin(s.0 as u32, deadline);
            }
            release_lent(
                p,
                PeerId(pid),
                now,
                self.cfg.lent_hold,
                self.completed,
                &mut self.events,
                &mut self.spares,
                &mut self.stats,
            );
            let mut lost = expired;
            if p.rack_deadline.is_some_and(|d| d <= now) {
                lost |= detect_losses(p, now);
            }
            let ack_due = p.ack_owed && !p.ack_due && p.ack_deadline <= now;
            let dead = p.outstanding() && now >= p.last_progress + self.cfg.peer_timeout;
            if lost {
                self.ensure_resend(pid);
            }
            if ack_due {
                self.ack_now(pid);
            }
            if dead {
                self.abort_peer(pid, true);
            }
        }
    }

    /// When `handle_timeout` should next be called, if anything is pending (may be in the
    /// past: call it now).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        let hold = self.cfg.lent_hold;
        if self.resend_budget == 0 && !self.resend_list.is_empty() {
            at(self.last_now);
        }
        for p in self.peers.iter().flatten() {
            if p.failed {
                continue;
            }
            if let Some(d) = p.hotel.next_deadline() {
                at(d);
            }
            if let Some(d) = p.rack_deadline {
                at(d);
            }
            if let Some(&(_, d)) = p.copy_q.front() {
                at(d);
            }
            if let (Some(hold), Some(&(_, d))) = (hold, p.lent_q.front()) {
                at(d.max(p.last_progress + hold));
            }
            if p.ack_owed && !p.ack_due {
                at(p.ack_deadline);
            }
            if p.outstanding() {
                at(p.last_progress + self.cfg.peer_timeout);
            }
        }
        t
    }
}

/// Lent sends copied (retransmissions read the copy) and reported complete before their ACK,
/// so the lender may reuse its memory: at once those in `copy_q`, and those in `lent_q` when
/// still unacknowledged `Config::lent_hold` after they went out whole, from a peer that
/// acknowledged nothing for as long (it is away from its progress loop). Either waits until
/// the edge has completed every datagram that read the send's bytes in place. The op stays
/// until it is acknowledged.
#[allow(clippy::too_many_arguments)]
fn release_lent(
    p: &mut Peer,
    peer: PeerId,
    now: Instant,
    hold: Option<Duration>,
    completed: [u64; 2],
    events: &mut VecDeque<Event>,
    spares: &mut Spares,
    stats: &mut Stats,
) {
    let mut release = |q: &mut VecDeque<(u32, Instant)>, ops: &mut OpSlab| loop {
        prune(q, ops);
        let Some(&(idx, at)) = q.front() else {
            break;
        };
        if at > now {
            break;
        }
        let op = ops
            .get_mut(idx)
            .expect("prune left a waiting send in front");
        if op.tx_mark[0] > completed[0] || op.tx_mark[1] > completed[1] {
            // A provider may still be reading the lent bytes (completions come in order:
            // nothing behind this one has completed either).
            break;
        }
        q.pop_front();
        if op.data.copy_lent_into(spares.with_capacity(op.data.len())) {
            op.reported = true;
            stats.lent_released += 1;
            events.push_back(Event::SendComplete {
                peer,
                cookie: op.cookie,
                result: Ok(()),
            });
        }
    };
    release(&mut p.copy_q, &mut p.ops);
    let Some(hold) = hold else {
        return;
    };
    if now < p.last_progress + hold {
        // Still acknowledging (across hosts a whole fragment's ACKs can queue behind a long
        // transmit pass): copying would only cost.
        return;
    }
    release(&mut p.lent_q, &mut p.ops);
}
