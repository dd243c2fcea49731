//! What each process publishes through the modex: one entry per module, in module order.
//!
//! The blob is this project's own format (not the C original's 32-byte struct: a peer must also
//! learn the module's job key, identity and fabric address), little-endian, versioned by a magic
//! word. Decoding never trusts the bytes: any inconsistency is an error naming it.
use std::net::Ipv4Addr;

/// "URS" + format version 5 (2 added `cc_port`, 3 `rx_window`, 4 `host`, 5 `prio_mtu`,
/// `wire`, `rdma` and `provider`).
const MAGIC: [u8; 4] = *b"URS\x05";
/// Fixed part of one entry, before the fabric address bytes.
const ENTRY_FIXED: usize = 8 + 8 + 2 + 4 + 4 + 4 + 4 + 2 + 2 + 4 + 8 + 4 + 1 + 1 + 1;
/// Upper bound on a fabric address (sockaddr_in6 is 28 bytes; leave room for other providers).
const MAX_ADDR: usize = 256;
/// Upper bound on a provider name.
const MAX_PROVIDER: usize = 64;
/// `ModexEntry::rdma` bits.
pub const RDMA_PUT: u8 = 1;
pub const RDMA_GET: u8 = 2;
/// Upper bound on modules per process (sanity bound on wire input).
pub const MAX_ENTRIES: usize = 64;

/// One module as its peers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModexEntry {
    /// The module's `local_id` (source identity in every datagram it sends).
    pub id: u64,
    /// The module's job key (peers write it into every datagram they send to it).
    pub key: u64,
    /// Initial sequence number of the module's send direction.
    pub isn: u16,
    /// Largest datagram the module's data channel accepts.
    pub data_mtu: u32,
    pub ipv4: Ipv4Addr,
    pub netmask: Ipv4Addr,
    /// Link speed in Mb/s (0 = unknown).
    pub link_speed_mbps: u32,
    /// The fabric edge's `local_address()` bytes.
    pub address: Vec<u8>,
    /// UDP port of this host's connectivity agent on `ipv4` (0 = not checked).
    pub cc_port: u16,
    /// Data-channel datagrams the module absorbs while not polling (`Config::rx_window`).
    pub rx_window: u32,
    /// The host and network namespace the process runs in (`host_identity`; 0 = unknown):
    /// Open MPI calls a process of another mpirun on the same host remote, and its host name
    /// "unknown", so this is how two such processes learn that `lo` joins them.
    pub host: u64,
    /// Largest datagram the module's priority channel accepts (`btl_usnic_priority_limit`,
    /// which may differ between processes): peers send it no larger tiny messages and ACKs.
    pub prio_mtu: u32,
    /// The wire format version of the datagrams the module sends and accepts
    /// (`proto::wire::VERSION`): builds of this plugin that differ there drop each other's
    /// datagrams as malformed, though their modex formats may agree.
    pub wire: u8,
    /// `btl_usnic_rdma` (`RDMA_PUT`, `RDMA_GET`): ob1 asks a peer for RDMA by its own BTL's
    /// flags, and a process whose BTL offers none crashes on such a request (NULL RDMA BTL).
    pub rdma: u8,
    /// `btl_usnic_provider`: providers do not read each other's datagrams.
    pub provider: String,
}

impl ModexEntry {
    pub fn is_loopback(&self) -> bool {
        self.ipv4.is_loopback()
    }
}

/// A setting every process of a job must share, which two differ in: (what, ours, theirs).
pub type Mismatch = (&'static str, String, String);

/// The first setting that differs between two processes' modules and keeps them apart: their
/// datagrams' wire format (different builds), the provider, or the emulated RDMA offered to ob1.
pub fn mismatch(mine: &ModexEntry, theirs: &ModexEntry) -> Option<Mismatch> {
    let rdma = |r: u8| {
        match (r & RDMA_PUT != 0, r & RDMA_GET != 0) {
            (false, false) => "none",
            (true, false) => "put",
            (false, true) => "get",
            (true, true) => "put,get",
        }
        .to_string()
    };
    if mine.wire != theirs.wire {
        Some((
            "wire format version (the processes run different builds of the usnic-rs plugin)",
            mine.wire.to_string(),
            theirs.wire.to_string(),
        ))
    } else if mine.provider != theirs.provider {
        Some((
            "btl_usnic_provider",
            mine.provider.clone(),
            theirs.provider.clone(),
        ))
    } else if mine.rdma != theirs.rdma {
        Some(("btl_usnic_rdma", rdma(mine.rdma), rdma(theirs.rdma)))
    } else {
        None
    }
}

pub fn encode(entries: &[ModexEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(6 + entries.len() * (ENTRY_FIXED + 16));
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.id.to_le_bytes());
        out.extend_from_slice(&e.key.to_le_bytes());
        out.extend_from_slice(&e.isn.to_le_bytes());
        out.extend_from_slice(&e.data_mtu.to_le_bytes());
        out.extend_from_slice(&e.ipv4.octets());
        out.extend_from_slice(&e.netmask.octets());
        out.extend_from_slice(&e.link_speed_mbps.to_le_bytes());
        out.extend_from_slice(&(e.address.len() as u16).to_le_bytes());
        out.extend_from_slice(&e.address);
        out.extend_from_slice(&e.cc_port.to_le_bytes());
        out.extend_from_slice(&e.rx_window.to_le_bytes());
        out.extend_from_slice(&e.host.to_le_bytes());
        out.extend_from_slice(&e.prio_mtu.to_le_bytes());
        out.push(e.wire);
        out.push(e.rdma);
        let name = &e.provider.as_bytes()[..e.provider.len().min(MAX_PROVIDER)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    out
}

/// This process's host and network namespace: the kernel's boot id (new at every boot, shared by
/// every namespace of the host) and the inode of its network namespace (processes in one see
/// the same `lo`). 0 when either cannot be read.
pub fn host_identity() -> u64 {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
    let netns = std::fs::metadata("/proc/self/ns/net").map(|m| (m.dev(), m.ino()));
    match (boot, netns) {
        (Ok(boot), Ok(netns)) => {
            // Fixed keys: every process must derive the same value.
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (boot.trim(), netns).hash(&mut h);
            h.finish().max(1)
        }
        _ => 0,
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => Err(format!(
                "truncated at byte {} of {} (wanted {n} more)",
                self.at,
                self.bytes.len()
            )),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

pub fn decode(bytes: &[u8]) -> Result<Vec<ModexEntry>, String> {
    let mut r = Reader { bytes, at: 0 };
    match r.array::<4>()? {
        MAGIC => {}
        [b'U', b'R', b'S', v] => {
            return Err(format!(
                "modex format version {v}, this build reads {}: the processes run different \
                 builds of the usnic-rs plugin",
                MAGIC[3]
            ))
        }
        _ => return Err("not a usnic-rs modex blob (bad magic)".into()),
    }
    let n = r.u16()? as usize;
    if n > MAX_ENTRIES {
        return Err(format!("{n} modules announced (at most {MAX_ENTRIES})"));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let id = r.u64()?;
        let key = r.u64()?;
        let isn = r.u16()?;
        let data_mtu = r.u32()?;
        let ipv4 = Ipv4Addr::from(r.array::<4>()?);
        let netmask = Ipv4Addr::from(r.array::<4>()?);
        let link_speed_mbps = r.u32()?;
        let alen = r.u16()? as usize;
        if alen == 0 || alen > MAX_ADDR {
            return Err(format!("entry {i}: fabric address of {alen} bytes"));
        }
        let address = r.take(alen)?.to_vec();
        let cc_port = r.u16()?;
        let rx_window = r.u32()?;
        let host = r.u64()?;
        let prio_mtu = r.u32()?;
        let [wire, rdma, plen] = r.array::<3>()?;
        if plen as usize > MAX_PROVIDER {
            return Err(format!("entry {i}: provider name of {plen} bytes"));
        }
        let provider = String::from_utf8_lossy(r.take(plen as usize)?).into_owned();
        // The core's floors: it would raise a smaller announced size and send past it.
        if (data_mtu as usize) < crate::proto::MIN_DATA_MTU {
            return Err(format!("entry {i}: data MTU {data_mtu} too small"));
        }
        if (prio_mtu as usize) < crate::proto::MIN_PRIORITY_MTU {
            return Err(format!("entry {i}: priority MTU {prio_mtu} too small"));
        }
        out.push(ModexEntry {
            id,
            key,
            isn,
            data_mtu,
            ipv4,
            netmask,
            link_speed_mbps,
            address,
            cc_port,
            rx_window,
            host,
            prio_mtu,
            wire,
            rdma,
            provider,
        });
    }
    if r.at != bytes.len() {
        return Err(format!(
            "{} trailing bytes after {n} entries",
            bytes.len() - r.at
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u8) -> ModexEntry {
        ModexEntry {
            id: 0x1122_3344_5566_7700 + i as u64,
            key: 0xdead_beef_0000_0000 | i as u64,
            isn: 4000 + i as u16,
            data_mtu: 9000,
            ipv4: Ipv4Addr::new(10, 0, 0, i),
            netmask: Ipv4Addr::new(255, 255, 255, 0),
            link_speed_mbps: 25_000,
            address: vec![10, 0, 0, i, 0x12, 0x34, 0x56, 0x78],
            cc_port: 40000 + i as u16,
            rx_window: 100 + i as u32,
            host: 0x0123_4567_89ab_cdef,
            prio_mtu: 768,
            wire: crate::proto::wire::VERSION,
            rdma: RDMA_GET,
            provider: "udp".into(),
        }
    }

    #[test]
    fn the_host_identity_is_the_same_for_every_process_of_a_namespace() {
        let here = host_identity();
        assert_ne!(here, 0, "boot id and network namespace are readable here");
        // Another process in this namespace derives the same value.
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "ompi::modex::tests::print_host_identity",
                "--nocapture",
                "--ignored",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("host identity {here}\n")), "{text}");
    }

    /// Run by the test above in a process of its own.
    #[test]
    #[ignore]
    fn print_host_identity() {
        println!("host identity {}", host_identity());
    }

    #[test]
    fn round_trip() {
        for n in 0..4u8 {
            let v: Vec<_> = (0..n).map(entry).collect();
            assert_eq!(decode(&encode(&v)).unwrap(), v);
        }
    }

    #[test]
    fn settings_that_must_agree_are_named_when_they_differ() {
        let mine = entry(1);
        assert_eq!(mismatch(&mine, &entry(2)), None, "other fields may differ");
        let mut theirs = entry(2);
        theirs.rdma = 0;
        assert_eq!(
            mismatch(&mine, &theirs),
            Some(("btl_usnic_rdma", "get".into(), "none".into()))
        );
        theirs.rdma = RDMA_PUT | RDMA_GET;
        assert_eq!(mismatch(&mine, &theirs).unwrap().2, "put,get");
        theirs.provider = "sockets".into();
        assert_eq!(
            mismatch(&mine, &theirs),
            Some(("btl_usnic_provider", "udp".into(), "sockets".into()))
        );
        theirs.wire = 3;
        let (what, ours, their) = mismatch(&mine, &theirs).unwrap();
        assert!(what.contains("different builds"), "{what}");
        assert_eq!(
            (ours, their.as_str()),
            (crate::proto::wire::VERSION.to_string(), "3")
        );
    }

    #[test]
    fn every_truncation_and_extension_is_rejected() {
        let blob = encode(&[entry(1), entry(2)]);
        for len in 0..blob.len() {
            assert!(
                decode(&blob[..len]).is_err(),
                "prefix of {len} bytes accepted"
            );
        }
        let mut longer = blob.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().contains("trailing"));
    }

    #[test]
    fn bad_fields_are_rejected() {
        let mut blob = encode(&[entry(1)]);
        blob[3] = 4; // the version before prio_mtu
        assert!(decode(&blob).unwrap_err().contains("different builds"));
        blob[0] = b'X';
        assert!(decode(&blob).unwrap_err().contains("bad magic"));
        let mut blob = encode(&[entry(1)]);
        blob[4..6].copy_from_slice(&1000u16.to_le_bytes());
        assert!(decode(&blob).unwrap_err().contains("modules announced"));
        let mut e = entry(1);
        e.address.clear();
        assert!(decode(&encode(&[e])).is_err());
        // Below the core's floors (it would raise them and send past what was announced).
        let mut e = entry(1);
        e.data_mtu = crate::proto::MIN_DATA_MTU as u32 - 1;
        assert!(decode(&encode(&[e])).unwrap_err().contains("data MTU"));
        let mut blob = encode(&[entry(1)]);
        let at = blob.len() - 4; // the provider name's length
        blob[at] = 200;
        assert!(decode(&blob).unwrap_err().contains("provider name"));
        let mut e = entry(1);
        e.prio_mtu = crate::proto::MIN_PRIORITY_MTU as u32 - 1;
        assert!(decode(&encode(&[e.clone()]))
            .unwrap_err()
            .contains("priority MTU"));
        e.prio_mtu += 1;
        e.data_mtu = crate::proto::MIN_DATA_MTU as u32;
        assert!(decode(&encode(&[e])).is_ok());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: xorshift bytes of many lengths, plus mutations of a valid blob.
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let valid = encode(&[entry(1), entry(2)]);
        for round in 0..5000 {
            let mut b = if round % 2 == 0 {
                valid.clone()
            } else {
                (0..(next() % 200)).map(|_| next() as u8).collect()
            };
            if !b.is_empty() {
                let i = (next() as usize) % b.len();
                b[i] = next() as u8;
            }
            let _ = decode(&b);
        }
    }
}
