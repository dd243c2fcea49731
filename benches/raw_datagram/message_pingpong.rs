//! The floor of a latency test above one datagram: a message of 1 KiB to 4 MiB cut into the
//! BTL's datagrams, sent whole and echoed whole, with no reliability and no copy in user space
//! (the payload stays in the send and receive buffers). fi_pingpong stops at one datagram; this
//! is what the datagram path itself allows an MPI ping-pong of a large message, and so how much of
//! usnic's latency there is the transport's.
//!
//! Every datagram carries its round and its message's datagram count in its first 8 bytes, so a
//! round whose echo does not come back (a datagram lost) is counted and left behind: the next
//! round's datagrams are told apart from its late ones.
use super::{
    flush, message_datagrams, now, pct, try_send_filled, Channel, Completion, Module, PeerAddr,
};
use std::thread;

/// Message sizes, as `bench_latency`'s from 1 KiB to 4 MiB.
fn sizes() -> impl Iterator<Item = usize> {
    (10..=22).map(|s| 1usize << s)
}

/// Round trips per size: `iters` for small messages, about 64 MiB each way above that, and
/// never fewer than 50.
fn rounds(msg: usize, iters: usize) -> usize {
    iters.min((64 << 20) / msg).max(50)
}

/// Each size is warmed up for this many rounds and this long, whichever takes longer: the first
/// thousand 1 KiB round trips on one host run about 1.3x slower while the scheduler settles
/// the two busy threads on their cores.
const WARMUP_ROUNDS: usize = 20;
const WARMUP_NS: u64 = 50_000_000;

/// A round whose echo has not come back after this long is counted lost.
const LOST_AFTER_NS: u64 = 200_000_000;

/// Rounds lost one after another before a size is given up (the echo is gone, or the path
/// drops every message this long): 4 s rather than hours of 200 ms waits.
const GIVE_UP_AFTER_LOST: u32 = 20;

fn tag(round: u32, count: u32) -> [u8; 8] {
    let mut t = [0; 8];
    t[..4].copy_from_slice(&round.to_le_bytes());
    t[4..].copy_from_slice(&count.to_le_bytes());
    t
}

fn parse_tag(b: &[u8]) -> Option<(u32, u32)> {
    let t: [u8; 8] = b.get(..8)?.try_into().ok()?;
    let word = |i: usize| u32::from_le_bytes(t[i..i + 4].try_into().unwrap());
    Some((word(0), word(4)))
}

/// Sends one message of datagrams `lens` as round `round`, as one transmit pass of the BTL's.
/// Datagrams read while waiting for a send credit can only be a lost round's: dropped.
fn send_message(m: &mut Module, to: &PeerAddr, lens: &[usize], round: u32) {
    let t = tag(round, lens.len() as u32);
    let mut out = Vec::new();
    for &len in lens {
        while !try_send_filled(m, Channel::Data, to, len, |b| b[..8].copy_from_slice(&t)) {
            read(m, &mut out, &mut |_, _, _| {});
        }
    }
    flush(m);
}

/// Reads the data channel once, handing each datagram's (round, count, length) to `f`; false
/// when nothing arrived.
fn read(m: &mut Module, out: &mut Vec<Completion>, f: &mut impl FnMut(u32, u32, usize)) -> bool {
    out.clear();
    m.poll(Channel::Data, 64, out).expect("poll");
    let mut got = false;
    for c in out.iter() {
        match *c {
            Completion::Recv { buf, len } => {
                if let Some((round, count)) = parse_tag(m.rx_bytes(Channel::Data, buf, len)) {
                    f(round, count, len);
                }
                m.repost(Channel::Data, buf);
                got = true;
            }
            Completion::SendDone { .. } => {}
            Completion::Error { ref error, .. } => panic!("{error}"),
        }
    }
    if got {
        m.flush_reposts().expect("repost");
    }
    got
}

/// One message size's result: half round-trip times in us, and rounds lost.
pub struct Row {
    msg: usize,
    datagrams: usize,
    p50: f64,
    p99: f64,
    mean: f64,
    lost: usize,
    rounds: usize,
}

/// Prints the table: the heading, then a row per size (bench/summarize.py reads the mean).
pub fn print(rows: &[Row]) {
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "message ping-pong, data channel", "p50 us", "p99 us", "mean us"
    );
    for r in rows {
        println!("{}", r.line());
    }
}

impl Row {
    fn line(&self) -> String {
        let lost = if self.lost > 0 {
            format!("   ({} of {} rounds lost)", self.lost, self.rounds)
        } else {
            String::new()
        };
        format!(
            "{:<34} {:>10.2} {:>10.2} {:>10.2}{lost}",
            format!(
                "ping-pong, {} B in {} datagram{}",
                self.msg,
                self.datagrams,
                if self.datagrams == 1 { "" } else { "s" }
            ),
            self.p50,
            self.p99,
            self.mean
        )
    }
}

/// Ping-pongs each message size with the echo at `to` (datagrams of at most `mtu` bytes).
pub fn initiate(m: &mut Module, to: &PeerAddr, mtu: usize, iters: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut round = 0u32;
    let mut out = Vec::new();
    for msg in sizes() {
        let lens = message_datagrams(msg, mtu);
        if lens.iter().any(|&l| l < 8) {
            // No room for the tag; never the case for the BTL's datagram sizes.
            continue;
        }
        let n = rounds(msg, iters);
        let (mut samples, mut lost) = (Vec::with_capacity(n), 0);
        let (warm_from, mut warm, mut lost_in_a_row) = (now().0, 0, 0);
        while samples.len() + lost < n {
            round += 1;
            let t0 = now().0;
            send_message(m, to, &lens, round);
            let mut back = 0;
            let back_at = loop {
                let r = round;
                let got = read(m, &mut out, &mut |rr, _, _| back += usize::from(rr == r));
                let t = now().0;
                if back == lens.len() {
                    break Some(t);
                }
                if t - t0 > LOST_AFTER_NS {
                    break None;
                }
                if !got {
                    idle_wait();
                }
            };
            lost_in_a_row = if back_at.is_some() {
                0
            } else {
                lost_in_a_row + 1
            };
            if lost_in_a_row == GIVE_UP_AFTER_LOST {
                samples.clear();
                break;
            }
            if warm < WARMUP_ROUNDS || t0 - warm_from < WARMUP_NS {
                warm += 1;
                continue;
            }
            match back_at {
                Some(t) => samples.push((t - t0) / 2),
                None => lost += 1,
            }
        }
        samples.sort_unstable();
        if samples.is_empty() {
            // Not a row: the summary must not take a size the path did not carry for a floor.
            println!("ping-pong, {msg} B: given up, {GIVE_UP_AFTER_LOST} rounds lost in a row");
            continue;
        }
        rows.push(Row {
            msg,
            datagrams: lens.len(),
            p50: pct(&samples, 0.5),
            p99: pct(&samples, 0.99),
            mean: samples.iter().sum::<u64>() as f64 / samples.len() as f64 / 1000.0,
            lost,
            rounds: n,
        });
    }
    rows
}

/// The echo gives up after this long without a datagram (the initiator is gone).
const ECHO_IDLE_NS: u64 = 30_000_000_000;

/// Sends every whole message back to `to`, until `stop` says so; `stop` is asked only while
/// nothing arrives, and not on every empty read, so that it does not slow the echo.
pub fn echo(m: &mut Module, to: &PeerAddr, mut stop: impl FnMut(&mut Module) -> bool) {
    let mut out = Vec::new();
    let mut last = now().0;
    let (mut cur, mut lens) = (0u32, Vec::new());
    let mut ready = Vec::new();
    let mut idle = 0u32;
    loop {
        let got = read(m, &mut out, &mut |round, count, len| {
            if round != cur {
                // A new round: what is left of the last one was lost.
                cur = round;
                lens.clear();
            }
            lens.push(len);
            if lens.len() == count as usize {
                ready.push((round, std::mem::take(&mut lens)));
            }
        });
        for (round, l) in ready.drain(..) {
            send_message(m, to, &l, round);
        }
        if got {
            idle = 0;
            last = now().0;
            continue;
        }
        idle += 1;
        if idle.is_multiple_of(64) && (stop(m) || now().0 - last > ECHO_IDLE_NS) {
            return;
        }
        idle_wait();
    }
}

/// Between empty reads: spin when each side has a core of its own, as fi_pingpong does (a
/// `sched_yield` per empty read made 1 KiB round trips about 1.25x slower), and let the
/// other side run when they share one.
fn idle_wait() {
    static SPIN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SPIN.get_or_init(|| thread::available_parallelism().is_ok_and(|n| n.get() >= 2)) {
        std::hint::spin_loop();
    } else {
        thread::yield_now();
    }
}
