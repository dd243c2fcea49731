//! Opening a `Module`: the queue sizes from the configuration and the provider's limits, then
//! fabric, domain, AV and the two channels, each with the sockets' use chosen for it.
use super::Module;
use crate::fabric::channel::{ChannelRes, Sizes, SocketUse};
use crate::fabric::config::FabricConfig;
use crate::fabric::device::DeviceInfo;
use crate::fabric::error::{check, FabricError};
use crate::fabric::fid::Fid;
use crate::fabric::sys;
use std::net::Ipv4Addr;

/// Provider requirements to emulate (see `Module::open_emulating`; tests only).
#[doc(hidden)]
#[derive(Copy, Clone, Debug, Default)]
pub struct Emulate {
    /// Register the buffers and pass their descriptors, as for `FI_MR_LOCAL`.
    pub local_mr: bool,
    /// Reserve this many prefix bytes before every payload, as for `FI_MSG_PREFIX`.
    pub msg_prefix: usize,
}

/// Bytes of data-channel receive buffers posted by default (`rd_num` -1), before the
/// provider's queue size caps the count. Posted buffers are refilled in FIFO order, so every
/// one of them is touched once per round: with the udp provider's 1024 on `lo` (65507-byte
/// datagrams, 64 MiB) each datagram landed in memory long gone from the caches. One host,
/// `--bind-to core`, 5 paired runs against 1024 buffers: 64 of them raised `bench_bibw` 9-14 %
/// at 64 KiB-4 MiB and `bench_bw` 1-5 %, cut ping-pong latency 4-10 % at 64 KiB-4 MiB, and left
/// message rate alone (0.99-1.02x); 32 or 48 did about as well as 64, 128 or 256 less well.
/// A 1500-byte MTU still gets the provider's 1024 (1.4 MB).
pub const DATA_RX_BYTES: usize = 4 << 20;

/// Default number of posted data-channel receive buffers for datagrams of `mtu` bytes when the
/// provider's receive queue holds `rx_max`: `DATA_RX_BYTES` worth, at least 64 (the receive
/// window on `lo` is about 31 datagrams, and half the buffers may wait in reassembly).
pub fn default_rd_num(mtu: usize, rx_max: usize) -> usize {
    let n = (DATA_RX_BYTES / mtu.max(1)).max(64);
    if rx_max > 0 {
        n.min(rx_max)
    } else {
        n
    }
}

/// `-1` = `default`; a positive value is used, capped by the provider's `cap`; anything else is
/// a configuration error naming the parameter.
fn queue_len(what: &str, v: i32, default: usize, cap: usize) -> Result<usize, FabricError> {
    let n = match v {
        -1 => default,
        v if v >= 1 => v as usize,
        v => {
            return Err(FabricError::invalid(
                "Module::open",
                format!("{what} = {v}: must be -1 or at least 1"),
            ))
        }
    };
    if cap > 0 && n > cap {
        tracing::warn!("{what} = {n} exceeds the provider's limit {cap}; using {cap}");
        return Ok(cap);
    }
    Ok(n)
}

fn cq_len(cq_num: i32, sd: usize, rd: usize) -> Result<usize, FabricError> {
    // sd and rd are capped by the provider's queue sizes, which are its own numbers.
    let both = sd.saturating_add(rd);
    match cq_num {
        -1 => Ok(both),
        v if v >= 1 => {
            if (v as usize) < both {
                tracing::warn!("cq_num = {v} is below sd + rd = {both}; using {both}");
            }
            Ok((v as usize).max(both))
        }
        v => Err(FabricError::invalid(
            "Module::open",
            format!("cq_num = {v}: must be -1 or at least 1"),
        )),
    }
}

impl Module {
    /// Open fabric, domain, AV and both channels on `dev`; post every receive buffer.
    ///
    /// Queue sizes follow the original: data channel `sd_num` defaults to the provider's
    /// `tx_attr.size`, `rd_num` to `default_rd_num` (the provider's `rx_attr.size` unless its
    /// datagrams are large), priority channel 127 each, all capped by the provider;
    /// each CQ holds at least sd + rd entries. The data MTU is `dev.mtu`, as `discover` capped it
    /// with the same `cfg`, the priority MTU `cfg.priority_mtu` capped by the data MTU. Buffers are
    /// registered only when the provider asks for local registration (`FI_MR_LOCAL`); a
    /// provider with `FI_MSG_PREFIX` gets its prefix reserved before every payload.
    pub fn open(dev: &DeviceInfo, cfg: &FabricConfig) -> Result<Module, FabricError> {
        Self::open_with(dev, cfg, Emulate::default())
    }

    /// Test hook: open as if the provider demanded local registration and/or a message prefix,
    /// so those code paths run on the `udp` provider (which asks for neither). Both sides of
    /// an exchange must use the same prefix, since `udp` really sends the prefix bytes.
    #[doc(hidden)]
    pub fn open_emulating(
        dev: &DeviceInfo,
        cfg: &FabricConfig,
        emulate: Emulate,
    ) -> Result<Module, FabricError> {
        Self::open_with(dev, cfg, emulate)
    }

    fn open_with(
        dev: &DeviceInfo,
        cfg: &FabricConfig,
        emulate: Emulate,
    ) -> Result<Module, FabricError> {
        let data_mtu = dev.mtu;
        if data_mtu == 0 || cfg.priority_mtu == 0 {
            return Err(FabricError::invalid(
                "Module::open",
                "channel MTUs must be at least 1 byte",
            ));
        }
        let prio_mtu = cfg.priority_mtu.min(data_mtu);
        // The provider adds FI_SOURCE (a secondary capability) unasked; with it, the udp provider
        // looks every received datagram's source up in the AV. Senders are identified by a
        // header field instead, so the edge drops the capability before opening anything.
        let mut owned = dev.info.clone();
        {
            let i = owned.get_mut();
            i.caps &= !sys::FI_SOURCE;
            // SAFETY: entries from fi_getinfo/fi_dupinfo have rx_attr allocated.
            unsafe { (*i.rx_attr).caps &= !sys::FI_SOURCE };
        }
        let info = owned.get();
        // SAFETY: entries from fi_getinfo/fi_dupinfo have all attribute structs allocated.
        let (tx_attr, rx_attr, ep_attr, dom_attr) = unsafe {
            (
                &*info.tx_attr,
                &*info.rx_attr,
                &*info.ep_attr,
                &*info.domain_attr,
            )
        };
        let (tx_max, rx_max) = (tx_attr.size, rx_attr.size);
        let sd = queue_len("sd_num", cfg.sd_num, tx_max, tx_max)?;
        let rd = queue_len(
            "rd_num",
            cfg.rd_num,
            default_rd_num(data_mtu, rx_max),
            rx_max,
        )?;
        let prio_sd = queue_len("prio_sd_num", cfg.prio_sd_num, 127, tx_max)?;
        let prio_rd = queue_len("prio_rd_num", cfg.prio_rd_num, 127, rx_max)?;
        let data = Sizes {
            sd,
            rd,
            cq: cq_len(cfg.cq_num, sd, rd)?,
            mtu: data_mtu,
        };
        let prio = Sizes {
            sd: prio_sd,
            rd: prio_rd,
            cq: cq_len(cfg.cq_num, prio_sd, prio_rd)?,
            mtu: prio_mtu,
        };
        let need_mr = emulate.local_mr
            || info.mode & sys::FI_LOCAL_MR != 0
            || dom_attr.mr_mode & sys::FI_MR_LOCAL as i32 != 0;
        let prefix = if info.mode & sys::FI_MSG_PREFIX != 0 {
            ep_attr.msg_prefix_size
        } else {
            emulate.msg_prefix
        };

        let mut fabric: *mut sys::fid_fabric = std::ptr::null_mut();
        // SAFETY: fabric_attr comes from the provider's own fi_info entry.
        check(
            "fi_fabric",
            unsafe { sys::fi_fabric(info.fabric_attr, &mut fabric, std::ptr::null_mut()) }.into(),
        )?;
        let fabric = Fid::new(fabric, "fabric")
            .ok_or_else(|| FabricError::invalid("fi_fabric", "returned NULL"))?;
        let mut domain: *mut sys::fid_domain = std::ptr::null_mut();
        // SAFETY: fabric open; info is this provider's entry.
        check("fi_domain", unsafe {
            sys::domain(fabric.ptr(), owned.as_ptr(), &mut domain)
        })?;
        let domain = Fid::new(domain, "domain")
            .ok_or_else(|| FabricError::invalid("fi_domain", "returned NULL"))?;
        let mut av_attr = sys::fi_av_attr {
            type_: sys::FI_AV_TABLE,
            count: 256,
            ..Default::default()
        };
        let mut av: *mut sys::fid_av = std::ptr::null_mut();
        // SAFETY: domain open; attr and av valid for the call.
        check("fi_av_open", unsafe {
            sys::av_open(domain.ptr(), &mut av_attr, &mut av)
        })?;
        let av = Fid::new(av, "av")
            .ok_or_else(|| FabricError::invalid("fi_av_open", "returned NULL"))?;

        let udp = dev.provider == "udp";
        // Tiny datagrams gain nothing from batching; runs of full ones do. Both channels read
        // and send on their sockets themselves.
        let (tiny, bulk) = (
            SocketUse {
                sends_at_once: udp,
                tune: udp,
                send: udp && cfg.gso,
                batch: false,
                read: udp && cfg.gro,
                runs: false,
            },
            SocketUse {
                sends_at_once: udp,
                tune: udp,
                send: udp && cfg.gso,
                batch: udp && cfg.gso,
                read: udp && cfg.gro,
                runs: true,
            },
        );
        let priority = ChannelRes::open(&domain, &av, &owned, prio, need_mr, prefix, tiny)?;
        let data = ChannelRes::open(&domain, &av, &owned, data, need_mr, prefix, bulk)?;
        let ipv4 = Ipv4Addr::from(u32::from_be(data.name.sin_addr.s_addr));
        tracing::debug!(
            "usnic module {} {ipv4}: priority port {} (mtu {prio_mtu}, sd {prio_sd}, rd {prio_rd}), data port {} (mtu {data_mtu}, sd {sd}, rd {rd}), mr {need_mr}, prefix {prefix}",
            dev.name,
            priority.port(),
            data.port()
        );
        Ok(Module {
            channels: [priority, data],
            av,
            _domain: domain,
            _fabric: fabric,
            name: dev.name.clone(),
            ipv4,
            faults: None,
        })
    }
}
