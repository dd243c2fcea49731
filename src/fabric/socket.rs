//! The socket calls of the channels that read and batch on the provider's socket themselves,
//! made as plain system calls.
//!
//! glibc's `recv`, `recvmsg` and `sendmsg` are cancellation points: in a process with threads
//! (Open MPI's own and the ACK helper) each call brackets the system call with
//! `__pthread_enable_asynccancel`/`__pthread_disable_asynccancel`, about 70 instructions per
//! read or send (callgrind, 8-byte ping-pong, where a quiet channel's poll is a read too).
//! Nothing ever cancels a thread that polls a BTL, so the bracketing buys nothing here.
//! glibc's `syscall` is not a cancellation point and sets `errno` like the wrappers.
use std::os::raw::{c_int, c_long, c_void};
use std::ptr::null_mut;

/// `recv(fd, buf, len, flags)`.
///
/// # Safety
/// As for `recv(2)`: `buf` must name `len` writable bytes for the duration of the call.
pub(crate) unsafe fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
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
pub(crate) unsafe fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    // SAFETY: the message and its buffers are the caller's contract.
    unsafe { libc::syscall(libc::SYS_recvmsg, fd as c_long, msg, flags as c_long) as isize }
}

/// `sendmsg(fd, msg, flags)`.
///
/// # Safety
/// As for `sendmsg(2)`: `msg` and every buffer it names must be valid for the call.
pub(crate) unsafe fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    // SAFETY: the message and its buffers are the caller's contract.
    unsafe { libc::syscall(libc::SYS_sendmsg, fd as c_long, msg, flags as c_long) as isize }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn plain_calls_send_read_and_report_would_block() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: buf is 64 writable bytes for the call.
        let r = unsafe {
            recv(
                rx.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                64,
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(r, -1);
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!(e, Some(libc::EAGAIN));

        let data = *b"hello";
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut c_void,
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        // SAFETY: msg names one iovec over `data`, which lives until the call returns.
        assert_eq!(unsafe { sendmsg(tx.as_raw_fd(), &msg, 0) }, 5);
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        // SAFETY: buf is 64 writable bytes for the call.
        let r = unsafe { recv(rx.as_raw_fd(), buf.as_mut_ptr().cast(), 64, libc::MSG_TRUNC) };
        assert_eq!(r, 5);
        assert_eq!(&buf[..5], b"hello");

        // SAFETY: as above.
        assert_eq!(unsafe { sendmsg(tx.as_raw_fd(), &msg, 0) }, 5);
        let mut back = [0u8; 8];
        let mut riov = libc::iovec {
            iov_base: back.as_mut_ptr().cast(),
            iov_len: back.len(),
        };
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut rmsg: libc::msghdr = unsafe { std::mem::zeroed() };
        rmsg.msg_iov = &mut riov;
        rmsg.msg_iovlen = 1;
        // SAFETY: rmsg names one iovec over `back`, which lives until the call returns.
        assert_eq!(unsafe { recvmsg(rx.as_raw_fd(), &mut rmsg, 0) }, 5);
        assert_eq!(&back[..5], b"hello");
    }
}
