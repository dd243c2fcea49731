//! Generated libfabric bindings, plus the `static inline` calls of the libfabric headers
//! re-expressed as calls through the ops tables of the generated structs (exactly what the
//! inline functions do; see `build/fabric.rs` for why). A missing op (NULL table or entry)
//! returns `-FI_ENOSYS` instead of crashing.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code
)]
#![allow(clippy::all)]
include!(concat!(env!("OUT_DIR"), "/fabric_sys.rs"));

use std::os::raw::c_void;
use std::ptr::null_mut;

/// `FI_ADDR_UNSPEC` (`(uint64_t)-1`; a cast bindgen does not evaluate).
pub const FI_ADDR_UNSPEC_: fi_addr_t = u64::MAX;
/// `FI_ADDR_NOTAVAIL` (`(uint64_t)-1`).
pub const FI_ADDR_NOTAVAIL_: fi_addr_t = u64::MAX;

const ENOSYS: i64 = -(FI_ENOSYS as i64);

/// Calls `(*table).op(args)` when both the table and the entry exist, else `-FI_ENOSYS`.
macro_rules! op {
    ($table:expr, $op:ident ( $($arg:expr),* )) => {{
        let table = $table;
        match if table.is_null() { None } else { (*table).$op } {
            Some(f) => f($($arg),*) as i64,
            None => ENOSYS,
        }
    }};
}

// Every function below is `unsafe`: the caller guarantees the object pointers are live
// objects opened by libfabric and the buffers/arguments are what libfabric expects for the
// corresponding `fi_*` call.

/// `fi_close(fid)`.
pub unsafe fn close(fid: *mut fid) -> i64 {
    op!((*fid).ops, close(fid))
}

/// `fi_domain(fabric, info, &domain, NULL)`.
pub unsafe fn domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
) -> i64 {
    op!((*fabric).ops, domain(fabric, info, dom, null_mut()))
}

/// `fi_av_open(domain, attr, &av, NULL)`.
pub unsafe fn av_open(dom: *mut fid_domain, attr: *mut fi_av_attr, av: *mut *mut fid_av) -> i64 {
    op!((*dom).ops, av_open(dom, attr, av, null_mut()))
}

/// `fi_cq_open(domain, attr, &cq, NULL)`.
pub unsafe fn cq_open(dom: *mut fid_domain, attr: *mut fi_cq_attr, cq: *mut *mut fid_cq) -> i64 {
    op!((*dom).ops, cq_open(dom, attr, cq, null_mut()))
}

/// `fi_endpoint(domain, info, &ep, NULL)`.
pub unsafe fn endpoint(dom: *mut fid_domain, info: *mut fi_info, ep: *mut *mut fid_ep) -> i64 {
    op!((*dom).ops, endpoint(dom, info, ep, null_mut()))
}

/// `fi_mr_reg(domain, buf, len, access, 0, requested_key, 0, &mr, NULL)`.
pub unsafe fn mr_reg(
    dom: *mut fid_domain,
    buf: *const c_void,
    len: usize,
    access: u64,
    requested_key: u64,
    mr: *mut *mut fid_mr,
) -> i64 {
    op!(
        (*dom).mr,
        reg(
            &mut (*dom).fid,
            buf,
            len,
            access,
            0,
            requested_key,
            0,
            mr,
            null_mut()
        )
    )
}

/// `fi_ep_bind(ep, bfid, flags)`.
pub unsafe fn ep_bind(ep: *mut fid_ep, bfid: *mut fid, flags: u64) -> i64 {
    op!((*ep).fid.ops, bind(&mut (*ep).fid, bfid, flags))
}

/// `fi_enable(ep)`.
pub unsafe fn enable(ep: *mut fid_ep) -> i64 {
    op!(
        (*ep).fid.ops,
        control(&mut (*ep).fid, FI_ENABLE as i32, null_mut())
    )
}

/// `fi_getname(&ep->fid, addr, &addrlen)`.
pub unsafe fn getname(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> i64 {
    op!((*ep).cm, getname(&mut (*ep).fid, addr, addrlen))
}

/// `fi_av_insert(av, addr, count, fi_addr, flags, NULL)`.
pub unsafe fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
) -> i64 {
    op!(
        (*av).ops,
        insert(av, addr, count, fi_addr, flags, null_mut())
    )
}

/// `fi_av_remove(av, fi_addr, count, flags)`.
pub unsafe fn av_remove(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, flags: u64) -> i64 {
    op!((*av).ops, remove(av, fi_addr, count, flags))
}

/// `fi_send(ep, buf, len, desc, dest_addr, context)`.
pub unsafe fn send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> i64 {
    op!((*ep).msg, send(ep, buf, len, desc, dest, ctx))
}

/// `fi_inject(ep, buf, len, dest_addr)`: the provider copies the buffer before returning and
/// writes no completion.
pub unsafe fn inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> i64 {
    op!((*ep).msg, inject(ep, buf, len, dest))
}

/// `fi_sendv(ep, iov, desc, count, dest_addr, context)`.
pub unsafe fn sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> i64 {
    op!((*ep).msg, sendv(ep, iov, desc, count, dest, ctx))
}

/// `fi_recvmsg(ep, msg, flags)`.
pub unsafe fn recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> i64 {
    op!((*ep).msg, recvmsg(ep, msg, flags))
}

/// `fi_cq_read(cq, buf, count)`.
pub unsafe fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> i64 {
    op!((*cq).ops, read(cq, buf, count))
}

/// `fi_cq_readerr(cq, buf, flags)`.
pub unsafe fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> i64 {
    op!((*cq).ops, readerr(cq, buf, flags))
}

/// `fi_cq_strerror(cq, prov_errno, err_data, NULL, 0)`: the provider's text, or NULL.
pub unsafe fn cq_strerror(
    cq: *mut fid_cq,
    prov_errno: i32,
    err_data: *const c_void,
) -> *const std::os::raw::c_char {
    let ops = (*cq).ops;
    match if ops.is_null() { None } else { (*ops).strerror } {
        Some(f) => f(cq, prov_errno, err_data, null_mut(), 0),
        None => std::ptr::null(),
    }
}
