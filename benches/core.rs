//! Benchmark of the protocol core (not a test): `cargo bench --bench core`.
//!
//! 1. CPU cost: two engines connected in memory (no loss, credits returned at once) push
//!    fragments of 8 B, 1 KiB, 64 KiB and 1 MiB from A to B; B's ACKs flow back. Printed:
//!    ns per data segment and per payload byte, both engines together (sender + receiver).
//! 2. Goodput under 1% and 10% simulated loss as a fraction of lossless goodput, from the
//!    deterministic simulator of the tests (64 KiB fragments, window 4096).
//! 3. Only with `cargo bench --bench core -- sweep`: goodput over loss x window, with loss alone
//!    and with reordering too, each cell the mean of 12 seeds (run it at two commits to compare a
//!    loss-repair change; docs/wire.md §6 quotes it).

#[path = "../tests/sim/mod.rs"]
mod sim;

use std::time::Instant as Clock;
use usnic_rs::proto::*;

fn engines() -> (Engine, Engine, PeerId, PeerId) {
    let mk = |id: u64| Config {
        local_id: id,
        local_key: id,
        isn: 60_000,
        ..Config::default()
    };
    let (ca, cb) = (mk(1), mk(2));
    let mut a = Engine::new(ca.clone()).unwrap();
    let mut b = Engine::new(cb.clone()).unwrap();
    let ab = a.add_peer(Instant(0), cb.peer_info());
    let ba = b.add_peer(Instant(0), ca.peer_info());
    (a, b, ab, ba)
}

struct Cost {
    frags: usize,
    segments: u64,
    bytes: u64,
    ns: f64,
}

fn cpu_cost(size: usize, total_bytes: usize) -> Cost {
    let frags = (total_bytes / size.max(1)).clamp(64, 2_000_000);
    let (mut a, mut b, ab, _) = engines();
    let mut pending: Vec<Vec<u8>> = (0..frags).map(|i| vec![i as u8; size]).collect();
    pending.reverse();
    let mut buf = vec![0u8; 2048];
    let mut ack = vec![0u8; 2048];
    let (mut completed, mut delivered, mut segments) = (0usize, 0usize, 0u64);
    let start = Clock::now();
    let cpu0 = cpu_ns();
    // Virtual time: 1 µs per loop, so delayed ACKs fire the same way on a loaded machine.
    let mut vt = 0u64;
    let mut outstanding = 0usize;
    while completed < frags {
        vt += 1_000;
        let t = Instant(vt);
        // Keep the pipe full without queueing everything at once.
        while outstanding < 256 {
            let Some(d) = pending.pop() else { break };
            a.submit_send(t, ab, 1, d, Cookie(0)).unwrap();
            outstanding += 1;
        }
        for ch in [Channel::Priority, Channel::Data] {
            let mut n = 0;
            while let Some(x) = a.poll_transmit(t, ch, &mut buf) {
                a.handle_send_complete(ch);
                segments += 1;
                if let RxOutcome::Deliver { payload, .. } = b.handle_datagram(t, ch, &buf[..x.len])
                {
                    std::hint::black_box(&buf[payload]);
                    delivered += 1;
                }
                n += 1;
                if n == 64 {
                    break;
                }
            }
        }
        while let Some(e) = b.poll_event() {
            if let Event::Deliver { data, .. } = e {
                std::hint::black_box(&data);
                delivered += 1;
            }
        }
        b.handle_timeout(t);
        while let Some(x) = b.poll_transmit(t, Channel::Priority, &mut ack) {
            b.handle_send_complete(Channel::Priority);
            a.handle_datagram(t, Channel::Priority, &ack[..x.len]);
        }
        while let Some(e) = a.poll_event() {
            if let Event::SendComplete { result, .. } = e {
                result.unwrap();
                completed += 1;
                outstanding -= 1;
            }
        }
        a.handle_timeout(t);
    }
    let wall = start.elapsed().as_nanos() as f64;
    let ns = cpu_ns().map_or(wall, |c| (c - cpu0.unwrap_or(0)) as f64);
    assert_eq!(delivered, frags);
    assert_eq!(a.stats().resends_fast + a.stats().resends_timeout, 0);
    Cost {
        frags,
        segments,
        bytes: (frags * size) as u64,
        ns,
    }
}

/// CPU time of this thread in ns (first field of /proc/thread-self/schedstat), so the figures
/// do not depend on how busy the machine is; `None` where unavailable (wall time is used).
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Goodput (Gb/s of simulated time) and sender retransmissions of `n` 64 KiB fragments from
/// one engine to the other, run to quiescence.
fn goodput(link: sim::Link, window: u16, seed: u64, n: u64) -> (f64, u64) {
    use sim::{Sim, SimConfig};
    let len = 64usize << 10;
    let mut s = Sim::new(SimConfig::uniform(link, window), seed);
    for id in 0..n {
        s.send(0, id + 1, 1, len);
    }
    assert!(s.run(10_000_000, 60_000_000_000));
    let st = s.nodes[0].eng.stats();
    (
        (n * len as u64 * 8) as f64 / s.now as f64,
        st.resends_fast + st.resends_timeout,
    )
}

/// Mean goodput (Gb/s) and sender retransmissions of 150 x 64 KiB over `sweep_seeds()` seeds.
fn sweep_cell(link: &sim::Link, window: u16) -> (f64, u64) {
    let seeds = sweep_seeds();
    let (mut gbps, mut resent) = (0.0, 0);
    for seed in 1..=seeds {
        let (g, r) = goodput(link.clone(), window, seed * 7919, 150);
        gbps += g;
        resent += r;
    }
    (gbps / seeds as f64, resent / seeds)
}

/// 12 unless `SWEEP_SEEDS` says otherwise: the cells at 30 % loss move by 10-20 % between
/// two changes that resend the same datagrams; more seeds tell such a change from noise.
fn sweep_seeds() -> u64 {
    std::env::var("SWEEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(12)
}

fn sweep() {
    println!(
        "simulated goodput, 150 x 64 KiB, 10 Gb/s NIC, 10 us one-way delay, mean of {} seeds",
        sweep_seeds()
    );
    println!("reordering: 10 % of datagrams held back by up to 30 us");
    println!(
        "{:>12} {:>6} {:>7} {:>8} {:>8}",
        "link", "loss", "window", "Gb/s", "resends"
    );
    for reorder in [false, true] {
        for loss in [0.01, 0.10, 0.30] {
            for window in [16u16, 31, 64, 256] {
                let mut link = sim::Link::lossy(loss);
                if reorder {
                    link.reorder = 0.1;
                    link.reorder_ns = 30_000;
                }
                let (g, r) = sweep_cell(&link, window);
                let name = if reorder { "loss+reorder" } else { "loss" };
                println!("{name:>12} {loss:>6.2} {window:>7} {g:>8.3} {r:>8}");
            }
        }
    }
}

fn main() {
    // `cargo bench --bench core -- probe N`: only push N 8-byte and N 1 KiB fragments, to count
    // heap allocations with `valgrind --tool=dhat <bench binary> probe N`: the total is N*2
    // (the fragments' own Vecs, made by this harness) plus a constant, i.e. the core itself
    // allocates nothing per segment on the send/ACK path.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "sweep") {
        sweep();
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "probe") {
        let n: usize = args
            .get(i + 1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000);
        let a = cpu_cost(8, 8 * n);
        let b = cpu_cost(1024, 1024 * n);
        println!(
            "probe: {} + {} fragments, {} + {} segments",
            a.frags, b.frags, a.segments, b.segments
        );
        return;
    }
    println!("protocol core, two engines in memory, fragments A -> B, ACKs B -> A");
    println!(
        "CPU time of both engines together (sender + receiver), incl. the fragments' own Vecs"
    );
    println!(
        "{:>9} {:>9} {:>10} {:>12} {:>12} {:>10}",
        "size", "frags", "segments", "ns/segment", "ns/byte", "Gb/s(cpu)"
    );
    for (size, label) in [
        (8usize, "8 B"),
        (1024, "1 KiB"),
        (64 << 10, "64 KiB"),
        (1 << 20, "1 MiB"),
    ] {
        let total = if size == 8 { 16 << 20 } else { 256 << 20 };
        let c = cpu_cost(size, total);
        println!(
            "{:>9} {:>9} {:>10} {:>12.1} {:>12.4} {:>10.2}",
            label,
            c.frags,
            c.segments,
            c.ns / c.segments as f64,
            c.ns / c.bytes.max(1) as f64,
            c.bytes as f64 * 8.0 / c.ns
        );
    }
    println!();
    println!("simulated goodput, 300 x 64 KiB, window 4096, 10 Gb/s NIC, 10 us one-way delay");
    let lossy = |loss| goodput(sim::Link::lossy(loss), 4096, 0xbe4c, 300).0;
    let base = lossy(0.0);
    println!("  lossless: {base:.3} Gb/s");
    for loss in [0.01, 0.10] {
        let g = lossy(loss);
        println!(
            "  {:>4.0}% loss: {g:.3} Gb/s = {:.3} of lossless",
            loss * 100.0,
            g / base
        );
    }
}
