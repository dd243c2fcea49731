//! Operations queued for a peer (fragments, puts, get requests and replies, refusals) and how
//! they are cut into segments.

use super::api::Cookie;
use super::payload::Payload;
use super::wire::{Kind, BASE_LEN, MSG_LEN, REGION_LEN};

#[derive(Clone, Debug)]
pub enum OpKind {
    /// A PML fragment; `chunked` when it does not fit one datagram.
    Send {
        tag: u8,
        chunked: bool,
    },
    Put {
        region: u64,
        offset: u64,
    },
    GetReq {
        region: u64,
        offset: u64,
    },
    GetReply,
    PutRefuse,
    GetRefuse,
}

/// One operation: its bytes stay here until every segment is acknowledged, so retransmissions
/// are rebuilt from them (no per-segment copy is kept).
#[derive(Debug)]
pub struct Op {
    pub kind: OpKind,
    pub data: Payload,
    pub cookie: Cookie,
    /// Message id on the wire (fragment id, put id, get request id); 0 for single frags.
    pub id: u32,
    /// Bytes of the message (for GetReq: the requested length).
    pub total: u32,
    /// Next byte to cut into a segment.
    pub next_off: u32,
    /// Segments sent and not yet acknowledged.
    pub segs_out: u32,
    /// Every segment has been sent at least once.
    pub all_sent: bool,
    /// Completion already reported (a refused put keeps its segments until acknowledged, a
    /// released send until its copy is).
    pub reported: bool,
    /// When lent bytes sent whole are copied and reported if still unacknowledged
    /// (`Config::lent_hold`); also tells this op's entry in `Peer::lent_q` from a later op's
    /// in the same slot.
    pub release_at: Option<crate::proto::api::Instant>,
    /// Per channel, the datagram count (`Engine::posted`) that includes the last datagram
    /// posted with a body read from this op's bytes in place: they may be released once the
    /// edge has completed as many.
    pub tx_mark: [u64; 2],
}

impl Op {
    pub fn wire_kind(&self) -> Kind {
        match self.kind {
            OpKind::Send { chunked: false, .. } => Kind::Frag,
            OpKind::Send { chunked: true, .. } => Kind::Chunk,
            OpKind::Put { .. } => Kind::Put,
            OpKind::GetReq { .. } => Kind::GetReq,
            OpKind::GetReply => Kind::GetReply,
            OpKind::PutRefuse => Kind::PutRefuse,
            OpKind::GetRefuse => Kind::GetRefuse,
        }
    }

    /// Payload bytes available to one segment of this op in a datagram of `mtu` bytes.
    pub fn seg_capacity(&self, mtu: usize) -> u32 {
        let hl = match self.wire_kind() {
            Kind::Ack | Kind::Frag => BASE_LEN,
            Kind::Chunk | Kind::GetReply | Kind::PutRefuse | Kind::GetRefuse => MSG_LEN,
            Kind::Put | Kind::GetReq => REGION_LEN,
        };
        (mtu.saturating_sub(hl)).min(u16::MAX as usize) as u32
    }

    /// The next segment to cut: (offset, len). Zero-length ops have one empty segment.
    pub fn next_segment(&self, mtu: usize) -> (u32, u32) {
        let cap = self.seg_capacity(mtu);
        let len = match self.kind {
            OpKind::GetReq { .. } | OpKind::PutRefuse | OpKind::GetRefuse => 0,
            _ => (self.total - self.next_off).min(cap),
        };
        (self.next_off, len)
    }

    /// Records that (off, len) was cut; returns true when the op has nothing left to cut.
    pub fn advance(&mut self, len: u32) -> bool {
        self.next_off += len;
        self.segs_out += 1;
        let done = match self.kind {
            OpKind::GetReq { .. } | OpKind::PutRefuse | OpKind::GetRefuse => true,
            _ => self.next_off >= self.total,
        };
        if done {
            self.all_sent = true;
        }
        done
    }

    pub fn is_complete(&self) -> bool {
        self.all_sent && self.segs_out == 0
    }
}

/// A slab of ops with a free list (indices are stable while the op lives).
#[derive(Debug, Default)]
pub struct OpSlab {
    slots: Vec<Option<Op>>,
    free: Vec<u32>,
    live: usize,
}

impl OpSlab {
    pub fn insert(&mut self, op: Op) -> u32 {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(op);
            i
        } else {
            self.slots.push(Some(op));
            (self.slots.len() - 1) as u32
        }
    }

    pub fn get(&self, i: u32) -> Option<&Op> {
        self.slots.get(i as usize).and_then(|o| o.as_ref())
    }

    pub fn get_mut(&mut self, i: u32) -> Option<&mut Op> {
        self.slots.get_mut(i as usize).and_then(|o| o.as_mut())
    }

    pub fn remove(&mut self, i: u32) -> Option<Op> {
        let op = self.slots.get_mut(i as usize)?.take()?;
        self.live -= 1;
        self.free.push(i);
        Some(op)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Op> {
        self.slots.iter_mut().flatten()
    }

    pub fn live(&self) -> usize {
        self.live
    }

    /// Removes every op, in index order.
    pub fn drain_all(&mut self) -> Vec<Op> {
        let mut out = Vec::new();
        for i in 0..self.slots.len() {
            if let Some(op) = self.remove(i as u32) {
                out.push(op);
            }
        }
        out
    }
}
