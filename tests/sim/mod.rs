//! Deterministic two-peer simulator for the protocol core.
//!
//! Two engines exchange datagrams over four independent links (direction x channel), each
//! with its own loss, duplication, reordering and delay, and a NIC that serialises datagrams
//! at a fixed byte rate and returns send credits when a datagram has left. Time is simulated
//! (nanoseconds); every random choice comes from one seeded generator, so a run is replayed
//! exactly from its seed (`SIM_SEED`).
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use usnic_rs::proto::*;

/// splitmix64: small, fast, good enough for simulation choices.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// Content of a test message, a function of its id only.
pub fn pattern(id: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng(id.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xabcdef).fill(&mut v);
    v
}

pub fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The seed of a randomized test: `SIM_SEED` if set, else `default`. Printed so a failure
/// can be replayed.
pub fn seed(default: u64) -> u64 {
    let s = std::env::var("SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("SIM_SEED={s}");
    s
}

#[derive(Clone, Debug)]
pub struct Link {
    pub loss: f64,
    pub dup: f64,
    /// Probability that a datagram is held back by up to `reorder_ns` extra.
    pub reorder: f64,
    pub reorder_ns: u64,
    pub delay_ns: u64,
    pub jitter_ns: u64,
}

impl Link {
    pub fn lossy(loss: f64) -> Link {
        Link {
            loss,
            dup: 0.0,
            reorder: 0.0,
            reorder_ns: 0,
            delay_ns: 10_000,
            jitter_ns: 0,
        }
    }
    pub fn nasty(loss: f64) -> Link {
        Link {
            loss,
            dup: 0.01,
            reorder: 0.02,
            reorder_ns: 30_000,
            delay_ns: 10_000,
            jitter_ns: 2_000,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// `links[from][channel]`.
    pub links: [[Link; 2]; 2],
    /// NIC serialisation cost per byte on every channel.
    pub ps_per_byte: u64,
    pub cfg: [Config; 2],
}

impl SimConfig {
    pub fn uniform(link: Link, window: u16) -> SimConfig {
        let mut cfg = [Config::default(), Config::default()];
        for (i, c) in cfg.iter_mut().enumerate() {
            c.local_id = 100 + i as u64;
            c.local_key = 0x5eed_0000 + i as u64;
            c.isn = if i == 0 { 65_000 } else { 123 };
            c.window = window;
            c.data_credits = 64;
            c.priority_credits = 16;
            // Node 0 lets the engine keep chunks where they arrived; node 1 has it copy.
            c.max_held = if i == 0 { 64 } else { 0 };
        }
        SimConfig {
            links: [[link.clone(), link.clone()], [link.clone(), link]],
            // 10 Gb/s
            ps_per_byte: 800,
            cfg,
        }
    }
}

pub struct Node {
    pub eng: Engine,
    pub peer: PeerId,
    /// Registered memory regions (region id -> bytes).
    pub mem: BTreeMap<u64, Vec<u8>>,
    nic_free: [u64; 2],
    /// Expected deliveries: (tag, len, hash) -> count still expected.
    pub expect: BTreeMap<(u8, usize, u64), u64>,
    /// Operations waiting for completion: cookie -> kind.
    pub pending: BTreeMap<u64, Pending>,
    pub delivered: u64,
    pub delivered_bytes: u64,
    pub failures: Vec<Event>,
    /// Refuse every GET request (for refusal tests).
    pub refuse_gets: bool,
    /// Datagrams the engine kept (`RxOutcome::Held`), by handle.
    pub held: BTreeMap<u64, Vec<u8>>,
    /// Kept datagrams delivered as pieces.
    pub held_used: u64,
    next_handle: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    Send,
    Put,
    /// A GET: remote (region, offset) to local (region, offset), len.
    Get {
        rr: u64,
        ro: u64,
        lr: u64,
        lo: u64,
        len: u64,
    },
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Datagram {
    at: u64,
    order: u64,
    to: usize,
    ch: u8,
    bytes: Vec<u8>,
}

pub struct Sim {
    pub nodes: [Node; 2],
    pub now: u64,
    pub steps: u64,
    pub rng: Rng,
    pub sc: SimConfig,
    wire: BinaryHeap<Reverse<Datagram>>,
    completions: BinaryHeap<Reverse<(u64, usize, u8)>>,
    order: u64,
    /// Completed operations with a non-Ok result (node, event).
    pub errors: Vec<(usize, Event)>,
    pub datagrams: u64,
    unchecked: bool,
}

fn chan(c: u8) -> Channel {
    if c == 0 {
        Channel::Priority
    } else {
        Channel::Data
    }
}

impl Sim {
    pub fn new(sc: SimConfig, seed: u64) -> Sim {
        let mk = |i: usize| {
            let mut eng = Engine::new(sc.cfg[i].clone()).expect("valid config");
            let o = &sc.cfg[1 - i];
            let peer = eng.add_peer(Instant(0), o.peer_info());
            Node {
                eng,
                peer,
                mem: BTreeMap::new(),
                nic_free: [0; 2],
                expect: BTreeMap::new(),
                pending: BTreeMap::new(),
                delivered: 0,
                delivered_bytes: 0,
                failures: Vec::new(),
                refuse_gets: false,
                held: BTreeMap::new(),
                held_used: 0,
                next_handle: 1,
            }
        };
        Sim {
            nodes: [mk(0), mk(1)],
            now: 0,
            steps: 0,
            rng: Rng(seed),
            sc,
            wire: BinaryHeap::new(),
            completions: BinaryHeap::new(),
            order: 0,
            errors: Vec::new(),
            datagrams: 0,
            unchecked: false,
        }
    }

    /// Queues a send from `from` whose delivery the other node expects.
    pub fn send(&mut self, from: usize, id: u64, tag: u8, len: usize) {
        let data = pattern(id, len);
        let key = (tag, len, fnv(&data));
        *self.nodes[1 - from].expect.entry(key).or_insert(0) += 1;
        let n = &mut self.nodes[from];
        n.pending.insert(id, Pending::Send);
        n.eng
            .submit_send(Instant(self.now), n.peer, tag, data, Cookie(id))
            .expect("submit_send");
    }

    /// Queues a put of `pattern(id, len)` at (region, offset) of the other node.
    pub fn put(&mut self, from: usize, id: u64, region: u64, offset: u64, len: usize) {
        let n = &mut self.nodes[from];
        n.pending.insert(id, Pending::Put);
        n.eng
            .submit_put(
                Instant(self.now),
                n.peer,
                region,
                offset,
                pattern(id, len),
                Cookie(id),
            )
            .expect("submit_put");
    }

    #[allow(clippy::too_many_arguments)]
    pub fn get(&mut self, from: usize, id: u64, rr: u64, ro: u64, lr: u64, lo: u64, len: u64) {
        let n = &mut self.nodes[from];
        n.pending.insert(
            id,
            Pending::Get {
                rr,
                ro,
                lr,
                lo,
                len,
            },
        );
        n.eng
            .submit_get(Instant(self.now), n.peer, rr, ro, lr, lo, len, Cookie(id))
            .expect("submit_get");
    }

    /// Everything sent has been delivered/completed and both engines are idle.
    pub fn quiet(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.pending.is_empty() && n.expect.values().all(|&c| c == 0) && n.eng.is_idle(n.peer)
        })
    }

    /// Runs until `quiet()` (returns true) or a step/time bound is hit (returns false).
    pub fn run(&mut self, max_steps: u64, max_time: u64) -> bool {
        loop {
            self.pass();
            if self.quiet() {
                return true;
            }
            if self.steps >= max_steps || self.now >= max_time {
                return false;
            }
            let Some(t) = self.next_time() else {
                return false;
            };
            self.now = self.now.max(t);
        }
    }

    fn next_time(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut at = |x: u64| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(Reverse(d)) = self.wire.peek() {
            at(d.at);
        }
        if let Some(Reverse((c, _, _))) = self.completions.peek() {
            at(*c);
        }
        for n in &self.nodes {
            if let Some(Instant(x)) = n.eng.poll_timeout() {
                at(x);
            }
        }
        t
    }

    /// One progress pass at `now`: completions, arrivals, timers, transmissions, events.
    pub fn pass(&mut self) {
        self.steps += 1;
        let now = self.now;
        while let Some(Reverse((t, i, c))) = self.completions.peek().map(|x| Reverse(x.0)) {
            if t > now {
                break;
            }
            self.completions.pop();
            self.nodes[i].eng.handle_send_complete(chan(c));
        }
        while self.wire.peek().is_some_and(|Reverse(d)| d.at <= now) {
            let Reverse(d) = self.wire.pop().unwrap();
            self.receive(d.to, chan(d.ch), &d.bytes);
        }
        for i in 0..2 {
            if self.nodes[i].eng.poll_timeout().is_some_and(|t| t.0 <= now) {
                self.nodes[i].eng.handle_timeout(Instant(now));
            }
            self.drain_events(i);
            self.transmit(i);
            self.drain_events(i);
        }
    }

    fn receive(&mut self, i: usize, ch: Channel, bytes: &[u8]) {
        let now = Instant(self.now);
        let n = &mut self.nodes[i];
        let handle = n.next_handle;
        n.next_handle += 1;
        match n.eng.handle_datagram_held(now, ch, bytes, handle) {
            RxOutcome::Held => {
                n.held.insert(handle, bytes.to_vec());
            }
            RxOutcome::Deliver { tag, payload, .. } => {
                if !self.unchecked {
                    Self::deliver(n, tag, &bytes[payload]);
                }
            }
            RxOutcome::Write {
                peer,
                region,
                offset,
                payload,
            } => {
                let data = &bytes[payload];
                let ok = match n.mem.get_mut(&region) {
                    Some(m)
                        if offset
                            .checked_add(data.len() as u64)
                            .is_some_and(|e| e <= m.len() as u64) =>
                    {
                        m[offset as usize..offset as usize + data.len()].copy_from_slice(data);
                        true
                    }
                    _ => false,
                };
                if !ok {
                    n.eng.refuse_write(now, peer);
                }
            }
            RxOutcome::Consumed | RxOutcome::Dropped(_) => {}
        }
        self.drain_events(i);
    }

    /// A pass that moves and transmits datagrams but does not check deliveries or
    /// completions against expectations (for fuzzing, where forged traffic adds its own).
    pub fn pass_unchecked(&mut self) {
        self.unchecked = true;
        self.pass();
        self.unchecked = false;
    }

    /// The bytes of a fragment delivered in pieces; each kept datagram is used exactly once.
    fn gather(n: &mut Node, len: usize, pieces: Vec<Piece>) -> Vec<u8> {
        let mut data = Vec::with_capacity(len);
        for p in pieces {
            match p {
                Piece::Held { handle, range } => {
                    let d = n
                        .held
                        .remove(&handle)
                        .unwrap_or_else(|| panic!("piece of unknown or reused handle {handle}"));
                    data.extend_from_slice(&d[range]);
                    n.held_used += 1;
                }
                Piece::Owned(v) => data.extend_from_slice(&v),
            }
        }
        assert_eq!(data.len(), len, "pieces add up to the fragment");
        data
    }

    fn release(n: &mut Node, handles: Vec<u64>) {
        for h in handles {
            assert!(n.held.remove(&h).is_some(), "release of unknown handle {h}");
        }
    }

    fn deliver(n: &mut Node, tag: u8, data: &[u8]) {
        let key = (tag, data.len(), fnv(data));
        match n.expect.get_mut(&key) {
            Some(c) if *c > 0 => *c -= 1,
            _ => panic!(
                "unexpected delivery (duplicate or corrupt): tag {tag} len {}",
                data.len()
            ),
        }
        n.delivered += 1;
        n.delivered_bytes += data.len() as u64;
    }

    fn drain_events(&mut self, i: usize) {
        let now = Instant(self.now);
        if self.unchecked {
            while let Some(ev) = self.nodes[i].eng.poll_event() {
                match ev {
                    Event::GetRequest { peer, request, .. } => {
                        self.nodes[i].eng.answer_get(now, peer, request, Err(()));
                    }
                    Event::DeliverPieces { len, pieces, .. } => {
                        Self::gather(&mut self.nodes[i], len, pieces);
                    }
                    Event::Release { handles } => Self::release(&mut self.nodes[i], handles),
                    _ => {}
                }
            }
            return;
        }
        while let Some(ev) = self.nodes[i].eng.poll_event() {
            let n = &mut self.nodes[i];
            match ev {
                Event::Deliver { tag, ref data, .. } => Self::deliver(n, tag, data),
                Event::DeliverPieces {
                    tag, len, pieces, ..
                } => {
                    let data = Self::gather(n, len, pieces);
                    Self::deliver(n, tag, &data)
                }
                Event::Release { handles } => Self::release(n, handles),
                Event::SendComplete { cookie, result, .. }
                | Event::PutComplete { cookie, result, .. }
                | Event::GetComplete { cookie, result, .. } => {
                    let p = n.pending.remove(&cookie.0).unwrap_or_else(|| {
                        panic!("completion of unknown or completed op {cookie:?}: {ev:?}")
                    });
                    match (&ev, &p) {
                        (Event::SendComplete { .. }, Pending::Send)
                        | (Event::PutComplete { .. }, Pending::Put)
                        | (Event::GetComplete { .. }, Pending::Get { .. }) => {}
                        _ => panic!("completion kind mismatch: {ev:?} for {p:?}"),
                    }
                    if result.is_err() {
                        self.errors.push((i, ev.clone()));
                    } else if let Pending::Get {
                        rr,
                        ro,
                        lr,
                        lo,
                        len,
                    } = p
                    {
                        // The bytes must already be in place, equal to the source.
                        let src = &self.nodes[1 - i].mem[&rr][ro as usize..(ro + len) as usize];
                        let dst = &self.nodes[i].mem[&lr][lo as usize..(lo + len) as usize];
                        assert!(src == dst, "GET {cookie:?} landed wrong bytes");
                    }
                }
                Event::GetRequest {
                    peer,
                    request,
                    region,
                    offset,
                    len,
                } => {
                    let data = if n.refuse_gets {
                        Err(())
                    } else {
                        match n.mem.get(&region) {
                            Some(m)
                                if offset.checked_add(len).is_some_and(|e| e <= m.len() as u64) =>
                            {
                                Ok(m[offset as usize..(offset + len) as usize].to_vec().into())
                            }
                            _ => Err(()),
                        }
                    };
                    n.eng.answer_get(now, peer, request, data);
                }
                Event::PeerFailed { .. } => n.failures.push(ev),
            }
        }
    }

    fn transmit(&mut self, i: usize) {
        let mut buf = vec![0u8; 65_536];
        for c in [0u8, 1u8] {
            let ch = chan(c);
            while let Some(t) = self.nodes[i]
                .eng
                .poll_transmit(Instant(self.now), ch, &mut buf)
            {
                self.datagrams += 1;
                let n = &mut self.nodes[i];
                let start = n.nic_free[c as usize].max(self.now);
                let done = start + (t.len as u64 * self.sc.ps_per_byte).div_ceil(1000);
                n.nic_free[c as usize] = done;
                self.completions.push(Reverse((done, i, c)));
                let link = &self.sc.links[i][c as usize];
                if self.rng.chance(link.loss) {
                    continue;
                }
                let copies = if self.rng.chance(link.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut at = done + link.delay_ns + self.rng.below(link.jitter_ns + 1);
                    if self.rng.chance(link.reorder) {
                        at += self.rng.below(link.reorder_ns + 1);
                    }
                    self.order += 1;
                    self.wire.push(Reverse(Datagram {
                        at,
                        order: self.order,
                        to: 1 - i,
                        ch: c,
                        bytes: buf[..t.len].to_vec(),
                    }));
                }
            }
        }
    }
}
