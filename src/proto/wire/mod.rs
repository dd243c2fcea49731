//! The versioned little-endian wire format (documented byte by byte in `docs/wire.md`).
//!
//! Every datagram starts with a 48-byte base header; sequenced kinds other than `Frag` add a
//! 16-byte message extension (id, total, offset) and the two region kinds a further 16 bytes
//! (region, region offset). `parse` validates every field against the datagram's length and
//! the kind's rules and never panics; `Header::emit` is its exact inverse.
//!
//! Sequence numbers, cumulative ACKs and `snd_next` are 32-bit *extended* values in `Header`:
//! the low 16 bits travel where version 1 had them, the high 16 bits (the epoch: how often
//! the 16-bit space has wrapped) in the base header's bytes 32..38. A datagram replayed one
//! or more wraps later thus carries an extended value 65536·k away from the live one and is
//! rejected by the windows instead of being taken for a fresh segment or ACK.

mod field;

pub use field::*;

/// Wire format version written in byte 0 of every datagram.
/// Version 1 (16-bit sequence space without epochs) is rejected: its replays after a wrap
/// are indistinguishable from fresh segments, and its header is 8 bytes shorter than version
/// 2's. Version 2
/// is version 3 without duplicate reports (D-SACK): rejected too, since a mixed job would
/// work but never adapt to reordering (docs/wire.md §9). Version 3 is version 4 without
/// transmission numbers and their echo: its ACKs could never vouch for a repair. Version 4 is
/// version 5 without the `HELD` flag: a version 5 rank holding its receive side would look
/// dead to it (docs/wire.md §9).
pub const VERSION: u8 = 5;
/// Base header length (every datagram).
pub const BASE_LEN: usize = 48;
/// Base header + message extension (Chunk, GetReply, PutRefuse, GetRefuse).
pub const MSG_LEN: usize = 64;
/// Base header + message extension + region extension (Put, GetReq).
pub const REGION_LEN: usize = 80;
/// Largest chunked fragment a receiver reassembles (bounce memory allocated per fragment).
pub const MAX_REASSEMBLY: u32 = 1 << 26;
/// Extra SACK bitmap bytes an ACK may carry after its header (4096-bit window minus the 32
/// bits in the header, rounded down to bytes).
pub const MAX_ACK_MAP: usize = 508;

/// Packet type codes (byte 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Standalone acknowledgement; not sequenced.
    Ack = 1,
    /// A whole PML fragment in one datagram.
    Frag = 2,
    /// One piece of a PML fragment larger than one datagram.
    Chunk = 3,
    /// Emulated RDMA write data.
    Put = 4,
    /// Emulated RDMA read request.
    GetReq = 5,
    /// Emulated RDMA read reply data.
    GetReply = 6,
    /// The target refused (part of) a PUT.
    PutRefuse = 7,
    /// The target refused a GET.
    GetRefuse = 8,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Ack,
            2 => Kind::Frag,
            3 => Kind::Chunk,
            4 => Kind::Put,
            5 => Kind::GetReq,
            6 => Kind::GetReply,
            7 => Kind::PutRefuse,
            8 => Kind::GetRefuse,
            _ => return None,
        })
    }

    /// Header length of this kind.
    pub fn header_len(self) -> usize {
        match self {
            Kind::Ack | Kind::Frag => BASE_LEN,
            Kind::Chunk | Kind::GetReply | Kind::PutRefuse | Kind::GetRefuse => MSG_LEN,
            Kind::Put | Kind::GetReq => REGION_LEN,
        }
    }
}

/// Acknowledgement information: cumulative ACK plus the first 32 selective-ACK bits.
/// `cum` and `snd_next` are extended (epoch in the high 16 bits).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AckInfo {
    /// Every segment up to and including `cum` has been received.
    pub cum: u32,
    /// Bit i set: segment `cum + 2 + i` has been received (`cum + 1` is missing by definition).
    pub sack: u32,
    /// The sender's next sequence number when it wrote this acknowledgement: every segment
    /// it had sent (or reserved) by then is below. Acknowledgements are only final for an
    /// emulated PUT once the receiver of this ACK has received everything below it (a
    /// refusal may be among them).
    pub snd_next: u32,
    /// Low 16 bits of a segment the ACK's sender received twice since its previous ACK
    /// (D-SACK): tells the peer that a retransmission was spurious.
    pub dsack: Option<u16>,
    /// The highest transmission number (`Header::tx`) the ACK's sender had received from us
    /// when it wrote this ACK (wrapping order; 0 if none). An ACK of a resent segment whose
    /// latest transmission is above it was written before that transmission arrived: it is
    /// the ACK of an earlier one, late, and says nothing about what was sent after that.
    pub echo: u32,
    /// The ACK's sender holds its receive side (`FLAG_HELD`, standalone `Ack` only): it
    /// dropped the new segments that made it answer, unacknowledged. Proof that it is alive,
    /// not acknowledgement progress (docs/wire.md §5b).
    pub held: bool,
}

/// A parsed (or to-be-emitted) header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// PML tag (Frag and Chunk only; zero otherwise).
    pub tag: u8,
    /// Extended sequence number: epoch << 16 | 16-bit sequence number (zero for Ack).
    pub seq: u32,
    /// Transmission number of a data-channel segment (every transmission of a sequenced
    /// segment to a peer takes the next one); 0 on the priority channel, whose datagrams may
    /// overtake earlier data ones, and in `Ack`. Echoed in `AckInfo::echo`.
    pub tx: u32,
    pub ack: Option<AckInfo>,
    /// Sender's module identity.
    pub src: u64,
    /// Receiver's job key.
    pub key: u64,
    pub payload_len: u16,
    /// Message id (chunked fragment id, put id, get request id); zero for Ack and Frag.
    pub id: u32,
    /// Total bytes of the message (Chunk, Put, GetReply), or the requested length (GetReq).
    pub total: u32,
    /// Offset of this segment's payload inside the message.
    pub offset: u32,
    /// Target region (Put: at the receiver; GetReq: at the receiver, to be read).
    pub region: u64,
    /// Base offset inside `region` (the message's byte 0 lands there).
    pub region_offset: u64,
}

/// Why a datagram failed to parse.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    Short,
    Version,
    Kind,
    Flags,
    Reserved,
    Length,
    Field,
}

impl Header {
    /// A header of `kind` with every other field zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            tag: 0,
            seq: 0,
            tx: 0,
            ack: None,
            src: 0,
            key: 0,
            payload_len: 0,
            id: 0,
            total: 0,
            offset: 0,
            region: 0,
            region_offset: 0,
        }
    }

    /// Header length in bytes (depends on the kind only).
    pub fn header_len(&self) -> usize {
        self.kind.header_len()
    }

    /// Writes the header into `buf[..self.header_len()]`; returns the header length.
    /// `buf` must be at least `self.header_len()` bytes (checked by the caller).
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let n = self.header_len();
        // Fixed-size views: every field write below then needs no bounds check of its own.
        let (b, rest) = buf[..n]
            .split_first_chunk_mut::<BASE_LEN>()
            .expect("n >= BASE_LEN");
        b[OFF_VERSION] = VERSION;
        b[OFF_KIND] = self.kind as u8;
        b[OFF_FLAGS] = match self.ack {
            None => 0,
            Some(a) => {
                FLAG_ACK
                    | if a.dsack.is_some() { FLAG_DSACK } else { 0 }
                    | if a.held { FLAG_HELD } else { 0 }
            }
        };
        b[OFF_TAG] = self.tag;
        let ack = self.ack.unwrap_or_default();
        put_split(b, OFF_SEQ, OFF_SEQ_EPOCH, self.seq);
        put_split(b, OFF_ACK, OFF_ACK_EPOCH, ack.cum);
        put64(b, OFF_SRC, self.src);
        put64(b, OFF_KEY, self.key);
        put16(b, OFF_PAYLOAD_LEN, self.payload_len);
        put_split(b, OFF_SND_NEXT, OFF_SND_NEXT_EPOCH, ack.snd_next);
        put32(b, OFF_SACK, ack.sack);
        put16(b, OFF_DSACK, ack.dsack.unwrap_or(0));
        put32(b, OFF_TX, self.tx);
        put32(b, OFF_ECHO, ack.echo);
        // The region extension follows the message extension (a header has neither, the first,
        // or both).
        if let Some((m, rest)) = rest.split_first_chunk_mut::<{ MSG_LEN - BASE_LEN }>() {
            put32(m, OFF_ID - BASE_LEN, self.id);
            put32(m, OFF_TOTAL - BASE_LEN, self.total);
            put32(m, OFF_OFFSET - BASE_LEN, self.offset);
            put32(m, OFF_RESERVED1 - BASE_LEN, 0);
            if let Some(r) = rest.first_chunk_mut::<{ REGION_LEN - MSG_LEN }>() {
                put64(r, OFF_REGION - MSG_LEN, self.region);
                put64(r, OFF_REGION_OFFSET - MSG_LEN, self.region_offset);
            }
        }
        n
    }
}

/// Parses and validates one datagram. On success returns the header and the payload's byte
/// range inside `dg`. Trailing bytes after the payload (link padding) are ignored.
pub fn parse(dg: &[u8]) -> Result<(Header, core::ops::Range<usize>), ParseError> {
    // Fixed-size views: the field reads below then need no bounds checks of their own.
    let Some((b, rest)) = dg.split_first_chunk::<BASE_LEN>() else {
        return Err(ParseError::Short);
    };
    if b[OFF_VERSION] != VERSION {
        return Err(ParseError::Version);
    }
    let kind = Kind::from_u8(b[OFF_KIND]).ok_or(ParseError::Kind)?;
    let flags = b[OFF_FLAGS];
    // DSACK and HELD qualify acknowledgement information: never without ACK.
    if flags & !(FLAG_ACK | FLAG_DSACK | FLAG_HELD) != 0 || (flags != 0 && flags & FLAG_ACK == 0) {
        return Err(ParseError::Flags);
    }
    let hl = kind.header_len();
    if dg.len() < hl {
        return Err(ParseError::Short);
    }
    let mut h = Header::new(kind);
    h.tag = b[OFF_TAG];
    h.seq = get_split(b, OFF_SEQ, OFF_SEQ_EPOCH);
    let cum = get_split(b, OFF_ACK, OFF_ACK_EPOCH);
    let sack = get32(b, OFF_SACK);
    let snd_next = get_split(b, OFF_SND_NEXT, OFF_SND_NEXT_EPOCH);
    let dsack = get16(b, OFF_DSACK);
    h.tx = get32(b, OFF_TX);
    let echo = get32(b, OFF_ECHO);
    if flags & FLAG_DSACK == 0 && dsack != 0 {
        return Err(ParseError::Reserved);
    }
    h.ack = if flags & FLAG_ACK != 0 {
        Some(AckInfo {
            cum,
            sack,
            snd_next,
            dsack: (flags & FLAG_DSACK != 0).then_some(dsack),
            echo,
            held: flags & FLAG_HELD != 0,
        })
    } else {
        if cum != 0 || sack != 0 || snd_next != 0 || echo != 0 {
            return Err(ParseError::Reserved);
        }
        None
    };
    h.src = get64(b, OFF_SRC);
    h.key = get64(b, OFF_KEY);
    h.payload_len = get16(b, OFF_PAYLOAD_LEN);
    // The two extension views below cannot fail (`dg.len() >= hl` was checked above); `Short`
    // keeps the path free of panics all the same.
    if hl >= MSG_LEN {
        let (m, rest) = rest
            .split_first_chunk::<{ MSG_LEN - BASE_LEN }>()
            .ok_or(ParseError::Short)?;
        h.id = get32(m, OFF_ID - BASE_LEN);
        h.total = get32(m, OFF_TOTAL - BASE_LEN);
        h.offset = get32(m, OFF_OFFSET - BASE_LEN);
        if get32(m, OFF_RESERVED1 - BASE_LEN) != 0 {
            return Err(ParseError::Reserved);
        }
        // A region extension only ever follows a message extension.
        if hl >= REGION_LEN {
            let r = rest
                .first_chunk::<{ REGION_LEN - MSG_LEN }>()
                .ok_or(ParseError::Short)?;
            h.region = get64(r, OFF_REGION - MSG_LEN);
            h.region_offset = get64(r, OFF_REGION_OFFSET - MSG_LEN);
        }
    }
    let plen = h.payload_len as usize;
    let end = hl + plen;
    if dg.len() < end {
        return Err(ParseError::Length);
    }
    validate(&h)?;
    Ok((h, hl..end))
}

/// Per-kind field rules (everything `parse` checks beyond lengths and reserved bytes).
fn validate(h: &Header) -> Result<(), ParseError> {
    let plen = h.payload_len as u64;
    let in_bounds = |h: &Header| (h.offset as u64) + plen <= h.total as u64;
    // A held receiver says so only in a standalone ACK: riding a segment, the flag would
    // contradict the segment's being sent at all (a held rank may still transmit, but the
    // ACKs on its segments are ordinary ones).
    if h.kind != Kind::Ack && h.ack.is_some_and(|a| a.held) {
        return Err(ParseError::Field);
    }
    let ok = match h.kind {
        Kind::Ack => {
            h.ack.is_some()
                && h.seq == 0
                && h.tx == 0
                && h.tag == 0
                && h.payload_len as usize <= MAX_ACK_MAP
        }
        Kind::Frag => true,
        Kind::Chunk => h.id != 0 && h.total > 0 && h.total <= MAX_REASSEMBLY && in_bounds(h),
        Kind::Put => {
            h.tag == 0
                && h.id != 0
                && in_bounds(h)
                && h.region_offset.checked_add(h.total as u64).is_some()
        }
        Kind::GetReq => {
            h.tag == 0
                && h.id != 0
                && plen == 0
                && h.total <= MAX_REASSEMBLY
                && h.offset == 0
                && h.region_offset.checked_add(h.total as u64).is_some()
        }
        // Same limit as Chunk and GetReq: the origin takes no larger answer.
        Kind::GetReply => h.tag == 0 && h.id != 0 && h.total <= MAX_REASSEMBLY && in_bounds(h),
        Kind::PutRefuse | Kind::GetRefuse => {
            h.tag == 0 && h.id != 0 && plen == 0 && h.total == 0 && h.offset == 0
        }
    };
    if ok {
        Ok(())
    } else {
        Err(ParseError::Field)
    }
}

/// An extended 32-bit value stored as its low half at `lo` and its epoch at `hi`.
#[inline(always)]
fn put_split(b: &mut [u8], lo: usize, hi: usize, v: u32) {
    put16(b, lo, v as u16);
    put16(b, hi, (v >> 16) as u16);
}

#[inline(always)]
fn get_split(b: &[u8], lo: usize, hi: usize) -> u32 {
    get16(b, lo) as u32 | (get16(b, hi) as u32) << 16
}

#[cfg(test)]
mod tests;
