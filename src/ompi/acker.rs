//! The ACK helper thread.
//!
//! Open MPI only calls `btl_progress` from inside MPI calls. A rank that computes for longer than
//! `btl_usnic_peer_timeout` with data in flight towards it would then acknowledge nothing, and its
//! peers would declare it failed although it is healthy (the C original never gives up, so it
//! never had this problem). This thread closes that gap: when no progress call happened for
//! `IDLE_NS`, it reads the completion queues, lets the protocol core acknowledge what arrived, and
//! *defers* every upcall (deliveries copied out of the receive buffers, completions) to the next
//! real progress call. PML callbacks therefore still run only on the application's threads.
//! Its ACKs also stop the peers' retransmissions (lent sends complete on their own: `IDLE_NS`).
//! What it keeps is bounded (`module::progress::DEFERRED_CAP` per module): beyond, the module
//! holds its receive side (`Engine::hold_receive`), so the peers' sends wait at their end and
//! its held ACKs tell them it is alive; the next progress call ends the hold.
//!
//! Every entry point takes the recursive lock in its guard (see `lock`), and so does this
//! thread's pass, which is what makes its access to the module state sound.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::fabric;

use super::component::with_component;
use super::log;

/// A progress call within this long means the application is in MPI: stay out of the way.
/// It was 2 ms (with a 1 ms tick) while a peer's send of lent data completed only on our ACK;
/// since `btl_usnic_lent_hold` such a send completes about 1 ms after it left whether or not we
/// acknowledge, so the helper only has to beat `btl_usnic_peer_timeout`. The 1000 wake-ups a
/// second per rank were not free on oversubscribed nodes: 16 ranks of `manyreq` on 2 cores
/// stalled for 20-110 s in about one run in four (a rank runnable but not scheduled, or
/// stuck in `munmap`; with `btl_usnic_ack_thread 0`, 0 of 10), and not once in 24 runs with
/// 20 ms and a 10 ms tick, which also ran 8 s instead of 9-11.
const IDLE_NS: u64 = 20_000_000;
const TICK: Duration = Duration::from_millis(10);

static LAST_PROGRESS: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static THREAD: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Called by every component progress pass.
pub fn note_progress(now_ns: u64) {
    LAST_PROGRESS.store(now_ns, Ordering::Relaxed);
}

pub fn start() {
    STOP.store(false, Ordering::SeqCst);
    note_progress(fabric::now().0);
    let spawned = std::thread::Builder::new()
        .name("usnic-acker".into())
        .spawn(run);
    match spawned {
        Ok(h) => *THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
        Err(e) => log::error(&format!(
            "cannot start the ACK helper thread ({e}); a rank computing longer than \
             btl_usnic_peer_timeout outside MPI may be reported as failed"
        )),
    }
}

/// Stop and join the thread. Must be called without holding the BTL lock.
pub fn stop() {
    STOP.store(true, Ordering::SeqCst);
    let h = THREAD.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = h {
        let _ = h.join();
    }
}

fn run() {
    log::mark_own_thread();
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        let now = fabric::now().0;
        if now.saturating_sub(LAST_PROGRESS.load(Ordering::Relaxed)) < IDLE_NS {
            continue;
        }
        // Under the guard's lock: a pass that got the lock after close asked the thread to stop
        // does nothing (and one after an internal error neither). A panic here must not unwind
        // out of the thread silently: the guard counts it like an entry point's.
        let stopped = super::boundary::guard("ACK helper", true, || {
            if STOP.load(Ordering::Relaxed) {
                return true;
            }
            with_component(|c| {
                let now = fabric::now();
                for m in &c.modules {
                    m.service_in_background(now);
                }
            });
            false
        });
        if stopped {
            break;
        }
    }
}
