//! The panic boundary: every entry point the shim calls runs inside `guard`.
//!
//! A panic becomes the entry point's error value (an OPAL code, NULL, ...) and makes the
//! component *sticky-failed*: later calls fail fast instead of running on half-updated state.
//! Once the PML has registered its error callback, the job is ended through it too
//! (`component::end_job_after_internal_error`): messages in flight on a failed BTL would
//! otherwise wait forever.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::{lock, log};

static FAILED: AtomicBool = AtomicBool::new(false);
/// The message of an internal error on one of the plugin's own threads, whose job the next
/// entry point on an Open MPI thread ends: the PML's error callback prints and aborts through
/// Open MPI, which only its own threads may call below MPI_THREAD_MULTIPLE.
static END_PENDING: Mutex<Option<String>> = Mutex::new(None);

/// True once any entry point has panicked.
pub fn failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}

/// Run `f` under the BTL's lock, turning a panic (or an earlier one) into `on_failure`. The
/// lock is held until the failure is handled, so no other thread sees the half-updated state
/// before the failure flag.
pub fn guard<R>(what: &str, on_failure: R, f: impl FnOnce() -> R) -> R {
    let _g = lock::enter();
    if failed() {
        if !log::on_own_thread() {
            let pending = END_PENDING.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(line) = pending {
                end_job(&line);
            }
        }
        return on_failure;
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            FAILED.store(true, Ordering::Relaxed);
            let msg = payload_text(&*payload);
            let line = format!("internal error in {what}: {msg}; the usnic BTL stops working now");
            log::error(&line);
            if log::on_own_thread() {
                *END_PENDING.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
            } else {
                end_job(&line);
            }
            on_failure
        }
    }
}

/// Replaces Rust's default panic output, whose lines name no rank (and under `RUST_BACKTRACE`
/// add a backtrace without one), by lines of our log: where the panic happened and its message,
/// and the backtrace if one was asked for (`guard` then says what it was doing; a panic outside
/// it, on the connectivity agent's thread say, has only these lines). They are written straight
/// to stderr: a panic may be on a thread that must not call into Open MPI. The hook belongs to
/// this library's copy of std: other Rust code in the process keeps its own.
pub fn log_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map_or_else(|| "an unknown place".into(), |l| l.to_string());
            let msg = payload_text(info.payload());
            log::error_direct(&format!("internal error (a Rust panic) at {at}: {msg}"));
            let trace = std::backtrace::Backtrace::capture();
            if trace.status() == std::backtrace::BacktraceStatus::Captured {
                for line in trace.to_string().lines() {
                    log::error_direct(line);
                }
            }
        }))
    });
}

/// A panic's message, as `panic!` made it.
fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn end_job(line: &str) {
    if !cfg!(test) {
        super::component::end_job_after_internal_error(line);
    }
}

#[cfg(test)]
pub(crate) fn reset_for_tests() {
    FAILED.store(false, Ordering::Relaxed);
    *END_PENDING.lock().unwrap() = None;
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

    #[test]
    fn a_panic_on_an_own_thread_leaves_the_job_to_the_next_entry_point() {
        let _g = crate::ompi::TEST_SERIAL.lock();
        reset_for_tests();
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        std::thread::spawn(|| {
            log::mark_own_thread();
            assert_eq!(guard("ACK helper", -1, || panic!("boom")), -1);
            // Still on the helper: the job is not ended from here.
            assert_eq!(guard("ACK helper", -1, || 7), -1);
        })
        .join()
        .unwrap();
        std::panic::set_hook(prev);
        let pending = || END_PENDING.lock().unwrap().clone();
        assert!(failed());
        assert_eq!(
            pending().as_deref(),
            Some("internal error in ACK helper: boom; the usnic BTL stops working now")
        );
        // An Open MPI thread's next call ends the job (end_job is a no-op in tests), once.
        assert_eq!(guard("progress", -1, || 7), -1);
        assert_eq!(pending(), None);
        reset_for_tests();
    }
}
