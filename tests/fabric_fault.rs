//! The fabric edge's seeded fault injector (`Module::set_faults`) between two modules on `lo`.
use std::time::{Duration, Instant};
use usnic_rs::fabric::{
    discover, parse_if_list, Completion, FabricConfig, FaultConfig, Module, PeerAddr, Posted,
};
use usnic_rs::proto::Channel;

const CHANNELS: [Channel; 2] = [Channel::Priority, Channel::Data];
const LEN: usize = 200;

fn pair() -> (Module, Module, PeerAddr) {
    pair_with(0, true)
}

/// `pair` with data datagrams of at most `mtu_cap` bytes (0: `lo`'s 65507), the channels
/// reading their sockets themselves (`btl_usnic_gro`) or through the provider. At 1472, as
/// across hosts at MTU 1500, the data channel reads runs of datagrams; at 65507, one at a time.
fn pair_with(mtu_cap: usize, gro: bool) -> (Module, Module, PeerAddr) {
    let cfg = FabricConfig {
        if_include: parse_if_list("lo").unwrap(),
        mtu_cap,
        gro,
        ..Default::default()
    };
    let dev = discover(&cfg)
        .unwrap()
        .into_iter()
        .next()
        .expect("lo via the udp provider");
    let mut a = Module::open(&dev, &cfg).unwrap();
    let b = Module::open(&dev, &cfg).unwrap();
    let to_b = a.insert_peer(&b.local_address()).unwrap();
    (a, b, to_b)
}

/// Datagram `i`: its index, then bytes derived from it (so corruption is visible).
fn datagram(i: u32) -> Vec<u8> {
    let mut d = i.to_le_bytes().to_vec();
    d.extend((4..LEN).map(|k| (k as u32).wrapping_mul(7).wrapping_add(i) as u8));
    d
}

/// One arrival at the receiver: the index and when it was seen.
struct Arrival {
    index: u32,
    at: Instant,
}

/// Receive everything `b` has on `ch` (checking every datagram's bytes), reposting each buffer
/// right after reading it, until two polls in a row yield nothing.
fn drain_rx(b: &mut Module, ch: Channel, got: &mut Vec<Arrival>) {
    let mut out = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        out.clear();
        b.poll(ch, 64, &mut out).unwrap();
        if out.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        for c in out.drain(..) {
            match c {
                Completion::Recv { buf, len } => {
                    let bytes = b.rx_bytes(ch, buf, len);
                    let index = u32::from_le_bytes(bytes[..4].try_into().unwrap());
                    assert_eq!(bytes, &datagram(index)[..], "datagram {index} corrupted");
                    got.push(Arrival {
                        index,
                        at: Instant::now(),
                    });
                    b.repost(ch, buf);
                }
                other => panic!("unexpected completion at the receiver: {other:?}"),
            }
        }
        b.flush_reposts().unwrap();
    }
}

/// Poll `a`'s sends on `ch` until every send buffer is back (bounded: 10 s).
fn settle_tx(a: &mut Module, ch: Channel, send_done: &mut usize) {
    let mut out = Vec::new();
    let t0 = Instant::now();
    while a.tx_available(ch) < a.tx_capacity(ch) {
        out.clear();
        a.poll(ch, 64, &mut out).unwrap();
        for c in &out {
            match c {
                Completion::SendDone { .. } => *send_done += 1,
                other => panic!("unexpected completion at the sender: {other:?}"),
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "send buffers of {ch:?} never all came back: {} of {}",
            a.tx_available(ch),
            a.tx_capacity(ch)
        );
    }
}

/// Send datagrams `0..n` from `a` to `b` on `ch` in batches of `batch`, draining both sides
/// after each batch. Returns the arrivals at `b` (in order) and the send completions `a` saw.
fn run(
    a: &mut Module,
    b: &mut Module,
    to_b: &PeerAddr,
    ch: Channel,
    n: u32,
    batch: u32,
) -> (Vec<Arrival>, Vec<Instant>, usize) {
    let mut got = Vec::new();
    let mut sent_at = Vec::new();
    let mut send_done = 0;
    let mut i = 0;
    while i < n {
        for _ in 0..batch.min(n - i) {
            let d = datagram(i);
            let (id, buf) = a.tx_buffer(ch).expect("free send buffer");
            buf[..LEN].copy_from_slice(&d);
            // Pending with an injector on `a` (it holds and replays buffers); Done (injected)
            // when only `b` has one and LEN fits the inject size.
            let _ = a.post_send(ch, id, LEN, to_b).expect("post_send");
            sent_at.push(Instant::now());
            i += 1;
        }
        settle_tx(a, ch, &mut send_done);
        drain_rx(b, ch, &mut got);
    }
    (got, sent_at, send_done)
}

fn counts(got: &[Arrival], n: u32) -> Vec<u32> {
    let mut c = vec![0u32; n as usize];
    for g in got {
        c[g.index as usize] += 1;
    }
    c
}

/// `observed / n` lies within 5 standard deviations of `p` (binomial), never exactly 0 for
/// `p > 0`.
fn assert_fraction(what: &str, observed: u64, n: u64, p: f64) {
    let sd = (p * (1.0 - p) / n as f64).sqrt();
    let f = observed as f64 / n as f64;
    assert!(
        (f - p).abs() <= 5.0 * sd && observed > 0,
        "{what}: observed {observed}/{n} = {f:.4}, configured {p} (tolerance {:.4})",
        5.0 * sd
    );
}

fn assert_no_leak(m: &mut Module) {
    for ch in CHANNELS {
        let mut n = 0;
        settle_tx(m, ch, &mut n);
        assert_eq!(
            m.tx_available(ch),
            m.tx_capacity(ch),
            "send buffers of {ch:?}"
        );
    }
}

/// Every receive buffer of `b` is posted again: more datagrams than it has receive buffers go
/// through, fault-free, in batches.
fn assert_rx_all_back(a: &mut Module, b: &mut Module, to_b: &PeerAddr) {
    a.set_faults(FaultConfig::default()).unwrap();
    b.set_faults(FaultConfig::default()).unwrap();
    for ch in CHANNELS {
        let n = 1200; // > 1024 data / 127 priority receive buffers
        let (got, _, _) = run(a, b, to_b, ch, n, 64);
        assert!(
            counts(&got, n).iter().all(|&c| c == 1),
            "after the faults every datagram arrives once on {ch:?}"
        );
    }
}

const N: u32 = 4000;

#[test]
fn send_drop_fraction_and_same_seed_same_pattern() {
    let cfg = FaultConfig {
        seed: 42,
        send_drop: 0.1,
        ..Default::default()
    };
    let mut patterns = Vec::new();
    for seed in [42, 42, 43] {
        let (mut a, mut b, to_b) = pair();
        a.set_faults(FaultConfig { seed, ..cfg }).unwrap();
        let (got, _, send_done) = run(&mut a, &mut b, &to_b, Channel::Data, N, 64);
        let c = counts(&got, N);
        assert!(c.iter().all(|&k| k <= 1), "a dropped send never duplicates");
        let lost: Vec<u32> = (0..N).filter(|&i| c[i as usize] == 0).collect();
        let st = a.fault_stats();
        assert_eq!(st.sends_seen, N as u64);
        assert_eq!(st.send_dropped, lost.len() as u64, "every drop is counted");
        assert_eq!(send_done, N as usize, "a dropped send still completes");
        assert_fraction("send_drop", st.send_dropped, N as u64, 0.1);
        assert_no_leak(&mut a);
        assert_rx_all_back(&mut a, &mut b, &to_b);
        patterns.push(lost);
    }
    assert_eq!(patterns[0], patterns[1], "same seed, same drops");
    assert_ne!(patterns[0], patterns[2], "another seed, other drops");
}

#[test]
fn drop_pattern_ignores_other_knobs_and_channel() {
    // The drop stream of one channel depends only on the seed and that channel's sends.
    let mut patterns = Vec::new();
    for (dup, ch) in [(0.0, Channel::Priority), (0.3, Channel::Priority)] {
        let (mut a, mut b, to_b) = pair();
        a.set_faults(FaultConfig {
            seed: 7,
            send_drop: 0.2,
            send_dup: dup,
            ..Default::default()
        })
        .unwrap();
        // Traffic on the other channel first must not shift this channel's pattern.
        if dup > 0.0 {
            run(&mut a, &mut b, &to_b, Channel::Data, 100, 32);
        }
        let (got, _, _) = run(&mut a, &mut b, &to_b, ch, 1000, 32);
        let c = counts(&got, 1000);
        patterns.push(
            (0..1000)
                .filter(|&i| c[i as usize] == 0)
                .collect::<Vec<u32>>(),
        );
        assert_no_leak(&mut a);
    }
    assert_eq!(patterns[0], patterns[1]);
}

#[test]
fn send_dup_fraction_and_no_leak() {
    let (mut a, mut b, to_b) = pair();
    a.set_faults(FaultConfig {
        seed: 1,
        send_dup: 0.2,
        ..Default::default()
    })
    .unwrap();
    for ch in CHANNELS {
        let before = a.fault_stats();
        let (got, _, send_done) = run(&mut a, &mut b, &to_b, ch, N, 32);
        let st = a.fault_stats();
        let dups = st.send_duplicated - before.send_duplicated;
        assert_eq!(st.send_dup_skipped, 0, "batches leave spare buffers");
        let c = counts(&got, N);
        assert!(
            c.iter().all(|&k| k == 1 || k == 2),
            "{ch:?}: lost or tripled"
        );
        let twice = c.iter().filter(|&&k| k == 2).count() as u64;
        assert_eq!(twice, dups, "{ch:?}: every counted duplicate arrived twice");
        assert_eq!(
            send_done, N as usize,
            "{ch:?}: one completion per post_send"
        );
        assert_fraction("send_dup", dups, N as u64, 0.2);
    }
    assert_no_leak(&mut a);
    assert_rx_all_back(&mut a, &mut b, &to_b);
}

#[test]
fn recv_drop_and_dup_fractions_through_the_provider() {
    recv_drop_and_dup_fractions_with(0, false);
}

#[test]
fn recv_drop_and_dup_fractions_on_channels_reading_their_sockets() {
    recv_drop_and_dup_fractions_with(0, true);
}

#[test]
fn recv_drop_and_dup_fractions_on_a_channel_reading_runs() {
    recv_drop_and_dup_fractions_with(1472, true);
}

fn recv_drop_and_dup_fractions_with(mtu_cap: usize, gro: bool) {
    let (mut a, mut b, to_b) = pair_with(mtu_cap, gro);
    for ch in CHANNELS {
        assert_eq!(b.reads_socket(ch), gro, "{ch:?}");
    }
    b.set_faults(FaultConfig {
        seed: 99,
        recv_drop: 0.05,
        recv_dup: 0.15,
        ..Default::default()
    })
    .unwrap();
    for ch in CHANNELS {
        let before = b.fault_stats();
        let (got, _, _) = run(&mut a, &mut b, &to_b, ch, N, 32);
        let st = b.fault_stats();
        let (drops, dups) = (
            st.recv_dropped - before.recv_dropped,
            st.recv_duplicated - before.recv_duplicated,
        );
        assert_eq!(st.recvs_seen - before.recvs_seen, N as u64, "{ch:?}");
        let c = counts(&got, N);
        let zero = c.iter().filter(|&&k| k == 0).count() as u64;
        let two = c.iter().filter(|&&k| k == 2).count() as u64;
        assert!(c.iter().all(|&k| k <= 2), "{ch:?}");
        assert_eq!(zero, drops, "{ch:?}: every counted drop is missing");
        assert_eq!(two, dups, "{ch:?}: every counted duplicate surfaced twice");
        assert_fraction("recv_drop", drops, N as u64, 0.05);
        assert_fraction("recv_dup", dups, (N as u64) - drops, 0.15);
    }
    assert_no_leak(&mut a);
    assert_rx_all_back(&mut a, &mut b, &to_b);
}

#[test]
fn delayed_sends_arrive_later_and_intact() {
    let (mut a, mut b, to_b) = pair();
    let delay = Duration::from_millis(30);
    a.set_faults(FaultConfig {
        seed: 5,
        send_delay: 0.5,
        delay_us: delay.as_micros() as u64,
        ..Default::default()
    })
    .unwrap();
    let n = 400u32;
    assert!(a.tx_capacity(Channel::Data) > n as usize);
    let mut sent_at = Vec::new();
    for i in 0..n {
        let (id, buf) = a.tx_buffer(Channel::Data).expect("free send buffer");
        buf[..LEN].copy_from_slice(&datagram(i));
        let _ = a.post_send(Channel::Data, id, LEN, &to_b).unwrap();
        sent_at.push(Instant::now());
    }
    let st = a.fault_stats();
    let mut early = Vec::new();
    drain_rx(&mut b, Channel::Data, &mut early);
    assert_eq!(
        early.len() as u64,
        n as u64 - st.send_delayed,
        "only the undelayed ones arrive at once"
    );
    assert!(
        a.tx_available(Channel::Data) <= a.tx_capacity(Channel::Data) - st.send_delayed as usize,
        "delayed buffers stay owned by the module"
    );
    let mut send_done = 0;
    settle_tx(&mut a, Channel::Data, &mut send_done);
    let mut late = Vec::new();
    drain_rx(&mut b, Channel::Data, &mut late);
    assert_eq!(send_done, n as usize);
    assert_eq!(late.len() as u64, st.send_delayed);
    for g in &late {
        let waited = g.at.duration_since(sent_at[g.index as usize]);
        assert!(
            waited >= delay,
            "datagram {} arrived after {waited:?}",
            g.index
        );
    }
    early.extend(late);
    let c = counts(&early, n);
    assert!(
        c.iter().all(|&k| k == 1),
        "every datagram arrives once, intact"
    );
    assert_fraction("send_delay", st.send_delayed, n as u64, 0.5);
    // Held buffers stay with the module until the delayed send completes.
    let (id, buf) = a.tx_buffer(Channel::Data).unwrap();
    buf[..LEN].copy_from_slice(&datagram(0));
    a.set_faults(FaultConfig {
        seed: 5,
        send_delay: 1.0,
        delay_us: delay.as_micros() as u64,
        ..Default::default()
    })
    .unwrap();
    let cap = a.tx_capacity(Channel::Data);
    let _ = a.post_send(Channel::Data, id, LEN, &to_b).unwrap();
    let mut out = Vec::new();
    a.poll(Channel::Data, 64, &mut out).unwrap();
    assert!(out.is_empty(), "no completion before the delay: {out:?}");
    assert_eq!(
        a.tx_available(Channel::Data),
        cap - 1,
        "held buffer stays owned"
    );
    let mut got = Vec::new();
    drain_rx(&mut b, Channel::Data, &mut got);
    assert!(got.is_empty(), "nothing arrives before the delay");
    std::thread::sleep(delay);
    assert_no_leak(&mut a);
    drain_rx(&mut b, Channel::Data, &mut got);
    assert_eq!(got.len(), 1);
    assert_rx_all_back(&mut a, &mut b, &to_b);
}

#[test]
fn everything_at_once_leaks_nothing() {
    let (mut a, mut b, to_b) = pair();
    let all = FaultConfig {
        seed: 2026,
        send_drop: 0.1,
        send_dup: 0.1,
        send_delay: 0.1,
        delay_us: 2000,
        recv_drop: 0.1,
        recv_dup: 0.1,
    };
    a.set_faults(all).unwrap();
    b.set_faults(all).unwrap();
    for ch in CHANNELS {
        let (got, _, send_done) = run(&mut a, &mut b, &to_b, ch, 2000, 32);
        assert_eq!(send_done, 2000);
        assert!(got.len() > 1000, "{ch:?}: most datagrams arrive");
        // Settle delayed ones that a last batch left behind.
        std::thread::sleep(Duration::from_millis(5));
        assert_no_leak(&mut a);
        let mut rest = Vec::new();
        drain_rx(&mut b, ch, &mut rest);
    }
    assert_rx_all_back(&mut a, &mut b, &to_b);
    // Switched off: the counters are kept.
    let st = a.fault_stats();
    assert!(st.send_dropped > 0 && st.send_duplicated > 0 && st.send_delayed > 0);
}

#[test]
fn bad_fractions_are_refused_and_off_is_free() {
    let (mut a, _b, _) = pair();
    for bad in [1.5, -0.1, f64::NAN, f64::INFINITY] {
        let e = a
            .set_faults(FaultConfig {
                recv_dup: bad,
                ..Default::default()
            })
            .unwrap_err();
        assert!(e.to_string().contains("recv_dup"), "{e}");
    }
    assert!(FaultConfig::default().is_off());
    a.set_faults(FaultConfig::default()).unwrap();
    assert_eq!(a.fault_stats(), Default::default());
}

/// A send the injector holds back for a peer that is then removed is dropped, not sent late:
/// the address vector gives the next peer inserted the freed address, which would receive it.
/// Its buffer and completion come back as for a dropped send.
#[test]
fn a_delayed_send_to_a_removed_peer_is_dropped() {
    let (mut a, b, to_b) = pair();
    a.set_faults(FaultConfig {
        seed: 1,
        send_delay: 1.0,
        delay_us: 20_000,
        ..Default::default()
    })
    .unwrap();
    let ch = Channel::Priority;
    let (id, buf) = a.tx_buffer(ch).unwrap();
    buf[..5].copy_from_slice(b"for B");
    assert_eq!(a.post_send(ch, id, 5, &to_b).unwrap(), Posted::Pending);
    a.remove_peer(&to_b);
    let (_, mut x, _) = pair();
    let to_x = a.insert_peer(&x.local_address()).unwrap();
    assert_eq!(
        to_x.fi_addr(ch),
        to_b.fi_addr(ch),
        "the address was given again"
    );
    std::thread::sleep(Duration::from_millis(30));
    let mut done = 0;
    let mut out = Vec::new();
    for _ in 0..100 {
        out.clear();
        a.poll(ch, 16, &mut out).unwrap();
        done += out
            .iter()
            .filter(|c| matches!(c, Completion::SendDone { .. }))
            .count();
        out.clear();
        x.poll(ch, 16, &mut out).unwrap();
        assert!(
            !out.iter().any(|c| matches!(c, Completion::Recv { .. })),
            "the peer given the address received the removed peer's datagram"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(done, 1, "the held send completes once, as dropped");
    assert_eq!(a.tx_available(ch), a.tx_capacity(ch));
    drop(b);
}
