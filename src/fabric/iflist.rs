//! `btl_usnic_if_include` / `btl_usnic_if_exclude` lists.
use std::net::Ipv4Addr;

/// One element of an interface include/exclude list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfFilter {
    /// An interface name such as `eth0` (matches the Linux device name exactly).
    Name(String),
    /// An IPv4 network, address already masked (`10.1.2.3/16` is stored as `10.1.0.0/16`).
    /// Matches every interface whose IPv4 address lies inside it.
    Cidr { addr: Ipv4Addr, prefix: u8 },
}

impl IfFilter {
    /// Does an interface with this name and address match?
    pub fn matches(&self, name: &str, ipv4: Ipv4Addr) -> bool {
        match self {
            IfFilter::Name(n) => n == name,
            IfFilter::Cidr { addr, prefix } => {
                let mask = prefix_mask(*prefix);
                u32::from(ipv4) & mask == u32::from(*addr)
            }
        }
    }
}

/// The netmask of a prefix length (0..=32).
pub(crate) fn prefix_mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

/// Parse the original's if_include / if_exclude syntax: a comma-separated list; tokens starting
/// with a letter are interface names, every other token must be `a.b.c.d/N` with N in 1..=32
/// (the address is normalised by the mask). Whitespace around tokens is ignored; an empty
/// string gives an empty list. `Err(message)` names the first bad token (an empty token, as in
/// `eth0,,eth1`, is bad too).
pub fn parse_if_list(s: &str) -> Result<Vec<IfFilter>, String> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',').map(|tok| parse_token(tok.trim())).collect()
}

fn parse_token(tok: &str) -> Result<IfFilter, String> {
    let first = tok
        .chars()
        .next()
        .ok_or_else(|| "empty element in interface list".to_string())?;
    if first.is_ascii_alphabetic() {
        if tok
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:@".contains(c))
        {
            return Ok(IfFilter::Name(tok.to_string()));
        }
        return Err(format!("invalid interface name \"{tok}\""));
    }
    let (addr, prefix) = tok
        .split_once('/')
        .ok_or_else(|| format!("\"{tok}\" is neither an interface name nor a.b.c.d/N"))?;
    let addr: Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("invalid IPv4 address \"{addr}\" in \"{tok}\""))?;
    let prefix: u8 = match prefix.parse() {
        Ok(p) if (1..=32).contains(&p) => p,
        _ => {
            return Err(format!(
                "invalid prefix length \"{prefix}\" in \"{tok}\" (must be 1..32)"
            ))
        }
    };
    let addr = Ipv4Addr::from(u32::from(addr) & prefix_mask(prefix));
    Ok(IfFilter::Cidr { addr, prefix })
}
