//! The one clock read of the whole plugin.
use crate::proto::Instant;

/// `CLOCK_MONOTONIC` in nanoseconds (origin: boot). The edges read time here and nowhere else;
/// the protocol core only ever receives it as a parameter.
pub fn now() -> Instant {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux, so
    // clock_gettime cannot fail here (its only errors are EFAULT/EINVAL).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Instant(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}
