//! Byte offsets of every header field and little-endian accessors.

pub const OFF_VERSION: usize = 0;
pub const OFF_KIND: usize = 1;
pub const OFF_FLAGS: usize = 2;
pub const OFF_TAG: usize = 3;
pub const OFF_SEQ: usize = 4;
pub const OFF_ACK: usize = 6;
pub const OFF_SRC: usize = 8;
pub const OFF_KEY: usize = 16;
pub const OFF_PAYLOAD_LEN: usize = 24;
pub const OFF_SND_NEXT: usize = 26;
pub const OFF_SACK: usize = 28;
/// High 16 bits of the extended (32-bit) `seq`, `ack` and `snd_next` (version 2).
pub const OFF_SEQ_EPOCH: usize = 32;
pub const OFF_ACK_EPOCH: usize = 34;
pub const OFF_SND_NEXT_EPOCH: usize = 36;
/// Low 16 bits of a duplicate the sender of this ACK received (flag `DSACK`; version 3).
pub const OFF_DSACK: usize = 38;
/// The sender's transmission number of a data-channel segment (version 4).
pub const OFF_TX: usize = 40;
/// The highest transmission number the ACK's sender has received (flag `ACK`; version 4).
pub const OFF_ECHO: usize = 44;
pub const OFF_ID: usize = 48;
pub const OFF_TOTAL: usize = 52;
pub const OFF_OFFSET: usize = 56;
pub const OFF_RESERVED1: usize = 60;
pub const OFF_REGION: usize = 64;
pub const OFF_REGION_OFFSET: usize = 72;

/// Flags bit 0: the `ack`/`sack` fields carry acknowledgement information.
pub const FLAG_ACK: u8 = 1;
/// Flags bit 1: bytes 38..40 name a segment received twice since the previous ACK (D-SACK).
pub const FLAG_DSACK: u8 = 2;
/// Flags bit 2 (version 5, standalone `Ack` only): the ACK's sender is holding its receive
/// side (its application is away from MPI and has left it as much as it may buffer): it took
/// none of the segments that made it answer, and will take their retransmissions once it
/// is back. Tells the peer it is alive without acknowledging anything (docs/wire.md §5b).
pub const FLAG_HELD: u8 = 4;

// The accessors are always inlined: `parse` and `emit` pass fixed-size header views, so with
// the offsets constant every bounds check folds away. Left to LLVM, `get32` stayed a call
// with four checks; the views and the inlining together took `parse` of one chunk from 211
// instructions to 99-114 (callgrind, two builds; docs/levers.md, twentieth session).
#[inline(always)]
pub fn get16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
#[inline(always)]
pub fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
#[inline(always)]
pub fn get64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
#[inline(always)]
pub fn put16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline(always)]
pub fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline(always)]
pub fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
