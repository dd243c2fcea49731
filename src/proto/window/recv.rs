//! Receive window: accepts each segment inside a 4096-segment window exactly once, in any
//! order, and produces the cumulative and selective acknowledgement.

use crate::proto::seq::{Seq, MAX_WINDOW};

const WORDS: usize = MAX_WINDOW as usize / 64;
const MASK: u16 = MAX_WINDOW - 1;

/// What the window decided about one arriving sequence number.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Accept {
    /// First arrival. `new_hole`: it lies beyond the highest arrival so far + 1, so a gap
    /// (a probable loss) has just opened. `fills_gap`: it lies below the highest arrival (a
    /// repair or a reordered segment); the sender wants to hear about both at once.
    New { new_hole: bool, fills_gap: bool },
    /// Already received: marked inside the window, or below it by at most a window (a
    /// sender's window never exceeds 4096, so those were all received).
    Duplicate,
    /// Further below the window than any sender can still have in flight.
    Low,
    /// Beyond the window.
    High,
}

#[derive(Clone, Debug)]
pub struct RecvWindow {
    /// Next segment expected in order; everything before it was received.
    next: Seq,
    /// One past the highest segment received.
    high: Seq,
    /// Bit `seq & 4095` set: received (only for seqs in (next, next + 4096)).
    bits: [u64; WORDS],
}

impl RecvWindow {
    pub fn new(isn: u16) -> RecvWindow {
        RecvWindow {
            next: Seq(isn),
            high: Seq(isn),
            bits: [0; WORDS],
        }
    }

    pub fn next(&self) -> Seq {
        self.next
    }

    /// Cumulative ACK value: the last segment received in order.
    pub fn cum(&self) -> u16 {
        self.next.minus(1).0
    }

    #[inline]
    fn get(&self, s: Seq) -> bool {
        let i = (s.0 & MASK) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    #[inline]
    fn set(&mut self, s: Seq, v: bool) {
        let i = (s.0 & MASK) as usize;
        if v {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    pub fn accept(&mut self, seq: u16) -> Accept {
        let s = Seq(seq);
        let d = s.diff(self.next);
        if d < 0 {
            return if d >= -(MAX_WINDOW as i16) {
                Accept::Duplicate
            } else {
                Accept::Low
            };
        }
        if d >= MAX_WINDOW as i16 {
            return Accept::High;
        }
        if self.get(s) {
            return Accept::Duplicate;
        }
        let new_hole = s.diff(self.high) > 0;
        let fills_gap = s.diff(self.high) < -1;
        if s.diff(self.high) >= 0 {
            self.high = s.plus(1);
        }
        if d == 0 {
            self.next = self.next.plus(1);
            while self.get(self.next) {
                self.set(self.next, false);
                self.next = self.next.plus(1);
            }
        } else {
            self.set(s, true);
        }
        Accept::New {
            new_hole,
            fills_gap,
        }
    }

    /// Number of selective-ACK bits worth sending: positions up to the highest arrival.
    pub fn sack_span(&self) -> usize {
        // bit i <-> seq next + 1 + i; the highest arrival is high - 1.
        (self.high.since(self.next) as usize).saturating_sub(1)
    }

    /// 64 selective-ACK bits starting at bit `k` (bit i <-> seq `next + 1 + k + i`).
    pub fn sack_word(&self, k: usize) -> u64 {
        let limit = MAX_WINDOW as usize - 1;
        if k >= limit {
            return 0;
        }
        let p = (self.next.0 as usize + 1 + k) & MASK as usize;
        let (w, b) = (p / 64, p % 64);
        let mut v = self.bits[w] >> b;
        if b != 0 {
            v |= self.bits[(w + 1) % WORDS] << (64 - b);
        }
        let valid = limit - k;
        if valid < 64 {
            v &= (1u64 << valid) - 1;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn matches_set_oracle_across_wrap() {
        let mut x: u64 = 7;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for isn in [0u16, 65000, 65535, 1234] {
            let mut w = RecvWindow::new(isn);
            // Oracle over unwrapped integers.
            let mut got: BTreeSet<i64> = BTreeSet::new();
            let mut next: i64 = isn as i64;
            for it in 0..40_000 {
                let off = (rnd() % 4600) as i64 - 4300 + (rnd() % 4096) as i64;
                let s = next + off;
                let r = w.accept((s.rem_euclid(65536)) as u16);
                let expect = if off < -4096 {
                    Accept::Low
                } else if off < 0 {
                    Accept::Duplicate
                } else if off >= 4096 {
                    Accept::High
                } else if got.contains(&s) {
                    Accept::Duplicate
                } else {
                    let high = got
                        .iter()
                        .next_back()
                        .copied()
                        .unwrap_or(next - 1)
                        .max(next - 1);
                    let fills_gap = s < high;
                    got.insert(s);
                    while got.contains(&next) {
                        got.remove(&next);
                        next += 1;
                    }
                    Accept::New {
                        new_hole: s > high + 1,
                        fills_gap,
                    }
                };
                assert_eq!(r, expect);
                assert_eq!(w.cum(), ((next - 1).rem_euclid(65536)) as u16);
                if it % 37 != 0 {
                    continue;
                }
                // SACK bits equal the oracle's set.
                for k in (0..4095).step_by(64) {
                    let word = w.sack_word(k);
                    for i in 0..64.min(4095 - k) {
                        let s = next + 1 + (k + i) as i64;
                        assert_eq!(word >> i & 1 == 1, got.contains(&s), "k {k} i {i}");
                    }
                }
                let span = got.iter().next_back().map_or(0, |h| (h - next) as usize);
                assert_eq!(w.sack_span(), span);
            }
        }
    }
}
