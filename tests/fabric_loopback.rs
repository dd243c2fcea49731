//! Two modules on `lo` exchanging datagrams through the udp provider.
use usnic_rs::fabric::{
    default_rd_num, discover, parse_if_list, BufId, Completion, DeviceInfo, FabricConfig, Module,
    Op, PeerAddr, Posted, DATA_RX_BYTES, LOCAL_ADDRESS_LEN,
};
use usnic_rs::proto::Channel;

const CHANNELS: [Channel; 2] = [Channel::Priority, Channel::Data];

fn lo_cfg() -> FabricConfig {
    FabricConfig {
        if_include: parse_if_list("lo").unwrap(),
        ..Default::default()
    }
}

fn lo(cfg: &FabricConfig) -> DeviceInfo {
    discover(cfg)
        .unwrap()
        .into_iter()
        .next()
        .expect("lo via the udp provider")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn send(m: &mut Module, ch: Channel, to: &PeerAddr, data: &[u8]) {
    let _ = post(m, ch, to, data);
    m.flush_sends(ch).expect("flush_sends");
}

/// `send` without the flush that ends a transmit pass: a batched datagram may wait.
fn post(m: &mut Module, ch: Channel, to: &PeerAddr, data: &[u8]) -> Posted {
    let (id, buf) = m.tx_buffer(ch).expect("free send buffer");
    buf[..data.len()].copy_from_slice(data);
    m.post_send(ch, id, data.len(), to).expect("post_send")
}

/// Posts each datagram of `run` to `to` on the data channel and sends what was batched.
fn post_run(m: &mut Module, to: &PeerAddr, run: &[Vec<u8>]) {
    for d in run {
        let _ = post(m, Channel::Data, to, d);
    }
    m.flush_sends(Channel::Data).unwrap();
}

/// Polls until `want.len()` datagrams arrived on `ch` (bounded), and checks them in order.
fn expect_datagrams(m: &mut Module, ch: Channel, want: &[Vec<u8>]) {
    let mut got = Vec::new();
    let mut out = Vec::new();
    for _ in 0..200_000 {
        if got.len() >= want.len() {
            break;
        }
        out.clear();
        m.poll(ch, 64, &mut out).unwrap();
        for c in &out {
            match *c {
                Completion::Recv { buf, len } => {
                    got.push(m.rx_bytes(ch, buf, len).to_vec());
                    m.repost(ch, buf);
                }
                Completion::SendDone { .. } => {}
                ref e => panic!("{e:?}"),
            }
        }
        m.flush_reposts().unwrap();
    }
    assert_eq!(got.len(), want.len(), "datagrams on {ch:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w,
            "datagram {i} on {ch:?}: {} bytes, want {}",
            g.len(),
            w.len()
        );
    }
}

/// Polls `m` until one receive (or error) completion of `ch` arrives; send completions are
/// dropped. Bounded: a lost datagram fails the test instead of hanging it.
fn recv_one(m: &mut Module, ch: Channel) -> Completion {
    let mut out = Vec::new();
    for _ in 0..200_000 {
        m.poll(ch, 8, &mut out).unwrap();
        if let Some(p) = out
            .iter()
            .position(|c| !matches!(c, Completion::SendDone { .. }))
        {
            return out.remove(p);
        }
        out.clear();
    }
    panic!("no datagram arrived on {ch:?}");
}

fn expect_datagram(m: &mut Module, ch: Channel, want: &[u8]) {
    match recv_one(m, ch) {
        Completion::Recv { buf, len } => {
            assert_eq!(len, want.len(), "length on {ch:?}");
            assert!(m.rx_bytes(ch, buf, len) == want, "content on {ch:?}");
            // SAFETY: rx_ptr points to the same received bytes until the buffer is reposted.
            let raw = unsafe { std::slice::from_raw_parts(m.rx_ptr(ch, buf), len) };
            assert!(raw == want);
            m.repost(ch, buf);
            m.flush_reposts().unwrap();
        }
        other => panic!("expected a datagram on {ch:?}, got {other:?}"),
    }
}

fn drain_sends(m: &mut Module) {
    let mut out = Vec::new();
    for ch in CHANNELS {
        m.poll(ch, 1024, &mut out).unwrap();
    }
    assert!(
        out.iter().all(|c| matches!(c, Completion::SendDone { .. })),
        "{out:?}"
    );
}

#[test]
fn both_ways_both_channels_all_sizes() {
    let cfg = lo_cfg();
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    assert_eq!(a.local_address().len(), LOCAL_ADDRESS_LEN);
    assert_ne!(a.local_address(), b.local_address());
    assert_eq!(a.channel_mtu(Channel::Priority), 768);
    assert_eq!(a.channel_mtu(Channel::Data), dev.mtu);
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let to_a = b.insert_peer(&a.local_address()).unwrap();
    assert_ne!(to_b.fi_addr(Channel::Priority), to_b.fi_addr(Channel::Data));
    for ch in CHANNELS {
        let mtu = a.channel_mtu(ch);
        for (k, len) in [0usize, 1, 8, 100, mtu - 1, mtu].into_iter().enumerate() {
            let d = pattern(len, k as u8);
            send(&mut a, ch, &to_b, &d);
            expect_datagram(&mut b, ch, &d);
            let d = pattern(len, 100 + k as u8);
            send(&mut b, ch, &to_a, &d);
            expect_datagram(&mut a, ch, &d);
        }
    }
    drain_sends(&mut a);
    drain_sends(&mut b);
    for ch in CHANNELS {
        assert_eq!(
            a.tx_available(ch),
            a.tx_capacity(ch),
            "every send buffer back on {ch:?}"
        );
    }
    a.remove_peer(&to_b);
    b.remove_peer(&to_a);
}

#[test]
fn measured_datagram_limit_on_lo() {
    // lo's MTU is 65536: the data channel uses the largest UDP payload, 65507 bytes, although
    // the provider advertises max_msg_size 1472.
    let cfg = lo_cfg();
    let dev = lo(&cfg);
    assert_eq!(dev.mtu, 65_507);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    for len in [1472, 1473, 9000, 65_507] {
        let d = pattern(len, 7);
        send(&mut a, Channel::Data, &to_b, &d);
        expect_datagram(&mut b, Channel::Data, &d);
    }
}

/// `lo` with sends left to the provider (`btl_usnic_gso 0`).
fn lo_provider_sends() -> FabricConfig {
    FabricConfig {
        gso: false,
        ..lo_cfg()
    }
}

#[test]
fn sent_on_the_socket_every_buffer_is_free_at_once_and_no_completion_follows() {
    // The provider reads (gro off), so every poll reads its CQ: a completion would show.
    let cfg = FabricConfig {
        gro: false,
        ..lo_cfg()
    };
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let mtu = a.channel_mtu(Channel::Data);
    let mut out = Vec::new();
    // Longer than the provider's inject size too, and gathered: 65507 bytes on `lo`.
    for (ch, head, body) in [
        (Channel::Priority, 768, 0),
        (Channel::Data, 0, 0),
        (Channel::Data, mtu, 0),
        (Channel::Data, 40, mtu - 40),
    ] {
        let free = a.tx_available(ch);
        let d = pattern(head + body, 5);
        let (id, buf) = a.tx_buffer(ch).unwrap();
        buf[..head].copy_from_slice(&d[..head]);
        let posted = if body == 0 {
            a.post_send(ch, id, head, &to_b)
        } else {
            a.post_send_gather(ch, id, head, [&d[head..], &[]], &to_b)
        };
        assert_eq!(posted.unwrap(), Posted::Done, "{ch:?} {head}+{body}");
        assert_eq!(
            a.tx_available(ch),
            free,
            "{ch:?} {head}+{body}: free at once"
        );
        expect_datagram(&mut b, ch, &d);
        a.poll(ch, 8, &mut out).unwrap();
        assert!(out.is_empty(), "{ch:?}: no completion follows: {out:?}");
    }
}

#[test]
fn through_the_provider_datagrams_within_the_inject_size_are_injected_and_longer_ones_complete() {
    let cfg = lo_provider_sends();
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    // The udp provider injects every priority datagram (ACKs, tiny messages; its inject size
    // is at least the 768-byte priority MTU) and the shortest data datagrams.
    let limit = a.inject_limit(Channel::Data);
    assert!(
        (768..a.channel_mtu(Channel::Data)).contains(&limit),
        "{limit}"
    );
    assert_eq!(a.inject_limit(Channel::Priority), 768);
    let mut out = Vec::new();
    for (ch, len) in [
        (Channel::Priority, 768),
        (Channel::Data, 0),
        (Channel::Data, limit),
    ] {
        let free = a.tx_available(ch);
        let d = pattern(len, 7);
        let (id, buf) = a.tx_buffer(ch).unwrap();
        buf[..len].copy_from_slice(&d);
        assert_eq!(a.post_send(ch, id, len, &to_b).unwrap(), Posted::Done);
        assert_eq!(
            a.tx_available(ch),
            free,
            "{ch:?} {len}: buffer free at once"
        );
        expect_datagram(&mut b, ch, &d);
        a.poll(ch, 8, &mut out).unwrap();
        assert!(
            out.is_empty(),
            "{ch:?} {len}: no completion follows: {out:?}"
        );
    }
    let free = a.tx_available(Channel::Data);
    let d = pattern(limit + 1, 9);
    let (id, buf) = a.tx_buffer(Channel::Data).unwrap();
    buf[..d.len()].copy_from_slice(&d);
    assert_eq!(
        a.post_send(Channel::Data, id, d.len(), &to_b).unwrap(),
        Posted::Pending
    );
    assert_eq!(a.tx_available(Channel::Data), free - 1);
    expect_datagram(&mut b, Channel::Data, &d);
    a.poll(Channel::Data, 8, &mut out).unwrap();
    assert_eq!(out, vec![Completion::SendDone { buf: id }]);
    assert_eq!(a.tx_available(Channel::Data), free);
}

#[test]
fn too_large_send_is_refused_and_buffer_kept() {
    let cfg = lo_cfg();
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let mtu = a.channel_mtu(Channel::Priority);
    let free = a.tx_available(Channel::Priority);
    let (id, buf) = a.tx_buffer(Channel::Priority).unwrap();
    buf[..4].copy_from_slice(b"ping");
    let e = a
        .post_send(Channel::Priority, id, mtu + 1, &to_b)
        .unwrap_err();
    assert_eq!(e.code, 90, "FI_EMSGSIZE: {e}");
    assert!(!e.is_would_block());
    assert!(e.to_string().contains("exceeds the channel MTU"), "{e}");
    // The buffer is still ours: send it properly.
    assert_eq!(
        a.post_send(Channel::Priority, id, 4, &to_b).unwrap(),
        Posted::Done
    );
    expect_datagram(&mut b, Channel::Priority, b"ping");
    drain_sends(&mut a);
    assert_eq!(a.tx_available(Channel::Priority), free);
}

#[test]
fn oversized_datagram_is_an_error_completion_not_a_crash() {
    // b's data channel is capped at `cap` bytes; a (65507) sends it cap + 1 and 60000 bytes.
    // Read by the provider, in runs by the channel itself (`gro`), or by the channel itself
    // one datagram at a time (datagrams too large to run together), the same error.
    for (gro, cap) in [(false, 1000), (true, 1000), (true, 40_000)] {
        let big = lo_cfg();
        let small = FabricConfig {
            mtu_cap: cap,
            gro,
            ..lo_cfg()
        };
        let mut a = Module::open(&lo(&big), &big).unwrap();
        let mut b = Module::open(&lo(&small), &small).unwrap();
        assert_eq!(b.channel_mtu(Channel::Data), cap);
        assert_eq!(b.reads_socket(Channel::Data), gro);
        let to_b = a.insert_peer(&b.local_address()).unwrap();
        for len in [cap + 1, 60_000] {
            send(&mut a, Channel::Data, &to_b, &pattern(len, 1));
            match recv_one(&mut b, Channel::Data) {
                Completion::Error {
                    op: Op::Recv,
                    error,
                    ..
                } => {
                    assert_eq!(error.code, 265, "FI_ETRUNC: {error}");
                    assert!(error.to_string().contains(&cap.to_string()), "{error}");
                }
                other => panic!("expected an oversize error, got {other:?}"),
            }
            // The buffer went back to the repost queue by itself; traffic continues.
            b.flush_reposts().unwrap();
            let ok = pattern(cap, 2);
            send(&mut a, Channel::Data, &to_b, &ok);
            expect_datagram(&mut b, Channel::Data, &ok);
        }
    }
}

#[test]
fn credits_run_out_and_come_back() {
    // Sends through the provider: these keep their credits until their completions.
    let cfg = FabricConfig {
        sd_num: 4,
        ..lo_provider_sends()
    };
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    assert_eq!(a.tx_capacity(Channel::Data), 4);
    // Longer than the inject size: these wait for their completions.
    let d = pattern(a.inject_limit(Channel::Data) + 1, 3);
    for _ in 0..4 {
        send(&mut a, Channel::Data, &to_b, &d);
    }
    assert!(a.tx_buffer(Channel::Data).is_none());
    let mut out = Vec::new();
    a.poll(Channel::Data, 2, &mut out).unwrap();
    assert_eq!(out.len(), 2, "poll respects max: {out:?}");
    assert_eq!(a.tx_available(Channel::Data), 2);
    a.poll(Channel::Data, 100, &mut out).unwrap();
    assert_eq!(out.len(), 4);
    assert_eq!(a.tx_available(Channel::Data), 4);
    // release_tx returns an unsent buffer.
    let (id, _) = a.tx_buffer(Channel::Data).unwrap();
    assert_eq!(a.tx_available(Channel::Data), 3);
    a.release_tx(Channel::Data, id);
    assert_eq!(a.tx_available(Channel::Data), 4);
    // Releasing it again is ignored, not a double free.
    a.release_tx(Channel::Data, id);
    assert_eq!(a.tx_available(Channel::Data), 4);
}

#[test]
fn bad_peer_addresses_are_clear_errors() {
    let cfg = lo_cfg();
    let mut a = Module::open(&lo(&cfg), &cfg).unwrap();
    for (addr, needle) in [
        (vec![127, 0, 0, 1, 0, 1], "6 bytes"),
        (vec![], "0 bytes"),
        (vec![0, 0, 0, 0, 0, 1, 0, 2], "0.0.0.0"),
        (vec![255, 255, 255, 255, 0, 1, 0, 2], "255.255.255.255"),
        (vec![224, 0, 0, 1, 0, 1, 0, 2], "224.0.0.1"),
        (vec![127, 0, 0, 1, 0, 0, 0, 2], "port 0"),
        (vec![127, 0, 0, 1, 0, 1, 0, 0], "port 0"),
    ] {
        let e = a.insert_peer(&addr).unwrap_err();
        assert!(e.to_string().contains(needle), "{addr:?}: {e}");
    }
}

#[test]
fn bad_queue_sizes_are_refused() {
    let dev = lo(&lo_cfg());
    for cfg in [
        FabricConfig {
            sd_num: 0,
            ..lo_cfg()
        },
        FabricConfig {
            rd_num: -2,
            ..lo_cfg()
        },
        FabricConfig {
            cq_num: 0,
            ..lo_cfg()
        },
        FabricConfig {
            priority_mtu: 0,
            ..lo_cfg()
        },
    ] {
        assert!(Module::open(&dev, &cfg).is_err());
    }
    // Sizes beyond the provider's limits are capped, not refused.
    let big = FabricConfig {
        sd_num: 100_000,
        rd_num: 8,
        cq_num: 1,
        ..lo_cfg()
    };
    let m = Module::open(&dev, &big).unwrap();
    assert_eq!(m.tx_capacity(Channel::Data), 1024);
}

#[test]
fn large_datagrams_get_fewer_receive_buffers_by_default() {
    let dev = lo(&lo_cfg());
    let m = Module::open(&dev, &lo_cfg()).unwrap();
    let mtu = m.channel_mtu(Channel::Data);
    assert_eq!(mtu, 65507, "lo carries the largest UDP datagram");
    assert_eq!(m.rx_buffers(Channel::Data), 64);
    assert_eq!(m.rx_buffers(Channel::Data), default_rd_num(mtu, 1024));
    // The priority channel and the send side keep their defaults.
    assert_eq!(m.rx_buffers(Channel::Priority), 127);
    assert_eq!(m.tx_capacity(Channel::Data), 1024);
    // An explicit rd_num still wins.
    let cfg = FabricConfig {
        rd_num: 300,
        ..lo_cfg()
    };
    let m = Module::open(&dev, &cfg).unwrap();
    assert_eq!(m.rx_buffers(Channel::Data), 300);
    // A 1500-byte MTU keeps the provider's queue size; huge datagrams never go below 64.
    assert_eq!(default_rd_num(1472, 1024), 1024);
    assert_eq!(
        default_rd_num(8972, 1024),
        467,
        "{DATA_RX_BYTES} bytes of 8972"
    );
    assert_eq!(default_rd_num(1 << 20, 1024), 64);
    assert_eq!(default_rd_num(1 << 20, 16), 16);
}

#[test]
fn repost_of_a_posted_buffer_is_ignored() {
    let cfg = FabricConfig {
        rd_num: 2,
        ..lo_cfg()
    };
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    // Buffer 0 and 1 are posted: reposting them must not post them twice.
    b.repost(Channel::Data, usnic_rs::fabric::BufId(0));
    b.repost(Channel::Data, usnic_rs::fabric::BufId(1));
    b.repost(Channel::Data, usnic_rs::fabric::BufId(7));
    b.flush_reposts().unwrap();
    for k in 0..6u8 {
        let d = pattern(64, k);
        send(&mut a, Channel::Data, &to_b, &d);
        expect_datagram(&mut b, Channel::Data, &d);
    }
}

fn sysctl(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn udp_socket_buffers_are_sized_for_the_posted_receives() {
    let cfg = FabricConfig {
        rd_num: 200,
        prio_rd_num: 50,
        ..lo_cfg()
    };
    let m = Module::open(&lo(&cfg), &cfg).unwrap();
    let (rmem_max, rmem_default) = (sysctl("rmem_max"), sysctl("rmem_default"));
    for ch in CHANNELS {
        let (rcv, snd) = m
            .socket_buffers(ch)
            .expect("the endpoint's socket is found");
        // The kernel reports twice what was granted; it grants at most rmem_max.
        let rd = if ch == Channel::Data { 200 } else { 50 };
        let want = (rd * (m.channel_mtu(ch) + 1024)).min(rmem_max);
        assert!(rcv >= want, "{ch:?}: SO_RCVBUF {rcv} < {want}");
        assert!(rcv >= rmem_default, "never lowered");
        assert!(snd > 0);
    }
}

#[test]
fn every_discovered_device_carries_full_mtu_datagrams() {
    // Every interface of the udp provider (lo included), not just lo: two endpoints on one
    // host reach each other through any local address.
    let cfg = FabricConfig {
        include_loopback: true,
        ..Default::default()
    };
    let devs = discover(&cfg).unwrap();
    assert!(devs.iter().any(|d| d.name == "lo"));
    for dev in &devs {
        let mut a = Module::open(dev, &cfg).unwrap();
        let mut b = Module::open(dev, &cfg).unwrap();
        assert_eq!(a.ipv4(), dev.ipv4);
        assert_eq!(&a.local_address()[..4], &dev.ipv4.octets());
        let to_b = a.insert_peer(&b.local_address()).unwrap();
        for ch in CHANNELS {
            let d = pattern(a.channel_mtu(ch), 3);
            send(&mut a, ch, &to_b, &d);
            expect_datagram(&mut b, ch, &d);
        }
    }
}

#[test]
fn registration_and_prefix_paths_work_when_a_provider_asks() {
    // udp asks for neither; emulate a provider that wants FI_MR_LOCAL and a 16-byte prefix.
    // (udp really sends the emulated prefix, so keep prefix + MTU under the 65507-byte limit.)
    let cfg = FabricConfig {
        mtu_cap: 9000,
        ..lo_cfg()
    };
    let dev = lo(&cfg);
    for emulate in [
        usnic_rs::fabric::Emulate {
            local_mr: true,
            msg_prefix: 0,
        },
        usnic_rs::fabric::Emulate {
            local_mr: false,
            msg_prefix: 16,
        },
        usnic_rs::fabric::Emulate {
            local_mr: true,
            msg_prefix: 16,
        },
    ] {
        let mut a = Module::open_emulating(&dev, &cfg, emulate).unwrap();
        let mut b = Module::open_emulating(&dev, &cfg, emulate).unwrap();
        let to_b = a.insert_peer(&b.local_address()).unwrap();
        let to_a = b.insert_peer(&a.local_address()).unwrap();
        for ch in CHANNELS {
            for len in [0, 5, a.channel_mtu(ch)] {
                let d = pattern(len, 9);
                send(&mut a, ch, &to_b, &d);
                expect_datagram(&mut b, ch, &d);
                send(&mut b, ch, &to_a, &d);
                expect_datagram(&mut a, ch, &d);
            }
        }
    }
}

#[test]
fn gathered_send_arrives_as_one_datagram() {
    // On the socket, and by the provider (udp's iov_limit is 4).
    for (cfg, want) in [
        (lo_cfg(), Posted::Done),
        (lo_provider_sends(), Posted::Pending),
    ] {
        gathered_sends(&cfg, want);
    }
}

fn gathered_sends(cfg: &FabricConfig, want: Posted) {
    let dev = lo(cfg);
    let mut a = Module::open(&dev, cfg).unwrap();
    let mut b = Module::open(&dev, cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    assert!(a.can_gather(Channel::Data));
    let mtu = a.channel_mtu(Channel::Data);
    for (head, p, q) in [(40, 5000, 0), (56, 0, 100), (40, 30_000, mtu - 30_040)] {
        let d = pattern(head + p + q, 3);
        let (id, buf) = a.tx_buffer(Channel::Data).unwrap();
        buf[..head].copy_from_slice(&d[..head]);
        let body = [&d[head..head + p], &d[head + p..]];
        let posted = a
            .post_send_gather(Channel::Data, id, head, body, &to_b)
            .expect("post_send_gather");
        assert_eq!(posted, want, "65507-byte datagrams are not batched");
        expect_datagram(&mut b, Channel::Data, &d);
    }
    // One byte over the MTU is refused before libfabric, and the buffer stays the caller's.
    let big = pattern(mtu, 1);
    let (id, _) = a.tx_buffer(Channel::Data).unwrap();
    let e = a
        .post_send_gather(Channel::Data, id, 1, [&big, &[]], &to_b)
        .unwrap_err();
    assert!(e.to_string().contains("MTU"), "{e}");
    a.release_tx(Channel::Data, id);
    drain_sends(&mut a);
    assert_eq!(a.tx_available(Channel::Data), a.tx_capacity(Channel::Data));
}

#[test]
fn poll_first_stops_at_the_first_datagram_and_poll_drains_the_rest() {
    let cfg = lo_cfg();
    let dev = lo(&cfg);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let mut out = Vec::new();
    b.poll_first(Channel::Priority, &mut out).unwrap();
    assert!(out.is_empty(), "nothing sent yet: {out:?}");
    for seed in 0..3 {
        send(&mut a, Channel::Priority, &to_b, &pattern(40, seed));
    }
    // Loopback queues each datagram on b's socket during a's send; wait for all three anyway.
    let recvs = |out: &[Completion]| {
        out.iter()
            .filter(|c| matches!(c, Completion::Recv { .. }))
            .count()
    };
    for _ in 0..1000 {
        b.poll_first(Channel::Priority, &mut out).unwrap();
        if recvs(&out) > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        recvs(&out),
        1,
        "poll_first returns after the first datagram"
    );
    let Completion::Recv { buf, len } = out[0] else {
        panic!("{out:?}")
    };
    assert!(b.rx_bytes(Channel::Priority, buf, len) == pattern(40, 0));
    out.clear();
    b.poll(Channel::Priority, 8, &mut out).unwrap();
    assert_eq!(recvs(&out), 2, "poll drains the two left: {out:?}");
    drain_sends(&mut a);
}

/// A data channel of 1472-byte datagrams (as across hosts at MTU 1500) on `lo`.
fn lo_1472(gso: bool) -> (FabricConfig, DeviceInfo) {
    lo_1472_reading(gso, true)
}

/// `lo_1472`, choosing also whether the data channel reads runs of datagrams itself.
fn lo_1472_reading(gso: bool, gro: bool) -> (FabricConfig, DeviceInfo) {
    let cfg = FabricConfig {
        mtu_cap: 1472,
        gso,
        gro,
        ..lo_cfg()
    };
    let dev = lo(&cfg);
    (cfg, dev)
}

/// A sender whose data channel batches, and two receivers it knows.
struct Three {
    a: Module,
    b: Module,
    c: Module,
    to_b: PeerAddr,
    to_c: PeerAddr,
}

fn batching_sender_and_two_receivers() -> Three {
    let (cfg, dev) = lo_1472(true);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let (b, c) = (
        Module::open(&dev, &cfg).unwrap(),
        Module::open(&dev, &cfg).unwrap(),
    );
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let to_c = a.insert_peer(&c.local_address()).unwrap();
    Three {
        a,
        b,
        c,
        to_b,
        to_c,
    }
}

#[test]
fn runs_of_full_datagrams_leave_in_one_send_and_arrive_one_by_one() {
    let mut t = batching_sender_and_two_receivers();
    let room = t.a.batch_room(Channel::Data);
    assert_eq!(room, 44, "65507 / 1472 datagrams per send");
    assert_eq!(
        t.a.batch_room(Channel::Priority),
        0,
        "tiny datagrams are not batched"
    );
    // 50 full datagrams to b (a full batch of 44, then 6), a short one that closes the
    // second batch, then 3 full ones to c.
    let to_b_data: Vec<Vec<u8>> = (0..50)
        .map(|i| pattern(1472, i as u8))
        .chain([pattern(100, 99)])
        .collect();
    for d in &to_b_data {
        let posted = post(&mut t.a, Channel::Data, &t.to_b, d);
        assert_eq!(posted, Posted::Done, "the buffer is free once copied");
    }
    assert_eq!(
        t.a.batch_stats(Channel::Data),
        (2, 51),
        "sent when full and when closed"
    );
    let to_c_data: Vec<Vec<u8>> = (0..3).map(|i| pattern(1472, 200 + i as u8)).collect();
    for d in &to_c_data {
        let _ = post(&mut t.a, Channel::Data, &t.to_c, d);
    }
    assert_eq!(
        t.a.batch_stats(Channel::Data),
        (2, 51),
        "waits for the end of the pass"
    );
    t.a.flush_sends(Channel::Data).unwrap();
    assert_eq!(t.a.batch_stats(Channel::Data), (3, 54));
    assert_eq!(
        t.a.tx_available(Channel::Data),
        t.a.tx_capacity(Channel::Data)
    );
    expect_datagrams(&mut t.b, Channel::Data, &to_b_data);
    expect_datagrams(&mut t.c, Channel::Data, &to_c_data);
    // Each send crossed `lo` as one packet and was read with one system call.
    assert!(t.b.reads_socket(Channel::Data) && t.b.reads_socket(Channel::Priority));
    assert_eq!(t.b.gro_stats(Channel::Data), (2, 51));
    assert_eq!(t.b.gro_stats(Channel::Priority), (0, 0));
    assert_eq!(t.c.gro_stats(Channel::Data), (1, 3));
}

#[test]
fn without_gro_the_provider_reads_a_run_datagram_by_datagram() {
    let (cfg, dev) = lo_1472_reading(true, true);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let (plain_cfg, _) = lo_1472_reading(true, false);
    let mut b = Module::open(&dev, &plain_cfg).unwrap();
    assert!(!b.reads_socket(Channel::Data));
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let run: Vec<Vec<u8>> = (0..10).map(|i| pattern(1472, 50 + i as u8)).collect();
    post_run(&mut a, &to_b, &run);
    assert_eq!(a.batch_stats(Channel::Data), (1, 10));
    expect_datagrams(&mut b, Channel::Data, &run);
    assert_eq!(b.gro_stats(Channel::Data), (0, 0));
}

#[test]
fn with_few_receive_buffers_the_channel_reads_a_run_one_datagram_at_a_time() {
    // 32 buffers: too few for runs of 44 (a caller may hold half); the channel still reads
    // its socket, the kernel splits the run, and nothing is lost.
    let (cfg, dev) = lo_1472(true);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let few = FabricConfig { rd_num: 32, ..cfg };
    let mut b = Module::open(&dev, &few).unwrap();
    assert!(b.reads_socket(Channel::Data));
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let run: Vec<Vec<u8>> = (0..20).map(|i| pattern(1472, 70 + i as u8)).collect();
    post_run(&mut a, &to_b, &run);
    assert_eq!(a.batch_stats(Channel::Data), (1, 20));
    expect_datagrams(&mut b, Channel::Data, &run);
    assert_eq!(b.gro_stats(Channel::Data), (0, 0), "one datagram per read");
}

/// Polls `m`'s data channel until `n` datagrams arrived (bounded), without reposting them.
fn hold_datagrams(m: &mut Module, n: usize) -> Vec<(BufId, Vec<u8>)> {
    let mut held = Vec::new();
    let mut out = Vec::new();
    for _ in 0..200_000 {
        if held.len() >= n {
            break;
        }
        out.clear();
        m.poll(Channel::Data, 64, &mut out).unwrap();
        for c in &out {
            if let Completion::Recv { buf, len } = *c {
                held.push((buf, m.rx_bytes(Channel::Data, buf, len).to_vec()));
            }
        }
    }
    held
}

#[test]
fn a_channel_whose_caller_holds_most_buffers_still_reads_what_fits() {
    let mut t = batching_sender_and_two_receivers();
    let total = t.b.rx_buffers(Channel::Data);
    // b keeps all but 10 of its receive buffers (a caller reassembling, or slow to return).
    let mut held = Vec::new();
    while held.len() < total - 10 {
        let n = (total - 10 - held.len()).min(44);
        for i in 0..n {
            let _ = post(&mut t.a, Channel::Data, &t.to_b, &pattern(1472, i as u8));
        }
        t.a.flush_sends(Channel::Data).unwrap();
        let got = hold_datagrams(&mut t.b, n);
        assert_eq!(
            got.len(),
            n,
            "the channel stopped reading with {} buffers free",
            total - held.len()
        );
        held.extend(got);
    }
    assert_eq!(held.len(), total - 10);
    // A run of 44 now finds 10 free buffers: the first 10 land, the rest are lost as on a
    // wire (the protocol repairs them); the channel does not stop reading.
    let run: Vec<Vec<u8>> = (0..44).map(|i| pattern(1472, 100 + i as u8)).collect();
    post_run(&mut t.a, &t.to_b, &run);
    let landed = hold_datagrams(&mut t.b, 10);
    let got: Vec<Vec<u8>> = landed.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(got, run[..10].to_vec());
    held.extend(landed);
    // With a single buffer free, a run's first datagram lands: read into one buffer, the run
    // is not taken for one oversized datagram.
    let (buf, _) = held.pop().unwrap();
    t.b.repost(Channel::Data, buf);
    let run2: Vec<Vec<u8>> = (0..44).map(|i| pattern(1472, 150 + i as u8)).collect();
    post_run(&mut t.a, &t.to_b, &run2);
    let one = hold_datagrams(&mut t.b, 1);
    assert_eq!(one.len(), 1, "nothing landed in the one free buffer");
    assert_eq!(one[0].1, run2[0]);
    held.extend(one);
    // Every buffer back: whole runs again.
    for (buf, _) in held {
        t.b.repost(Channel::Data, buf);
    }
    t.b.flush_reposts().unwrap();
    let before = t.b.gro_stats(Channel::Data);
    post_run(&mut t.a, &t.to_b, &run);
    expect_datagrams(&mut t.b, Channel::Data, &run);
    assert_eq!(t.b.gro_stats(Channel::Data), (before.0 + 1, before.1 + 44));
}

#[test]
fn a_run_of_64_smaller_datagrams_from_a_peer_with_a_smaller_mtu_is_read_whole() {
    // The kernel coalesces up to 64 datagrams of any equal size, not only full ones: a read
    // must offer 64 buffers, not the 45 that 1472-byte datagrams fill.
    let small = FabricConfig {
        mtu_cap: 1000,
        gso: true,
        gro: true,
        ..lo_cfg()
    };
    let (cfg, dev) = lo_1472(true);
    let mut a = Module::open(&lo(&small), &small).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    assert_eq!(a.batch_room(Channel::Data), 64);
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    let run: Vec<Vec<u8>> = (0..64).map(|i| pattern(1000, i as u8)).collect();
    post_run(&mut a, &to_b, &run);
    assert_eq!(a.batch_stats(Channel::Data), (1, 64));
    expect_datagrams(&mut b, Channel::Data, &run);
    assert_eq!(b.gro_stats(Channel::Data), (1, 64));
}

#[test]
fn a_run_read_at_once_lands_one_datagram_per_buffer_and_buffers_come_back() {
    let mut t = batching_sender_and_two_receivers();
    let total = t.b.rx_buffers(Channel::Data);
    // More runs than the receiver has buffers: they must come back to be read into again.
    let runs = total / 44 + 3;
    for r in 0..runs {
        let run: Vec<Vec<u8>> = (0..44).map(|i| pattern(1472, (r + i) as u8)).collect();
        for d in &run {
            let _ = post(&mut t.a, Channel::Data, &t.to_b, d);
        }
        t.a.flush_sends(Channel::Data).unwrap();
        expect_datagrams(&mut t.b, Channel::Data, &run);
    }
    assert_eq!(
        t.b.gro_stats(Channel::Data),
        (runs as u64, 44 * runs as u64)
    );
}

#[test]
fn a_run_to_another_peer_sends_the_batch_first() {
    let mut t = batching_sender_and_two_receivers();
    let (x, y, z) = (pattern(1472, 1), pattern(1472, 2), pattern(1472, 3));
    let _ = post(&mut t.a, Channel::Data, &t.to_b, &x);
    let _ = post(&mut t.a, Channel::Data, &t.to_b, &y);
    let _ = post(&mut t.a, Channel::Data, &t.to_c, &z);
    assert_eq!(
        t.a.batch_stats(Channel::Data),
        (1, 2),
        "b's two went when c's came"
    );
    expect_datagrams(&mut t.b, Channel::Data, &[x, y]);
    t.a.flush_sends(Channel::Data).unwrap();
    assert_eq!(
        t.a.batch_stats(Channel::Data),
        (1, 2),
        "a lone datagram is no batch"
    );
    expect_datagram(&mut t.c, Channel::Data, &z);
}

#[test]
fn without_gso_every_datagram_is_its_own_send() {
    let (cfg, dev) = lo_1472(false);
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    assert_eq!(a.batch_room(Channel::Data), 0);
    let d = pattern(1472, 7);
    send(&mut a, Channel::Data, &to_b, &d);
    expect_datagram(&mut b, Channel::Data, &d);
    a.flush_sends(Channel::Data).unwrap();
    assert_eq!(a.batch_stats(Channel::Data), (0, 0));
}

/// Polls `ch` until `n` datagrams arrived or nothing more comes (bounded); their buffers are
/// kept, as the PML keeps a fragment's. Returns the buffers.
fn receive_holding(m: &mut Module, ch: Channel, n: usize) -> Vec<BufId> {
    let (mut got, mut out) = (Vec::new(), Vec::new());
    for _ in 0..20_000 {
        if got.len() >= n {
            break;
        }
        out.clear();
        m.poll(ch, 64, &mut out).unwrap();
        for c in &out {
            match *c {
                Completion::Recv { buf, .. } => got.push(buf),
                ref e => panic!("{e:?}"),
            }
        }
    }
    got
}

#[test]
fn a_run_that_finds_too_few_free_buffers_loses_its_tail_and_counts_it() {
    let mut t = batching_sender_and_two_receivers();
    let total = t.b.rx_buffers(Channel::Data);
    let mut held = Vec::new();
    for r in 0.. {
        if total - held.len() < 44 {
            break;
        }
        let run: Vec<Vec<u8>> = (0..44).map(|i| pattern(1472, (r + i) as u8)).collect();
        post_run(&mut t.a, &t.to_b, &run);
        let got = receive_holding(&mut t.b, Channel::Data, 44);
        assert_eq!(got.len(), 44, "run {r} with {} free", total - held.len());
        held.extend(got);
    }
    if held.len() == total {
        // None free would leave the run in the socket unread: free one.
        let buf = held.pop().unwrap();
        t.b.repost(Channel::Data, buf);
        t.b.flush_reposts().unwrap();
    }
    let free = total - held.len();
    assert_eq!(t.b.cut_recvs(Channel::Data), 0);
    let run: Vec<Vec<u8>> = (0..44).map(|i| pattern(1472, i)).collect();
    post_run(&mut t.a, &t.to_b, &run);
    let got = receive_holding(&mut t.b, Channel::Data, 44);
    assert_eq!(got.len(), free, "the whole datagrams that found a buffer");
    assert_eq!(t.b.cut_recvs(Channel::Data), (44 - free) as u64);
    for (i, &buf) in got.iter().enumerate() {
        assert_eq!(t.b.rx_bytes(Channel::Data, buf, 1472), &run[i][..]);
    }
}

/// Set in the process `unmappable_buffers_are_an_error_not_an_abort` starts to run itself.
const UNMAPPABLE_CHILD: &str = "USNIC_TEST_UNMAPPABLE_CHILD";

/// Buffers that cannot be mapped (here: beyond the address-space limit, RLIMIT_AS) make
/// `Module::open` fail with an error naming mmap and ENOMEM, which the plugin shows as an
/// exhausted resource and skips the interface; they must not abort the process. The limit would
/// starve every other test, so the test runs itself again in a process of its own.
#[test]
fn unmappable_buffers_are_an_error_not_an_abort() {
    let name = "unmappable_buffers_are_an_error_not_an_abort";
    if std::env::var_os(UNMAPPABLE_CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(UNMAPPABLE_CHILD, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child {}:\n{text}", out.status);
        assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
        return;
    }
    let cfg = lo_cfg();
    let dev = lo(&cfg);
    let vm_kib: u64 = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmSize in /proc/self/status");
    // 32 MiB to spare: the data channel's send buffers on lo alone take 64 MiB (1024 x 64 KiB).
    let limit = libc::rlimit {
        rlim_cur: (vm_kib << 10) + (32 << 20),
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct; this process exists only for this test.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
    let r = Module::open(&dev, &cfg);
    let e = r.err().expect("opened within the address-space limit");
    assert_eq!((e.call, e.code), ("mmap", libc::ENOMEM), "{e}");
    assert!(e.message.contains("bytes of buffers"), "{e}");
}

/// `sockets` keeps a send's iovec in its queue and reads it after `fi_sendv` returned, so its
/// channels do not gather a body from memory that may change right after (the edge copies it
/// behind the header instead); the udp provider sends before it returns, and gathers.
#[test]
fn only_a_provider_that_sends_at_once_gathers() {
    let sockets = FabricConfig {
        provider: "sockets".into(),
        ..lo_cfg()
    };
    let dev = discover(&sockets)
        .unwrap()
        .into_iter()
        .next()
        .expect("sockets on lo");
    let m = Module::open(&dev, &sockets).unwrap();
    for ch in [Channel::Priority, Channel::Data] {
        assert!(!m.can_gather(ch), "{ch:?}");
    }
    let udp = lo_provider_sends();
    let m = Module::open(&lo(&udp), &udp).unwrap();
    assert!(m.can_gather(Channel::Data));
}

/// A provider that advertises an unbounded `max_msg_size` (`sockets`: 2^64 - 4097 for
/// FI_EP_DGRAM) gets datagrams of at most the largest UDP payload, and its module opens.
#[test]
fn an_unbounded_provider_message_size_is_capped() {
    let cfg = FabricConfig {
        provider: "sockets".into(),
        ..lo_cfg()
    };
    let Some(dev) = discover(&cfg).unwrap().into_iter().next() else {
        panic!("libfabric's sockets provider lists no lo here");
    };
    assert!(dev.provider_max_msg_size > u32::MAX as usize, "{dev:?}");
    assert_eq!(dev.mtu, usnic_rs::fabric::MAX_UDP_PAYLOAD, "{dev:?}");
    let m = Module::open(&dev, &cfg).unwrap();
    assert_eq!(
        m.channel_mtu(Channel::Data),
        usnic_rs::fabric::MAX_UDP_PAYLOAD
    );
}
