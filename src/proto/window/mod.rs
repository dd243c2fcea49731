//! Send and receive windows of one peer direction.

pub mod recv;
pub mod send;

pub use recv::{Accept, RecvWindow};
pub use send::{SegRec, SegState, SendWindow};
