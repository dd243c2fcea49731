//! The engine: per-peer state in a slot vector, engine-wide work lists, events and credits.
//! The methods are split by direction: `submit` (operations in), `rx` (datagrams in),
//! `tx` (datagrams out), `timer` (time passing, peer failure).

mod ack;
mod rx;
mod submit;
mod timer;
mod tx;

use std::collections::VecDeque;

use super::api::*;
use super::fragment::{Op, OpKind};
use super::idmap::IdMap;
use super::peer::Peer;
use super::spare::Spares;

/// The `Write` the last `handle_datagram` returned, kept so `refuse_write` can act on it.
#[derive(Debug)]
enum LastWrite {
    Put {
        peer: u32,
        id: u32,
    },
    Get {
        peer: u32,
        request: u32,
        cookie: Cookie,
        /// The GET's completion, held back until the edge had its chance to refuse.
        completion: Option<Event>,
    },
}

/// The reliability engine of one BTL module.
#[derive(Debug)]
pub struct Engine {
    cfg: Config,
    peers: Vec<Option<Peer>>,
    by_src: IdMap<u64, u32>,
    events: VecDeque<Event>,
    stats: Stats,
    /// Credits left, indexed by `Channel as usize`.
    credits: [u32; 2],
    /// Datagrams handed to the edge, and reported complete by it, per channel: a send read
    /// in place is released only when every datagram posted up to its last one has completed
    /// (`Op::tx_mark`), so no provider still reads the lender's memory.
    posted: [u64; 2],
    completed: [u64; 2],
    /// Peers whose standalone ACK is due.
    ack_list: VecDeque<u32>,
    /// Peers with segments to cut, per channel (round robin: one segment per turn on the
    /// priority channel, up to `Config::data_turn` on the data channel).
    prio_ready: VecDeque<u32>,
    data_ready: VecDeque<u32>,
    /// The peer whose data segment went out last, and the segments of its current turn so far
    /// (0 once the turn is used up, or while it is the only peer with data).
    data_turn: (u32, u32),
    /// Peers with segments declared lost.
    resend_list: VecDeque<u32>,
    /// Retransmissions still allowed in this pass (refilled by `handle_timeout`).
    resend_budget: usize,
    last_now: Instant,
    last_write: Option<LastWrite>,
    /// Buffers of finished sends and deliveries, reused for new ones.
    spares: Spares,
    /// Segments whose timer `handle_timeout` sets again, with the new deadline (its scratch).
    rearm: Vec<(super::seq::Seq, Instant)>,
    /// Expired segments beyond a timeout's probes: their new deadline is known only once the
    /// timeout has backed the RTO off (`handle_timeout`'s scratch).
    overflow: Vec<super::seq::Seq>,
    /// Receive buffers kept for reassembly now (at most `Config::max_held`).
    held: u32,
    /// The receive side is held (`hold_receive`): new segments are dropped unacknowledged.
    rx_held: bool,
}

impl Engine {
    pub fn new(cfg: Config) -> Result<Engine, ConfigError> {
        super::config::validate(&cfg)?;
        Ok(Engine {
            credits: [cfg.priority_credits, cfg.data_credits],
            posted: [0; 2],
            completed: [0; 2],
            resend_budget: cfg.max_resends_per_pass,
            cfg,
            peers: Vec::new(),
            by_src: IdMap::default(),
            events: VecDeque::new(),
            stats: Stats::default(),
            ack_list: VecDeque::new(),
            prio_ready: VecDeque::new(),
            data_ready: VecDeque::new(),
            data_turn: (u32::MAX, 0),
            resend_list: VecDeque::new(),
            last_now: Instant(0),
            last_write: None,
            spares: Spares::default(),
            rearm: Vec::new(),
            overflow: Vec::new(),
            held: 0,
            rx_held: false,
        })
    }

    /// Holds (`true`) or resumes (`false`) the receive side. While held, a sequenced segment
    /// the window would newly accept is dropped: nothing delivered, nothing acknowledged, and
    /// its sender told with a standalone ACK flagged `HELD` (docs/wire.md §5b), which keeps
    /// it from declaring us failed while its retransmissions back off as after any timeout.
    /// For an edge whose application is away and has buffered all it may of what arrived:
    /// the senders' windows then stay closed instead of everything they send piling up
    /// here. Once resumed, the next retransmission is taken, within `Config::rto_max`.
    /// ACKs, duplicates and everything this side sends go on as ever.
    pub fn hold_receive(&mut self, held: bool) {
        self.rx_held = held;
    }

    /// Whether the receive side is held (`hold_receive`).
    pub fn receive_held(&self) -> bool {
        self.rx_held
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// An empty buffer with room for `cap` bytes, reused from a finished fragment when one is
    /// big enough (the edge appends a fragment's pieces to it).
    pub fn spare_buffer(&mut self, cap: usize) -> Vec<u8> {
        self.spares.with_capacity(cap)
    }

    /// A buffer of exactly `len` bytes whose contents are unspecified, for an edge that
    /// overwrites them all: a spare already that long is not zeroed again.
    pub fn filled_buffer(&mut self, len: usize) -> Vec<u8> {
        self.spares.filled(len)
    }

    /// Gives back a buffer the edge is done with (a delivered fragment, a freed descriptor's).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.spares.give(buf);
    }

    /// Gives back the list of an `Event::DeliverPieces` once the edge has taken its pieces out.
    pub fn recycle_pieces(&mut self, pieces: Vec<Piece>) {
        self.spares.give_pieces(pieces);
    }

    /// Largest payload of a single-datagram fragment on the data channel.
    pub fn max_frag_payload(&self) -> usize {
        self.cfg.data_mtu - super::wire::BASE_LEN
    }

    /// Largest payload that goes on the priority channel as a tiny message.
    pub fn max_tiny_payload(&self) -> usize {
        self.cfg.priority_mtu - super::wire::BASE_LEN
    }

    /// Registers a remote module. Its data-channel datagrams are sized
    /// `min(data_mtu, remote_data_mtu)`, and its priority ones no larger: its receive buffers
    /// are no larger than its datagrams (raising the size to our `priority_mtu`, as before,
    /// had every datagram to a peer with smaller ones dropped as oversized). Datagrams are
    /// matched to peers by `remote_id`; registering a second peer with the same id redirects
    /// them to it.
    /// A removed peer's id is never given to another: what callers keep under an id (a datagram
    /// waiting for a full socket, memory registered for that peer) must not pass to the next
    /// peer added. A slot costs a few hundred bytes, and peers come and go only with dynamic
    /// processes.
    pub fn add_peer(&mut self, now: Instant, info: PeerInfo) -> PeerId {
        self.commit_write();
        self.touch(now);
        // (A peer's own engine takes no data MTU below the minimum; its modex entry is only
        // checked against a lower bound, so the minimum is the floor here too.)
        let mtu = self
            .cfg
            .data_mtu
            .min(info.remote_data_mtu)
            .max(super::config::MIN_DATA_MTU);
        let remote_id = info.remote_id;
        let peer = Peer::new(now, info, mtu, &self.cfg);
        self.peers.push(Some(peer));
        let idx = (self.peers.len() - 1) as u32;
        self.by_src.insert(remote_id, idx);
        PeerId(idx)
    }

    /// Forget a peer: anything queued or unacknowledged completes with `PeerUnreachable`.
    pub fn remove_peer(&mut self, now: Instant, peer: PeerId) {
        self.commit_write();
        self.touch(now);
        if self.peer(peer).is_none() {
            return;
        }
        self.abort_peer(peer.0, false);
        if let Some(p) = self.peers[peer.0 as usize].take() {
            if self.by_src.get(&p.info.remote_id) == Some(&peer.0) {
                self.by_src.remove(&p.info.remote_id);
            }
        }
        for l in [
            &mut self.ack_list,
            &mut self.prio_ready,
            &mut self.data_ready,
            &mut self.resend_list,
        ] {
            l.retain(|&x| x != peer.0);
        }
    }

    /// True when nothing is queued or unacknowledged for `peer` (unknown peers are idle).
    pub fn is_idle(&self, peer: PeerId) -> bool {
        self.peer(peer).is_none_or(|p| !p.outstanding())
    }

    /// Entries kept for lent sends to `peer` waiting to be released (`Config::lent_hold`,
    /// `Config::lent_copy_below`); each is a send still unacknowledged, or one acknowledged
    /// out of order behind such a send.
    pub fn lent_waiting(&self, peer: PeerId) -> usize {
        self.peer(peer)
            .map_or(0, |p| p.lent_q.len() + p.copy_q.len())
    }

    /// The NIC finished sending one datagram on `channel`: returns one credit.
    pub fn handle_send_complete(&mut self, channel: Channel) {
        let max = match channel {
            Channel::Priority => self.cfg.priority_credits,
            Channel::Data => self.cfg.data_credits,
        };
        let c = &mut self.credits[channel as usize];
        *c = (*c + 1).min(max);
        let ch = channel as usize;
        self.completed[ch] = (self.completed[ch] + 1).min(self.posted[ch]);
    }

    #[inline]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.commit_write();
        self.events.pop_front()
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Credits currently available on `channel`.
    pub fn credits(&self, channel: Channel) -> u32 {
        self.credits[channel as usize]
    }

    fn peer(&self, peer: PeerId) -> Option<&Peer> {
        self.peers.get(peer.0 as usize).and_then(|p| p.as_ref())
    }

    fn touch(&mut self, now: Instant) {
        if now > self.last_now {
            self.last_now = now;
        }
    }

    /// A pending GET completion held for `refuse_write` is released by any later call.
    fn commit_write(&mut self) {
        if let Some(LastWrite::Get {
            completion: Some(ev),
            ..
        }) = self.last_write.take()
        {
            self.events.push_back(ev);
        }
    }

    /// Puts `pid` on the ready lists it belongs on.
    fn ensure_ready(&mut self, pid: u32) {
        let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) else {
            return;
        };
        if p.failed || !p.sw.is_open() {
            return;
        }
        if !p.prio_q.is_empty() && !p.in_prio_ready {
            p.in_prio_ready = true;
            self.prio_ready.push_back(pid);
        }
        if !p.data_q.is_empty() && !p.in_data_ready {
            p.in_data_ready = true;
            self.data_ready.push_back(pid);
        }
    }

    fn ensure_resend(&mut self, pid: u32) {
        if let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) {
            if !p.resend_q.is_empty() && !p.in_resend_list {
                p.in_resend_list = true;
                self.resend_list.push_back(pid);
            }
        }
    }

    /// The ACK of a fragment whose sender waits for it: due from the next pass on, not in this
    /// one, so a reply the receiving rank sends right after the delivery (a ping-pong) still
    /// carries it; a rank that goes on waiting (a Sendrecv) sends it alone a pass later.
    fn ack_next_pass(&mut self, pid: u32, now: Instant) {
        if let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) {
            let soon = now + Duration(1);
            if !p.ack_owed || p.ack_deadline > soon {
                p.ack_deadline = soon;
            }
            p.ack_owed = true;
        }
    }

    /// An ACK to `peer` on the next transmit, owed or not: a process that leaves sends its last
    /// word at once (a delayed one would never leave, and the peer would resend what it has to
    /// a process that is gone, then declare it failed), and again in case one was lost.
    pub fn acknowledge_now(&mut self, peer: PeerId) {
        self.ack_now(peer.0);
    }

    fn ack_now(&mut self, pid: u32) {
        if let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) {
            p.ack_owed = true;
            p.ack_due = true;
            if !p.in_ack_list {
                p.in_ack_list = true;
                self.ack_list.push_back(pid);
            }
        }
    }

    /// Completes everything of a peer with `PeerUnreachable`; `report` also marks it failed
    /// and emits `PeerFailed` (once).
    fn abort_peer(&mut self, pid: u32, report: bool) {
        let Some(p) = self.peers.get_mut(pid as usize).and_then(|p| p.as_mut()) else {
            return;
        };
        let peer = PeerId(pid);
        if report {
            if p.failed {
                return;
            }
            p.failed = true;
            self.stats.peers_failed += 1;
            self.events.push_back(Event::PeerFailed {
                peer,
                remote_id: p.info.remote_id,
            });
        }
        for op in p.ops.drain_all() {
            finish_op(
                peer,
                op,
                Err(Failure::PeerUnreachable),
                &mut self.events,
                &mut self.spares,
            );
        }
        let mut gets: Vec<_> = p.gets.drain().collect();
        gets.sort_by_key(|g| g.0);
        for (_, g) in gets {
            self.events.push_back(Event::GetComplete {
                peer,
                cookie: g.cookie,
                result: Err(Failure::PeerUnreachable),
            });
        }
        for h in p.held_puts.drain(..) {
            self.events.push_back(Event::PutComplete {
                peer,
                cookie: h.cookie,
                result: Err(Failure::PeerUnreachable),
            });
        }
        p.refusals_unsent = 0;
        p.puts.clear();
        p.prio_q.clear();
        p.data_q.clear();
        p.resend_q.clear();
        p.hotel.clear();
        p.sw.reset();
        p.rack_deadline = None;
        p.ack_owed = false;
        p.ack_due = false;
        let released = p.reasm.clear();
        p.get_requests.clear();
        if !released.is_empty() {
            self.held -= released.len() as u32;
            self.events.push_back(Event::Release { handles: released });
        }
        if matches!(&self.last_write, Some(LastWrite::Put { peer, .. } | LastWrite::Get { peer, .. }) if *peer == pid)
        {
            self.last_write = None;
        }
    }
}

// The edges keep the engine inside a lock shared by threads.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Engine>();
};

/// Reports an op's completion (if its kind reports one); its bytes become a spare.
#[inline]
fn finish_op(
    peer: PeerId,
    op: Op,
    result: Result<(), Failure>,
    events: &mut VecDeque<Event>,
    spares: &mut Spares,
) {
    if let Some(buf) = op.data.into_buffer() {
        spares.give(buf);
    }
    match op.kind {
        OpKind::Send { .. } if !op.reported => events.push_back(Event::SendComplete {
            peer,
            cookie: op.cookie,
            result,
        }),
        OpKind::Put { .. } if !op.reported => events.push_back(Event::PutComplete {
            peer,
            cookie: op.cookie,
            result,
        }),
        _ => {}
    }
}
