//! Several peers at once in the simulator: every node sends to every other at the same time,
//! and a peer keeps the data channel for a turn of `Config::data_turn` segments, as the Open
//! MPI edge sets it where one system call sends a run of datagrams to one peer. A halo
//! exchange is this traffic; the two-node simulation has one peer per engine and never
//! switches. Replay a failure with `SIM_SEED=<printed seed> cargo test --release --test
//! proto_sim_peers`.

mod sim;

use sim::*;

fn size(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=5 => rng.below(2000) as usize,
        6..=8 => 2000 + rng.below(30_000) as usize,
        _ => 32_000 + rng.below(200_000) as usize,
    }
}

/// `nodes` nodes, each sending `per_pair` messages of random sizes to every other, all queued
/// before the first pass; runs to quiescence and checks that every message arrived once,
/// byte-exact, from the node that sent it (the simulator's expectations), and that nothing
/// failed or stayed behind (`Sim::settle`).
fn mesh(nodes: usize, link: Link, turn: u32, per_pair: usize, seed: u64) {
    let mut sc = SimConfig::nodes(nodes, link, 256);
    for c in &mut sc.cfg {
        c.data_turn = turn;
    }
    let mut s = Sim::new(sc, seed);
    let mut rng = Rng(seed ^ 0x9e11);
    let mut id = 1;
    for _ in 0..per_pair {
        for from in 0..nodes {
            for to in (0..nodes).filter(|&to| to != from) {
                let len = size(&mut rng);
                s.send_to(from, to, id, rng.below(256) as u8, len);
                id += 1;
            }
        }
    }
    s.settle(&format!("seed {seed}, turn {turn}"));
    for (i, n) in s.nodes.iter().enumerate() {
        assert_eq!(
            n.delivered,
            (per_pair * (nodes - 1)) as u64,
            "seed {seed}: node {i}'s deliveries"
        );
    }
}

#[test]
fn every_message_between_four_peers_arrives_once_whatever_the_turn() {
    let seed = seed(31);
    for turn in [1, 8, 44] {
        for (what, link) in [
            ("clean", Link::lossy(0.0)),
            ("5 % loss, duplicates, reordering", Link::nasty(0.05)),
            ("20 % loss", Link::lossy(0.2)),
        ] {
            eprintln!("turn {turn}, {what}");
            mesh(4, link, turn, 12, seed + turn as u64);
        }
    }
}

/// Lengths of the runs of consecutive data datagrams node `from` sent to one peer.
fn runs(trace: &[(usize, usize, u8)], from: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &(f, to, c) in trace {
        if f != from || c != 1 {
            continue;
        }
        match out.last_mut() {
            Some((peer, n)) if *peer == to => *n += 1,
            _ => out.push((to, 1)),
        }
    }
    out
}

#[test]
fn peers_with_data_take_turns_of_the_configured_length() {
    // Node 0 streams to nodes 1 and 2 at once, nothing lost, the window (4096) never closes:
    // while both have data every turn is exactly `turn` datagrams long; node 1, which has
    // less, ends with what is left of its last turn, and node 2, alone from then on, sends
    // the rest in one run.
    for turn in [1u32, 8, 44] {
        let mut sc = SimConfig::nodes(3, Link::lossy(0.0), 4096);
        for c in &mut sc.cfg {
            c.data_turn = turn;
        }
        let mut s = Sim::new(sc, 7);
        s.trace = Some(Vec::new());
        for k in 0..30u64 {
            if k < 10 {
                s.send_to(0, 1, 100 + k, 1, 64 << 10);
            }
            s.send_to(0, 2, 200 + k, 1, 64 << 10);
        }
        assert!(
            s.run(1_000_000, 10_000_000_000),
            "turn {turn}: no quiescence"
        );
        let r = runs(s.trace.as_ref().unwrap(), 0);
        let turn = turn as usize;
        let [body @ .., (p1, end1), (p2, rest)] = &r[..] else {
            panic!("turn {turn}: too few runs: {r:?}")
        };
        assert!(body.len() >= 4, "turn {turn}: the peers alternated: {r:?}");
        assert!(
            body.iter().all(|&(_, n)| n == turn),
            "turn {turn}: every turn while both had data is {turn} datagrams: {body:?}"
        );
        assert!(
            (*p1, *p2) == (1, 2) && *end1 <= turn && *rest > turn,
            "turn {turn}: node 1 ends within a turn, node 2 goes on alone: {:?}",
            &r[r.len() - 2..]
        );
    }
}
