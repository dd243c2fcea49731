//! Hash maps keyed by identifiers, with a cheap hash.
//!
//! The standard map's SipHash cost about 140 instructions per lookup: per small message in the
//! lookup of the peer by sender id, and twice per chunk of a fragment in reassembly by message
//! id (5.4k of a 32 KiB message's 143k instructions at MTU 1500; reassembly now looks up only
//! a chunk whose fragment is not the latest one's, `chunk::Reassembler`). Where no remote party
//! chooses the keys (peers come from the modex) `IdMap` hashes them unkeyed. Where datagrams
//! create the entries (reassembly, GET requests) `KeyedIdMap` hashes under a secret of this
//! process, so a peer that cannot see the secret cannot aim its ids at one bucket (splitmix64
//! is no cryptographic hash: this resists blind choice, not an attacker timing lookups). A
//! `KeyedIdMap` always names its secret: it has no default.
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

/// A `HashMap` hashing its integer keys with `splitmix64`.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A `HashMap` whose integer keys come from datagrams, hashed with `splitmix64` under the
/// secret in `KeyedIds`.
pub type KeyedIdMap<K, V> = HashMap<K, V, KeyedIds>;

/// The secret a `KeyedIdMap` hashes with (`Config::hash_key`). The hash of an id is
/// `splitmix64(splitmix64(secret) ^ id)`: the secret is mixed before the id joins it, so it
/// changes which ids collide, not only where they land.
#[derive(Clone, Copy, Debug)]
pub struct KeyedIds(pub u64);

impl BuildHasher for KeyedIds {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.0)
    }
}

/// SplitMix64's output function: a bijection of `u64` whose every output bit depends on every
/// input bit (the map uses both the low bits, for the bucket, and the high bits).
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        splitmix64(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = splitmix64(self.0) ^ v;
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_values() {
        let mut m: IdMap<u64, usize> = IdMap::default();
        for k in 0..10_000u64 {
            m.insert(k.wrapping_mul(0x1_0000_0001), k as usize);
        }
        for k in 0..10_000u64 {
            assert_eq!(m.get(&k.wrapping_mul(0x1_0000_0001)), Some(&(k as usize)));
        }
        assert_eq!(m.remove(&3), None);
        assert_eq!(m.len(), 10_000);
    }

    #[test]
    fn counters_spread_over_low_and_high_bits() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (0..4096u64).map(|k| b.hash_one(k)).collect();
        let low: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        let high: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(
            low.len() > 2400,
            "low 12 bits of 4096 counters: {} distinct",
            low.len()
        );
        assert_eq!(high.len(), 128, "every top-7-bit value appears");
    }

    #[test]
    fn keyed_maps_place_the_same_ids_differently_under_different_secrets() {
        let mut m: KeyedIdMap<u32, u32> = KeyedIdMap::with_hasher(KeyedIds(7));
        for k in 0..4096u32 {
            m.insert(k, k + 1);
        }
        for k in 0..4096u32 {
            assert_eq!(m.get(&k), Some(&(k + 1)));
        }
        // What decides the bucket (the low bits) differs between two secrets for most ids,
        // so ids that crowd one bucket under one secret are spread under another.
        let (a, b) = (KeyedIds(1), KeyedIds(2));
        let differ = (0..4096u32)
            .filter(|k| (a.hash_one(k) ^ b.hash_one(k)) & 0xfff != 0)
            .count();
        assert!(differ > 4000, "{differ} of 4096 ids moved");
        assert_ne!(a.hash_one(5u32), b.hash_one(5u32));

        // Ids that share their low bits under one secret (a bucket a peer might aim at) do
        // not under another: a secret xored onto the hash's output would keep them together.
        let crowd: Vec<u32> = (0..1u32 << 20)
            .filter(|k| a.hash_one(k) & 0x3ff == 0)
            .take(64)
            .collect();
        assert_eq!(crowd.len(), 64);
        let spread: std::collections::HashSet<u64> =
            crowd.iter().map(|k| b.hash_one(k) & 0x3ff).collect();
        assert!(
            spread.len() > 50,
            "64 crowded ids fill {} buckets",
            spread.len()
        );
    }

    #[test]
    fn splitmix64_is_the_reference_function() {
        // The first outputs of the reference SplitMix64 generator seeded with 0.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }
}
