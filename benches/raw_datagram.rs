//! The raw libfabric datagram floor: what the fabric edge alone achieves over the `udp`
//! provider, with NO reliability (no sequence numbers, ACKs or retransmission), between two
//! threads of one process, each owning one `Module`. Run: `cargo bench --bench raw_datagram`.
//!
//! - ping-pong: one-way latency (half the round trip) for a tiny datagram on the priority and
//!   data channels and a full-MTU one on the data channel, at the BTL's datagram sizes; then
//!   messages of 1 KiB to 4 MiB cut into the BTL's datagrams (`message_pingpong`);
//! - streaming: full-MTU datagrams on the data channel with at most `WINDOW` in flight (the
//!   receiver's count is shared through an atomic, standing in for credits), and a blast with
//!   no flow control at all, which shows how much an unreliable sender loses.
//!
//! - for reference, libfabric's own `fi_pingpong -p udp -e dgram -S 8` (when installed) on the
//!   same address in the same run, and the ratio of this floor's 8-byte mean to it.
//!
//! Devices: the one the BTL would use by default (first non-loopback interface; traffic
//! between two endpoints on this host is looped back by the kernel anyway) and `lo`.
//! `USNIC_BENCH_ITERS` sets the ping-pong iterations (default 10000).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use usnic_rs::fabric::{
    discover, now, parse_if_list, Completion, DeviceInfo, FabricConfig, Module, PeerAddr,
};
use usnic_rs::proto::Channel;

// A crate root finds its modules beside it: this one is kept in its own directory so that
// cargo does not take it for a bench of its own.
#[path = "raw_datagram/message_pingpong.rs"]
mod message_pingpong;

const WARMUP: usize = 1_000;
const WINDOW: u64 = 64;
const STREAM_COUNT: u64 = 20_000;

/// Busy-polls `ch` until a datagram arrives; reposts it at once. Returns its length.
fn wait_recv(m: &mut Module, ch: Channel, out: &mut Vec<Completion>) -> usize {
    loop {
        out.clear();
        m.poll(ch, 16, out).expect("poll");
        if out.is_empty() {
            // Busy-poll, but let the peer thread run when the cores are oversubscribed.
            thread::yield_now();
        }
        for c in out.iter() {
            match *c {
                Completion::Recv { buf, len } => {
                    m.repost(ch, buf);
                    m.flush_reposts().expect("repost");
                    return len;
                }
                Completion::SendDone { .. } => {}
                Completion::Error { ref error, .. } => panic!("{error}"),
            }
        }
    }
}

/// Sends `len` bytes, polling for send credits when none is free.
fn send(m: &mut Module, ch: Channel, to: &PeerAddr, len: usize, out: &mut Vec<Completion>) {
    send_filled(m, ch, to, len, |buf| buf[..len.min(8)].fill(0xab), out)
}

/// Sends `data`, polling for send credits when none is free.
fn send_bytes(m: &mut Module, ch: Channel, to: &PeerAddr, data: &[u8], out: &mut Vec<Completion>) {
    send_filled(
        m,
        ch,
        to,
        data.len(),
        |buf| buf[..data.len()].copy_from_slice(data),
        out,
    )
}

/// Posts `len` bytes of a send buffer `fill` wrote; false when no buffer or credit is free now
/// (the buffer, if taken, is given back).
fn try_send_filled(
    m: &mut Module,
    ch: Channel,
    to: &PeerAddr,
    len: usize,
    fill: impl Fn(&mut [u8]),
) -> bool {
    let Some((id, buf)) = m.tx_buffer(ch) else {
        return false;
    };
    fill(buf);
    match m.post_send(ch, id, len, to) {
        Ok(_) => true,
        Err(e) if e.is_would_block() => {
            m.release_tx(ch, id);
            false
        }
        Err(e) => panic!("{e}"),
    }
}

/// Marks a streamed datagram's first bytes (its content is not checked).
fn mark(buf: &mut [u8]) {
    buf[..8].fill(0xab);
}

/// Sends `len` bytes of a send buffer `fill` wrote, polling for send credits when none is free.
fn send_filled(
    m: &mut Module,
    ch: Channel,
    to: &PeerAddr,
    len: usize,
    fill: impl Fn(&mut [u8]),
    out: &mut Vec<Completion>,
) {
    while !try_send_filled(m, ch, to, len, &fill) {
        out.clear();
        m.poll(ch, 64, out).expect("poll");
        assert!(
            out.iter().all(|c| matches!(c, Completion::SendDone { .. })),
            "unexpected {out:?}"
        );
    }
}

fn pair(dev: &DeviceInfo, cfg: &FabricConfig) -> (Module, PeerAddr, Module, PeerAddr) {
    let mut a = Module::open(dev, cfg).expect("open a");
    let mut b = Module::open(dev, cfg).expect("open b");
    let to_b = a.insert_peer(&b.local_address()).expect("insert b");
    let to_a = b.insert_peer(&a.local_address()).expect("insert a");
    (a, to_b, b, to_a)
}

/// Half round-trip times in ns, sorted.
fn pingpong(
    dev: &DeviceInfo,
    cfg: &FabricConfig,
    ch: Channel,
    len: usize,
    iters: usize,
) -> Vec<u64> {
    let (mut a, to_b, mut b, to_a) = pair(dev, cfg);
    let total = WARMUP + iters;
    let echo = thread::spawn(move || {
        let mut out = Vec::new();
        for _ in 0..total {
            let n = wait_recv(&mut b, ch, &mut out);
            send(&mut b, ch, &to_a, n, &mut out);
        }
    });
    let mut out = Vec::new();
    let mut samples = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = now();
        send(&mut a, ch, &to_b, len, &mut out);
        let n = wait_recv(&mut a, ch, &mut out);
        assert_eq!(n, len);
        if i >= WARMUP {
            samples.push((now().0 - t0.0) / 2);
        }
    }
    echo.join().expect("echo thread");
    samples.sort_unstable();
    samples
}

/// Prints the message ping-pong table between two threads, one echoing.
fn message_pingpongs(dev: &DeviceInfo, cfg: &FabricConfig, mtu: usize, iters: usize) {
    let (mut a, to_b, mut b, to_a) = pair(dev, cfg);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let echo = thread::spawn(move || {
        message_pingpong::echo(&mut b, &to_a, |_| s.load(Ordering::Acquire));
    });
    let rows = message_pingpong::initiate(&mut a, &to_b, mtu, iters);
    stop.store(true, Ordering::Release);
    echo.join().expect("echo thread");
    message_pingpong::print(&rows);
}

/// (datagrams delivered, bytes delivered, seconds) for `count` datagrams whose lengths cycle
/// through `lens`, window-limited when `window` is Some.
fn stream(
    dev: &DeviceInfo,
    cfg: &FabricConfig,
    lens: &[usize],
    count: u64,
    window: Option<u64>,
) -> (u64, u64, f64) {
    let (mut a, to_b, mut b, _) = pair(dev, cfg);
    let received = Arc::new(AtomicU64::new(0));
    let sender_done = Arc::new(AtomicBool::new(false));
    let (r, done) = (received.clone(), sender_done.clone());
    let rx = thread::spawn(move || {
        let mut out = Vec::new();
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut last = now();
        loop {
            out.clear();
            b.poll(Channel::Data, 64, &mut out).expect("poll");
            for c in &out {
                if let Completion::Recv { buf, len } = *c {
                    b.repost(Channel::Data, buf);
                    n += 1;
                    bytes += len as u64;
                }
            }
            if out.is_empty() {
                thread::yield_now();
            } else {
                b.flush_reposts().expect("repost");
                r.store(n, Ordering::Release);
                last = now();
            }
            // Done when all arrived, or 200 ms after the sender finished with nothing new.
            if n == count || (done.load(Ordering::Acquire) && now().0 - last.0 > 200_000_000) {
                return (n, bytes, last);
            }
        }
    });
    let mut out = Vec::new();
    let start = now();
    for sent in 0..count {
        if let Some(w) = window {
            while sent - received.load(Ordering::Acquire) >= w {
                thread::yield_now();
            }
        }
        let len = lens[sent as usize % lens.len()];
        send(&mut a, Channel::Data, &to_b, len, &mut out);
    }
    sender_done.store(true, Ordering::Release);
    let (n, bytes, last) = rx.join().expect("receiver thread");
    (n, bytes, (last.0 - start.0) as f64 / 1e9)
}

/// Datagrams a stream of `lens`-shaped messages sends: about `STREAM_COUNT`, whole messages.
fn whole_messages(lens: &[usize]) -> u64 {
    (STREAM_COUNT / lens.len() as u64).max(1) * lens.len() as u64
}

/// The message sizes streamed (64 KiB to 4 MiB), each with its datagram lengths.
fn message_sizes(mtu: usize) -> impl Iterator<Item = (usize, Vec<usize>)> {
    (16..=22).map(move |s| (1usize << s, message_datagrams(1 << s, mtu)))
}

/// The datagram lengths of one `msg`-byte message cut into datagrams of at most `mtu` bytes.
fn message_datagrams(msg: usize, mtu: usize) -> Vec<usize> {
    let mut lens = vec![mtu; msg / mtu];
    if !msg.is_multiple_of(mtu) {
        lens.push(msg % mtu);
    }
    lens
}

/// Both directions at once, as in a bidirectional bandwidth test: two threads, each sending
/// `count` datagrams of `len` bytes with at most `window` unacknowledged (credits through the
/// peer's shared receive count) while it reads the other's. Returns (datagrams delivered in
/// both directions, seconds until the later side finished).
fn duplex(dev: &DeviceInfo, cfg: &FabricConfig, len: usize, count: u64, window: u64) -> (u64, f64) {
    let (a, to_b, b, to_a) = pair(dev, cfg);
    let (got_a, got_b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = now();
    let side = move |mut m: Module, to: PeerAddr, mine: Arc<AtomicU64>, theirs: Arc<AtomicU64>| {
        move || {
            let mut out = Vec::new();
            let (mut sent, mut n) = (0u64, 0u64);
            let mut last = now();
            loop {
                let sent_before = sent;
                if sent < count
                    && sent - theirs.load(Ordering::Acquire) < window
                    && try_send_filled(&mut m, Channel::Data, &to, len, mark)
                {
                    sent += 1;
                }
                out.clear();
                m.poll(Channel::Data, 64, &mut out).expect("poll");
                let before = n;
                for c in &out {
                    match *c {
                        Completion::Recv { buf, .. } => {
                            m.repost(Channel::Data, buf);
                            n += 1;
                        }
                        Completion::SendDone { .. } => {}
                        Completion::Error { ref error, .. } => panic!("{error}"),
                    }
                }
                if n != before {
                    m.flush_reposts().expect("repost");
                    mine.store(n, Ordering::Release);
                    last = now();
                } else if sent == sent_before {
                    // Nothing to do: let the other side run when both share a core.
                    thread::yield_now();
                }
                // A lost datagram never returns its credit: give up 200 ms after the last one.
                let stalled = now().0 - last.0 > 200_000_000;
                if stalled || (sent == count && n == count) {
                    return (n, last);
                }
            }
        }
    };
    let ta = thread::spawn(side(a, to_b, got_a.clone(), got_b.clone()));
    let tb = thread::spawn(side(b, to_a, got_b, got_a));
    let (na, la) = ta.join().expect("side a");
    let (nb, lb) = tb.join().expect("side b");
    (na + nb, (la.0.max(lb.0) - start.0) as f64 / 1e9)
}

fn pct(s: &[u64], p: f64) -> f64 {
    s[((s.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

/// A free TCP port for fi_pingpong's control connection (so parallel runs do not collide).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(47592)
}

/// `fi_pingpong -p udp -e dgram -S 8` between a server and a client on `addr`: its one-way
/// `usec/xfer`, or None when the tool is missing, fails or takes longer than a minute.
fn fi_pingpong(addr: std::net::Ipv4Addr, iters: usize) -> Option<f64> {
    use std::process::{Command, Stdio};
    let port = free_port().to_string();
    let it = iters.to_string();
    let args = ["-p", "udp", "-e", "dgram", "-S", "8", "-I", &it];
    let mut server = Command::new("fi_pingpong")
        .args(args)
        .args(["-B", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    thread::sleep(std::time::Duration::from_millis(300));
    let mut client = Command::new("fi_pingpong")
        .args(args)
        .args(["-P", &port, &addr.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let ok = loop {
        match client.try_wait() {
            Ok(Some(st)) => break st.success(),
            Ok(None) if std::time::Instant::now() < deadline => {
                thread::sleep(std::time::Duration::from_millis(50))
            }
            _ => break false,
        }
    };
    let _ = client.kill();
    let _ = server.kill();
    let _ = server.wait();
    let out = client.wait_with_output().ok()?;
    if !ok {
        return None;
    }
    // Table: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("8"))?;
    row.split_whitespace().nth(6)?.parse().ok()
}

fn bench_device(label: &str, dev: &DeviceInfo, cfg: &FabricConfig, iters: usize) {
    let probe = Module::open(dev, cfg).expect("open");
    let (prio_mtu, data_mtu) = (
        probe.channel_mtu(Channel::Priority),
        probe.channel_mtu(Channel::Data),
    );
    drop(probe);
    println!(
        "\n== {label}: {} {} (interface MTU {}, data datagram {data_mtu} B, priority {prio_mtu} B)",
        dev.name, dev.ipv4, dev.if_mtu
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "ping-pong one-way latency", "p50 us", "p99 us", "mean us"
    );
    let mut data8_mean = 0.0;
    for (name, ch, len) in [
        ("priority, 8 B", Channel::Priority, 8),
        ("data, 8 B", Channel::Data, 8),
        ("priority, full MTU", Channel::Priority, prio_mtu),
        ("data, full MTU", Channel::Data, data_mtu),
    ] {
        let s = pingpong(dev, cfg, ch, len, iters);
        let mean = s.iter().sum::<u64>() as f64 / s.len() as f64 / 1000.0;
        if ch == Channel::Data && len == 8 {
            data8_mean = mean;
        }
        println!(
            "{:<34} {:>10.2} {:>10.2} {:>10.2}",
            format!("{name} ({len} B)"),
            pct(&s, 0.5),
            pct(&s, 0.99),
            mean
        );
    }
    match fi_pingpong(dev.ipv4, iters) {
        Some(us) => println!(
            "{:<34} {:>10} {:>10} {:>10.2}   (data 8 B mean / fi_pingpong = {:.2})",
            "fi_pingpong -p udp -e dgram, 8 B",
            "-",
            "-",
            us,
            data8_mean / us
        ),
        None => println!(
            "(fi_pingpong -p udp -e dgram unavailable or failed on {})",
            dev.ipv4
        ),
    }
    message_pingpongs(dev, cfg, data_mtu, iters);
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "streaming, data channel", "MB/s", "kdgram/s", "delivered"
    );
    for (name, window) in [
        (format!("window {WINDOW}"), Some(WINDOW)),
        ("blast, no flow control".to_string(), None),
    ] {
        let (n, bytes, secs) = stream(dev, cfg, &[data_mtu], STREAM_COUNT, window);
        println!(
            "{:<34} {:>10.1} {:>10.1} {:>9.2}%",
            format!("{name} ({data_mtu} B)"),
            bytes as f64 / secs / 1e6,
            n as f64 / secs / 1e3,
            100.0 * n as f64 / STREAM_COUNT as f64
        );
    }
    // What the cores allow both ways at once: the ceiling for a bidirectional bandwidth test.
    let (n, secs) = duplex(dev, cfg, data_mtu, STREAM_COUNT, WINDOW);
    println!(
        "{:<34} {:>10.1} {:>10.1} {:>9.2}%",
        format!("bidirectional, window {WINDOW} ({data_mtu} B)"),
        n as f64 * data_mtu as f64 / secs / 1e6,
        n as f64 / secs / 1e3,
        100.0 * n as f64 / (2 * STREAM_COUNT) as f64
    );
    // An MPI message of 64 KiB or more never fills whole datagrams: 65536 bytes are a full
    // datagram and a short one. The same cut here gives the floor per message size.
    for (msg, lens) in message_sizes(data_mtu) {
        let count = whole_messages(&lens);
        let (n, bytes, secs) = stream(dev, cfg, &lens, count, Some(WINDOW));
        println!(
            "{:<34} {:>10.1} {:>10.1} {:>9.2}%",
            format!("messages of {msg} B ({} datagrams)", lens.len()),
            bytes as f64 / secs / 1e6,
            n as f64 / secs / 1e3,
            100.0 * n as f64 / count as f64
        );
    }
}

// ---- Across hosts: one process per host ----
//
// Two threads of one process reach each other through the kernel's local delivery, which is
// cheaper than the path between two hosts (across netns-cluster hosts: veth, bridge, veth). For
// the floor across hosts, `--serve FILE` on one host opens the default device, writes its
// address to FILE and receives; `--stream-to FILE` on the other sends to it. Each phase is a
// blast (no flow control, as fast as the sender can post), announced and closed by control
// datagrams on the priority channel; the receiver prints what arrived, timed from the phase's
// first datagram to its last. Last, both blast at each other at once (HELLO carries the sender's
// address, GO starts it, RESULT brings the sender's side back), the ceiling of a bidirectional
// test when each host has one core.

const CTL_MAGIC: u32 = 0x7261_7773;
const CTL_START: u32 = 1;
const CTL_END: u32 = 2;
/// The one-way phases are over; the tail is the sender's address, for the two-way blast.
const CTL_HELLO: u32 = 3;
/// The receiver has the sender's address: both blast now.
const CTL_GO: u32 = 4;
/// What the sender received in the two-way blast: datagrams, bytes, first and last (ns).
const CTL_RESULT: u32 = 5;
/// The phase of the END that closes the message ping-pong (the blasts' ENDs are told apart).
const PINGPONG_PHASE: u32 = u32::MAX;

fn ctl(kind: u32, phase: u32, tail: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(12 + tail.len());
    b.extend_from_slice(&CTL_MAGIC.to_le_bytes());
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&phase.to_le_bytes());
    b.extend_from_slice(tail);
    b
}

fn parse_ctl(b: &[u8]) -> Option<(u32, u32, &[u8])> {
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    (b.len() >= 12 && u32_at(0) == CTL_MAGIC).then(|| (u32_at(4), u32_at(8), &b[12..]))
}

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn parse_words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn parse_result(b: &[u8]) -> Option<Received> {
    match parse_words(b)[..] {
        [n, bytes, first, last] => Some((n, bytes, first, last)),
        _ => None,
    }
}

/// Reads the priority channel once and hands each control datagram (kind, phase, tail) to `f`.
fn read_ctl(m: &mut Module, out: &mut Vec<Completion>, mut f: impl FnMut(u32, u32, &[u8])) {
    out.clear();
    m.poll(Channel::Priority, 16, out).expect("poll");
    for c in out.iter() {
        let Completion::Recv { buf, len } = *c else {
            continue;
        };
        if let Some((kind, phase, tail)) = parse_ctl(m.rx_bytes(Channel::Priority, buf, len)) {
            f(kind, phase, tail);
        }
        m.repost(Channel::Priority, buf);
    }
    if !out.is_empty() {
        m.flush_reposts().expect("repost");
    }
}

/// Sends a control datagram three times: a lost one must not lose a phase.
fn say(m: &mut Module, to: &PeerAddr, b: &[u8], out: &mut Vec<Completion>) {
    for _ in 0..3 {
        send_bytes(m, Channel::Priority, to, b, out);
        thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// What one side of the two-way blast received: (datagrams, bytes, first ns, last ns).
type Received = (u64, u64, u64, u64);

/// Both hosts at once, each sending `count` datagrams of `len` bytes as fast as it can post
/// them while it reads the other's, as an MPI rank of a bidirectional test does on its one core.
/// Ends 100 ms after the peer's END with nothing more arriving (3 s without its END: lost).
/// `greet` is answered with GO whenever it arrives: the peer repeats HELLO until it has GO.
/// Returns what this side received, and the peer's RESULT when it came during the blast.
fn duplex_blast(
    m: &mut Module,
    to: &PeerAddr,
    len: usize,
    count: u64,
    greet: bool,
) -> (Received, Option<Received>) {
    let (mut out, mut prio) = (Vec::new(), Vec::new());
    let mut got: Received = (0, 0, 0, 0);
    let mut theirs = None;
    let (mut sent, mut peer_ended) = (0u64, false);
    let mut ended_at = None;
    let mut last_event = now().0;
    loop {
        if sent < count {
            if try_send_filled(m, Channel::Data, to, len, mark) {
                sent += 1;
            }
        } else if ended_at.is_none() {
            flush(m);
            say(m, to, &ctl(CTL_END, 0, &[]), &mut prio);
            ended_at = Some(now().0);
        }
        out.clear();
        m.poll(Channel::Data, 64, &mut out).expect("poll");
        let t = now().0;
        let before = got.0;
        for c in &out {
            match *c {
                Completion::Recv { buf, len } => {
                    m.repost(Channel::Data, buf);
                    if got.0 == 0 {
                        got.2 = t;
                    }
                    got.0 += 1;
                    got.1 += len as u64;
                    got.3 = t;
                }
                Completion::SendDone { .. } => {}
                Completion::Error { ref error, .. } => panic!("{error}"),
            }
        }
        if got.0 != before {
            m.flush_reposts().expect("repost");
            last_event = t;
        }
        let mut greeted = false;
        read_ctl(m, &mut prio, |kind, _, tail| match kind {
            CTL_END => peer_ended = true,
            CTL_HELLO => greeted = true,
            CTL_RESULT => theirs = theirs.or(parse_result(tail)),
            _ => {}
        });
        if greeted && greet {
            send_bytes(m, Channel::Priority, to, &ctl(CTL_GO, 0, &[]), &mut out);
        }
        if let Some(e) = ended_at {
            let quiet = t.saturating_sub(last_event) > 100_000_000;
            if (peer_ended && quiet) || t.saturating_sub(e) > 3_000_000_000 {
                return (got, theirs);
            }
        }
    }
}

/// Phases: (message size, 0 = full datagrams; datagram lengths).
fn phases(mtu: usize) -> Vec<(usize, Vec<usize>)> {
    let mut v = vec![(0, vec![mtu])];
    v.extend(message_sizes(mtu));
    v
}

/// The floor is libfabric's own send and receive, one call per datagram: the BTL's batched
/// sends and reads (`btl_usnic_gso`, `btl_usnic_gro`) are off here.
fn raw_config() -> FabricConfig {
    FabricConfig {
        gso: false,
        gro: false,
        ..Default::default()
    }
}

/// Across hosts, `USNIC_RAW_GSO=1` sends and reads the data channel's datagrams the way the
/// BTL does (`btl_usnic_gso` and `btl_usnic_gro`: runs of datagrams in one system call each
/// way), for a second reference.
fn batched() -> bool {
    std::env::var("USNIC_RAW_GSO").is_ok_and(|v| v == "1")
}

/// Sends what the data channel batched (no-op without batching); a full socket is retried.
fn flush(m: &mut Module) {
    loop {
        match m.flush_sends(Channel::Data) {
            Err(e) if e.is_would_block() => thread::yield_now(),
            Err(e) => panic!("{e}"),
            Ok(()) => return,
        }
    }
}

fn default_device() -> (DeviceInfo, FabricConfig) {
    let cfg = FabricConfig {
        gso: batched(),
        gro: batched(),
        ..raw_config()
    };
    let dev = discover(&cfg)
        .expect("discover")
        .into_iter()
        .next()
        .expect("no non-loopback interface for the udp provider");
    (dev, cfg)
}

fn serve(addr_file: &str) {
    let (dev, cfg) = default_device();
    let mut m = Module::open(&dev, &cfg).expect("open");
    let (prio_mtu, data_mtu) = (
        m.channel_mtu(Channel::Priority),
        m.channel_mtu(Channel::Data),
    );
    let hex: String = m
        .local_address()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let tmp = format!("{addr_file}.tmp");
    std::fs::write(&tmp, hex).expect("write the address file");
    std::fs::rename(&tmp, addr_file).expect("publish the address file");
    println!(
        "== across hosts: {} {} (interface MTU {}, data datagram {data_mtu} B, priority {prio_mtu} B{})",
        dev.name,
        dev.ipv4,
        dev.if_mtu,
        if batched() {
            ", sends and reads batched as btl_usnic_gso and btl_usnic_gro do"
        } else {
            ""
        }
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "blast from the other host", "MB/s", "kdgram/s", "delivered"
    );
    let plan = phases(data_mtu);
    let mut out = Vec::new();
    // (phase, datagrams, bytes, first, last, ended)
    let mut cur: Option<(u32, u64, u64, u64, u64, bool)> = None;
    let mut idle_since = now().0;
    let mut data = Vec::new();
    let mut peer = None;
    loop {
        out.clear();
        data.clear();
        m.poll(Channel::Priority, 16, &mut out).expect("poll");
        m.poll(Channel::Data, 64, &mut data).expect("poll");
        let t = now().0;
        for c in out.iter() {
            let Completion::Recv { buf, len } = *c else {
                continue;
            };
            match parse_ctl(m.rx_bytes(Channel::Priority, buf, len)) {
                Some((CTL_START, phase, _)) if cur.map(|c| c.0) != Some(phase) => {
                    cur = Some((phase, 0, 0, 0, 0, false));
                }
                Some((CTL_END, phase, _)) => {
                    if let Some(c) = cur.as_mut().filter(|c| c.0 == phase) {
                        c.5 = true;
                    }
                }
                Some((CTL_HELLO, _, addr)) if peer.is_none() => peer = Some(addr.to_vec()),
                _ => {}
            }
            m.repost(Channel::Priority, buf);
        }
        for c in data.iter() {
            let Completion::Recv { buf, len } = *c else {
                continue;
            };
            if let Some(c) = cur.as_mut() {
                if c.1 == 0 {
                    c.3 = t;
                }
                c.1 += 1;
                c.2 += len as u64;
                c.4 = t;
            }
            m.repost(Channel::Data, buf);
        }
        out.append(&mut data);
        if !out.is_empty() {
            m.flush_reposts().expect("repost");
            idle_since = t;
        } else {
            thread::yield_now();
        }
        // A phase is over 100 ms after its END with nothing more arriving.
        if let Some((phase, n, bytes, first, last, true)) = cur {
            if t.saturating_sub(last.max(idle_since)) > 100_000_000 {
                let (msg, lens) = &plan[(phase as usize).min(plan.len() - 1)];
                let sent = whole_messages(lens);
                let secs = (last.saturating_sub(first)).max(1) as f64 / 1e9;
                let name = if *msg == 0 {
                    format!("stream across hosts ({data_mtu} B)")
                } else {
                    format!("messages of {msg} B ({} datagrams)", lens.len())
                };
                println!(
                    "{:<34} {:>10.1} {:>10.1} {:>9.2}%",
                    name,
                    bytes as f64 / secs / 1e6,
                    n as f64 / secs / 1e3,
                    100.0 * n as f64 / sent as f64
                );
                cur = None;
            }
        }
        if peer.is_some() && cur.is_none() {
            break;
        }
        if t.saturating_sub(idle_since) > 60_000_000_000 {
            return;
        }
    }
    // Both ways at once: what the two hosts' cores allow a bidirectional test.
    let to = m.insert_peer(&peer.unwrap()).expect("insert the sender");
    send_bytes(
        &mut m,
        Channel::Priority,
        &to,
        &ctl(CTL_GO, 0, &[]),
        &mut out,
    );
    let (mine, early) = duplex_blast(&mut m, &to, data_mtu, STREAM_COUNT, true);
    let deadline = now().0 + 3_000_000_000;
    let theirs = early.or_else(|| loop {
        let mut found = None;
        read_ctl(&mut m, &mut out, |kind, _, tail| {
            if kind == CTL_RESULT {
                found = found.or(parse_result(tail));
            }
        });
        if found.is_some() || now().0 > deadline {
            break found;
        }
        thread::yield_now();
    });
    let Some(theirs) = theirs else {
        println!("bidirectional: no result from the other host");
        return;
    };
    let (n, bytes) = (mine.0 + theirs.0, mine.1 + theirs.1);
    let span = mine.3.max(theirs.3).saturating_sub(mine.2.min(theirs.2));
    let secs = span.max(1) as f64 / 1e9;
    println!(
        "{:<34} {:>10.1} {:>10.1} {:>9.2}%",
        format!("bidirectional, blast ({data_mtu} B)"),
        bytes as f64 / secs / 1e6,
        n as f64 / secs / 1e3,
        100.0 * n as f64 / (2 * STREAM_COUNT) as f64
    );
    // Last, messages ping-ponged with the other host, which echoes them until END.
    let rows = message_pingpong::initiate(&mut m, &to, data_mtu, bench_iters());
    say(&mut m, &to, &ctl(CTL_END, PINGPONG_PHASE, &[]), &mut out);
    message_pingpong::print(&rows);
}

fn stream_to(addr_file: &str) {
    let (dev, cfg) = default_device();
    let mut m = Module::open(&dev, &cfg).expect("open");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let hex = loop {
        match std::fs::read_to_string(addr_file) {
            Ok(h) => break h,
            Err(_) if std::time::Instant::now() < deadline => {
                thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => panic!("no address in {addr_file}: {e}"),
        }
    };
    let addr: Vec<u8> = (0..hex.trim().len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex address"))
        .collect();
    let to = m.insert_peer(&addr).expect("insert the receiver");
    let mut out = Vec::new();
    let data_mtu = m.channel_mtu(Channel::Data);
    let plan = phases(data_mtu);
    for (phase, (msg, lens)) in plan.iter().enumerate() {
        let msg = words(&[*msg as u64]);
        say(&mut m, &to, &ctl(CTL_START, phase as u32, &msg), &mut out);
        let count = whole_messages(lens);
        for i in 0..count {
            send(
                &mut m,
                Channel::Data,
                &to,
                lens[i as usize % lens.len()],
                &mut out,
            );
            // A message's datagrams leave together, as one transmit pass of the BTL's.
            if lens.len() > 1 && (i as usize + 1).is_multiple_of(lens.len()) {
                flush(&mut m);
            }
        }
        flush(&mut m);
        say(&mut m, &to, &ctl(CTL_END, phase as u32, &msg), &mut out);
        thread::sleep(std::time::Duration::from_millis(300));
    }
    // HELLO until GO: the receiver needs this host's address to send back.
    let hello = ctl(CTL_HELLO, 0, &m.local_address());
    let deadline = now().0 + 10_000_000_000;
    'greet: loop {
        assert!(now().0 < deadline, "no GO from the receiver");
        send_bytes(&mut m, Channel::Priority, &to, &hello, &mut out);
        for _ in 0..20 {
            let mut go = false;
            read_ctl(&mut m, &mut out, |kind, _, _| go |= kind == CTL_GO);
            if go {
                break 'greet;
            }
            thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    let (got, _) = duplex_blast(&mut m, &to, data_mtu, STREAM_COUNT, false);
    let result = words(&[got.0, got.1, got.2, got.3]);
    say(&mut m, &to, &ctl(CTL_RESULT, 0, &result), &mut out);
    message_pingpong::echo(&mut m, &to, |m| {
        let mut end = false;
        read_ctl(m, &mut out, |kind, phase, _| {
            end |= kind == CTL_END && phase == PINGPONG_PHASE
        });
        end
    });
}

/// Ping-pong rounds per row: `USNIC_BENCH_ITERS`, 10000 by default.
fn bench_iters() -> usize {
    std::env::var("USNIC_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg_after = |flag: &str| {
        args.iter().position(|a| a == flag).map(|i| {
            args.get(i + 1)
                .cloned()
                .unwrap_or_else(|| panic!("{flag} FILE"))
        })
    };
    if let Some(f) = arg_after("--serve") {
        return serve(&f);
    }
    if let Some(f) = arg_after("--stream-to") {
        return stream_to(&f);
    }
    let iters = bench_iters();
    println!(
        "raw libfabric datagram floor (udp provider, no reliability), {iters} ping-pongs per row"
    );
    let default = raw_config();
    match discover(&default).expect("discover").into_iter().next() {
        Some(dev) => bench_device("BTL default device", &dev, &default, iters),
        None => println!("(no non-loopback interface: skipping the BTL default device)"),
    }
    let lo = FabricConfig {
        if_include: parse_if_list("lo").expect("lo"),
        ..raw_config()
    };
    let dev = discover(&lo)
        .expect("discover")
        .into_iter()
        .next()
        .expect("lo via udp");
    bench_device("loopback", &dev, &lo, iters);
}
