//! The one recursive lock of the BTL (the original's `btl_usnic_lock`), and the cell holding the
//! BTL's Rust state.
//!
//! The original takes its lock only with MPI_THREAD_MULTIPLE (`OPAL_THREAD_LOCK`). This one is
//! taken by every entry point at every thread level: the ACK helper thread runs beside the
//! application, and MPI_T reads the statistics from any thread (Open MPI's `MPI_T_pvar_read`
//! takes only its own MPI_T lock), either of which would otherwise race the application's
//! thread on the state's `RefCell`. Uncontended, it costs a compare-and-swap per entry point.
//! It is recursive because a PML callback running under it may call `btl_send` on the same
//! thread.
use std::cell::RefCell;
use std::num::NonZeroUsize;

use parking_lot::lock_api::{self, GetThreadId, RawMutex as _};
use parking_lot::RawMutex;

/// The owner's identity for the recursive lock: `pthread_self`, a libc call that reads the
/// thread pointer. parking_lot's default takes the address of a Rust thread-local, which in a
/// dynamically loaded plugin goes through `__tls_get_addr` (about 11 instructions, taken three
/// times per message of an 8-byte ping-pong while the ACK helper makes the lock live).
pub struct PthreadId;

// SAFETY: `pthread_self` differs between threads that are alive at the same time (POSIX); an
// exited thread's value may come back, which the trait allows.
unsafe impl GetThreadId for PthreadId {
    const INIT: Self = PthreadId;

    fn nonzero_thread_id(&self) -> NonZeroUsize {
        // SAFETY: pthread_self has no preconditions and cannot fail.
        let id = unsafe { libc::pthread_self() } as usize;
        // glibc's pthread_t is the address of the thread's control block, never 0.
        NonZeroUsize::new(id).unwrap_or(NonZeroUsize::MAX)
    }
}

type Recursive = lock_api::ReentrantMutex<RawMutex, PthreadId, ()>;

static LOCK: Recursive = Recursive::const_new(RawMutex::INIT, PthreadId, ());

/// Held for the duration of an entry point's critical section.
pub type Entered = lock_api::ReentrantMutexGuard<'static, RawMutex, PthreadId, ()>;

pub fn enter() -> Entered {
    LOCK.lock()
}

/// State reachable from every entry point.
///
/// Access only while holding [`enter`]'s guard: the recursive lock serializes all threads, so
/// the `RefCell`'s unsynchronized borrow flag is never raced.
pub struct Shared<T>(RefCell<T>);

// SAFETY: see the type's documentation: all access is serialized by the lock.
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub const fn new(v: T) -> Self {
        Shared(RefCell::new(v))
    }

    /// The cell; callers must hold [`enter`]'s guard.
    pub fn cell(&self) -> &RefCell<T> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_recursive_and_excludes_other_threads() {
        let a = enter();
        let b = enter(); // same thread: must not deadlock
                         // Another thread must wait while we hold it.
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            let _g = enter();
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err());
        drop(b);
        drop(a);
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        h.join().unwrap();
    }
}
