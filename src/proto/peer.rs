//! Everything the engine keeps about one remote module.

use std::collections::VecDeque;

use super::api::{Cookie, Instant, PeerInfo};
use super::chunk::Reassembler;
use super::fragment::OpSlab;
use super::hotel::Hotel;
use super::idmap::{KeyedIdMap, KeyedIds};
use super::rtt::Rtt;
use super::seq::Seq;
use super::window::{RecvWindow, SegState, SendWindow};

/// A GET issued by this side, waiting for its reply.
#[derive(Clone, Debug)]
pub struct PendingGet {
    pub local_region: u64,
    pub local_offset: u64,
    pub len: u64,
    pub got: u64,
    pub cookie: Cookie,
}

/// A PUT fully acknowledged by an ACK whose `snd_next` had not yet been reached by our
/// receive window: a refusal of it may still be on its way.
#[derive(Clone, Debug)]
pub struct HeldPut {
    /// Extended sequence number (our receive direction) the window must reach.
    pub barrier: u32,
    pub id: u32,
    pub cookie: Cookie,
}

/// Duplicates a receiver remembers for its D-SACK reports; more arriving before the ACKs leave
/// go unreported (the sender then only counts fewer of its needless resends).
pub const MAX_DSACKS: usize = 64;

/// Resends a sender remembers for the peer's D-SACK reports. The send window's own records
/// are too short-lived: across hosts half the reports came back after a window's worth of new
/// segments had taken their slots.
pub const RESENT_MEMORY: usize = 512;

#[derive(Debug)]
pub struct Peer {
    pub info: PeerInfo,
    pub failed: bool,
    /// Effective data-channel datagram size towards this peer.
    pub mtu: usize,
    /// Priority-channel datagram size towards this peer: ours, but never above `mtu`, since a
    /// peer whose data datagrams are smaller has priority buffers no larger than them.
    pub prio_mtu: usize,

    // --- send direction
    pub sw: SendWindow,
    pub hotel: Hotel,
    pub rtt: Rtt,
    pub ops: OpSlab,
    /// Ops with segments still to cut, per channel.
    pub prio_q: VecDeque<u32>,
    pub data_q: VecDeque<u32>,
    /// Segments declared lost, oldest first.
    pub resend_q: VecDeque<u16>,
    pub tx_count: u64,
    /// The highest transmission number received from the peer on its data channel (wrapping
    /// order): echoed in our ACKs, so that the peer tells which of its transmissions of a
    /// segment we acknowledge.
    pub tx_seen: u32,
    /// Latest transmission counter known delivered (RACK-style loss detection).
    pub rack_tx: u64,
    /// Round trip of the segment that set `rack_tx` (includes its queueing in the NIC).
    pub rack_rtt: u64,
    pub rack_deadline: Option<Instant>,
    /// Reordering allowance in quarters of the minimum RTT (adaptive, >= 1).
    pub reo_mult: u32,
    /// Fast repairs since the allowance last changed that were not spurious.
    pub good_repairs: u32,
    /// When a duplicate report last widened the allowance (at most once per round trip).
    pub reo_widened_at: Instant,
    /// The latest resends (16-bit sequence number, declared lost by the fast path), oldest
    /// first, at most `RESENT_MEMORY`: what a duplicate report is matched against.
    pub resent: VecDeque<(u16, bool)>,
    /// Low 16 bits of duplicates received from the peer, each to be named by an ACK of its
    /// own (D-SACK), oldest first, at most `MAX_DSACKS`.
    pub dsacks: VecDeque<u16>,
    /// Last acknowledgement progress (or the start of outstanding work, or a held ACK that
    /// counted: `progress_tx`, docs/wire.md §5b).
    pub last_progress: Instant,
    /// `tx_count` when `last_progress` was last set by the peer or by new work: a held ACK
    /// proves the peer alive only if it echoes a transmission above this one (sent since),
    /// so a replayed one cannot keep a dead peer alive (it counts once at most).
    pub progress_tx: u64,
    /// The peer's latest acknowledgement was a held ACK that counted (docs/wire.md §5b): it
    /// drops what we send until it is back, so a timeout sends one probe, not
    /// `TIMEOUT_PROBES` (a replayed held ACK does not count, so it cannot slow repairs so).
    pub peer_holds: bool,
    /// Last time the peer acknowledged a segment it had not acknowledged before, by the
    /// channel that segment went on (`[data, priority]`, like `acked_tx`; GET reply data and
    /// new work do not count, unlike for `last_progress`). A segment that may still wait in a
    /// queue behind the ones being acknowledged times out only an RTO after the latest on its
    /// channel: acknowledged tiny messages say nothing of a data queue (they re-armed a lost
    /// data segment until the window filled).
    pub acked_at: [Instant; 2],
    /// The latest transmission the peer has acknowledged, by the channel it went on
    /// (`[data, priority]`, indexed by `SegRec::prio`): only a segment transmitted after it on
    /// the same channel can still be queued behind it (a priority datagram may overtake data).
    pub acked_tx: [u64; 2],
    pub next_msg_id: u32,
    pub next_request: u32,
    /// Put ids in flight -> op index (for refusals).
    pub puts: KeyedIdMap<u32, u32>,
    pub gets: KeyedIdMap<u32, PendingGet>,
    pub held_puts: Vec<HeldPut>,
    /// Lent sends sent whole, in the order their `Op::release_at` falls due: (slab index,
    /// release_at). Those shorter than `Config::lent_copy_below` are in `copy_q`, due at once;
    /// the others here, due after `Config::lent_hold`.
    pub lent_q: VecDeque<(u32, Instant)>,
    pub copy_q: VecDeque<(u32, Instant)>,

    // --- receive direction
    pub rw: RecvWindow,
    /// An acknowledgement is owed (something arrived since the last ACK went out).
    pub ack_owed: bool,
    /// The engine holds its receive side and dropped a new segment of this peer's: the next
    /// standalone ACK says so (`wire::FLAG_HELD`).
    pub held_ack: bool,
    pub ack_deadline: Instant,
    /// The owed ACK must go out now (on the engine's ACK list).
    pub ack_due: bool,
    pub reasm: Reassembler,
    /// GET requests received, waiting for `answer_get`: request -> length.
    pub get_requests: KeyedIdMap<u32, u64>,
    pub last_refused_put: Option<u32>,
    /// Put refusals queued without a sequence number yet: no acknowledgement information
    /// leaves for this peer until they have one (see `wire::AckInfo::snd_next`).
    pub refusals_unsent: u32,
    /// The furthest `snd_next` of the peer's ACKs (extended, our receive direction). A PUT
    /// completes only once the window has passed it, not just the completing ACK's: an older
    /// ACK can complete a PUT after a newer one counted in a refusal of one of its segments
    /// (a piggy-backed ACK names fewer segments than a standalone one).
    pub ack_barrier: u32,

    // --- membership of the engine's work lists
    pub in_prio_ready: bool,
    pub in_data_ready: bool,
    pub in_resend_list: bool,
    pub in_ack_list: bool,
}

/// Drops the entries at the front of `q` whose send was acknowledged or released since.
pub(crate) fn prune(q: &mut VecDeque<(u32, Instant)>, ops: &OpSlab) {
    while let Some(&(idx, at)) = q.front() {
        let waiting = ops
            .get(idx)
            .is_some_and(|op| op.release_at == Some(at) && !op.reported);
        if waiting {
            break;
        }
        q.pop_front();
    }
}

/// Fewest segments a peer's receive capacity may shrink the send window to (below this,
/// fast repair has too little in flight to work with).
const MIN_SEND_WINDOW: u16 = 16;

/// Largest datagram on the priority channel to a peer: ours, no larger than the pair's data
/// datagrams (`mtu`) nor than the peer's priority datagrams (`remote`, 0 = not announced), which
/// its receive buffers are sized for; the protocol's minimum is the floor, as for `mtu`.
fn priority_mtu(own: usize, mtu: usize, remote: usize) -> usize {
    let remote = if remote == 0 { own } else { remote };
    own.min(mtu)
        .min(remote)
        .max(super::config::MIN_PRIORITY_MTU)
}

/// The send window towards a peer that can absorb `remote_rx_window` datagrams (0 = no limit).
fn send_window(window: u16, remote_rx_window: u32) -> u16 {
    if remote_rx_window == 0 {
        return window;
    }
    let rx = remote_rx_window.min(u16::MAX as u32) as u16;
    window.min(rx.max(MIN_SEND_WINDOW))
}

impl Peer {
    /// A data-channel transmission of the peer's arrived (0: not numbered, priority channel).
    pub fn saw_tx(&mut self, tx: u32) {
        self.tx_seen = latest_tx(self.tx_seen, tx);
    }

    pub fn new(now: Instant, info: PeerInfo, mtu: usize, cfg: &super::api::Config) -> Peer {
        let window = send_window(cfg.window, info.remote_rx_window);
        let prio_mtu = priority_mtu(cfg.priority_mtu, mtu, info.remote_priority_mtu);
        // Sized for what can be in flight to this peer (its receive window may be far below
        // ours): with a thousand peers, rooms and queue slots for 4096 segments each were
        // about 130 MiB per module. The hotel builds rooms beyond these if ever needed.
        let cap = (window as usize).next_power_of_two();
        Peer {
            rw: RecvWindow::new(info.remote_isn),
            // Where `rw` starts: nothing before it is owed.
            ack_barrier: info.remote_isn as u32,
            info,
            failed: false,
            mtu,
            prio_mtu,
            sw: SendWindow::new(cfg.isn, window),
            hotel: Hotel::new(cap),
            rtt: Rtt::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            ops: OpSlab::default(),
            prio_q: VecDeque::new(),
            data_q: VecDeque::new(),
            resend_q: VecDeque::with_capacity(cap),
            tx_count: 0,
            tx_seen: 0,
            rack_tx: 0,
            rack_rtt: 0,
            rack_deadline: None,
            reo_mult: 1,
            good_repairs: 0,
            reo_widened_at: Instant(0),
            resent: VecDeque::new(),
            dsacks: VecDeque::new(),
            last_progress: now,
            progress_tx: 0,
            peer_holds: false,
            acked_at: [now; 2],
            acked_tx: [0; 2],
            next_msg_id: 1,
            next_request: 1,
            puts: KeyedIdMap::with_hasher(KeyedIds(cfg.hash_key)),
            gets: KeyedIdMap::with_hasher(KeyedIds(cfg.hash_key)),
            held_puts: Vec::new(),
            lent_q: VecDeque::new(),
            copy_q: VecDeque::new(),
            ack_owed: false,
            held_ack: false,
            ack_deadline: Instant(0),
            ack_due: false,
            reasm: Reassembler::keyed(cfg.hash_key, super::chunk::open_limit(cfg.data_mtu)),
            get_requests: KeyedIdMap::with_hasher(KeyedIds(cfg.hash_key)),
            last_refused_put: None,
            refusals_unsent: 0,
            in_prio_ready: false,
            in_data_ready: false,
            in_resend_list: false,
            in_ack_list: false,
        }
    }

    /// Drops the entries at the front of `lent_q` and `copy_q` whose send was acknowledged
    /// or released since, so each front is a send still waiting. Called when a lent send
    /// finishes: one acknowledged out of order behind a waiting one leaves when that one
    /// does, and a stream the peer keeps acknowledging never piles entries up.
    pub fn prune_lent(&mut self) {
        prune(&mut self.lent_q, &self.ops);
        prune(&mut self.copy_q, &self.ops);
    }

    /// The peer-failure clock starts again at `now`: the peer made progress (or new work
    /// started). A held ACK must echo a transmission sent after this to count in turn, and
    /// until one does the peer is not taken to hold (`peer_holds`).
    pub fn progressed(&mut self, now: Instant) {
        self.last_progress = now;
        self.progress_tx = self.tx_count;
        self.peer_holds = false;
    }

    pub fn alloc_msg_id(&mut self) -> u32 {
        let id = self.next_msg_id;
        self.next_msg_id = self.next_msg_id.wrapping_add(1).max(1);
        id
    }

    pub fn alloc_request(&mut self) -> u32 {
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        id
    }

    /// Work is outstanding: something queued or unacknowledged, a PUT held at its ACK
    /// barrier, or a GET waiting for its reply (so a target that dies after acknowledging a
    /// request is still detected).
    pub fn outstanding(&self) -> bool {
        self.ops.live() > 0 || !self.held_puts.is_empty() || !self.gets.is_empty()
    }

    /// Segment `s` (out of the hotel) is to be resent: by fast repair, or else by timeout.
    pub fn declare_lost(&mut self, s: Seq, fast: bool) {
        let r = self.sw.get_mut(s);
        r.state = SegState::Lost;
        r.fast = fast;
        self.resend_q.push_back(s.0);
    }
}

/// The later of two transmission numbers in wrapping order; 0 names none.
fn latest_tx(seen: u32, tx: u32) -> u32 {
    if tx != 0 && (tx.wrapping_sub(seen) as i32) > 0 {
        tx
    } else {
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::api::Config;

    #[test]
    fn timers_and_resend_slots_are_sized_by_what_the_peer_absorbs() {
        let cfg = Config::default();
        let info = |remote_rx_window| PeerInfo {
            remote_rx_window,
            ..cfg.peer_info()
        };
        let p = Peer::new(Instant(0), info(48), 1472, &cfg);
        assert_eq!(p.hotel.capacity(), 64);
        assert!(p.resend_q.capacity() < 128, "{}", p.resend_q.capacity());
        let p = Peer::new(Instant(0), info(0), 1472, &cfg);
        assert_eq!(
            p.hotel.capacity(),
            cfg.window as usize,
            "no limit: the whole window"
        );
    }

    #[test]
    fn the_latest_transmission_in_wrapping_order() {
        assert_eq!(latest_tx(0, 5), 5);
        assert_eq!(latest_tx(5, 0), 5, "0 is not numbered");
        assert_eq!(latest_tx(9, 7), 9, "an earlier one arriving late");
        assert_eq!(latest_tx(u32::MAX - 1, 2), 2, "across the wrap");
        assert_eq!(latest_tx(2, u32::MAX - 1), 2, "before the wrap");
    }
}
