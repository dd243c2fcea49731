//! Reassembly of chunked fragments on the receiving side: any arrival order, many at once.
//! The sequence layer has already made every segment unique, so counting bytes suffices.
//!
//! Chunks of a fragment never overlap: a chunk that would bring more bytes than the
//! fragment's total (a peer sending overlapping chunks under distinct sequence numbers) is
//! refused, so a fragment always comes out exactly `total` bytes long.
//!
//! A fragment is reassembled one of two ways, chosen at its first chunk: copied into one
//! buffer, or (when the edge offers to let its receive buffers be kept, and the fragment
//! needs few of them) as the list of the chunks where they arrived, so the PML reads them
//! there and the bytes cross memory once less.

use std::ops::Range;

use super::api::Piece;
use super::idmap::{KeyedIdMap, KeyedIds};
use super::seq::MAX_WINDOW;
use super::spare::Spares;
use super::wire::MAX_REASSEMBLY;

/// The most bytes of open fragments a correct sender can leave at a receiver: its fragments
/// are cut one after another into consecutive sequence numbers, and the receiver takes none
/// `MAX_WINDOW` or more past the first it misses, so every open fragment but the one holding
/// that first gap and the one reaching past the window's end lies inside the window; those
/// two are at most `MAX_REASSEMBLY` each. `data_mtu` bounds a chunk's payload.
pub fn open_limit(data_mtu: usize) -> u64 {
    MAX_WINDOW as u64 * data_mtu as u64 + 2 * u64::from(MAX_REASSEMBLY)
}

/// Most pieces a kept fragment may have: Open MPI's `MCA_BTL_DES_MAX_SEGMENTS`, the segments
/// one descriptor can carry to the PML.
pub const MAX_PIECES: usize = 16;

#[derive(Debug)]
enum Store {
    Copied(Vec<u8>),
    /// Pieces by offset.
    Pieces(Vec<(u32, Piece)>),
}

#[derive(Debug)]
struct Reassembly {
    tag: u8,
    total: u32,
    got: u32,
    store: Store,
}

/// How a chunk fits the fragments being reassembled.
#[derive(Debug, PartialEq, Eq)]
pub enum Fit {
    /// Its fragment is open with the same tag and total.
    Matches,
    /// Its fragment is open with another tag or total.
    Conflicts,
    /// No fragment of its id is open: as a new segment it opens one, which the open limit
    /// allows or not (a late copy of a finished fragment's chunk opens nothing).
    Opens { within_limit: bool },
}

/// A chunk that would bring its fragment more bytes than its total: it overlaps others.
#[derive(Debug, PartialEq, Eq)]
pub struct Overrun;

/// A fragment this chunk completed.
#[derive(Debug, PartialEq, Eq)]
pub enum Whole {
    Copied(u8, Vec<u8>),
    /// Tag, length, pieces in order, and how many of them were held.
    Pieces(u8, usize, Vec<Piece>, u32),
}

#[derive(Debug)]
pub struct Reassembler {
    /// The fragment of the latest chunk, kept out of the map: a peer sends its fragments'
    /// chunks one fragment after another, so nearly every chunk finds its fragment here
    /// without a hash (two lookups were about 190 instructions of a chunk's 950 on the
    /// receiver).
    last: Option<(u32, Reassembly)>,
    /// The others, by message id, which the sending peer chooses: hashed under a secret.
    frags: KeyedIdMap<u32, Reassembly>,
    /// Total bytes of the fragments open now, and the most allowed (`open_limit`): each first
    /// chunk sets its fragment's whole buffer aside, so forged first chunks of new ids
    /// would otherwise pin memory without bound.
    open: u64,
    limit: u64,
}

impl Reassembler {
    pub fn keyed(hash_key: u64, limit: u64) -> Reassembler {
        Reassembler {
            last: None,
            frags: KeyedIdMap::with_hasher(KeyedIds(hash_key)),
            open: 0,
            limit,
        }
    }

    /// How a chunk (id, tag, total) fits what was seen of its fragment. Asked before the
    /// sequence number is taken, so a refused chunk leaves nothing behind.
    pub fn fit(&self, id: u32, tag: u8, total: u32) -> Fit {
        let r = match &self.last {
            Some((l, r)) if *l == id => Some(r),
            _ => self.frags.get(&id),
        };
        match r {
            Some(r) if r.tag == tag && r.total == total => Fit::Matches,
            Some(_) => Fit::Conflicts,
            None => Fit::Opens {
                within_limit: self.open + u64::from(total) <= self.limit,
            },
        }
    }

    /// Stores one chunk (validated by `wire::parse`: offset + len <= total). `hold` offers to
    /// keep the datagram (its handle, and where `data` lies in it) instead of copying;
    /// `budget` is how many more buffers may be kept. Returns whether the datagram was kept,
    /// and the whole fragment when this chunk completed it; `Overrun` (nothing stored) when the
    /// chunk overlaps what the fragment already has.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        id: u32,
        tag: u8,
        total: u32,
        offset: u32,
        data: &[u8],
        hold: Option<(u64, Range<usize>)>,
        budget: u32,
        spares: &mut Spares,
    ) -> Result<(bool, Option<Whole>), Overrun> {
        let r = match self.last.as_mut().filter(|(l, _)| *l == id) {
            Some((_, r)) => r,
            None => {
                let r = self.frags.remove(&id).unwrap_or_else(|| {
                    self.open += u64::from(total);
                    // At most this many chunks (every chunk but the last is as long as the
                    // longest).
                    let pieces = (total as usize).div_ceil(data.len().max(1));
                    let keep = hold.is_some() && pieces <= MAX_PIECES && pieces as u32 <= budget;
                    Reassembly {
                        tag,
                        total,
                        got: 0,
                        // Every byte of a copy buffer is overwritten by exactly one chunk before
                        // delivery (the sequence layer made chunks unique and `got` counts
                        // them), so a spare's old bytes never show. A forged sender holding the
                        // job's key could still overlap chunks and leave a gap of exactly their
                        // overlap; like any forged in-window segment (docs/robustness.md) that
                        // takes an authenticated wire to stop.
                        store: if keep {
                            Store::Pieces(spares.piece_list())
                        } else {
                            Store::Copied(spares.filled(total as usize))
                        },
                    }
                });
                if let Some((l, before)) = self.last.take() {
                    self.frags.insert(l, before);
                }
                &mut self.last.insert((id, r)).1
            }
        };
        if r.got as usize + data.len() > r.total as usize {
            return Err(Overrun);
        }
        let mut held = false;
        match &mut r.store {
            Store::Copied(buf) => {
                let o = offset as usize;
                buf[o..o + data.len()].copy_from_slice(data);
            }
            Store::Pieces(pieces) => {
                let piece = match hold {
                    Some((handle, range)) if budget > 0 => {
                        held = true;
                        Piece::Held { handle, range }
                    }
                    _ => Piece::Owned(data.to_vec()),
                };
                pieces.push((offset, piece));
            }
        }
        r.got += data.len() as u32;
        if r.got < r.total {
            return Ok((held, None));
        }
        let (_, r) = self.last.take().expect("this chunk's fragment");
        self.open -= u64::from(r.total);
        let whole = match r.store {
            Store::Copied(buf) => Whole::Copied(r.tag, buf),
            Store::Pieces(mut by_offset) => {
                by_offset.sort_unstable_by_key(|p| p.0);
                let n = by_offset
                    .iter()
                    .filter(|p| matches!(p.1, Piece::Held { .. }))
                    .count() as u32;
                let mut pieces = spares.pieces();
                pieces.extend(by_offset.drain(..).map(|p| p.1));
                spares.give_piece_list(by_offset);
                Whole::Pieces(r.tag, r.total as usize, pieces, n)
            }
        };
        Ok((held, Some(whole)))
    }

    /// Forgets every fragment; returns the handles of the buffers that were kept.
    pub fn clear(&mut self) -> Vec<u64> {
        self.open = 0;
        let mut handles = Vec::new();
        for (_, r) in self.last.take().into_iter().chain(self.frags.drain()) {
            if let Store::Pieces(pieces) = r.store {
                handles.extend(pieces.into_iter().filter_map(|p| match p.1 {
                    Piece::Held { handle, .. } => Some(handle),
                    Piece::Owned(_) => None,
                }));
            }
        }
        handles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(total: usize, size: usize) -> Vec<(u32, Vec<u8>)> {
        let whole: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
        whole
            .chunks(size)
            .enumerate()
            .map(|(k, c)| ((k * size) as u32, c.to_vec()))
            .collect()
    }

    #[test]
    fn kept_pieces_come_out_in_order() {
        let mut r = Reassembler::keyed(0, u64::MAX);
        let mut spares = Spares::default();
        let cs = chunks(1000, 300);
        let order = [2, 0, 3, 1];
        let mut last = None;
        for (n, &k) in order.iter().enumerate() {
            let (off, d) = &cs[k];
            let (held, whole) = r
                .add(
                    7,
                    1,
                    1000,
                    *off,
                    d,
                    Some((k as u64, 40..40 + d.len())),
                    100,
                    &mut spares,
                )
                .unwrap();
            assert!(held);
            assert_eq!(whole.is_some(), n == 3);
            last = whole;
        }
        match last.unwrap() {
            Whole::Pieces(1, 1000, pieces, 4) => {
                let handles: Vec<_> = pieces
                    .iter()
                    .map(|p| match p {
                        Piece::Held { handle, .. } => *handle,
                        p => panic!("{p:?}"),
                    })
                    .collect();
                assert_eq!(handles, [0, 1, 2, 3]);
                assert_eq!(pieces.iter().map(Piece::len).sum::<usize>(), 1000);
            }
            w => panic!("{w:?}"),
        }
    }

    #[test]
    fn piece_lists_are_reused_from_fragment_to_fragment() {
        let mut r = Reassembler::keyed(0, u64::MAX);
        let mut spares = Spares::default();
        let cs = chunks(1000, 300);
        for id in 0..3 {
            let mut whole = None;
            for (k, (off, d)) in cs.iter().enumerate() {
                let hold = Some((k as u64, 0..d.len()));
                let (_, w) = r.add(id, 1, 1000, *off, d, hold, 100, &mut spares).unwrap();
                whole = w;
            }
            // The list by offset came back when the fragment completed; the list in order
            // went out with it (taken from the pool after the first fragment).
            assert_eq!(spares.lists_kept(), (1, 0), "fragment {id}");
            let Some(Whole::Pieces(_, 1000, mut pieces, 4)) = whole else {
                panic!("fragment {id} did not come out in pieces");
            };
            pieces.clear();
            spares.give_pieces(pieces);
            assert_eq!(spares.lists_kept(), (1, 1));
        }
    }

    #[test]
    fn too_many_pieces_or_no_budget_copy_instead() {
        let mut spares = Spares::default();
        for (size, budget) in [(10, 1000), (300, 3)] {
            let mut r = Reassembler::keyed(0, u64::MAX);
            let cs = chunks(1000, size);
            let mut out = None;
            for (k, (off, d)) in cs.iter().enumerate() {
                let (held, w) = r
                    .add(
                        1,
                        2,
                        1000,
                        *off,
                        d,
                        Some((k as u64, 0..d.len())),
                        budget,
                        &mut spares,
                    )
                    .unwrap();
                assert!(!held, "chunks of {size} with budget {budget}");
                out = w;
            }
            let want: Vec<u8> = cs.iter().flat_map(|c| c.1.clone()).collect();
            assert_eq!(out, Some(Whole::Copied(2, want)));
        }
    }

    #[test]
    fn chunk_without_handle_in_a_kept_fragment_is_copied_and_clear_releases() {
        let mut r = Reassembler::keyed(0, u64::MAX);
        let mut spares = Spares::default();
        let cs = chunks(900, 300);
        let mut add = |r: &mut Reassembler, id: u32, k: usize, hold: Option<u64>| {
            let offer = hold.map(|h| (h, 0..300));
            r.add(id, 0, 900, cs[k].0, &cs[k].1, offer, 10, &mut spares)
                .unwrap()
        };
        assert!(add(&mut r, 3, 0, Some(10)).0);
        assert!(!add(&mut r, 3, 1, None).0);
        assert!(add(&mut r, 4, 0, Some(11)).0);
        match add(&mut r, 3, 2, Some(12)).1.unwrap() {
            Whole::Pieces(0, 900, p, 2) => {
                assert_eq!(p[1], Piece::Owned(cs[1].1.clone()));
            }
            w => panic!("{w:?}"),
        }
        assert_eq!(r.clear(), vec![11], "fragment 4 was still open");
        assert!(r.clear().is_empty());
    }

    #[test]
    fn fragments_interleaved_chunk_by_chunk_each_come_out_whole() {
        let mut r = Reassembler::keyed(5, u64::MAX);
        let mut spares = Spares::default();
        let cs = chunks(1000, 100);
        let mut wholes = Vec::new();
        for (off, d) in &cs {
            for (id, tag) in [(1, 7), (2, 8)] {
                // Before its chunk a fragment is in the map (the other one's chunk came
                // last), except fragment 1 at the start: nothing of it was seen yet.
                if *off > 0 {
                    assert_eq!(r.fit(id, tag, 1000), Fit::Matches);
                    assert_eq!(r.fit(id, tag + 1, 1000), Fit::Conflicts, "another tag");
                    assert_eq!(r.fit(id, tag, 999), Fit::Conflicts, "another length");
                } else {
                    let within_limit = true;
                    assert_eq!(r.fit(id, tag, 1000), Fit::Opens { within_limit });
                }
                let (held, w) = r.add(id, tag, 1000, *off, d, None, 0, &mut spares).unwrap();
                assert!(!held);
                wholes.extend(w);
            }
        }
        let want: Vec<u8> = cs.iter().flat_map(|c| c.1.clone()).collect();
        assert_eq!(
            wholes,
            [Whole::Copied(7, want.clone()), Whole::Copied(8, want)]
        );
        assert!(
            matches!(r.fit(1, 0, 5), Fit::Opens { .. }),
            "a finished fragment is forgotten"
        );
        // The latest place answers too: fragment 3's chunk came last.
        r.add(3, 4, 1000, 0, &cs[0].1, None, 0, &mut spares)
            .unwrap();
        assert_eq!(r.fit(3, 4, 1000), Fit::Matches);
        assert_eq!(r.fit(3, 5, 1000), Fit::Conflicts);
        // A fragment still open in the latest place gives its kept buffers back too.
        assert!(
            r.add(9, 0, 1000, 0, &cs[0].1, Some((42, 0..100)), 10, &mut spares)
                .unwrap()
                .0
        );
        assert_eq!(r.clear(), vec![42]);
    }

    #[test]
    fn open_fragments_stay_within_the_limit_and_finished_ones_free_their_share() {
        let mut r = Reassembler::keyed(0, 2500);
        let mut spares = Spares::default();
        let cs = chunks(1000, 100);
        let opens = |within_limit| Fit::Opens { within_limit };
        for id in [1, 2] {
            assert_eq!(r.fit(id, 0, 1000), opens(true));
            r.add(id, 0, 1000, 0, &cs[0].1, None, 0, &mut spares)
                .unwrap();
        }
        // 2000 bytes open: another 1000 would pass the limit, 500 would not.
        assert_eq!(r.fit(3, 0, 1000), opens(false));
        assert_eq!(r.fit(3, 0, 500), opens(true));
        assert_eq!(r.fit(1, 0, 1000), Fit::Matches, "an open fragment goes on");
        for (off, d) in &cs[1..] {
            r.add(1, 0, 1000, *off, d, None, 0, &mut spares).unwrap();
        }
        assert_eq!(r.fit(3, 0, 1000), opens(true), "fragment 1 finished");
        r.clear();
        assert_eq!(r.fit(3, 0, 2500), opens(true), "cleared");
    }

    #[test]
    fn overlapping_chunks_are_refused_so_a_fragment_is_exactly_its_total() {
        // Chunk 0 again under another sequence number, once the fragment has all but its
        // last chunk: both ways of reassembling refuse it, keep nothing of it, and the
        // fragment still completes with the right bytes when its last chunk comes.
        let cs = chunks(1000, 300);
        let want: Vec<u8> = cs.iter().flat_map(|c| c.1.clone()).collect();
        for hold in [false, true] {
            let mut r = Reassembler::keyed(0, u64::MAX);
            let mut spares = Spares::default();
            let mut add = |r: &mut Reassembler, k: usize, h: u64| {
                let offer = hold.then(|| (h, 0..cs[k].1.len()));
                r.add(5, 1, 1000, cs[k].0, &cs[k].1, offer, 10, &mut spares)
            };
            for k in 0..3 {
                assert_eq!(add(&mut r, k, k as u64).unwrap().1, None);
            }
            assert_eq!(add(&mut r, 0, 9), Err(Overrun), "hold {hold}");
            let whole = add(&mut r, 3, 3).unwrap().1.expect("complete");
            let got: Vec<u8> = match whole {
                Whole::Copied(1, d) => d,
                Whole::Pieces(1, 1000, pieces, 4) => pieces
                    .iter()
                    .flat_map(|p| match p {
                        Piece::Held { handle, .. } => cs[*handle as usize].1.clone(),
                        Piece::Owned(v) => v.clone(),
                    })
                    .collect(),
                w => panic!("hold {hold}: {w:?}"),
            };
            assert_eq!(got, want, "hold {hold}");
        }
    }
}
