//! `Module`: one device opened: fabric, domain, AV and the two channels.
use super::config::FabricConfig;
use super::device::DeviceInfo;
use super::error::FabricError;
use crate::proto::Channel;

/// Size of `Module::local_address()`: IPv4 address (4 bytes, network order), then the UDP
/// port of the priority endpoint and of the data endpoint (2 bytes each, network order).
pub const LOCAL_ADDRESS_LEN: usize = 8;

/// A buffer of one channel (index into that channel's send or receive pool).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// A peer inserted into the module's address vector: one `fi_addr_t` per channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    pub(crate) addr: [u64; 2],
}

impl PeerAddr {
    /// The libfabric address of the peer's endpoint on channel `ch`.
    pub fn fi_addr(&self, ch: Channel) -> u64 {
        self.addr[ch as usize]
    }
}

/// Which kind of operation an error completion belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Send,
    Recv,
}

/// One completion read by `Module::poll`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A datagram of `len` bytes arrived in receive buffer `buf` (read it with `rx_bytes` or
    /// `rx_ptr`, then give the buffer back with `repost`).
    Recv { buf: BufId, len: usize },
    /// Send buffer `buf` is free again (one send credit back).
    SendDone { buf: BufId },
    /// A send or receive failed. A failed send's buffer is already free again (count it as
    /// a send completion); a failed receive's buffer is already queued for repost. An
    /// oversized datagram (longer than the channel MTU, possibly truncated) is reported here
    /// with `FI_ETRUNC`.
    Error {
        op: Op,
        buf: BufId,
        error: FabricError,
    },
}

/// One device opened: fabric, domain, AV, and two channels [Priority, Data], each an FI_EP_DGRAM
/// endpoint with its own CQ, posted receive buffers and send buffers.
pub struct Module {
    _todo: (),
}

impl Module {
    /// Open fabric, domain, AV and both channels on `dev`; post every receive buffer.
    pub fn open(dev: &DeviceInfo, cfg: &FabricConfig) -> Result<Module, FabricError> {
        let _ = (&dev.info, cfg);
        unimplemented!()
    }

    /// Bytes to publish through the modex so a peer can reach both channels;
    /// `LOCAL_ADDRESS_LEN` bytes, layout documented there.
    pub fn local_address(&self) -> Vec<u8> {
        unimplemented!()
    }

    /// Largest datagram of channel `ch`: `priority_mtu` (at most the device MTU) for the
    /// priority channel, the device's `mtu` for the data channel.
    pub fn channel_mtu(&self, ch: Channel) -> usize {
        let _ = ch;
        unimplemented!()
    }

    /// Number of send buffers of channel `ch` (= its send credits).
    pub fn tx_capacity(&self, ch: Channel) -> usize {
        let _ = ch;
        unimplemented!()
    }

    /// Number of send buffers of channel `ch` free right now.
    pub fn tx_available(&self, ch: Channel) -> usize {
        let _ = ch;
        unimplemented!()
    }

    /// Insert a peer's `local_address()` bytes into the AV (both channels). A malformed
    /// address (wrong length, address 0.0.0.0, port 0) is an error naming what is wrong.
    pub fn insert_peer(&mut self, remote_address: &[u8]) -> Result<PeerAddr, FabricError> {
        let _ = remote_address;
        unimplemented!()
    }

    /// Remove a peer from the AV (both channels).
    pub fn remove_peer(&mut self, p: &PeerAddr) {
        let _ = p;
        unimplemented!()
    }

    /// A free send buffer of channel `ch` (its length is the channel MTU), or None when every
    /// buffer is in flight. The buffer is the caller's until `post_send` succeeds or
    /// `release_tx` gives it back.
    pub fn tx_buffer(&mut self, ch: Channel) -> Option<(BufId, &mut [u8])> {
        let _ = ch;
        unimplemented!()
    }

    /// Give back a send buffer obtained from `tx_buffer` without sending it.
    pub fn release_tx(&mut self, ch: Channel, buf: BufId) {
        let _ = (ch, buf);
        unimplemented!()
    }

    /// Send the first `len` bytes of send buffer `buf` to `to` on channel `ch`.
    /// `Err(e)` with `e.is_would_block()` (`-FI_EAGAIN`): nothing was sent and the caller still
    /// owns the buffer (retry after `poll`). `len` larger than the channel MTU is refused
    /// with `FI_EMSGSIZE` before reaching libfabric.
    pub fn post_send(
        &mut self,
        ch: Channel,
        buf: BufId,
        len: usize,
        to: &PeerAddr,
    ) -> Result<(), FabricError> {
        let _ = (ch, buf, len, to);
        unimplemented!()
    }

    /// Read up to `max` completions of channel `ch` into `out` (send completions free their
    /// buffer). Never blocks. An `Err` is a failure of the CQ itself, not of one operation.
    pub fn poll(
        &mut self,
        ch: Channel,
        max: usize,
        out: &mut Vec<Completion>,
    ) -> Result<(), FabricError> {
        let _ = (ch, max, out);
        unimplemented!()
    }

    /// The `len` bytes received in receive buffer `buf` of channel `ch`.
    pub fn rx_bytes(&self, ch: Channel, buf: BufId, len: usize) -> &[u8] {
        let _ = (ch, buf, len);
        unimplemented!()
    }

    /// Address of receive buffer `buf`'s payload: stable for the module's lifetime, valid to read
    /// until the buffer is reposted (the Open MPI edge hands it to the PML with no borrow live).
    pub fn rx_ptr(&self, ch: Channel, buf: BufId) -> *mut u8 {
        let _ = (ch, buf);
        unimplemented!()
    }

    /// Queue receive buffer `buf` of channel `ch` for reposting (batched: see `flush_reposts`).
    pub fn repost(&mut self, ch: Channel, buf: BufId) {
        let _ = (ch, buf);
        unimplemented!()
    }

    /// Post every queued receive buffer, all but the last of each channel with `FI_MORE`.
    pub fn flush_reposts(&mut self) -> Result<(), FabricError> {
        unimplemented!()
    }
}
