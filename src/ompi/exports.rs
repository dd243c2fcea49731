//! The entry points the C shim calls (declared for C in `include/usnic_rs.h`, made by cbindgen).
//!
//! Conventions, as rustls-ffi writes them down:
//! - every function runs inside [`guard`]: a panic returns the documented error value
//!   (`OPAL_ERROR`, NULL) and the BTL stays failed;
//! - `index` is the module's index as given to `usnic_rs_module_attach`; a stale or wrong index
//!   is an error, never undefined behaviour;
//! - every pointer is checked for NULL; out-parameters are written only on success, except
//!   `sendi`'s `descriptor`, which is always set (to NULL);
//! - the recursive lock is taken by [`guard`], never deeper.
use core::ffi::c_void;

use super::boundary::guard;
use super::component::{self, with_component, with_module};
use super::frag::Frag;
use super::module::ModuleCell;
use super::params::{self, usnic_rs_params_t};
use super::rdma::{self, RdmaArgs, RegHandle};
use super::status::*;
use super::sys::{
    mca_btl_base_descriptor_t, mca_btl_base_endpoint_t, mca_btl_base_module_error_cb_fn_t,
    mca_btl_base_module_t, opal_convertor_t, opal_proc_t,
};
use super::sys::{mca_btl_base_rdma_completion_fn_t, mca_btl_base_registration_handle_t};
use super::{procs, send};

/// Values the shim copies into a module struct.
#[repr(C)]
pub struct usnic_rs_module_info_t {
    pub eager_limit: usize,
    pub rndv_eager_limit: usize,
    pub max_send_size: usize,
    pub exclusivity: u32,
    pub latency: u32,
    pub bandwidth: u32,
    pub flags: u32,
    /// btl_put_limit / btl_get_limit (0 when RDMA is off).
    pub rdma_limit: usize,
    /// btl_registration_handle_size.
    pub registration_handle_size: usize,
}

/// Writes every parameter's default into `*out`, which the shim then registers with Open MPI
/// (a variable's value at registration is its default).
///
/// # Safety
/// `out` must be NULL or point to a writable parameter block.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_param_defaults(out: *mut usnic_rs_params_t) {
    guard("parameter defaults", (), || {
        if !out.is_null() {
            // SAFETY: non-NULL, and the caller promises it is writable.
            unsafe { out.write(params::param_defaults()) };
        }
    })
}

/// Component open: our panic output from now on; nothing else to do before the parameters are
/// known.
#[no_mangle]
pub extern "C" fn usnic_rs_component_open() -> i32 {
    super::boundary::log_panics();
    guard("component open", OPAL_ERROR, || OPAL_SUCCESS)
}

/// Joins the plugin's own threads (the ACK helper, the connectivity agent) before close or
/// abandon: without the lock, which the helper may be waiting for, and outside the guard,
/// which does nothing after an internal error, since they run this library's code and Open
/// MPI unloads it after close.
fn stop_own_threads() -> bool {
    std::panic::catch_unwind(|| {
        super::acker::stop();
        super::connectivity::edge::stop();
    })
    .is_ok()
}

/// Component close: releases everything still held.
#[no_mangle]
pub extern "C" fn usnic_rs_component_close() -> i32 {
    if !stop_own_threads() {
        return OPAL_ERROR;
    }
    guard("component close", OPAL_ERROR, component::close)
}

/// Component init. On OPAL_SUCCESS `*num` is the number of modules (0 = the component declines).
///
/// # Safety
/// `params` must point to the shim's registered parameters; `num` must be writable.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_component_init(
    params: *const usnic_rs_params_t,
    enable_progress_threads: bool,
    enable_mpi_threads: bool,
    num: *mut u32,
) -> i32 {
    let _ = enable_progress_threads;
    guard("component init", OPAL_ERROR, || {
        if params.is_null() || num.is_null() {
            return OPAL_ERR_BAD_PARAM;
        }
        let mut n = 0;
        // SAFETY: checked non-NULL; the shim's static parameters outlive the call.
        let rc = component::init(unsafe { &*params }, enable_mpi_threads, &mut n);
        if rc == OPAL_SUCCESS {
            // SAFETY: checked non-NULL, writable per the contract.
            unsafe { *num = n };
        }
        rc
    })
}

/// Undo a successful init the shim could not complete (out of memory building modules).
#[no_mangle]
pub extern "C" fn usnic_rs_component_abandon() {
    if stop_own_threads() {
        guard("component abandon", (), component::abandon)
    }
}

/// Fixed values of module `index` for its module struct.
///
/// # Safety
/// `info` must be writable.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_module_info(
    index: u32,
    info: *mut usnic_rs_module_info_t,
) -> i32 {
    guard("module info", OPAL_ERROR, || {
        if info.is_null() {
            return OPAL_ERR_BAD_PARAM;
        }
        with_module(index, |_, m| {
            let i = &m.info;
            // SAFETY: checked non-NULL, writable per the contract.
            unsafe {
                *info = usnic_rs_module_info_t {
                    eager_limit: i.eager_limit,
                    rndv_eager_limit: i.rndv_eager_limit,
                    max_send_size: i.max_send_size,
                    exclusivity: super::sys::MCA_BTL_EXCLUSIVITY_DEFAULT,
                    latency: i.latency,
                    bandwidth: i.bandwidth,
                    flags: i.flags,
                    rdma_limit: i.rdma_limit,
                    registration_handle_size: super::rdma::HANDLE_SIZE,
                }
            };
            OPAL_SUCCESS
        })
        .unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// Remember the module struct the shim made for module `index` (passed to PML callbacks).
#[no_mangle]
pub extern "C" fn usnic_rs_module_attach(index: u32, btl: *mut mca_btl_base_module_t) {
    guard("module attach", (), || {
        with_module(index, |_, m| m.btl.set(btl));
    })
}

/// Component progress: returns the number of completions handled.
#[no_mangle]
pub extern "C" fn usnic_rs_progress() -> i32 {
    guard("progress", OPAL_ERROR, component::progress)
}

/// `endpoints[i]` becomes this module's endpoint for `procs[i]`, or NULL when unreachable.
///
/// # Safety
/// `procs` and `endpoints` must have `nprocs` elements.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_add_procs(
    index: u32,
    nprocs: usize,
    procs: *mut *mut opal_proc_t,
    endpoints: *mut *mut mca_btl_base_endpoint_t,
) -> i32 {
    guard("add_procs", OPAL_ERROR, || {
        if nprocs == 0 {
            return OPAL_SUCCESS;
        }
        if procs.is_null() || endpoints.is_null() {
            return OPAL_ERR_BAD_PARAM;
        }
        // SAFETY: both arrays have nprocs elements per the contract.
        let (p, e) = unsafe {
            (
                core::slice::from_raw_parts(procs, nprocs),
                core::slice::from_raw_parts_mut(endpoints, nprocs),
            )
        };
        with_module(index, |c, m| procs::add_procs(c, m, p, e)).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// # Safety
/// `endpoints` must have `nprocs` elements (NULL entries are skipped).
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_del_procs(
    index: u32,
    nprocs: usize,
    procs: *mut *mut opal_proc_t,
    endpoints: *mut *mut mca_btl_base_endpoint_t,
) -> i32 {
    let _ = procs;
    guard("del_procs", OPAL_ERROR, || {
        if nprocs == 0 || endpoints.is_null() {
            return OPAL_SUCCESS;
        }
        // SAFETY: nprocs elements per the contract.
        let e = unsafe { core::slice::from_raw_parts(endpoints, nprocs) };
        with_module(index, |_, m| procs::del_procs(m, e)).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// Module finalize (the shim frees the module struct afterwards).
#[no_mangle]
pub extern "C" fn usnic_rs_finalize(index: u32) -> i32 {
    guard("finalize", OPAL_ERROR, || {
        with_module(index, procs::finalize_module).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

#[no_mangle]
pub extern "C" fn usnic_rs_alloc(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    order: u8,
    size: usize,
    flags: u32,
) -> *mut mca_btl_base_descriptor_t {
    guard("alloc", core::ptr::null_mut(), || {
        with_module(index, |_, m| send::alloc(m, endpoint, order, size, flags))
            .unwrap_or(core::ptr::null_mut())
            .cast()
    })
}

#[no_mangle]
pub extern "C" fn usnic_rs_free(index: u32, des: *mut mca_btl_base_descriptor_t) -> i32 {
    guard("free", OPAL_ERROR, || {
        with_module(index, |_, m| send::free(m, des)).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// # Safety
/// `convertor` must be the PML's live convertor and `size` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_prepare_src(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    convertor: *mut opal_convertor_t,
    order: u8,
    reserve: usize,
    size: *mut usize,
    flags: u32,
) -> *mut mca_btl_base_descriptor_t {
    guard("prepare_src", core::ptr::null_mut(), || {
        if size.is_null() || convertor.is_null() {
            return core::ptr::null_mut();
        }
        // SAFETY: readable per the contract.
        let mut sz = unsafe { *size };
        let f = with_module(index, |_, m| {
            send::prepare_src(m, endpoint, convertor, order, reserve, &mut sz, flags)
        })
        .unwrap_or(core::ptr::null_mut());
        if !f.is_null() {
            // SAFETY: writable per the contract.
            unsafe { *size = sz };
        }
        f.cast::<mca_btl_base_descriptor_t>()
    })
}

/// Returns 1 when the send completed now (no callback will follow), 0 when the descriptor's
/// callback will run later, or an OPAL error (the descriptor stays the PML's).
#[no_mangle]
pub extern "C" fn usnic_rs_send(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    des: *mut mca_btl_base_descriptor_t,
    tag: u8,
) -> i32 {
    guard("send", OPAL_ERROR, || {
        with_module(index, |_, m| send::send(m, endpoint, des, tag)).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// # Safety
/// `header` must have `header_size` readable bytes; `convertor` must be live when
/// `payload_size` > 0; `descriptor` must be writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_sendi(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    convertor: *mut opal_convertor_t,
    header: *mut c_void,
    header_size: usize,
    payload_size: usize,
    order: u8,
    flags: u32,
    tag: u8,
    descriptor: *mut *mut mca_btl_base_descriptor_t,
) -> i32 {
    let _ = (order, flags);
    if !descriptor.is_null() {
        // SAFETY: the PML's out-parameter; set on every path, failures included (no
        // descriptor is ever handed back: a refused sendi leaves the PML to btl_send).
        unsafe { *descriptor = core::ptr::null_mut() };
    }
    guard("sendi", OPAL_ERROR, || {
        if payload_size > 0 && convertor.is_null() {
            return OPAL_ERR_BAD_PARAM;
        }
        with_module(index, |_, m| {
            send::sendi(
                m,
                endpoint,
                convertor,
                header as *const u8,
                header_size,
                payload_size,
                tag,
            )
        })
        .unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

#[no_mangle]
pub extern "C" fn usnic_rs_register_error(
    index: u32,
    cb: mca_btl_base_module_error_cb_fn_t,
) -> i32 {
    guard("register_error", OPAL_ERROR, || {
        with_module(index, |_, m| {
            m.error_cb.set(cb);
            OPAL_SUCCESS
        })
        .unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

#[no_mangle]
pub extern "C" fn usnic_rs_flush(index: u32, endpoint: *mut mca_btl_base_endpoint_t) -> i32 {
    guard("flush", OPAL_ERROR, || {
        with_module(index, |_, m| send::flush(m, endpoint)).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// The shared body of `usnic_rs_put` and `usnic_rs_get`: the guard (lock and panic
/// boundary), the module.
fn rdma_entry(what: &str, index: u32, a: RdmaArgs, op: fn(&ModuleCell, RdmaArgs) -> i32) -> i32 {
    guard(what, OPAL_ERROR, || {
        with_module(index, |_, m| op(m, a)).unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// Emulated PUT of `size` bytes at `local` to `remote_address` (inside the peer's registration
/// `remote_handle`); `cbfunc` runs once every byte landed (or the PUT failed).
///
/// # Safety
/// `local` must hold `size` readable bytes; `remote_handle` must be the peer's handle bytes.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_put(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    local_address: *mut c_void,
    remote_address: u64,
    local_handle: *mut mca_btl_base_registration_handle_t,
    remote_handle: *mut mca_btl_base_registration_handle_t,
    size: usize,
    cbfunc: mca_btl_base_rdma_completion_fn_t,
    cbcontext: *mut c_void,
    cbdata: *mut c_void,
) -> i32 {
    rdma_entry(
        "put",
        index,
        RdmaArgs {
            endpoint,
            local: local_address,
            remote: remote_address,
            local_handle,
            remote_handle,
            size,
            cb: cbfunc,
            context: cbcontext,
            data: cbdata,
        },
        rdma::put,
    )
}

/// Emulated GET of `size` bytes at `remote_address` (inside the peer's registration
/// `remote_handle`) into `local_address`; `cbfunc` runs once every byte arrived (or failed).
///
/// # Safety
/// `local_address` must hold `size` writable bytes until the callback.
#[no_mangle]
pub unsafe extern "C" fn usnic_rs_get(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    local_address: *mut c_void,
    remote_address: u64,
    local_handle: *mut mca_btl_base_registration_handle_t,
    remote_handle: *mut mca_btl_base_registration_handle_t,
    size: usize,
    cbfunc: mca_btl_base_rdma_completion_fn_t,
    cbcontext: *mut c_void,
    cbdata: *mut c_void,
) -> i32 {
    rdma_entry(
        "get",
        index,
        RdmaArgs {
            endpoint,
            local: local_address,
            remote: remote_address,
            local_handle,
            remote_handle,
            size,
            cb: cbfunc,
            context: cbcontext,
            data: cbdata,
        },
        rdma::get,
    )
}

/// Let peers PUT into / GET from `[base, base + size)`; NULL on failure.
#[no_mangle]
pub extern "C" fn usnic_rs_register_mem(
    index: u32,
    endpoint: *mut mca_btl_base_endpoint_t,
    base: *mut c_void,
    size: usize,
    flags: u32,
) -> *mut mca_btl_base_registration_handle_t {
    guard("register_mem", core::ptr::null_mut(), || {
        with_module(index, |_, m| rdma::register(m, endpoint, base, size, flags))
            .unwrap_or(core::ptr::null_mut())
            .cast()
    })
}

#[no_mangle]
pub extern "C" fn usnic_rs_deregister_mem(
    index: u32,
    handle: *mut mca_btl_base_registration_handle_t,
) -> i32 {
    guard("deregister_mem", OPAL_ERROR, || {
        with_module(index, |_, m| {
            rdma::deregister(m, handle.cast::<RegHandle>())
        })
        .unwrap_or(OPAL_ERR_BAD_PARAM)
    })
}

/// Number of counters exported as MPI_T performance variables.
#[no_mangle]
pub extern "C" fn usnic_rs_stat_count() -> u32 {
    super::stats::COUNTERS.len() as u32
}

/// Name (without the `btl_usnic_` prefix) of counter `i`, a static string; NULL past the end.
#[no_mangle]
pub extern "C" fn usnic_rs_stat_name(i: u32) -> *const core::ffi::c_char {
    super::stats::name(i as usize)
}

/// Description of counter `i`, a static string; NULL past the end.
#[no_mangle]
pub extern "C" fn usnic_rs_stat_description(i: u32) -> *const core::ffi::c_char {
    super::stats::description(i as usize)
}

/// Current value of counter `i`, summed over all modules (0 before init or after close).
#[no_mangle]
pub extern "C" fn usnic_rs_stat_value(i: u32) -> u64 {
    guard("stat_value", 0, || {
        let Some(&(_, _, read)) = super::stats::COUNTERS.get(i as usize) else {
            return 0;
        };
        with_component(|c| {
            c.modules
                .iter()
                .filter_map(|m| m.state.try_borrow().ok().map(|st| read(st.engine.stats())))
                .sum()
        })
        .unwrap_or(0)
    })
}

/// Number of modules of the initialized component (0 when declined or not initialized).
#[no_mangle]
pub extern "C" fn usnic_rs_num_modules() -> u32 {
    guard("num_modules", 0, || {
        with_component(|c| c.modules.len() as u32).unwrap_or(0)
    })
}

// Frag is the descriptor: the cast in alloc/prepare_src relies on it.
const _: () = assert!(core::mem::offset_of!(Frag, des) == 0);
