//! The send side of the module: alloc, free, prepare_src, send, sendi, flush.
use core::ptr;

use crate::fabric;
use crate::proto::{Cookie, Lent, Payload, SubmitError};

use super::endpoint::Endpoint;
use super::frag::{Frag, FragPool, LentFrag};
use super::log;
use super::module::{ModuleCell, INLINE_BACKLOG_LIMIT};
use super::status::*;
use super::sys;

/// The endpoint behind a PML-supplied pointer, if it is one of this module's live endpoints.
fn endpoint<'a>(m: &ModuleCell, ep: *mut sys::mca_btl_base_endpoint_t) -> Option<&'a Endpoint> {
    if ep.is_null() {
        return None;
    }
    let ep = m.state.borrow().check_endpoint(ep.cast::<Endpoint>())?;
    // SAFETY: found in the peer table, so live until del_procs/finalize, which the PML never
    // overlaps with sends to that peer.
    let e = Some(unsafe { &*ep }).filter(|e| e.module == m.index)?;
    e.connectivity.request();
    Some(e)
}

pub fn alloc(
    m: &ModuleCell,
    ep: *mut sys::mca_btl_base_endpoint_t,
    order: u8,
    size: usize,
    flags: u32,
) -> *mut Frag {
    if size > m.info.send_limit() {
        return ptr::null_mut();
    }
    let epp = endpoint(m, ep).map_or(ptr::null_mut(), |e| e as *const _ as *mut Endpoint);
    if epp.is_null() && !ep.is_null() {
        return ptr::null_mut();
    }
    m.state
        .borrow_mut()
        .new_frag(m.index, epp, size, flags, order)
}

pub fn free(m: &ModuleCell, des: *mut sys::mca_btl_base_descriptor_t) -> i32 {
    if des.is_null() {
        return OPAL_ERR_BAD_PARAM;
    }
    let f = des.cast::<Frag>();
    // SAFETY: the PML frees descriptors this module gave it, which are frags.
    if !unsafe { Frag::is_live(f, m.index) } {
        log::error(&format!(
            "btl_free of {des:p}, which is not a descriptor of this module in use (freed \
             twice, or another BTL's): refused"
        ));
        return OPAL_ERR_BAD_PARAM;
    }
    // SAFETY: the PML gives up the descriptor with this call.
    unsafe { m.state.borrow_mut().free_frag(f) };
    OPAL_SUCCESS
}

/// A descriptor whose segment 0 has `reserve` bytes for the PML's header, followed by up to
/// `*size` bytes of the convertor's data: referenced in place when contiguous, packed into the
/// fragment otherwise. `*size` becomes what the descriptor carries.
pub fn prepare_src(
    m: &ModuleCell,
    ep: *mut sys::mca_btl_base_endpoint_t,
    conv: *mut sys::opal_convertor_t,
    order: u8,
    reserve: usize,
    size: &mut usize,
    flags: u32,
) -> *mut Frag {
    let Some(e) = endpoint(m, ep) else {
        return ptr::null_mut();
    };
    let epp = e as *const _ as *mut Endpoint;
    let want = (*size).min(m.info.send_limit().saturating_sub(reserve));
    // Data read in place completes only when acknowledged, so a blocking send (or a
    // Sendrecv) would wait for the peer's delayed ACK; small data is cheaper to copy.
    // SAFETY: conv is the PML's live convertor.
    let need_buffers = want > 0
        && (want < m.info.copy_below
            || unsafe { sys::usnic_shim_convertor_need_buffers(conv) } != 0);
    // Data read in place needs room for the header only: a buffer sized for the data too
    // took a spare as large from the core, which came back holding the header alone, so the
    // next reassembly of that size zeroed it all again (1.6-1.8 % of the CPU of a 4-rank ring).
    let seg0 = if need_buffers {
        reserve + want
    } else {
        reserve
    };
    let f = m
        .state
        .borrow_mut()
        .new_frag(m.index, epp, seg0, flags, order);
    if want == 0 {
        *size = 0;
        return f;
    }
    if need_buffers {
        // SAFETY: f is live and ours; its buffer has `reserve + want` bytes.
        let dst = unsafe { (*f).buf.as_mut_ptr().add(reserve) };
        let mut data = dst.cast::<core::ffi::c_void>();
        let mut packed = want;
        // SAFETY: packs at most `want` bytes into the frag's buffer after the reserve.
        let rc = unsafe { sys::usnic_shim_convertor_pack(conv, &mut data, &mut packed) };
        if rc != OPAL_SUCCESS {
            // SAFETY: f never reached the PML.
            unsafe { m.state.borrow_mut().free_frag(f) };
            return ptr::null_mut();
        }
        // SAFETY: f is live and ours.
        unsafe {
            (*f).buf.truncate(reserve + packed);
            (*f).segs[0].seg_len = (reserve + packed) as u64;
        }
        *size = packed;
    } else {
        let mut data: *mut core::ffi::c_void = ptr::null_mut();
        let mut len = want;
        // SAFETY: contiguous data: the convertor returns its address and advances.
        let rc = unsafe { sys::usnic_shim_convertor_pack(conv, &mut data, &mut len) };
        if rc != OPAL_SUCCESS {
            // SAFETY: f never reached the PML.
            unsafe { m.state.borrow_mut().free_frag(f) };
            return ptr::null_mut();
        }
        // SAFETY: f is live; the user data stays valid until the send (PML contract).
        unsafe { FragPool::set_user_segment(f, data.cast(), len) };
        *size = len;
    }
    f
}

fn submit_error(e: SubmitError) -> i32 {
    match e {
        SubmitError::UnknownPeer | SubmitError::PeerFailed => OPAL_ERR_UNREACH,
        SubmitError::TooLarge => OPAL_ERR_BAD_PARAM,
    }
}

pub fn send(
    m: &ModuleCell,
    ep: *mut sys::mca_btl_base_endpoint_t,
    des: *mut sys::mca_btl_base_descriptor_t,
    tag: u8,
) -> i32 {
    let Some(e) = endpoint(m, ep) else {
        return OPAL_ERR_UNREACH;
    };
    if des.is_null() {
        return OPAL_ERR_BAD_PARAM;
    }
    if e.failed.get() {
        return OPAL_ERR_UNREACH;
    }
    let f = des.cast::<Frag>();
    // SAFETY: a descriptor of this module handed back by the PML for sending.
    let flags = unsafe {
        if !Frag::is_live(f, m.index) {
            log::error(&format!(
                "btl_send of {des:p}, which is not a descriptor of this module in use (freed, \
                 or another BTL's): refused"
            ));
            return OPAL_ERR_BAD_PARAM;
        }
        (*f).endpoint = e as *const _ as *mut Endpoint;
        (*f).des.des_flags
    };
    let mut st = m.state.borrow_mut();
    // SAFETY: f is a live descriptor of this module.
    let lend = unsafe { (*f).des.des_segment_count == 2 && (*f).seg_len(1) > 0 };
    let outcome = if lend {
        // The user's data is read in place until it is acknowledged, so the PML may not reuse
        // its buffer before then.
        SendOutcome::CallbackOnAck {
            btl_frees: flags & DES_FLAGS_BTL_OWNERSHIP != 0,
        }
    } else {
        send_outcome(flags, st.inline_backlog > INLINE_BACKLOG_LIMIT)
    };
    let data: Payload = if lend {
        // SAFETY: prepare_src set segment 1 to the user's contiguous data; the outcome above
        // calls the PML back (and frees the frag) only once the core reports completion.
        let lent: Box<dyn Lent> = Box::new(unsafe { LentFrag::new(f) });
        lent.into()
    } else if flags & DES_FLAGS_BTL_OWNERSHIP != 0 {
        // SAFETY: f is a live descriptor of this module (no user segment: see `lend`); the BTL
        // frees it once sent, so its buffer is the core's from now on.
        unsafe { (*f).take_segment0() }.into()
    } else {
        // The PML keeps this descriptor until it calls btl_free, segment included: it may read
        // it after the callback or fill it and send it again. Taking its buffer handed that
        // memory to the next descriptor allocated once the send completed, and a second send
        // carried nothing. The core gets a copy.
        // SAFETY: f is a live descriptor of this module (no user segment: see `lend`).
        let seg0 = unsafe { (*f).segment0() };
        let mut copy = st.engine.filled_buffer(seg0.len());
        copy.copy_from_slice(seg0);
        copy.into()
    };
    let len = data.len();
    let cookie = match outcome {
        SendOutcome::CompletedInline | SendOutcome::CallbackNow => st.inline_cookie(len),
        SendOutcome::CallbackOnAck { .. } => Cookie(f as u64),
    };
    let now = fabric::now();
    match st.engine.submit_send(now, e.peer, tag, data, cookie) {
        Ok(()) => {
            st.transmit(now);
            match outcome {
                SendOutcome::CompletedInline => {
                    // SAFETY: BTL-owned, and returning 1 tells the PML it is complete.
                    unsafe { st.free_frag(f) };
                    1
                }
                SendOutcome::CallbackNow => {
                    drop(st);
                    // SAFETY: the descriptor is ours (BTL-owned) and still intact; the PML's
                    // completion callback may re-enter this module (no borrow is live).
                    unsafe {
                        if let Some(cb) = (*f).des.des_cbfunc {
                            cb(m.btl.get(), ep, des, OPAL_SUCCESS);
                        }
                        m.state.borrow_mut().free_frag(f);
                    }
                    OPAL_SUCCESS
                }
                SendOutcome::CallbackOnAck { .. } => OPAL_SUCCESS,
            }
        }
        Err(err) => {
            st.refused(cookie);
            log::verbose(5, || format!("send to {} refused: {err:?}", e.describe()));
            submit_error(err)
        }
    }
}

/// Inline send: header and payload packed straight into the core's buffer, no descriptor.
pub fn sendi(
    m: &ModuleCell,
    ep: *mut sys::mca_btl_base_endpoint_t,
    conv: *mut sys::opal_convertor_t,
    header: *const u8,
    header_size: usize,
    payload_size: usize,
    tag: u8,
) -> i32 {
    let Some(e) = endpoint(m, ep) else {
        return OPAL_ERR_UNREACH;
    };
    let total = header_size + payload_size;
    if e.failed.get() || total > m.info.send_limit() || (header.is_null() && header_size > 0) {
        return OPAL_ERR_RESOURCE_BUSY;
    }
    if m.state.borrow().inline_backlog > INLINE_BACKLOG_LIMIT {
        return OPAL_ERR_RESOURCE_BUSY;
    }
    // Header and payload overwrite every byte, so a spare already this long is taken as it is
    // rather than emptied and zeroed up to `total` again.
    let mut data = m.state.borrow_mut().engine.filled_buffer(total);
    if header_size > 0 {
        // SAFETY: the PML's header of `header_size` bytes.
        data[..header_size]
            .copy_from_slice(unsafe { core::slice::from_raw_parts(header, header_size) });
    }
    if payload_size > 0 {
        let mut dst = data[header_size..].as_mut_ptr().cast::<core::ffi::c_void>();
        let mut packed = payload_size;
        // SAFETY: packs at most payload_size bytes into `data` after the header.
        let rc = unsafe { sys::usnic_shim_convertor_pack(conv, &mut dst, &mut packed) };
        if rc != OPAL_SUCCESS || packed != payload_size {
            return if rc != OPAL_SUCCESS {
                rc
            } else {
                OPAL_ERR_RESOURCE_BUSY
            };
        }
    }
    let mut st = m.state.borrow_mut();
    let cookie = st.inline_cookie(total);
    let now = fabric::now();
    match st.engine.submit_send(now, e.peer, tag, data, cookie) {
        Ok(()) => {
            st.transmit(now);
            OPAL_SUCCESS
        }
        Err(err) => {
            st.refused(cookie);
            log::verbose(5, || format!("sendi to {} refused: {err:?}", e.describe()));
            OPAL_ERR_RESOURCE_BUSY
        }
    }
}

/// Wait (progressing) until everything sent to `ep` (or to anyone, for NULL / ENDPOINT_ANY) is
/// acknowledged or its peer failed.
pub fn flush(m: &ModuleCell, ep: *mut sys::mca_btl_base_endpoint_t) -> i32 {
    let any = ep.is_null() || ep as isize == -1;
    let peers: Vec<_> = if any {
        let st = m.state.borrow();
        st.peers
            .iter()
            .flatten()
            // SAFETY: endpoints in the table are live.
            .map(|s| unsafe { (*s.endpoint).peer })
            .collect()
    } else {
        match endpoint(m, ep) {
            Some(e) => vec![e.peer],
            None => return OPAL_ERR_BAD_PARAM,
        }
    };
    loop {
        let idle = {
            let st = m.state.borrow();
            peers.iter().all(|&p| st.engine.is_idle(p))
        };
        if idle {
            return OPAL_SUCCESS;
        }
        // A failed peer completes everything queued for it, so this terminates.
        m.progress(fabric::now());
    }
}
