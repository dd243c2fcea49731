//! The Open MPI edge: what the C shim (`mca_btl_usnic.c.shim`) calls, and everything that
//! touches Open MPI objects: descriptors, endpoints, the modex, MCA parameters, PML callbacks,
//! the recursive lock and the panic boundary.
//!
//! Data flows one way: the shim calls an `exports` entry point, which takes the lock, borrows a
//! module's state to drive the fabric and the protocol core, collects every call back into Open
//! MPI as an upcall, ends the borrow, and only then runs the upcalls.
mod acker;
mod boundary;
mod component;
pub mod connectivity;
mod endpoint;
pub mod exports;
mod frag;
mod lock;
mod log;
pub mod modex;
mod module;
pub mod pairing;
pub mod params;
mod procs;
mod rdma;
mod send;
mod stats;
mod status;
pub mod sys;

/// Serializes unit tests that touch process-wide state (lock mode, sticky failure).
#[cfg(test)]
pub(crate) static TEST_SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
