//! MCA parameters: the storage the shim registers with Open MPI's variable system, and their
//! validation into the settings the edges use.
//!
//! The shim owns one `usnic_rs_params_t` for the life of the process; Open MPI writes the values
//! (and owns the strings). Validation happens at component init, so that `ompi_info` can always
//! show every parameter and a bad value declines the component with one clear line instead of
//! unloading it silently.
use core::ffi::{c_char, c_int, CStr};

use crate::fabric::FaultConfig;
use crate::proto::{Config, Duration};

/// Values of every `btl_usnic_*` parameter, as registered by the shim (`-1` = automatic where the
/// help text says so). Field names are the parameter names without the prefix.
#[repr(C)]
#[derive(Debug)]
pub struct usnic_rs_params_t {
    pub max_btls: c_int,
    pub if_include: *mut c_char,
    pub if_exclude: *mut c_char,
    pub stats: c_int,
    pub stats_relative: bool,
    pub sd_num: c_int,
    pub rd_num: c_int,
    pub prio_sd_num: c_int,
    pub prio_rd_num: c_int,
    pub cq_num: c_int,
    pub av_eq_num: c_int,
    pub base_udp_port: c_int,
    pub retrans_timeout: c_int,
    pub max_resends_per_iteration: c_int,
    pub priority_limit: c_int,
    pub eager_limit: c_int,
    pub rndv_eager_limit: c_int,
    pub max_send_size: c_int,
    pub pack_lazy_threshold: c_int,
    pub show_route_failures: bool,
    pub connectivity_check: bool,
    pub connectivity_ack_timeout: c_int,
    pub connectivity_error_num_retries: c_int,
    pub connectivity_map: *mut c_char,
    pub provider: *mut c_char,
    pub ack_delay: c_int,
    pub peer_timeout: c_int,
    pub same_node: bool,
    pub mtu: c_int,
    pub window: c_int,
    pub verbose: c_int,
    pub ack_thread: bool,
    pub rto_min: c_int,
    pub lent_hold: c_int,
    pub lent_copy_limit: c_int,
    pub rdma: *mut c_char,
    pub gso: bool,
    pub gro: bool,
    /// Fault injector (hidden, level 9): seed, percentages 0..100, delay.
    pub fault_seed: c_int,
    pub fault_send_drop: f64,
    pub fault_send_dup: f64,
    pub fault_send_delay: f64,
    pub fault_recv_drop: f64,
    pub fault_recv_dup: f64,
    pub fault_delay_us: c_int,
    /// Testing (level 9): the progress call of this number panics; 0 = never.
    pub fault_panic_after: c_int,
}

/// Validated parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// At most this many modules: `btl_usnic_max_btls`, its 0 ("all") being `modex::MAX_ENTRIES`.
    pub max_btls: usize,
    pub if_include: Option<String>,
    pub if_exclude: Option<String>,
    pub stats_interval_s: u32,
    pub stats_relative: bool,
    pub sd_num: Option<usize>,
    pub rd_num: Option<usize>,
    pub prio_sd_num: Option<usize>,
    pub prio_rd_num: Option<usize>,
    pub cq_num: Option<usize>,
    pub base_udp_port: u16,
    pub retrans_timeout_us: u64,
    pub max_resends_per_iteration: usize,
    pub priority_limit: usize,
    /// 0 = automatic (513 KiB with one module, 25 KiB with several).
    pub eager_limit: usize,
    pub rndv_eager_limit: usize,
    /// Largest fragment the PML may hand over (rendezvous pipeline); 0 = automatic.
    pub max_send_size: usize,
    pub pack_lazy_threshold: Option<usize>,
    pub show_route_failures: bool,
    pub connectivity_map: Option<String>,
    pub connectivity_check: bool,
    pub connectivity_ack_timeout_ms: u32,
    pub connectivity_retries: u32,
    pub provider: String,
    pub ack_delay_us: u64,
    pub peer_timeout_ms: u64,
    pub same_node: bool,
    pub mtu: usize,
    pub window: u16,
    pub verbose: u32,
    pub ack_thread: bool,
    /// 0 = the core's default floor.
    pub rto_min_us: u64,
    /// How long a send read in place waits for its ACK before it is copied and reported
    /// complete; `None`: until acknowledged.
    pub lent_hold_us: Option<u64>,
    /// Sends read in place shorter than this are copied and completed right after they
    /// left; 0 = never.
    pub lent_copy_limit: usize,
    /// Emulated RDMA offered to the PML: (PUT, GET).
    pub rdma: (bool, bool),
    /// Sends on the sockets directly, data-channel datagrams in runs (`fabric/gso.rs`).
    pub gso: bool,
    /// Sockets read directly, data-channel datagrams in runs (`fabric/gro.rs`).
    pub gro: bool,
    /// Fault injection for every module (`seed` not yet mixed with rank and module index);
    /// `None` when every percentage is 0.
    pub faults: Option<FaultConfig>,
    /// Testing: the component's progress call of this number panics (an internal error, to
    /// show what a user then sees); 0 = never.
    pub fault_panic_after: u64,
}

/// Why a parameter value is refused. `Display` is the one-line message.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamError {
    /// `btl_usnic_<name>` = `value` cannot be used because of `problem`.
    Invalid {
        name: String,
        value: String,
        problem: String,
    },
    /// Both interface lists set.
    IncludeAndExclude { include: String, exclude: String },
}

impl ParamError {
    pub fn invalid(name: &str, value: impl ToString, problem: impl Into<String>) -> Self {
        ParamError::Invalid {
            name: name.into(),
            value: value.to_string(),
            problem: problem.into(),
        }
    }
}

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamError::Invalid {
                name,
                value,
                problem,
            } => write!(f, "btl_usnic_{name}={value} is invalid ({problem})"),
            ParamError::IncludeAndExclude { .. } => f.write_str(
                "btl_usnic_if_include and btl_usnic_if_exclude are mutually exclusive; set only one",
            ),
        }
    }
}

/// Default priority-channel MTU, the original's `max_tiny_msg_size`.
pub const DEFAULT_PRIORITY_LIMIT: usize = 768;
/// The original's default rendezvous first-fragment size.
pub const DEFAULT_RNDV_EAGER_LIMIT: usize = 500;
/// `btl_usnic_pack_lazy_threshold` when -1: copying 16 KiB costs about a microsecond, and
/// below it the wait for an acknowledgement (a blocking send, Sendrecv) cost more than that
/// (docs/levers.md, "Copy or read in place").
pub const DEFAULT_PACK_LAZY_THRESHOLD: usize = crate::proto::DEFAULT_PROMPT_ACK_FROM;

fn opt_string(name: &str, p: *const c_char) -> Result<Option<String>, ParamError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-NULL value is a NUL-terminated string owned by Open MPI's variable
    // system, alive for the whole component lifetime.
    let s = unsafe { CStr::from_ptr(p) };
    let s = s
        .to_str()
        .map_err(|_| ParamError::invalid(name, s.to_string_lossy(), "not valid UTF-8"))?
        .trim();
    Ok(if s.is_empty() {
        None
    } else {
        Some(s.to_owned())
    })
}

fn at_least(name: &str, v: c_int, min: c_int) -> Result<c_int, ParamError> {
    if v < min {
        Err(ParamError::invalid(name, v, format!("must be >= {min}")))
    } else {
        Ok(v)
    }
}

/// 0 (every usable interface, up to the limit) or 1 up to the most modules a process announces
/// to its peers: a longer list would be refused by every peer's decoder.
fn max_btls(v: c_int) -> Result<usize, ParamError> {
    let limit = super::modex::MAX_ENTRIES;
    let n = at_least("max_btls", v, 0)? as usize;
    if n > limit {
        return Err(ParamError::invalid(
            "max_btls",
            n,
            format!("at most {limit} (the modules a process can announce to its peers)"),
        ));
    }
    Ok(if n == 0 { limit } else { n })
}

/// A fragment size: 0 for automatic, else at least 1024 and at most what a receiver reassembles
/// (a larger fragment would be refused at every send).
fn fragment_size(name: &str, v: c_int) -> Result<usize, ParamError> {
    let n = zero_or_at_least(name, v, 1024, "automatic")?;
    let max = crate::proto::wire::MAX_REASSEMBLY as usize;
    if n > max {
        return Err(ParamError::invalid(
            name,
            n,
            format!("at most {max} (the largest fragment a receiver reassembles)"),
        ));
    }
    Ok(n)
}

/// `-1` means automatic; otherwise at least `min`.
/// 0 (meaning `zero_means`) or at least `min`.
fn zero_or_at_least(
    name: &str,
    v: c_int,
    min: usize,
    zero_means: &str,
) -> Result<usize, ParamError> {
    let n = at_least(name, v, 0)? as usize;
    if n != 0 && n < min {
        return Err(ParamError::invalid(
            name,
            n,
            format!("0 for {zero_means}, or >= {min}"),
        ));
    }
    Ok(n)
}

fn auto_or(name: &str, v: c_int, min: c_int) -> Result<Option<usize>, ParamError> {
    if v == -1 {
        Ok(None)
    } else if v < min {
        Err(ParamError::invalid(
            name,
            v,
            format!("must be -1 for automatic, or >= {min}"),
        ))
    } else {
        Ok(Some(v as usize))
    }
}

/// `btl_usnic_rdma`: empty/"none", or a comma list of "put" and "get".
fn parse_rdma(v: Option<&str>) -> Result<(bool, bool), ParamError> {
    let mut out = (false, false);
    for tok in v.unwrap_or("").split(',').map(str::trim) {
        match tok {
            "" | "none" => {}
            "put" => out.0 = true,
            "get" => out.1 = true,
            other => {
                return Err(ParamError::invalid(
                    "rdma",
                    v.unwrap_or(""),
                    format!(
                        "\"none\", or a comma list of \"put\" and \"get\"; \"{other}\" is neither"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// A `btl_usnic_fault_*` percentage as a fraction.
fn percent(name: &str, v: f64) -> Result<f64, ParamError> {
    if v.is_finite() && (0.0..=100.0).contains(&v) {
        Ok(v / 100.0)
    } else {
        Err(ParamError::invalid(name, v, "a percentage, 0..100"))
    }
}

fn fault_config(p: &usnic_rs_params_t) -> Result<Option<FaultConfig>, ParamError> {
    let cfg = FaultConfig {
        seed: p.fault_seed as u32 as u64,
        send_drop: percent("fault_send_drop", p.fault_send_drop)?,
        send_dup: percent("fault_send_dup", p.fault_send_dup)?,
        send_delay: percent("fault_send_delay", p.fault_send_delay)?,
        delay_us: at_least("fault_delay_us", p.fault_delay_us, 0)? as u64,
        recv_drop: percent("fault_recv_drop", p.fault_recv_drop)?,
        recv_dup: percent("fault_recv_dup", p.fault_recv_dup)?,
    };
    Ok((!cfg.is_off()).then_some(cfg))
}

impl Settings {
    /// The fault configuration of module `index` on rank `rank`: the seed mixed with both, so
    /// that no two modules of a job draw the same pattern.
    pub fn module_faults(&self, rank: u32, index: u32) -> Option<FaultConfig> {
        self.faults.map(|f| FaultConfig {
            seed: f.seed ^ ((rank as u64) << 32) ^ index as u64,
            ..f
        })
    }

    /// Checks every value; the error is one line naming the parameter.
    pub fn from_params(p: &usnic_rs_params_t) -> Result<Settings, ParamError> {
        let if_include = opt_string("if_include", p.if_include)?;
        let if_exclude = opt_string("if_exclude", p.if_exclude)?;
        if let (Some(include), Some(exclude)) = (&if_include, &if_exclude) {
            return Err(ParamError::IncludeAndExclude {
                include: include.clone(),
                exclude: exclude.clone(),
            });
        }
        let provider = opt_string("provider", p.provider)?
            .ok_or_else(|| ParamError::invalid("provider", "", "must name a libfabric provider"))?;
        let window = at_least("window", p.window, 1)?;
        if window > 4096 {
            return Err(ParamError::invalid("window", window, "must be 1..4096"));
        }
        let priority_limit = match at_least("priority_limit", p.priority_limit, 0)? {
            0 => DEFAULT_PRIORITY_LIMIT,
            v if v < 128 => {
                return Err(ParamError::invalid(
                    "priority_limit",
                    v,
                    format!("0 for the default {DEFAULT_PRIORITY_LIMIT}, or >= 128"),
                ))
            }
            v => v as usize,
        };
        let mtu = zero_or_at_least("mtu", p.mtu, 512, "the interface MTU")?;
        let rndv = at_least("rndv_eager_limit", p.rndv_eager_limit, 0)? as usize;
        let eager = fragment_size("eager_limit", p.eager_limit)?;
        let max_send = fragment_size("max_send_size", p.max_send_size)?;
        at_least("av_eq_num", p.av_eq_num, 1)?;
        let cc_ack = at_least("connectivity_ack_timeout", p.connectivity_ack_timeout, 0)?;
        let cc_retries = at_least(
            "connectivity_error_num_retries",
            p.connectivity_error_num_retries,
            1,
        )?;
        let base_udp_port = at_least("base_udp_port", p.base_udp_port, 0)?;
        if base_udp_port > 65535 {
            return Err(ParamError::invalid(
                "base_udp_port",
                base_udp_port,
                "must be 0..65535",
            ));
        }
        let settings = Settings {
            max_btls: max_btls(p.max_btls)?,
            if_include,
            if_exclude,
            stats_interval_s: at_least("stats", p.stats, 0)? as u32,
            stats_relative: p.stats_relative,
            sd_num: auto_or("sd_num", p.sd_num, 16)?,
            rd_num: auto_or("rd_num", p.rd_num, 16)?,
            prio_sd_num: auto_or("prio_sd_num", p.prio_sd_num, 8)?,
            prio_rd_num: auto_or("prio_rd_num", p.prio_rd_num, 8)?,
            cq_num: auto_or("cq_num", p.cq_num, 32)?,
            base_udp_port: base_udp_port as u16,
            retrans_timeout_us: at_least("retrans_timeout", p.retrans_timeout, 1)? as u64,
            max_resends_per_iteration: at_least(
                "max_resends_per_iteration",
                p.max_resends_per_iteration,
                1,
            )? as usize,
            priority_limit,
            eager_limit: eager,
            max_send_size: max_send,
            rndv_eager_limit: if rndv == 0 {
                DEFAULT_RNDV_EAGER_LIMIT
            } else {
                rndv
            },
            pack_lazy_threshold: auto_or("pack_lazy_threshold", p.pack_lazy_threshold, 0)?,
            show_route_failures: p.show_route_failures,
            connectivity_map: opt_string("connectivity_map", p.connectivity_map)?,
            connectivity_check: p.connectivity_check,
            connectivity_ack_timeout_ms: cc_ack as u32,
            connectivity_retries: cc_retries as u32,
            provider,
            ack_delay_us: at_least("ack_delay", p.ack_delay, 0)? as u64,
            // The core's longest retransmit timeout by default (`check_timeouts`).
            peer_timeout_ms: at_least("peer_timeout", p.peer_timeout, 200)? as u64,
            same_node: p.same_node,
            mtu,
            window: window as u16,
            verbose: at_least("verbose", p.verbose, 0)? as u32,
            ack_thread: p.ack_thread,
            rto_min_us: at_least("rto_min", p.rto_min, 0)? as u64,
            lent_hold_us: match p.lent_hold {
                -1 => None,
                v if v >= 0 => Some(v as u64),
                v => {
                    return Err(ParamError::invalid(
                        "lent_hold",
                        v,
                        "must be -1 (wait for the acknowledgement) or >= 0 microseconds",
                    ))
                }
            },
            lent_copy_limit: at_least("lent_copy_limit", p.lent_copy_limit, 0)? as usize,
            rdma: parse_rdma(opt_string("rdma", p.rdma)?.as_deref())?,
            gso: p.gso,
            gro: p.gro,
            faults: fault_config(p)?,
            fault_panic_after: at_least("fault_panic_after", p.fault_panic_after, 0)? as u64,
        };
        settings.check_timeouts()?;
        Ok(settings)
    }

    /// Limits between the timing parameters. The protocol core refuses such a configuration
    /// too, but in its own terms (nanoseconds, field names); here the message names the
    /// parameters the user set, in their units.
    fn check_timeouts(&self) -> Result<(), ParamError> {
        // The timing fields as the core will get them (the MTUs play no part here).
        let c = self.engine_config(0, 0);
        if c.ack_delay >= c.rto_min {
            return Err(ParamError::invalid(
                "ack_delay",
                self.ack_delay_us,
                format!(
                    "must be below the retransmit timeout's floor, here {} us \
                     (btl_usnic_rto_min; its default, 500, at most btl_usnic_retrans_timeout): \
                     every delayed ACK would look like a loss",
                    c.rto_min.0 / 1_000
                ),
            ));
        }
        if c.peer_timeout < c.rto_max {
            return Err(ParamError::invalid(
                "peer_timeout",
                self.peer_timeout_ms,
                format!(
                    "must be at least the longest retransmit timeout, here {} ms \
                     (200, or btl_usnic_retrans_timeout or btl_usnic_rto_min if longer)",
                    c.rto_max.0.div_ceil(1_000_000)
                ),
            ));
        }
        Ok(())
    }

    /// Contiguous data shorter than this is copied when the PML prepares it, so its send
    /// completes at once; longer data is read in place until acknowledged.
    pub fn copy_below(&self) -> usize {
        self.pack_lazy_threshold
            .unwrap_or(DEFAULT_PACK_LAZY_THRESHOLD)
    }

    /// The engine configuration of one module whose data channel carries `data_mtu` bytes.
    pub fn engine_config(&self, data_mtu: usize, priority_mtu: usize) -> Config {
        let d = Config::default();
        let retrans = Duration::from_micros(self.retrans_timeout_us);
        // A floor the user set holds from the first timeout on: it raises a lower initial
        // timeout (it was capped by it, so `btl_usnic_rto_min 50000` gave a 5 ms floor).
        // The core's default floor gives way to a lower initial timeout instead.
        let (floor, rto_initial) = if self.rto_min_us == 0 {
            (d.rto_min.min(retrans), retrans)
        } else {
            let f = Duration::from_micros(self.rto_min_us);
            (f, retrans.max(f))
        };
        Config {
            data_mtu,
            priority_mtu,
            window: self.window,
            ack_delay: Duration::from_micros(self.ack_delay_us),
            rto_initial,
            rto_min: floor,
            rto_max: d.rto_max.max(rto_initial),
            max_resends_per_pass: self.max_resends_per_iteration,
            peer_timeout: Duration::from_millis(self.peer_timeout_ms),
            data_credits: self.sd_num.map_or(d.data_credits, |v| v as u32),
            priority_credits: self.prio_sd_num.map_or(d.priority_credits, |v| v as u32),
            local_id: 0,
            local_key: 0,
            isn: 0,
            hash_key: 0,
            rx_window: 0,
            max_held: 0,
            prompt_ack_from: self.copy_below(),
            lent_hold: self.lent_hold_us.map(Duration::from_micros),
            lent_copy_below: self.lent_copy_limit,
            data_turn: d.data_turn,
        }
    }
}

/// Every parameter's default. The shim fills its parameter block with these before it
/// registers the parameters, and Open MPI takes each variable's value at registration as its
/// default, so this is the one place the defaults are written.
pub fn param_defaults() -> usnic_rs_params_t {
    usnic_rs_params_t {
        max_btls: 0,
        if_include: core::ptr::null_mut(),
        if_exclude: core::ptr::null_mut(),
        stats: 0,
        stats_relative: false,
        sd_num: -1,
        rd_num: -1,
        prio_sd_num: -1,
        prio_rd_num: -1,
        cq_num: -1,
        av_eq_num: 1024,
        base_udp_port: 0,
        retrans_timeout: 5000,
        max_resends_per_iteration: 16,
        priority_limit: 0,
        eager_limit: 0,
        rndv_eager_limit: 0,
        max_send_size: 0,
        pack_lazy_threshold: DEFAULT_PACK_LAZY_THRESHOLD as c_int,
        show_route_failures: true,
        connectivity_check: true,
        connectivity_ack_timeout: 250,
        connectivity_error_num_retries: 40,
        connectivity_map: core::ptr::null_mut(),
        provider: c"udp".as_ptr() as *mut c_char,
        ack_delay: 30,
        peer_timeout: 20000,
        same_node: true,
        mtu: 0,
        window: 4096,
        verbose: 0,
        ack_thread: true,
        rto_min: 0,
        lent_hold: (crate::proto::DEFAULT_LENT_HOLD.0 / 1_000) as c_int,
        lent_copy_limit: crate::proto::DEFAULT_LENT_COPY_BELOW as c_int,
        rdma: c"none".as_ptr() as *mut c_char,
        gso: true,
        gro: true,
        fault_seed: 0,
        fault_send_drop: 0.0,
        fault_send_dup: 0.0,
        fault_send_delay: 0.0,
        fault_recv_drop: 0.0,
        fault_recv_dup: 0.0,
        fault_delay_us: 1000,
        fault_panic_after: 0,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn defaults_validate() {
        let s = Settings::from_params(&param_defaults()).unwrap();
        assert_eq!(s.provider, "udp");
        assert_eq!(s.priority_limit, DEFAULT_PRIORITY_LIMIT);
        assert_eq!(s.rndv_eager_limit, DEFAULT_RNDV_EAGER_LIMIT);
        assert_eq!(s.sd_num, None);
        assert_eq!(s.peer_timeout_ms, 20000);
        // Every interface, but never more modules than a peer's decoder takes.
        assert_eq!(s.max_btls, super::super::modex::MAX_ENTRIES);
        let c = s.engine_config(9000, 768);
        assert_eq!(c.data_mtu, 9000);
        assert_eq!(c.rto_initial, Duration::from_micros(5000));
        assert_eq!(c.ack_delay, Duration::from_micros(30));
        assert_eq!(c.lent_hold, Some(Duration::from_micros(1000)));
        assert_eq!(c.lent_hold, Config::default().lent_hold);
        assert_eq!(c.lent_copy_below, 65536);
        assert_eq!(c.lent_copy_below, Config::default().lent_copy_below);
    }

    #[test]
    fn timing_parameters_that_contradict_each_other_are_named() {
        let mut p = param_defaults();
        p.ack_delay = 1000;
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(
            e.starts_with("btl_usnic_ack_delay=1000 is invalid") && e.contains("here 500 us"),
            "{e}"
        );
        p.rto_min = 2000;
        assert!(
            Settings::from_params(&p).is_ok(),
            "a higher floor admits it"
        );
        p.retrans_timeout = 800;
        assert!(
            Settings::from_params(&p).is_ok(),
            "the floor set raises the initial timeout"
        );
        (p.rto_min, p.retrans_timeout) = (0, 300);
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(
            e.contains("here 300 us"),
            "the default floor is capped by the initial timeout: {e}"
        );
        let mut p = param_defaults();
        p.peer_timeout = 200;
        assert!(Settings::from_params(&p).is_ok());
        p.retrans_timeout = 300_000;
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(
            e.starts_with("btl_usnic_peer_timeout=200 is invalid") && e.contains("here 300 ms"),
            "{e}"
        );
        // The minimum named is one that is accepted.
        p.retrans_timeout = 300_500;
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("here 301 ms"), "{e}");
        p.peer_timeout = 300;
        assert!(Settings::from_params(&p).is_err());
        p.peer_timeout = 301;
        assert!(Settings::from_params(&p).is_ok());
        let mut p = param_defaults();
        (p.rto_min, p.peer_timeout) = (400_000, 300);
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(
            e.contains("here 400 ms"),
            "a floor set lengthens the longest timeout: {e}"
        );
    }

    #[test]
    fn a_floor_set_above_the_initial_timeout_holds() {
        let mut p = param_defaults();
        p.rto_min = 50_000;
        let c = Settings::from_params(&p).unwrap().engine_config(1472, 768);
        assert_eq!(c.rto_min, Duration::from_millis(50));
        assert_eq!(c.rto_initial, Duration::from_millis(50), "raised from 5 ms");
        assert_eq!(c.rto_max, Duration::from_millis(200));
        p.rto_min = 0;
        let c = Settings::from_params(&p).unwrap().engine_config(1472, 768);
        assert_eq!(
            (c.rto_min, c.rto_initial),
            (Duration::from_micros(500), Duration::from_millis(5))
        );
    }

    #[test]
    fn lent_copy_limit_zero_never_copies_early() {
        let mut p = param_defaults();
        p.lent_copy_limit = 0;
        let s = Settings::from_params(&p).unwrap();
        assert_eq!(s.engine_config(1472, 768).lent_copy_below, 0);
        p.lent_copy_limit = 131072;
        let s = Settings::from_params(&p).unwrap();
        assert_eq!(s.engine_config(1472, 768).lent_copy_below, 131072);
    }

    #[test]
    fn lent_hold_minus_one_waits_for_the_ack() {
        let mut p = param_defaults();
        p.lent_hold = -1;
        let s = Settings::from_params(&p).unwrap();
        assert_eq!(s.engine_config(1472, 768).lent_hold, None);
        p.lent_hold = 0;
        let s = Settings::from_params(&p).unwrap();
        assert_eq!(s.engine_config(1472, 768).lent_hold, Some(Duration(0)));
    }

    #[test]
    fn include_and_exclude_conflict() {
        let inc = CString::new("eth0").unwrap();
        let exc = CString::new("lo").unwrap();
        let mut p = param_defaults();
        p.if_include = inc.as_ptr() as *mut c_char;
        p.if_exclude = exc.as_ptr() as *mut c_char;
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("mutually exclusive"), "{e}");
        // Either one alone is fine.
        p.if_exclude = core::ptr::null_mut();
        assert_eq!(
            Settings::from_params(&p).unwrap().if_include.as_deref(),
            Some("eth0")
        );
    }

    #[test]
    fn bad_values_name_the_parameter() {
        type Case = (&'static str, fn(&mut usnic_rs_params_t));
        let cases: [Case; 13] = [
            ("btl_usnic_sd_num", |p| p.sd_num = -5),
            ("btl_usnic_lent_hold", |p| p.lent_hold = -2),
            ("btl_usnic_lent_copy_limit", |p| p.lent_copy_limit = -1),
            ("btl_usnic_window", |p| p.window = 5000),
            ("btl_usnic_retrans_timeout", |p| p.retrans_timeout = 0),
            ("btl_usnic_mtu", |p| p.mtu = 100),
            ("btl_usnic_priority_limit", |p| p.priority_limit = 10),
            ("btl_usnic_peer_timeout", |p| p.peer_timeout = 1),
            ("btl_usnic_max_btls", |p| p.max_btls = -1),
            ("btl_usnic_max_btls", |p| p.max_btls = 65),
            ("btl_usnic_max_send_size", |p| p.max_send_size = 100),
            ("btl_usnic_max_send_size", |p| {
                p.max_send_size = (1 << 26) + 1
            }),
            ("btl_usnic_eager_limit", |p| p.eager_limit = 1 << 27),
        ];
        for (name, set) in cases {
            let mut p = param_defaults();
            set(&mut p);
            let e = Settings::from_params(&p).unwrap_err().to_string();
            assert!(e.starts_with(name), "{name}: {e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn rdma_lists() {
        assert_eq!(parse_rdma(None), Ok((false, false)));
        assert_eq!(parse_rdma(Some("none")), Ok((false, false)));
        assert_eq!(parse_rdma(Some("put")), Ok((true, false)));
        assert_eq!(parse_rdma(Some("get, put")), Ok((true, true)));
        let e = parse_rdma(Some("put,rget")).unwrap_err().to_string();
        assert!(
            e.starts_with("btl_usnic_rdma=put,rget") && e.contains("rget"),
            "{e}"
        );
    }

    #[test]
    fn fault_percentages() {
        let mut p = param_defaults();
        assert_eq!(Settings::from_params(&p).unwrap().faults, None);
        p.fault_seed = 7;
        p.fault_send_drop = 10.0;
        p.fault_recv_dup = 100.0;
        let s = Settings::from_params(&p).unwrap();
        let f = s.faults.unwrap();
        assert_eq!((f.send_drop, f.recv_dup, f.delay_us), (0.1, 1.0, 1000));
        let m = s.module_faults(3, 1).unwrap();
        assert_eq!(m.seed, 7 ^ (3 << 32) ^ 1);
        assert_ne!(m.seed, s.module_faults(3, 0).unwrap().seed);
        type Case = (&'static str, fn(&mut usnic_rs_params_t));
        let cases: [Case; 4] = [
            ("btl_usnic_fault_send_drop=-1 ", |p| {
                p.fault_send_drop = -1.0
            }),
            ("btl_usnic_fault_send_dup=100.5 ", |p| {
                p.fault_send_dup = 100.5
            }),
            ("btl_usnic_fault_recv_drop=NaN ", |p| {
                p.fault_recv_drop = f64::NAN
            }),
            ("btl_usnic_fault_delay_us=-2 ", |p| p.fault_delay_us = -2),
        ];
        for (want, set) in cases {
            let mut p = param_defaults();
            set(&mut p);
            let e = Settings::from_params(&p).unwrap_err().to_string();
            assert!(e.starts_with(want), "{want}: {e}");
        }
    }

    #[test]
    fn empty_provider_is_refused() {
        let prov = CString::new("  ").unwrap();
        let mut p = param_defaults();
        p.provider = prov.as_ptr() as *mut c_char;
        let e = Settings::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("btl_usnic_provider"), "{e}");
    }
}
