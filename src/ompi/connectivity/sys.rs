//! The few socket calls std does not offer: don't-fragment, poll, and interface lookup.
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;

/// Sets IP_MTU_DISCOVER = IP_PMTUDISC_DO: the kernel never fragments what this socket sends, so
/// a probe larger than the path allows is dropped (or refused with EMSGSIZE) instead of arriving
/// in pieces and passing a check the BTL's own datagrams would fail.
pub fn set_dont_fragment(fd: RawFd) -> io::Result<()> {
    let v: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: fd is an open socket owned by the caller; the option value is a c_int that lives
    // through the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits until one of `fds` is readable (or `timeout_ms` passes); returns which are readable.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: p is a valid array of p.len() pollfd structs for the duration of the call.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(p.iter()
        .map(|x| x.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
        .collect())
}

/// The name and prefix length of the local interface holding `ip`, if any.
pub fn interface_of(ip: Ipv4Addr) -> Option<(String, u32)> {
    crate::fabric::device::interfaces()
        .into_iter()
        .find(|i| i.ipv4 == ip)
        .map(|i| (i.name, u32::from(i.netmask).count_ones()))
}

/// Writes to a stream socket with MSG_NOSIGNAL: a peer that went away must give EPIPE, not a
/// SIGPIPE that kills the MPI process (Open MPI leaves SIGPIPE at its default, terminate).
pub struct NoSigPipe<'a>(pub &'a std::os::unix::net::UnixStream);

impl io::Write for NoSigPipe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: the fd is an open socket borrowed for the call; buf is readable for its length.
        let n = unsafe {
            libc::send(
                self.0.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
