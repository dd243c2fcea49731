//! Endpoints: what `add_procs` hands the PML for each reachable peer of one module.
//!
//! The PML stores the pointer and passes it back on every send; it is a leaked `Box` owned by
//! the module's peer table and freed by `del_procs` or `finalize`. Its fields never change after
//! creation except `failed`, so it can be read without borrowing the module state.
use std::cell::Cell;

use crate::proto::PeerId;

use super::sys;

pub struct Endpoint {
    /// Module that created it (checked on every use).
    pub module: u32,
    pub peer: PeerId,
    /// Open MPI's proc (lives until MPI_Finalize); reported to the PML error callback.
    pub proc_: *mut sys::opal_proc_t,
    pub jobid: u32,
    pub vpid: u32,
    pub host: String,
    /// The peer's interface this endpoint talks to (for messages and the connectivity map).
    pub remote_ipv4: std::net::Ipv4Addr,
    /// Set once the core reports the peer failed: sends fail fast from then on.
    pub failed: Cell<bool>,
    /// The connectivity check of this endpoint's path, requested on its first send.
    pub connectivity: super::connectivity::edge::PathCheck,
}

impl Endpoint {
    /// How messages name the peer.
    pub fn describe(&self) -> String {
        format!(
            "peer rank {} on host {} ({})",
            self.vpid, self.host, self.remote_ipv4
        )
    }

    pub fn as_c(p: *mut Endpoint) -> *mut sys::mca_btl_base_endpoint_t {
        p.cast()
    }
}
