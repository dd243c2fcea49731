//! The socket calls of the channels that read, batch and send on the provider's socket
//! themselves, made as plain system calls.
//!
//! glibc's `recv`, `recvmsg`, `sendto` and `sendmsg` are cancellation points: in a process with threads
//! (Open MPI's own and the ACK helper) each call brackets the system call with
//! `__pthread_enable_asynccancel`/`__pthread_disable_asynccancel`: about 30 instructions per
//! call, 45 per message of an 8-byte ping-pong on `lo` (callgrind; a quiet channel's poll is a
//! read too). Nothing ever cancels a thread that polls a BTL, so the bracketing buys nothing
//! here. glibc's `syscall` is not a cancellation point, and returns and sets `errno` like the
//! wrappers.
//!
//! This assumes the provider's socket is a plain kernel socket: a library that accelerates
//! sockets by hooking libc's socket calls through `LD_PRELOAD` (libvma, OpenOnload) would not
//! see these calls. Such a setup takes `btl_usnic_gso 0` and `btl_usnic_gro 0`, which leave
//! reads and sends to the provider.
use super::error::last_errno;
use super::sys;
use std::io::IoSlice;
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_long, c_void};
use std::ptr::null_mut;

/// Where a datagram goes: IPv4 address and UDP port, both in network byte order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Dest {
    pub ip: u32,
    pub port: u16,
}

impl Dest {
    /// Where a test's socket is bound.
    #[cfg(test)]
    pub(crate) fn of(s: &std::net::UdpSocket) -> Dest {
        let std::net::SocketAddr::V4(a) = s.local_addr().unwrap() else {
            panic!("not IPv4")
        };
        Dest {
            ip: u32::from(*a.ip()).to_be(),
            port: a.port().to_be(),
        }
    }

    pub(super) fn sockaddr(self) -> libc::sockaddr_in {
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: self.port,
            sin_addr: libc::in_addr { s_addr: self.ip },
            sin_zero: [0; 8],
        }
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ip = std::net::Ipv4Addr::from(u32::from_be(self.ip));
        write!(f, "{ip}:{}", u16::from_be(self.port))
    }
}

/// `recv(fd, buf, len, flags)`.
///
/// # Safety
/// As for `recv(2)`: `buf` must name `len` writable bytes for the duration of the call.
pub(super) unsafe fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: recvfrom with a NULL address is recv; the buffer is the caller's contract.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd as c_long,
            buf,
            len,
            flags as c_long,
            null_mut::<c_void>(),
            null_mut::<c_void>(),
        ) as isize
    }
}

/// `recvmsg(fd, msg, flags)`.
///
/// # Safety
/// As for `recvmsg(2)`: `msg` and every buffer it names must be valid for the call.
pub(super) unsafe fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    // SAFETY: the message and its buffers are the caller's contract.
    unsafe { libc::syscall(libc::SYS_recvmsg, fd as c_long, msg, flags as c_long) as isize }
}

/// `sendmsg(fd, msg, flags)`.
///
/// # Safety
/// As for `sendmsg(2)`: `msg` and every buffer it names must be valid for the call.
unsafe fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    // SAFETY: the message and its buffers are the caller's contract.
    unsafe { libc::syscall(libc::SYS_sendmsg, fd as c_long, msg, flags as c_long) as isize }
}

/// Whether a send's errno says the socket's send buffer is full for now: retry after progress.
pub(super) fn is_full(errno: i32) -> bool {
    errno == libc::EAGAIN || errno == libc::ENOBUFS
}

/// One `sendto` of `bytes` to `to`, as one datagram: `send_to` without the message to build.
/// Never blocks (`MSG_DONTWAIT`); returns the errno on failure.
pub(super) fn send_one(fd: RawFd, bytes: &[u8], to: Dest) -> Result<(), i32> {
    let sa = to.sockaddr();
    // SAFETY: bytes is readable for its length and sa is a sockaddr_in of the length given,
    // both for the call only. The fd is the caller's: a closed or reused one is an error or a
    // stray datagram, never memory unsafety.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd as c_long,
            bytes.as_ptr(),
            bytes.len(),
            libc::MSG_DONTWAIT as c_long,
            &sa as *const libc::sockaddr_in,
            std::mem::size_of::<libc::sockaddr_in>() as c_long,
        )
    };
    if r < 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// One `sendmsg` to `to` of the bytes `pieces` gather: one datagram, or, with `seg`, datagrams
/// of `seg` bytes the kernel cuts them into (`UDP_SEGMENT`). Never blocks (`MSG_DONTWAIT`);
/// returns the errno on failure.
pub(super) fn send_to(
    fd: RawFd,
    pieces: &[IoSlice<'_>],
    seg: Option<usize>,
    to: Dest,
) -> Result<(), i32> {
    let mut sa = to.sockaddr();
    // Room for one control message holding a u16, aligned as cmsghdr wants.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut sa as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // IoSlice is ABI-compatible with iovec on Unix (its documented guarantee).
    msg.msg_iov = pieces.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = pieces.len();
    if let Some(seg) = seg {
        let size = std::mem::size_of::<u16>() as u32;
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(size) } as usize;
        debug_assert!(space <= std::mem::size_of_val(&control));
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` zeroed, 8-aligned bytes, enough for one
        // cmsghdr with a u16 (checked above), so CMSG_FIRSTHDR is that buffer and CMSG_DATA
        // lies inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = sys::SOL_UDP as libc::c_int;
            (*c).cmsg_type = sys::UDP_SEGMENT as libc::c_int;
            (*c).cmsg_len = libc::CMSG_LEN(size) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
        }
    }
    // SAFETY: msg describes a valid address, the borrowed pieces (only read by the kernel)
    // and, if set, a control buffer, all of which live until the call returns. The fd is the
    // caller's: a closed or reused one is an error or a stray datagram, never memory unsafety.
    let r = unsafe { sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
    if r < 0 {
        return Err(last_errno());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    fn errno() -> Option<i32> {
        std::io::Error::last_os_error().raw_os_error()
    }

    /// A message of one iovec over `buf`.
    fn msg_over(iov: &mut libc::iovec) -> libc::msghdr {
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov;
        msg.msg_iovlen = 1;
        msg
    }

    #[test]
    fn flags_reach_the_kernel_and_errors_come_back_as_errno() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        // A blocking read would wait this long: returning at once proves MSG_DONTWAIT arrived.
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let fd = rx.as_raw_fd();
        let mut buf = [0u8; 64];

        let t = Instant::now();
        // SAFETY: buf is 64 writable bytes for the call.
        let r = unsafe { recv(fd, buf.as_mut_ptr().cast(), 64, libc::MSG_DONTWAIT) };
        assert_eq!((r, errno()), (-1, Some(libc::EAGAIN)));
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut m = msg_over(&mut iov);
        // SAFETY: m names one iovec over buf, which lives until the call returns.
        let r = unsafe { recvmsg(fd, &mut m, libc::MSG_DONTWAIT) };
        assert_eq!((r, errno()), (-1, Some(libc::EAGAIN)));
        assert!(t.elapsed() < Duration::from_secs(1), "a read blocked");

        let data = *b"hello";
        let mut out = libc::iovec {
            iov_base: data.as_ptr() as *mut c_void,
            iov_len: data.len(),
        };
        let sm = msg_over(&mut out);
        for _ in 0..2 {
            // SAFETY: sm names one iovec over `data`, only read, which outlives the call.
            assert_eq!(unsafe { sendmsg(tx.as_raw_fd(), &sm, 0) }, 5);
        }
        // MSG_TRUNC: the datagram's whole length comes back although 2 bytes were room.
        // SAFETY: buf is 64 writable bytes; 2 are offered.
        let r = unsafe { recv(fd, buf.as_mut_ptr().cast(), 2, libc::MSG_TRUNC) };
        assert_eq!((r, &buf[..2]), (5, &b"he"[..]));
        // SAFETY: m's iovec still names buf.
        let r = unsafe { recvmsg(fd, &mut m, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
        assert_eq!((r, &buf[..5]), (5, &b"hello"[..]));

        // A bad descriptor is an error with its errno, as from the libc wrappers.
        // SAFETY: the call fails before touching buf (EBADF).
        let r = unsafe { recv(-1, buf.as_mut_ptr().cast(), 64, libc::MSG_DONTWAIT) };
        assert_eq!((r, errno()), (-1, Some(libc::EBADF)));
    }

    #[test]
    fn sends_arrive_whole_and_report_the_kernels_errno() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (head, body) = (*b"head:", *b"body");
        let iov = [IoSlice::new(&head), IoSlice::new(&body)];
        assert_eq!(send_to(tx.as_raw_fd(), &iov, None, Dest::of(&rx)), Ok(()));
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"head:body");
        assert_eq!(send_one(tx.as_raw_fd(), b"one", Dest::of(&rx)), Ok(()));
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one");
        // Broadcast without SO_BROADCAST: the kernel refuses it.
        let bcast = Dest {
            ip: u32::MAX,
            port: 9u16.to_be(),
        };
        assert_eq!(
            send_to(tx.as_raw_fd(), &iov, None, bcast),
            Err(libc::EACCES)
        );
        assert_eq!(send_one(tx.as_raw_fd(), b"x", bcast), Err(libc::EACCES));
        assert_eq!(bcast.to_string(), "255.255.255.255:9");
    }
}
