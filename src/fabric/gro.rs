//! Runs of data-channel datagrams read with one system call (UDP generic receive offload,
//! `UDP_GRO`, Linux 5.0).
//!
//! The udp provider reads one datagram per `fi_cq_read`: a lock, a `recvmsg` and a completion
//! each. A run the peer sent in one `sendmsg` (`gso.rs`) crosses a veth or loopback as one
//! packet; with `UDP_GRO` set on the receiving socket the kernel queues it whole instead of
//! cutting it apart, and one `recvmsg` returns all its datagrams back to back with their size
//! in a control message. Given one buffer per datagram, each of the channel's MTU, the kernel's
//! copy leaves every datagram in a buffer of its own, where the provider would have put it.
//!
//! The provider reads its socket only into receive buffers posted to it, so a channel that
//! reads here posts none (`channel/receive.rs`) and the socket is ours alone.
//!
//! A channel whose datagrams never run together (the priority channel, or `lo`'s 65507-byte
//! datagrams) reads here too, one datagram per `recv` and without `UDP_GRO` (the kernel then
//! splits whatever it coalesced): still one system call per datagram as through the provider,
//! but without the provider's lock pair, progress pass and completion, also in every poll
//! that finds nothing.
use super::error::last_errno;
use super::socket;
use super::sys;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

/// Buffers one read offers: a run our own peers send has at most 64 datagrams (`gso.rs`), and
/// so does one the kernel coalesces on receive (`UDP_GRO_CNT_MAX`). A foreign sender's
/// segmented send may carry more where the kernel allows it (128 from Linux 6.x): its tail is
/// cut (`cut_recvs`).
pub(crate) const READ_BUFS: usize = 64;

/// Where the datagrams of one read lie.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `count` datagrams, one per buffer from the first: `size` bytes each but the last,
    /// which has `last`. With `moved`, they were smaller than a buffer and have been moved
    /// from where the kernel's copy put them (`Gro::resplit`). `cut` more datagrams of the
    /// run did not fit the buffers offered and are gone, like datagrams lost on a wire.
    Split {
        count: usize,
        size: usize,
        last: usize,
        moved: bool,
        cut: usize,
    },
    /// A datagram longer than the channel MTU (or whose size the kernel's report lost): dropped,
    /// as a provider's truncated receive is.
    Oversize { len: usize },
}

/// How a run of `len` bytes (its whole length, also where it did not fit) read into `bufs`
/// buffers of `seg` bytes divides into datagrams when the kernel says they were `gso`-byte
/// datagrams (None: one datagram). Only whole datagrams that landed count.
pub(crate) fn layout(len: usize, gso: Option<usize>, seg: usize, bufs: usize) -> Layout {
    let size = match gso {
        // A size that cannot be (the kernel never reports it): the run cannot be cut apart,
        // and taken whole it would pass for one datagram.
        Some(0) if len > 0 => return Layout::Oversize { len },
        Some(g) if g < len => g,
        _ => len,
    };
    if size > seg || bufs == 0 {
        return Layout::Oversize { len };
    }
    let total = len.div_ceil(size.max(1)).max(1);
    let copied = len.min(bufs * seg);
    let count = if total <= bufs && copied == len {
        total
    } else {
        // Fewer buffers than the run has datagrams (the channel had fewer free, or a foreign
        // sender coalesced more than `READ_BUFS`): the whole ones that landed.
        (copied / size.max(1)).min(bufs)
    };
    Layout::Split {
        count,
        size,
        last: if count == total {
            len - (total - 1) * size
        } else {
            size
        },
        moved: count > 1 && size != seg,
        cut: total - count,
    }
}

/// One channel's reader.
pub(crate) struct Gro {
    fd: RawFd,
    /// Every buffer's length: the channel MTU.
    seg: usize,
    /// `UDP_GRO` is set: a read may return a run (`read`), else one datagram (`read_one`).
    runs: bool,
    /// Bytes of a read whose datagrams are moved (`resplit`).
    scratch: Vec<u8>,
    /// Reads that returned more than one datagram, and the datagrams they returned.
    pub reads: u64,
    pub datagrams: u64,
    /// Datagrams of runs that found no free buffer and were dropped (`Layout::Split::cut`).
    pub cut: u64,
}

impl Gro {
    /// A reader for socket `fd`, whose datagrams are at most `seg` bytes, of runs of them
    /// (`runs`) or of one at a time; None where the kernel refuses `UDP_GRO` for runs (the
    /// provider then reads the socket as before).
    pub(crate) fn new(fd: RawFd, seg: usize, runs: bool) -> Option<Gro> {
        let reader = Gro {
            fd,
            seg,
            runs,
            scratch: Vec::new(),
            reads: 0,
            datagrams: 0,
            cut: 0,
        };
        if !runs {
            return Some(reader);
        }
        let on: libc::c_int = 1;
        // SAFETY: a valid int and its size; a kernel without the option says ENOPROTOOPT.
        let r = unsafe {
            libc::setsockopt(
                fd,
                sys::SOL_UDP as libc::c_int,
                sys::UDP_GRO as libc::c_int,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        (r == 0).then_some(reader)
    }

    /// Buffers one read takes at most: `READ_BUFS` where the kernel may coalesce a run (up to
    /// 64 datagrams of any equal size, not only the full ones our own batches send), else 1.
    /// On a socket with `UDP_GRO` even one buffer takes `read`, which finds the size of a
    /// coalesced run's datagrams and keeps its first.
    pub(crate) fn per_read(&self) -> usize {
        if self.runs {
            READ_BUFS
        } else {
            1
        }
    }

    /// Reads the next waiting datagram into `buf`: None when nothing is waiting, the errno
    /// of a failed read.
    ///
    /// # Safety
    /// `buf` must point at `seg` writable bytes that nothing else reads or writes during the
    /// call.
    pub(crate) unsafe fn read_one(&mut self, buf: *mut u8) -> Result<Option<Layout>, i32> {
        // SAFETY: buf names `seg` writable bytes (the caller's contract); fd is the
        // provider's socket, which outlives the endpoint that owns this reader. MSG_TRUNC:
        // the datagram's whole length comes back, also where it did not fit.
        let r = unsafe {
            socket::recv(
                self.fd,
                buf.cast(),
                self.seg,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        Ok(read_len(r)?.map(|len| layout(len, None, self.seg, 1)))
    }

    /// Reads the next waiting run into `bufs`, in order, and returns how its bytes lie in them
    /// (moved where the datagrams were smaller than a buffer); None when nothing is waiting,
    /// the errno of a failed read.
    ///
    /// # Safety
    /// Every pointer in `bufs` must point at `seg` writable bytes that nothing else reads or
    /// writes during the call, and no two may overlap.
    pub(crate) unsafe fn read(&mut self, bufs: &[*mut u8]) -> Result<Option<Layout>, i32> {
        // Left uninitialized but for the `n` the kernel reads: zeroing all 64 on every read of a
        // polled channel (with the caller's 64 pointers, 1.5 KiB) was about 280 instructions
        // per message of a 2 KiB ping-pong.
        let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); READ_BUFS];
        let n = bufs.len().min(READ_BUFS);
        for (iov, &b) in iovs.iter_mut().zip(&bufs[..n]) {
            iov.write(libc::iovec {
                iov_base: b.cast(),
                iov_len: self.seg,
            });
        }
        // Room for the segment size's control message (an int) and then some, aligned as
        // cmsghdr wants: cut short, it could lose the size and make a run one datagram.
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iovs.as_mut_ptr().cast();
        msg.msg_iovlen = n;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: the first `n` iovecs, the only ones the kernel reads, are initialized and
        // name `n` disjoint writable buffers of `seg` bytes (the caller's contract); the
        // control buffer lives until the call returns; fd is the provider's socket, which
        // outlives the endpoint that owns this reader. MSG_TRUNC: the run's whole length comes
        // back, also where it did not fit.
        let r = unsafe { socket::recvmsg(self.fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
        let Some(len) = read_len(r)? else {
            return Ok(None);
        };
        let gso = gso_size(&msg);
        if gso.is_none() && msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Ok(Some(Layout::Oversize { len }));
        }
        let l = layout(len, gso, self.seg, n);
        if let Layout::Split {
            count,
            size,
            moved,
            cut,
            ..
        } = l
        {
            self.cut += cut as u64;
            if moved {
                let copied = len.min(n * self.seg);
                // SAFETY: the caller's contract; the kernel wrote `copied` bytes across the
                // first buffers, and `count` <= n.
                unsafe { self.resplit(&bufs[..n], copied, size, count) };
            }
            if count > 1 {
                self.reads += 1;
                self.datagrams += count as u64;
            }
        }
        Ok(Some(l))
    }

    /// The kernel's copy filled the buffers `seg` bytes each; the first `count` datagrams of
    /// `size` bytes are moved so that each starts a buffer of its own.
    ///
    /// # Safety
    /// As `read`; `bufs` holds at least `count` buffers, and the first `len.div_ceil(seg)` of
    /// them hold the `len` bytes read.
    unsafe fn resplit(&mut self, bufs: &[*mut u8], len: usize, size: usize, count: usize) {
        self.scratch.clear();
        let mut left = len;
        for &b in bufs {
            if left == 0 {
                break;
            }
            let k = left.min(self.seg);
            // SAFETY: b holds `seg` >= k bytes written by the read.
            self.scratch
                .extend_from_slice(unsafe { std::slice::from_raw_parts(b, k) });
            left -= k;
        }
        for (d, &b) in self.scratch.chunks(size).zip(&bufs[..count]) {
            // SAFETY: b has `seg` >= `size` >= d.len() writable bytes, scratch is ours.
            unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), b, d.len()) };
        }
    }
}

/// The length a read returned; None when nothing was waiting, else the errno of its failure.
fn read_len(r: isize) -> Result<Option<usize>, i32> {
    if r >= 0 {
        return Ok(Some(r as usize));
    }
    let e = last_errno();
    if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
        Ok(None)
    } else {
        Err(e)
    }
}

/// The segment size the kernel reports for a coalesced read (an int; older kernels a u16).
fn gso_size(msg: &libc::msghdr) -> Option<usize> {
    // SAFETY: msg's control buffer was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR stay inside
    // msg_controllen, and CMSG_DATA of a header they return lies inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == sys::SOL_UDP as libc::c_int
                && (*c).cmsg_type == sys::UDP_GRO as libc::c_int
            {
                let data = libc::CMSG_DATA(c);
                let room = ((*c).cmsg_len as usize).checked_sub(data as usize - c as usize);
                return match room {
                    // A negative size reads as 0, which `layout` refuses.
                    Some(r) if r >= 4 => Some(
                        usize::try_from(std::ptr::read_unaligned(data.cast::<i32>())).unwrap_or(0),
                    ),
                    Some(r) if r >= 2 => {
                        Some(std::ptr::read_unaligned(data.cast::<u16>()) as usize)
                    }
                    _ => None,
                };
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::gso::Batch;
    use super::super::socket::Dest;
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// A run read whole: nothing cut.
    fn split(count: usize, size: usize, last: usize, moved: bool) -> Layout {
        Layout::Split {
            count,
            size,
            last,
            moved,
            cut: 0,
        }
    }

    #[test]
    fn layouts() {
        let l = |len, gso| layout(len, gso, 1472, 64);
        assert_eq!(l(100, None), split(1, 100, 100, false));
        assert_eq!(l(1472, None), split(1, 1472, 1472, false));
        assert_eq!(l(1473, None), Layout::Oversize { len: 1473 });
        assert_eq!(l(65507, None), Layout::Oversize { len: 65507 });
        assert_eq!(l(1472 * 44, Some(1472)), split(44, 1472, 1472, false));
        assert_eq!(l(1472 * 3 + 5, Some(1472)), split(4, 1472, 5, false));
        assert_eq!(l(1000 * 7 + 1, Some(1000)), split(8, 1000, 1, true));
        assert_eq!(l(1500 * 2, Some(1500)), Layout::Oversize { len: 3000 });
        assert_eq!(l(100, Some(100)), split(1, 100, 100, false));
        assert_eq!(l(900, Some(1472)), split(1, 900, 900, false));
        assert_eq!(l(0, None), split(1, 0, 0, false), "an empty datagram");
        assert_eq!(
            l(3000, Some(0)),
            Layout::Oversize { len: 3000 },
            "no usable size"
        );
        assert_eq!(l(0, Some(0)), split(1, 0, 0, false));
        // Fewer buffers than datagrams: the whole ones that landed, the rest cut.
        assert_eq!(
            layout(1472 * 10 + 7, Some(1472), 1472, 3),
            Layout::Split {
                count: 3,
                size: 1472,
                last: 1472,
                moved: false,
                cut: 8
            }
        );
        assert_eq!(
            layout(100 * 10, Some(100), 1472, 8),
            Layout::Split {
                count: 8,
                size: 100,
                last: 100,
                moved: true,
                cut: 2
            },
            "more datagrams than buffers"
        );
        assert_eq!(layout(100, None, 1472, 0), Layout::Oversize { len: 100 });
    }

    /// `bufs` buffers of `seg` bytes and the reader for a fresh socket.
    struct Rx {
        sock: UdpSocket,
        gro: Gro,
        mem: Vec<Vec<u8>>,
    }

    impl Rx {
        fn new(seg: usize) -> Rx {
            Rx::reading(seg, true)
        }

        /// A reader of runs (`UDP_GRO`) or of one datagram at a time.
        fn reading(seg: usize, runs: bool) -> Rx {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let gro = Gro::new(sock.as_raw_fd(), seg, runs).expect("UDP_GRO on this kernel");
            Rx {
                sock,
                gro,
                mem: vec![vec![0u8; seg]; READ_BUFS],
            }
        }

        /// Waits (up to 2 s) for a read that returns something.
        fn read(&mut self) -> Layout {
            self.read_into(READ_BUFS)
        }

        /// Datagram i of `sent` is in buffer i, byte for byte.
        fn landed(&self, sent: &[Vec<u8>]) {
            for (i, d) in sent.iter().enumerate() {
                assert_eq!(&self.mem[i][..d.len()], &d[..], "datagram {i}");
            }
        }

        /// `read`, offering only the first `k` buffers.
        fn read_into(&mut self, k: usize) -> Layout {
            wait(|| {
                let ptrs: Vec<*mut u8> = self.mem[..k].iter_mut().map(|b| b.as_mut_ptr()).collect();
                // SAFETY: READ_BUFS distinct Vecs of `seg` bytes, borrowed for the call.
                unsafe { self.gro.read(&ptrs) }.unwrap()
            })
        }

        /// Waits (up to 2 s) for `read_one` into the first buffer to return something.
        fn read_one(&mut self) -> Layout {
            wait(|| {
                // SAFETY: a Vec of `seg` bytes, borrowed for the call.
                unsafe { self.gro.read_one(self.mem[0].as_mut_ptr()) }.unwrap()
            })
        }
    }

    /// Retries `read` (up to 2 s) until it returns something.
    fn wait(mut read: impl FnMut() -> Option<Layout>) -> Layout {
        let t = std::time::Instant::now();
        loop {
            if let Some(l) = read() {
                return l;
            }
            assert!(t.elapsed().as_secs() < 2, "nothing arrived");
            std::thread::yield_now();
        }
    }

    fn batch_of(tx: &UdpSocket, seg: usize, to: Dest, datagrams: &[Vec<u8>]) {
        let mut b = Batch::new(tx.as_raw_fd(), seg).unwrap();
        for d in datagrams {
            b.push(to, [d, &[], &[]]);
        }
        b.flush().unwrap();
    }

    fn pattern(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i * 31 + k) as u8).collect()
    }

    #[test]
    fn a_batch_is_read_whole_one_datagram_per_buffer() {
        let mut rx = Rx::new(1472);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: Vec<Vec<u8>> = (0..10)
            .map(|i| pattern(i, if i == 9 { 77 } else { 1472 }))
            .collect();
        batch_of(&tx, 1472, Dest::of(&rx.sock), &sent);
        assert_eq!(rx.read(), split(10, 1472, 77, false));
        rx.landed(&sent);
        assert_eq!((rx.gro.reads, rx.gro.datagrams), (1, 10));
    }

    #[test]
    fn datagrams_smaller_than_a_buffer_are_moved_one_per_buffer() {
        // A peer with a smaller MTU batches 1000-byte datagrams.
        let mut rx = Rx::new(1472);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: Vec<Vec<u8>> = (0..5).map(|i| pattern(i, 1000)).collect();
        batch_of(&tx, 1000, Dest::of(&rx.sock), &sent);
        let l = rx.read();
        assert_eq!(l, split(5, 1000, 1000, true));
        rx.landed(&sent);
    }

    #[test]
    fn a_lone_datagram_and_an_oversized_one() {
        let mut rx = Rx::new(1472);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.sock.local_addr().unwrap();
        tx.send_to(&pattern(3, 200), to).unwrap();
        assert_eq!(rx.read(), split(1, 200, 200, false));
        assert_eq!(&rx.mem[0][..200], &pattern(3, 200)[..]);
        tx.send_to(&pattern(4, 1473), to).unwrap();
        assert_eq!(rx.read(), Layout::Oversize { len: 1473 });
        tx.send_to(&pattern(5, 1472), to).unwrap();
        assert!(matches!(rx.read(), Layout::Split { count: 1, .. }));
        assert_eq!(rx.gro.reads, 0, "no read returned more than one datagram");
    }

    #[test]
    fn a_run_longer_than_the_buffers_offered_keeps_the_whole_datagrams_that_landed() {
        let mut rx = Rx::new(1472);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: Vec<Vec<u8>> = (0..10).map(|i| pattern(i, 1472)).collect();
        batch_of(&tx, 1472, Dest::of(&rx.sock), &sent);
        assert!(matches!(
            rx.read_into(3),
            Layout::Split {
                count: 3,
                cut: 7,
                ..
            }
        ));
        rx.landed(&sent[..3]);
        // Smaller datagrams, moved: 5 of 1000 bytes offered 2 buffers.
        let sent: Vec<Vec<u8>> = (0..5).map(|i| pattern(20 + i, 1000)).collect();
        batch_of(&tx, 1000, Dest::of(&rx.sock), &sent);
        assert!(matches!(
            rx.read_into(2),
            Layout::Split {
                count: 2,
                cut: 3,
                moved: true,
                ..
            }
        ));
        rx.landed(&sent[..2]);
    }

    #[test]
    fn one_at_a_time_a_batch_arrives_split_and_an_oversized_datagram_is_dropped() {
        let mut rx = Rx::reading(1472, false);
        assert_eq!(rx.gro.per_read(), 1);
        // SAFETY: a Vec of `seg` bytes, borrowed for the call.
        assert_eq!(unsafe { rx.gro.read_one(rx.mem[0].as_mut_ptr()) }, Ok(None));
        // Without UDP_GRO the kernel splits a batch: one datagram per read, none lost.
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: Vec<Vec<u8>> = (0..3).map(|i| pattern(40 + i, 1472)).collect();
        batch_of(&tx, 1472, Dest::of(&rx.sock), &sent);
        for d in &sent {
            assert_eq!(rx.read_one(), split(1, 1472, 1472, false));
            rx.landed(std::slice::from_ref(d));
        }
        let to = rx.sock.local_addr().unwrap();
        tx.send_to(&pattern(9, 1473), to).unwrap();
        assert_eq!(rx.read_one(), Layout::Oversize { len: 1473 });
        tx.send_to(&pattern(10, 5), to).unwrap();
        assert_eq!(rx.read_one(), split(1, 5, 5, false));
        rx.landed(&[pattern(10, 5)]);
        assert_eq!(rx.gro.reads, 0);
    }

    #[test]
    fn nothing_waiting_is_none() {
        let mut rx = Rx::new(1472);
        let ptrs: Vec<*mut u8> = rx.mem.iter_mut().map(|b| b.as_mut_ptr()).collect();
        // SAFETY: as in Rx::read.
        assert_eq!(unsafe { rx.gro.read(&ptrs) }, Ok(None));
    }
}
