//! The hotel: retransmit timers with O(1) check-in, check-out and expiry.
//!
//! A fixed set of rooms, each on a doubly linked list kept in deadline order, plus a stack of
//! free rooms. Check-in appends at the tail, which keeps the list ordered because a deadline
//! earlier than the tail's is raised to the tail's (the retransmit timeout of one peer only
//! grows by backoff or shrinks slowly with RTT samples, so the clamp delays a timer by at most
//! the RTO's decrease, and one set again from the peer's latest acknowledgement by at most the
//! time since that). Check-out unlinks in O(1); a stale `RoomId` (the room was vacated by
//! expiry or re-let since) is recognised by its generation and ignored, as `opal_hotel`'s
//! "late checkout fails gracefully". Expiry pops from the head.
//!
//! A peer's hotel starts with a room per window slot, which is all a segment in flight needs
//! (it holds one room at most). Check-in still never fails: with every room taken it builds
//! another, since a segment left without a timer would wait for its ACK forever if lost.

use super::api::Instant;

const NIL: u32 = u32::MAX;

/// A room key: index plus the generation it was let under.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoomId {
    pub idx: u32,
    pub gen: u32,
}

#[derive(Clone, Debug)]
struct Room {
    occupant: u32,
    deadline: Instant,
    prev: u32,
    next: u32,
    gen: u32,
    occupied: bool,
}

#[derive(Clone, Debug)]
pub struct Hotel {
    rooms: Vec<Room>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

impl Hotel {
    pub fn new(rooms: usize) -> Hotel {
        let mut h = Hotel {
            rooms: Vec::with_capacity(rooms),
            free: Vec::with_capacity(rooms),
            head: NIL,
            tail: NIL,
        };
        for _ in 0..rooms {
            h.build_room();
        }
        h.free.extend((0..rooms as u32).rev());
        h
    }

    pub fn capacity(&self) -> usize {
        self.rooms.len()
    }

    pub fn len(&self) -> usize {
        self.rooms.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Lets a room to `occupant` until `deadline` (raised to the latest deadline present).
    pub fn checkin(&mut self, occupant: u32, deadline: Instant) -> RoomId {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => self.build_room(),
        };
        let deadline = if self.tail != NIL {
            deadline.max(self.rooms[self.tail as usize].deadline)
        } else {
            deadline
        };
        let tail = self.tail;
        let r = &mut self.rooms[idx as usize];
        r.occupant = occupant;
        r.deadline = deadline;
        r.prev = tail;
        r.next = NIL;
        r.gen = r.gen.wrapping_add(1);
        r.occupied = true;
        let gen = r.gen;
        if tail != NIL {
            self.rooms[tail as usize].next = idx;
        } else {
            self.head = idx;
        }
        self.tail = idx;
        RoomId { idx, gen }
    }

    #[cold]
    fn build_room(&mut self) -> u32 {
        self.rooms.push(Room {
            occupant: 0,
            deadline: Instant(0),
            prev: NIL,
            next: NIL,
            gen: 0,
            occupied: false,
        });
        self.rooms.len() as u32 - 1
    }

    /// Vacates a room; returns its occupant, or `None` for a stale or unknown id.
    pub fn checkout(&mut self, id: RoomId) -> Option<u32> {
        let r = self.rooms.get(id.idx as usize)?;
        if !r.occupied || r.gen != id.gen {
            return None;
        }
        Some(self.vacate(id.idx))
    }

    fn vacate(&mut self, idx: u32) -> u32 {
        let (prev, next, occ) = {
            let r = &mut self.rooms[idx as usize];
            r.occupied = false;
            (r.prev, r.next, r.occupant)
        };
        if prev != NIL {
            self.rooms[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.rooms[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        self.free.push(idx);
        occ
    }

    /// The earliest room: (id, occupant, deadline).
    pub fn peek(&self) -> Option<(RoomId, u32, Instant)> {
        if self.head == NIL {
            return None;
        }
        let r = &self.rooms[self.head as usize];
        Some((
            RoomId {
                idx: self.head,
                gen: r.gen,
            },
            r.occupant,
            r.deadline,
        ))
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.peek().map(|p| p.2)
    }

    /// Evicts the earliest room if its deadline is at or before `now`; returns its occupant.
    pub fn pop_expired(&mut self, now: Instant) -> Option<u32> {
        let (id, _, d) = self.peek()?;
        if d > now {
            return None;
        }
        Some(self.vacate(id.idx))
    }

    /// Vacates every room (generations advance, so outstanding ids become stale).
    pub fn clear(&mut self) {
        while let Some((id, _, _)) = self.peek() {
            self.vacate(id.idx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Oracle: a plain vector of (effective deadline, checkin order, occupant).
    #[test]
    fn matches_sorted_vec_oracle() {
        let mut x: u64 = 42;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..50 {
            let cap = 1 + (rnd() % 64) as usize;
            let mut h = Hotel::new(cap);
            let mut oracle: Vec<(Instant, u64, u32, RoomId)> = Vec::new();
            let mut stale: Vec<RoomId> = Vec::new();
            let mut now = 0u64;
            let mut order = 0u64;
            let mut peak = 0;
            for _ in 0..2_000 {
                match rnd() % 5 {
                    0 | 1 => {
                        let occ = (rnd() % 1000) as u32;
                        let dl = Instant(now + rnd() % 100);
                        let r = h.checkin(occ, dl);
                        let max = oracle.iter().map(|o| o.0).max().unwrap_or(Instant(0));
                        order += 1;
                        oracle.push((dl.max(max), order, occ, r));
                    }
                    2 => {
                        if !oracle.is_empty() {
                            let i = (rnd() as usize) % oracle.len();
                            let o = oracle.remove(i);
                            assert_eq!(h.checkout(o.3), Some(o.2));
                            stale.push(o.3);
                        }
                    }
                    3 => {
                        if let Some(&s) = stale.get((rnd() as usize) % (stale.len().max(1))) {
                            assert_eq!(h.checkout(s), None, "late checkout is a no-op");
                        }
                    }
                    _ => {
                        now += rnd() % 30;
                        oracle.sort_by_key(|o| (o.0, o.1));
                        while let Some(occ) = h.pop_expired(Instant(now)) {
                            let o = oracle.remove(0);
                            assert!(o.0 <= Instant(now));
                            assert_eq!(o.2, occ);
                            stale.push(o.3);
                        }
                        assert!(oracle.first().is_none_or(|o| o.0 > Instant(now)));
                    }
                }
                assert_eq!(h.len(), oracle.len(), "round {round}");
                peak = peak.max(oracle.len());
                assert_eq!(
                    h.capacity(),
                    cap.max(peak),
                    "a room is built only when all are let"
                );
                let min = oracle.iter().map(|o| (o.0, o.1)).min();
                assert_eq!(h.next_deadline(), min.map(|m| m.0));
            }
            h.clear();
            assert!(h.is_empty());
            for s in stale.iter().chain(oracle.iter().map(|o| &o.3)) {
                assert_eq!(h.checkout(*s), None);
            }
        }
    }
}
