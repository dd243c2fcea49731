#![forbid(unsafe_code)]
//! The protocol core: a pure, deterministic reliability engine.
//!
//! No `unsafe`, no FFI, no clock, no I/O. Time is always a parameter (`Instant`, nanoseconds
//! from an arbitrary origin chosen by the caller). Inputs are `submit_*` / `handle_*` calls,
//! outputs are polled: `poll_transmit` (datagrams), `poll_event` (completions, deliveries,
//! failures), `poll_timeout` (when to call `handle_timeout` next). The core never calls back.
//!
//! The edges (fabric, Open MPI) drive exactly one `Engine` per BTL module. One `Engine`
//! serves many peers; per-peer state lives in `PeerId`-indexed slots inside it.
//!
//! `api` is the contract between the core and the edges; the other modules are its
//! implementation (public only so tests, benches and fuzzers can reach the parser and the
//! data structures directly).

mod api;
mod chunk;
mod config;
mod engine;
mod fragment;
pub mod hotel;
mod idmap;
mod payload;
mod peer;
mod rtt;
pub mod seq;
mod spare;
pub mod window;
pub mod wire;

pub use api::*;
pub use config::{MAX_MTU, MIN_DATA_MTU, MIN_PRIORITY_MTU};
pub use engine::Engine;
pub use idmap::{splitmix64, IdMap};
pub use payload::{Lent, Payload};
