//! Thousands of datagrams both ways on both channels through the udp provider on `lo`, with
//! few send credits, fewer posted receives than datagrams in flight, and batched reposts.
//! At this modest rate (a bounded number in flight) nothing may be lost, duplicated,
//! reordered or corrupted.
use usnic_rs::fabric::{
    discover, parse_if_list, BufId, Completion, FabricConfig, Module, PeerAddr,
};
use usnic_rs::proto::Channel;

const PER_STREAM: u64 = 5_000;
const IN_FLIGHT: u64 = 48;
const REPOST_BATCH: usize = 8;
const CHANNELS: [Channel; 2] = [Channel::Priority, Channel::Data];

fn datagram(seq: u64, stream: u8, mtu: usize) -> Vec<u8> {
    // Lengths sweep the whole range, with a full-MTU datagram every 97th.
    let len = if seq.is_multiple_of(97) {
        mtu
    } else {
        9 + (seq as usize * 131) % (mtu - 8)
    };
    let mut d = Vec::with_capacity(len);
    d.extend_from_slice(&seq.to_le_bytes());
    d.push(stream);
    d.extend((9..len).map(|i| (seq as u8).wrapping_add(i as u8).wrapping_mul(stream | 1)));
    d
}

#[derive(Default)]
struct Stream {
    sent: u64,
    received: u64,
}

struct Side {
    m: Module,
    peer: PeerAddr,
    /// Outgoing streams per channel, and what arrives here per channel.
    out: [Stream; 2],
    inc: [Stream; 2],
    reposts: [Vec<BufId>; 2],
    credit_waits: u64,
    would_block: u64,
}

fn stream_id(side: usize, ch: Channel) -> u8 {
    (side * 2 + ch as usize) as u8
}

#[test]
fn thousands_of_datagrams_lose_nothing() {
    let sides = exchange(false, false);
    // With 16 data send buffers and 48 datagrams allowed in flight, credits must have run out.
    assert!(sides.iter().all(|s| s.credit_waits > 0));
}

#[test]
fn thousands_of_batched_datagrams_read_in_runs_lose_nothing() {
    let sides = exchange(true, true);
    // Every run one side sent arrived whole at the other and was read with one call.
    for (me, other) in [(0, 1), (1, 0)] {
        let (reads, datagrams) = sides[me].m.gro_stats(Channel::Data);
        let (sends, batched) = sides[other].m.batch_stats(Channel::Data);
        assert!(
            reads > 0 && (reads, datagrams) == (sends, batched),
            "side {me} read {reads} runs, {datagrams} datagrams; side {other} sent {sends}, {batched}"
        );
    }
}

#[test]
fn thousands_of_batched_datagrams_lose_nothing() {
    // 3000-byte datagrams on lo: 21 fit one batched send. A full datagram (every 97th)
    // starts a batch that the next, shorter one closes, unless the pass ends between them.
    let sides = exchange(true, false);
    for s in &sides {
        assert_eq!(s.m.batch_room(Channel::Data), 21);
        let (sends, datagrams) = s.m.batch_stats(Channel::Data);
        assert!(
            sends >= PER_STREAM / 97 / 2 && datagrams == 2 * sends,
            "{sends} {datagrams}"
        );
    }
}

/// Both sides send `PER_STREAM` datagrams on each channel and check every one they receive;
/// with `gso` the data channel batches, and each pass ends with `flush_sends`; with `reads`
/// the channels read their sockets themselves (`btl_usnic_gro`), the data channel in runs (it
/// has enough receive buffers for that), else the provider reads every datagram.
fn exchange(gso: bool, reads: bool) -> [Side; 2] {
    let cfg = FabricConfig {
        if_include: parse_if_list("lo").unwrap(),
        // Data lengths sweep across the inject size (1472 here): with gso off some sends are
        // injected and the rest wait for completions, so credits still run out.
        mtu_cap: 3000,
        sd_num: 16,
        rd_num: if reads { 160 } else { 32 },
        prio_sd_num: 8,
        prio_rd_num: 16,
        gso,
        gro: reads,
        ..Default::default()
    };
    let dev = discover(&cfg).unwrap().into_iter().next().expect("lo");
    let mut a = Module::open(&dev, &cfg).unwrap();
    let mut b = Module::open(&dev, &cfg).unwrap();
    assert_eq!(a.reads_socket(Channel::Data), reads);
    let pa = b.insert_peer(&a.local_address()).unwrap();
    let pb = a.insert_peer(&b.local_address()).unwrap();
    let mk = |m, peer| Side {
        m,
        peer,
        out: Default::default(),
        inc: Default::default(),
        reposts: Default::default(),
        credit_waits: 0,
        would_block: 0,
    };
    let mut sides = [mk(a, pb), mk(b, pa)];
    let mut completions = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let done = sides
            .iter()
            .all(|s| s.inc.iter().all(|st| st.received == PER_STREAM));
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stalled: datagrams were lost"
        );
        for me in 0..2 {
            let other = 1 - me;
            for ch in CHANNELS {
                let c = ch as usize;
                // Send while the receiver has fewer than IN_FLIGHT outstanding.
                while sides[me].out[c].sent < PER_STREAM
                    && sides[me].out[c].sent - sides[other].inc[c].received < IN_FLIGHT
                {
                    let s = &mut sides[me];
                    let mtu = s.m.channel_mtu(ch);
                    let d = datagram(s.out[c].sent, stream_id(me, ch), mtu);
                    let Some((id, buf)) = s.m.tx_buffer(ch) else {
                        s.credit_waits += 1;
                        break;
                    };
                    buf[..d.len()].copy_from_slice(&d);
                    let peer = s.peer;
                    match s.m.post_send(ch, id, d.len(), &peer) {
                        Ok(_) => s.out[c].sent += 1,
                        Err(e) if e.is_would_block() => {
                            s.m.release_tx(ch, id);
                            s.would_block += 1;
                            break;
                        }
                        Err(e) => panic!("post_send: {e}"),
                    }
                }
                match sides[me].m.flush_sends(ch) {
                    Err(e) if !e.is_would_block() => panic!("flush_sends: {e}"),
                    _ => {}
                }
                // Receive side of `me` on this channel.
                completions.clear();
                sides[me].m.poll(ch, 16, &mut completions).unwrap();
                let s = &mut sides[me];
                for comp in &completions {
                    match *comp {
                        Completion::SendDone { .. } => {}
                        Completion::Recv { buf, len } => {
                            let seq = s.inc[c].received;
                            let want = datagram(seq, stream_id(other, ch), s.m.channel_mtu(ch));
                            let got = s.m.rx_bytes(ch, buf, len);
                            assert_eq!(got.len(), want.len(), "length of {seq} on {ch:?}");
                            assert!(
                                got == &want[..],
                                "datagram {seq} of stream {} corrupt/out of order",
                                stream_id(other, ch)
                            );
                            s.inc[c].received += 1;
                            s.reposts[c].push(buf);
                        }
                        Completion::Error { ref error, .. } => panic!("error completion: {error}"),
                    }
                }
                if s.reposts[c].len() >= REPOST_BATCH
                    || (completions.is_empty() && !s.reposts[c].is_empty())
                {
                    for buf in s.reposts[c].drain(..) {
                        s.m.repost(ch, buf);
                    }
                    s.m.flush_reposts().unwrap();
                }
            }
        }
    }
    for (i, s) in sides.iter_mut().enumerate() {
        for ch in CHANNELS {
            assert_eq!(s.out[ch as usize].sent, PER_STREAM);
            // Collect the last send completions: every credit comes back.
            let mut out = Vec::new();
            for _ in 0..1000 {
                s.m.poll(ch, 64, &mut out).unwrap();
            }
            assert!(
                out.iter().all(|c| matches!(c, Completion::SendDone { .. })),
                "{out:?}"
            );
            assert_eq!(s.m.tx_available(ch), s.m.tx_capacity(ch));
        }
        eprintln!(
            "side {i}: waited for credits {} times, -FI_EAGAIN {} times",
            s.credit_waits, s.would_block
        );
    }
    sides
}
