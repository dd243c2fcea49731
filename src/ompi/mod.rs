//! The Open MPI edge: what the C shim (`mca_btl_usnic.c.shim`) calls, and everything that
//! touches Open MPI objects: descriptors, endpoints, the modex, MCA parameters, PML callbacks,
//! the recursive lock and the panic boundary.
//!
//! Data flows one way: the shim calls an `exports` entry point, which takes the lock, borrows a
//! module's state to drive the fabric and the protocol core, collects every call back into Open
//! MPI as an upcall, ends the borrow, and only then runs the upcalls.
//!
//! Files: `exports` (every `usnic_rs_*` entry point: panic boundary + lock), `component` (init:
//! parameters, discovery, one module per interface, modex; progress; statistics lines),
//! `module` (one interface's fabric module + engine; completions in, upcalls out), `procs`
//! (add/del_procs, pairing through `pairing`, finalize), `send` (alloc/free/prepare_src/send/
//! sendi/flush), `rdma` (emulated put/get, registrations), `frag` (the descriptor type),
//! `endpoint`, `modex` (the published blob), `params` (MCA parameters), `status` (OPAL codes and
//! the `btl_send` outcome rules), `stats` (MPI_T counters), `lock` (recursive lock + state cell),
//! `acker` (ACK helper thread), `log`, `boundary`, `sys` (bindgen).
//!
//! Threads: every entry point takes one recursive lock in its guard, at every thread level (the
//! ACK helper thread and MPI_T readers share the state too; lock_api's `ReentrantMutex` over
//! parking_lot's `RawMutex`, its owner named by `pthread_self`); PML callbacks run under it (as
//! in the C original), so a callback may send on the same thread. The helper never calls Open
//! MPI: it only lets the core acknowledge, deferring deliveries and completions to the next
//! progress.
//!
//! Send completion: the core copies a fragment's bytes when it is submitted, so `btl_send`
//! completes BTL-owned descriptors at once (return 1, or the callback inside `btl_send` when the
//! PML asked for one); descriptors the PML owns are called back when every byte is ACKed, and
//! so are owned ones once 32 MiB are completed ahead of their ACKs (back-pressure).
mod acker;
mod boundary;
mod component;
pub mod connectivity;
mod endpoint;
pub mod exports;
mod frag;
mod help;
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
mod stats_line;
mod status;
pub mod sys;

/// Serializes unit tests that touch process-wide state (the sticky failure).
#[cfg(test)]
pub(crate) static TEST_SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
