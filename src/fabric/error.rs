//! `FabricError`: which libfabric call failed, its `-FI_*` code and libfabric's own text.
use super::sys;
use std::ffi::CStr;
use std::fmt;

/// A failed libfabric call (or a request this edge refused before calling libfabric).
///
/// `code` is the positive `FI_*` errno value (`FI_EAGAIN` = 11, `FI_EINVAL` = 22, `FI_ETRUNC`
/// = 265, ...); `message` is `fi_strerror(code)` plus any detail this edge adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricError {
    /// The libfabric call (`"fi_getinfo"`, `"fi_send"`, ...) or edge operation (`"post_send"`).
    pub call: &'static str,
    /// Positive `FI_*` error number.
    pub code: i32,
    /// Human-readable reason: `fi_strerror` text and context.
    pub message: String,
}

impl FabricError {
    /// From the negative return value of a libfabric call.
    pub fn from_ret(call: &'static str, ret: i64) -> Self {
        let code = ret.unsigned_abs().min(i32::MAX as u64) as i32;
        FabricError {
            call,
            code,
            message: strerror(code),
        }
    }

    /// From the negative return value of a libfabric call, with extra context.
    pub fn with_detail(call: &'static str, ret: i64, detail: impl fmt::Display) -> Self {
        let mut e = Self::from_ret(call, ret);
        e.message = format!("{} ({detail})", e.message);
        e
    }

    /// A request this edge refuses itself (bad argument, bad configuration).
    pub fn invalid(call: &'static str, message: impl Into<String>) -> Self {
        FabricError {
            call,
            code: sys::FI_EINVAL as i32,
            message: message.into(),
        }
    }

    /// True for `-FI_EAGAIN`, and `-FI_ENOBUFS` (what the udp provider passes on from a full
    /// socket's `sendto`, which our own socket sends already treat as full): resources are
    /// busy, retry after progress.
    pub fn is_would_block(&self) -> bool {
        self.code == sys::FI_EAGAIN as i32 || self.code == sys::FI_ENOBUFS as i32
    }
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (-FI error {})",
            self.call, self.message, self.code
        )
    }
}

impl std::error::Error for FabricError {}

/// libfabric's text for a positive `FI_*` code.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror accepts any int and returns a pointer to a static NUL-terminated
    // string (libfabric's table or libc's strerror buffer); we copy it out immediately.
    unsafe {
        let p = sys::fi_strerror(code);
        if p.is_null() {
            format!("error {code}")
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// The errno of the system call that just failed on the provider's socket (`socket.rs`,
/// `gro.rs`). Read directly: `io::Error::last_os_error` builds an error whose drop is an
/// out-of-line call, about 15 instructions on every poll that finds the socket empty.
pub(crate) fn last_errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno, valid while it lives.
    unsafe { *libc::__errno_location() }
}

/// Turns a libfabric `int`/`ssize_t` return value into a `Result`.
pub(crate) fn check(call: &'static str, ret: i64) -> Result<(), FabricError> {
    if ret < 0 {
        Err(FabricError::from_ret(call, ret))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_or_socket_is_busy_and_other_errors_are_not() {
        let busy = |ret: i64| FabricError::from_ret("fi_send", ret).is_would_block();
        assert!(busy(-(sys::FI_EAGAIN as i64)));
        assert!(
            busy(-(sys::FI_ENOBUFS as i64)),
            "a full socket under the udp provider"
        );
        assert!(!busy(-(sys::FI_EINVAL as i64)));
        assert!(!busy(-(sys::FI_EMSGSIZE as i64)));
    }
}
