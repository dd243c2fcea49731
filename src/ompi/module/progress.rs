//! The passes that drive a module: a progress call (completions in, datagrams out, upcalls
//! run) and the ACK helper's pass (which keeps every upcall for the next progress call).
use crate::proto::Instant;

use super::{ModuleCell, Upcall};

/// Bytes of deliveries the ACK helper copies out for the application before it holds the
/// module's receive side (`Engine::hold_receive`). Without a bound, a rank computing outside
/// MPI took in everything its peers sent: 40000 32 KiB eager messages sent to a rank asleep
/// for 30 s grew it to 2.5 GB (with tcp the senders wait and it stays at 52 MB). Held, the
/// peers' windows stay closed and their held ACKs keep them from declaring this rank failed;
/// the hold ends at the next progress call, and the peers' next retransmissions (at most
/// `rto_max` apart) are taken. The helper reads at most one pass beyond the bound (two
/// completion batches, or one reassembled fragment). The helper needs nothing kept for its
/// purpose (peers must see a live rank, which held ACKs show as well); the bound only spares
/// a rank that comes back after a short absence the retransmission delay, and 64 MiB is a
/// few hundred eager messages or a few large fragments, small beside a node's memory.
pub const DEFERRED_CAP: usize = 64 << 20;

/// A module without peers is polled on every this many progress calls only (each poll of the
/// udp provider costs a recvmsg per channel).
const IDLE_POLL_EVERY: u32 = 64;

impl ModuleCell {
    /// One progress pass: completions in, upcalls out, datagrams out. Returns how many
    /// completions were handled.
    pub fn progress(&self, now: Instant) -> usize {
        let mut batch = self.batch.take();
        let n = {
            let mut st = self.state.borrow_mut();
            if st.finalized {
                self.batch.set(batch);
                return 0;
            }
            if st.npeers == 0 && st.deferred.is_empty() {
                st.idle_skips += 1;
                if st.idle_skips < IDLE_POLL_EVERY {
                    self.batch.set(batch);
                    return 0;
                }
                st.idle_skips = 0;
            }
            if !st.deferred.is_empty() {
                batch.append(&mut st.deferred);
                st.deferred_bytes = 0;
                // The application is back: the senders' next retransmissions are taken.
                st.engine.hold_receive(false);
            }
            let n = st.collect(now, &mut batch);
            st.transmit(now);
            st.flush_reposts();
            n
        };
        if !batch.is_empty() {
            self.dispatch(&mut batch);
        }
        self.batch.set(batch);
        n
    }

    /// The ACK helper's pass: feed the core what arrived (so it acknowledges), transmit, and
    /// keep every upcall for the next progress call. Deliveries are copied out so their receive
    /// buffers go back to the fabric at once: kept until the application next calls MPI, a
    /// stream of chunked fragments would take every posted buffer (64 on `lo`, 4 per 200 KiB
    /// fragment), and the rank would stop acknowledging, which the helper is there to prevent.
    pub fn service_in_background(&self, now: Instant) {
        let mut st = self.state.borrow_mut();
        if st.finalized || st.npeers == 0 {
            return;
        }
        let mut ups = Vec::new();
        let mut reposts = Vec::new();
        st.collect(now, &mut ups);
        for up in ups {
            let kept = match up {
                Upcall::DeliverInPlace {
                    ch,
                    buf,
                    data,
                    len,
                    tag,
                } => {
                    // SAFETY: `data` points at `len` received bytes of buffer `buf`, which is
                    // not reposted yet (it is reposted right after this copy).
                    let v = unsafe { core::slice::from_raw_parts(data, len) }.to_vec();
                    st.fabric.repost(ch, buf);
                    Upcall::DeliverOwned { data: v, tag }
                }
                Upcall::DeliverPieces { pieces, len, tag } => {
                    let data = st.gather_pieces(&pieces, len);
                    st.release_pieces(pieces, &mut reposts);
                    Upcall::DeliverOwned { data, tag }
                }
                other => other,
            };
            if let Upcall::DeliverOwned { data, .. } = &kept {
                st.deferred_bytes += data.len();
            }
            st.deferred.push(kept);
        }
        if st.deferred_bytes >= DEFERRED_CAP && !st.engine.receive_held() {
            // Enough kept for the application: what its peers send next waits at their end.
            st.engine.hold_receive(true);
            st.holds += 1;
        }
        for (ch, buf) in reposts {
            st.fabric.repost(ch, buf);
        }
        st.transmit(now);
        st.flush_reposts();
    }
}
