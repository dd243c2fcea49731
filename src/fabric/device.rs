//! Device discovery: the provider's FI_EP_DGRAM entries, one per IPv4 interface, filtered.
use super::config::FabricConfig;
use super::error::FabricError;
use super::iflist::IfFilter;
use super::info::{cstr, InfoList, OwnedInfo};
use super::sys;
use std::net::Ipv4Addr;

/// IPv4 + UDP header bytes: a datagram of `mtu - 28` payload bytes fills one IPv4 packet.
pub const IPV4_UDP_HEADERS: usize = 28;
/// Largest UDP payload over IPv4 (65535 - 20 - 8), and the largest data datagram of any
/// provider.
pub const MAX_UDP_PAYLOAD: usize = 65_507;
// Any data MTU fits the core's 16-bit payload length.
const _: () = assert!(MAX_UDP_PAYLOAD <= crate::proto::MAX_MTU);

/// One usable interface of the provider: what a module is opened on.
#[derive(Clone)]
pub struct DeviceInfo {
    /// Linux interface name (`lo`, `eth0`); what if_include/if_exclude names match.
    pub name: String,
    /// The interface's IPv4 address (the endpoints bind to it).
    pub ipv4: Ipv4Addr,
    /// The interface's IPv4 netmask (from getifaddrs).
    pub netmask: Ipv4Addr,
    /// Datagram bytes this BTL uses on the data channel (see the module docs for the rule).
    pub mtu: usize,
    /// `/sys/class/net/<if>/speed` in Mb/s; 0 when the kernel does not know (virtual NICs).
    pub link_speed_mbps: u32,
    /// The interface MTU (`SIOCGIFMTU`, else `/sys/class/net/<if>/mtu`), 0 when unknown.
    pub if_mtu: usize,
    /// The provider's advertised `ep_attr->max_msg_size`.
    pub provider_max_msg_size: usize,
    /// The provider name (`fabric_attr->prov_name`).
    pub provider: String,
    /// `ep_attr->protocol` (FI_PROTO_UDP, ...): peers must use the same transport.
    pub protocol: u32,
    /// True for a loopback interface (IFF_LOOPBACK).
    pub is_loopback: bool,
    /// The provider's entry for this interface, used to open the fabric, domain and EPs.
    pub(crate) info: OwnedInfo,
}

impl std::fmt::Debug for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceInfo")
            .field("name", &self.name)
            .field("ipv4", &self.ipv4)
            .field("netmask", &self.netmask)
            .field("mtu", &self.mtu)
            .field("link_speed_mbps", &self.link_speed_mbps)
            .field("if_mtu", &self.if_mtu)
            .field("provider_max_msg_size", &self.provider_max_msg_size)
            .field("provider", &self.provider)
            .field("is_loopback", &self.is_loopback)
            .finish()
    }
}

#[cfg(test)]
impl DeviceInfo {
    /// A device named `name` whose data datagrams are `mtu` bytes (for the edges' unit tests).
    pub(crate) fn for_test(name: &str, mtu: usize) -> DeviceInfo {
        DeviceInfo {
            name: name.to_string(),
            ipv4: Ipv4Addr::LOCALHOST,
            netmask: Ipv4Addr::new(255, 0, 0, 0),
            mtu,
            link_speed_mbps: 0,
            if_mtu: mtu + IPV4_UDP_HEADERS,
            provider_max_msg_size: mtu,
            provider: "udp".to_string(),
            protocol: 0,
            is_loopback: false,
            info: OwnedInfo::alloc().expect("fi_allocinfo"),
        }
    }
}

/// One IPv4 address of a local interface, from getifaddrs.
pub(crate) struct Iface {
    pub(crate) name: String,
    pub(crate) ipv4: Ipv4Addr,
    pub(crate) netmask: Ipv4Addr,
    pub(crate) loopback: bool,
}

/// Every IPv4 address of every local interface (the one getifaddrs walk of the crate).
pub(crate) fn interfaces() -> Vec<Iface> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is an element of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr whose family tells its real type; for
        // AF_INET both ifa_addr and (if non-NULL) ifa_netmask are sockaddr_in.
        unsafe {
            if i32::from((*ifa.ifa_addr).sa_family) != libc::AF_INET {
                continue;
            }
            let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
            let mask = if ifa.ifa_netmask.is_null() {
                0
            } else {
                (*(ifa.ifa_netmask as *const libc::sockaddr_in))
                    .sin_addr
                    .s_addr
            };
            out.push(Iface {
                name: std::ffi::CStr::from_ptr(ifa.ifa_name)
                    .to_string_lossy()
                    .into_owned(),
                ipv4: Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                netmask: Ipv4Addr::from(u32::from_be(mask)),
                loopback: ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0,
            });
        }
    }
    // SAFETY: head came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// A number from `/sys/class/net/<if>/<file>`, if the kernel provides a sane one.
fn sysfs_number(ifname: &str, file: &str) -> Option<i64> {
    // Alias names (`eth0:1`) share the parent's attributes.
    let dev = ifname.split(':').next().unwrap_or(ifname);
    std::fs::read_to_string(format!("/sys/class/net/{dev}/{file}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The MTU of interface `ifname` (`SIOCGIFMTU`), in the caller's network namespace: sysfs
/// shows the namespace it was mounted in, which inside a namespace of netns tools is usually
/// the host's (another interface of the same name, or none). sysfs only when the ioctl fails.
fn interface_mtu(ifname: &str) -> Option<usize> {
    let from_ioctl = || {
        let name = ifname.as_bytes();
        // SAFETY: ifreq is plain data; all-zero is valid (and NUL-terminates the name).
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        if name.is_empty() || name.len() >= req.ifr_name.len() || name.contains(&0) {
            return None;
        }
        for (d, &b) in req.ifr_name.iter_mut().zip(name) {
            *d = b as libc::c_char;
        }
        // SAFETY: a new socket, closed below; no memory involved.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is our socket; SIOCGIFMTU reads the NUL-terminated name and writes the
        // MTU into the ifreq, which lives across the call.
        let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(fd) };
        // SAFETY: after a successful SIOCGIFMTU the union holds ifru_mtu.
        let mtu = unsafe { req.ifr_ifru.ifru_mtu };
        (rc == 0 && mtu > 0).then_some(mtu as usize)
    };
    from_ioctl().or_else(|| {
        sysfs_number(ifname, "mtu")
            .filter(|m| *m > 0)
            .map(|m| m as usize)
    })
}

/// The IPv4 address of an `FI_SOCKADDR_IN` entry's `src_addr`.
fn src_ipv4(info: &sys::fi_info) -> Option<Ipv4Addr> {
    if info.addr_format != sys::FI_SOCKADDR_IN
        || info.src_addr.is_null()
        || info.src_addrlen < std::mem::size_of::<libc::sockaddr_in>()
    {
        return None;
    }
    // SAFETY: addr_format FI_SOCKADDR_IN and src_addrlen checked: src_addr is a sockaddr_in.
    let sin = unsafe { &*(info.src_addr as *const libc::sockaddr_in) };
    if i32::from(sin.sin_family) != libc::AF_INET {
        return None;
    }
    Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
}

/// The data-channel datagram size for a device. The `udp` provider hands any length straight
/// to the kernel socket (measured: up to 65507 bytes; see the module docs), so it follows the
/// interface MTU; any other provider gets its advertised `max_msg_size`. Both are at most
/// `MAX_UDP_PAYLOAD`: the `sockets` provider advertises 2^64 - 4097 bytes for FI_EP_DGRAM
/// (its datagrams are UDP all the same), which overflowed the buffer pool's size; providers
/// that are not UDP-based advertise far less (usnic about 9000). `mtu_cap` bounds both.
pub(crate) fn data_mtu(
    provider: &str,
    if_mtu: usize,
    max_msg_size: usize,
    mtu_cap: usize,
) -> usize {
    let mut mtu = if provider == "udp" && if_mtu > IPV4_UDP_HEADERS {
        if_mtu - IPV4_UDP_HEADERS
    } else {
        max_msg_size
    }
    .min(MAX_UDP_PAYLOAD);
    if mtu_cap > 0 {
        mtu = mtu.min(mtu_cap);
    }
    mtu
}

/// A provider entry's IPv4 address, placed among the host's interfaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    /// The interface (`eth0`). An address label (`eth0:1`) is folded into the interface it
    /// belongs to: one NIC is one device however many labels its addresses carry.
    pub(crate) name: String,
    /// The name getifaddrs gives the address (`eth0:1` or `eth0`), else the provider's domain
    /// name; if_include/if_exclude names match it as well as `name`.
    pub(crate) label: String,
    pub(crate) ipv4: Ipv4Addr,
    pub(crate) netmask: Ipv4Addr,
    pub(crate) loopback: bool,
    /// Position of the address in getifaddrs' list, `usize::MAX` when it is not there.
    rank: usize,
}

/// The interface an address label belongs to: `eth0:1` -> `eth0`.
fn interface_of(label: &str) -> &str {
    label.split(':').next().unwrap_or(label)
}

/// Where the address `ipv4` of a provider entry whose domain is `domain_name` sits among
/// `ifaces` (getifaddrs, in its order).
pub(crate) fn place(domain_name: &str, ipv4: Ipv4Addr, ifaces: &[Iface]) -> Placed {
    // The udp provider names the domain after the interface; trust getifaddrs first.
    let found = ifaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.ipv4 == ipv4 && i.name == domain_name)
        .or_else(|| ifaces.iter().enumerate().find(|(_, i)| i.ipv4 == ipv4));
    match found {
        Some((rank, i)) => Placed {
            name: interface_of(&i.name).to_string(),
            label: i.name.clone(),
            ipv4,
            netmask: i.netmask,
            loopback: i.loopback,
            rank,
        },
        None => Placed {
            name: interface_of(domain_name).to_string(),
            label: domain_name.to_string(),
            ipv4,
            netmask: Ipv4Addr::BROADCAST,
            loopback: ipv4.is_loopback(),
            rank: usize::MAX,
        },
    }
}

fn keep(cfg: &FabricConfig, a: &Placed) -> bool {
    let matches = |list: &[IfFilter]| {
        list.iter()
            .any(|f| f.matches(&a.name, a.ipv4) || f.matches(&a.label, a.ipv4))
    };
    if !cfg.if_include.is_empty() {
        // An explicit include wins over the loopback rule.
        return matches(&cfg.if_include);
    }
    if a.loopback && !cfg.include_loopback {
        return false;
    }
    !matches(&cfg.if_exclude)
}

/// The addresses (indexes into `addrs`, the provider's entries in its order) that become
/// devices: those the filters keep, one per interface, in the provider's order. An
/// interface's address is the one getifaddrs lists first among those kept: the kernel lists
/// an interface's primary address (its source address of choice) before the others, whereas
/// the udp provider lists them newest first, which put modules on the latest secondary
/// address.
pub(crate) fn choose(cfg: &FabricConfig, addrs: &[Placed]) -> Vec<usize> {
    let mut chosen: Vec<usize> = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        if !keep(cfg, a) {
            continue;
        }
        match chosen.iter_mut().find(|c| addrs[**c].name == a.name) {
            Some(c) if a.rank < addrs[*c].rank => *c = i,
            Some(_) => {}
            None => chosen.push(i),
        }
    }
    chosen.sort_unstable();
    chosen
}

/// FI_EP_DGRAM devices of `cfg.provider`, IPv4 only, one per interface (address labels such
/// as `eth0:1` folded into `eth0`; on its primary address, see [`choose`]), after
/// include/exclude filtering, in the provider's order. Loopback interfaces are kept only when
/// `include_loopback` is set or `if_include` matches them. No device at all is `Ok(vec![])`;
/// setting both `if_include` and `if_exclude` is an error.
pub fn discover(cfg: &FabricConfig) -> Result<Vec<DeviceInfo>, FabricError> {
    if !cfg.if_include.is_empty() && !cfg.if_exclude.is_empty() {
        return Err(FabricError::invalid(
            "discover",
            "if_include and if_exclude are mutually exclusive; set only one",
        ));
    }
    let list = InfoList::datagram(&cfg.provider)?;
    let ifaces = interfaces();
    let mut entries: Vec<&sys::fi_info> = Vec::new();
    let mut addrs: Vec<Placed> = Vec::new();
    for info in list.iter() {
        let Some(ipv4) = src_ipv4(info) else { continue };
        // SAFETY: fi_getinfo fills every attribute pointer of the entries it returns.
        let (ep, dom) = unsafe { (&*info.ep_attr, &*info.domain_attr) };
        if ep.type_ != sys::FI_EP_DGRAM {
            continue;
        }
        entries.push(info);
        addrs.push(place(&cstr(dom.name), ipv4, &ifaces));
    }
    let mut out: Vec<DeviceInfo> = Vec::new();
    for i in choose(cfg, &addrs) {
        let (info, a) = (entries[i], &addrs[i]);
        // SAFETY: as above.
        let (ep, fab) = unsafe { (&*info.ep_attr, &*info.fabric_attr) };
        let provider = cstr(fab.prov_name);
        let if_mtu = interface_mtu(&a.name).unwrap_or(0);
        let link_speed_mbps = sysfs_number(&a.name, "speed")
            .filter(|s| *s > 0 && *s <= u32::MAX as i64)
            .unwrap_or(0) as u32;
        out.push(DeviceInfo {
            mtu: data_mtu(&provider, if_mtu, ep.max_msg_size, cfg.mtu_cap),
            name: a.name.clone(),
            ipv4: a.ipv4,
            netmask: a.netmask,
            link_speed_mbps,
            if_mtu,
            provider_max_msg_size: ep.max_msg_size,
            provider,
            protocol: ep.protocol,
            is_loopback: a.loopback,
            info: OwnedInfo::dup(info)?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::iflist::parse_if_list;

    /// The devices `discover` makes of provider entries (domain name, address, in the
    /// provider's order) on a host whose getifaddrs lists `host` (in its order).
    fn chosen(
        cfg: &FabricConfig,
        provider: &[(&str, [u8; 4])],
        host: &[(&str, [u8; 4])],
    ) -> Vec<(String, Ipv4Addr)> {
        let ifaces: Vec<Iface> = host
            .iter()
            .map(|&(name, ip)| Iface {
                name: name.to_string(),
                ipv4: ip.into(),
                netmask: Ipv4Addr::new(255, 255, 255, 0),
                loopback: name == "lo",
            })
            .collect();
        let addrs: Vec<Placed> = provider
            .iter()
            .map(|&(dom, ip)| place(dom, ip.into(), &ifaces))
            .collect();
        choose(cfg, &addrs)
            .into_iter()
            .map(|i| (addrs[i].name.clone(), addrs[i].ipv4))
            .collect()
    }

    fn dev(name: &str, ip: [u8; 4]) -> (String, Ipv4Addr) {
        (name.to_string(), ip.into())
    }

    fn with_lo() -> FabricConfig {
        FabricConfig {
            include_loopback: true,
            ..Default::default()
        }
    }

    // `ip addr add` 10.9.9.1, 10.7.7.1, then 10.6.6.1 with label va:1, on one veth: the udp
    // provider lists them newest first (as fi_info showed), getifaddrs in the kernel's order.
    const PROVIDER: [(&str, [u8; 4]); 4] = [
        ("va:1", [10, 6, 6, 1]),
        ("va", [10, 7, 7, 1]),
        ("va", [10, 9, 9, 1]),
        ("lo", [127, 0, 0, 1]),
    ];
    const HOST: [(&str, [u8; 4]); 4] = [
        ("lo", [127, 0, 0, 1]),
        ("va", [10, 9, 9, 1]),
        ("va", [10, 7, 7, 1]),
        ("va:1", [10, 6, 6, 1]),
    ];

    #[test]
    fn one_device_per_nic_on_its_primary_address() {
        assert_eq!(
            chosen(&with_lo(), &PROVIDER, &HOST),
            vec![dev("va", [10, 9, 9, 1]), dev("lo", [127, 0, 0, 1])]
        );
        // A secondary address in the primary's subnet, added last: listed first by the provider.
        assert_eq!(
            chosen(
                &with_lo(),
                &[("eth0", [10, 1, 0, 9]), ("eth0", [10, 1, 0, 1])],
                &[("eth0", [10, 1, 0, 1]), ("eth0", [10, 1, 0, 9])]
            ),
            vec![dev("eth0", [10, 1, 0, 1])]
        );
    }

    #[test]
    fn a_labelled_address_is_its_interface() {
        // The only address of the NIC carries a label: the device is the NIC.
        assert_eq!(
            chosen(
                &with_lo(),
                &[("eth1:5", [10, 2, 0, 1])],
                &[("eth1:5", [10, 2, 0, 1])]
            ),
            vec![dev("eth1", [10, 2, 0, 1])]
        );
        let cfg = |inc: &str, exc: &str| FabricConfig {
            if_include: parse_if_list(inc).unwrap(),
            if_exclude: parse_if_list(exc).unwrap(),
            ..with_lo()
        };
        // Asking for the label, or for a subnet, asks for that address.
        assert_eq!(
            chosen(&cfg("va:1", ""), &PROVIDER, &HOST),
            vec![dev("va", [10, 6, 6, 1])]
        );
        assert_eq!(
            chosen(&cfg("10.7.7.0/24", ""), &PROVIDER, &HOST),
            vec![dev("va", [10, 7, 7, 1])]
        );
        // The interface's name covers its labelled addresses too.
        assert_eq!(
            chosen(&cfg("va", ""), &PROVIDER, &HOST),
            vec![dev("va", [10, 9, 9, 1])]
        );
        assert_eq!(
            chosen(&cfg("", "va"), &PROVIDER, &HOST),
            vec![dev("lo", [127, 0, 0, 1])]
        );
        // Excluding the primary's subnet leaves the next address in getifaddrs' order.
        assert_eq!(
            chosen(&cfg("", "10.9.9.0/24,lo"), &PROVIDER, &HOST),
            vec![dev("va", [10, 7, 7, 1])]
        );
    }

    #[test]
    fn data_mtu_is_at_most_the_largest_udp_payload() {
        // The sockets provider advertises 2^64 - 4097 bytes for FI_EP_DGRAM.
        let huge = usize::MAX - 4096;
        assert_eq!(data_mtu("sockets", 0, huge, 0), MAX_UDP_PAYLOAD);
        assert_eq!(data_mtu("sockets", 1500, huge, 9000), 9000);
        assert_eq!(data_mtu("usnic", 9000, 8958, 0), 8958);
        assert_eq!(data_mtu("udp", 65536, 1472, 0), MAX_UDP_PAYLOAD);
        assert_eq!(data_mtu("udp", 1500, 1472, 0), 1472);
        assert_eq!(data_mtu("udp", 0, 1472, 0), 1472);
    }

    #[test]
    fn addresses_getifaddrs_does_not_list_keep_the_domain_name() {
        assert_eq!(
            chosen(
                &with_lo(),
                &[("usnic_0", [10, 3, 0, 2]), ("usnic_0", [10, 3, 0, 1])],
                &[]
            ),
            vec![dev("usnic_0", [10, 3, 0, 2])]
        );
    }
}
