//! The component: init (discover interfaces, open one module each, publish them), progress over
//! all modules, periodic statistics (`stats_line.rs`), close.
use std::collections::HashSet;

use crate::fabric::{self, FabricConfig};
use crate::proto::{Channel, Engine, Instant, MIN_DATA_MTU};

use super::help::show_help;
use super::lock::Shared;
use super::log;
use super::modex::{self, ModexEntry};
use super::module::{ModuleCell, ModuleInfo, ModuleState};
use super::params::{usnic_rs_params_t, ParamError, Settings};
use super::status::*;
use super::sys;

/// Eager limit with a single module, and with several. The original used 150 KiB with one;
/// 512 KiB measured better on `lo`: ping-pong 256 KiB 41-45 against 56-64 us, 1 MiB 160-175
/// against 171-220 us (no rendezvous handshake below it, and larger pipeline fragments above).
/// ob1 counts its header in the limit, so 512 KiB exactly left a 512 KiB message (and the
/// 512 KiB pipeline fragments of larger ones) just over it: with 1 KiB more, 512 KiB ping-pong
/// went from 85-91 to 65-77 us (4 interleaved runs; btl tcp 69-75), bandwidth unchanged.
const EAGER_ONE_MODULE: usize = 513 * 1024;
const EAGER_MANY_MODULES: usize = 25 * 1024;
/// Bandwidth reported when the interface does not know its speed (Mb/s).
const DEFAULT_BANDWIDTH: u32 = 10_000;
/// The original's `btl_latency`.
const LATENCY: u32 = 2;
/// Largest single emulated PUT/GET (the PML splits larger transfers).
const RDMA_LIMIT: usize = 4 << 20;

/// The largest fragment ob1 may pipeline through `prepare_src`/`send` (`btl_max_send_size`).
/// Measured on `lo` (65507-byte datagrams), eager limit 512 KiB: fragments of one datagram
/// each skip reassembly (bench_bw 1-4 MiB 7.7-9.5 GB/s against 5.9-8.1 with 512 KiB
/// fragments) but ob1 keeps only a few fragments of a request in flight, and lent fragments
/// complete on acknowledgement, so a single large message crawls (1 MiB ping-pong 255 against
/// 160-175 us). The default favours latency: fragments as large as the eager limit.
fn max_send_size(param: usize, eager: usize) -> usize {
    if param != 0 {
        param
    } else {
        eager
    }
}

pub struct Component {
    pub settings: Settings,
    pub modules: Vec<ModuleCell>,
    pub my_jobid: u32,
    pub my_vpid: u32,
    pub my_host: String,
    /// `modex::host_identity()` of this process (what its modex entries carry).
    pub my_host_id: u64,
    /// Procs reached by at least one module (for `show_route_failures`).
    pub reached: std::cell::RefCell<HashSet<(u32, u32)>>,
    pub next_stats: std::cell::Cell<Instant>,
    /// Progress calls so far (only counted for `Settings::fault_panic_after`).
    pub progress_calls: std::cell::Cell<u64>,
}

static COMPONENT: Shared<Option<Component>> = Shared::new(None);

/// Run `f` with the component, if initialized (callers hold `lock::enter()`).
pub fn with_component<R>(f: impl FnOnce(&Component) -> R) -> Option<R> {
    let c = COMPONENT.cell().borrow();
    c.as_ref().map(f)
}

/// Run `f` with module `index`, if it exists.
pub fn with_module<R>(index: u32, f: impl FnOnce(&Component, &ModuleCell) -> R) -> Option<R> {
    with_component(|c| c.modules.get(index as usize).map(|m| f(c, m))).flatten()
}

pub(crate) fn random_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), v.len(), 0) };
    if n != 8 {
        // Never fails on Linux >= 3.17 for 8 bytes; fall back to time and pid, still unique enough
        // to separate jobs.
        let t = fabric::now().0;
        return crate::proto::splitmix64(t ^ ((std::process::id() as u64) << 32));
    }
    u64::from_le_bytes(v)
}

/// The identity a module writes into every datagram: the process name hashed with the module's
/// index, so that two modules of one process never look alike.
pub fn module_id(jobid: u32, vpid: u32, index: u32) -> u64 {
    crate::proto::splitmix64(
        ((jobid as u64) << 32 | vpid as u64) ^ crate::proto::splitmix64(index as u64 + 1),
    )
}

fn fabric_config(s: &Settings) -> Result<FabricConfig, ParamError> {
    let list = |name: &str, v: &Option<String>| match v {
        None => Ok(Vec::new()),
        Some(v) => {
            fabric::parse_if_list(v).map_err(|e| ParamError::invalid(name, v, e.to_string()))
        }
    };
    let d = FabricConfig::default();
    Ok(FabricConfig {
        provider: s.provider.clone(),
        if_include: list("if_include", &s.if_include)?,
        if_exclude: list("if_exclude", &s.if_exclude)?,
        mtu_cap: s.mtu,
        priority_mtu: s.priority_limit,
        sd_num: s.sd_num.map_or(-1, |v| v as i32),
        rd_num: s.rd_num.map_or(-1, |v| v as i32),
        prio_sd_num: s.prio_sd_num.map_or(-1, |v| v as i32),
        prio_rd_num: s.prio_rd_num.map_or(-1, |v| v as i32),
        cq_num: s.cq_num.map_or(-1, |v| v as i32),
        // Same-node peers are paired over loopback when both sides have it: one datagram per
        // 64 KiB instead of one per interface MTU (measured: about twice the goodput of eth0
        // between two ranks of one host). An explicit if_include decides alone.
        include_loopback: d.include_loopback || (s.same_node && s.if_include.is_none()),
        gso: s.gso,
        gro: s.gro,
    })
}

fn decline(msg: &str) -> i32 {
    super::connectivity::edge::stop();
    log::error(&format!("{msg}; the usnic BTL disables itself"));
    OPAL_SUCCESS
}

/// This host's name, as Open MPI knows it.
pub fn my_hostname() -> String {
    if cfg!(test) {
        return "localhost".into();
    }
    // SAFETY: static or Open MPI-owned NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(sys::usnic_shim_my_hostname()) }
        .to_string_lossy()
        .into_owned()
}

/// Decline because of a parameter (help topics "invalid mca param", "if_include and
/// if_exclude").
fn decline_param(host: &str, e: &ParamError) -> i32 {
    let fallback = format!("{e}; the usnic BTL disables itself");
    match e {
        ParamError::Invalid {
            name,
            value,
            problem,
        } => show_help!("invalid mca param", fallback;
            s(host), s(name), s(value), s(problem)),
        ParamError::IncludeAndExclude { include, exclude } => {
            show_help!("if_include and if_exclude", fallback; s(host), s(include), s(exclude))
        }
    }
    OPAL_SUCCESS
}

/// Decline: no device (help topic "no usable device").
fn decline_no_device(host: &str, provider: &str, reason: &str) -> i32 {
    show_help!("no usable device",
        format!("no usable interface: {reason}; the usnic BTL disables itself");
        s(host), s(provider), s(reason));
    OPAL_SUCCESS
}

/// Component init: returns OPAL_SUCCESS with `*num` modules (0 = declined).
pub fn init(params: &usnic_rs_params_t, mpi_threads: bool, num: &mut u32) -> i32 {
    *num = 0;
    let (mut jobid, mut vpid) = (0u32, 0u32);
    // SAFETY: writes two u32 out-parameters; Open MPI's local proc exists once btl_init runs.
    unsafe { sys::usnic_shim_my_name(&mut jobid, &mut vpid) };
    log::set_rank(vpid);
    let my_host = my_hostname();
    log::set_host(&my_host);
    let settings = match Settings::from_params(params) {
        Ok(s) => s,
        Err(e) => return decline_param(&my_host, &e),
    };
    log::set_verbosity(settings.verbose);
    log::init_tracing(&my_host, vpid);
    if settings.base_udp_port != 0 {
        return decline_param(
            &my_host,
            &ParamError::invalid(
                "base_udp_port",
                settings.base_udp_port,
                "not supported (must be 0)",
            ),
        );
    }
    let cfg = match fabric_config(&settings) {
        Ok(c) => c,
        Err(e) => return decline_param(&my_host, &e),
    };
    let devices = match usable_devices(&settings, &cfg, &my_host) {
        Ok(d) => d,
        Err(rc) => return rc,
    };
    let eager = eager_limit(&settings, &devices);
    let mut modules = Vec::new();
    for dev in &devices {
        let index = modules.len() as u32;
        match open_module(dev, index, &settings, &cfg, (jobid, vpid), eager, &my_host) {
            Ok(Some(m)) => modules.push(m),
            Ok(None) => {}
            Err(rc) => return rc,
        }
    }
    if modules.is_empty() {
        return decline("no interface could be opened");
    }
    // Only now: a process without a usable interface never starts or waits for the
    // connectivity agent. Its probes are UDP datagrams of the data channel's size, which says
    // something about the BTL's paths only where its datagrams are UDP datagrams: `sockets`,
    // for one, carries them over TCP, 65507 bytes each, which no 1500-byte path passes as one
    // UDP datagram (every path between hosts was declared broken and the job aborted).
    let udp = matches!(settings.provider.as_str(), "udp" | "usnic");
    if settings.connectivity_check && !udp {
        log::verbose(5, || {
            format!(
                "connectivity checker off: provider {} does not send UDP datagrams of the \
                 BTL's size",
                settings.provider
            )
        });
    }
    super::connectivity::edge::start(
        super::connectivity::edge::Setup {
            enabled: settings.connectivity_check && udp,
            ack_timeout_ms: settings.connectivity_ack_timeout_ms,
            retries: settings.connectivity_retries,
            peer_timeout_ms: settings.peer_timeout_ms,
            hostname: &my_host,
            jobid,
            local_rank: None,
            session_dir: None,
        }
        .from_env(),
    );

    let host = modex::host_identity();
    for m in modules.iter_mut() {
        m.entry.host = host;
        // Loopback modules serve same-host peers only: nothing to check.
        if !m.entry.is_loopback() {
            m.entry.cc_port = super::connectivity::edge::listen(m.entry.ipv4, m.entry.data_mtu);
        }
    }
    let entries: Vec<ModexEntry> = modules.iter().map(|m| m.entry.clone()).collect();
    let blob = modex::encode(&entries);
    // SAFETY: `blob` is readable for its length; the shim copies it into the modex.
    let rc = unsafe { sys::usnic_shim_modex_send(blob.as_ptr().cast(), blob.len()) };
    if rc != OPAL_SUCCESS {
        return decline(&format!("publishing the modex failed (error {rc})"));
    }
    *num = modules.len() as u32;
    let stats_every = settings.stats_interval_s as u64 * 1_000_000_000;
    let comp = Component {
        settings,
        modules,
        my_jobid: jobid,
        my_vpid: vpid,
        my_host_id: host,
        my_host,
        reached: Default::default(),
        next_stats: std::cell::Cell::new(Instant(fabric::now().0 + stats_every)),
        progress_calls: std::cell::Cell::new(0),
    };
    let ack_thread = comp.settings.ack_thread;
    *COMPONENT.cell().borrow_mut() = Some(comp);
    if ack_thread {
        super::acker::start();
    }
    log::verbose(5, || {
        format!(
            "MPI_THREAD_MULTIPLE {}; ACK helper thread {}",
            if mpi_threads { "on" } else { "off" },
            if ack_thread { "on" } else { "off" }
        )
    });
    OPAL_SUCCESS
}

/// The interfaces init opens, or the declining status when none is usable (each reason shown).
fn usable_devices(
    settings: &Settings,
    cfg: &FabricConfig,
    my_host: &str,
) -> Result<Vec<fabric::DeviceInfo>, i32> {
    let devices = match fabric::discover(cfg) {
        Ok(d) => d,
        Err(e) => {
            return Err(decline_no_device(
                my_host,
                &settings.provider,
                &e.to_string(),
            ))
        }
    };
    // btl_usnic_max_btls counts the interfaces that are used.
    let (devices, small) = split_by_mtu(devices, settings.max_btls);
    for d in &small {
        let if_mtu = match d.if_mtu {
            0 => "unknown".to_string(),
            m => format!("{m} bytes"),
        };
        show_help!("interface MTU too small",
            format!(
                "interface {} (MTU {if_mtu}) gives {}-byte datagrams, fewer than the {} \
                 the usnic BTL needs; skipping it",
                d.name, d.mtu, MIN_DATA_MTU
            );
            s(my_host), s(&d.name), s(&if_mtu), i(d.mtu), i(MIN_DATA_MTU));
    }
    if devices.is_empty() && !small.is_empty() {
        let names: Vec<String> = small
            .iter()
            .map(|d| format!("{} ({} bytes)", d.name, d.mtu))
            .collect();
        return Err(decline_no_device(
            my_host,
            &settings.provider,
            &format!(
                "the datagrams of every interface are below {MIN_DATA_MTU} bytes: {}",
                names.join(", ")
            ),
        ));
    }
    if devices.is_empty() && (settings.if_include.is_some() || settings.if_exclude.is_some()) {
        return Err(decline_no_device(
            my_host,
            &settings.provider,
            &format!(
                "no interface of provider {} is left after btl_usnic_if_include={} \
                 btl_usnic_if_exclude={}",
                settings.provider,
                settings.if_include.as_deref().unwrap_or("(unset)"),
                settings.if_exclude.as_deref().unwrap_or("(unset)")
            ),
        ));
    }
    if devices.is_empty() {
        return Err(decline_no_device(
            my_host,
            &settings.provider,
            &format!(
                "libfabric's provider \"{}\" offers no usable FI_EP_DGRAM interface here \
                 (is the provider name right?)",
                settings.provider
            ),
        ));
    }
    Ok(devices)
}

/// The devices whose data datagrams hold the largest header with as much payload
/// (`MIN_DATA_MTU`), at most `max` of them, and those whose datagrams are smaller:
/// the engine refuses such a data MTU, and one small interface must not decline the whole BTL
/// when others can carry the job.
fn split_by_mtu(
    devices: Vec<fabric::DeviceInfo>,
    max: usize,
) -> (Vec<fabric::DeviceInfo>, Vec<fabric::DeviceInfo>) {
    let (mut usable, small): (Vec<_>, Vec<_>) =
        devices.into_iter().partition(|d| d.mtu >= MIN_DATA_MTU);
    usable.truncate(max);
    (usable, small)
}

/// The eager limit of every module: the parameter, else the original's rule (513 KiB with one
/// module, 25 KiB with several), which counts the interfaces that carry remote traffic; the
/// loopback module only ever serves same-node peers.
fn eager_limit(settings: &Settings, devices: &[fabric::DeviceInfo]) -> usize {
    if settings.eager_limit != 0 {
        settings.eager_limit
    } else if devices.iter().filter(|d| !d.is_loopback).count() <= 1 {
        EAGER_ONE_MODULE
    } else {
        EAGER_MANY_MODULES
    }
}

/// Opens one module on `dev`: `Ok(None)` when the interface cannot be opened (shown, and
/// skipped), `Err` with the declining status when the configuration is unusable.
fn open_module(
    dev: &fabric::DeviceInfo,
    index: u32,
    settings: &Settings,
    cfg: &FabricConfig,
    (jobid, vpid): (u32, u32),
    eager: usize,
    my_host: &str,
) -> Result<Option<ModuleCell>, i32> {
    let mut fab = match fabric::Module::open(dev, cfg) {
        Ok(m) => m,
        Err(e) => {
            match super::help::exhausted_resource(e.call, e.code) {
                Some(resource) => show_help!("resource exhausted",
                    format!("cannot open interface {}: {e}; skipping it", dev.name);
                    s(my_host), s(&dev.name), s(resource),
                    s(e.call), s(&e.message), i(e.code),
                    s("this interface is not used; other interfaces or BTLs may carry the job")),
                None => show_help!("libfabric API failed",
                    format!("cannot open interface {}: {e}; skipping it", dev.name);
                    s(my_host), s(&dev.name), s(e.call), s(file!()), i(line!()),
                    s(&e.message), i(e.code)),
            }
            return Ok(None);
        }
    };
    if let Some(f) = settings.module_faults(vpid, index) {
        if let Err(e) = fab.set_faults(f) {
            return Err(decline(&format!("btl_usnic_fault_*: {e}")));
        }
        log::verbose(1, || format!("module {index}: fault injection {f:?}"));
    }
    let data_mtu = fab.channel_mtu(Channel::Data);
    let prio_mtu = fab.channel_mtu(Channel::Priority);
    let mut ec = settings.engine_config(data_mtu, prio_mtu);
    ec.data_credits = fab.tx_capacity(Channel::Data) as u32;
    ec.priority_credits = fab.tx_capacity(Channel::Priority) as u32;
    ec.local_id = module_id(jobid, vpid, index);
    ec.local_key = random_u64();
    ec.isn = random_u64() as u16;
    ec.hash_key = random_u64();
    ec.rx_window = fab.rx_capacity(Channel::Data) as u32;
    ec.data_turn = fab.batch_room(Channel::Data).max(1) as u32;
    // Half the data channel's receive buffers may wait in fragments being reassembled.
    ec.max_held = (fab.rx_buffers(Channel::Data) / 2) as u32;
    let entry = ModexEntry {
        id: ec.local_id,
        key: ec.local_key,
        isn: ec.isn,
        data_mtu: data_mtu as u32,
        ipv4: dev.ipv4,
        netmask: dev.netmask,
        link_speed_mbps: dev.link_speed_mbps,
        rx_window: ec.rx_window,
        prio_mtu: ec.priority_mtu as u32,
        wire: crate::proto::wire::VERSION,
        rdma: if settings.rdma.0 { modex::RDMA_PUT } else { 0 }
            | if settings.rdma.1 { modex::RDMA_GET } else { 0 },
        provider: settings.provider.clone(),
        address: fab.local_address(),
        // Set below, once an interface opened and the checker runs.
        cc_port: 0,
        // Set below, once for every module.
        host: 0,
    };
    let engine = match Engine::new(ec) {
        Ok(e) => e,
        Err(e) => return Err(decline(&format!("interface {}: {e}", dev.name))),
    };
    let info = module_info(dev, settings, eager);
    // Which path the data channel takes, so a run can show it took the one it meant to test.
    let reads = if fab.reads_socket(Channel::Data) {
        "read from its socket"
    } else {
        "read through the provider"
    };
    let sends = if fab.sends_on_socket(Channel::Data) {
        "sent on its socket"
    } else {
        "sent through the provider"
    };
    let batch = fab.batch_room(Channel::Data);
    log::verbose(5, || {
        format!(
            "module {index}: {} {}/{} data MTU {data_mtu}, priority MTU {prio_mtu}, \
             receive window {} datagrams, eager limit {eager}, rndv eager limit {}, \
             max send size {}, exclusivity {}; data channel {reads}, {sends}, batches of {batch}",
            dev.name,
            dev.ipv4,
            dev.netmask,
            entry.rx_window,
            info.rndv_eager_limit,
            info.max_send_size,
            sys::MCA_BTL_EXCLUSIVITY_DEFAULT
        )
    });
    Ok(Some(ModuleCell::new(
        index,
        info,
        entry,
        ModuleState::new(fab, engine),
    )))
}

/// What the PML is told of a module on `dev`: limits, bandwidth, latency and flags.
fn module_info(dev: &fabric::DeviceInfo, settings: &Settings, eager: usize) -> ModuleInfo {
    ModuleInfo {
        name: dev.name.clone(),
        eager_limit: eager,
        rndv_eager_limit: settings.rndv_eager_limit.min(eager),
        copy_below: settings.copy_below(),
        max_send_size: max_send_size(settings.max_send_size, eager),
        bandwidth: if dev.link_speed_mbps > 0 {
            dev.link_speed_mbps
        } else {
            DEFAULT_BANDWIDTH
        },
        latency: LATENCY,
        flags: sys::MCA_BTL_FLAGS_SEND
            | sys::MCA_BTL_FLAGS_SEND_INPLACE
            | sys::MCA_BTL_FLAGS_SINGLE_ADD_PROCS
            | if settings.rdma.0 {
                sys::MCA_BTL_FLAGS_PUT
            } else {
                0
            }
            | if settings.rdma.1 {
                sys::MCA_BTL_FLAGS_GET
            } else {
                0
            },
        rdma_limit: if settings.rdma.0 || settings.rdma.1 {
            RDMA_LIMIT
        } else {
            0
        },
    }
}

/// Called by the shim if it cannot build the module structs after a successful init (the
/// plugin's threads already stopped).
pub fn abandon() {
    *COMPONENT.cell().borrow_mut() = None;
}

/// Close: everything left is dropped (modules normally finalized already; the plugin's
/// threads already stopped).
pub fn close() -> i32 {
    let taken = COMPONENT.cell().borrow_mut().take();
    if let Some(c) = taken {
        for m in &c.modules {
            super::procs::finalize_module(&c, m);
        }
    }
    OPAL_SUCCESS
}

/// After an internal error (a panic caught at an entry point): as the C original's
/// `opal_btl_usnic_exit`, the PML's error callback (ob1 aborts the job from it), then exit,
/// rather than leave every message in flight waiting for a BTL that no longer works. Nothing
/// when no module has a callback yet: the entry point's error value is then enough (init).
pub fn end_job_after_internal_error(msg: &str) {
    let target = COMPONENT.cell().try_borrow().ok().and_then(|c| {
        c.as_ref()?
            .modules
            .iter()
            .find_map(|m| m.error_cb.get().map(|cb| (cb, m.btl.get())))
    });
    let Some((cb, btl)) = target else {
        return;
    };
    let c = error_text(msg);
    // SAFETY: the PML's error callback (registered through btl_register_error) with this
    // module; no proc is to blame; the string lives through the call.
    unsafe {
        cb(
            btl,
            sys::MCA_BTL_ERROR_FLAGS_FATAL as i32,
            core::ptr::null_mut(),
            c.as_ptr() as *mut _,
        )
    };
    // SAFETY: ends the process at once, as the agent's abort does: atexit handlers could wait
    // on state the failed BTL left behind.
    unsafe { libc::_exit(1) }
}

/// `msg` as the text for a PML error callback: ob1 passes it to `ompi_rte_abort` as a printf
/// format, so a `%` (a host name, a panic message) is doubled rather than read as a conversion.
pub fn error_text(msg: &str) -> std::ffi::CString {
    std::ffi::CString::new(msg.replace('\0', "?").replace('%', "%%")).unwrap_or_default()
}

/// Component progress: every module, then statistics when due.
pub fn progress() -> i32 {
    with_component(|c| {
        if c.settings.fault_panic_after != 0 {
            let n = c.progress_calls.get() + 1;
            c.progress_calls.set(n);
            if n == c.settings.fault_panic_after {
                panic!("injected in progress call {n} (btl_usnic_fault_panic_after)");
            }
        }
        let now = fabric::now();
        super::acker::note_progress(now.0);
        let mut n = 0;
        for m in &c.modules {
            n += m.progress(now);
        }
        if c.settings.stats_interval_s > 0 && now >= c.next_stats.get() {
            c.next_stats.set(Instant(
                now.0 + c.settings.stats_interval_s as u64 * 1_000_000_000,
            ));
            for m in &c.modules {
                super::stats_line::print_stats(c, m, false);
            }
        }
        n as i32
    })
    .unwrap_or(0)
}

/// Interfaces of a modex list, for pairing.
pub fn ifaces(entries: &[ModexEntry]) -> Vec<super::pairing::Iface> {
    entries
        .iter()
        .map(|e| super::pairing::Iface {
            ipv4: e.ipv4,
            netmask: e.netmask,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_with_too_small_datagrams_are_set_aside() {
        let devs = |mtus: &[(&str, usize)]| {
            mtus.iter()
                .map(|&(name, mtu)| fabric::DeviceInfo::for_test(name, mtu))
                .collect::<Vec<_>>()
        };
        let names = |d: &[fabric::DeviceInfo]| d.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        let found = [
            ("vs", 122),
            ("lo", 65507),
            ("eth0", 1472),
            ("eth1", MIN_DATA_MTU),
        ];
        let (usable, small) = split_by_mtu(devs(&found), 64);
        assert_eq!(names(&usable), ["lo", "eth0", "eth1"]);
        assert_eq!(names(&small), ["vs"]);
        // btl_usnic_max_btls counts usable interfaces only.
        let (usable, small) = split_by_mtu(devs(&found), 2);
        assert_eq!(names(&usable), ["lo", "eth0"]);
        assert_eq!(names(&small), ["vs"]);
        let (usable, small) = split_by_mtu(devs(&[("vs", MIN_DATA_MTU - 1)]), 1);
        assert!(usable.is_empty());
        assert_eq!(names(&small), ["vs"]);
    }

    #[test]
    fn error_texts_are_no_printf_formats() {
        assert_eq!(
            error_text("50% of rank %d\0").to_str().unwrap(),
            "50%% of rank %%d?"
        );
    }

    #[test]
    fn module_ids_differ_per_module_and_process() {
        let mut seen = HashSet::new();
        for job in [1u32, 2] {
            for vpid in 0..64 {
                for idx in 0..4 {
                    assert!(seen.insert(module_id(job, vpid, idx)));
                }
            }
        }
    }
}
