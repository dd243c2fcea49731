//! Public surface of the protocol core (the contract the edges code against).
//!
//! Signatures and type names are fixed; `Engine` itself lives in `engine/` (its methods are
//! documented there) and is re-exported from `crate::proto`.

/// Monotonic time in nanoseconds since an origin chosen by the caller.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub u64);

impl Duration {
    pub const fn from_micros(us: u64) -> Self {
        Duration(us * 1_000)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * 1_000_000)
    }
}

impl core::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

/// Index of a peer inside one `Engine` (dense, reused after `remove_peer`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(pub u32);

/// Opaque token from the edge (descriptor pointer, request id); returned in completion events.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cookie(pub u64);

/// The two channels of a module. Each is its own datagram endpoint with its own MTU and credits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Small MTU: ACKs and tiny messages.
    Priority = 0,
    /// Everything else, and every retransmission.
    Data = 1,
}

/// Engine configuration. Validated by `Engine::new`; invalid values give `ConfigError`.
#[derive(Clone, Debug)]
pub struct Config {
    /// Largest datagram (header + payload) on the data channel, bytes.
    pub data_mtu: usize,
    /// Largest datagram on the priority channel, bytes (default 768).
    pub priority_mtu: usize,
    /// Send window in segments, 1..=4096 (default 4096).
    pub window: u16,
    /// Delay before a standalone ACK when nothing to piggy-back on (default 30 µs).
    pub ack_delay: Duration,
    /// Initial retransmit timeout before any RTT sample (default 5 ms, the C original's).
    pub rto_initial: Duration,
    /// Floor of the adaptive retransmit timeout.
    pub rto_min: Duration,
    /// Cap of the adaptive retransmit timeout (backoff stops here).
    pub rto_max: Duration,
    /// Upper bound on retransmissions emitted per `handle_timeout`/progress pass (default 16).
    pub max_resends_per_pass: usize,
    /// A peer that acknowledges nothing for this long while data is outstanding is failed.
    pub peer_timeout: Duration,
    /// Send credits of each channel (datagrams in flight in the NIC before a send completion).
    pub data_credits: u32,
    pub priority_credits: u32,
    /// This module's own identity as written in the `src` field of every datagram it sends.
    pub local_id: u64,
    /// This module's job key: datagrams whose key differs are dropped (strangers, stale jobs).
    pub local_key: u64,
    /// Initial sequence number of this module's send direction.
    pub isn: u16,
    /// Secret of the per-peer id maps (`KeyedIdMap`: reassembly and GET requests, whose ids
    /// datagrams choose, and this side's PUT and GET ids): drawn at random by the edge and
    /// never sent, so a peer cannot choose ids that crowd one bucket. 0 (the default) is a
    /// secret too, for tests, but a known one.
    pub hash_key: u64,
    /// Data-channel datagrams this module can absorb while it is not polling (what its
    /// receive queue and socket buffer hold); 0 = no limit. Peers keep no more than this in
    /// flight towards it, because what arrives beyond it is dropped by the kernel.
    pub rx_window: u32,
    /// Receive buffers the core may keep (`Engine::handle_datagram_held`) for fragments being
    /// reassembled, over all peers; 0 = reassembly always copies.
    pub max_held: u32,
    /// Fragments of at least this many bytes are acknowledged from the pass after the one
    /// that made them whole: their sender reads them in place and completes them only on the
    /// ACK (a blocking send waits for it). Smaller ones were copied by their sender, and
    /// their ACK waits up to `ack_delay` for a reply to ride on.
    pub prompt_ack_from: usize,
    /// A fragment read in place (`Payload::Lent`) sent whole at least this long ago, to a peer
    /// that has acknowledged nothing for as long, is copied, and `SendComplete` reports it done
    /// (the copy serves any retransmission). A peer that computes outside its MPI calls
    /// acknowledges only when it returns to one, so without this a blocking send to it waits as
    /// long; a peer that keeps acknowledging will get to this fragment too, so nothing is
    /// copied while it does. `None`: wait for the ACK however long it takes.
    pub lent_hold: Option<Duration>,
    /// A fragment read in place that is shorter than this is copied, and `SendComplete`
    /// reports it done, on the first pass after its last datagram left (once the edge has
    /// reported every datagram posted up to then complete, so nothing still reads the
    /// lender's memory): a blocking send does not wait a round trip for the ACK, and the
    /// copy is made while the datagrams are on their way. Longer ones wait for their ACK or
    /// `lent_hold`: copying them costs more than a blocking sender gains. 0 = never.
    pub lent_copy_below: usize,
    /// Data segments one peer may send in a row while other peers have data ready too; 1 =
    /// round robin per segment. An edge that sends a run of datagrams to one peer with one
    /// system call sets it to what such a send carries: served one segment at a time, two
    /// peers with data alternate and every datagram leaves in a send of its own.
    pub data_turn: u32,
}

/// `Config::prompt_ack_from` by default: the Open MPI edge's default copy threshold
/// (`btl_usnic_pack_lazy_threshold`) is this same value, so the two agree unless set.
pub const DEFAULT_PROMPT_ACK_FROM: usize = 16384;

/// `Config::lent_hold` by default: longer than a peer inside MPI goes without acknowledging
/// anything (a sender's own long transmit pass included), far shorter than a compute phase.
pub const DEFAULT_LENT_HOLD: Duration = Duration::from_micros(1000);

/// `Config::lent_copy_below` by default: an `MPI_Send` loop of 16-32 KiB waited a round trip
/// per message (about 2x btl tcp's loop, which completes into the socket buffer), while
/// bidirectional streams of 256 KiB-1 MiB lost 15-17 % to copying every fragment; 64 KiB
/// fragments, the first size of the bandwidth targets, are left alone (README).
pub const DEFAULT_LENT_COPY_BELOW: usize = 65536;

impl Default for Config {
    fn default() -> Self {
        Config {
            data_mtu: 1472,
            priority_mtu: 768,
            window: 4096,
            ack_delay: Duration::from_micros(30),
            rto_initial: Duration::from_millis(5),
            rto_min: Duration::from_micros(500),
            rto_max: Duration::from_millis(200),
            max_resends_per_pass: 16,
            peer_timeout: Duration::from_millis(30_000),
            data_credits: 1024,
            priority_credits: 127,
            local_id: 0,
            local_key: 0,
            isn: 0,
            hash_key: 0,
            rx_window: 0,
            max_held: 0,
            prompt_ack_from: DEFAULT_PROMPT_ACK_FROM,
            lent_hold: Some(DEFAULT_LENT_HOLD),
            lent_copy_below: DEFAULT_LENT_COPY_BELOW,
            data_turn: 1,
        }
    }
}

impl Config {
    /// What a peer must learn (through the modex) about an engine configured with `self`.
    pub fn peer_info(&self) -> PeerInfo {
        PeerInfo {
            remote_id: self.local_id,
            remote_key: self.local_key,
            remote_isn: self.isn,
            remote_data_mtu: self.data_mtu,
            remote_rx_window: self.rx_window,
            remote_priority_mtu: self.priority_mtu,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the core needs to know about a remote module (from the modex).
#[derive(Clone, Debug)]
pub struct PeerInfo {
    /// The peer's `local_id` (how its datagrams identify themselves).
    pub remote_id: u64,
    /// The peer's `local_key` (written into every datagram sent to it).
    pub remote_key: u64,
    /// The peer's `isn`.
    pub remote_isn: u16,
    /// Largest datagram the peer accepts on its data channel (min'ed with ours).
    pub remote_data_mtu: usize,
    /// The peer's `rx_window` (0 = no limit).
    pub remote_rx_window: u32,
    /// Largest datagram the peer accepts on its priority channel (min'ed with ours; 0 = not
    /// announced, ours). Its receive buffers there are this size: a tiny message or ACK sized
    /// to a larger `btl_usnic_priority_limit` of ours is dropped there as oversized.
    pub remote_priority_mtu: usize,
}

/// Why a submission was refused. Nothing is queued when one is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    UnknownPeer,
    PeerFailed,
    /// Too large for the wire format (fragment sizes are u32).
    TooLarge,
}

/// Why an operation completed without success.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The peer stopped acknowledging (peer-failure timeout) or was removed.
    PeerUnreachable,
    /// The target refused a PUT/GET (region unknown or out of bounds).
    RemoteRefused,
}

/// Outputs other than datagrams. Drained by the edge after every call into the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A whole fragment arrived (a reassembled chunked fragment; single-datagram fragments
    /// are returned in place by `handle_datagram`).
    Deliver {
        peer: PeerId,
        tag: u8,
        data: Vec<u8>,
    },
    /// A whole chunked fragment of `len` bytes whose chunks were kept where they arrived
    /// (`Engine::handle_datagram_held`): its bytes are the pieces in order. Each held piece's
    /// receive buffer is the edge's again once it is done with the fragment.
    DeliverPieces {
        peer: PeerId,
        tag: u8,
        len: usize,
        pieces: Vec<Piece>,
    },
    /// Receive buffers kept for a fragment that will never complete (its peer was removed or
    /// failed): the edge may reuse them.
    Release { handles: Vec<u64> },
    /// Every byte of a `submit_send` was acknowledged (or failed).
    SendComplete {
        peer: PeerId,
        cookie: Cookie,
        result: Result<(), Failure>,
    },
    /// Every byte of a `submit_put` was acknowledged as landed at the target (or failed).
    PutComplete {
        peer: PeerId,
        cookie: Cookie,
        result: Result<(), Failure>,
    },
    /// Every byte requested by `submit_get` has been handed out through `RxOutcome::Write`
    /// (or the operation failed).
    GetComplete {
        peer: PeerId,
        cookie: Cookie,
        result: Result<(), Failure>,
    },
    /// A peer asks this side to read `len` bytes at `offset` of region `region` and send them
    /// back; the edge validates the region and answers with `Engine::answer_get`.
    GetRequest {
        peer: PeerId,
        request: u32,
        region: u64,
        offset: u64,
        len: u64,
    },
    /// Reported once per peer: it acknowledged nothing for `peer_timeout` while data was
    /// outstanding. Everything queued for it completes with `Failure::PeerUnreachable`.
    PeerFailed { peer: PeerId, remote_id: u64 },
}

/// Why an incoming datagram was dropped (each is also counted in `Stats`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    Malformed,
    WrongKey,
    UnknownSender,
    Duplicate,
    OutOfWindow,
    BadChunk,
    PeerFailed,
    /// A new segment while the receive side is held (`Engine::hold_receive`).
    Held,
}

/// Some bytes of a fragment delivered by `Event::DeliverPieces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// `datagram[range]` of the datagram the edge passed with `handle`, still in its buffer.
    Held {
        handle: u64,
        range: core::ops::Range<usize>,
    },
    /// Bytes the core copied (a chunk that came without a handle).
    Owned(Vec<u8>),
}

impl Piece {
    pub fn len(&self) -> usize {
        match self {
            Piece::Held { range, .. } => range.len(),
            Piece::Owned(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `handle_datagram` decided about one incoming datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RxOutcome {
    /// Consumed by the core (an ACK, a chunk stored for reassembly, ...).
    Consumed,
    /// Kept (`handle_datagram_held` only): the datagram's buffer stays unused by the edge
    /// until an `Event::DeliverPieces` or `Event::Release` names its handle.
    Held,
    Dropped(DropReason),
    /// A whole single-datagram fragment: hand `datagram[payload]` to the PML with `tag`,
    /// straight from the receive buffer.
    Deliver {
        peer: PeerId,
        tag: u8,
        payload: core::ops::Range<usize>,
    },
    /// Emulated RDMA data: write `datagram[payload]` at `offset` inside local region `region`
    /// (a PUT target registered on this side, or a GET's local destination identified by
    /// the cookie's region as given to `submit_get`). The edge must refuse (and report with
    /// `Engine::refuse_write`) any write outside memory registered for it.
    Write {
        peer: PeerId,
        region: u64,
        offset: u64,
        payload: core::ops::Range<usize>,
    },
}

/// One datagram the core wants sent: bytes are `buf[..len]` of the buffer given to
/// `poll_transmit`, followed by the `body` if there is one, to be sent on that channel to
/// `peer`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub peer: PeerId,
    pub len: usize,
    /// Payload left where it is (`Engine::poll_transmit_gather`); read it with `Engine::body`.
    pub body: Option<Body>,
}

impl Transmit {
    /// Length of the whole datagram.
    pub fn datagram_len(&self) -> usize {
        self.len + self.body.map_or(0, |b| b.len as usize)
    }
}

/// Where the payload of a gathered transmit lies: a range of one operation's bytes. Valid
/// until the next call that changes the engine.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub(crate) peer: u32,
    pub(crate) op: u32,
    pub(crate) off: u32,
    pub(crate) len: u32,
}

/// Counters, readable at any time; monotonic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams returned by `poll_transmit` (everything: segments, resends, ACKs).
    pub sends: u64,
    /// First transmissions of single-datagram fragments (`Frag`).
    pub frag_sends: u64,
    /// First transmissions of every other sequenced segment (chunks, put/get data, requests,
    /// refusals).
    pub chunk_sends: u64,
    /// Retransmissions after a retransmit timeout.
    pub resends_timeout: u64,
    /// Retransmissions by fast repair (loss inferred from acknowledgements).
    pub resends_fast: u64,
    /// Standalone ACK datagrams sent.
    pub acks_alone: u64,
    /// Owed ACKs that rode on an outgoing segment instead (each cancelled a standalone ACK).
    pub acks_piggybacked: u64,
    /// Datagrams handed to `handle_datagram` (all, whatever the outcome).
    pub recvs: u64,
    /// Sequenced segments received again (already received), dropped.
    pub dup_recvs: u64,
    /// Segments further below the receive window than any sender can have in flight.
    pub oow_low_recvs: u64,
    /// Segments beyond the receive window.
    pub oow_high_recvs: u64,
    /// Datagrams rejected by the parser.
    pub malformed_recvs: u64,
    /// Datagrams carrying another job's key.
    pub wrong_key_recvs: u64,
    /// Datagrams from a `src` that is not a known peer.
    pub unknown_sender_recvs: u64,
    /// Segments inconsistent with reassembly/GET state, dropped before being accepted.
    pub bad_chunk_recvs: u64,
    /// `refuse_write` calls.
    pub refused_writes: u64,
    /// GET requests this engine (as the target) refused: `answer_get` with an error, or with
    /// data of the wrong length.
    pub refused_gets: u64,
    /// Acknowledgement informations processed (standalone or piggy-backed).
    pub ack_recvs: u64,
    /// ...of which acknowledged nothing new while data was outstanding.
    pub dup_acks: u64,
    /// ...of which were older than what was already known (or acknowledged unsent data).
    pub old_acks: u64,
    /// `poll_transmit` calls that found work but no credit.
    pub credits_exhausted: u64,
    /// Bytes of the datagrams returned by `poll_transmit` (headers included).
    pub bytes_sent: u64,
    /// Bytes of the datagrams from known, live peers with the right key (headers included).
    pub bytes_received: u64,
    /// Peers reported in `Event::PeerFailed`.
    pub peers_failed: u64,
    /// Fragments read in place copied without their ACK (and reported complete then): right
    /// after they left (`Config::lent_copy_below`) or after `Config::lent_hold`.
    pub lent_released: u64,
    /// Retransmissions the peer reported receiving twice (D-SACK): the original had arrived,
    /// only late. Counted once per report, fast repairs and timeouts alike.
    pub spurious_resends: u64,
    /// New segments dropped unaccepted while the receive side was held
    /// (`Engine::hold_receive`); their senders resend them once it is not.
    pub held_recvs: u64,
}
