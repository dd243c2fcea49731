//! Replay after sequence wrap (docs/robustness.md, `replay_wrapped`): datagrams captured
//! from a live pair of engines are replayed after the 16-bit sequence space has wrapped
//! once and three times. With wire v1 their 16-bit numbers would then lie inside the windows
//! again and be taken as fresh; with v2's epochs they must be dropped and counted, nothing
//! may be delivered twice and no segment may be released by a replayed ACK.

use usnic_rs::proto::wire::{self, Header, Kind};
use usnic_rs::proto::*;

const ISN_A: u16 = 100;

fn cfg(id: u64, isn: u16) -> Config {
    Config {
        local_id: id,
        local_key: id * 1000,
        isn,
        ..Config::default()
    }
}

struct Pair {
    a: Engine,
    b: Engine,
    ab: PeerId,
    ba: PeerId,
    /// Simulated time in ns.
    now: u64,
}

impl Pair {
    fn new() -> Pair {
        let (ca, cb) = (cfg(1, ISN_A), cfg(2, 60_000));
        let mut a = Engine::new(ca.clone()).unwrap();
        let mut b = Engine::new(cb.clone()).unwrap();
        let ab = a.add_peer(Instant(0), cb.peer_info());
        let ba = b.add_peer(Instant(0), ca.peer_info());
        Pair {
            a,
            b,
            ab,
            ba,
            now: 0,
        }
    }

    fn t(&self) -> Instant {
        Instant(self.now)
    }
}

/// Every datagram `e` has on both channels at `t` (credits returned at once).
fn tx(e: &mut Engine, t: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    for ch in [Channel::Priority, Channel::Data] {
        while let Some(x) = e.poll_transmit(t, ch, &mut buf) {
            e.handle_send_complete(ch);
            out.push(buf[..x.len].to_vec());
        }
    }
    out
}

fn events(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

fn hdr(d: &[u8]) -> Header {
    wire::parse(d).expect("engine emits valid datagrams").0
}

/// What B did with A's datagrams: delivered fragments (payload bytes), writes, events.
#[derive(Default)]
struct AtB {
    delivered: Vec<Vec<u8>>,
    writes: usize,
    events: Vec<Event>,
}

/// Hands `dgs` (from A) to B.
fn to_b(p: &mut Pair, dgs: &[Vec<u8>]) -> AtB {
    let mut r = AtB::default();
    for d in dgs {
        match p.b.handle_datagram(p.t(), Channel::Data, d) {
            RxOutcome::Deliver { peer, payload, .. } => {
                assert_eq!(peer, p.ba);
                r.delivered.push(d[payload].to_vec())
            }
            RxOutcome::Write { .. } => r.writes += 1,
            _ => {}
        }
    }
    r.events = events(&mut p.b);
    r
}

/// B's acknowledgements (after its ACK delay) back to A; returns them and A's events.
fn acks_to_a(p: &mut Pair) -> (Vec<Vec<u8>>, Vec<Event>) {
    p.now += 100_000;
    p.b.handle_timeout(p.t());
    let acks = tx(&mut p.b, Instant(p.now));
    for a in &acks {
        p.a.handle_datagram(p.t(), Channel::Priority, a);
    }
    (acks, events(&mut p.a))
}

fn completions(ev: &[Event]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, Event::SendComplete { result: Ok(()), .. }))
        .count()
}

/// Sends `n` one-byte fragments from A to B without loss; checks each is delivered once
/// and completed once.
fn drive(p: &mut Pair, n: u64) {
    let mut left = n;
    while left > 0 {
        let k = left.min(3000);
        for i in 0..k {
            p.a.submit_send(p.t(), p.ab, 7, vec![i as u8], Cookie(i))
                .unwrap();
        }
        p.now += 10_000;
        let dgs = tx(&mut p.a, Instant(p.now));
        assert_eq!(dgs.len() as u64, k);
        let at_b = to_b(p, &dgs);
        assert_eq!(at_b.delivered.len() as u64, k);
        let (_, ev) = acks_to_a(p);
        assert_eq!(completions(&ev) as u64, k);
        assert!(p.a.is_idle(p.ab));
        left -= k;
    }
}

/// Datagrams recorded in epoch 0.
struct Captured {
    /// Sequenced datagrams from A to B (a Frag, the Chunks of one fragment, a Put's segments).
    seqd: Vec<Vec<u8>>,
    /// Standalone ACKs from B to A.
    acks: Vec<Vec<u8>>,
    /// Segments A had sent by the end of the capture.
    sent: u64,
}

fn capture(p: &mut Pair) -> Captured {
    let mut seqd = Vec::new();
    let mut acks = Vec::new();
    let mut sent = 0u64;
    // A Frag alone, acknowledged alone (so one captured ACK acknowledges only it).
    p.a.submit_send(p.t(), p.ab, 1, b"frag-payload".to_vec(), Cookie(900))
        .unwrap();
    let d = tx(&mut p.a, Instant(p.now));
    assert_eq!(d.len(), 1);
    assert_eq!(hdr(&d[0]).kind, Kind::Frag);
    assert_eq!(to_b(p, &d).delivered, vec![b"frag-payload".to_vec()]);
    let (a, ev) = acks_to_a(p);
    assert_eq!(completions(&ev), 1);
    sent += 1;
    seqd.extend(d);
    acks.extend(a);
    // A chunked fragment (3 chunks).
    let big: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    p.a.submit_send(p.t(), p.ab, 2, big.clone(), Cookie(901))
        .unwrap();
    let d = tx(&mut p.a, Instant(p.now));
    assert!(d.len() >= 3 && d.iter().all(|x| hdr(x).kind == Kind::Chunk));
    let r = to_b(p, &d);
    assert!(matches!(&r.events[..], [Event::Deliver { data, .. }] if *data == big));
    let (a, ev) = acks_to_a(p);
    assert_eq!(completions(&ev), 1);
    sent += d.len() as u64;
    seqd.extend(d);
    acks.extend(a);
    // A PUT (2 segments).
    p.a.submit_put(p.t(), p.ab, 5, 0, vec![0xab; 2000], Cookie(902))
        .unwrap();
    let d = tx(&mut p.a, Instant(p.now));
    assert!(d.len() >= 2 && d.iter().all(|x| hdr(x).kind == Kind::Put));
    assert_eq!(to_b(p, &d).writes, d.len());
    let (a, _) = acks_to_a(p);
    sent += d.len() as u64;
    seqd.extend(d);
    acks.extend(a);
    assert!(p.a.is_idle(p.ab));
    assert!(!acks.is_empty());
    assert!(acks.iter().all(|x| hdr(x).kind == Kind::Ack));
    Captured { seqd, acks, sent }
}

/// Captures, wraps `wraps` times so that B's receive window starts exactly at the captured
/// Frag's 16-bit number, and replays everything.
fn replay_after(wraps: u64) {
    let mut p = Pair::new();
    let cap = capture(&mut p);
    let first = hdr(&cap.seqd[0]).seq;
    assert_eq!(first, ISN_A as u32, "captured in epoch 0");
    drive(&mut p, (wraps << 16) - cap.sent);
    assert_eq!(p.a.stats().old_acks, 0, "clean traffic across wraps");
    assert_eq!(p.b.stats().oow_low_recvs + p.b.stats().dup_recvs, 0);

    // A's next segment has the captured Frag's 16-bit number, `wraps` epochs later: with
    // 16-bit numbers alone every captured segment would now be inside B's window.
    p.a.submit_send(p.t(), p.ab, 3, b"probe".to_vec(), Cookie(903))
        .unwrap();
    p.now += 10_000;
    let probe = tx(&mut p.a, Instant(p.now));
    assert_eq!(probe.len(), 1);
    let ph = hdr(&probe[0]);
    assert_eq!(ph.seq as u16, first as u16);
    assert_eq!(ph.seq, first + (wraps << 16) as u32);

    // 1. Replayed ACKs while A has the probe in flight (every captured cumulative ACK
    //    acknowledges it in 16-bit terms): ignored, nothing released.
    let old = p.a.stats().old_acks;
    for a in &cap.acks {
        assert_eq!(
            p.a.handle_datagram(p.t(), Channel::Priority, a),
            RxOutcome::Consumed
        );
    }
    assert_eq!(p.a.stats().old_acks - old, cap.acks.len() as u64);
    assert!(
        events(&mut p.a).is_empty(),
        "a replayed ACK completed a send"
    );
    assert!(!p.a.is_idle(p.ab), "a replayed ACK released the probe");

    // 2. Replayed segments before the probe arrives (B's window starts at their numbers).
    let low = p.b.stats().oow_low_recvs;
    for d in &cap.seqd {
        assert_eq!(
            p.b.handle_datagram(p.t(), Channel::Data, d),
            RxOutcome::Dropped(DropReason::OutOfWindow)
        );
    }
    assert_eq!(p.b.stats().oow_low_recvs - low, cap.seqd.len() as u64);
    assert!(events(&mut p.b).is_empty(), "nothing delivered twice");

    // 3. The probe itself is still new (its number was not consumed by the replay).
    let r = to_b(&mut p, &probe);
    assert_eq!(r.delivered, vec![b"probe".to_vec()]);
    let (_, ev) = acks_to_a(&mut p);
    assert_eq!(completions(&ev), 1);
    assert!(p.a.is_idle(p.ab));

    // 4. Again once the window has moved past the captured numbers (a v1 receiver would
    //    call them duplicates; they are an epoch old).
    let low = p.b.stats().oow_low_recvs;
    let r = to_b(&mut p, &cap.seqd);
    assert!(r.delivered.is_empty() && r.writes == 0 && r.events.is_empty());
    assert_eq!(p.b.stats().oow_low_recvs - low, cap.seqd.len() as u64);

    // 5. Traffic still flows both ways of the replays.
    drive(&mut p, 5000);
    assert_eq!(p.b.stats().malformed_recvs, 0);
    assert_eq!(p.a.stats().peers_failed + p.b.stats().peers_failed, 0);
}

#[test]
fn replay_after_one_wrap_dropped_and_counted() {
    replay_after(1);
}

#[test]
fn replay_after_three_wraps_dropped_and_counted() {
    replay_after(3);
}

/// An ACK forged with the live epoch but naming segments never sent, or a sender a window
/// ahead of what we received, releases nothing.
#[test]
fn forged_acks_beyond_the_window_release_nothing() {
    let mut p = Pair::new();
    drive(&mut p, 70_000);
    p.a.submit_send(p.t(), p.ab, 3, b"x".to_vec(), Cookie(1))
        .unwrap();
    let d = tx(&mut p.a, Instant(p.now));
    let seq = hdr(&d[0]).seq;
    let b_next = 60_000u32; // B sent no sequenced segment: its snd_next is its ISN.
    let forge = |cum: u32, snd_next: u32| {
        let mut h = Header::new(Kind::Ack);
        h.src = 2;
        h.key = 1000;
        h.ack = Some(wire::AckInfo {
            cum,
            sack: u32::MAX,
            snd_next,
            dsack: None,
            echo: 0,
            held: false,
        });
        let mut b = vec![0u8; h.header_len()];
        h.emit(&mut b);
        b
    };
    let old = p.a.stats().old_acks;
    for f in [
        forge(seq + 1, b_next),         // acknowledges the unsent next segment
        forge(seq, b_next + 4096 + 65), // a window and more refusals than it may owe ahead
        forge(seq - (1 << 16), b_next), // one epoch old
        forge(seq + (1 << 16), b_next), // one epoch ahead
    ] {
        p.a.handle_datagram(p.t(), Channel::Priority, &f);
    }
    assert_eq!(p.a.stats().old_acks - old, 4);
    assert!(events(&mut p.a).is_empty());
    assert!(!p.a.is_idle(p.ab));
    // The genuine ACK still completes the send exactly once.
    to_b(&mut p, &d);
    let (_, ev) = acks_to_a(&mut p);
    assert_eq!(completions(&ev), 1);
}
