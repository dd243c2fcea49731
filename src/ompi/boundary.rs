//! The panic boundary: every entry point the shim calls runs inside `guard`.
//!
//! A panic becomes the entry point's error value (an OPAL code, NULL, ...) and makes the
//! component *sticky-failed*: later calls fail fast instead of running on half-updated state.
//! Once the PML has registered its error callback, the job is ended through it too
//! (`component::end_job_after_internal_error`): messages in flight on a failed BTL would
//! otherwise wait forever.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use super::log;

static FAILED: AtomicBool = AtomicBool::new(false);

/// True once any entry point has panicked.
pub fn failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}

/// Run `f`, turning a panic (or an earlier one) into `on_failure`.
pub fn guard<R>(what: &str, on_failure: R, f: impl FnOnce() -> R) -> R {
    if failed() {
        return on_failure;
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            FAILED.store(true, Ordering::Relaxed);
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            let line = format!("internal error in {what}: {msg}; the usnic BTL stops working now");
            log::error(&line);
            if !cfg!(test) {
                super::component::end_job_after_internal_error(&line);
            }
            on_failure
        }
    }
}

#[cfg(test)]
pub(crate) fn reset_for_tests() {
    FAILED.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_becomes_the_error_value_and_sticks() {
        let _g = crate::ompi::TEST_SERIAL.lock();
        reset_for_tests();
        assert_eq!(guard("ok", -1, || 7), 7);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        assert_eq!(guard("boom", -1, || panic!("boom")), -1);
        std::panic::set_hook(prev);
        assert!(failed());
        // Sticky: a healthy call now fails fast.
        assert_eq!(guard("after", -1, || 7), -1);
        reset_for_tests();
    }
}
