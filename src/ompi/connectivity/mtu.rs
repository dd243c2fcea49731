//! The `MTU mismatch` warning: two paired interfaces allow different datagram sizes. Not an
//! error (each side sends datagrams no larger than the smaller size, see `PeerInfo`'s
//! `remote_data_mtu`), but the admin should know the network is not uniform, so it is said once
//! per (local interface, remote host) in a process; mpirun folds the other processes' copies
//! into "N more processes have sent help message ...". A healthy run (equal sizes) says nothing.
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use crate::ompi::help::show_help;

/// One end of a pair, for the message.
pub struct End<'a> {
    pub host: &'a str,
    /// Interface name (local end) or "" (the remote's name is not published).
    pub interface: &'a str,
    pub address: String,
    /// Largest datagram of the data channel (payload bytes).
    pub datagram: u32,
}

static SHOWN: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);

/// True the first time for this (local interface, remote host) in this process.
fn first_time(interface: &str, remote_host: &str) -> bool {
    let mut g = SHOWN.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(HashSet::new)
        .insert((interface.to_string(), remote_host.to_string()))
}

/// The size both directions use.
pub fn used(local: u32, remote: u32) -> u32 {
    local.min(remote)
}

/// True when this end reports a mismatch: both ends see it, and both know everything the
/// message names, so only the end with the lower address speaks, or, when the addresses are
/// equal (two processes on one host over `lo`), the one `i_am_first` (the lower rank). One
/// message per pair instead of two: every process meets its peers at the same moment
/// (add_procs), and Open MPI 4.1.4's mpirun garbles help messages that reach it together, so
/// the message cannot go to mpirun for aggregation; each process prints its own.
pub fn reports(local: Ipv4Addr, remote: Ipv4Addr, i_am_first: bool) -> bool {
    let (local, remote) = (u32::from(local), u32::from(remote));
    local < remote || (local == remote && i_am_first)
}

/// Warns when the two ends' datagram sizes differ (once per local interface and remote host,
/// from one end of the pair, see `reports`).
pub fn check(local: &End<'_>, remote: &End<'_>, addrs: (Ipv4Addr, Ipv4Addr), i_am_first: bool) {
    if local.datagram == remote.datagram
        || !reports(addrs.0, addrs.1, i_am_first)
        || !first_time(local.interface, remote.host)
    {
        return;
    }
    let size = used(local.datagram, remote.datagram);
    let fallback = format!(
        "MTU mismatch: {} {} {} sends datagrams of up to {} bytes, {} {} up to {}; both \
         directions use {size} bytes",
        local.host,
        local.interface,
        local.address,
        local.datagram,
        remote.host,
        remote.address,
        remote.datagram
    );
    show_help!("MTU mismatch", fallback;
        s(local.host), s(local.interface), s(&local.address), i(local.datagram),
        s(remote.host), s(&remote.address), i(remote.datagram), i(size));
}

/// `10.0.0.1/24` from an address and its netmask.
pub fn with_prefix(ipv4: Ipv4Addr, netmask: Ipv4Addr) -> String {
    format!("{ipv4}/{}", u32::from(netmask).count_ones())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ompi::connectivity::render_help;

    #[test]
    fn the_lower_address_reports() {
        let (a, b) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
        for first in [true, false] {
            assert!(reports(a, b, first));
            assert!(!reports(b, a, first));
        }
        // One host: exactly one of the two processes.
        assert!(reports(a, a, true));
        assert!(!reports(a, a, false));
    }

    #[test]
    fn once_per_interface_and_remote_host() {
        assert!(first_time("veth9", "hostA"));
        assert!(!first_time("veth9", "hostA"));
        assert!(first_time("veth9", "hostB"));
        assert!(first_time("veth8", "hostA"));
    }

    #[test]
    fn topic_text_names_both_ends_and_the_size_used() {
        let help = include_str!("../../../help-mpi-btl-usnic-rs.txt");
        let p: Vec<String> = [
            "h1",
            "veth0",
            "10.77.0.1/24",
            "1472",
            "h2",
            "10.77.0.2",
            "1172",
            &used(1472, 1172).to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let t = render_help(help, "MTU mismatch", &p).unwrap();
        for line in [
            "  Local host:      h1\n",
            "  Local interface: veth0 (10.77.0.1/24)\n",
            "  Local datagram:  1472 bytes\n",
            "  Remote host:     h2\n",
            "  Remote address:  10.77.0.2\n",
            "  Remote datagram: 1172 bytes\n",
            "  Size used:       1172 bytes (both directions)\n",
        ] {
            assert!(t.contains(line), "{line:?} missing from\n{t}");
        }
        assert!(!t.contains('%'));
        assert_eq!(
            with_prefix(Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(255, 255, 255, 0)),
            "10.77.0.1/24"
        );
    }
}
