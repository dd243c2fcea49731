//! Seeded fault injector of the fabric edge: drops, duplicates and delays a fraction of the
//! datagrams a `Module` sends or receives, so the protocol's loss repair can be exercised on
//! one host and in CI without a lossy network (`Module::set_faults`).
//!
//! # Semantics (what the caller of `Module` sees)
//! - **send drop**: `post_send` reports success and nothing leaves; the buffer stays out of
//!   the free list until the next `poll` of that channel, which yields a `SendDone` for it,
//!   exactly as the real completion would (the core counts credits from `SendDone`).
//! - **send dup**: the datagram leaves twice. The copy goes through a spare send buffer whose
//!   completion is swallowed (the caller never lent it); with no spare buffer free at that
//!   moment the copy is skipped and counted in `send_dup_skipped`.
//! - **send delay**: `post_send` reports success, the buffer stays in flight and is really
//!   sent by the first `poll` of that channel at least `delay_us` later; its `SendDone` then
//!   comes from the provider as usual. A delayed datagram that the provider refuses at that
//!   point surfaces as `Completion::Error { op: Send }` (buffer free again), `-FI_EAGAIN`
//!   is retried on the next poll.
//! - **recv drop**: the completion is not surfaced; the buffer is reposted at once.
//! - **recv dup**: the completion is surfaced; when the caller reposts that buffer it is not
//!   reposted but surfaced again (same `BufId`, same length, bytes untouched since the buffer
//!   was never given back to the provider) by the next `poll`; the second `repost` is real. So
//!   no memory is copied and the duplicate arrives later, as on a real network.
//!
//! # Determinism
//! Every (channel, fault kind) pair draws from its own SplitMix64 stream derived from `seed`,
//! and only when that kind's fraction is non-zero. The drop pattern of one channel therefore
//! depends only on the seed and on the sequence of sends (receives) on that channel, not on
//! the other knobs or the other channel's traffic. Delays depend on the clock as well.
//!
//! # Cost
//! Off (every fraction 0, the default) the `Module` holds no injector at all: one `if let`
//! per `post_send`, `poll` and `repost`.
use super::channel::ChannelRes;
use super::error::FabricError;
use super::module::{BufId, Completion, Op};
use super::sys;
use crate::proto::{Duration, Instant};
use std::collections::VecDeque;

/// What to inject. Fractions are probabilities per datagram in `[0, 1]`; all 0 = off.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Seed of the random streams; the same seed and call sequence give the same faults.
    pub seed: u64,
    /// Fraction of sends silently dropped (reported successful).
    pub send_drop: f64,
    /// Fraction of sends that leave twice.
    pub send_dup: f64,
    /// Fraction of sends held back for `delay_us` before they leave (from `poll`).
    pub send_delay: f64,
    /// Delay of a delayed send, microseconds.
    pub delay_us: u64,
    /// Fraction of received datagrams discarded before the caller sees them.
    pub recv_drop: f64,
    /// Fraction of received datagrams surfaced twice.
    pub recv_dup: f64,
}

impl FaultConfig {
    /// True when no fault is configured.
    pub fn is_off(&self) -> bool {
        self.send_drop == 0.0
            && self.send_dup == 0.0
            && self.send_delay == 0.0
            && self.recv_drop == 0.0
            && self.recv_dup == 0.0
    }

    /// Every fraction finite and in `[0, 1]`; an error names the offending field.
    pub fn validate(&self) -> Result<(), FabricError> {
        for (name, v) in [
            ("send_drop", self.send_drop),
            ("send_dup", self.send_dup),
            ("send_delay", self.send_delay),
            ("recv_drop", self.recv_drop),
            ("recv_dup", self.recv_dup),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(FabricError::invalid(
                    "set_faults",
                    format!("fault fraction {name} = {v}: must be between 0 and 1"),
                ));
            }
        }
        Ok(())
    }
}

/// What the injector did so far (both channels of one module).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Sends accepted by `post_send` while an injector was set.
    pub sends_seen: u64,
    pub send_dropped: u64,
    pub send_duplicated: u64,
    /// Duplicates not sent because no spare send buffer was free.
    pub send_dup_skipped: u64,
    pub send_delayed: u64,
    /// Datagrams received while an injector was set (before dropping).
    pub recvs_seen: u64,
    pub recv_dropped: u64,
    pub recv_duplicated: u64,
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, full-period, good enough to pick faults.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (no draw when `p` is 0).
    fn roll(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }
}

const SEND_DROP: usize = 0;
const SEND_DUP: usize = 1;
const SEND_DELAY: usize = 2;
const RECV_DROP: usize = 3;
const RECV_DUP: usize = 4;
const KINDS: usize = 5;

#[derive(Copy, Clone, Debug)]
struct Held {
    due: Instant,
    buf: usize,
    len: usize,
    to: sys::fi_addr_t,
}

#[derive(Debug, Default)]
struct ChanFaults {
    rng: Vec<SplitMix>,
    /// Dropped sends whose `SendDone` the next poll reports.
    done: VecDeque<usize>,
    /// Delayed sends, in due order (one constant delay, so push order is due order).
    held: VecDeque<Held>,
    /// Spare send buffers carrying duplicates: their completions are swallowed.
    spare: Vec<bool>,
    /// Receive buffers surfaced once that must be surfaced again on repost (their length).
    dup_pending: Vec<Option<usize>>,
    /// Receive completions to surface again on the next poll.
    resurface: VecDeque<(BufId, usize)>,
}

impl ChanFaults {
    fn new(seed: u64, ch: usize) -> Self {
        let rng = (0..KINDS)
            .map(|k| {
                // Decorrelate the streams: each starts from one output of a seeding stream.
                let mut s = SplitMix(
                    seed ^ ((ch * KINDS + k + 1) as u64).wrapping_mul(0xd1b5_4a32_d192_ed03),
                );
                SplitMix(s.next())
            })
            .collect();
        ChanFaults {
            rng,
            ..Default::default()
        }
    }
}

/// The injector state of one module (both channels).
#[derive(Debug)]
pub(crate) struct Faults {
    cfg: FaultConfig,
    ch: [ChanFaults; 2],
    stats: FaultStats,
}

impl Faults {
    /// Sends held back for a peer that leaves are dropped instead (their `SendDone` comes on
    /// the next poll, as for a dropped send): the address vector gives the next peer inserted
    /// the freed `fi_addr`, and a late datagram would then reach that peer.
    pub(crate) fn forget_destination(&mut self, c: usize, to: sys::fi_addr_t) {
        let f = &mut self.ch[c];
        let (gone, kept): (VecDeque<Held>, VecDeque<Held>) =
            f.held.drain(..).partition(|h| h.to == to);
        f.held = kept;
        f.done.extend(gone.iter().map(|h| h.buf));
    }

    pub(crate) fn new(cfg: FaultConfig) -> Self {
        Faults {
            cfg,
            ch: [ChanFaults::new(cfg.seed, 0), ChanFaults::new(cfg.seed, 1)],
            stats: FaultStats::default(),
        }
    }

    /// New settings; buffers the old ones still hold are released normally.
    pub(crate) fn reconfigure(&mut self, cfg: FaultConfig) {
        self.cfg = cfg;
        for (c, f) in self.ch.iter_mut().enumerate() {
            f.rng = ChanFaults::new(cfg.seed, c).rng;
        }
    }

    pub(crate) fn stats(&self) -> FaultStats {
        self.stats
    }

    /// `Module::post_send` with faults. Same contract: `Err` = nothing happened, the caller
    /// still owns the buffer.
    pub(crate) fn post_send(
        &mut self,
        chan: &mut ChannelRes,
        c: usize,
        buf: BufId,
        len: usize,
        to: sys::fi_addr_t,
        now: Instant,
    ) -> Result<(), FabricError> {
        let i = chan.checked_tx(buf, len)?;
        let cfg = self.cfg;
        let f = &mut self.ch[c];
        if f.rng[SEND_DROP].roll(cfg.send_drop) {
            chan.hold_tx(i);
            f.done.push_back(i);
            self.stats.sends_seen += 1;
            self.stats.send_dropped += 1;
            return Ok(());
        }
        let dup = f.rng[SEND_DUP].roll(cfg.send_dup);
        let delay = f.rng[SEND_DELAY].roll(cfg.send_delay);
        if delay {
            chan.hold_tx(i);
            f.held.push_back(Held {
                due: Instant(now.0 + Duration::from_micros(cfg.delay_us).0),
                buf: i,
                len,
                to,
            });
            self.stats.send_delayed += 1;
        } else {
            chan.send_index(i, len, to)?;
        }
        self.stats.sends_seen += 1;
        if dup {
            self.send_copy(chan, c, i, len, to);
        }
        Ok(())
    }

    /// Send the first `len` bytes of buffer `i` once more through a spare buffer.
    fn send_copy(&mut self, chan: &mut ChannelRes, c: usize, i: usize, len: usize, to: u64) {
        let Some((spare, _)) = chan.tx_buffer() else {
            self.stats.send_dup_skipped += 1;
            return;
        };
        let s = spare.0 as usize;
        chan.copy_tx(i, s, len);
        match chan.send_index(s, len, to) {
            Ok(()) => {
                let f = &mut self.ch[c];
                if f.spare.len() <= s {
                    f.spare.resize(s + 1, false);
                }
                f.spare[s] = true;
                self.stats.send_duplicated += 1;
            }
            Err(_) => {
                chan.release_tx(spare);
                self.stats.send_dup_skipped += 1;
            }
        }
    }

    /// Before the CQ is read: send due delayed datagrams, report dropped sends and resurface
    /// duplicated receives. Returns how many completions were added to `out`.
    pub(crate) fn before_poll(
        &mut self,
        chan: &mut ChannelRes,
        c: usize,
        max: usize,
        out: &mut Vec<Completion>,
        now: Instant,
    ) -> usize {
        let f = &mut self.ch[c];
        let mut added = 0;
        while let Some(&h) = f.held.front() {
            if h.due > now {
                break;
            }
            match chan.send_index(h.buf, h.len, h.to) {
                Ok(()) => {
                    f.held.pop_front();
                }
                Err(e) if e.is_would_block() => break,
                Err(error) => {
                    if added >= max {
                        break;
                    }
                    let b = h.buf;
                    f.held.pop_front();
                    chan.free_held_tx(b);
                    out.push(Completion::Error {
                        op: Op::Send,
                        buf: BufId(b as u32),
                        error,
                    });
                    added += 1;
                }
            }
        }
        while added < max {
            let Some(i) = f.done.pop_front() else { break };
            chan.free_held_tx(i);
            out.push(Completion::SendDone {
                buf: BufId(i as u32),
            });
            added += 1;
        }
        while added < max {
            let Some((buf, len)) = f.resurface.pop_front() else {
                break;
            };
            out.push(Completion::Recv { buf, len });
            added += 1;
        }
        added
    }

    /// After the CQ was read into `out[start..]`: swallow spare-buffer completions, drop or
    /// mark for duplication received datagrams. Returns true when a buffer was queued for
    /// repost (the caller flushes).
    pub(crate) fn after_poll(
        &mut self,
        chan: &mut ChannelRes,
        c: usize,
        out: &mut Vec<Completion>,
        start: usize,
    ) -> bool {
        let cfg = self.cfg;
        let f = &mut self.ch[c];
        let stats = &mut self.stats;
        let mut reposted = false;
        let mut k = start;
        while k < out.len() {
            let keep = match out[k] {
                Completion::SendDone { buf }
                | Completion::Error {
                    op: Op::Send, buf, ..
                } => {
                    let s = buf.0 as usize;
                    if f.spare.get(s).copied().unwrap_or(false) {
                        // The channel already freed it; the caller never knew it.
                        f.spare[s] = false;
                        false
                    } else {
                        true
                    }
                }
                Completion::Recv { buf, len } => {
                    stats.recvs_seen += 1;
                    if f.rng[RECV_DROP].roll(cfg.recv_drop) {
                        stats.recv_dropped += 1;
                        chan.repost(buf);
                        reposted = true;
                        false
                    } else {
                        if f.rng[RECV_DUP].roll(cfg.recv_dup) {
                            let b = buf.0 as usize;
                            if f.dup_pending.len() <= b {
                                f.dup_pending.resize(b + 1, None);
                            }
                            f.dup_pending[b] = Some(len);
                            stats.recv_duplicated += 1;
                        }
                        true
                    }
                }
                Completion::Error { op: Op::Recv, .. } => true,
            };
            if keep {
                k += 1;
            } else {
                out.remove(k);
            }
        }
        reposted
    }

    /// `Module::repost` with faults: true when the buffer was kept to be surfaced again.
    pub(crate) fn repost(&mut self, c: usize, buf: BufId) -> bool {
        let f = &mut self.ch[c];
        match f.dup_pending.get_mut(buf.0 as usize).and_then(Option::take) {
            Some(len) => {
                f.resurface.push_back((buf, len));
                true
            }
            None => false,
        }
    }
}
