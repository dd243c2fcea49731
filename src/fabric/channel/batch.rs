//! Batched sends (`gso.rs`): datagrams copied or written in place into the batch and sent
//! together by one system call on the endpoint's socket. Apart from `send.rs` because they are
//! copied into the batch (or written there) and leave when it is flushed.

use super::ChannelRes;
use crate::fabric::error::{strerror, FabricError};
use crate::fabric::gso::FlushError;
use crate::fabric::module::{BufId, Posted};
use crate::fabric::socket::Dest;
use crate::fabric::sys;

impl ChannelRes {
    /// Whether sends go through the batch (`batch_slot` and `commit_batched`, or
    /// `post_batched`).
    #[inline]
    pub(crate) fn batching(&self) -> bool {
        self.batch.is_some()
    }

    /// Datagrams one batched send carries at most (0: no batching).
    pub(crate) fn batch_room(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| b.room())
    }

    /// Datagrams of batches the kernel refused for good, lost like on a wire.
    pub(crate) fn lost_batched(&self) -> u64 {
        self.lost_unbatched + self.batch.as_ref().map_or(0, |b| b.lost)
    }

    /// (batched sends, datagrams they carried).
    pub(crate) fn batch_stats(&self) -> (u64, u64) {
        self.batch
            .as_ref()
            .map_or((0, 0), |b| (b.batches, b.batched))
    }

    /// Copies the first `len` bytes of lent send buffer `buf` and `body` into the batch for
    /// `to`, and frees the buffer (`Posted::Done`). A batch for another peer, a full one, one
    /// ended by a short datagram or one with a datagram parked behind it is sent first; if that
    /// finds the socket full, nothing is taken and the caller keeps `buf` (`-FI_EAGAIN`). Only
    /// where `batching`.
    pub(crate) fn post_batched(
        &mut self,
        buf: BufId,
        len: usize,
        body: [&[u8]; 2],
        to: Dest,
        fi_addr: sys::fi_addr_t,
    ) -> Result<Posted, FabricError> {
        let (i, total) = self.checked_gather(buf, len, body)?;
        // A full socket: the caller keeps `buf` and retries after progress. Lost datagrams:
        // this one was never tried and joins a new batch.
        self.make_room(Some(to))?;
        let alone = total < self.mtu && self.batch.as_ref().is_some_and(|b| b.len() == 0);
        let Some(batch) = self.batch.as_mut().filter(|_| !alone) else {
            // A short datagram with nothing before it gains nothing from a batch: it goes
            // alone, without the copy (a 1 KiB ping-pong across hosts read 6.6-7.0 us either
            // way). Also where batching stopped during that flush. Checked above already.
            return if body.iter().all(|b| b.is_empty()) {
                self.send_lent(i, len, to, fi_addr)
            } else {
                self.gather_lent(i, len, total, body, to, fi_addr)
            };
        };
        // Buffer i is lent (checked_tx): nothing else reads or writes it.
        let head = self.tx.slice(i, self.prefix, len);
        let complete = batch.push(to, [head, body[0], body[1]]);
        self.free_tx(i);
        if complete {
            // A full socket keeps it in the batch for the next flush.
            let _ = self.flush_or_log();
        }
        Ok(Posted::Done)
    }

    /// Room for the next datagram of the batch, written in place and then sent by
    /// `commit_batched` (a slot left uncommitted adds nothing). `None` where the channel does
    /// not batch, or while the socket is too full to take what waits ahead (retry after
    /// progress). The datagram is not copied again, and no send buffer is taken for it.
    pub(crate) fn batch_slot(&mut self) -> Option<&mut [u8]> {
        self.make_room(None).ok()?;
        self.batch.as_mut()?.slot()
    }

    /// Adds the first `len` bytes of the `batch_slot` as a datagram to `to`; sent at once if
    /// that completes the batch, else by a later flush. Never refused: a datagram for another
    /// peer than the batch's waits behind it while the socket is full.
    pub(crate) fn commit_batched(&mut self, len: usize, to: Dest) {
        if self.batch.as_mut().is_some_and(|b| b.commit(to, len)) {
            // A full socket keeps it for the next flush.
            let _ = self.flush_or_log();
        }
    }

    /// Flushes until the batch has room for a datagram (to `to`, if given). `Err` only for a
    /// full socket (`-FI_EAGAIN`); a batch lost or ended by the kernel makes room too.
    fn make_room(&mut self, to: Option<Dest>) -> Result<(), FabricError> {
        while let Some(b) = self.batch.as_ref() {
            if !to.map_or(b.blocked(), |to| b.must_flush_for(to)) {
                break;
            }
            // Each flush sends or drops what waits, a parked datagram moving up: progress.
            self.flush_or_log()?;
        }
        Ok(())
    }

    /// `flush_once`, with lost datagrams only logged: `Err` is `-FI_EAGAIN` alone.
    fn flush_or_log(&mut self) -> Result<(), FabricError> {
        match self.flush_once() {
            Err(e) if !e.is_would_block() => {
                tracing::debug!("{e}");
                Ok(())
            }
            r => r,
        }
    }

    /// Sends everything that waits in the batch, a datagram parked behind it included (it
    /// leaves alone, in a second send). `-FI_EAGAIN`: the socket is full and what is left
    /// stays for the next call; any other error: the batch's datagrams are lost like on a
    /// wire, and a parked one, never tried, is sent after them.
    pub(crate) fn flush_sends(&mut self) -> Result<(), FabricError> {
        let mut lost = Ok(());
        // At most twice: the first send moves a parked datagram up, the second takes it.
        while self.batch.as_ref().is_some_and(|b| b.len() > 0) {
            match self.flush_once() {
                Err(e) if e.is_would_block() => return Err(e),
                Err(e) => lost = Err(e),
                Ok(()) => {}
            }
        }
        lost
    }

    /// Sends the batch once; a parked datagram then starts the next one. `-FI_EAGAIN`: the
    /// socket is full and both stay; any other error: the batch's datagrams are lost like on
    /// a wire (the parked one stays).
    fn flush_once(&mut self) -> Result<(), FabricError> {
        let Some(batch) = self.batch.as_mut() else {
            return Ok(());
        };
        let n = batch.len();
        match batch.flush() {
            Ok(()) => Ok(()),
            Err(FlushError::WouldBlock) => Err(FabricError::from_ret(
                "sendmsg(UDP_SEGMENT)",
                -(sys::FI_EAGAIN as i64),
            )),
            Err(FlushError::Lost(e)) => Err(FabricError::with_detail(
                "sendmsg(UDP_SEGMENT)",
                -i64::from(e),
                format_args!("{n} datagrams lost"),
            )),
            Err(FlushError::Unsupported(e)) => {
                tracing::info!(
                    "usnic: sending datagrams one per system call from now on: the kernel \
                     cannot segment them on this route ({})",
                    strerror(e)
                );
                self.lost_unbatched += self.batch.take().map_or(0, |b| b.lost);
                Ok(())
            }
            Err(FlushError::OneByOne(to, e)) => {
                // Worth a warning: IP now fragments every full datagram to that peer.
                tracing::warn!(
                    "usnic: the route to {to} takes no run of {}-byte datagrams ({}): its path \
                     MTU is below this interface's, so they go one per system call from now \
                     on and IP fragments each; check the MTUs along the path",
                    self.mtu,
                    strerror(e)
                );
                Ok(())
            }
        }
    }
}
