//! Receive window: accepts each segment inside a 4096-segment window exactly once, in any
//! order, and produces the cumulative and selective acknowledgement.
//!
//! It works on extended 32-bit sequence numbers (epoch << 16 | 16-bit number, wire v2): a
//! datagram replayed after the 16-bit space wrapped is 65536·k below the window and
//! rejected as `Low`, where a 16-bit comparison would have taken it for a fresh segment.

use crate::proto::seq::MAX_WINDOW;

const WORDS: usize = MAX_WINDOW as usize / 64;
const MASK: u32 = MAX_WINDOW as u32 - 1;
const WIN: i32 = MAX_WINDOW as i32;

/// `a - b` on extended sequence numbers (meaningful while less than 2^31 apart).
#[inline]
pub fn ext_diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

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
    /// Next segment expected in order (extended); everything before it was received.
    next: u32,
    /// One past the highest segment received (extended).
    high: u32,
    /// Bit `seq & 4095` set: received (only for seqs in (next, next + 4096)).
    bits: [u64; WORDS],
}

impl RecvWindow {
    /// The peer's first segment is `isn` in epoch 0.
    pub fn new(isn: u16) -> RecvWindow {
        RecvWindow {
            next: isn as u32,
            high: isn as u32,
            bits: [0; WORDS],
        }
    }

    /// Next extended sequence number expected in order.
    pub fn next(&self) -> u32 {
        self.next
    }

    /// Cumulative ACK value (extended): the last segment received in order.
    pub fn cum(&self) -> u32 {
        self.next.wrapping_sub(1)
    }

    #[inline]
    fn get(&self, s: u32) -> bool {
        let i = (s & MASK) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    #[inline]
    fn set(&mut self, s: u32, v: bool) {
        let i = (s & MASK) as usize;
        if v {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether `accept(s)` would take `s` as new.
    pub fn is_new(&self, s: u32) -> bool {
        let d = ext_diff(s, self.next);
        (0..WIN).contains(&d) && !self.get(s)
    }

    /// Classifies the extended sequence number `s` and marks it received if new.
    pub fn accept(&mut self, s: u32) -> Accept {
        let d = ext_diff(s, self.next);
        if d < 0 {
            return if d >= -WIN {
                Accept::Duplicate
            } else {
                Accept::Low
            };
        }
        if d >= WIN {
            return Accept::High;
        }
        if self.get(s) {
            return Accept::Duplicate;
        }
        let dh = ext_diff(s, self.high);
        let new_hole = dh > 0;
        let fills_gap = dh < -1;
        if dh >= 0 {
            self.high = s.wrapping_add(1);
        }
        if d == 0 {
            self.next = self.next.wrapping_add(1);
            while self.get(self.next) {
                self.set(self.next, false);
                self.next = self.next.wrapping_add(1);
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
        (self.high.wrapping_sub(self.next) as usize).saturating_sub(1)
    }

    /// 64 selective-ACK bits starting at bit `k` (bit i <-> seq `next + 1 + k + i`).
    pub fn sack_word(&self, k: usize) -> u64 {
        let limit = MAX_WINDOW as usize - 1;
        if k >= limit {
            return 0;
        }
        let p = (self.next as usize + 1 + k) & MASK as usize;
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
            // 40 000 steps of up to 4096 sweep the window through many 16-bit wraps.
            let mut w = RecvWindow::new(isn);
            // Oracle over unwrapped integers.
            let mut got: BTreeSet<i64> = BTreeSet::new();
            let mut next: i64 = isn as i64;
            for it in 0..40_000 {
                let off = (rnd() % 4600) as i64 - 4300 + (rnd() % 4096) as i64;
                let s = next + off;
                let r = w.accept(s.rem_euclid(1 << 32) as u32);
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
                assert_eq!(w.cum(), (next - 1).rem_euclid(1 << 32) as u32);
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

    /// Every segment of an earlier epoch (one or more 16-bit wraps ago), whatever its 16-bit
    /// number, is refused once the window has moved past it; so is one from a later epoch.
    #[test]
    fn other_epochs_are_out_of_window() {
        let mut w = RecvWindow::new(65000);
        for s in 65000..65000 + 3 * 65536 + 100 {
            assert!(matches!(w.accept(s), Accept::New { .. }));
        }
        let next = w.next();
        assert_eq!(next, 65000 + 3 * 65536 + 100);
        for k in 1..=3u32 {
            for off in [0u32, 1, 17, 4095, 4096, 30000] {
                let replay = next.wrapping_add(off).wrapping_sub(k << 16);
                assert_eq!(w.accept(replay), Accept::Low, "k {k} off {off}");
                let future = next.wrapping_add(off).wrapping_add(k << 16);
                assert_eq!(w.accept(future), Accept::High, "k {k} off {off}");
            }
        }
        assert_eq!(w.next(), next);
        assert!(matches!(w.accept(next), Accept::New { .. }));
    }
}
