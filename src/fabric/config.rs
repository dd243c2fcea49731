//! `FabricConfig`: what the Open MPI edge tells the fabric edge (from the MCA parameters).
use super::iflist::IfFilter;

/// Device selection and queue sizing. Field names follow the original's MCA parameters
/// (`btl_usnic_<field>`); `-1` sizes mean "provider default", exactly as in the C original.
#[derive(Clone, Debug)]
pub struct FabricConfig {
    /// libfabric provider name (`btl_usnic_provider`); default `"udp"`.
    pub provider: String,
    /// Keep only matching interfaces (names or CIDRs). Must not be combined with `if_exclude`.
    pub if_include: Vec<IfFilter>,
    /// Drop matching interfaces. Must not be combined with `if_include`.
    pub if_exclude: Vec<IfFilter>,
    /// Upper bound on the data-channel datagram size in bytes; 0 = no cap.
    pub mtu_cap: usize,
    /// Datagram size of the priority channel (the original's `max_tiny_msg_size`, 768).
    pub priority_mtu: usize,
    /// Send buffers (= send credits) of the data channel; -1 = provider `tx_attr.size`.
    pub sd_num: i32,
    /// Posted receive buffers of the data channel; -1 = provider `rx_attr.size`.
    pub rd_num: i32,
    /// Send buffers of the priority channel; -1 = 127 (capped by the provider).
    pub prio_sd_num: i32,
    /// Posted receive buffers of the priority channel; -1 = 127 (capped by the provider).
    pub prio_rd_num: i32,
    /// Completion queue entries per channel; -1 = that channel's sd + rd. A smaller value is
    /// raised to sd + rd (the `udp` provider would otherwise overwrite unread completions).
    pub cq_num: i32,
    /// Keep loopback interfaces (`lo`) even when `if_include` does not name them. Default false:
    /// same-host peers reach each other through any interface address anyway.
    pub include_loopback: bool,
    /// Send on the sockets directly (`udp` provider): each datagram with one system call of
    /// our own, and runs of full data-channel datagrams to one peer with one (`UDP_SEGMENT`;
    /// `gso.rs`). Default true.
    pub gso: bool,
    /// Read the sockets directly, not through the provider, and runs of data-channel
    /// datagrams with one system call (`udp` provider, `UDP_GRO`; `gro.rs`). Default true.
    pub gro: bool,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            provider: "udp".to_string(),
            if_include: Vec::new(),
            if_exclude: Vec::new(),
            mtu_cap: 0,
            priority_mtu: 768,
            sd_num: -1,
            rd_num: -1,
            prio_sd_num: -1,
            prio_rd_num: -1,
            cq_num: -1,
            include_loopback: false,
            gso: true,
            gro: true,
        }
    }
}
