//! The datagrams agents exchange over UDP: a fixed 40-byte header, then zero padding up to the
//! size being probed. Little-endian, this project's own format (documented in
//! `docs/connectivity.md`). Decoding never trusts the bytes.
use std::net::Ipv4Addr;

/// Bytes of the header; also the size of the small probe and of every ACK.
pub const HEADER_LEN: usize = 40;
/// Format version carried in every datagram; a different version is ignored (not echoed).
pub const PROBE_VERSION: u8 = 1;
/// Magic of a probe (originator to target).
pub const MAGIC_PING: u64 = 0x7573_6e69_6352_5331; // "usnicRS1"
/// Magic of an ACK (target back to originator).
pub const MAGIC_ACK: u64 = 0x7573_6e69_6341_4b31; // "usnicAK1"

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Ping = 1,
    Ack = 2,
}

/// The header: who sent the probe, and how big the probe was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// The originator's listener (address and port), as it believes it is.
    pub src_ipv4: Ipv4Addr,
    pub src_port: u16,
    /// Size of the probe datagram (an ACK repeats the probe's size; the ACK itself is 40 bytes).
    pub size: u32,
    /// Which send of the probe this is (1 = first), for logs only.
    pub attempt: u32,
}

impl Header {
    /// A datagram of `total` bytes (>= HEADER_LEN) carrying this header.
    pub fn encode(&self, total: usize) -> Vec<u8> {
        let mut b = vec![0u8; total.max(HEADER_LEN)];
        b[0] = self.kind as u8;
        b[1] = PROBE_VERSION;
        b[4..8].copy_from_slice(&self.src_ipv4.octets());
        b[8..10].copy_from_slice(&self.src_port.to_le_bytes());
        let magic = match self.kind {
            Kind::Ping => MAGIC_PING,
            Kind::Ack => MAGIC_ACK,
        };
        b[16..24].copy_from_slice(&magic.to_le_bytes());
        b[32..36].copy_from_slice(&self.size.to_le_bytes());
        b[36..40].copy_from_slice(&self.attempt.to_le_bytes());
        b
    }

    /// Parses `bytes` (the whole datagram as received). A probe must be exactly as long as it
    /// says; an ACK is exactly a header.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        if bytes.len() < HEADER_LEN {
            return Err(format!("short datagram ({} bytes)", bytes.len()));
        }
        if bytes[1] != PROBE_VERSION {
            return Err(format!("version {} (expected {PROBE_VERSION})", bytes[1]));
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let mut m = [0u8; 8];
        m.copy_from_slice(&bytes[16..24]);
        let magic = u64::from_le_bytes(m);
        let kind = match (bytes[0], magic) {
            (1, MAGIC_PING) => Kind::Ping,
            (2, MAGIC_ACK) => Kind::Ack,
            (k, m) => return Err(format!("type {k} with magic {m:#x}")),
        };
        let size = u32_at(32);
        let expected = match kind {
            Kind::Ping => size as usize,
            Kind::Ack => HEADER_LEN,
        };
        if bytes.len() != expected {
            return Err(format!(
                "{kind:?} of {} bytes says size {size}",
                bytes.len()
            ));
        }
        Ok(Header {
            kind,
            src_ipv4: Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]),
            src_port: u16::from_le_bytes([bytes[8], bytes[9]]),
            size,
            attempt: u32_at(36),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let h = Header {
            kind: Kind::Ping,
            src_ipv4: Ipv4Addr::new(10, 1, 2, 3),
            src_port: 4242,
            size: 1472,
            attempt: 3,
        };
        let b = h.encode(1472);
        assert_eq!(b.len(), 1472);
        assert_eq!(Header::decode(&b).unwrap(), h);
        // Truncated on the way: the size no longer matches.
        assert!(Header::decode(&b[..1000]).is_err());
        assert!(Header::decode(&b[..10]).is_err());
        let mut bad = b.clone();
        bad[16] ^= 1;
        assert!(Header::decode(&bad).is_err());
        let ack = Header {
            kind: Kind::Ack,
            ..h
        }
        .encode(HEADER_LEN);
        assert_eq!(Header::decode(&ack).unwrap().size, 1472);
    }
}
