//! Counters exported as MPI_T performance variables (`btl_usnic_<name>`, summed over modules),
//! named after the C original's where the meaning is the same.
use core::ffi::c_char;

use crate::proto::Stats;

/// (pvar name, description, reader). Names end in NUL for C.
pub type Counter = (&'static str, &'static str, fn(&Stats) -> u64);

pub const COUNTERS: &[Counter] = &[
    (
        "num_total_sends\0",
        "Datagrams sent (first transmissions, retransmissions and standalone ACKs)\0",
        |s| s.sends,
    ),
    ("num_resends\0", "Retransmissions (timeout + fast)\0", |s| {
        s.resends_timeout + s.resends_fast
    }),
    (
        "num_timeout_retrans\0",
        "Retransmissions after a retransmit timeout\0",
        |s| s.resends_timeout,
    ),
    (
        "num_fast_retrans\0",
        "Retransmissions repairing a gap without waiting for a timeout\0",
        |s| s.resends_fast,
    ),
    (
        "num_frag_sends\0",
        "Single-datagram fragments sent\0",
        |s| s.frag_sends,
    ),
    (
        "num_chunk_sends\0",
        "Chunks of larger fragments sent\0",
        |s| s.chunk_sends,
    ),
    ("num_ack_sends\0", "Standalone ACKs sent\0", |s| {
        s.acks_alone
    }),
    ("num_total_recvs\0", "Datagrams received\0", |s| s.recvs),
    (
        "num_unk_recvs\0",
        "Datagrams from unknown senders (dropped)\0",
        |s| s.unknown_sender_recvs,
    ),
    ("num_dup_recvs\0", "Duplicate datagrams (dropped)\0", |s| {
        s.dup_recvs
    }),
    (
        "num_oow_low_recvs\0",
        "Datagrams below the receive window (dropped)\0",
        |s| s.oow_low_recvs,
    ),
    (
        "num_oow_high_recvs\0",
        "Datagrams above the receive window (dropped)\0",
        |s| s.oow_high_recvs,
    ),
    (
        "num_badfrag_recvs\0",
        "Malformed datagrams or chunks (dropped)\0",
        |s| s.malformed_recvs + s.bad_chunk_recvs,
    ),
    ("num_ack_recvs\0", "ACKs received\0", |s| s.ack_recvs),
    (
        "num_old_dup_acks\0",
        "ACKs older than the last one (ignored)\0",
        |s| s.old_acks,
    ),
    ("num_dup_acks\0", "Duplicate ACKs\0", |s| s.dup_acks),
    (
        "num_wrong_key_recvs\0",
        "Datagrams with another job's key (dropped)\0",
        |s| s.wrong_key_recvs,
    ),
    (
        "num_refused_writes\0",
        "Emulated PUT data and GET replies refused here (outside memory registered for the peer)\0",
        |s| s.refused_writes,
    ),
    (
        "num_refused_gets\0",
        "Emulated GET requests refused here (outside memory registered for the peer)\0",
        |s| s.refused_gets,
    ),
    (
        "num_bytes_sent\0",
        "Bytes of datagrams sent (headers, retransmissions and ACKs included)\0",
        |s| s.bytes_sent,
    ),
    (
        "num_bytes_recvd\0",
        "Bytes of datagrams received from known peers (headers, duplicates and ACKs included)\0",
        |s| s.bytes_received,
    ),
    (
        "num_peers_failed\0",
        "Peers declared failed (btl_usnic_peer_timeout)\0",
        |s| s.peers_failed,
    ),
    (
        "num_lent_released\0",
        "Sends read in place copied and completed before their ACK (btl_usnic_lent_copy_limit, btl_usnic_lent_hold)\0",
        |s| s.lent_released,
    ),
    (
        "num_spurious_resends\0",
        "Retransmissions the peer reported receiving twice (the original had arrived, late)\0",
        |s| s.spurious_resends,
    ),
];

pub fn name(i: usize) -> *const c_char {
    COUNTERS
        .get(i)
        .map_or(core::ptr::null(), |c| c.0.as_ptr().cast())
}

pub fn description(i: usize) -> *const c_char {
    COUNTERS
        .get(i)
        .map_or(core::ptr::null(), |c| c.1.as_ptr().cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_c_strings_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for (n, d, _) in COUNTERS {
            assert!(n.ends_with('\0') && d.ends_with('\0'));
            assert_eq!(n.matches('\0').count(), 1);
            assert!(seen.insert(*n));
        }
        assert!(name(COUNTERS.len()).is_null());
        let s = Stats {
            resends_timeout: 2,
            resends_fast: 3,
            ..Stats::default()
        };
        assert_eq!((COUNTERS[1].2)(&s), 5);
    }
}
