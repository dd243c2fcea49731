//! Kernel socket buffers of the `udp` provider's endpoints.
//!
//! The provider leaves its UDP sockets at the kernel defaults (`net.core.rmem_default`,
//! 212992 bytes here). A datagram is charged to the receive buffer with its kernel overhead
//! (measured: a 64-datagram window of 65507-byte datagrams on `lo` lost 0.3% with the default
//! buffer because only about three such datagrams fit in it), so a burst that arrives while the
//! receiver is not polling is dropped long before the posted receive buffers run out. libfabric
//! offers no way to size them, so the edge finds the endpoint's socket among the process's
//! descriptors by its bound address and raises `SO_RCVBUF` / `SO_SNDBUF` to hold the channel's
//! posted receives / send credits (never lowering them; the kernel caps the request at
//! `net.core.rmem_max` / `wmem_max`, except for a process with CAP_NET_ADMIN, which asks again
//! with `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`). Best effort: on failure the defaults stay.
use std::os::fd::RawFd;

/// Bytes a datagram of `mtu` payload costs in a socket buffer, roughly (payload + skb overhead).
fn charge(mtu: usize) -> usize {
    mtu + 1024
}

/// Datagrams of `mtu` payload bytes a receive buffer of `rcvbuf` bytes (as the kernel reports
/// it) holds while its reader is busy. A quarter of it: the kernel reports twice what was asked
/// for its own bookkeeping, and the rest was measured. With 8 MiB reported on `lo` (65507-byte
/// datagrams, about 66.3 KB each in the buffer), a bidirectional 1 MiB run, where each rank
/// stops reading while it sends, dropped 8455 datagrams with a send window of 48, 114 with 40
/// and none with 32 (this rule: 31), and went from 6.9 to 7.7 GB/s; one-way bandwidth was
/// the same with 32 as with 63. At least one: the kernel admits a datagram into an empty
/// receive queue whatever its size, and 0 would go into the modex as a receive window of 0,
/// which the peer reads as "no limit".
pub(crate) fn datagrams_in(rcvbuf: usize, mtu: usize) -> usize {
    (rcvbuf / 4 / charge(mtu)).max(1)
}

/// This process's IPv4 UDP socket bound to exactly `name`, if any.
pub(crate) fn find_socket(name: &libc::sockaddr_in) -> Option<RawFd> {
    for entry in std::fs::read_dir("/proc/self/fd").ok()? {
        let Some(fd) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
        else {
            continue;
        };
        // SAFETY: sockaddr_in is plain data; all-zero is valid.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: getsockname on any fd is harmless (ENOTSOCK for non-sockets); sa/len are a
        // writable sockaddr_in and its size.
        let ok =
            unsafe { libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in).cast(), &mut len) }
                == 0;
        if ok
            && len as usize == std::mem::size_of::<libc::sockaddr_in>()
            && sa.sin_family == name.sin_family
            && sa.sin_port == name.sin_port
            && sa.sin_addr.s_addr == name.sin_addr.s_addr
            && sock_type(fd) == Some(libc::SOCK_DGRAM)
        {
            return Some(fd);
        }
    }
    None
}

fn sock_type(fd: RawFd) -> Option<i32> {
    get_int(fd, libc::SO_TYPE)
}

fn get_int(fd: RawFd, opt: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v/len are a writable int and its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// Raise `opt` (SO_RCVBUF or SO_SNDBUF) of `fd` to at least `want` bytes; returns the
/// resulting size as the kernel reports it. Where `net.core.rmem_max` / `wmem_max` cap the
/// request (212992 bytes by default on older kernels, Debian 12's 6.1 among
/// them: a 64 KiB-datagram `lo` channel then holds about 6 datagrams, and a bidirectional
/// 1 MiB run resent a quarter of its datagrams and lost a quarter of its bandwidth), a
/// process with CAP_NET_ADMIN asks again with the `*FORCE` option, which the cap does not
/// bind; for others it fails with EPERM and the capped size stays.
fn grow(fd: RawFd, opt: i32, force: i32, want: usize) -> Option<usize> {
    // The kernel reports twice the requested value (its bookkeeping overhead).
    let short = |fd| get_int(fd, opt).map(|cur| (cur as usize) / 2 < want);
    if short(fd)? {
        set_int(fd, opt, want);
        if short(fd)? {
            set_int(fd, force, want);
        }
    }
    get_int(fd, opt).map(|v| v as usize)
}

fn set_int(fd: RawFd, opt: i32, v: usize) {
    let v = v.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: fd is a socket; v is a valid int option value of its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Sizes the endpoint's socket `fd` for `rd` posted receives and `sd` sends of `mtu` bytes.
/// Returns (SO_RCVBUF, SO_SNDBUF) as the kernel reports them.
pub(crate) fn size_for(fd: RawFd, mtu: usize, sd: usize, rd: usize) -> Option<(usize, usize)> {
    let rcv = grow(
        fd,
        libc::SO_RCVBUF,
        libc::SO_RCVBUFFORCE,
        rd.saturating_mul(charge(mtu)),
    )?;
    let snd = grow(
        fd,
        libc::SO_SNDBUF,
        libc::SO_SNDBUFFORCE,
        sd.saturating_mul(charge(mtu)),
    )?;
    Some((rcv, snd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_privileged_process_is_not_held_to_rmem_max() {
        let max = |f| {
            std::fs::read_to_string(format!("/proc/sys/net/core/{f}"))
                .unwrap()
                .trim()
                .parse::<usize>()
                .unwrap()
        };
        let (rmem_max, wmem_max) = (max("rmem_max"), max("wmem_max"));
        // SAFETY: plain socket(2); the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        assert!(fd >= 0);
        // Twice each cap's worth of datagrams: more than the plain options may give.
        let (mtu, n) = (1472, 2 * rmem_max.max(wmem_max) / charge(1472) + 1);
        let (rcv, snd) = size_for(fd, mtu, n, n).unwrap();
        // SAFETY: fd is ours and open.
        unsafe { libc::close(fd) };
        let want = n * charge(mtu);
        // CAP_NET_ADMIN (bit 12 of the effective set; root has it here and in CI, root in a
        // container without it does not): the *FORCE options give what was asked (reported
        // doubled); without it the caps hold.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        if cap_eff & (1 << 12) != 0 {
            assert!(
                rcv / 2 >= want && snd / 2 >= want,
                "{rcv} {snd} < 2 x {want}"
            );
        } else {
            assert_eq!((rcv, snd), (2 * rmem_max, 2 * wmem_max));
        }
    }

    #[test]
    fn a_buffer_holds_at_least_one_datagram() {
        // 8 MiB reported on lo, 65507-byte datagrams: the measured 31.
        assert_eq!(datagrams_in(8 << 20, 65_507), 31);
        // The kernel's default buffer (212992 bytes reported) and 64 KiB datagrams: less than
        // one by the quarter rule, but an empty receive queue always takes one datagram; 0
        // would go into the modex as rx_window 0, which the peer reads as "no limit".
        assert_eq!(datagrams_in(212_992, 65_507), 1);
        assert_eq!(datagrams_in(0, 1472), 1);
    }
}
