//! Upcalls run into Open MPI once no borrow of the state is live: deliveries, send
//! completions, RDMA completions and a peer's failure.
use crate::ompi::endpoint::Endpoint;
use crate::ompi::frag::Frag;
use crate::ompi::help::show_help;
use crate::ompi::status::*;
use crate::ompi::sys;
use crate::ompi::{component, rdma};

use super::deliver::deliver;
use super::{ModuleCell, Upcall};

impl ModuleCell {
    /// Run upcalls with no borrow of the state live, then repost what they used.
    pub(super) fn dispatch(&self, batch: &mut Vec<Upcall>) {
        let btl = self.btl.get();
        let mut reposts = self.reposts.take();
        for up in batch.drain(..) {
            match up {
                Upcall::DeliverInPlace {
                    ch,
                    buf,
                    data,
                    len,
                    tag,
                } => {
                    deliver(btl, tag, data as *mut u8, len);
                    reposts.push((ch, buf));
                }
                Upcall::DeliverOwned { mut data, tag } => {
                    let len = data.len();
                    deliver(btl, tag, data.as_mut_ptr(), len);
                    // The PML copied what it needed during its callback.
                    self.state.borrow_mut().engine.recycle(data);
                }
                Upcall::DeliverPieces { pieces, len, tag } => {
                    self.deliver_pieces(tag, &pieces, len);
                    self.state.borrow_mut().release_pieces(pieces, &mut reposts);
                }
                Upcall::SendDone { frag, status } => self.complete_send(frag, status),
                Upcall::PeerFailed { endpoint } => self.peer_failed(endpoint),
                Upcall::RdmaDone { op, status } => rdma::complete(self, op, status),
            }
        }
        let mut st = self.state.borrow_mut();
        if !reposts.is_empty() {
            st.repost_all(&reposts);
            reposts.clear();
        }
        self.reposts.set(reposts);
        // Callbacks may have queued sends (their own transmit already ran), and ACKs may be owed.
        st.transmit(crate::fabric::now());
    }

    /// Tell the PML a descriptor's send finished, then free it if the BTL owns it.
    fn complete_send(&self, frag: *mut Frag, status: i32) {
        // SAFETY: the cookie was made from a live frag by `send`; a frag whose send is
        // outstanding is never freed (neither the BTL nor the PML frees it before this callback).
        let (cb, ep, flags) = unsafe {
            (
                (*frag).des.des_cbfunc,
                (*frag).endpoint,
                (*frag).des.des_flags,
            )
        };
        if let Some(cb) = cb {
            // SAFETY: the PML's completion callback with the arguments btl.h prescribes.
            unsafe { cb(self.btl.get(), Endpoint::as_c(ep), frag.cast(), status) };
        }
        if flags & DES_FLAGS_BTL_OWNERSHIP != 0 {
            let mut st = self.state.borrow_mut();
            // SAFETY: BTL-owned and called back: nobody else refers to it any more.
            unsafe { st.free_frag(frag) };
        }
    }

    fn peer_failed(&self, endpoint: *mut Endpoint) {
        // SAFETY: endpoints stay allocated until del_procs/finalize, which drain events first.
        let ep = unsafe { &*endpoint };
        if ep.failed.replace(true) {
            return;
        }
        let timeout = self.state.borrow().engine.config().peer_timeout.0 / 1_000_000;
        let msg = format!(
            "{} stopped acknowledging on interface {} ({}): nothing for {} ms \
             (btl_usnic_peer_timeout); it is considered failed",
            ep.describe(),
            self.info.name,
            self.entry.ipv4,
            timeout
        );
        // (During component close the component is already taken out of its cell.)
        let (my_host, my_rank) =
            component::with_component(|c| (c.my_host.clone(), c.my_vpid.to_string()))
                .unwrap_or_else(|| (component::my_hostname(), "(closing)".into()));
        show_help!("peer unreachable", msg.clone();
            s(&my_host),
            s(format!("rank {my_rank}")),
            s(&ep.host),
            s(format!("rank {}", ep.vpid)),
            s(format!("{} (from local interface {} {})", ep.remote_ipv4, self.info.name, self.entry.ipv4)),
            i(timeout.min(i32::MAX as u64)));
        if let Some(cb) = self.error_cb.get() {
            let c = component::error_text(&msg);
            // SAFETY: the PML's error callback (registered through btl_register_error) with the
            // failing proc; the string lives through the call. ob1 aborts the job from it.
            unsafe {
                cb(
                    self.btl.get(),
                    sys::MCA_BTL_ERROR_FLAGS_FATAL as i32,
                    ep.proc_,
                    c.as_ptr() as *mut _,
                )
            };
        }
    }
}
