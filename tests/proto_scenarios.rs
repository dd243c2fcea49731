//! Scenario tests written as packet traces with explicit timestamps (µs).
//! Two engines, A and B; every datagram is moved by hand, so each test reads as a trace.

use usnic_rs::proto::wire::{self, Header, Kind};
use usnic_rs::proto::*;

fn us(t: u64) -> Instant {
    Instant(t * 1_000)
}

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
    /// B as seen by A, and A as seen by B.
    ab: PeerId,
    ba: PeerId,
}

fn pair_with(ca: Config, cb: Config) -> Pair {
    let mut a = Engine::new(ca.clone()).unwrap();
    let mut b = Engine::new(cb.clone()).unwrap();
    let ab = a.add_peer(us(0), cb.peer_info());
    let ba = b.add_peer(us(0), ca.peer_info());
    Pair { a, b, ab, ba }
}

fn pair() -> Pair {
    pair_with(cfg(1, 100), cfg(2, 200))
}

/// A pair whose A copies no lent send right after it left (`Config::lent_copy_below` 0), so
/// its lent sends wait for their ACK or `Config::lent_hold`.
fn pair_holding() -> Pair {
    let ca = Config {
        lent_copy_below: 0,
        ..cfg(1, 100)
    };
    pair_with(ca, cfg(2, 200))
}

/// Every datagram `e` has for `ch` at `t` (credits are returned at once).
fn tx(e: &mut Engine, t: Instant, ch: Channel) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    while let Some(x) = e.poll_transmit(t, ch, &mut buf) {
        e.handle_send_complete(ch);
        out.push(buf[..x.len].to_vec());
    }
    out
}

fn hdr(d: &[u8]) -> Header {
    wire::parse(d).expect("engine emits valid datagrams").0
}

fn events(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// The events of one send to `peer` that completed well.
fn sent_ok(peer: PeerId, cookie: u64) -> Vec<Event> {
    vec![Event::SendComplete {
        peer,
        cookie: Cookie(cookie),
        result: Ok(()),
    }]
}

/// Send `cookie` to `peer` completes on the timer pass at `t` µs, and not on one a
/// microsecond earlier.
#[track_caller]
fn completes_at(e: &mut Engine, peer: PeerId, t: u64, cookie: u64) {
    e.handle_timeout(us(t - 1));
    assert!(events(e).is_empty(), "completed before t={t} us");
    e.handle_timeout(us(t));
    assert_eq!(events(e), sent_ok(peer, cookie));
}

#[test]
fn delayed_ack_fires_after_ack_delay() {
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 7, b"hi".to_vec(), Cookie(1))
        .unwrap();
    assert!(
        tx(&mut p.a, us(0), Channel::Data).is_empty(),
        "tiny goes on priority"
    );
    let d = tx(&mut p.a, us(0), Channel::Priority);
    assert_eq!(d.len(), 1);
    assert_eq!(hdr(&d[0]).kind, Kind::Frag);
    // t=10: B receives and delivers in place.
    match p.b.handle_datagram(us(10), Channel::Priority, &d[0]) {
        RxOutcome::Deliver { peer, tag, payload } => {
            assert_eq!((peer, tag, &d[0][payload]), (p.ba, 7, &b"hi"[..]));
        }
        o => panic!("{o:?}"),
    }
    assert!(
        tx(&mut p.b, us(10), Channel::Priority).is_empty(),
        "ACK is delayed"
    );
    assert_eq!(p.b.poll_timeout(), Some(us(40)), "ack_delay is 30 µs");
    p.b.handle_timeout(us(39));
    assert!(tx(&mut p.b, us(39), Channel::Priority).is_empty());
    p.b.handle_timeout(us(40));
    let acks = tx(&mut p.b, us(40), Channel::Priority);
    assert_eq!(acks.len(), 1);
    let h = hdr(&acks[0]);
    assert_eq!((h.kind, h.ack.unwrap().cum), (Kind::Ack, 100));
    assert_eq!(p.b.stats().acks_alone, 1);
    // t=50: A gets the ACK and completes.
    assert_eq!(
        p.a.handle_datagram(us(50), Channel::Priority, &acks[0]),
        RxOutcome::Consumed
    );
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 1));
    assert!(p.a.is_idle(p.ab));
    assert_eq!(p.a.poll_timeout(), None, "nothing left to time");
}

#[test]
fn piggybacking_suppresses_the_standalone_ack() {
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 1, vec![5; 1000], Cookie(1))
        .unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    assert!(matches!(
        p.b.handle_datagram(us(10), Channel::Data, &d[0]),
        RxOutcome::Deliver { .. }
    ));
    // t=20: B has its own fragment for A; the owed ACK rides on it.
    p.b.submit_send(us(20), p.ba, 2, vec![6; 1000], Cookie(9))
        .unwrap();
    let r = tx(&mut p.b, us(20), Channel::Data);
    assert_eq!(r.len(), 1);
    assert_eq!(hdr(&r[0]).ack.unwrap().cum, 100);
    assert_eq!(p.b.stats().acks_piggybacked, 1);
    p.b.handle_timeout(us(40));
    assert!(
        tx(&mut p.b, us(40), Channel::Priority).is_empty(),
        "no standalone ACK"
    );
    assert_eq!(p.b.stats().acks_alone, 0);
    assert!(matches!(
        p.a.handle_datagram(us(30), Channel::Data, &r[0]),
        RxOutcome::Deliver { .. }
    ));
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 1));
}

#[test]
fn one_loss_repaired_in_one_round_trip() {
    let mut p = pair();
    let d = send_n(&mut p, 10, 0);
    // The third datagram is lost; the others arrive at t=10 and every ACK B sends arrives
    // back at A 10 µs later (RTT 20 µs).
    for (i, x) in d.iter().enumerate() {
        if i != 2 {
            p.b.handle_datagram(us(10), Channel::Data, x);
        }
    }
    let acks = tx(&mut p.b, us(10), Channel::Priority);
    assert_eq!(acks.len(), 1, "a new gap triggers an immediate ACK");
    let h = hdr(&acks[0]);
    assert_eq!(
        (h.ack.unwrap().cum, h.ack.unwrap().sack),
        (101, 0b111_1111),
        "cum + SACK"
    );
    for a in &acks {
        p.a.handle_datagram(us(20), Channel::Priority, a);
    }
    let completed = events(&mut p.a).len();
    assert_eq!(
        completed, 9,
        "everything but the lost one is acknowledged (cumulative + SACK)"
    );
    // Repair is due a quarter RTT later, long before any retransmit timeout (>= 500 µs).
    let due = p.a.poll_timeout().unwrap();
    assert!(due <= us(25), "repair due at {due:?}");
    p.a.handle_timeout(due);
    let r = tx(&mut p.a, due, Channel::Data);
    assert_eq!(r.len(), 1);
    assert_eq!(
        hdr(&r[0]).seq,
        hdr(&d[2]).seq,
        "the lost segment, same sequence number"
    );
    // Bytes 32..40 are epochs and the duplicate report, 40..48 the transmission numbers.
    assert_eq!(&r[0][32..40], &d[2][32..40], "same epochs");
    assert_eq!(&r[0][48..], &d[2][48..], "same bytes");
    assert_eq!(
        hdr(&r[0]).tx,
        hdr(&d[9]).tx + 1,
        "the resend takes the next transmission number"
    );
    assert_eq!(
        (p.a.stats().resends_fast, p.a.stats().resends_timeout),
        (1, 0)
    );
    // B gets it, ACKs at once (it fills the gap), A completes the last fragment.
    assert!(matches!(
        p.b.handle_datagram(us(35), Channel::Data, &r[0]),
        RxOutcome::Deliver { .. }
    ));
    let a2 = tx(&mut p.b, us(35), Channel::Priority);
    assert_eq!(a2.len(), 1);
    p.a.handle_datagram(us(45), Channel::Priority, &a2[0]);
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 2));
    assert!(p.a.is_idle(p.ab));
}

#[test]
fn late_ack_after_a_retransmit_is_harmless() {
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 1, b"x".to_vec(), Cookie(1))
        .unwrap();
    let d = tx(&mut p.a, us(0), Channel::Priority);
    p.b.handle_datagram(us(10), Channel::Priority, &d[0]);
    p.b.handle_timeout(us(40));
    let ack = tx(&mut p.b, us(40), Channel::Priority);
    assert_eq!(ack.len(), 1);
    // The ACK is slow; A's retransmit timeout (initial 5 ms) fires first.
    assert_eq!(p.a.poll_timeout(), Some(us(5_000)));
    p.a.handle_timeout(us(5_000));
    assert!(
        tx(&mut p.a, us(5_000), Channel::Priority).is_empty(),
        "resends never on priority"
    );
    let r = tx(&mut p.a, us(5_000), Channel::Data);
    assert_eq!(r.len(), 1);
    assert_eq!(p.a.stats().resends_timeout, 1);
    // The late ACK arrives: completion, once.
    p.a.handle_datagram(us(5_001), Channel::Priority, &ack[0]);
    assert_eq!(events(&mut p.a).len(), 1);
    // B sees the retransmission as a duplicate and re-ACKs at once; A shrugs.
    assert_eq!(
        p.b.handle_datagram(us(5_010), Channel::Data, &r[0]),
        RxOutcome::Dropped(DropReason::Duplicate)
    );
    let ack2 = tx(&mut p.b, us(5_010), Channel::Priority);
    assert_eq!(ack2.len(), 1);
    assert_eq!(
        hdr(&ack2[0]).ack.unwrap().dsack,
        Some(hdr(&r[0]).seq as u16),
        "the re-ACK names the duplicate"
    );
    assert_eq!(
        p.a.handle_datagram(us(5_020), Channel::Priority, &ack2[0]),
        RxOutcome::Consumed
    );
    assert!(events(&mut p.a).is_empty(), "no second completion");
    assert_eq!(
        p.a.stats().spurious_resends,
        1,
        "A learns its resend was needless"
    );
    assert!(p.a.is_idle(p.ab));
    assert_eq!(
        p.a.poll_timeout(),
        None,
        "the room was checked out; no stray timer"
    );
}

#[test]
fn sequence_wrap_inside_a_long_fragment_reassembled_in_reverse() {
    let mut p = pair_with(cfg(1, 65_530), cfg(2, 7));
    let data: Vec<u8> = (0..30_000u32).map(|i| (i * 7 % 251) as u8).collect();
    p.a.submit_send(us(0), p.ab, 9, data.clone(), Cookie(1))
        .unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    assert!(d.len() > 20);
    let seqs: Vec<u32> = d.iter().map(|x| hdr(x).seq).collect();
    assert_eq!(seqs[0], 65_530);
    // Extended numbers (wire v2): the 16-bit number wraps to 0 in epoch 1.
    assert!(
        seqs.contains(&65_535) && seqs.contains(&65_536) && !seqs.contains(&0),
        "wraps: {seqs:?}"
    );
    for x in d.iter().rev() {
        assert_eq!(hdr(x).kind, Kind::Chunk);
        assert_eq!(
            p.b.handle_datagram(us(10), Channel::Data, x),
            RxOutcome::Consumed
        );
    }
    assert_eq!(
        events(&mut p.b),
        vec![Event::Deliver {
            peer: p.ba,
            tag: 9,
            data
        }]
    );
    // Completing a chunked fragment forces an immediate ACK covering everything.
    let ack = tx(&mut p.b, us(10), Channel::Priority);
    let last = ack.last().unwrap();
    assert_eq!(hdr(last).ack.unwrap().cum, *seqs.last().unwrap());
    for a in &ack {
        p.a.handle_datagram(us(20), Channel::Priority, a);
    }
    assert_eq!(events(&mut p.a).len(), 1);
    assert!(p.a.is_idle(p.ab));
}

#[test]
fn peer_failure_reported_once_and_everything_fails() {
    let mut ca = cfg(1, 0);
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 0));
    p.a.submit_send(us(0), p.ab, 1, vec![1; 100], Cookie(1))
        .unwrap();
    p.a.submit_put(us(0), p.ab, 5, 0, vec![2; 5000], Cookie(2))
        .unwrap();
    p.a.submit_get(us(0), p.ab, 5, 0, 6, 0, 100, Cookie(3))
        .unwrap();
    let mut t = us(0);
    let mut failed = Vec::new();
    let mut done = Vec::new();
    // Nothing ever reaches B. Follow the timers.
    for _ in 0..10_000 {
        tx(&mut p.a, t, Channel::Data);
        tx(&mut p.a, t, Channel::Priority);
        for e in events(&mut p.a) {
            match e {
                Event::PeerFailed { .. } => failed.push((t, e)),
                e => done.push(e),
            }
        }
        match p.a.poll_timeout() {
            Some(n) => t = n.max(t),
            None => break,
        }
        p.a.handle_timeout(t);
    }
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        failed[0].1,
        Event::PeerFailed {
            peer: p.ab,
            remote_id: 2
        }
    );
    assert!(
        failed[0].0 >= us(300_000) && failed[0].0 < us(301_000),
        "{:?}",
        failed[0].0
    );
    let mut cookies: Vec<(u64, Result<(), Failure>)> = done
        .iter()
        .map(|e| match e {
            Event::SendComplete { cookie, result, .. }
            | Event::PutComplete { cookie, result, .. }
            | Event::GetComplete { cookie, result, .. } => (cookie.0, *result),
            e => panic!("{e:?}"),
        })
        .collect();
    cookies.sort_by_key(|c| c.0);
    let f = Err(Failure::PeerUnreachable);
    assert_eq!(cookies, vec![(1, f), (2, f), (3, f)]);
    assert_eq!(p.a.stats().peers_failed, 1);
    assert!(p.a.is_idle(p.ab));
    assert_eq!(
        p.a.submit_send(t, p.ab, 1, vec![], Cookie(4)),
        Err(SubmitError::PeerFailed)
    );
    // B's datagrams are dropped from now on.
    p.b.submit_send(t, p.ba, 1, vec![1], Cookie(1)).unwrap();
    let d = tx(&mut p.b, t, Channel::Priority);
    assert_eq!(
        p.a.handle_datagram(t, Channel::Priority, &d[0]),
        RxOutcome::Dropped(DropReason::PeerFailed)
    );
    p.a.handle_timeout(Instant(t.0 + 10_000_000_000));
    assert!(events(&mut p.a).is_empty(), "reported once");
}

#[test]
fn a_sender_that_was_stopped_probes_before_declaring_its_peer_failed() {
    // A's data is lost, then the whole job is stopped (SIGSTOP: a job suspension, a gang
    // scheduler's time slice) for longer than the peer timeout, so A's retransmission never
    // left. On resume the peer has had no chance to answer: A must probe it and hear the ACK,
    // not declare it failed at its first timer pass.
    let mut ca = cfg(1, 100);
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 200));
    p.a.submit_send(us(0), p.ab, 3, vec![7; 3000], Cookie(1))
        .unwrap();
    assert!(
        !tx(&mut p.a, us(0), Channel::Data).is_empty(),
        "sent, and lost"
    );
    let resumed = us(2_000_000);
    p.a.handle_timeout(resumed);
    assert!(
        !events(&mut p.a)
            .iter()
            .any(|e| matches!(e, Event::PeerFailed { .. })),
        "declared failed on resume without a probe"
    );
    let probes = tx(&mut p.a, resumed, Channel::Data);
    assert!(!probes.is_empty(), "a probe goes out on resume");
    for d in &probes {
        p.b.handle_datagram(resumed, Channel::Data, d);
    }
    let mut t = resumed;
    let mut got = events(&mut p.b);
    for _ in 0..100 {
        for d in tx(&mut p.a, t, Channel::Data) {
            p.b.handle_datagram(t, Channel::Data, &d);
        }
        got.extend(events(&mut p.b));
        t = t + Duration::from_micros(100);
        p.b.handle_timeout(t);
        for ack in tx(&mut p.b, t, Channel::Priority) {
            p.a.handle_datagram(t, Channel::Priority, &ack);
        }
        p.a.handle_timeout(t);
        if p.a.is_idle(p.ab) {
            break;
        }
    }
    assert!(p.a.is_idle(p.ab), "acknowledged after the resume");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 1));
    assert_eq!(p.a.stats().peers_failed, 0);

    // A peer that stays silent after the resume is still declared failed, within a peer
    // timeout after the stop ended (the probing before the stop counts, up to rto_max).
    p.a.submit_send(t, p.ab, 3, vec![8; 100], Cookie(2))
        .unwrap();
    tx(&mut p.a, t, Channel::Priority);
    let stop = t;
    let resumed = stop + Duration::from_millis(5_000);
    let mut t = resumed;
    let mut failed_at = None;
    for _ in 0..10_000 {
        p.a.handle_timeout(t);
        tx(&mut p.a, t, Channel::Priority);
        tx(&mut p.a, t, Channel::Data);
        if events(&mut p.a)
            .iter()
            .any(|e| matches!(e, Event::PeerFailed { .. }))
        {
            failed_at = Some(t);
            break;
        }
        t = p.a.poll_timeout().expect("outstanding").max(t);
    }
    let failed_at = failed_at.expect("a silent peer still fails");
    assert!(
        failed_at > resumed,
        "failed at the resume, before a probe: {failed_at:?}"
    );
    assert!(
        failed_at <= resumed + Duration::from_millis(300),
        "{failed_at:?}"
    );
}

#[test]
fn wrong_key_unknown_sender_and_garbage_are_dropped() {
    let mut p = pair();
    // A datagram from C, a stranger to B, that believes B to be `b`.
    let from_c = |b: PeerInfo| {
        let mut c = Engine::new(cfg(3, 0)).unwrap();
        let cb = c.add_peer(us(0), b);
        c.submit_send(us(0), cb, 1, vec![1], Cookie(1)).unwrap();
        tx(&mut c, us(0), Channel::Priority).remove(0)
    };
    let b = cfg(2, 200).peer_info();
    // C knows B but with a wrong key.
    let d = from_c(PeerInfo {
        remote_key: 1,
        ..b.clone()
    });
    assert_eq!(
        p.b.handle_datagram(us(1), Channel::Priority, &d),
        RxOutcome::Dropped(DropReason::WrongKey)
    );
    // C with the right key but unknown to B.
    let d = from_c(b);
    assert_eq!(
        p.b.handle_datagram(us(1), Channel::Priority, &d),
        RxOutcome::Dropped(DropReason::UnknownSender)
    );
    assert_eq!(
        p.b.handle_datagram(us(1), Channel::Data, &[1, 2, 3]),
        RxOutcome::Dropped(DropReason::Malformed)
    );
    let s = p.b.stats();
    assert_eq!(
        (
            s.wrong_key_recvs,
            s.unknown_sender_recvs,
            s.malformed_recvs,
            s.recvs
        ),
        (1, 1, 1, 3)
    );
    assert!(p.b.is_idle(p.ba));
    assert_eq!(
        p.b.poll_timeout(),
        None,
        "nothing was accepted, no ACK owed"
    );
}

#[test]
fn credits_limit_transmissions_and_come_back() {
    let mut ca = cfg(1, 0);
    ca.data_credits = 2;
    let mut p = pair_with(ca, cfg(2, 0));
    for i in 0..5 {
        p.a.submit_send(us(0), p.ab, 1, vec![0; 1000], Cookie(i))
            .unwrap();
    }
    let mut buf = vec![0u8; 1472];
    assert!(p.a.poll_transmit(us(0), Channel::Data, &mut buf).is_some());
    assert!(p.a.poll_transmit(us(0), Channel::Data, &mut buf).is_some());
    assert!(p.a.poll_transmit(us(0), Channel::Data, &mut buf).is_none());
    assert_eq!(p.a.stats().credits_exhausted, 1);
    p.a.handle_send_complete(Channel::Data);
    assert!(p.a.poll_transmit(us(0), Channel::Data, &mut buf).is_some());
    assert!(
        p.a.poll_transmit(us(0), Channel::Data, &mut [0u8; 100])
            .is_none(),
        "buffer below MTU"
    );
    assert_eq!(p.a.stats().sends, 3);
}

#[test]
fn resends_per_pass_are_bounded() {
    // A budget below the probes a timeout releases, so the budget is what binds.
    let mut ca = cfg(1, 100);
    ca.max_resends_per_pass = 4;
    let mut p = pair_with(ca, cfg(2, 200));
    for i in 0..100 {
        p.a.submit_send(us(0), p.ab, 1, vec![0; 1000], Cookie(i))
            .unwrap();
    }
    assert_eq!(tx(&mut p.a, us(0), Channel::Data).len(), 100);
    // Everything lost: the timeout releases 8 probes, but a pass sends at most 4.
    p.a.handle_timeout(us(5_000));
    assert_eq!(tx(&mut p.a, us(5_000), Channel::Data).len(), 4);
    assert_eq!(
        p.a.poll_timeout(),
        Some(us(5_000)),
        "more resends wait for the next pass"
    );
    p.a.handle_timeout(us(5_001));
    assert_eq!(tx(&mut p.a, us(5_001), Channel::Data).len(), 4);
    assert_eq!(p.a.stats().resends_timeout, 8);
    // Backoff: the next timeout is at least twice the first.
    let mut t = us(5_001);
    for _ in 0..10 {
        p.a.handle_timeout(t);
        tx(&mut p.a, t, Channel::Data);
    }
    let next = p.a.poll_timeout().unwrap();
    assert!(next.0 >= t.0 + 9_000_000, "backed off: {next:?} vs {t:?}");
    t = next;
    let _ = t;
}

/// A submits `n` sends of 1000 bytes (send `i` filled with byte `i`, cookie `i`) at `t` µs and
/// transmits them all: the datagrams, one per send.
fn send_n(p: &mut Pair, n: u64, t: u64) -> Vec<Vec<u8>> {
    for i in 0..n {
        p.a.submit_send(us(t), p.ab, 1, vec![i as u8; 1000], Cookie(i))
            .unwrap();
    }
    let sent = tx(&mut p.a, us(t), Channel::Data);
    assert_eq!(sent.len(), n as usize);
    sent
}

#[test]
fn a_timeout_probes_the_oldest_and_rearms_the_rest() {
    let mut p = pair();
    let first = send_n(&mut p, 100, 0);
    // Nothing acknowledged by 5 ms: only the 8 oldest are resent, not the whole window.
    p.a.handle_timeout(us(5_000));
    let probes = tx(&mut p.a, us(5_000), Channel::Data);
    assert_eq!(probes.len(), 8);
    assert_eq!(p.a.stats().resends_timeout, 8);
    // The ACKs were only late: B received everything. Its ACK covers the whole window, so
    // nothing more is resent, ever.
    for d in &first {
        p.b.handle_datagram(us(5_100), Channel::Data, d);
    }
    for d in &probes {
        p.b.handle_datagram(us(5_100), Channel::Data, d);
    }
    assert_eq!(p.b.stats().dup_recvs, 8, "only the probes arrived twice");
    p.b.handle_timeout(us(6_000));
    for a in tx(&mut p.b, us(6_000), Channel::Priority) {
        p.a.handle_datagram(us(6_100), Channel::Priority, &a);
    }
    assert!(p.a.is_idle(p.ab));
    p.a.handle_timeout(us(100_000));
    assert!(tx(&mut p.a, us(100_000), Channel::Data).is_empty());
    assert_eq!(p.a.stats().resends_timeout, 8);
}

#[test]
fn a_peer_gets_no_more_in_flight_than_it_can_absorb() {
    // B's socket holds 40 datagrams: A keeps at most 40 unacknowledged towards it.
    let mut cb = cfg(2, 200);
    cb.rx_window = 40;
    let mut p = pair_with(cfg(1, 100), cb);
    for i in 0..100 {
        p.a.submit_send(us(0), p.ab, 1, vec![0; 1000], Cookie(i))
            .unwrap();
    }
    let first = tx(&mut p.a, us(0), Channel::Data);
    assert_eq!(first.len(), 40);
    for d in &first {
        p.b.handle_datagram(us(10), Channel::Data, d);
    }
    p.b.handle_timeout(us(1_000));
    for a in tx(&mut p.b, us(1_000), Channel::Priority) {
        p.a.handle_datagram(us(1_010), Channel::Priority, &a);
    }
    assert_eq!(tx(&mut p.a, us(1_010), Channel::Data).len(), 40);
    // A tiny receive capacity still leaves fast repair something to work with.
    let mut cb = cfg(2, 200);
    cb.rx_window = 2;
    let mut p = pair_with(cfg(1, 100), cb);
    for i in 0..100 {
        p.a.submit_send(us(0), p.ab, 1, vec![0; 1000], Cookie(i))
            .unwrap();
    }
    assert_eq!(tx(&mut p.a, us(0), Channel::Data).len(), 16);
}

#[test]
fn remove_peer_completes_everything() {
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 1, vec![0; 10], Cookie(1))
        .unwrap();
    p.a.submit_send(us(0), p.ab, 1, vec![0; 100_000], Cookie(2))
        .unwrap();
    tx(&mut p.a, us(0), Channel::Priority);
    p.a.remove_peer(us(1), p.ab);
    let ev = events(&mut p.a);
    assert_eq!(ev.len(), 2);
    assert!(ev.iter().all(|e| matches!(
        e,
        Event::SendComplete {
            result: Err(Failure::PeerUnreachable),
            ..
        }
    )));
    assert_eq!(
        p.a.submit_send(us(2), p.ab, 1, vec![], Cookie(3)),
        Err(SubmitError::UnknownPeer)
    );
    assert_eq!(p.a.poll_timeout(), None);
    assert!(tx(&mut p.a, us(3), Channel::Data).is_empty());
}

#[test]
fn put_lands_as_writes_and_get_round_trip() {
    let mut p = pair();
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    p.a.submit_put(us(0), p.ab, 42, 1000, data.clone(), Cookie(1))
        .unwrap();
    let mut mem = vec![0u8; 7000];
    for d in tx(&mut p.a, us(0), Channel::Data) {
        match p.b.handle_datagram(us(10), Channel::Data, &d) {
            RxOutcome::Write {
                region: 42,
                offset,
                payload,
                ..
            } => {
                mem[offset as usize..offset as usize + payload.len()].copy_from_slice(&d[payload]);
            }
            o => panic!("{o:?}"),
        }
    }
    assert!(events(&mut p.b).is_empty(), "no upcall at the target");
    assert_eq!(&mem[1000..6000], &data[..]);
    p.b.handle_timeout(us(40));
    for a in tx(&mut p.b, us(40), Channel::Priority) {
        p.a.handle_datagram(us(50), Channel::Priority, &a);
    }
    assert_eq!(
        events(&mut p.a),
        vec![Event::PutComplete {
            peer: p.ab,
            cookie: Cookie(1),
            result: Ok(())
        }]
    );
    // GET back 3000 bytes from B's region 42 at 2000 into A's region 8 at 10.
    p.a.submit_get(us(60), p.ab, 42, 2000, 8, 10, 3000, Cookie(2))
        .unwrap();
    for d in tx(&mut p.a, us(60), Channel::Data) {
        assert_eq!(
            p.b.handle_datagram(us(70), Channel::Data, &d),
            RxOutcome::Consumed
        );
    }
    let req = match events(&mut p.b).as_slice() {
        [Event::GetRequest {
            request,
            region: 42,
            offset: 2000,
            len: 3000,
            ..
        }] => *request,
        e => panic!("{e:?}"),
    };
    p.b.answer_get(us(71), p.ba, req, Ok(mem[2000..5000].to_vec().into()));
    let mut local = vec![0u8; 4000];
    for d in tx(&mut p.b, us(71), Channel::Data) {
        match p.a.handle_datagram(us(80), Channel::Data, &d) {
            RxOutcome::Write {
                region: 8,
                offset,
                payload,
                ..
            } => {
                local[offset as usize..offset as usize + payload.len()]
                    .copy_from_slice(&d[payload]);
            }
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(
        events(&mut p.a),
        vec![Event::GetComplete {
            peer: p.ab,
            cookie: Cookie(2),
            result: Ok(())
        }]
    );
    assert_eq!(&local[10..3010], &mem[2000..5000]);
}

/// A asks B (sent at `t.0`, arriving at `t.1`) for `len` bytes at offset 0 of B's region
/// `regions.0`, into offset 0 of A's region `regions.1`; returns the request B sees.
fn get_request(p: &mut Pair, t: (u64, u64), regions: (u64, u64), len: u64, cookie: u64) -> u32 {
    p.a.submit_get(
        us(t.0),
        p.ab,
        regions.0,
        0,
        regions.1,
        0,
        len,
        Cookie(cookie),
    )
    .unwrap();
    for d in tx(&mut p.a, us(t.0), Channel::Data) {
        p.b.handle_datagram(us(t.1), Channel::Data, &d);
    }
    match events(&mut p.b).as_slice() {
        [Event::GetRequest { request, .. }] => *request,
        e => panic!("{e:?}"),
    }
}

/// Bytes lent by `owner` that must not be read once `released` is set.
#[derive(Debug)]
struct Guarded {
    owner: u64,
    bytes: Vec<u8>,
    released: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Lent for Guarded {
    fn pieces(&self) -> [&[u8]; 2] {
        assert!(
            !self.released.load(std::sync::atomic::Ordering::SeqCst),
            "lent bytes read after their owner let go"
        );
        [&self.bytes, &[]]
    }
    fn owner(&self) -> u64 {
        self.owner
    }
}

#[test]
fn a_lent_get_reply_is_copied_when_its_owner_lets_go_and_resent_from_the_copy() {
    let mut p = pair();
    let req = get_request(&mut p, (0, 10), (42, 8), 3000, 2);
    let mem: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lent = Guarded {
        owner: 42,
        bytes: mem.clone(),
        released: released.clone(),
    };
    p.b.answer_get(
        us(11),
        p.ba,
        req,
        Ok(Payload::from(Box::new(lent) as Box<dyn Lent>)),
    );
    let lost = tx(&mut p.b, us(11), Channel::Data);
    assert!(lost.len() >= 2, "several segments, all lost");
    // The owner lets go (the PML deregisters) before the reply is acknowledged.
    assert_eq!(p.b.own_lent(7), 0, "another owner's bytes stay lent");
    assert_eq!(p.b.own_lent(42), 1);
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(p.b.own_lent(42), 0, "already a copy");
    // The resends come from the copy, byte for byte.
    p.b.handle_timeout(us(10_000));
    let mut local = vec![0u8; 3000];
    for d in tx(&mut p.b, us(10_000), Channel::Data) {
        match p.a.handle_datagram(us(10_010), Channel::Data, &d) {
            RxOutcome::Write {
                region: 8,
                offset,
                payload,
                ..
            } => {
                local[offset as usize..offset as usize + payload.len()].copy_from_slice(&d[payload])
            }
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(local, mem);
    assert_eq!(
        events(&mut p.a),
        vec![Event::GetComplete {
            peer: p.ab,
            cookie: Cookie(2),
            result: Ok(())
        }]
    );
}

/// `bytes` lent to A's engine with no owner (a PML fragment read in place), and the flag that
/// makes any later read fail.
fn guarded(bytes: &[u8]) -> (Payload, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lent = Guarded {
        owner: 0,
        bytes: bytes.to_vec(),
        released: released.clone(),
    };
    (Payload::from(Box::new(lent) as Box<dyn Lent>), released)
}

#[test]
fn a_lent_send_unacknowledged_for_the_hold_completes_and_is_resent_from_a_copy() {
    let mut ca = cfg(1, 100);
    ca.lent_copy_below = 0;
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 200));
    assert_eq!(p.a.config().lent_hold, Some(Duration::from_micros(1000)));
    let mem: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    let (data, released) = guarded(&mem);
    p.a.submit_send(us(0), p.ab, 4, data, Cookie(7)).unwrap();
    // t=10: sent whole; the peer computes and acknowledges nothing.
    assert!(tx(&mut p.a, us(10), Channel::Data).len() >= 3);
    assert_eq!(
        p.a.poll_timeout(),
        Some(us(1010)),
        "the hold runs from the last segment"
    );
    completes_at(&mut p.a, p.ab, 1010, 7);
    assert_eq!(p.a.stats().lent_released, 1);
    assert!(!p.a.is_idle(p.ab), "still unacknowledged");
    // The lender reuses its memory; the retransmission comes from the copy.
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    let t = p.a.poll_timeout().unwrap();
    p.a.handle_timeout(t);
    let resent = tx(&mut p.a, t, Channel::Data);
    assert!(!resent.is_empty());
    for d in &resent {
        p.b.handle_datagram(t + Duration::from_micros(5), Channel::Data, d);
    }
    // The timeout resends a few probes; the peer's ACK lets fast repair send the rest.
    let mut got = Vec::new();
    let mut now = t + Duration::from_micros(5);
    for _ in 0..20 {
        for e in events(&mut p.b) {
            if let Event::Deliver { data, tag: 4, .. } = e {
                got = data;
            }
        }
        if !got.is_empty() {
            break;
        }
        now = now + Duration::from_micros(100);
        p.b.handle_timeout(now);
        for ack in tx(&mut p.b, now, Channel::Priority) {
            p.a.handle_datagram(now, Channel::Priority, &ack);
        }
        p.a.handle_timeout(now);
        for d in tx(&mut p.a, now, Channel::Data) {
            p.b.handle_datagram(now, Channel::Data, &d);
        }
    }
    assert_eq!(got, mem);
    p.b.handle_timeout(now + Duration::from_micros(100));
    for ack in tx(
        &mut p.b,
        now + Duration::from_micros(100),
        Channel::Priority,
    ) {
        p.a.handle_datagram(now + Duration::from_micros(110), Channel::Priority, &ack);
    }
    assert!(p.a.is_idle(p.ab));
    assert!(events(&mut p.a).is_empty(), "reported once, at the hold");
}

#[test]
fn a_released_send_is_not_reported_again_when_its_peer_fails() {
    let mut ca = cfg(1, 100);
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 200));
    let (data, _released) = guarded(&[5u8; 3000]);
    p.a.submit_send(us(0), p.ab, 4, data, Cookie(7)).unwrap();
    tx(&mut p.a, us(0), Channel::Data);
    let mut seen = Vec::new();
    let mut t = us(0);
    while t < us(600_000) {
        t =
            p.a.poll_timeout()
                .expect("work outstanding until the peer fails");
        p.a.handle_timeout(t);
        tx(&mut p.a, t, Channel::Data);
        seen.extend(events(&mut p.a));
        if seen.iter().any(|e| matches!(e, Event::PeerFailed { .. })) {
            break;
        }
    }
    let completions: Vec<_> = seen
        .iter()
        .filter(|e| matches!(e, Event::SendComplete { .. }))
        .collect();
    assert_eq!(
        completions,
        vec![&Event::SendComplete {
            peer: p.ab,
            cookie: Cookie(7),
            result: Ok(())
        }],
        "{seen:?}"
    );
    assert!(seen.iter().any(|e| matches!(e, Event::PeerFailed { .. })));
}

#[test]
fn a_lent_send_acknowledged_within_the_hold_is_never_copied() {
    let mut p = pair_holding();
    let (data, released) = guarded(&[9u8; 1000]);
    p.a.submit_send(us(0), p.ab, 4, data, Cookie(7)).unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    assert!(matches!(
        p.b.handle_datagram(us(10), Channel::Data, &d[0]),
        RxOutcome::Deliver { .. }
    ));
    ack_back(&mut p, 10);
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 7));
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(p.a.poll_timeout(), None, "the hold left with the op");
    p.a.handle_timeout(us(5000));
    assert!(events(&mut p.a).is_empty());
    assert_eq!(p.a.stats().lent_released, 0);
}

#[test]
fn a_hold_left_by_an_op_acknowledged_out_of_order_does_not_release_its_slots_next_op() {
    let mut p = pair_holding();
    // X (3 segments) is lost, Y (1 segment) arrives: the ACK completes Y only.
    let (x, _) = guarded(&[1u8; 3000]);
    let (y, _) = guarded(&[2u8; 1000]);
    p.a.submit_send(us(0), p.ab, 4, x, Cookie(1)).unwrap();
    p.a.submit_send(us(0), p.ab, 4, y, Cookie(2)).unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    assert_eq!(d.len(), 4);
    p.b.handle_datagram(us(10), Channel::Data, &d[3]);
    ack_back(&mut p, 10);
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 2));
    // Z takes Y's slot (same cookie, as a reused descriptor would have) and goes out at t=60.
    let (z, _) = guarded(&[3u8; 1000]);
    p.a.submit_send(us(60), p.ab, 4, z, Cookie(2)).unwrap();
    tx(&mut p.a, us(60), Channel::Data);
    // X was due at t=1000, but the peer acknowledged at t=50: it is given until t=1050. Then
    // only X goes; Y's old entry must not release Z, whose own hold ends at t=1060.
    p.a.handle_timeout(us(1000));
    completes_at(&mut p.a, p.ab, 1050, 1);
    completes_at(&mut p.a, p.ab, 1060, 2);
    assert_eq!(p.a.stats().lent_released, 2);
}

/// B acknowledges what it has (after its ACK delay, at `t` + 30 µs) and A reads the ACK.
fn ack_back(p: &mut Pair, t: u64) {
    p.b.handle_timeout(us(t + 30));
    for d in tx(&mut p.b, us(t + 30), Channel::Priority) {
        p.a.handle_datagram(us(t + 40), Channel::Priority, &d);
    }
}

#[test]
fn the_lent_queue_holds_only_sends_still_waiting() {
    // Both queues: the hold's (pair_holding) and the one copied at once (pair, whose copies
    // wait for a handle_timeout that this exchange never calls).
    for mut p in [pair_holding(), pair()] {
        lent_entries_leave_with_their_sends(&mut p);
    }
}

fn lent_entries_leave_with_their_sends(p: &mut Pair) {
    // X is reordered behind Y: Y is acknowledged first, X right after.
    p.a.submit_send(us(0), p.ab, 1, guarded(&[1u8; 1000]).0, Cookie(1))
        .unwrap();
    p.a.submit_send(us(0), p.ab, 1, guarded(&[2u8; 1000]).0, Cookie(2))
        .unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    assert_eq!((d.len(), p.a.lent_waiting(p.ab)), (2, 2));
    p.b.handle_datagram(us(10), Channel::Data, &d[1]);
    ack_back(p, 10);
    p.b.handle_datagram(us(60), Channel::Data, &d[0]);
    ack_back(p, 60);
    assert!(p.a.is_idle(p.ab));
    assert_eq!(p.a.lent_waiting(p.ab), 0, "Y's entry outlived it");
    // A stream the peer keeps acknowledging never piles entries up.
    for i in 0..50u64 {
        let t = 200 + i * 100;
        p.a.submit_send(us(t), p.ab, 1, guarded(&[3u8; 1000]).0, Cookie(10 + i))
            .unwrap();
        for d in tx(&mut p.a, us(t), Channel::Data) {
            p.b.handle_datagram(us(t + 5), Channel::Data, &d);
        }
        ack_back(p, t + 5);
    }
    assert!(p.a.is_idle(p.ab));
    assert_eq!(p.a.lent_waiting(p.ab), 0);
    assert_eq!(p.a.stats().lent_released, 0);
}

#[test]
fn without_a_hold_a_lent_send_waits_for_its_ack() {
    let ca = Config {
        lent_hold: None,
        lent_copy_below: 0,
        ..cfg(1, 100)
    };
    let mut p = pair_with(ca, cfg(2, 200));
    let (data, _) = guarded(&[5u8; 3000]);
    p.a.submit_send(us(0), p.ab, 4, data, Cookie(7)).unwrap();
    tx(&mut p.a, us(0), Channel::Data);
    assert_eq!(
        p.a.poll_timeout(),
        Some(us(5000)),
        "only the retransmit timer"
    );
    p.a.handle_timeout(us(5000));
    assert!(events(&mut p.a).is_empty());
    assert_eq!(p.a.stats().lent_released, 0);
}

#[test]
fn a_short_lent_send_completes_on_the_pass_after_it_left_and_is_resent_from_the_copy() {
    let mut p = pair();
    assert_eq!(p.a.config().lent_copy_below, 65536);
    let mem: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    let (data, released) = guarded(&mem);
    p.a.submit_send(us(0), p.ab, 4, data, Cookie(7)).unwrap();
    assert!(events(&mut p.a).is_empty(), "not before it left");
    let first = tx(&mut p.a, us(0), Channel::Data);
    assert_eq!(first.len(), 3);
    assert_eq!(p.a.poll_timeout(), Some(us(0)), "due on the next pass");
    p.a.handle_timeout(us(1));
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 7));
    assert_eq!(p.a.stats().lent_released, 1);
    // The lender reuses its memory at once. The middle datagram was lost: it is resent from
    // the copy, and the peer gets the bytes as they were lent.
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    p.b.handle_datagram(us(10), Channel::Data, &first[0]);
    p.b.handle_datagram(us(11), Channel::Data, &first[2]);
    let mut now = us(11);
    let mut got = Vec::new();
    while got.is_empty() && now < us(100_000) {
        now =
            p.a.poll_timeout()
                .expect("the copy is still unacknowledged")
                .max(now);
        p.a.handle_timeout(now);
        for d in tx(&mut p.a, now, Channel::Data) {
            p.b.handle_datagram(now, Channel::Data, &d);
        }
        for e in events(&mut p.b) {
            if let Event::Deliver { data, tag: 4, .. } = e {
                got = data;
            }
        }
    }
    assert_eq!(got, mem);
    ack_back(&mut p, now.0 / 1000 + 1);
    assert!(p.a.is_idle(p.ab));
    assert!(events(&mut p.a).is_empty(), "reported once");
    assert_eq!(p.a.lent_waiting(p.ab), 0);
}

#[test]
fn a_short_lent_send_is_not_copied_while_the_provider_still_reads_it() {
    let mut p = pair();
    let (data, _) = guarded(&[4u8; 3000]);
    p.a.submit_send(us(0), p.ab, 4, data, Cookie(7)).unwrap();
    // Posted from where the bytes lie, and not completed yet (an asynchronous NIC may still
    // be reading them).
    let mut buf = vec![0u8; 2048];
    let mut posted = 0;
    while let Some(t) =
        p.a.poll_transmit_gather(us(0), Channel::Data, &mut buf, 100)
    {
        assert!(t.body.is_some());
        posted += 1;
    }
    assert_eq!(posted, 3);
    for done in 0..posted {
        p.a.handle_timeout(us(1 + done));
        assert!(
            events(&mut p.a).is_empty(),
            "released with {done} of 3 completed"
        );
        p.a.handle_send_complete(Channel::Data);
    }
    p.a.handle_timeout(us(10));
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 7));
    assert_eq!(p.a.stats().lent_released, 1);
}

#[test]
fn only_lent_sends_shorter_than_the_limit_are_copied_at_once() {
    let ca = Config {
        lent_copy_below: 2000,
        ..cfg(1, 100)
    };
    let mut p = pair_with(ca, cfg(2, 200));
    p.a.submit_send(us(0), p.ab, 1, guarded(&[1u8; 2000]).0, Cookie(1))
        .unwrap();
    p.a.submit_send(us(0), p.ab, 2, guarded(&[2u8; 1999]).0, Cookie(2))
        .unwrap();
    tx(&mut p.a, us(0), Channel::Data);
    assert!(events(&mut p.a).is_empty());
    p.a.handle_timeout(us(1));
    assert_eq!(events(&mut p.a), sent_ok(p.ab, 2));
    // 2000 bytes wait out the hold (the peer acknowledges nothing).
    completes_at(&mut p.a, p.ab, 1000, 1);
    assert_eq!(p.a.stats().lent_released, 2);
}

#[test]
fn a_lent_put_source_is_copied_when_its_owner_lets_go_and_resent_from_the_copy() {
    let mut p = pair();
    let mem: Vec<u8> = (0..3000u32).map(|i| (i * 11) as u8).collect();
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lent = Guarded {
        owner: 42,
        bytes: mem.clone(),
        released: released.clone(),
    };
    p.a.submit_put(
        us(0),
        p.ab,
        9,
        100,
        Payload::from(Box::new(lent) as Box<dyn Lent>),
        Cookie(4),
    )
    .unwrap();
    let lost = tx(&mut p.a, us(0), Channel::Data);
    assert!(lost.len() >= 2, "several segments, all lost");
    // The PML deregisters the source before the PUT is acknowledged.
    assert_eq!(p.a.own_lent(7), 0, "another owner's bytes stay lent");
    assert_eq!(p.a.own_lent(42), 1);
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    p.a.handle_timeout(us(10_000));
    let mut target = vec![0u8; 3100];
    for d in tx(&mut p.a, us(10_000), Channel::Data) {
        match p.b.handle_datagram(us(10_010), Channel::Data, &d) {
            RxOutcome::Write {
                region: 9,
                offset,
                payload,
                ..
            } => target[offset as usize..offset as usize + payload.len()]
                .copy_from_slice(&d[payload]),
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(&target[100..], &mem[..]);
    for a in tx(&mut p.b, us(10_010), Channel::Priority) {
        p.a.handle_datagram(us(10_020), Channel::Priority, &a);
    }
    assert_eq!(
        events(&mut p.a),
        vec![Event::PutComplete {
            peer: p.ab,
            cookie: Cookie(4),
            result: Ok(())
        }]
    );
}

#[test]
fn the_last_segment_of_a_put_is_acknowledged_at_once() {
    let mut p = pair();
    p.a.submit_put(us(0), p.ab, 42, 0, vec![5; 5000], Cookie(1))
        .unwrap();
    let segs = tx(&mut p.a, us(0), Channel::Data);
    assert!(segs.len() >= 3, "{} segments", segs.len());
    for (i, d) in segs.iter().enumerate() {
        assert!(matches!(
            p.b.handle_datagram(us(10), Channel::Data, d),
            RxOutcome::Write { region: 42, .. }
        ));
        let acks = tx(&mut p.b, us(10), Channel::Priority);
        if i + 1 < segs.len() {
            // In the middle the ACK waits for a reply to ride on (or ack_delay).
            assert!(acks.is_empty(), "segment {i}: {} ACKs", acks.len());
            continue;
        }
        // The origin's PML waits for the completion: the ACK leaves now, not after ack_delay.
        assert_eq!(acks.len(), 1);
        p.a.handle_datagram(us(20), Channel::Priority, &acks[0]);
    }
    assert_eq!(
        events(&mut p.a),
        vec![Event::PutComplete {
            peer: p.ab,
            cookie: Cookie(1),
            result: Ok(())
        }]
    );
}

#[test]
fn refused_write_of_a_get_reply_fails_the_get() {
    let mut p = pair();
    let req = get_request(&mut p, (0, 10), (1, 2), 10, 5);
    p.b.answer_get(us(11), p.ba, req, Ok(vec![1; 10].into()));
    let d = tx(&mut p.b, us(11), Channel::Data);
    assert!(matches!(
        p.a.handle_datagram(us(20), Channel::Data, &d[0]),
        RxOutcome::Write { .. }
    ));
    p.a.refuse_write(us(20), p.ab);
    assert_eq!(
        events(&mut p.a),
        vec![Event::GetComplete {
            peer: p.ab,
            cookie: Cookie(5),
            result: Err(Failure::RemoteRefused)
        }]
    );
    assert_eq!(p.a.stats().refused_writes, 1);
}

#[test]
fn one_failed_peer_leaves_the_others_alone_and_ids_are_not_reused() {
    let mut ca = cfg(1, 0);
    ca.peer_timeout = Duration::from_millis(250);
    let mut a = Engine::new(ca.clone()).unwrap();
    let mut b = Engine::new(cfg(2, 0)).unwrap();
    let ab = a.add_peer(us(0), cfg(2, 0).peer_info());
    let ac = a.add_peer(us(0), cfg(3, 0).peer_info()); // C is silent forever
    let ba = b.add_peer(us(0), ca.peer_info());
    let mut t = us(0);
    let mut delivered = 0;
    let mut failed = 0;
    for round in 0..2_000u64 {
        a.submit_send(t, ab, 1, vec![round as u8; 3000], Cookie(round))
            .unwrap();
        if let Err(e) = a.submit_send(t, ac, 1, vec![0; 10], Cookie(1_000_000 + round)) {
            assert_eq!(e, SubmitError::PeerFailed);
            assert!(a.stats().peers_failed == 1);
        }
        for ch in [Channel::Priority, Channel::Data] {
            for d in tx(&mut a, t, ch) {
                // Datagrams for C vanish; those for B arrive.
                if hdr(&d).key == 2000 {
                    b.handle_datagram(t, ch, &d);
                }
            }
        }
        delivered += events(&mut b).len();
        b.handle_timeout(t);
        for d in tx(&mut b, t, Channel::Priority) {
            a.handle_datagram(t, Channel::Priority, &d);
        }
        for e in events(&mut a) {
            match e {
                Event::PeerFailed { peer, remote_id } => {
                    assert_eq!((peer, remote_id), (ac, 3));
                    failed += 1;
                }
                Event::SendComplete { peer, result, .. } if peer == ab => {
                    assert_eq!(result, Ok(()))
                }
                Event::SendComplete { peer, result, .. } => {
                    assert_eq!((peer, result), (ac, Err(Failure::PeerUnreachable)))
                }
                e => panic!("{e:?}"),
            }
        }
        t = Instant(t.0 + 200_000);
        a.handle_timeout(t);
    }
    assert_eq!(failed, 1);
    assert_eq!(delivered, 2_000, "B got everything while C failed");
    let _ = ba;
    // Remove C and add D: D gets an id of its own, and nothing stale reaches it.
    a.remove_peer(t, ac);
    let ad = a.add_peer(t, cfg(4, 0).peer_info());
    assert_ne!(ad, ac, "a removed peer's id is never given again");
    assert!(
        a.submit_send(t, ac, 1, vec![1], Cookie(8)).is_err(),
        "C is gone"
    );
    assert!(a.is_idle(ad));
    a.submit_send(t, ad, 1, vec![1], Cookie(7)).unwrap();
    let d = tx(&mut a, t, Channel::Priority);
    assert_eq!(d.len(), 1);
    assert_eq!(hdr(&d[0]).key, 4000);
}

#[test]
fn get_answered_with_wrong_length_is_refused() {
    let mut p = pair();
    let req = get_request(&mut p, (0, 10), (1, 2), 10, 5);
    p.b.answer_get(us(11), p.ba, req, Ok(vec![1; 9].into()));
    p.b.answer_get(us(11), p.ba, req, Ok(vec![1; 10].into())); // a second answer is ignored
    assert_eq!(p.b.stats().refused_gets, 1, "counted on the target");
    assert_eq!(p.a.stats().refused_gets, 0);
    let d = tx(&mut p.b, us(11), Channel::Data);
    assert_eq!(d.len(), 1);
    assert_eq!(hdr(&d[0]).kind, Kind::GetRefuse);
    assert_eq!(
        p.a.handle_datagram(us(20), Channel::Data, &d[0]),
        RxOutcome::Consumed
    );
    assert_eq!(
        events(&mut p.a),
        vec![Event::GetComplete {
            peer: p.ab,
            cookie: Cookie(5),
            result: Err(Failure::RemoteRefused)
        }]
    );
    // The edge refusing outright (region not registered) is counted the same way.
    let req = get_request(&mut p, (30, 40), (1, 2), 10, 6);
    p.b.answer_get(us(41), p.ba, req, Err(()));
    assert_eq!(p.b.stats().refused_gets, 2);
}

#[test]
fn config_errors_name_the_field() {
    let bad = Config {
        window: 0,
        ..Config::default()
    };
    assert!(Engine::new(bad).unwrap_err().0.contains("window"));
    let bad = Config {
        data_mtu: 700,
        ..Config::default()
    };
    assert!(Engine::new(bad).unwrap_err().0.contains("data_mtu"));
    let bad = Config {
        data_turn: 0,
        ..Config::default()
    };
    assert!(Engine::new(bad).unwrap_err().0.contains("data_turn"));
    let e = Engine::new(Config::default()).unwrap();
    // MTU minus the 48-byte v4 base header.
    assert_eq!((e.max_frag_payload(), e.max_tiny_payload()), (1424, 720));
}

#[test]
fn put_refusal_lost_then_repaired_still_fails_the_put() {
    let mut p = pair();
    p.a.submit_put(us(0), p.ab, 9, 0, vec![1; 100], Cookie(3))
        .unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    assert!(matches!(
        p.b.handle_datagram(us(10), Channel::Data, &d[0]),
        RxOutcome::Write { .. }
    ));
    p.b.refuse_write(us(10), p.ba);
    // B's ACK may leave before the refusal has its sequence number: its barrier already
    // counts the refusal in.
    p.b.handle_timeout(us(100));
    let ack = tx(&mut p.b, us(100), Channel::Priority);
    assert_eq!(ack.len(), 1);
    let r = tx(&mut p.b, us(100), Channel::Data);
    assert_eq!(r.len(), 1);
    let h = hdr(&r[0]);
    assert_eq!(h.kind, Kind::PutRefuse);
    assert_eq!(hdr(&ack[0]).ack.unwrap().snd_next, h.seq.wrapping_add(1));
    assert_eq!(h.ack.unwrap().snd_next, h.seq.wrapping_add(1));
    // The refusal is lost; the ACK arrives.
    p.a.handle_datagram(us(110), Channel::Priority, &ack[0]);
    assert!(
        events(&mut p.a).is_empty(),
        "acknowledged, but a refusal may be in flight: held"
    );
    assert!(!p.a.is_idle(p.ab));
    // B's refusal is repaired; A learns the truth.
    let t = p.b.poll_timeout().unwrap();
    p.b.handle_timeout(t);
    let r2 = tx(&mut p.b, t, Channel::Data);
    assert_eq!(hdr(&r2[0]).kind, Kind::PutRefuse);
    p.a.handle_datagram(Instant(t.0 + 10_000), Channel::Data, &r2[0]);
    assert_eq!(
        events(&mut p.a),
        vec![Event::PutComplete {
            peer: p.ab,
            cookie: Cookie(3),
            result: Err(Failure::RemoteRefused)
        }]
    );
    assert!(p.a.is_idle(p.ab));
}

/// `from`'s timers and everything it sends, handed to `to` (which refuses every write from
/// `peer`, its id for `from`); returns how many fragments `to` delivered.
fn one_way(from: &mut Engine, to: &mut Engine, peer: PeerId, t: Instant) -> usize {
    let mut got = 0;
    if from.poll_timeout().is_some_and(|d| d <= t) {
        from.handle_timeout(t);
    }
    for ch in [Channel::Priority, Channel::Data] {
        for d in tx(from, t, ch) {
            match to.handle_datagram(t, ch, &d) {
                RxOutcome::Write { .. } => to.refuse_write(t, peer),
                RxOutcome::Deliver { .. } => got += 1,
                _ => {}
            }
        }
    }
    got
}

#[test]
fn refusals_both_ways_with_full_windows_do_not_stall() {
    // Each side's window is full with a PUT the other refuses and a fragment behind it. A
    // refusal needs window room, which only the other side's ACKs make: neither may withhold
    // its ACKs until its own refusal is sequenced (the hostile test's putget_rdma stall).
    let mut ca = cfg(1, 100);
    let mut cb = cfg(2, 200);
    ca.window = 2;
    cb.window = 2;
    ca.peer_timeout = Duration::from_millis(300);
    cb.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cb);
    p.a.submit_put(us(0), p.ab, 9, 0, vec![1; 100], Cookie(1))
        .unwrap();
    p.a.submit_send(us(0), p.ab, 5, vec![2; 1000], Cookie(2))
        .unwrap();
    p.b.submit_put(us(0), p.ba, 9, 0, vec![3; 100], Cookie(3))
        .unwrap();
    p.b.submit_send(us(0), p.ba, 5, vec![4; 1000], Cookie(4))
        .unwrap();
    // Both windows go out before either side hears from the other.
    let from_a = tx(&mut p.a, us(0), Channel::Data);
    let from_b = tx(&mut p.b, us(0), Channel::Data);
    assert_eq!((from_a.len(), from_b.len()), (2, 2));
    let (mut a_got, mut b_got) = (0, 0);
    for (d, to, peer, got) in [
        (from_a, &mut p.b, p.ba, &mut b_got),
        (from_b, &mut p.a, p.ab, &mut a_got),
    ] {
        for d in d {
            match to.handle_datagram(us(10), Channel::Data, &d) {
                RxOutcome::Write { .. } => to.refuse_write(us(10), peer),
                RxOutcome::Deliver { .. } => *got += 1,
                o => panic!("{o:?}"),
            }
        }
    }
    let mut t = us(10);
    let (mut a_events, mut b_events) = (Vec::new(), Vec::new());
    while t < us(200_000) && (a_events.len() < 2 || b_events.len() < 2) {
        b_got += one_way(&mut p.a, &mut p.b, p.ba, t);
        a_got += one_way(&mut p.b, &mut p.a, p.ab, t);
        a_events.extend(events(&mut p.a));
        b_events.extend(events(&mut p.b));
        t = Instant(t.0 + 100_000);
    }
    for (ev, put, send) in [(&a_events, 1, 2), (&b_events, 3, 4)] {
        assert!(
            !ev.iter().any(|e| matches!(e, Event::PeerFailed { .. })),
            "stalled into a peer failure: {ev:?}"
        );
        assert!(ev.iter().any(|e| matches!(e,
            Event::PutComplete { cookie, result: Err(Failure::RemoteRefused), .. } if cookie.0 == put)));
        assert!(ev.iter().any(|e| matches!(e,
            Event::SendComplete { cookie, result: Ok(()), .. } if cookie.0 == send)));
    }
    assert_eq!((a_got, b_got), (1, 1), "each fragment delivered once");
    assert!(t < us(10_000), "settled in {} µs", t.0 / 1000);
}

#[test]
fn more_refusals_than_an_ack_may_vouch_for_still_fail_every_put() {
    // B's window is full when it refuses 100 PUTs (more than the 64 its ACKs may count in):
    // whatever order things happen in, every PUT ends RemoteRefused, none Ok.
    let ca = cfg(1, 100);
    let mut cb = cfg(2, 200);
    cb.window = 2;
    let mut p = pair_with(ca, cb);
    p.b.submit_send(us(0), p.ba, 5, vec![4; 1000], Cookie(900))
        .unwrap();
    p.b.submit_send(us(0), p.ba, 5, vec![4; 1000], Cookie(901))
        .unwrap();
    let from_b = tx(&mut p.b, us(0), Channel::Data);
    assert_eq!(from_b.len(), 2);
    for i in 0..100 {
        p.a.submit_put(us(0), p.ab, 9, 0, vec![1; 100], Cookie(i))
            .unwrap();
    }
    for d in tx(&mut p.a, us(0), Channel::Data) {
        if let RxOutcome::Write { .. } = p.b.handle_datagram(us(10), Channel::Data, &d) {
            p.b.refuse_write(us(10), p.ba);
        }
    }
    assert!(
        tx(&mut p.b, us(10), Channel::Priority).is_empty(),
        "100 unsent refusals: ACK information withheld"
    );
    for d in from_b {
        p.a.handle_datagram(us(20), Channel::Data, &d);
    }
    let mut t = us(20);
    let mut done = Vec::new();
    while t < us(100_000) && done.len() < 100 {
        one_way(&mut p.a, &mut p.b, p.ba, t);
        one_way(&mut p.b, &mut p.a, p.ab, t);
        done.extend(events(&mut p.a).into_iter().filter_map(|e| match e {
            Event::PutComplete { cookie, result, .. } => Some((cookie.0, result)),
            _ => None,
        }));
        t = Instant(t.0 + 100_000);
    }
    done.sort_by_key(|d| d.0);
    let want: Vec<_> = (0..100).map(|i| (i, Err(Failure::RemoteRefused))).collect();
    assert_eq!(done, want);
}

#[test]
fn acknowledged_put_completes_once_the_barrier_is_passed() {
    let mut p = pair();
    // B has sent A a fragment that is still in flight when A's put gets acknowledged.
    p.b.submit_send(us(0), p.ba, 1, vec![2; 1000], Cookie(1))
        .unwrap();
    let bf = tx(&mut p.b, us(0), Channel::Data);
    p.a.submit_put(us(0), p.ab, 9, 0, vec![1; 100], Cookie(3))
        .unwrap();
    let d = tx(&mut p.a, us(0), Channel::Data);
    p.b.handle_datagram(us(10), Channel::Data, &d[0]);
    p.b.handle_timeout(us(40));
    let ack = tx(&mut p.b, us(40), Channel::Priority);
    p.a.handle_datagram(us(50), Channel::Priority, &ack[0]);
    assert!(
        events(&mut p.a).is_empty(),
        "B's earlier segment not yet received: held"
    );
    assert!(matches!(
        p.a.handle_datagram(us(60), Channel::Data, &bf[0]),
        RxOutcome::Deliver { .. }
    ));
    assert_eq!(
        events(&mut p.a),
        vec![Event::PutComplete {
            peer: p.ab,
            cookie: Cookie(3),
            result: Ok(())
        }]
    );
}

#[test]
fn a_get_larger_than_a_reply_may_be_is_refused_at_submit() {
    let mut p = pair_with(cfg(1, 0), cfg(2, 0));
    let max = u64::from(wire::MAX_REASSEMBLY);
    assert_eq!(
        p.a.submit_get(us(0), p.ab, 1, 0, 2, 0, max + 1, Cookie(5)),
        Err(SubmitError::TooLarge)
    );
    assert!(p.a.is_idle(p.ab), "nothing was queued");
    p.a.submit_get(us(0), p.ab, 1, 0, 2, 0, max, Cookie(6))
        .unwrap();
}

/// First chunks of new fragments, each claiming the largest total, from a sender holding the
/// job's key: each would set 64 MiB aside. Past the open limit (a full window of chunks plus
/// two largest fragments) they are dropped before their sequence numbers are taken, so the
/// next real segment still fills the first gap.
#[test]
fn first_chunks_past_the_open_limit_are_dropped_and_take_no_sequence_number() {
    let mut p = pair();
    let first = |seq: u32, id: u32, total: u32| {
        let mut h = Header::new(Kind::Chunk);
        h.seq = seq;
        h.src = 1;
        h.key = 2000;
        h.id = id;
        h.total = total;
        h.payload_len = 1;
        let mut d = vec![0u8; h.header_len() + 1];
        h.emit(&mut d);
        d
    };
    let max = wire::MAX_REASSEMBLY;
    let outcomes: Vec<RxOutcome> = (0..64u32)
        .map(|i| {
            p.b.handle_datagram(us(1), Channel::Data, &first(101 + i, 1000 + i, max))
        })
        .collect();
    let taken = outcomes
        .iter()
        .take_while(|o| **o == RxOutcome::Consumed)
        .count();
    // 4096 * 1472 bytes plus two of 64 MiB hold two such fragments, not three.
    assert_eq!(taken, 2, "{outcomes:?}");
    assert!(outcomes[2..]
        .iter()
        .all(|o| *o == RxOutcome::Dropped(DropReason::BadChunk)));
    assert_eq!(p.b.stats().bad_chunk_recvs, 62);
    // A copy of a taken number whose fragment is no longer open (as a late resend of a
    // finished fragment's chunk) opens nothing: it is the duplicate it is, and answered so.
    assert_eq!(
        p.b.handle_datagram(us(2), Channel::Data, &first(101, 999, max)),
        RxOutcome::Dropped(DropReason::Duplicate)
    );
    // A refused number was not taken: a chunk of a small fragment is new there, once.
    let small = first(103, 7, 1000);
    assert_eq!(
        p.b.handle_datagram(us(2), Channel::Data, &small),
        RxOutcome::Consumed
    );
    assert_eq!(
        p.b.handle_datagram(us(3), Channel::Data, &small),
        RxOutcome::Dropped(DropReason::Duplicate)
    );
}

/// Everything pending from `from` delivered to `to` at `t`, every write refused (no memory is
/// registered); returns how many datagrams went.
fn carry_refusing(from: &mut Engine, to: &mut Engine, t: Instant) -> usize {
    let mut n = 0;
    for ch in [Channel::Priority, Channel::Data] {
        for d in tx(from, t, ch) {
            n += 1;
            if let RxOutcome::Write { peer, .. } = to.handle_datagram(t, ch, &d) {
                to.refuse_write(t, peer);
            }
        }
    }
    n
}

/// More refusals than may wait unsent hold the standalone ACK back (its information leaves
/// on the refusals); once they are few enough again, an ACK still owed must go by itself.
#[test]
fn an_ack_held_back_behind_many_refusals_goes_once_they_are_sent() {
    let mut p = pair();
    for i in 0..80 {
        p.a.submit_put(us(0), p.ab, 9, 0, vec![1u8; 100], Cookie(i))
            .unwrap();
    }
    assert_eq!(carry_refusing(&mut p.a, &mut p.b, us(10)), 80);
    assert_eq!(
        carry_refusing(&mut p.b, &mut p.a, us(20)),
        80,
        "the refusals"
    );
    events(&mut p.a);
    carry_refusing(&mut p.a, &mut p.b, us(30));
    p.a.submit_send(us(100), p.ab, 1, vec![5u8; 10], Cookie(999))
        .unwrap();
    carry_refusing(&mut p.a, &mut p.b, us(110));
    events(&mut p.b);
    for t in (120..520).step_by(10) {
        p.b.handle_timeout(us(t));
        carry_refusing(&mut p.b, &mut p.a, us(t));
    }
    assert!(
        events(&mut p.a).iter().any(|e| matches!(
            e,
            Event::SendComplete {
                cookie: Cookie(999),
                ..
            }
        )),
        "no ACK within 400 us (ack_delay 30 us): {:?}",
        p.b.stats()
    );
}

/// A peer whose datagrams are smaller than our priority size (its `btl_usnic_mtu` 512 against
/// our 768-byte priority datagrams): nothing we send it may be larger than its datagrams, which
/// its receive buffers are sized for. Raising the size to our priority size had every data
/// datagram and every resend dropped there until the peer timeout.
#[test]
fn nothing_sent_to_a_peer_with_small_datagrams_exceeds_them() {
    let small = Config {
        data_mtu: 512,
        priority_mtu: 512,
        ..cfg(2, 200)
    };
    let mut p = pair_with(cfg(1, 100), small);
    let got = sizes_delivered(&mut p, &[100, 460, 600, 5000], |_| 512);
    assert_eq!(got, [100, 460, 600, 5000]);
}

/// A sends B one message of each length at 0 us, B reads every datagram at 10 us; no datagram
/// on a channel may be longer than `max(channel)`. The lengths B delivered, sorted.
fn sizes_delivered(p: &mut Pair, lens: &[usize], max: impl Fn(Channel) -> usize) -> Vec<usize> {
    for (i, &len) in lens.iter().enumerate() {
        p.a.submit_send(us(0), p.ab, 1, vec![i as u8; len], Cookie(i as u64 + 1))
            .unwrap();
    }
    let mut got = Vec::new();
    for ch in [Channel::Priority, Channel::Data] {
        for d in tx(&mut p.a, us(0), ch) {
            assert!(d.len() <= max(ch), "a {}-byte datagram on {ch:?}", d.len());
            match p.b.handle_datagram(us(10), ch, &d) {
                RxOutcome::Deliver { payload, .. } => got.push(payload.len()),
                RxOutcome::Consumed => {}
                o => panic!("{o:?}"),
            }
        }
    }
    got.extend(events(&mut p.b).iter().filter_map(|e| match e {
        Event::Deliver { data, .. } => Some(data.len()),
        _ => None,
    }));
    got.sort_unstable();
    got
}

/// A peer whose `btl_usnic_priority_limit` is below ours (128 against our 768; the parameter
/// may differ per host or per app context): its priority receive buffers are 128 bytes, so
/// every tiny message or ACK we size to our limit is dropped there as oversized, and a tiny
/// message only arrives when its retransmission (on the data channel) times out. What goes to
/// it on the priority channel must fit its limit, announced in the modex.
#[test]
fn nothing_on_the_priority_channel_exceeds_the_peer_s_priority_size() {
    let small = Config {
        priority_mtu: 128,
        ..cfg(2, 200)
    };
    let mut p = pair_with(cfg(1, 100), small);
    // Tiny messages of ours: each arrives at once, none of them oversized at B.
    let got = sizes_delivered(&mut p, &[10, 70, 300, 700], |ch| match ch {
        Channel::Priority => 128,
        Channel::Data => usize::MAX,
    });
    assert_eq!(got, [10, 70, 300, 700]);
    // Our ACKs: B's datagrams arrive with the first one lost, so the SACK map spans a thousand
    // segments, more than a 128-byte ACK holds; the ACK carries what fits.
    for i in 0..1000u64 {
        p.b.submit_send(us(20), p.ba, 1, vec![1; 1000], Cookie(100 + i))
            .unwrap();
    }
    let sent = tx(&mut p.b, us(20), Channel::Data);
    assert_eq!(sent.len(), 1000);
    for d in &sent[1..] {
        p.a.handle_datagram(us(30), Channel::Data, d);
    }
    let acks = tx(&mut p.a, us(1_000), Channel::Priority);
    assert!(!acks.is_empty(), "an ACK is due");
    for d in acks {
        assert!(d.len() <= 128, "a {}-byte ACK", d.len());
        p.b.handle_datagram(us(1_010), Channel::Priority, &d);
    }
}

#[test]
fn get_never_answered_fails_with_the_peer() {
    let mut ca = cfg(1, 0);
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 0));
    p.a.submit_get(us(0), p.ab, 1, 0, 2, 0, 10, Cookie(5))
        .unwrap();
    for d in tx(&mut p.a, us(0), Channel::Data) {
        p.b.handle_datagram(us(10), Channel::Data, &d);
    }
    // B acknowledges the request, then dies without answering.
    p.b.handle_timeout(us(40));
    for a in tx(&mut p.b, us(40), Channel::Priority) {
        p.a.handle_datagram(us(50), Channel::Priority, &a);
    }
    assert!(events(&mut p.a).is_empty());
    assert!(
        !p.a.is_idle(p.ab),
        "a GET waiting for its reply is outstanding"
    );
    let t = p.a.poll_timeout().expect("the peer-failure clock runs");
    assert_eq!(t, Instant(us(50).0 + 300_000_000));
    p.a.handle_timeout(t);
    assert_eq!(
        events(&mut p.a),
        vec![
            Event::PeerFailed {
                peer: p.ab,
                remote_id: 2
            },
            Event::GetComplete {
                peer: p.ab,
                cookie: Cookie(5),
                result: Err(Failure::PeerUnreachable)
            }
        ]
    );
}

#[derive(Debug)]
struct TwoPieces(Vec<u8>, Vec<u8>);
impl Lent for TwoPieces {
    fn pieces(&self) -> [&[u8]; 2] {
        [&self.0, &self.1]
    }
}

/// Every datagram of `e` on `ch` at `t`, sent gathered (`poll_transmit_gather`): header from
/// the buffer, then the body; and how many had a body.
fn tx_gathered(e: &mut Engine, t: Instant, ch: Channel, min: usize) -> (Vec<Vec<u8>>, usize) {
    let (mut out, mut bodies) = (Vec::new(), 0);
    let mut buf = vec![0u8; 2048];
    while let Some(x) = e.poll_transmit_gather(t, ch, &mut buf, min) {
        let mut d = buf[..x.len].to_vec();
        if let Some(b) = x.body {
            bodies += 1;
            let [p, q] = e.body(&b);
            assert!(p.len() + q.len() >= min);
            d.extend_from_slice(p);
            d.extend_from_slice(q);
        }
        assert_eq!(d.len(), x.datagram_len());
        e.handle_send_complete(ch);
        out.push(d);
    }
    (out, bodies)
}

#[test]
fn gathered_transmits_are_the_copied_ones() {
    // Two identical senders, one copying payloads behind the header and one leaving those of
    // 600 bytes or more in place: the same datagrams, first sends and timeout resends, owned
    // and lent (two pieces, split inside a segment) payloads alike (lent until acknowledged).
    let keep_lent = |id, isn| Config {
        lent_hold: None,
        lent_copy_below: 0,
        ..cfg(id, isn)
    };
    let (mut copied, mut gathered) = (
        pair_with(keep_lent(1, 100), keep_lent(2, 200)),
        pair_with(keep_lent(1, 100), keep_lent(2, 200)),
    );
    for p in [&mut copied, &mut gathered] {
        let data: Vec<u8> = (0..6000u32).map(|i| (i * 7) as u8).collect();
        p.a.submit_send(us(0), p.ab, 1, data.clone(), Cookie(1))
            .unwrap();
        let lent: Box<dyn Lent> = Box::new(TwoPieces(data[..2100].to_vec(), data[2100..].to_vec()));
        p.a.submit_send(us(0), p.ab, 2, lent, Cookie(2)).unwrap();
        p.a.submit_send(us(0), p.ab, 3, vec![9u8; 100], Cookie(3))
            .unwrap();
    }
    let want = tx(&mut copied.a, us(0), Channel::Data);
    let (got, bodies) = tx_gathered(&mut gathered.a, us(0), Channel::Data, 600);
    assert_eq!(got, want);
    assert!(
        bodies >= 8,
        "only {bodies} of {} datagrams gathered",
        got.len()
    );
    assert!(bodies < got.len(), "short payloads are copied");
    // Nothing acknowledged: the timeout resends the same bytes, gathered again.
    let t = copied.a.poll_timeout().unwrap();
    copied.a.handle_timeout(t);
    gathered.a.handle_timeout(t);
    let want = tx(&mut copied.a, t, Channel::Data);
    let (got, bodies) = tx_gathered(&mut gathered.a, t, Channel::Data, 600);
    assert!(!want.is_empty());
    assert_eq!(got, want);
    assert!(bodies > 0);
    assert_eq!(copied.a.stats().bytes_sent, gathered.a.stats().bytes_sent);
    // The receiver reads gathered datagrams like any others.
    for d in got {
        assert!(!matches!(
            gathered.b.handle_datagram(t, Channel::Data, &d),
            RxOutcome::Dropped(_)
        ));
    }
}

#[test]
fn nothing_to_transmit_when_the_engine_says_so() {
    // The edge skips poll_transmit when wants_transmit is false; that must never leave a
    // datagram behind. Checked at every step of a lossy two-way exchange with large and
    // small sends, timeouts and ACKs.
    let mut p = pair();
    let mut buf = vec![0u8; 2048];
    let mut t = us(0);
    let mut x: u64 = 7;
    let mut skipped_empty = 0;
    for round in 0..400u64 {
        for (e, peer) in [(&mut p.a, p.ab), (&mut p.b, p.ba)] {
            if round % 3 == 0 {
                let len = [10, 700, 3000, 20_000][(round % 4) as usize];
                e.submit_send(t, peer, 1, vec![round as u8; len], Cookie(round))
                    .unwrap();
            }
        }
        let mut wire: Vec<(bool, Channel, Vec<u8>)> = Vec::new();
        for (from_a, e) in [(true, &mut p.a), (false, &mut p.b)] {
            if e.poll_timeout().is_some_and(|d| d <= t) {
                e.handle_timeout(t);
            }
            for ch in [Channel::Priority, Channel::Data] {
                loop {
                    let wants = e.wants_transmit(ch);
                    match e.poll_transmit(t, ch, &mut buf) {
                        Some(d) => {
                            assert!(wants, "a datagram on {ch:?} the engine did not announce");
                            e.handle_send_complete(ch);
                            wire.push((from_a, ch, buf[..d.len].to_vec()));
                        }
                        None => {
                            if !wants {
                                skipped_empty += 1;
                            }
                            break;
                        }
                    }
                }
            }
        }
        for (from_a, ch, d) in wire {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(10) {
                continue; // lost
            }
            let to = if from_a { &mut p.b } else { &mut p.a };
            to.handle_datagram(t, ch, &d);
        }
        events(&mut p.a);
        events(&mut p.b);
        t = Instant(t.0 + 50_000);
    }
    assert!(
        skipped_empty > 100,
        "the quiet case was exercised ({skipped_empty})"
    );
}

/// Sends one fragment of `len` bytes from A to B (delivered at t = 10 µs) and returns when
/// B's standalone ACK is due; nothing leaves in the pass that delivered it.
fn ack_due_after(p: &mut Pair, len: usize, cookie: u64) -> Instant {
    p.a.submit_send(us(0), p.ab, 9, vec![3; len], Cookie(cookie))
        .unwrap();
    let mut segs = Vec::new();
    let mut buf = vec![0u8; 10_000];
    while let Some(x) = p.a.poll_transmit(us(0), Channel::Data, &mut buf) {
        p.a.handle_send_complete(Channel::Data);
        segs.push(buf[..x.len].to_vec());
    }
    assert!(!segs.is_empty());
    for d in &segs {
        assert!(!matches!(
            p.b.handle_datagram(us(10), Channel::Data, d),
            RxOutcome::Dropped(_)
        ));
    }
    match p.b.poll_event() {
        Some(Event::Deliver { data, .. }) => assert_eq!(data.len(), len),
        None => assert_eq!(segs.len(), 1, "delivered in place"),
        Some(e) => panic!("{e:?}"),
    }
    // The pass that delivered it (a reply sent now would carry the ACK).
    if p.b.poll_timeout().is_some_and(|t| t <= us(10)) {
        p.b.handle_timeout(us(10));
    }
    assert!(tx(&mut p.b, us(10), Channel::Priority).is_empty());
    let due = p.b.poll_timeout().expect("an ACK is owed");
    p.b.handle_timeout(due);
    let acks = tx(&mut p.b, due, Channel::Priority);
    assert_eq!(acks.len(), 1);
    p.a.handle_datagram(due, Channel::Priority, &acks[0]);
    assert!(p.a.is_idle(p.ab));
    due
}

#[test]
fn fragments_read_in_place_are_acknowledged_on_the_next_pass_and_copied_ones_wait() {
    // The Open MPI edge copies data shorter than `prompt_ack_from` (its send completes at
    // once) and lends longer data until acknowledged, so only those ACKs are urgent.
    let with = |mtu: usize, id: u64, isn: u16| Config {
        data_mtu: mtu,
        prompt_ack_from: 4000,
        ..cfg(id, isn)
    };
    let next_pass = us(10) + Duration(1);
    let mut p = pair_with(with(1472, 1, 100), with(1472, 2, 200));
    assert_eq!(ack_due_after(&mut p, 3000, 1), us(40), "copied, chunked");
    assert_eq!(ack_due_after(&mut p, 5000, 2), next_pass, "lent, chunked");
    let mut p = pair_with(with(9000, 1, 100), with(9000, 2, 200));
    assert_eq!(
        ack_due_after(&mut p, 1000, 3),
        us(40),
        "copied, one datagram"
    );
    assert_eq!(
        ack_due_after(&mut p, 5000, 4),
        next_pass,
        "lent, one datagram"
    );
}

/// A pair whose A has one RTT sample (50 µs: B acknowledges after its ACK delay) and nothing
/// in flight.
fn pair_after_one_round_trip() -> Pair {
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 1, vec![0; 1000], Cookie(1000))
        .unwrap();
    for d in tx(&mut p.a, us(0), Channel::Data) {
        p.b.handle_datagram(us(10), Channel::Data, &d);
    }
    ack_back(&mut p, 10);
    assert!(p.a.is_idle(p.ab));
    events(&mut p.a);
    p
}

#[test]
fn a_spurious_timeout_does_not_make_fast_repair_resend_what_the_peer_is_still_reading() {
    let mut p = pair_after_one_round_trip();
    // A window's worth leaves at once; B is descheduled and reads none of it before A's
    // retransmit timeout, which probes the 8 oldest.
    let mut queue = send_n(&mut p, 100, 100);
    let rto = p.a.poll_timeout().expect("a timer is armed");
    p.a.handle_timeout(rto);
    queue.extend(tx(&mut p.a, rto, Channel::Data));
    assert_eq!(p.a.stats().resends_timeout, 8);
    // B wakes and reads its socket in order, 16 datagrams per pass, acknowledging each pass;
    // A treats every ACK and sends whatever it then thinks lost behind the rest.
    let mut t = rto.0 / 1_000 + 100;
    while !queue.is_empty() {
        let batch: Vec<_> = queue.drain(..queue.len().min(16)).collect();
        for d in &batch {
            p.b.handle_datagram(us(t), Channel::Data, d);
        }
        ack_back(&mut p, t);
        if p.a.poll_timeout().is_some_and(|d| d <= us(t + 40)) {
            p.a.handle_timeout(us(t + 40));
        }
        queue.extend(tx(&mut p.a, us(t + 40), Channel::Data));
        t += 60;
    }
    assert!(p.a.is_idle(p.ab));
    assert_eq!(
        (p.a.stats().resends_fast, p.b.stats().dup_recvs),
        (0, 8),
        "nothing was lost: only the probes arrive twice"
    );
}

#[test]
fn a_window_lost_whole_is_repaired_one_round_trip_after_the_probes() {
    let mut p = pair_after_one_round_trip();
    send_n(&mut p, 100, 100); // all lost
    let rto = p.a.poll_timeout().expect("a timer is armed");
    p.a.handle_timeout(rto);
    let probes = tx(&mut p.a, rto, Channel::Data);
    assert_eq!(probes.len(), 8);
    // The probes arrive and are acknowledged: their ACK delivers nothing fresh, so it is
    // taken as theirs, and the 92 segments sent before them are lost.
    let t = rto.0 / 1_000;
    for d in &probes {
        p.b.handle_datagram(us(t + 10), Channel::Data, d);
    }
    ack_back(&mut p, t + 10);
    // Progress passes at that instant, as the plugin makes them (a pass ends at the timer).
    let mut repairs = tx(&mut p.a, us(t + 50), Channel::Data);
    while p.a.poll_timeout().is_some_and(|d| d <= us(t + 50)) {
        p.a.handle_timeout(us(t + 50));
        repairs.extend(tx(&mut p.a, us(t + 50), Channel::Data));
    }
    assert_eq!(
        (repairs.len(), p.a.stats().resends_fast),
        (92, 92),
        "the rest, at once"
    );
    for d in &repairs {
        p.b.handle_datagram(us(t + 200), Channel::Data, d);
    }
    ack_back(&mut p, t + 200);
    assert!(p.a.is_idle(p.ab));
    assert_eq!(p.a.stats().resends_timeout, 8, "no second timeout");
}

/// One round of ten 1000-byte sends from A at `t0` µs whose third datagram is only late: B gets
/// the others at +10 and ACKs at once (a new gap), A repairs the third when the reordering
/// allowance is over, the original reaches B at +30 and the repair after it, as a duplicate,
/// which B names in an ACK of its own. Returns how long after the ACK (+20) the repair was due.
fn late_third(p: &mut Pair, t0: u64) -> u64 {
    let d = send_n(p, 10, t0);
    for (i, x) in d.iter().enumerate() {
        if i != 2 {
            p.b.handle_datagram(us(t0 + 10), Channel::Data, x);
        }
    }
    for x in tx(&mut p.b, us(t0 + 10), Channel::Priority) {
        p.a.handle_datagram(us(t0 + 20), Channel::Priority, &x);
    }
    let due = p.a.poll_timeout().unwrap();
    p.a.handle_timeout(due);
    let r = tx(&mut p.a, due, Channel::Data);
    assert_eq!(r.len(), 1, "the third is repaired");
    p.b.handle_datagram(us(t0 + 30), Channel::Data, &d[2]);
    for x in tx(&mut p.b, us(t0 + 30), Channel::Priority) {
        p.a.handle_datagram(us(t0 + 40), Channel::Priority, &x);
    }
    assert_eq!(
        p.b.handle_datagram(us(t0 + 35), Channel::Data, &r[0]),
        RxOutcome::Dropped(DropReason::Duplicate)
    );
    let report = tx(&mut p.b, us(t0 + 35), Channel::Priority);
    assert_eq!(report.len(), 1);
    assert_eq!(
        hdr(&report[0]).ack.unwrap().dsack,
        Some(hdr(&d[2]).seq as u16)
    );
    p.a.handle_datagram(us(t0 + 45), Channel::Priority, &report[0]);
    assert_eq!(events(&mut p.a).len(), 10);
    assert!(p.a.is_idle(p.ab));
    (due.0 - us(t0 + 20).0) / 1_000
}

#[test]
fn a_repair_reported_needless_makes_the_next_one_wait_longer() {
    let mut p = pair();
    let first = late_third(&mut p, 0);
    assert_eq!(p.a.stats().spurious_resends, 1);
    let second = late_third(&mut p, 1_000);
    assert_eq!(p.a.stats().spurious_resends, 2);
    assert!(
        second > first,
        "the reordering allowance widened: repair due {first} then {second} us after the ACK"
    );
}

#[test]
fn every_duplicate_is_named_by_an_ack_of_its_own() {
    let mut p = pair();
    let d = send_n(&mut p, 3, 0);
    for x in &d {
        p.b.handle_datagram(us(10), Channel::Data, x);
    }
    tx(&mut p.b, us(40), Channel::Priority);
    // All three arrive again in one pass (a replaying network, or three needless resends).
    for x in &d {
        p.b.handle_datagram(us(50), Channel::Data, x);
    }
    let acks = tx(&mut p.b, us(50), Channel::Priority);
    let named: Vec<_> = acks.iter().map(|a| hdr(a).ack.unwrap().dsack).collect();
    let seqs: Vec<_> = d.iter().map(|x| Some(hdr(x).seq as u16)).collect();
    assert_eq!(named, seqs);
    // A never resent them: the network made the copies, nothing is counted or changed.
    for a in &acks {
        p.a.handle_datagram(us(60), Channel::Priority, a);
    }
    assert_eq!(p.a.stats().spurious_resends, 0);
}

/// The first step of the storms bidirectional runs across hosts had under wire version 3: a
/// segment only late is repaired, its original's ACK comes back after more than a round trip
/// and was taken as the repair's, declaring lost everything sent between the two, whose
/// repairs did the same in turn. B's ACK echoes the latest transmission it has seen, which is
/// older than the repair: A knows the ACK is the original's.
#[test]
fn the_ack_of_a_late_original_does_not_make_later_segments_lost() {
    let mut p = pair();
    let d = send_n(&mut p, 10, 0);
    // t=10: B reads the first, third and fourth (the second is late, the rest still queued)
    // and ACKs at once (a new gap); A has it at t=20 (a 20 µs round trip).
    for x in [&d[0], &d[2], &d[3]] {
        p.b.handle_datagram(us(10), Channel::Data, x);
    }
    for x in tx(&mut p.b, us(10), Channel::Priority) {
        p.a.handle_datagram(us(20), Channel::Priority, &x);
    }
    let due = p.a.poll_timeout().unwrap();
    assert!(due <= us(25), "repair due at {due:?}");
    p.a.handle_timeout(due);
    let r = tx(&mut p.a, due, Channel::Data);
    assert_eq!((r.len(), hdr(&r[0]).seq), (1, hdr(&d[1]).seq));
    // t=30: the original arrives; B's ACK (it fills the gap) reaches A at t=50, a round trip
    // and more after the repair left.
    p.b.handle_datagram(us(30), Channel::Data, &d[1]);
    let ack = tx(&mut p.b, us(30), Channel::Priority);
    assert_eq!(ack.len(), 1);
    assert_eq!(
        hdr(&ack[0]).ack.unwrap().echo,
        hdr(&d[3]).tx,
        "the latest transmission B has seen"
    );
    p.a.handle_datagram(us(50), Channel::Priority, &ack[0]);
    if p.a.poll_timeout().is_some_and(|t| t <= us(50)) {
        p.a.handle_timeout(us(50));
    }
    assert!(
        tx(&mut p.a, us(50), Channel::Data).is_empty(),
        "the six still queued at B are not declared lost"
    );
    // B reads them and the repair (a duplicate): everything completes, one resend in all.
    for x in d[4..].iter().chain(&r) {
        p.b.handle_datagram(us(60), Channel::Data, x);
    }
    for x in tx(&mut p.b, us(60), Channel::Priority) {
        p.a.handle_datagram(us(70), Channel::Priority, &x);
    }
    assert!(p.a.is_idle(p.ab));
    assert_eq!((p.a.stats().resends_fast, p.b.stats().dup_recvs), (1, 1));
}

/// A with peers B, C and D, serving up to `turn` data segments to a peer in a row.
fn turn_of(turn: u32) -> (Engine, [PeerId; 3]) {
    let ca = Config {
        data_turn: turn,
        ..cfg(1, 0)
    };
    let mut a = Engine::new(ca).unwrap();
    let ids = [2, 3, 4].map(|id| a.add_peer(us(0), cfg(id, 0).peer_info()));
    (a, ids)
}

/// The peers (B, C, D) of the next `max` data datagrams A has, in order.
fn served(a: &mut Engine, ids: &[PeerId; 3], max: usize) -> String {
    let mut buf = vec![0u8; 2048];
    let mut order = String::new();
    while order.len() < max {
        let Some(x) = a.poll_transmit(us(0), Channel::Data, &mut buf) else {
            break;
        };
        a.handle_send_complete(Channel::Data);
        let i = ids
            .iter()
            .position(|&p| p == x.peer)
            .expect("one of A's peers");
        assert_eq!(
            hdr(&buf[..x.len]).key,
            1000 * (i as u64 + 2),
            "addressed to it"
        );
        order.push(['B', 'C', 'D'][i]);
    }
    order
}

/// A 10000-byte send is 8 chunks, a 5000-byte one 4.
fn send_to(a: &mut Engine, peer: PeerId, len: usize) {
    a.submit_send(us(0), peer, 1, vec![7; len], Cookie(len as u64))
        .unwrap();
}

/// B and C each wait for an 8-chunk fragment.
fn two_waiting(turn: u32) -> String {
    let (mut a, ids) = turn_of(turn);
    send_to(&mut a, ids[0], 10_000);
    send_to(&mut a, ids[1], 10_000);
    served(&mut a, &ids, usize::MAX)
}

#[test]
fn a_peer_keeps_the_data_channel_for_its_turn() {
    assert_eq!(two_waiting(1), "BCBCBCBCBCBCBCBC", "one segment per turn");
    assert_eq!(
        two_waiting(3),
        "BBBCCCBBBCCCBBCC",
        "three in a row, then the other peer"
    );
    // A turn longer than what a peer has: it runs out and hands over.
    assert_eq!(two_waiting(64), "BBBBBBBBCCCCCCCC");
    // Three peers keep their order.
    let (mut a, ids) = turn_of(2);
    for p in ids {
        send_to(&mut a, p, 5_000);
    }
    assert_eq!(served(&mut a, &ids, usize::MAX), "BBCCDDBBCCDD");
}

#[test]
fn a_peer_that_had_the_channel_alone_starts_a_whole_turn_when_another_comes() {
    let (mut a, ids) = turn_of(3);
    send_to(&mut a, ids[0], 10_000);
    assert_eq!(
        served(&mut a, &ids, 5),
        "BBBBB",
        "alone: B goes on past its turn"
    );
    send_to(&mut a, ids[1], 5_000);
    assert_eq!(served(&mut a, &ids, usize::MAX), "BBBCCCC");
}

#[test]
fn a_peer_removed_during_its_turn_hands_the_channel_over() {
    let (mut a, ids) = turn_of(3);
    send_to(&mut a, ids[0], 10_000);
    send_to(&mut a, ids[1], 10_000);
    assert_eq!(served(&mut a, &ids, 2), "BB");
    a.remove_peer(us(0), ids[0]);
    let b2 = a.add_peer(us(0), cfg(2, 0).peer_info());
    assert_ne!(b2, ids[0], "a removed peer's id is never given again");
    send_to(&mut a, b2, 10_000);
    // B's place in the queue went with it: C's turn first, then the new B's.
    let ids = [b2, ids[1], ids[2]];
    assert_eq!(served(&mut a, &ids, 6), "CCCBBB");
}

#[test]
fn a_put_completed_by_an_older_ack_still_waits_for_a_refusal_a_newer_one_counted() {
    // A piggy-backed ACK names 32 segments past the cumulative point, a standalone one more.
    // B refuses a middle segment of A's PUT after its standalone ACK named the tail; B's data
    // then carries the newer ACK (barrier past the refusal) but not the tail. Processed
    // first, it completes nothing; the older ACK completes the PUT, and its barrier must not
    // let the PUT complete well before the refusal can arrive.
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 1, vec![5; 100], Cookie(1))
        .unwrap();
    let lost = tx(&mut p.a, us(0), Channel::Priority);
    assert_eq!(
        lost.len(),
        1,
        "the tiny send, lost: it holds the cumulative point back"
    );
    p.a.submit_put(us(0), p.ab, 9, 0, vec![1; 40 * 1400], Cookie(3))
        .unwrap();
    let put = tx(&mut p.a, us(0), Channel::Data);
    assert!(put.len() > 34, "{} segments", put.len());
    for (i, d) in put.iter().enumerate() {
        if i != 1 {
            assert!(matches!(
                p.b.handle_datagram(us(10), Channel::Data, d),
                RxOutcome::Write { .. }
            ));
        }
    }
    p.b.handle_timeout(us(100));
    let old_ack = tx(&mut p.b, us(100), Channel::Priority);
    assert_eq!(old_ack.len(), 1);
    assert!(matches!(
        p.b.handle_datagram(us(110), Channel::Data, &put[1]),
        RxOutcome::Write { .. }
    ));
    p.b.refuse_write(us(110), p.ba);
    p.b.submit_send(us(110), p.ba, 1, vec![6; 1000], Cookie(4))
        .unwrap();
    let newer = tx(&mut p.b, us(110), Channel::Data);
    let (frag, refusal): (Vec<_>, Vec<_>) =
        newer.into_iter().partition(|d| hdr(d).kind == Kind::Frag);
    assert_eq!((frag.len(), refusal.len()), (1, 1));
    assert!(
        hdr(&frag[0]).ack.is_some(),
        "the fragment carries B's newer ACK"
    );
    assert!(matches!(
        p.a.handle_datagram(us(120), Channel::Data, &frag[0]),
        RxOutcome::Deliver { .. }
    ));
    p.a.handle_datagram(us(121), Channel::Priority, &old_ack[0]);
    assert!(
        !events(&mut p.a)
            .iter()
            .any(|e| matches!(e, Event::PutComplete { .. })),
        "the refusal B's newer ACK counted in is still to come"
    );
    p.a.handle_datagram(us(130), Channel::Data, &refusal[0]);
    assert!(events(&mut p.a).contains(&Event::PutComplete {
        peer: p.ab,
        cookie: Cookie(3),
        result: Err(Failure::RemoteRefused)
    }));
}

/// A lost data segment with nothing sent after it on the data channel times out although the
/// peer keeps acknowledging tiny messages on the priority channel more often than once per
/// RTO: only a new acknowledgement on its own channel says it may still be queued behind
/// others (it was re-armed from every priority ACK until the window filled, 0.8 s here).
#[test]
fn a_lost_data_segment_times_out_while_priority_traffic_is_acknowledged() {
    let mut p = pair();
    p.a.submit_send(us(0), p.ab, 1, vec![5; 1000], Cookie(1))
        .unwrap();
    let lost = tx(&mut p.a, us(0), Channel::Data);
    assert_eq!(lost.len(), 1, "lost");
    let lost_seq = hdr(&lost[0]).seq;
    let mut resent_at = None;
    let mut t = 0;
    let mut cookie = 100;
    while t < 200_000 && resent_at.is_none() {
        t += 200;
        p.a.handle_timeout(us(t));
        for d in tx(&mut p.a, us(t), Channel::Data) {
            if hdr(&d).seq == lost_seq {
                resent_at = Some(t);
            }
            p.b.handle_datagram(us(t + 5), Channel::Data, &d);
        }
        if p.a
            .submit_send(us(t), p.ab, 2, b"x".to_vec(), Cookie(cookie))
            .is_ok()
        {
            cookie += 1;
        }
        for d in tx(&mut p.a, us(t), Channel::Priority) {
            p.b.handle_datagram(us(t + 5), Channel::Priority, &d);
        }
        p.b.handle_timeout(us(t + 40));
        for d in tx(&mut p.b, us(t + 40), Channel::Priority) {
            p.a.handle_datagram(us(t + 50), Channel::Priority, &d);
        }
        events(&mut p.a);
        events(&mut p.b);
    }
    // Its timeout is at most the initial RTO (5 ms, no sample of the data channel yet) after
    // it went out.
    assert!(
        resent_at.is_some_and(|r| r <= 10_000),
        "resent at {resent_at:?} us, after {} tiny messages",
        cookie - 100
    );
}

/// What one step of a held-receive trace moved (`hold_step`).
#[derive(Default)]
struct Moved {
    /// First payload byte of every fragment B delivered, in delivery order.
    got: Vec<u8>,
    /// B's standalone ACKs to A (all given to A).
    acks: Vec<Vec<u8>>,
    /// Data-channel datagrams A sent.
    a_data: usize,
    a_events: Vec<Event>,
}

/// At `t`: A's due timers, A's datagrams to B (dropped on the way if `!b_alive`), B's due
/// timers and its ACKs to A.
fn hold_step(p: &mut Pair, t: Instant, b_alive: bool, m: &mut Moved) {
    p.a.handle_timeout(t);
    for ch in [Channel::Priority, Channel::Data] {
        for d in tx(&mut p.a, t, ch) {
            if ch == Channel::Data {
                m.a_data += 1;
            }
            if !b_alive {
                continue;
            }
            if let RxOutcome::Deliver { payload, .. } = p.b.handle_datagram(t, ch, &d) {
                m.got.push(d[payload][0]);
            }
        }
    }
    if b_alive {
        p.b.handle_timeout(t);
        let evs = events(&mut p.b);
        assert!(
            evs.is_empty(),
            "B: only fragments delivered in place: {evs:?}"
        );
        for ack in tx(&mut p.b, t, Channel::Priority) {
            p.a.handle_datagram(t, Channel::Priority, &ack);
            m.acks.push(ack);
        }
    }
    m.a_events.extend(events(&mut p.a));
}

/// The next instant a held-receive trace looks at: the earlier engine timer, at most `step`
/// after `t`, and after `t`.
fn hold_next(p: &Pair, t: Instant, step: Duration) -> Instant {
    let mut n = t + step;
    for x in [p.a.poll_timeout(), p.b.poll_timeout()]
        .into_iter()
        .flatten()
    {
        n = n.min(x);
    }
    n.max(t + Duration::from_micros(1))
}

fn failed(evs: &[Event]) -> bool {
    evs.iter().any(|e| matches!(e, Event::PeerFailed { .. }))
}

#[test]
fn a_held_receiver_is_not_declared_failed_and_takes_everything_once_released() {
    // B's application is away and its edge has kept all it may: B holds its receive side for
    // three peer timeouts while A has 250 fragments out for it. A must not declare B failed,
    // B must take nothing while held, and once released every fragment arrives exactly once,
    // the first within rto_max.
    let mut ca = cfg(1, 100);
    ca.peer_timeout = Duration::from_millis(300);
    let rto_max = ca.rto_max;
    let mut p = pair_with(ca, cfg(2, 200));
    let sent = send_n(&mut p, 250, 0);
    // The first 50 arrive before the hold, the others while held.
    let mut m = Moved::default();
    for d in &sent[..50] {
        if let RxOutcome::Deliver { payload, .. } = p.b.handle_datagram(us(10), Channel::Data, d) {
            m.got.push(d[payload][0]);
        }
    }
    p.b.hold_receive(true);
    assert!(p.b.receive_held());
    for d in &sent[50..] {
        assert_eq!(
            p.b.handle_datagram(us(10), Channel::Data, d),
            RxOutcome::Dropped(DropReason::Held)
        );
    }
    assert_eq!(p.b.stats().held_recvs, 200);
    let acks = tx(&mut p.b, us(10), Channel::Priority);
    assert_eq!(
        acks.len(),
        1,
        "one held ACK per pass, however many were dropped"
    );
    let a = hdr(&acks[0]).ack.unwrap();
    assert!(a.held, "{a:?}");
    assert_eq!(a.cum, 149, "the 50 taken before the hold, nothing after");
    p.a.handle_datagram(us(20), Channel::Priority, &acks[0]);
    let done: Vec<Event> = events(&mut p.a);
    assert_eq!(done.len(), 50, "the 50 taken complete");

    let mut t = us(20);
    let release = us(900_000);
    let (mut a_data_held, mut fast_held) = (0, u64::MAX);
    let mut got_at = None;
    let mut completed = done.len();
    while t < us(2_000_000) {
        if t >= release && p.b.receive_held() {
            p.b.hold_receive(false);
            a_data_held = m.a_data;
            fast_held = p.a.stats().resends_fast;
        }
        let before = m.got.len();
        hold_step(&mut p, t, true, &mut m);
        if t < release {
            assert_eq!(m.got.len(), 50, "delivered while held at {t:?}");
        } else if m.got.len() > before && got_at.is_none() {
            got_at = Some(t);
        }
        assert!(!failed(&m.a_events), "a held peer declared failed at {t:?}");
        completed += std::mem::take(&mut m.a_events).len();
        if completed == 250 {
            break;
        }
        t = hold_next(&p, t, Duration::from_millis(1));
    }
    assert_eq!(completed, 250, "everything completed by {t:?}");
    // The 50 taken before the hold first, in order; then every other exactly once. (The core
    // delivers a fragment when it is accepted, and the retransmissions after the hold go in
    // the order the timeout probes left them, as after any loss: ob1 orders by its own
    // sequence numbers.)
    let want: Vec<u8> = (0..50).collect();
    assert_eq!(m.got[..50], want[..], "the fragments taken before the hold");
    let mut rest = m.got[50..].to_vec();
    rest.sort_unstable();
    let want: Vec<u8> = (50..250).collect();
    assert_eq!(rest, want, "every fragment exactly once");
    let got_at = got_at.expect("delivered after the release");
    assert!(got_at <= release + rto_max, "first delivery at {got_at:?}");
    // Held for 0.9 s, A probed one datagram per timeout (at most rto_max apart once backed
    // off), not a window's worth, nor 8.
    assert!(a_data_held < 20, "{a_data_held} datagrams to a held peer");
    assert!(
        p.b.stats().held_recvs > 200 + 4,
        "A kept probing the held peer"
    );
    assert_eq!(p.a.stats().peers_failed, 0);
    assert_eq!(fast_held, 0, "a held ACK infers no loss");
    assert!(p.a.is_idle(p.ab));
}

#[test]
fn a_held_ack_is_no_acknowledgement_progress() {
    // B holds from the start. Its held ACK, however often it arrives, opens no window, takes no
    // RTT sample (the retransmit timer keeps its deadline and backs off as after any
    // timeout), and counts as no duplicate ACK: nothing is repaired fast.
    let mut cb = cfg(2, 200);
    cb.rx_window = 16;
    let mut p = pair_with(cfg(1, 100), cb);
    for i in 0..40 {
        p.a.submit_send(us(0), p.ab, 1, vec![i as u8; 1000], Cookie(i))
            .unwrap();
    }
    let first = tx(&mut p.a, us(0), Channel::Data);
    assert_eq!(first.len(), 16, "the window B announced");
    p.b.hold_receive(true);
    for d in &first {
        assert_eq!(
            p.b.handle_datagram(us(10), Channel::Data, d),
            RxOutcome::Dropped(DropReason::Held)
        );
    }
    let held = tx(&mut p.b, us(10), Channel::Priority);
    assert_eq!(held.len(), 1);
    assert!(hdr(&held[0]).ack.unwrap().held);
    let deadline = p.a.poll_timeout().expect("a retransmission is due");
    let stats = p.a.stats().clone();
    for i in 0..50 {
        assert_eq!(
            p.a.handle_datagram(us(20 + i), Channel::Priority, &held[0]),
            RxOutcome::Consumed
        );
        assert!(
            tx(&mut p.a, us(20 + i), Channel::Data).is_empty(),
            "no repair, no new data"
        );
    }
    assert_eq!(
        p.a.poll_timeout(),
        Some(deadline),
        "the retransmit timer stands"
    );
    let now = p.a.stats();
    assert_eq!(now.dup_acks, stats.dup_acks, "not a duplicate ACK");
    assert_eq!(now.ack_recvs, stats.ack_recvs + 50);
    assert_eq!((now.resends_fast, now.resends_timeout), (0, 0));
    assert!(events(&mut p.a).is_empty());
    // The timeout probes once (the peer drops what it is sent until it is back; 8 probes
    // otherwise); the held ACK answering each probe leaves the timeout backed off: the next
    // probe waits twice as long, up to rto_max.
    let mut t = deadline;
    let mut gaps = Vec::new();
    let mut last = deadline;
    for _ in 0..8 {
        p.a.handle_timeout(t);
        let probes = tx(&mut p.a, t, Channel::Data);
        assert_eq!(probes.len(), 1, "timeout probes at {t:?}");
        for d in &probes {
            assert_eq!(
                p.b.handle_datagram(t, Channel::Data, d),
                RxOutcome::Dropped(DropReason::Held)
            );
        }
        for a in tx(&mut p.b, t, Channel::Priority) {
            p.a.handle_datagram(t + Duration::from_micros(10), Channel::Priority, &a);
        }
        assert!(tx(&mut p.a, t, Channel::Data).is_empty(), "no fast repair");
        let next = p.a.poll_timeout().unwrap();
        gaps.push(next.0 - last.0);
        last = next;
        t = next;
    }
    assert_eq!(p.a.stats().resends_fast, 0);
    assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
    assert_eq!(
        *gaps.last().unwrap(),
        200_000_000,
        "backed off to rto_max: {gaps:?}"
    );
}

#[test]
fn a_replayed_held_ack_does_not_keep_a_silent_peer_alive() {
    // B holds, answering A's probes with held ACKs, until 500 ms; then it dies. Every held
    // ACK it sent is replayed to A every 10 ms from then on: A must declare B failed within
    // a peer timeout of B's last genuine one.
    let mut ca = cfg(1, 100);
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 200));
    send_n(&mut p, 20, 0); // lost
    p.b.hold_receive(true);
    let mut m = Moved::default();
    let mut t = us(1_000);
    let death = us(500_000);
    let mut last_genuine = None;
    let mut failed_at = None;
    let mut next_replay = death;
    while t < us(3_000_000) {
        let alive = t < death;
        let before = m.acks.len();
        hold_step(&mut p, t, alive, &mut m);
        if m.acks.len() > before {
            last_genuine = Some(t);
        }
        if !alive && t >= next_replay {
            for a in m.acks.clone() {
                p.a.handle_datagram(t, Channel::Priority, &a);
            }
            next_replay = t + Duration::from_millis(10);
        }
        m.a_events.extend(events(&mut p.a));
        if failed(&m.a_events) {
            failed_at = Some(t);
            break;
        }
        t = hold_next(&p, t, Duration::from_millis(10)).min(next_replay.max(t + Duration(1)));
    }
    assert!(m.acks.len() >= 3, "B answered A's probes: {}", m.acks.len());
    assert!(m.acks.iter().all(|a| hdr(a).ack.unwrap().held));
    let last_genuine = last_genuine.unwrap();
    assert!(
        last_genuine > us(300_000),
        "B was alive past a peer timeout: {last_genuine:?}"
    );
    let failed_at = failed_at.expect("a dead peer is declared failed despite the replays");
    assert!(
        failed_at <= last_genuine + Duration::from_millis(300) + Duration::from_millis(10),
        "failed at {failed_at:?}, last held ACK at {last_genuine:?}"
    );
}

/// A's GET of 3000 bytes from B, its request acknowledged by B at 50 us (nothing of A's left in
/// flight), A's peer timeout 300 ms; returns B's request id.
fn get_acknowledged_with_a_300_ms_peer_timeout() -> (Pair, u32) {
    let mut ca = cfg(1, 100);
    ca.peer_timeout = Duration::from_millis(300);
    let mut p = pair_with(ca, cfg(2, 200));
    let req = get_request(&mut p, (0, 10), (42, 8), 3000, 7);
    p.b.handle_timeout(us(40));
    for a in tx(&mut p.b, us(40), Channel::Priority) {
        p.a.handle_datagram(us(50), Channel::Priority, &a);
    }
    (p, req)
}

/// A holds its receive side (its helper has 64 MiB waiting) while its own GET from B is
/// answered: B's reply data is refused, B keeps retransmitting it (and A keeps answering with
/// held ACKs). B is alive throughout. A must not declare B failed.
#[test]
fn a_held_rank_with_a_get_outstanding_does_not_fail_its_live_target() {
    let (mut p, req) = get_acknowledged_with_a_300_ms_peer_timeout();
    // A's application is away and its helper holds; B answers.
    p.a.hold_receive(true);
    p.b.answer_get(us(60), p.ba, req, Ok(vec![9u8; 3000].into()));
    let mut t = us(60);
    let mut a_failed = None;
    while t < us(2_000_000) {
        for ch in [Channel::Priority, Channel::Data] {
            for d in tx(&mut p.b, t, ch) {
                p.a.handle_datagram(t, ch, &d);
            }
        }
        p.a.handle_timeout(t);
        for ch in [Channel::Priority, Channel::Data] {
            for d in tx(&mut p.a, t, ch) {
                p.b.handle_datagram(t, ch, &d);
            }
        }
        p.b.handle_timeout(t);
        if events(&mut p.a)
            .iter()
            .any(|e| matches!(e, Event::PeerFailed { .. }))
        {
            a_failed = Some(t);
            break;
        }
        let mut n = t + Duration::from_millis(5);
        for x in [p.a.poll_timeout(), p.b.poll_timeout()]
            .into_iter()
            .flatten()
        {
            n = n.min(x);
        }
        t = n.max(t + Duration::from_micros(1));
    }
    assert!(p.a.stats().held_recvs > 0, "A refused B's reply");
    assert_eq!(p.b.stats().peers_failed, 0, "B does not fail A (held ACKs)");
    assert_eq!(
        a_failed, None,
        "A declared its live target failed at {a_failed:?}"
    );
}

/// The whole job is stopped (SIGSTOP) for longer than the peer timeout while A's GET waits
/// for its reply (request acknowledged, nothing in A's retransmit hotel). On resume A must
/// not declare B failed before B had any chance to run.
#[test]
fn a_stopped_rank_waiting_for_a_get_reply_is_not_failed_on_resume() {
    let (mut p, _req) = get_acknowledged_with_a_300_ms_peer_timeout();
    // SIGSTOP for 2 s; A happens to run first on resume.
    let resumed = us(2_000_000);
    p.a.handle_timeout(resumed);
    assert!(
        !events(&mut p.a)
            .iter()
            .any(|e| matches!(e, Event::PeerFailed { .. })),
        "declared failed on resume, before the peer ran"
    );
}

/// B took 50 segments, then holds; its one held ACK acknowledges those 50 (progress) and says
/// it holds. A's next timeout should probe once (B drops everything), not 8 times.
#[test]
fn a_held_ack_that_also_acknowledges_still_marks_the_peer_holding() {
    let mut p = pair();
    let sent = send_n(&mut p, 100, 0);
    for d in &sent[..50] {
        p.b.handle_datagram(us(10), Channel::Data, d);
    }
    p.b.hold_receive(true);
    for d in &sent[50..] {
        p.b.handle_datagram(us(10), Channel::Data, d);
    }
    let acks = tx(&mut p.b, us(10), Channel::Priority);
    assert_eq!(acks.len(), 1);
    assert!(hdr(&acks[0]).ack.unwrap().held);
    p.a.handle_datagram(us(20), Channel::Priority, &acks[0]);
    let t = p.a.poll_timeout().unwrap();
    p.a.handle_timeout(t);
    let probes = tx(&mut p.a, t, Channel::Data);
    assert_eq!(probes.len(), 1, "probes to a peer that just said it holds");
}
