//! Runs of data-channel datagrams to one peer sent with one system call (UDP generic
//! segmentation offload, `UDP_SEGMENT`, Linux 4.18).
//!
//! Across two netns hosts at MTU 1500 each 1472-byte datagram cost about 6 us of the sending
//! core in the kernel (veth, bridge and the receiving stack run on the sender's core), which
//! held the BTL near 0.25 GB/s while tcp moves 64 KiB segments. One `sendmsg` with a
//! `UDP_SEGMENT` control message carries up to 44 such datagrams back to back and the kernel
//! cuts them apart as late as it can. A Python sender between the two hosts measured 0.59 us
//! of CPU per datagram this way against 6.33 us with one `sendto` each, and 2.51 us when the
//! veth segments in software (`ethtool -K veth0 tx-udp-segmentation off`). Each datagram
//! keeps its own header: the receiver sees the same datagrams as without batching.
//!
//! libfabric offers no such call, so the batch goes out on the `udp` provider's own socket
//! (found by its bound address, as in `sockbuf.rs`): the peer sees the usual source address.
use super::socket::{self, Dest};
use super::sys;
use std::os::fd::RawFd;

/// Largest UDP payload over IPv4, which bounds the whole batch (and a run read at once).
pub(crate) const MAX_BATCH_BYTES: usize = 65507;
/// The kernel refuses more segments than this per send (`UDP_MAX_SEGMENTS`, 64 before 6.x).
const MAX_SEGMENTS: usize = 64;

/// Why a flush did not send its batch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FlushError {
    /// The socket's send buffer is full: the batch is kept, retry after progress.
    WouldBlock,
    /// The datagrams are lost (the protocol core repairs them); the errno says why.
    Lost(i32),
    /// The kernel cannot segment on this socket (errno): the batch went out one datagram per
    /// send, a parked datagram after it, and the channel should stop batching.
    Unsupported(i32),
    /// The route to the destination cannot take the batch's datagrams whole (`EMSGSIZE`: its
    /// path MTU is smaller, and the kernel segments only to whole datagrams that fit it): the
    /// batch went out one datagram per send, which the kernel fragments, and so will every
    /// later datagram to that destination.
    OneByOne(Dest, i32),
}

/// One channel's batch under construction.
pub(crate) struct Batch {
    fd: RawFd,
    /// Size of every datagram of a batch but the last (the channel MTU).
    seg: usize,
    max_segs: usize,
    /// Room for `max_segs` datagrams, written in place (`slot`); the batch is `bytes[..used]`.
    bytes: Box<[u8]>,
    used: usize,
    count: usize,
    to: Option<Dest>,
    /// Nothing may follow the last datagram: it was shorter than `seg` (the kernel would take
    /// the next one as its continuation), or its destination takes datagrams alone.
    closed: bool,
    /// A datagram written behind the batch for another destination while the batch could not
    /// go (`commit`): it starts the next batch once this one is sent.
    parked: Option<(Dest, usize)>,
    /// Destinations that refused a batch for its size (`FlushError::OneByOne`): a datagram to one
    /// of them closes its batch, so it leaves alone. Usually empty.
    one_by_one: Vec<Dest>,
    /// Sends of more than one datagram, and the datagrams they carried.
    pub batches: u64,
    pub batched: u64,
    /// Datagrams the kernel refused for good, lost like on a wire (the core repairs them).
    pub lost: u64,
    /// Tests: this many sends find the socket full (`EAGAIN`) instead of being made.
    #[cfg(test)]
    full_for: usize,
    /// Tests: sends of more than one datagram fail with this errno instead of being made.
    #[cfg(test)]
    refuse_batches: Option<i32>,
}

impl Batch {
    /// A batcher for the socket `fd` whose datagrams are at most `seg` bytes; `None` where it
    /// would not pay (fewer than 2 datagrams fit a batch) or the kernel lacks `UDP_SEGMENT`.
    pub(crate) fn new(fd: RawFd, seg: usize) -> Option<Batch> {
        let max_segs = MAX_SEGMENTS.min(MAX_BATCH_BYTES / seg.max(1));
        if max_segs < 2 || !supported(fd) {
            return None;
        }
        Some(Batch {
            fd,
            seg,
            max_segs,
            bytes: vec![0; seg * max_segs].into_boxed_slice(),
            used: 0,
            count: 0,
            to: None,
            closed: false,
            parked: None,
            one_by_one: Vec::new(),
            batches: 0,
            batched: 0,
            lost: 0,
            #[cfg(test)]
            full_for: 0,
            #[cfg(test)]
            refuse_batches: None,
        })
    }

    /// Whether the batch must be flushed before a datagram to `to` joins it: it is `blocked`,
    /// or holds datagrams for another destination.
    pub(crate) fn must_flush_for(&self, to: Dest) -> bool {
        self.blocked() || self.holds_other_than(to)
    }

    /// Whether the batch holds datagrams for another destination than `to`.
    fn holds_other_than(&self, to: Dest) -> bool {
        self.count > 0 && self.to != Some(to)
    }

    /// Whether the batch must be flushed before `slot` has room: it is full, closed, or
    /// holds a parked datagram.
    pub(crate) fn blocked(&self) -> bool {
        self.parked.is_some() || self.closed || self.count == self.max_segs
    }

    /// Room for the next datagram behind the batch (`seg` bytes), to be written in place and
    /// then added by `commit`; writing without committing adds nothing. `None` while
    /// `blocked`.
    pub(crate) fn slot(&mut self) -> Option<&mut [u8]> {
        if self.blocked() {
            return None;
        }
        Some(&mut self.bytes[self.used..self.used + self.seg])
    }

    /// Adds the first `len` bytes of the `slot` as a datagram to `to`. Returns true when the
    /// batch should be flushed now: it is complete (full, or closed by a short datagram), or
    /// the datagram was for another destination and waits parked behind it.
    pub(crate) fn commit(&mut self, to: Dest, len: usize) -> bool {
        debug_assert!(!self.blocked() && len <= self.seg);
        if self.holds_other_than(to) {
            self.parked = Some((to, len));
            return true;
        }
        self.used += len;
        self.count += 1;
        self.to = Some(to);
        self.closed = len < self.seg || self.one_by_one.contains(&to);
        self.closed || self.count == self.max_segs
    }

    /// Appends one datagram made of `pieces` (at most `seg` bytes together). The caller has
    /// flushed first where `must_flush_for` said so (then the batch has a slot). Returns true
    /// when the batch is complete (full, or closed by a short datagram) and should be flushed
    /// now.
    pub(crate) fn push(&mut self, to: Dest, pieces: [&[u8]; 3]) -> bool {
        debug_assert!(!self.must_flush_for(to));
        let slot = self
            .slot()
            .expect("must_flush_for was false, so the batch is not blocked");
        let mut len = 0;
        for p in pieces {
            slot[len..len + p.len()].copy_from_slice(p);
            len += p.len();
        }
        self.commit(to, len)
    }

    /// Datagrams in the batch (a parked one is not yet).
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Datagrams one send carries at most.
    pub(crate) fn room(&self) -> usize {
        self.max_segs
    }

    /// Sends the batch, if any; a parked datagram then starts the next one. On `WouldBlock`
    /// both stay for the next flush. A batch the kernel would not segment is tried one
    /// datagram per send, the parked one after it. Otherwise, on `Lost` the batch is gone and
    /// the parked datagram, never tried, stays.
    pub(crate) fn flush(&mut self) -> Result<(), FlushError> {
        let Some(to) = self.to.filter(|_| self.count > 0) else {
            return Ok(());
        };
        match self.send_batch(to) {
            Err(e) if socket::is_full(e) => Err(FlushError::WouldBlock),
            Err(e) if self.count > 1 && (unsupported_here(e) || e == libc::EMSGSIZE) => {
                // The socket or route cannot segment (IPsec, a smaller path MTU): one send per
                // datagram still delivers this batch (any that fails is lost like on a wire).
                let mut sent = 0;
                for d in self.bytes[..self.used].chunks(self.seg) {
                    sent += send(self.fd, d, None, to).is_ok() as usize;
                }
                self.lost += (self.count - sent) as u64;
                if let Some((to, len)) = self.parked.take() {
                    let parked = &self.bytes[self.used..self.used + len];
                    self.lost += send(self.fd, parked, None, to).is_err() as u64;
                }
                self.clear();
                if sent == 0 {
                    // Refused one by one too: the destination, not the segmenting (a
                    // malformed address says EINVAL either way). Batching stays.
                    Err(FlushError::Lost(e))
                } else if e == libc::EMSGSIZE {
                    self.one_by_one.push(to);
                    Err(FlushError::OneByOne(to, e))
                } else {
                    Err(FlushError::Unsupported(e))
                }
            }
            Err(e) => {
                self.lost += self.count as u64;
                self.clear();
                Err(FlushError::Lost(e))
            }
            Ok(()) => {
                if self.count > 1 {
                    self.batches += 1;
                    self.batched += self.count as u64;
                }
                self.clear();
                Ok(())
            }
        }
    }

    /// One `sendmsg` of the batch to `to`, segmented where it holds more than one datagram.
    fn send_batch(&mut self, to: Dest) -> Result<(), i32> {
        #[cfg(test)]
        if self.full_for > 0 {
            self.full_for -= 1;
            return Err(libc::EAGAIN);
        }
        #[cfg(test)]
        if let Some(e) = self.refuse_batches.filter(|_| self.count > 1) {
            return Err(e);
        }
        send(
            self.fd,
            &self.bytes[..self.used],
            (self.count > 1).then_some(self.seg),
            to,
        )
    }

    /// Empties the batch; a parked datagram moves to the front as the next batch's first.
    fn clear(&mut self) {
        let (from, sent) = (self.used, self.count);
        self.used = 0;
        self.count = 0;
        self.closed = false;
        if let Some((to, len)) = self.parked.take() {
            debug_assert!(sent > 0);
            self.bytes.copy_within(from..from + len, 0);
            self.commit(to, len);
        }
    }
}

/// Errors by which the kernel says this socket or route cannot segment: batching stops.
pub(crate) fn unsupported_here(errno: i32) -> bool {
    matches!(
        errno,
        libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::ENOPROTOOPT
    )
}

/// Whether the kernel knows `UDP_SEGMENT` on this socket.
fn supported(fd: RawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v/len are a writable int and its size; a kernel without the option says
    // ENOPROTOOPT.
    let r = unsafe {
        libc::getsockopt(
            fd,
            sys::SOL_UDP as libc::c_int,
            sys::UDP_SEGMENT as libc::c_int,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0
}

/// `bytes` to `to`, cut into datagrams of `seg` bytes by the kernel when `seg` is given, else
/// one datagram by a plain `sendto`. Returns the errno on failure.
fn send(fd: RawFd, bytes: &[u8], seg: Option<usize>, to: Dest) -> Result<(), i32> {
    match seg {
        Some(_) => socket::send_to(fd, &[std::io::IoSlice::new(bytes)], seg, to),
        None => socket::send_one(fd, bytes, to),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    fn pair() -> (UdpSocket, UdpSocket) {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        (tx, rx)
    }

    #[test]
    fn a_batch_arrives_as_the_datagrams_it_was_made_of() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).expect("UDP_SEGMENT on this kernel");
        let to = Dest::of(&rx);
        for i in 0..5u8 {
            let hdr = [i; 40];
            let body = vec![i.wrapping_mul(7); 960];
            let complete = b.push(to, [&hdr, &body, &[]]);
            assert!(!complete);
        }
        assert!(
            b.push(to, [&[9u8; 10], &[], &[]]),
            "a short datagram closes it"
        );
        assert!(b.must_flush_for(to));
        b.flush().unwrap();
        assert_eq!((b.batches, b.batched, b.len()), (1, 6, 0));
        let mut buf = [0u8; 2000];
        for i in 0..5u8 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(n, 1000, "datagram {i}");
            assert_eq!(&buf[..40], &[i; 40]);
            assert!(buf[40..1000].iter().all(|&x| x == i.wrapping_mul(7)));
        }
        assert_eq!(rx.recv(&mut buf).unwrap(), 10);
        assert_eq!(&buf[..10], &[9u8; 10]);
    }

    #[test]
    fn another_peer_or_a_full_batch_needs_a_flush_first() {
        let (tx, rx) = pair();
        let (_, rx2) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 30000).unwrap();
        assert_eq!(b.max_segs, 2, "65507 bytes hold two datagrams of 30000");
        let (to, other) = (Dest::of(&rx), Dest::of(&rx2));
        assert!(!b.must_flush_for(to), "an empty batch takes anyone");
        let d = vec![1u8; 30000];
        assert!(!b.push(to, [&d, &[], &[]]));
        assert!(b.must_flush_for(other));
        assert!(!b.must_flush_for(to));
        assert!(b.push(to, [&d, &[], &[]]), "full");
        assert!(b.must_flush_for(to));
        b.flush().unwrap();
        let mut buf = vec![0u8; 65536];
        assert_eq!(rx.recv(&mut buf).unwrap(), 30000);
        assert_eq!(rx.recv(&mut buf).unwrap(), 30000);
    }

    /// A route whose path MTU is below the datagrams (the kernel segments a run only into
    /// datagrams that fit it whole, else `EMSGSIZE`) still gets this batch and every later
    /// datagram, one per send; batches to other destinations go on.
    #[test]
    fn a_destination_that_refuses_a_run_for_its_size_gets_datagrams_alone() {
        let (tx, rx) = pair();
        let (_, rx2) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let (to, other) = (Dest::of(&rx), Dest::of(&rx2));
        b.refuse_batches = Some(libc::EMSGSIZE);
        for i in 0..3u8 {
            assert!(!b.push(to, [&[i; 1000], &[], &[]]));
        }
        assert_eq!(b.flush(), Err(FlushError::OneByOne(to, libc::EMSGSIZE)));
        let mut buf = [0u8; 2000];
        for i in 0..3u8 {
            assert_eq!(rx.recv(&mut buf).unwrap(), 1000);
            assert_eq!(buf[0], i, "in order, each whole");
        }
        assert!(
            b.push(to, [&[7; 1000], &[], &[]]),
            "a datagram to it leaves alone"
        );
        b.flush().unwrap();
        assert_eq!((rx.recv(&mut buf).unwrap(), buf[0]), (1000, 7));
        b.refuse_batches = None;
        assert!(!b.push(other, [&[8; 1000], &[], &[]]));
        assert!(!b.push(other, [&[8; 1000], &[], &[]]), "others still batch");
        b.flush().unwrap();
        assert_eq!((b.batches, b.batched), (1, 2));
        assert_eq!(rx2.recv(&mut buf).unwrap(), 1000);
        assert_eq!(rx2.recv(&mut buf).unwrap(), 1000);
    }

    /// A batch refused one datagram at a time too says nothing about segmenting (a malformed
    /// destination, port 0 here, is EINVAL either way): its datagrams are lost and the channel
    /// keeps batching, for that destination too.
    #[test]
    fn a_destination_refused_whole_or_alone_does_not_stop_batching() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let bad = Dest {
            ip: Dest::of(&rx).ip,
            port: 0,
        };
        for _ in 0..2 {
            b.push(bad, [&[1; 1000], &[], &[]]);
        }
        assert_eq!(b.flush(), Err(FlushError::Lost(libc::EINVAL)));
        assert!(!b.push(bad, [&[1; 1000], &[], &[]]), "still batched");
        b.refuse_batches = Some(libc::EMSGSIZE);
        b.push(bad, [&[1; 1000], &[], &[]]);
        assert_eq!(b.flush(), Err(FlushError::Lost(libc::EMSGSIZE)));
        assert!(
            !b.push(bad, [&[1; 1000], &[], &[]]),
            "not taken for a path MTU"
        );
    }

    #[test]
    fn one_datagram_goes_without_segmentation_and_nothing_is_sent_twice() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        b.push(Dest::of(&rx), [&[5u8; 1000], &[], &[]]);
        b.flush().unwrap();
        b.flush().unwrap();
        assert_eq!(
            (b.batches, b.batched),
            (0, 0),
            "a single datagram is no batch"
        );
        expect(&rx, 1000, 5);
        expect_no_more(&rx);
    }

    /// Port 0 is not a destination: the kernel refuses a send there.
    fn nowhere() -> Dest {
        Dest {
            ip: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            port: 0,
        }
    }

    /// The next datagram on `rx` is `len` bytes of `fill`.
    fn expect(rx: &UdpSocket, len: usize, fill: u8) {
        let mut buf = [0u8; 2000];
        assert_eq!(rx.recv(&mut buf).unwrap(), len, "length of the {fill}s");
        assert!(
            buf[..len].iter().all(|&x| x == fill),
            "bytes of the {fill}s"
        );
    }

    /// Nothing more arrives on `rx`: what was sent, was sent once.
    fn expect_no_more(rx: &UdpSocket) {
        rx.set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        assert!(rx.recv(&mut [0u8; 2000]).is_err(), "sent once");
    }

    /// Writes `len` bytes of `fill` into the slot and commits them to `to`.
    fn put(b: &mut Batch, to: Dest, fill: u8, len: usize) -> bool {
        b.slot().expect("room")[..len].fill(fill);
        b.commit(to, len)
    }

    #[test]
    fn datagrams_written_in_place_leave_as_written_and_an_uncommitted_slot_adds_nothing() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let to = Dest::of(&rx);
        b.slot().unwrap().fill(0xee);
        assert_eq!(b.len(), 0, "written, not committed");
        assert!(!put(&mut b, to, 1, 1000));
        b.slot().unwrap().fill(0xee);
        assert!(put(&mut b, to, 2, 300), "a short datagram closes the batch");
        assert!(b.blocked() && b.slot().is_none());
        b.flush().unwrap();
        assert!(!b.blocked());
        assert_eq!((b.batches, b.batched), (1, 2));
        expect(&rx, 1000, 1);
        expect(&rx, 300, 2);
    }

    #[test]
    fn a_full_batch_has_no_slot_until_flushed() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 30000).unwrap();
        let to = Dest::of(&rx);
        assert!(!put(&mut b, to, 1, 30000));
        assert!(put(&mut b, to, 2, 30000), "two fill it");
        assert!(b.slot().is_none());
        b.flush().unwrap();
        assert!(b.slot().is_some());
    }

    #[test]
    fn a_datagram_for_another_peer_waits_parked_and_starts_the_next_batch() {
        let (tx, rx) = pair();
        let (_, rx2) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let (to, other) = (Dest::of(&rx), Dest::of(&rx2));
        assert!(!put(&mut b, to, 1, 1000));
        assert!(!put(&mut b, to, 2, 1000));
        assert!(put(&mut b, other, 3, 1000), "another peer: flush now");
        assert_eq!(b.len(), 2, "parked, not in this batch");
        assert!(b.blocked() && b.slot().is_none());
        b.flush().unwrap();
        assert_eq!(b.len(), 1, "the parked datagram moved up");
        assert!(!b.blocked(), "and takes followers");
        assert!(!put(&mut b, other, 4, 1000));
        b.flush().unwrap();
        assert_eq!((b.batches, b.batched), (2, 4));
        expect(&rx, 1000, 1);
        expect(&rx, 1000, 2);
        expect(&rx2, 1000, 3);
        expect(&rx2, 1000, 4);
    }

    #[test]
    fn a_full_socket_keeps_the_batch_and_the_parked_datagram_until_it_takes_them() {
        let (tx, rx) = pair();
        let (_, rx2) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let (to, other) = (Dest::of(&rx), Dest::of(&rx2));
        assert!(!put(&mut b, to, 1, 1000));
        assert!(put(&mut b, other, 2, 700));
        b.full_for = 2;
        assert_eq!(b.flush(), Err(FlushError::WouldBlock));
        assert_eq!(b.flush(), Err(FlushError::WouldBlock));
        assert!(
            b.slot().is_none(),
            "nothing more while the parked one waits"
        );
        assert_eq!(b.len(), 1);
        b.flush().unwrap();
        assert_eq!(b.len(), 1, "the parked datagram moved up");
        assert!(b.blocked(), "a short datagram closes its batch");
        b.flush().unwrap();
        assert!(!b.blocked() && b.len() == 0);
        expect(&rx, 1000, 1);
        expect(&rx2, 700, 2);
        expect_no_more(&rx);
        expect_no_more(&rx2);
    }

    #[test]
    fn a_socket_that_cannot_segment_still_sends_the_batch_and_the_parked_datagram_once() {
        let (tx, rx) = pair();
        let (_, rx2) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        b.refuse_batches = Some(libc::EOPNOTSUPP);
        assert!(!put(&mut b, Dest::of(&rx2), 1, 1000));
        assert!(!put(&mut b, Dest::of(&rx2), 2, 1000));
        assert!(put(&mut b, Dest::of(&rx), 9, 600));
        assert_eq!(b.flush(), Err(FlushError::Unsupported(libc::EOPNOTSUPP)));
        assert_eq!(b.len(), 0, "the parked datagram went after the batch");
        expect(&rx2, 1000, 1);
        expect(&rx2, 1000, 2);
        expect(&rx, 600, 9);
        expect_no_more(&rx);
        expect_no_more(&rx2);
    }

    #[test]
    fn a_batch_refused_whole_and_alone_still_sends_the_parked_datagram_once() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let nowhere = nowhere();
        assert!(!put(&mut b, nowhere, 1, 1000));
        assert!(!put(&mut b, nowhere, 1, 1000));
        assert!(put(&mut b, Dest::of(&rx), 9, 600));
        assert_eq!(b.flush(), Err(FlushError::Lost(libc::EINVAL)));
        assert_eq!(b.len(), 0, "the parked datagram went after the batch");
        expect(&rx, 600, 9);
        expect_no_more(&rx);
        assert_eq!(b.lost, 2, "the two refused, not the parked one");
    }

    #[test]
    fn a_lost_batch_keeps_the_datagram_parked_behind_it() {
        let (tx, rx) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let nowhere = nowhere();
        assert!(!put(&mut b, nowhere, 1, 1000));
        assert!(put(&mut b, Dest::of(&rx), 7, 500));
        assert!(b.flush().is_err(), "port 0 refuses the batch");
        assert_eq!((b.len(), b.lost), (1, 1));
        b.flush().unwrap();
        expect(&rx, 500, 7);
        expect_no_more(&rx);
        assert_eq!(b.lost, 1);
    }

    #[test]
    fn datagrams_too_large_to_pair_get_no_batcher() {
        let (tx, _) = pair();
        assert!(Batch::new(tx.as_raw_fd(), 65507).is_none());
        assert!(Batch::new(tx.as_raw_fd(), 40000).is_none());
    }

    #[test]
    fn a_send_the_kernel_refuses_loses_the_batch_with_its_errno() {
        let (tx, _) = pair();
        let mut b = Batch::new(tx.as_raw_fd(), 1000).unwrap();
        let nowhere = nowhere();
        b.push(nowhere, [&[1u8; 1000], &[], &[]]);
        b.push(nowhere, [&[1u8; 1000], &[], &[]]);
        assert!(matches!(
            b.flush(),
            Err(FlushError::Lost(_) | FlushError::Unsupported(_))
        ));
        assert_eq!(b.len(), 0);
    }
}
