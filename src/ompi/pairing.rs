//! Which local module talks to which of a peer's modules.
//!
//! Both processes of a pair must reach the *same* answer, or one side would send a stream the
//! other side's engine does not expect (wrong ISN, wrong key): silently misrouted traffic. So the
//! pairing is a pure function of both processes' published module lists, always evaluated with
//! the lower-named process's list first, and greedy in list order (no tie can go two ways).
//!
//! Rules (the original reaches remote peers only, over the same subnet; we add same-node peers):
//! - a loopback module (127.x) only reaches a peer on the same node, and only its loopback module;
//! - a same-node peer is reached over loopback when both sides have a loopback module, otherwise
//!   over a subnet-matching interface like a remote peer;
//! - any other pair needs both interfaces non-loopback, with equal netmasks and equal masked
//!   networks, and, for a peer on another node, different addresses: bridges such as Docker's
//!   `docker0` (172.17.0.1/16) or libvirt's `virbr0` (192.168.122.1/24) carry the same address
//!   on every host, and a datagram to it never leaves this one;
//! - each module is paired with at most one module of the peer, and vice versa.
use std::net::Ipv4Addr;

/// The addressing facts pairing looks at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub ipv4: Ipv4Addr,
    pub netmask: Ipv4Addr,
}

impl Iface {
    pub fn is_loopback(&self) -> bool {
        self.ipv4.is_loopback()
    }
    fn network(&self) -> u32 {
        u32::from(self.ipv4) & u32::from(self.netmask)
    }
}

fn same_subnet(a: &Iface, b: &Iface) -> bool {
    !a.is_loopback() && !b.is_loopback() && a.netmask == b.netmask && a.network() == b.network()
}

/// Pairs `(index in first, index in second)`. `first` must be the list of the process with the
/// lower name; `same_node` says whether both processes run on one node.
pub fn pair(first: &[Iface], second: &[Iface], same_node: bool) -> Vec<(usize, usize)> {
    let loop_pair =
        same_node && first.iter().any(Iface::is_loopback) && second.iter().any(Iface::is_loopback);
    let compatible = |a: &Iface, b: &Iface| {
        if loop_pair {
            a.is_loopback() && b.is_loopback()
        } else {
            same_subnet(a, b) && (same_node || a.ipv4 != b.ipv4)
        }
    };
    let mut taken = vec![false; second.len()];
    let mut out = Vec::new();
    for (i, a) in first.iter().enumerate() {
        if let Some(j) = (0..second.len()).find(|&j| !taken[j] && compatible(a, &second[j])) {
            taken[j] = true;
            out.push((i, j));
        }
    }
    out
}

/// The peer module that local module `local` talks to, if any. `i_am_first` says whether this
/// process has the lower name.
pub fn peer_module_for(
    mine: &[Iface],
    theirs: &[Iface],
    local: usize,
    same_node: bool,
    i_am_first: bool,
) -> Option<usize> {
    if i_am_first {
        pair(mine, theirs, same_node)
            .into_iter()
            .find(|&(i, _)| i == local)
            .map(|(_, j)| j)
    } else {
        pair(theirs, mine, same_node)
            .into_iter()
            .find(|&(_, j)| j == local)
            .map(|(i, _)| i)
    }
}

/// Why `pair` found nothing for a peer, for the "unreachable peer IP" message: the first rule
/// that refused a pair of interfaces which otherwise matched, else the subnet rule.
pub fn why_unpaired(mine: &[Iface], theirs: &[Iface], same_node: bool) -> String {
    let pairs = || mine.iter().flat_map(|a| theirs.iter().map(move |b| (a, b)));
    if !same_node {
        if let Some((a, _)) = pairs().find(|(a, b)| same_subnet(a, b) && a.ipv4 == b.ipv4) {
            return format!(
                "the peer's interface on the shared subnet has this host's own address {} (a \
                 bridge such as docker0 or virbr0 has the same address on every host), so \
                 datagrams to it would not leave this host; another BTL must carry its traffic",
                a.ipv4
            );
        }
    }
    let overlap = |a: &Iface, b: &Iface| {
        let mask = u32::from(a.netmask) & u32::from(b.netmask);
        !a.is_loopback() && !b.is_loopback() && u32::from(a.ipv4) & mask == u32::from(b.ipv4) & mask
    };
    if let Some((a, b)) = pairs().find(|(a, b)| a.netmask != b.netmask && overlap(a, b)) {
        return format!(
            "the peer's interface {}/{} overlaps this process's {}/{} but the netmasks differ; \
             another BTL must carry its traffic",
            b.ipv4, b.netmask, a.ipv4, a.netmask
        );
    }
    "no local interface shares a subnet with the peer's; another BTL must carry its traffic".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifc(ip: [u8; 4], prefix: u32) -> Iface {
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Iface {
            ipv4: Ipv4Addr::from(ip),
            netmask: Ipv4Addr::from(mask),
        }
    }

    #[test]
    fn remote_peer_same_subnet_only() {
        let a = [
            ifc([127, 0, 0, 1], 8),
            ifc([10, 0, 1, 5], 24),
            ifc([10, 0, 2, 5], 24),
        ];
        let b = [ifc([10, 0, 2, 9], 24), ifc([127, 0, 0, 1], 8)];
        assert_eq!(pair(&a, &b, false), vec![(2, 0)]);
        // Loopback never reaches a remote node, even with the other side's loopback.
        let a = [ifc([127, 0, 0, 1], 8)];
        let b = [ifc([127, 0, 0, 1], 8)];
        assert!(pair(&a, &b, false).is_empty());
    }

    #[test]
    fn a_remote_interface_with_one_of_our_addresses_is_not_paired() {
        // virbr0 on both hosts, then their real link.
        let a = [ifc([192, 168, 122, 1], 24), ifc([10, 0, 0, 1], 24)];
        let b = [ifc([192, 168, 122, 1], 24), ifc([10, 0, 0, 2], 24)];
        assert_eq!(pair(&a, &b, false), vec![(1, 1)]);
        assert_eq!(peer_module_for(&b, &a, 0, false, false), None);
        // On one node the same address is the same interface, and reaches.
        assert_eq!(pair(&a, &b, true), vec![(0, 0), (1, 1)]);
    }

    #[test]
    fn netmasks_must_agree() {
        let a = [ifc([10, 0, 1, 5], 24)];
        let b = [ifc([10, 0, 1, 9], 16)];
        assert!(pair(&a, &b, false).is_empty());
        assert!(
            why_unpaired(&a, &b, false).starts_with("the peer's interface 10.0.1.9/255.255.0.0 overlaps this process's 10.0.1.5/255.255.255.0 but the netmasks differ"),
            "{}",
            why_unpaired(&a, &b, false)
        );
    }

    #[test]
    fn the_reason_names_the_rule_that_refused() {
        // Only virbr0 in common across nodes: refused by the same-address rule, not the subnet's.
        let a = [ifc([192, 168, 122, 1], 24), ifc([10, 0, 0, 1], 24)];
        let b = [ifc([192, 168, 122, 1], 24), ifc([10, 1, 0, 2], 24)];
        assert!(pair(&a, &b, false).is_empty());
        assert!(why_unpaired(&a, &b, false).starts_with(
            "the peer's interface on the shared subnet has this host's own address 192.168.122.1"
        ));
        let b = [ifc([10, 1, 0, 2], 24)];
        assert!(why_unpaired(&a, &b, false).starts_with("no local interface shares a subnet"));
        // Loopback against a real interface on one node: no subnet in common.
        let lo = [ifc([127, 0, 0, 1], 8)];
        assert!(pair(&lo, &b, true).is_empty());
        assert!(why_unpaired(&lo, &b, true).starts_with("no local interface shares a subnet"));
    }

    #[test]
    fn same_node_prefers_loopback() {
        let a = [ifc([10, 0, 1, 5], 24), ifc([127, 0, 0, 1], 8)];
        let b = [ifc([10, 0, 1, 5], 24), ifc([127, 0, 0, 1], 8)];
        assert_eq!(pair(&a, &b, true), vec![(1, 1)]);
        // Without loopback on one side: the shared subnet.
        assert_eq!(pair(&a[..1], &b, true), vec![(0, 0)]);
    }

    #[test]
    fn one_to_one_and_symmetric() {
        let a = [ifc([10, 0, 1, 5], 24), ifc([10, 0, 1, 6], 24)];
        let b = [
            ifc([10, 0, 1, 7], 24),
            ifc([10, 0, 1, 8], 24),
            ifc([10, 0, 1, 9], 24),
        ];
        let p = pair(&a, &b, false);
        assert_eq!(p, vec![(0, 0), (1, 1)]);
        for local in 0..a.len() {
            let j = peer_module_for(&a, &b, local, false, true);
            // The peer, computing from its side, must name us back.
            assert_eq!(
                j.and_then(|j| peer_module_for(&b, &a, j, false, false)),
                Some(local)
            );
        }
        assert_eq!(peer_module_for(&b, &a, 2, false, false), None);
    }
}
