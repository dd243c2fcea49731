//! The bytes of an operation: owned by the core, or lent by the edge until the operation
//! completes.
//!
//! Owned bytes cost a copy on the way in (user memory into a buffer of ours). Lent bytes are
//! read where they are, each time a segment is cut or retransmitted, so a large PML fragment
//! crosses user space once on its way to the kernel. The lender promises that the bytes stay
//! valid and unchanged until the operation's completion event; the core never keeps them past
//! it (they are dropped when the operation finishes, before the event is polled).

/// Bytes the edge lends to an operation: up to two pieces laid end to end (a PML header and
/// the user's data).
pub trait Lent: Send + core::fmt::Debug {
    fn pieces(&self) -> [&[u8]; 2];

    /// Who can take the bytes back before the operation completes (0: nobody). An owner that
    /// must let go early (memory deregistered while a GET reply still reads it) calls
    /// `Engine::own_lent` first, which copies what is still lent from it.
    fn owner(&self) -> u64 {
        0
    }
}

#[derive(Debug)]
pub enum Payload {
    Owned(Vec<u8>),
    Lent(Box<dyn Lent>),
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::Owned(v) => v.len(),
            Payload::Lent(l) => {
                let [a, b] = l.pieces();
                a.len() + b.len()
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `off..off + len` as at most two slices laid end to end (the range must lie
    /// inside).
    pub fn slices(&self, off: usize, len: usize) -> [&[u8]; 2] {
        match self {
            Payload::Owned(v) => [&v[off..off + len], &[]],
            Payload::Lent(l) => {
                let [a, b] = l.pieces();
                let in_a = a.len().saturating_sub(off).min(len);
                let a_part = &a[a.len().min(off)..][..in_a];
                let from = (off + in_a) - a.len().min(off + in_a);
                [a_part, &b[from..from + (len - in_a)]]
            }
        }
    }

    /// Copies `dst.len()` bytes starting at byte `off` into `dst` (the range must lie inside).
    pub fn copy_to(&self, off: usize, dst: &mut [u8]) {
        let [a, b] = self.slices(off, dst.len());
        dst[..a.len()].copy_from_slice(a);
        dst[a.len()..].copy_from_slice(b);
    }

    /// Replaces bytes lent by `owner` with a copy of them; true if it did.
    pub fn own(&mut self, owner: u64) -> bool {
        let Payload::Lent(l) = self else {
            return false;
        };
        if owner == 0 || l.owner() != owner {
            return false;
        }
        self.copy_lent_into(Vec::new())
    }

    /// Replaces lent bytes, whoever lent them, with a copy made in `buf` (emptied first);
    /// true if it did. Owned bytes stay as they are and `buf` is dropped.
    pub fn copy_lent_into(&mut self, mut buf: Vec<u8>) -> bool {
        let Payload::Lent(l) = self else {
            return false;
        };
        let [a, b] = l.pieces();
        buf.clear();
        buf.reserve_exact(a.len() + b.len());
        buf.extend_from_slice(a);
        buf.extend_from_slice(b);
        *self = Payload::Owned(buf);
        true
    }

    /// The buffer behind owned bytes (for reuse); lent bytes go back to nobody.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        match self {
            Payload::Owned(v) => Some(v),
            Payload::Lent(_) => None,
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload::Owned(v)
    }
}

impl From<Box<dyn Lent>> for Payload {
    fn from(l: Box<dyn Lent>) -> Payload {
        Payload::Lent(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Two(Vec<u8>, Vec<u8>);
    impl Lent for Two {
        fn pieces(&self) -> [&[u8]; 2] {
            [&self.0, &self.1]
        }
    }

    #[test]
    fn lent_pieces_read_as_one_string() {
        let whole: Vec<u8> = (0..50u8).collect();
        let lent =
            Payload::from(Box::new(Two(whole[..7].to_vec(), whole[7..].to_vec())) as Box<dyn Lent>);
        let owned = Payload::from(whole.clone());
        assert_eq!(lent.len(), 50);
        for off in 0..50 {
            for len in 0..=(50 - off) {
                let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
                lent.copy_to(off, &mut x);
                owned.copy_to(off, &mut y);
                assert_eq!(x, &whole[off..off + len], "lent off {off} len {len}");
                assert_eq!(y, x);
            }
        }
        assert!(lent.into_buffer().is_none());
        assert_eq!(owned.into_buffer(), Some(whole));
    }

    #[derive(Debug)]
    struct Owned(u64, Vec<u8>);
    impl Lent for Owned {
        fn pieces(&self) -> [&[u8]; 2] {
            [&self.1, &[]]
        }
        fn owner(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn own_copies_only_what_its_owner_lent() {
        let mut p = Payload::from(Box::new(Owned(7, vec![1, 2, 3])) as Box<dyn Lent>);
        assert!(!p.own(8), "another owner");
        assert!(!p.own(0), "0 owns nothing");
        assert!(matches!(p, Payload::Lent(_)));
        assert!(p.own(7));
        assert!(matches!(&p, Payload::Owned(v) if v == &[1, 2, 3]));
        assert!(!p.own(7), "already a copy");
        let mut anon = Payload::from(Box::new(Two(vec![1], vec![2])) as Box<dyn Lent>);
        assert!(!anon.own(0), "lent without an owner stays lent");
    }

    #[test]
    fn copy_lent_into_takes_any_lender_and_reuses_the_buffer() {
        let mut p = Payload::from(Box::new(Two(vec![1, 2], vec![3])) as Box<dyn Lent>);
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[9, 9, 9, 9]);
        let at = buf.as_ptr();
        assert!(p.copy_lent_into(buf));
        assert!(matches!(&p, Payload::Owned(v) if v == &[1, 2, 3] && v.as_ptr() == at));
        assert!(!p.copy_lent_into(Vec::new()), "already owned");
        assert!(matches!(&p, Payload::Owned(v) if v == &[1, 2, 3]));
    }

    #[test]
    fn empty_pieces() {
        let p = Payload::from(Box::new(Two(Vec::new(), vec![1, 2, 3])) as Box<dyn Lent>);
        let mut d = [0u8; 2];
        p.copy_to(1, &mut d);
        assert_eq!(d, [2, 3]);
        let p = Payload::from(Box::new(Two(vec![1, 2], Vec::new())) as Box<dyn Lent>);
        p.copy_to(0, &mut d);
        assert_eq!(d, [1, 2]);
        assert!(!p.is_empty());
    }
}
