//! The libfabric edge: every libfabric object and every `unsafe` call into libfabric lives here.
//!
//! TODO(doc): measured facts.
mod bufpool;
mod channel;
mod clock;
mod config;
mod device;
mod error;
mod fid;
mod iflist;
mod info;
mod module;
mod sys;

pub use clock::now;
pub use config::FabricConfig;
pub use device::{discover, DeviceInfo, IPV4_UDP_HEADERS, MAX_UDP_PAYLOAD};
pub use error::FabricError;
pub use iflist::{parse_if_list, IfFilter};
pub use module::{BufId, Completion, Module, Op, PeerAddr, LOCAL_ADDRESS_LEN};
