//! usnic-rs: Open MPI's usnic BTL rebuilt in Rust, loaded as `mca_btl_usnic.so`.
//!
//! Three rooms, data flowing one way through them:
//! - [`proto`]: the protocol core. Pure Rust, no `unsafe`, no I/O, no clock.
//! - `fabric`: the libfabric edge (every libfabric object and `unsafe` call into it).
//! - `ompi`: the Open MPI edge (entry points the C shim calls, descriptors, modex, MCA params).

pub mod fabric;
pub mod ompi;
pub mod proto;
