//! Two-peer simulation: exactly-once, byte-exact delivery of thousands of random-size
//! fragments, puts and gets under seeded loss, duplication, reordering and delay.
//! Replay a failure with `SIM_SEED=<printed seed> cargo test --release --test proto_sim`.

mod sim;

use sim::*;
use usnic_rs::proto::*;

const REG_PUT: u64 = 1;
const REG_SRC: u64 = 2;
const REG_DST: u64 = 3;

fn size(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..=69 => rng.below(257) as usize,
        70..=89 => 257 + rng.below(16 << 10) as usize,
        90..=97 => (16 << 10) + rng.below(112 << 10) as usize,
        _ => (128 << 10) + rng.below(896 << 10) as usize,
    }
}

enum Plan {
    Send {
        from: usize,
        id: u64,
        tag: u8,
        len: usize,
    },
    Put {
        from: usize,
        id: u64,
        off: u64,
        len: usize,
    },
    Get {
        from: usize,
        id: u64,
        ro: u64,
        lo: u64,
        len: u64,
    },
}

/// Builds a mixed workload of `n` operations in both directions, registers the memory it
/// needs, submits it, runs to quiescence and checks every byte.
fn run_workload(sc: SimConfig, seed: u64, n: usize) -> Sim {
    let mut rng = Rng(seed ^ 0x77);
    let mut plan = Vec::new();
    let mut put_end = [0u64; 2]; // per target node
    let mut dst_end = [0u64; 2]; // per origin node
    let src_len: u64 = 2 << 20;
    for k in 0..n {
        let from = k % 2;
        let id = k as u64 + 1;
        match rng.below(10) {
            0 => {
                let len = size(&mut rng);
                plan.push(Plan::Put {
                    from,
                    id,
                    off: put_end[1 - from],
                    len,
                });
                put_end[1 - from] += len as u64;
            }
            1 => {
                let len = size(&mut rng) as u64;
                let ro = rng.below(src_len - len + 1);
                plan.push(Plan::Get {
                    from,
                    id,
                    ro,
                    lo: dst_end[from],
                    len,
                });
                dst_end[from] += len;
            }
            _ => plan.push(Plan::Send {
                from,
                id,
                tag: rng.below(256) as u8,
                len: size(&mut rng),
            }),
        }
    }
    let mut s = Sim::new(sc, seed);
    for i in 0..2 {
        let mut src = vec![0u8; src_len as usize];
        Rng(seed + i as u64).fill(&mut src);
        s.nodes[i].mem.insert(REG_SRC, src);
        s.nodes[i]
            .mem
            .insert(REG_PUT, vec![0u8; put_end[i] as usize]);
        s.nodes[i]
            .mem
            .insert(REG_DST, vec![0u8; dst_end[i] as usize]);
    }
    for p in &plan {
        match *p {
            Plan::Send { from, id, tag, len } => s.send(from, id, tag, len),
            Plan::Put { from, id, off, len } => s.put(from, id, REG_PUT, off, len),
            Plan::Get {
                from,
                id,
                ro,
                lo,
                len,
            } => s.get(from, id, REG_SRC, ro, REG_DST, lo, len),
        }
    }
    s.settle(&format!("seed {seed}"));
    // Node 0 keeps chunks where they arrive (Config::max_held), node 1 copies them.
    assert!(
        s.nodes[0].held_used > 0 && s.nodes[1].held_used == 0,
        "seed {seed}: kept pieces delivered {} / {}",
        s.nodes[0].held_used,
        s.nodes[1].held_used
    );
    // Puts: every byte of the target region equals what was put there.
    for p in &plan {
        if let Plan::Put { from, id, off, len } = *p {
            let m = &s.nodes[1 - from].mem[&REG_PUT];
            assert!(
                m[off as usize..off as usize + len] == pattern(id, len)[..],
                "seed {seed}: put {id} wrong"
            );
        }
    }
    s
}

fn check_loss(loss: f64, default_seed: u64, n: usize) {
    let seed = seed(default_seed);
    let s = run_workload(SimConfig::uniform(Link::nasty(loss), 4096), seed, n);
    let st: Vec<&Stats> = s.nodes.iter().map(|n| n.eng.stats()).collect();
    eprintln!(
        "loss {loss}: sim time {:.3} ms, steps {}, datagrams {}, stats {:?}",
        s.now as f64 / 1e6,
        s.steps,
        s.datagrams,
        st[0]
    );
    if loss > 0.0 {
        assert!(st.iter().all(|x| x.resends_fast + x.resends_timeout > 0));
    }
    if loss >= 0.1 {
        assert!(st.iter().all(|x| x.resends_fast > 0), "fast repair in use");
    }
    assert!(
        st.iter().all(|x| x.dup_recvs > 0 || loss == 0.0),
        "duplication was simulated"
    );
}

#[test]
fn exactly_once_lossless() {
    check_loss(0.0, 1, 3000);
}

#[test]
fn exactly_once_1pct_loss() {
    check_loss(0.01, 2, 3000);
}

#[test]
fn exactly_once_10pct_loss() {
    check_loss(0.10, 3, 3000);
}

#[test]
fn exactly_once_30pct_loss() {
    check_loss(0.30, 4, 2000);
}

#[test]
fn small_window_and_priority_loss_only() {
    let seed = seed(5);
    let mut sc = SimConfig::uniform(Link::nasty(0.05), 7);
    sc.links[0][0] = Link::nasty(0.5);
    sc.links[1][0] = Link::nasty(0.5);
    run_workload(sc, seed, 600);
}

#[test]
fn refused_get_and_put_complete_with_remote_refused() {
    let seed = seed(6);
    let mut s = Sim::new(SimConfig::uniform(Link::nasty(0.1), 4096), seed);
    // Node 1 registers a small put region only: a put beyond it is refused.
    s.nodes[1].mem.insert(REG_PUT, vec![0u8; 1000]);
    s.nodes[0].mem.insert(REG_DST, vec![0u8; 100]);
    s.nodes[1].mem.insert(REG_SRC, vec![7u8; 100_000]);
    s.put(0, 1, REG_PUT, 0, 1000); // fits
    s.put(0, 2, REG_PUT, 500, 100_000); // does not fit
    s.get(0, 3, REG_SRC, 0, REG_DST, 0, 100); // fits
    s.get(0, 4, REG_SRC, 0, REG_DST, 0, 50_000); // local destination too small: refused locally
    s.get(0, 5, 99, 0, REG_DST, 0, 10); // unknown remote region: refused by the target
    s.send(0, 6, 1, 10);
    assert!(s.run(1_000_000, 60_000_000_000), "seed {seed}");
    let mut errs: Vec<(u64, Failure)> = s
        .errors
        .iter()
        .map(|(_, e)| match e {
            Event::PutComplete { cookie, result, .. }
            | Event::GetComplete { cookie, result, .. } => (cookie.0, result.unwrap_err()),
            e => panic!("{e:?}"),
        })
        .collect();
    errs.sort_by_key(|e| e.0);
    assert_eq!(
        errs,
        vec![
            (2, Failure::RemoteRefused),
            (4, Failure::RemoteRefused),
            (5, Failure::RemoteRefused)
        ]
    );
    assert!(s.nodes[1].eng.stats().refused_writes >= 1);
    assert!(s.nodes[0].eng.stats().refused_writes >= 1);
    assert_eq!(&s.nodes[1].mem[&REG_PUT][..], &pattern(1, 1000)[..]);
}

#[test]
fn no_spurious_repair_without_loss_or_reordering() {
    let seed = seed(8);
    let s = run_workload(SimConfig::uniform(Link::lossy(0.0), 4096), seed, 1000);
    for n in &s.nodes {
        let st = n.eng.stats();
        eprintln!("{st:?}");
        assert_eq!(st.resends_fast + st.resends_timeout, 0, "{st:?}");
    }
}

/// 300 sends of mixed sizes from node 0 across a 1 Gb/s hop behind the 10 Gb/s NIC, with an
/// unbounded queue, run to the end (after `tweak`); node 0's statistics.
fn slow_hop_stream(seed: u64, tweak: impl FnOnce(&mut Sim)) -> Stats {
    let mut sc = SimConfig::uniform(Link::lossy(0.0), 4096);
    sc.bottleneck_ps_per_byte = 8_000;
    // Credits as on a udp socket, where a datagram is done once the kernel has it: the queue
    // grows with the window, not with the NIC's send queue.
    for c in &mut sc.cfg {
        c.data_credits = 4096;
    }
    let mut s = Sim::new(sc, seed);
    tweak(&mut s);
    let mut rng = Rng(seed);
    for id in 1..=300 {
        let len = size(&mut rng);
        s.send(0, id, 1, len);
    }
    s.settle(&format!("seed {seed}"));
    s.nodes[0].eng.stats().clone()
}

/// A hop slower than the NIC (a rate-limited link, 1 Gb/s behind 10 Gb/s) with an unbounded
/// queue: the window lets a burst of segments out at the NIC's rate, and the last of them wait
/// in the queue for longer than the retransmit timeout the sender had when it sent them.
/// Nothing is lost and the peer's acknowledgements keep arriving, so no timeout may fire and
/// nothing may be resent (RFC 6298, 5.3: the timer restarts when new data is acknowledged).
/// Before the timers took acknowledgement progress into account, 5 % of the segments were
/// resent (seed 31), every one of them for nothing.
#[test]
fn a_slow_hop_with_a_queue_is_not_taken_for_loss() {
    let seed = seed(31);
    let st = slow_hop_stream(seed, |_| {});
    eprintln!("{st:?}");
    assert!(
        st.sends > 1000,
        "seed {seed}: too little traffic to queue: {st:?}"
    );
    assert_eq!(
        st.resends_timeout + st.resends_fast,
        0,
        "seed {seed}: {} of {} segments resent: {st:?}",
        st.resends_timeout + st.resends_fast,
        st.sends
    );
}

/// The slow hop again, with one datagram only late: node 0's 20th data datagram is held back 2
/// ms, fast-repaired, and its late original arrives while the resend still waits at the back
/// of the queue. The ACK of that original names the resend (the segment's latest
/// transmission), but for the restart it counts only as far as the peer's echo vouches
/// (`Peer::acked_tx`): counted whole, every segment queued ahead of the resend would lose its
/// restart and time out (16-974 timeout resends over seeds 1-10 and 33, 548 with this seed).
/// One late datagram must cost one resend (without any restart, 587 timeout resends here).
#[test]
fn a_late_original_behind_a_slow_hop_does_not_end_the_restart() {
    let seed = seed(6);
    let st = slow_hop_stream(seed, |s| s.hold.push((0, 1, 20, 2_000_000)));
    eprintln!("{st:?}");
    assert_eq!(
        (st.resends_fast, st.resends_timeout),
        (1, 0),
        "seed {seed}: one late datagram must cost one fast repair and no timeout (of {} sent): \
         {st:?}",
        st.sends
    );
}

/// The other side of the rule above: a tiny message lost in a stream of them (the priority
/// channel, which fast repair leaves to the timeout) is resent after its own timeout, although
/// the later messages keep being acknowledged. Were every new acknowledgement to restart its
/// timer, it would wait until the stream paused or the window filled (a draft did so: the
/// message below was still not resent 9 ms after it was lost).
#[test]
fn a_lost_tiny_message_is_not_held_back_by_the_acks_of_later_ones() {
    let mut s = Sim::new(SimConfig::uniform(Link::lossy(0.0), 4096), seed(32));
    // Node 0's 20th priority datagram, the 20th message: one every 50 us, far less than the
    // retransmit timeout's floor (500 us) apart.
    s.lose.push((0, 0, 20));
    for id in 1..=400u64 {
        s.send(0, id, 1, 16);
        s.run_to(id * 50_000);
        if id == 200 {
            let st = s.nodes[0].eng.stats();
            assert_eq!(
                st.resends_timeout, 1,
                "the message lost at 1 ms is not resent at 10 ms: {st:?}"
            );
        }
    }
    s.settle("paced stream");
    let st = s.nodes[0].eng.stats();
    assert_eq!(st.resends_timeout + st.resends_fast, 1, "{st:?}");
}

/// Reordering without loss (a quarter of the datagrams held back by up to 6 one-way delays, like
/// netem's `delay 300us reorder 25%`): every repair is spurious. The receiver reports each
/// duplicate it gets (D-SACK, docs/wire.md §6), so the sender widens its reordering allowance
/// and stops repairing what is only late.
#[test]
fn reordering_without_loss_is_not_repaired_for_long() {
    let seed = seed(21);
    let link = Link {
        reorder: 0.25,
        reorder_ns: 60_000,
        ..Link::lossy(0.0)
    };
    let s = run_workload(SimConfig::uniform(link, 4096), seed, 1500);
    for n in &s.nodes {
        let st = n.eng.stats();
        eprintln!("{st:?}");
        let resent = st.resends_fast + st.resends_timeout;
        // Without the reports 9-14 % of the segments were resent (seeds 1, 2, 7, 8, 11, 21);
        // with them 0.3-2.5 % (seeds 1-12, 21), most in the first round trips, while the
        // allowance widens.
        assert!(
            resent * 25 <= st.sends,
            "seed {seed}: {resent} of {} segments resent for nothing: {st:?}",
            st.sends
        );
        assert!(
            st.spurious_resends > 0 && st.spurious_resends <= resent,
            "seed {seed}: the duplicates were reported: {st:?}"
        );
    }
}
