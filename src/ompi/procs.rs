//! add_procs / del_procs / finalize: peers in and out of a module.
use std::io::Write;

use crate::fabric;
use crate::proto::PeerInfo;

use super::component::{ifaces, Component};
use super::endpoint::Endpoint;
use super::help::show_help;
use super::log;
use super::modex::{self, ModexEntry};
use super::module::{ModuleCell, PeerSlot};
use super::pairing;
use super::status::*;
use super::sys;

/// How long del_procs/finalize keep progressing so the last ACKs can arrive.
const DRAIN_NS: u64 = 200_000_000;

/// Fetch and decode a peer's published modules. `Ok(None)`: it published nothing (no usnic).
fn peer_entries(proc_: *const sys::opal_proc_t) -> Result<Option<Vec<ModexEntry>>, String> {
    let mut data: *mut core::ffi::c_void = core::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: proc_ is a live opal_proc_t from the BML; the out-parameters are ours.
    let rc = unsafe { sys::usnic_shim_modex_recv(proc_, &mut data, &mut size) };
    if rc == sys::OPAL_ERR_NOT_FOUND {
        return Ok(None);
    }
    if rc != OPAL_SUCCESS {
        return Err(format!("modex receive failed (error {rc})"));
    }
    if data.is_null() {
        return Ok(None);
    }
    // SAFETY: on success the shim returns a malloc'ed buffer of `size` bytes, ours to free.
    let bytes = unsafe { core::slice::from_raw_parts(data as *const u8, size) }.to_vec();
    // SAFETY: allocated by the modex with malloc; freed exactly once here.
    unsafe { sys::usnic_shim_free(data) };
    modex::decode(&bytes).map(Some)
}

/// Whether Open MPI calls `p` a process of this node (our own mpirun's only).
fn local_to_open_mpi(p: *const sys::opal_proc_t) -> bool {
    // SAFETY: p is a live opal_proc_t.
    let local = unsafe { sys::usnic_shim_proc_on_local_node(p) };
    local != 0
}

/// Whether a peer's modex entries carry this process's host identity: Open MPI calls a process
/// of another mpirun (connect/accept, on one host) remote, with host "unknown", though it shares
/// our `lo`.
fn shares_host(c: &Component, theirs: &[ModexEntry]) -> bool {
    theirs
        .first()
        .is_some_and(|e| e.host != 0 && e.host == c.my_host_id)
}

/// A setting that differs between this process and a peer (`modex::mismatch`): no module pairs
/// with that peer.
fn mismatch_with(c: &Component, theirs: &[ModexEntry]) -> Option<modex::Mismatch> {
    modex::mismatch(&c.modules.first()?.entry, theirs.first()?)
}

/// Says, once per process (a job where one rank differs would otherwise print a line per
/// pair), which setting keeps this process and rank `vpid` apart. Both ends say it: the
/// job usually stops right after (Open MPI finds the pair unreachable), and the end that
/// stops first may take the other's message with it.
fn report_mismatch(c: &Component, vpid: u32, host: &str, (what, ours, theirs): modex::Mismatch) {
    static SHOWN: std::sync::Once = std::sync::Once::new();
    SHOWN.call_once(|| {
        let fallback = format!(
            "rank {vpid} on {host} is not reached over usnic: {what} differs ({ours} here, \
             {theirs} there); every process must use the same"
        );
        show_help!("setting mismatch", fallback;
            s(&c.my_host), s(c.my_vpid), s(host), s(vpid), s(what), s(&ours), s(&theirs));
    });
}

fn proc_name(p: *const sys::opal_proc_t) -> (u32, u32) {
    let (mut j, mut v) = (0, 0);
    // SAFETY: p is a live opal_proc_t; writes two u32 out-parameters.
    unsafe { sys::usnic_shim_proc_name(p, &mut j, &mut v) };
    (j, v)
}

fn proc_host(p: *const sys::opal_proc_t) -> String {
    // SAFETY: the shim returns Open MPI's host string or a static "unknown".
    unsafe { std::ffi::CStr::from_ptr(sys::usnic_shim_proc_hostname(p)) }
        .to_string_lossy()
        .into_owned()
}

/// `endpoints[i]` = an endpoint for each proc this module reaches, NULL for the others.
pub fn add_procs(
    c: &Component,
    m: &ModuleCell,
    procs: &[*mut sys::opal_proc_t],
    endpoints: &mut [*mut sys::mca_btl_base_endpoint_t],
) -> i32 {
    let mine = ifaces(
        &c.modules
            .iter()
            .map(|m| m.entry.clone())
            .collect::<Vec<_>>(),
    );
    let last_module = m.index as usize + 1 == c.modules.len();
    let mut map_lines = Vec::new();
    for (i, &p) in procs.iter().enumerate() {
        endpoints[i] = core::ptr::null_mut();
        if p.is_null() {
            continue;
        }
        let (jobid, vpid) = proc_name(p);
        if (jobid, vpid) == (c.my_jobid, c.my_vpid) {
            continue; // the self BTL's business
        }
        let local = local_to_open_mpi(p);
        if local && !c.settings.same_node {
            continue;
        }
        let host = proc_host(p);
        let theirs = match peer_entries(p) {
            Ok(Some(t)) => t,
            Ok(None) => {
                log::verbose(5, || format!("rank {vpid} on {host} has no usnic module"));
                continue;
            }
            Err(e) => {
                // add_procs runs once per module: say it once.
                if m.index == 0 {
                    log::error(&format!(
                        "ignoring rank {vpid} on {host}: its usnic modex data is unusable: {e}"
                    ));
                }
                continue;
            }
        };
        let same_node = local || shares_host(c, &theirs);
        if same_node && !c.settings.same_node {
            continue;
        }
        if let Some(x) = mismatch_with(c, &theirs) {
            report_mismatch(c, vpid, &host, x);
            continue;
        }
        let i_am_first = (c.my_jobid, c.my_vpid) < (jobid, vpid);
        let Some(j) = pairing::peer_module_for(
            &mine,
            &ifaces(&theirs),
            m.index as usize,
            same_node,
            i_am_first,
        ) else {
            continue;
        };
        let e = &theirs[j];
        let ep = match connect(m, p, (jobid, vpid, i_am_first), host, e) {
            Ok(ep) => ep,
            Err(msg) => {
                log::error(&msg);
                continue;
            }
        };
        endpoints[i] = Endpoint::as_c(ep);
        c.reached.borrow_mut().insert((jobid, vpid));
        map_lines.push(format!(
            "rank {vpid} {} via {} {} -> {}",
            proc_host(p),
            m.info.name,
            m.entry.ipv4,
            e.ipv4
        ));
    }
    if last_module && c.settings.show_route_failures {
        for &p in procs {
            if p.is_null() {
                continue;
            }
            let (jobid, vpid) = proc_name(p);
            let Ok(Some(theirs)) = peer_entries(p) else {
                continue;
            };
            let same_node = local_to_open_mpi(p) || shares_host(c, &theirs);
            if (jobid, vpid) == (c.my_jobid, c.my_vpid)
                || (same_node && !c.settings.same_node)
                || mismatch_with(c, &theirs).is_some()
            {
                continue;
            }
            if !c.reached.borrow().contains(&(jobid, vpid)) {
                let local = c
                    .modules
                    .iter()
                    .map(|m| format!("{} {}/{}", m.info.name, m.entry.ipv4, m.entry.netmask))
                    .collect::<Vec<_>>()
                    .join(", ");
                let remote = theirs
                    .iter()
                    .map(|e| format!("{}/{}", e.ipv4, e.netmask))
                    .collect::<Vec<_>>()
                    .join(", ");
                let reason = pairing::why_unpaired(&mine, &ifaces(&theirs), same_node);
                let fallback = format!(
                    "rank {vpid} on {} is unreachable over usnic from this process's interfaces \
                     ({local}): {reason}",
                    proc_host(p),
                );
                let names = c
                    .modules
                    .iter()
                    .map(|m| m.info.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let addrs = c
                    .modules
                    .iter()
                    .map(|m| format!("{}/{}", m.entry.ipv4, m.entry.netmask))
                    .collect::<Vec<_>>()
                    .join(", ");
                show_help!("unreachable peer IP", fallback;
                    s(&c.my_host),
                    s(&names),
                    s(&addrs),
                    s(format!("{} (rank {vpid})", proc_host(p))),
                    s(&remote),
                    s(&reason));
            }
        }
    }
    if let Some(prefix) = &c.settings.connectivity_map {
        write_map(c, m, prefix, &map_lines);
    }
    OPAL_SUCCESS
}

fn connect(
    m: &ModuleCell,
    p: *mut sys::opal_proc_t,
    (jobid, vpid, i_am_first): (u32, u32, bool),
    host: String,
    e: &ModexEntry,
) -> Result<*mut Endpoint, String> {
    let mut st = m.state.borrow_mut();
    // A proc added again (dynamic processes) keeps its endpoint.
    for slot in st.peers.iter().flatten() {
        // SAFETY: endpoints in the table are live.
        let ep = unsafe { &*slot.endpoint };
        if (ep.jobid, ep.vpid) == (jobid, vpid) {
            return Ok(slot.endpoint);
        }
    }
    let addr = st
        .fabric
        .insert_peer(&e.address)
        .map_err(|err| format!("cannot reach rank {vpid} on {host} at {}: {err}", e.ipv4))?;
    super::connectivity::mtu::check(
        &super::connectivity::mtu::End {
            host: &super::component::my_hostname(),
            interface: &m.info.name,
            address: super::connectivity::mtu::with_prefix(m.entry.ipv4, m.entry.netmask),
            datagram: m.entry.data_mtu,
        },
        &super::connectivity::mtu::End {
            host: &host,
            interface: "",
            address: e.ipv4.to_string(),
            datagram: e.data_mtu,
        },
        (m.entry.ipv4, e.ipv4),
        i_am_first,
    );
    let now = fabric::now();
    let peer = st.engine.add_peer(
        now,
        PeerInfo {
            remote_id: e.id,
            remote_key: e.key,
            remote_isn: e.isn,
            remote_data_mtu: e.data_mtu as usize,
            remote_rx_window: e.rx_window,
            remote_priority_mtu: e.prio_mtu as usize,
        },
    );
    let ep = Box::into_raw(Box::new(Endpoint {
        module: m.index,
        peer,
        proc_: p,
        jobid,
        vpid,
        remote_ipv4: e.ipv4,
        failed: std::cell::Cell::new(false),
        connectivity: super::connectivity::edge::PathCheck::new(
            (m.entry.ipv4, m.entry.cc_port, m.entry.data_mtu),
            (e.ipv4, e.cc_port, e.data_mtu),
            &host,
        ),
        host,
    }));
    let idx = peer.0 as usize;
    if st.peers.len() <= idx {
        st.peers.resize_with(idx + 1, || None);
    }
    st.npeers += 1;
    if let Some(old) = st.peers[idx].replace(PeerSlot { addr, endpoint: ep }) {
        st.npeers -= 1;
        // The core reused an id we still held: impossible unless remove_peer was skipped.
        // SAFETY: the old endpoint was leaked by us and is no longer reachable from the table.
        drop(unsafe { Box::from_raw(old.endpoint) });
    }
    log::verbose(10, || {
        format!(
            "module {} reaches rank {vpid} at {} (peer {})",
            m.info.name, e.ipv4, peer.0
        )
    });
    Ok(ep)
}

fn write_map(c: &Component, m: &ModuleCell, prefix: &str, lines: &[String]) {
    let path = format!(
        "{prefix}-{}.pid{}.job{}.mcwrank{}.txt",
        c.my_host,
        std::process::id(),
        c.my_jobid,
        c.my_vpid
    );
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| {
            for l in lines {
                writeln!(f, "{l}")?;
            }
            Ok(())
        });
    if let Err(e) = res {
        let cwd = std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|e| format!("(unknown: {e})"));
        show_help!("cannot write to map file",
            format!("cannot write connectivity map {path} for module {}: {e}", m.info.name);
            s(&c.my_host), s(&path), s(&cwd), s(&e));
    }
}

/// Keep progressing this module until no peer in `peers` has unacknowledged data, at most
/// `DRAIN_NS` (a peer that already left never acknowledges); then acknowledge everything
/// received from them, twice. A delayed ACK still owed would never leave, and a peer that
/// stays (the parent of a spawned process that exits: Open MPI 4.1 never removes it) would
/// resend to a process that is gone and end its own job declaring it failed.
fn drain(m: &ModuleCell, peers: &[crate::proto::PeerId]) {
    let deadline = fabric::now().0 + DRAIN_NS;
    loop {
        let idle = {
            let st = m.state.borrow();
            peers.iter().all(|&p| st.engine.is_idle(p))
        };
        if idle || fabric::now().0 > deadline {
            break;
        }
        m.progress(fabric::now());
        std::hint::spin_loop();
    }
    let mut st = m.state.borrow_mut();
    for _ in 0..2 {
        for &p in peers {
            st.engine.acknowledge_now(p);
        }
        st.transmit(fabric::now());
    }
}

/// Forget the given endpoints: their peers leave the core and the fabric; outstanding sends to
/// them are dropped without callbacks (the PML is tearing the peer down).
pub fn del_procs(m: &ModuleCell, endpoints: &[*mut sys::mca_btl_base_endpoint_t]) -> i32 {
    let ours: Vec<*mut Endpoint> = {
        let st = m.state.borrow();
        endpoints
            .iter()
            .map(|&e| e.cast::<Endpoint>())
            .filter(|&e| !e.is_null() && st.peers.iter().flatten().any(|s| s.endpoint == e))
            .collect()
    };
    // SAFETY: each pointer was just found in the peer table, so it is live.
    let peers: Vec<_> = ours.iter().map(|&e| unsafe { (*e).peer }).collect();
    drain(m, &peers);
    remove_peers(m, &peers);
    OPAL_SUCCESS
}

fn remove_peers(m: &ModuleCell, peers: &[crate::proto::PeerId]) {
    let mut st = m.state.borrow_mut();
    let now = fabric::now();
    for &p in peers {
        st.engine.remove_peer(now, p);
    }
    // Completions of what was still queued for the removed peers: free our descriptors, no
    // callbacks (their endpoints are freed below). Everything else, deferred or just drained,
    // stays queued for the next progress call: it belongs to peers that are still there.
    let removed: Vec<*mut Endpoint> = peers.iter().map(|&p| st.endpoint_of(p)).collect();
    let mut queued = core::mem::take(&mut st.deferred);
    st.drain_events(now, &mut queued);
    for up in queued {
        match up {
            super::module::Upcall::PeerFailed { endpoint } if removed.contains(&endpoint) => {}
            // SAFETY: operations with a pending completion are live.
            super::module::Upcall::RdmaDone { op, .. }
                if removed.contains(&unsafe { (*op).endpoint }) =>
            {
                // SAFETY: an operation the core just failed; nobody else holds it.
                let op = unsafe { Box::from_raw(op) };
                if let Some(t) = op.temp_region {
                    st.forget_region(t);
                }
            }
            // SAFETY: frags with a pending completion are live.
            super::module::Upcall::SendDone { frag, .. }
                if removed.contains(&unsafe { (*frag).endpoint }) =>
            {
                // SAFETY: a frag with an outstanding send; the peer is gone, so nobody will
                // complete it. Free only BTL-owned ones (the PML frees the others itself).
                unsafe {
                    if (*frag).des.des_flags & DES_FLAGS_BTL_OWNERSHIP != 0 {
                        st.free_frag(frag);
                    }
                }
            }
            other => st.deferred.push(other),
        }
    }
    for &p in peers {
        if let Some(slot) = st.peers.get_mut(p.0 as usize).and_then(Option::take) {
            st.npeers = st.npeers.saturating_sub(1);
            st.fabric.remove_peer(&slot.addr);
            // SAFETY: leaked by `connect`, now unreachable from the table; the PML is done
            // with it (del_procs/finalize).
            drop(unsafe { Box::from_raw(slot.endpoint) });
        }
    }
}

/// Module finalize: drain, remove every peer, close the fabric objects (by dropping them).
pub fn finalize_module(c: &Component, m: &ModuleCell) -> i32 {
    if m.state.borrow().finalized {
        return OPAL_SUCCESS;
    }
    let peers: Vec<_> = {
        let st = m.state.borrow();
        st.peers
            .iter()
            .flatten()
            // SAFETY: endpoints in the table are live.
            .map(|s| unsafe { (*s.endpoint).peer })
            .collect()
    };
    drain(m, &peers);
    remove_peers(m, &peers);
    if c.settings.stats_interval_s > 0 {
        super::stats_line::print_stats(c, m, true);
    }
    // The shim frees the module struct right after this returns: nothing may call the PML
    // with it (or with its error callback, whose component may be closed) from now on, not
    // even the internal-error path while MPI_T keeps this component open.
    m.btl.set(core::ptr::null_mut());
    m.error_cb.set(None);
    let mut st = m.state.borrow_mut();
    st.finalized = true;
    if st.frags.live > 0 {
        log::verbose(5, || {
            format!(
                "module {}: {} descriptors still held by the PML at finalize",
                m.info.name, st.frags.live
            )
        });
    }
    OPAL_SUCCESS
}
