//! Deterministic simulator for the protocol core: two engines, or several that are each
//! other's peers.
//!
//! Every node sends over two links of its own (one per channel), each with its own loss,
//! duplication, reordering and delay, and a NIC that serialises datagrams at a fixed byte
//! rate and returns send credits when a datagram has left. Time is simulated
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
    /// `links[from][channel]`: what a node's datagrams on a channel cross, to any peer.
    pub links: Vec<[Link; 2]>,
    /// NIC serialisation cost per byte on every channel.
    pub ps_per_byte: u64,
    /// A slower hop behind every node's NIC (0: none), serialising both channels' datagrams in
    /// one unbounded FIFO, like a rate-limited qdisc: send credits still come back when a
    /// datagram leaves the NIC, so the queue here grows with what the window lets out.
    pub bottleneck_ps_per_byte: u64,
    /// One engine configuration per node.
    pub cfg: Vec<Config>,
}

impl SimConfig {
    /// Two nodes.
    pub fn uniform(link: Link, window: u16) -> SimConfig {
        SimConfig::nodes(2, link, window)
    }

    /// `n` nodes, each a peer of every other, every link alike.
    pub fn nodes(n: usize, link: Link, window: u16) -> SimConfig {
        let cfg = (0..n)
            .map(|i| Config {
                local_id: 100 + i as u64,
                // One key for all, where the edge draws one per module: a datagram sent to
                // the wrong node is then taken for its sender's on the id alone, so
                // misrouting shows as a wrong delivery instead of a drop that resends repair.
                local_key: 0x5eed_0000,
                isn: if i == 0 { 65_000 } else { 123 * i as u16 },
                window,
                data_credits: 64,
                priority_credits: 16,
                // Even nodes let the engine keep chunks where they arrived; odd ones have it copy.
                max_held: if i % 2 == 0 { 64 } else { 0 },
                ..Config::default()
            })
            .collect();
        SimConfig {
            links: vec![[link.clone(), link]; n],
            // 10 Gb/s
            ps_per_byte: 800,
            bottleneck_ps_per_byte: 0,
            cfg,
        }
    }
}

pub struct Node {
    pub eng: Engine,
    /// This engine's id for each other node, by node index (`None` at its own).
    pub peers: Vec<Option<PeerId>>,
    /// Registered memory regions (region id -> bytes).
    pub mem: BTreeMap<u64, Vec<u8>>,
    nic_free: [u64; 2],
    /// Datagrams this node has sent on each channel (for `Sim::lose`).
    sent: [u64; 2],
    /// When the bottleneck hop behind the NIC is free (`SimConfig::bottleneck_ps_per_byte`).
    bottleneck_free: u64,
    /// Expected deliveries: (sending node, tag, len, hash) -> count still expected.
    pub expect: BTreeMap<(usize, u8, usize, u64), u64>,
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

impl Node {
    /// This engine's id for node `j`.
    pub fn peer(&self, j: usize) -> PeerId {
        self.peers[j].expect("another node")
    }

    /// The node an engine's peer id stands for.
    fn node_of(&self, p: PeerId) -> usize {
        self.peers
            .iter()
            .position(|q| *q == Some(p))
            .unwrap_or_else(|| panic!("unknown peer {p:?}"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    Send,
    Put,
    /// A GET: node `remote`'s (region, offset) to local (region, offset), len.
    Get {
        remote: usize,
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
    pub nodes: Vec<Node>,
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
    /// When `Some`, every datagram sent is recorded here as (from, to, channel 0/1), lost ones too.
    pub trace: Option<Vec<(usize, usize, u8)>>,
    /// A node whose identity forged datagrams carry (`inject`): what is delivered as from it is
    /// not checked against expectations; everything from the other nodes still is.
    pub forged: Option<usize>,
    /// Datagrams lost on purpose besides the links' random loss: (node, channel 0/1, n) loses
    /// the node's n-th datagram on that channel (counted from 1).
    pub lose: Vec<(usize, u8, u64)>,
    /// Datagrams held back on purpose: (node, channel 0/1, n, ns) delivers the node's n-th
    /// datagram on that channel `ns` later than its link would.
    pub hold: Vec<(usize, u8, u64, u64)>,
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
        let n = sc.cfg.len();
        assert_eq!(sc.links.len(), n, "one pair of links per node");
        let mk = |i: usize| {
            let mut eng = Engine::new(sc.cfg[i].clone()).expect("valid config");
            let peers = (0..n)
                .map(|j| (j != i).then(|| eng.add_peer(Instant(0), sc.cfg[j].peer_info())))
                .collect();
            Node {
                eng,
                peers,
                mem: BTreeMap::new(),
                nic_free: [0; 2],
                sent: [0; 2],
                bottleneck_free: 0,
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
            nodes: (0..n).map(mk).collect(),
            now: 0,
            steps: 0,
            rng: Rng(seed),
            sc,
            wire: BinaryHeap::new(),
            completions: BinaryHeap::new(),
            order: 0,
            errors: Vec::new(),
            datagrams: 0,
            trace: None,
            forged: None,
            lose: Vec::new(),
            hold: Vec::new(),
            unchecked: false,
        }
    }

    /// The other node of a two-node simulation.
    fn other(&self, i: usize) -> usize {
        assert_eq!(self.nodes.len(), 2, "name the peer node with more than two");
        1 - i
    }

    /// Queues a send from `from` whose delivery the other node expects.
    pub fn send(&mut self, from: usize, id: u64, tag: u8, len: usize) {
        self.send_to(from, self.other(from), id, tag, len);
    }

    /// Queues a send from `from` whose delivery node `to` expects.
    pub fn send_to(&mut self, from: usize, to: usize, id: u64, tag: u8, len: usize) {
        let data = pattern(id, len);
        let key = (from, tag, len, fnv(&data));
        *self.nodes[to].expect.entry(key).or_insert(0) += 1;
        let n = &mut self.nodes[from];
        n.pending.insert(id, Pending::Send);
        let peer = n.peer(to);
        n.eng
            .submit_send(Instant(self.now), peer, tag, data, Cookie(id))
            .expect("submit_send");
    }

    /// Queues a put of `pattern(id, len)` at (region, offset) of the other node.
    pub fn put(&mut self, from: usize, id: u64, region: u64, offset: u64, len: usize) {
        self.put_to(from, self.other(from), id, region, offset, len);
    }

    /// Queues a put of `pattern(id, len)` at (region, offset) of node `to`.
    pub fn put_to(
        &mut self,
        from: usize,
        to: usize,
        id: u64,
        region: u64,
        offset: u64,
        len: usize,
    ) {
        let peer = self.nodes[from].peer(to);
        let n = &mut self.nodes[from];
        n.pending.insert(id, Pending::Put);
        n.eng
            .submit_put(
                Instant(self.now),
                peer,
                region,
                offset,
                pattern(id, len),
                Cookie(id),
            )
            .expect("submit_put");
    }

    /// Queues a get of the other node's (rr, ro) into local (lr, lo), `len` bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn get(&mut self, from: usize, id: u64, rr: u64, ro: u64, lr: u64, lo: u64, len: u64) {
        self.get_from(from, self.other(from), id, rr, ro, lr, lo, len);
    }

    /// Queues a get of node `remote`'s (rr, ro) into local (lr, lo), `len` bytes; its
    /// completion checks the bytes against `remote`'s memory.
    #[allow(clippy::too_many_arguments)]
    pub fn get_from(
        &mut self,
        from: usize,
        remote: usize,
        id: u64,
        rr: u64,
        ro: u64,
        lr: u64,
        lo: u64,
        len: u64,
    ) {
        let n = &mut self.nodes[from];
        let peer = n.peer(remote);
        n.pending.insert(
            id,
            Pending::Get {
                remote,
                rr,
                ro,
                lr,
                lo,
                len,
            },
        );
        n.eng
            .submit_get(Instant(self.now), peer, rr, ro, lr, lo, len, Cookie(id))
            .expect("submit_get");
    }

    /// Everything sent has been delivered/completed and every engine is idle.
    pub fn quiet(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.pending.is_empty()
                && n.expect.values().all(|&c| c == 0)
                && n.peers.iter().flatten().all(|&p| n.eng.is_idle(p))
        })
    }

    /// Whether node `i` has nothing pending and has received everything it expects from node
    /// `other` (what it expects from a third node may still be on its way).
    pub fn done_with(&self, i: usize, other: usize) -> bool {
        let n = &self.nodes[i];
        n.pending.is_empty() && n.expect.iter().all(|(k, &c)| k.0 != other || c == 0)
    }

    /// Runs until `quiet()` (returns true) or a step/time bound is hit (returns false).
    pub fn run(&mut self, max_steps: u64, max_time: u64) -> bool {
        self.run_until(max_steps, max_time, Sim::quiet)
    }

    /// Runs until `done` (returns true) or a step/time bound is hit (returns false).
    pub fn run_until(&mut self, max_steps: u64, max_time: u64, done: fn(&Sim) -> bool) -> bool {
        loop {
            self.pass();
            if done(self) {
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

    /// Runs every event up to time `t` and stops there, so an application can act at `t`
    /// (`run_until` jumps to the next event, which may lie beyond).
    pub fn run_to(&mut self, t: u64) {
        let start = self.steps;
        loop {
            self.pass();
            // A deadline an engine keeps reporting without clearing it would spin here.
            assert!(
                self.steps - start < 1_000_000,
                "run_to({t}): no end at {} ns",
                self.now
            );
            match self.next_time() {
                Some(x) if x <= t => self.now = self.now.max(x),
                _ => break,
            }
        }
        self.now = self.now.max(t);
    }

    /// Runs to quiescence within the bounds the randomized workloads use, and checks that
    /// nothing failed and no kept datagram was left behind; `what` names the run in a failure.
    pub fn settle(&mut self, what: &str) {
        let ok = self.run(3_000_000, 120_000_000_000);
        assert!(
            ok,
            "{what}: no quiescence: steps {} now {} ns, pending {:?}, stats {:?}",
            self.steps,
            self.now,
            self.nodes
                .iter()
                .map(|n| n.pending.len())
                .collect::<Vec<_>>(),
            self.nodes.iter().map(|n| n.eng.stats()).collect::<Vec<_>>()
        );
        assert!(
            self.errors.is_empty(),
            "{what}: failed ops {:?}",
            self.errors
        );
        for (i, n) in self.nodes.iter().enumerate() {
            assert!(n.failures.is_empty(), "{what}: {:?}", n.failures);
            assert!(
                n.held.is_empty(),
                "{what}: node {i} kept {} datagrams never delivered",
                n.held.len()
            );
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
        for i in 0..self.nodes.len() {
            if self.nodes[i].eng.poll_timeout().is_some_and(|t| t.0 <= now) {
                self.nodes[i].eng.handle_timeout(Instant(now));
            }
            self.drain_events(i);
            self.transmit(i);
            self.drain_events(i);
        }
    }

    /// Hands node `i` a datagram that did not come from an engine (a forged or mangled one),
    /// as if it had arrived now.
    pub fn inject(&mut self, i: usize, ch: Channel, bytes: &[u8]) {
        self.receive(i, ch, bytes);
    }

    fn receive(&mut self, i: usize, ch: Channel, bytes: &[u8]) {
        let now = Instant(self.now);
        let n = &mut self.nodes[i];
        let handle = n.next_handle;
        n.next_handle += 1;
        match n.eng.handle_datagram_held(now, ch, bytes, handle) {
            RxOutcome::Held => {
                n.held.insert(handle, bytes.to_vec());
                // The edge has only so many receive buffers to lend.
                let max = self.sc.cfg[i].max_held as usize;
                assert!(
                    n.held.len() <= max,
                    "node {i} keeps more than {max} datagrams"
                );
            }
            RxOutcome::Deliver {
                peer, tag, payload, ..
            } => {
                if !self.unchecked {
                    let from = n.node_of(peer);
                    Self::deliver(n, self.forged, from, tag, &bytes[payload]);
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

    /// Checks a delivery from node `from` against `n`'s expectations, unless `from` is the
    /// `forged` node, whose deliveries nobody expects.
    fn deliver(n: &mut Node, forged: Option<usize>, from: usize, tag: u8, data: &[u8]) {
        if forged == Some(from) {
            return;
        }
        let key = (from, tag, data.len(), fnv(data));
        match n.expect.get_mut(&key) {
            Some(c) if *c > 0 => *c -= 1,
            _ => panic!(
                "unexpected delivery (duplicate, corrupt or misrouted): from node {from} tag {tag} len {}",
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
                Event::Deliver {
                    peer,
                    tag,
                    ref data,
                    ..
                } => {
                    let from = n.node_of(peer);
                    Self::deliver(n, self.forged, from, tag, data)
                }
                Event::DeliverPieces {
                    peer,
                    tag,
                    len,
                    pieces,
                    ..
                } => {
                    let from = n.node_of(peer);
                    let data = Self::gather(n, len, pieces);
                    Self::deliver(n, self.forged, from, tag, &data)
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
                        remote,
                        rr,
                        ro,
                        lr,
                        lo,
                        len,
                    } = p
                    {
                        // The bytes must already be in place, equal to the source.
                        let src = &self.nodes[remote].mem[&rr][ro as usize..(ro + len) as usize];
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
                let to = n.node_of(t.peer);
                if let Some(tr) = &mut self.trace {
                    tr.push((i, to, c));
                }
                let start = n.nic_free[c as usize].max(self.now);
                let done = start + (t.len as u64 * self.sc.ps_per_byte).div_ceil(1000);
                n.nic_free[c as usize] = done;
                self.completions.push(Reverse((done, i, c)));
                let left = match self.sc.bottleneck_ps_per_byte {
                    0 => done,
                    ps => {
                        let at = n.bottleneck_free.max(done) + (t.len as u64 * ps).div_ceil(1000);
                        n.bottleneck_free = at;
                        at
                    }
                };
                n.sent[c as usize] += 1;
                let link = &self.sc.links[i][c as usize];
                if self.rng.chance(link.loss) || self.lose.contains(&(i, c, n.sent[c as usize])) {
                    continue;
                }
                let nth = n.sent[c as usize];
                let held = self
                    .hold
                    .iter()
                    .find(|h| (h.0, h.1, h.2) == (i, c, nth))
                    .map_or(0, |h| h.3);
                let copies = if self.rng.chance(link.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut at = left + held + link.delay_ns + self.rng.below(link.jitter_ns + 1);
                    if self.rng.chance(link.reorder) {
                        at += self.rng.below(link.reorder_ns + 1);
                    }
                    self.order += 1;
                    self.wire.push(Reverse(Datagram {
                        at,
                        order: self.order,
                        to,
                        ch: c,
                        bytes: buf[..t.len].to_vec(),
                    }));
                }
            }
        }
    }
}
