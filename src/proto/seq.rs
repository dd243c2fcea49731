//! 16-bit wrap-aware sequence numbers.
//!
//! Comparisons use the signed 16-bit difference, as the C original's `SEQ_DIFF` does, so they
//! are meaningful while the two numbers are less than 2^15 apart. Windows are at most 4096
//! segments, far inside that bound.

/// A segment's sequence number in one direction of one peer.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seq(pub u16);

/// Largest window either direction may use (receive window is always this size).
pub const MAX_WINDOW: u16 = 4096;

const _: () = assert!((MAX_WINDOW as u32) < (1 << 15));

impl Seq {
    /// `self - other` as a signed distance.
    #[inline]
    pub fn diff(self, other: Seq) -> i16 {
        self.0.wrapping_sub(other.0) as i16
    }

    /// Unsigned distance from `other` forward to `self` (mod 2^16).
    #[inline]
    pub fn since(self, other: Seq) -> u16 {
        self.0.wrapping_sub(other.0)
    }

    #[inline]
    pub fn plus(self, n: u16) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    #[inline]
    pub fn minus(self, n: u16) -> Seq {
        Seq(self.0.wrapping_sub(n))
    }

    #[inline]
    pub fn lt(self, other: Seq) -> bool {
        self.diff(other) < 0
    }

    #[inline]
    pub fn le(self, other: Seq) -> bool {
        self.diff(other) <= 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_compare() {
        assert!(Seq(65535).lt(Seq(0)));
        assert!(Seq(65000).lt(Seq(100)));
        assert!(!Seq(100).lt(Seq(65000)));
        assert_eq!(Seq(3).diff(Seq(65534)), 5);
        assert_eq!(Seq(65534).diff(Seq(3)), -5);
        assert_eq!(Seq(65535).plus(2), Seq(1));
        assert_eq!(Seq(1).minus(2), Seq(65535));
        assert_eq!(Seq(2).since(Seq(65535)), 3);
        assert!(Seq(7).le(Seq(7)));
    }

    #[test]
    fn diff_matches_integer_oracle() {
        // For distances below 2^15, the wrapped diff equals the true integer difference.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let base = (x & 0xffff_ffff) as i64 + 100_000;
            let d = ((x >> 32) % 32_767) as i64 - 16_383;
            let a = Seq((base as u64 & 0xffff) as u16);
            let b = Seq(((base + d) as u64 & 0xffff) as u16);
            assert_eq!(b.diff(a) as i64, d);
            assert_eq!(b.lt(a), d < 0);
        }
    }
}
