//! Send window: the ring of segments sent and not yet acknowledged.

use crate::proto::api::Instant;
use crate::proto::hotel::RoomId;
use crate::proto::seq::Seq;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SegState {
    /// Slot unused, or acknowledged cumulatively.
    Free,
    /// Sent, timer running in the hotel.
    InFlight,
    /// Declared lost; waiting in the peer's resend queue (no timer).
    Lost,
    /// Selectively acknowledged: received, waiting for the cumulative ACK to pass it.
    Sacked,
}

/// What the core remembers about one sent segment: enough to rebuild it for a resend.
#[derive(Copy, Clone, Debug)]
pub struct SegRec {
    pub state: SegState,
    /// Index of the operation (fragment, put, ...) in the peer's op slab.
    pub op: u32,
    pub off: u32,
    pub len: u32,
    /// Time of the latest transmission.
    pub sent_at: Instant,
    /// Transmission counter of the latest transmission (orders transmissions of one peer).
    pub tx: u64,
    /// Retransmitted at least once (Karn: no RTT sample from it).
    pub retx: bool,
    /// Declared lost by the fast path (else by timeout).
    pub fast: bool,
    /// Latest transmission went on the priority channel (it may overtake data-channel
    /// segments sent before it, so it does not drive loss detection).
    pub prio: bool,
    pub room: RoomId,
}

impl SegRec {
    const EMPTY: SegRec = SegRec {
        state: SegState::Free,
        op: 0,
        off: 0,
        len: 0,
        sent_at: Instant(0),
        tx: 0,
        retx: false,
        fast: false,
        prio: false,
        room: RoomId { idx: 0, gen: 0 },
    };
}

#[derive(Clone, Debug)]
pub struct SendWindow {
    /// Oldest unacknowledged segment.
    pub una: Seq,
    /// Next sequence number to assign.
    pub next: Seq,
    /// `next` extended with its epoch (wire v2): how many times the 16-bit space wrapped,
    /// in the high 16 bits. Every segment in flight is less than a window below it, so its
    /// extended number follows from its 16-bit one (`ext`).
    pub next_ext: u32,
    window: u16,
    mask: u16,
    ring: Vec<SegRec>,
}

impl SendWindow {
    pub fn new(isn: u16, window: u16) -> SendWindow {
        let cap = (window as usize).next_power_of_two();
        SendWindow {
            una: Seq(isn),
            next: Seq(isn),
            next_ext: isn as u32,
            window,
            mask: (cap - 1) as u16,
            ring: vec![SegRec::EMPTY; cap],
        }
    }

    pub fn in_flight(&self) -> u16 {
        self.next.since(self.una)
    }

    pub fn is_open(&self) -> bool {
        self.in_flight() < self.window
    }

    /// True when `s` was sent and is not cumulatively acknowledged.
    pub fn contains(&self, s: Seq) -> bool {
        s.since(self.una) < self.in_flight()
    }

    /// Assigns the next sequence number to `rec`.
    pub fn push(&mut self, rec: SegRec) -> Seq {
        let s = self.next;
        self.ring[(s.0 & self.mask) as usize] = rec;
        self.next = s.plus(1);
        self.next_ext = self.next_ext.wrapping_add(1);
        s
    }

    /// Extended number of `s`, which must be in flight or `next` (at most a window below
    /// `next`).
    pub fn ext(&self, s: Seq) -> u32 {
        self.next_ext.wrapping_sub(self.next.since(s) as u32)
    }

    /// Extended number of the oldest unacknowledged segment.
    pub fn una_ext(&self) -> u32 {
        self.ext(self.una)
    }

    pub fn get(&self, s: Seq) -> &SegRec {
        &self.ring[(s.0 & self.mask) as usize]
    }

    pub fn get_mut(&mut self, s: Seq) -> &mut SegRec {
        &mut self.ring[(s.0 & self.mask) as usize]
    }

    /// Forgets everything in flight (peer failed or removed).
    pub fn reset(&mut self) {
        for r in self.ring.iter_mut() {
            r.state = SegState::Free;
        }
        self.una = self.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn matches_deque_oracle() {
        let mut x: u64 = 99;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (isn, win) in [(65500u16, 100u16), (0, 1), (65535, 4096), (3, 37)] {
            let mut w = SendWindow::new(isn, win);
            let mut oracle: VecDeque<(u16, u32)> = VecDeque::new();
            let mut n = 0u32;
            for _ in 0..50_000 {
                if rnd() % 3 != 0 {
                    assert_eq!(w.is_open(), oracle.len() < win as usize);
                    if w.is_open() {
                        n += 1;
                        let mut r = SegRec::EMPTY;
                        r.op = n;
                        let s = w.push(r);
                        oracle.push_back((s.0, n));
                    }
                } else {
                    let k = (rnd() as usize) % (oracle.len() + 1);
                    for _ in 0..k {
                        let (s, _) = oracle.pop_front().unwrap();
                        assert_eq!(w.una, Seq(s));
                        w.una = w.una.plus(1);
                    }
                }
                assert_eq!(w.in_flight() as usize, oracle.len());
                for &(s, op) in oracle.iter() {
                    assert!(w.contains(Seq(s)));
                    assert_eq!(w.get(Seq(s)).op, op);
                }
                assert!(!w.contains(w.next));
                assert_eq!(w.next_ext as u16, w.next.0);
                assert_eq!(w.una_ext(), w.next_ext - w.in_flight() as u32);
                assert!(!w.contains(w.una.minus(1)));
            }
        }
    }
}
