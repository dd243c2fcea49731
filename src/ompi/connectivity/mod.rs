//! The connectivity checker: before the first datagram to a peer, prove that the smallest and
//! the largest datagram this BTL sends get from the local interface to the peer's interface and
//! back, and stop the job with a message naming both ends when they do not (the udp provider,
//! like a usNIC, drops what it cannot deliver without telling anyone, so the job would hang).
//!
//! # Shape (one agent per host, as in the C original)
//! - [`agent::Agent`]: a thread in the first local process to bind its socket. It owns a UNIX stream socket
//!   (under the job session directory) and one UDP listener per local address the BTL uses,
//!   with don't-fragment set. It probes each (local listener, remote listener) pair once for
//!   the whole host, resends every `ack_timeout`, and after `retries` sends reports through the
//!   edge's callbacks (help message, then abort).
//! - [`client::Client`]: every process (the agent's own included) asks the agent for a
//!   listener per module ([`ipc::Listen`] → UDP port, published in the modex) and, on first use
//!   of an endpoint, to check a path ([`ipc::Ping`], fire and forget).
//! - [`wire`]: the UDP probe/ACK format; [`ipc`]: the UNIX-socket protocol; [`sys`]: the socket
//!   options std lacks.
//!
//! Nothing here knows Open MPI: the edge passes host name, local rank, socket path and
//! callbacks as plain values, so the pair is tested on loopback in one process.
pub mod agent;
pub mod client;
pub mod edge;
pub mod ipc;
pub mod mtu;
pub mod sys;
pub mod wire;

use std::net::Ipv4Addr;

/// Name of the agent's UNIX socket inside the job session directory.
pub const SOCKET_NAME: &str = "btl-usnic-rs-cagent";
/// Size of the small probe.
pub const SMALL_SIZE: u32 = wire::HEADER_LEN as u32;

/// A path that did not pass, with everything the help message names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub local_host: String,
    /// Local interface name ("?" when the address is on no interface, which cannot happen for
    /// an address the BTL bound).
    pub local_interface: String,
    /// Local address with prefix length, e.g. `10.77.0.1/24`.
    pub local_address: String,
    pub remote_host: String,
    pub remote_address: Ipv4Addr,
    pub remote_port: u16,
    pub small_size: u32,
    pub large_size: u32,
    pub small_ok: bool,
    pub large_ok: bool,
    /// The last send error seen on this path, if any (e.g. EMSGSIZE: the local MTU is smaller
    /// than the large probe), for the log line after the help message.
    pub send_error: Option<String>,
}

impl Failure {
    /// The help topic in `help-mpi-btl-usnic-rs.txt`.
    pub fn topic(&self) -> &'static str {
        match (self.small_ok, self.large_ok) {
            (true, _) => "connectivity error: small ok, large bad",
            (false, true) => "connectivity error: small bad, large ok",
            (false, false) => "connectivity error: small bad, large bad",
        }
    }

    /// The topic's substitution values, in order (`%s` x5, `%d` x2).
    pub fn params(&self) -> Vec<String> {
        vec![
            self.local_host.clone(),
            self.local_interface.clone(),
            self.local_address.clone(),
            self.remote_host.clone(),
            self.remote_address.to_string(),
            self.small_size.to_string(),
            self.large_size.to_string(),
        ]
    }
}

/// Renders `topic` from the text of a help file (Open MPI's show_help format: `[topic]` lines,
/// `#` comment lines ending a topic) with `params` substituted for `%s`/`%d` in order. Used when
/// Open MPI's own show_help is not reachable, and by tests to check the exact text.
pub fn render_help(help_file: &str, topic: &str, params: &[String]) -> Option<String> {
    let header = format!("[{topic}]");
    let mut lines = help_file.lines().skip_while(|l| l.trim_end() != header);
    lines.next()?;
    let mut out = String::new();
    let mut args = params.iter();
    for line in lines {
        if line.starts_with('#') || line.starts_with('[') {
            break;
        }
        let mut rest = line;
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            let spec = rest[i + 1..].chars().next();
            match spec {
                Some('s') | Some('d') => {
                    out.push_str(args.next().map(String::as_str).unwrap_or("?"));
                    rest = &rest[i + 2..];
                }
                Some('%') => {
                    out.push('%');
                    rest = &rest[i + 2..];
                }
                _ => {
                    out.push('%');
                    rest = &rest[i + 1..];
                }
            }
        }
        out.push_str(rest);
        out.push('\n');
    }
    Some(out)
}
