//! Datagrams entering the engine.

use super::{Engine, LastWrite};
use crate::proto::api::*;
use crate::proto::chunk::{Fit, Whole};
use crate::proto::peer::MAX_DSACKS;
use crate::proto::window::recv::ext_diff;
use crate::proto::window::Accept;
use crate::proto::wire::{self, Kind};

impl Engine {
    /// One received datagram on `channel` (sequenced segments are accepted on either channel).
    /// Never panics, whatever the bytes.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        channel: Channel,
        datagram: &[u8],
    ) -> RxOutcome {
        self.receive(now, channel, datagram, None)
    }

    /// `handle_datagram`, offering to keep the datagram where it is: a chunk of a fragment
    /// being reassembled may be kept instead of copied (`RxOutcome::Held`, up to
    /// `Config::max_held` buffers), and is named by `handle` when the fragment is delivered
    /// (`Event::DeliverPieces`) or abandoned (`Event::Release`). The edge must leave the
    /// datagram's bytes untouched until then.
    pub fn handle_datagram_held(
        &mut self,
        now: Instant,
        channel: Channel,
        datagram: &[u8],
        handle: u64,
    ) -> RxOutcome {
        self.receive(now, channel, datagram, Some(handle))
    }

    fn receive(
        &mut self,
        now: Instant,
        channel: Channel,
        datagram: &[u8],
        hold: Option<u64>,
    ) -> RxOutcome {
        self.commit_write();
        self.touch(now);
        self.stats.recvs += 1;
        let (h, payload) = match wire::parse(datagram) {
            Ok(x) => x,
            Err(_) => {
                self.stats.malformed_recvs += 1;
                return RxOutcome::Dropped(DropReason::Malformed);
            }
        };
        if h.key != self.cfg.local_key {
            self.stats.wrong_key_recvs += 1;
            return RxOutcome::Dropped(DropReason::WrongKey);
        }
        let Some(&pid) = self.by_src.get(&h.src) else {
            self.stats.unknown_sender_recvs += 1;
            return RxOutcome::Dropped(DropReason::UnknownSender);
        };
        let peer = PeerId(pid);
        let p = self.peers[pid as usize]
            .as_mut()
            .expect("by_src maps live peers");
        if p.failed {
            return RxOutcome::Dropped(DropReason::PeerFailed);
        }
        self.stats.bytes_received += datagram.len() as u64;

        if let Some(ack) = h.ack {
            let ext = if h.kind == Kind::Ack {
                &datagram[payload.clone()]
            } else {
                &[][..]
            };
            self.process_ack(now, pid, ack, ext);
        }
        if h.kind == Kind::Ack {
            return RxOutcome::Consumed;
        }
        // The only cost of the hold on this path while it is off: one compare.
        if self.rx_held {
            if let Some(dropped) = self.refuse_held(now, pid, channel, &h) {
                return dropped;
            }
        }

        // Reject what contradicts local state before the sequence number is marked received.
        let p = self.peers[pid as usize].as_mut().expect("live");
        let consistent = match h.kind {
            Kind::Chunk => match p.reasm.fit(h.id, h.tag, h.total) {
                Fit::Matches => true,
                Fit::Conflicts => false,
                // Only a new segment opens a fragment; a late copy of a finished fragment's
                // chunk goes on to be answered as the duplicate it is.
                Fit::Opens { within_limit } => within_limit || !p.rw.is_new(h.seq),
            },
            Kind::GetReply => p.gets.get(&h.id).is_none_or(|g| g.len == h.total as u64),
            _ => true,
        };
        if !consistent {
            self.stats.bad_chunk_recvs += 1;
            return RxOutcome::Dropped(DropReason::BadChunk);
        }
        let accept = p.rw.accept(h.seq);
        // Only the data channel is first in, first out: what arrived on it vouches for what
        // was sent on it before (a priority datagram carries 0 anyway).
        if channel == Channel::Data && !matches!(accept, Accept::High) {
            p.saw_tx(h.tx);
        }
        match accept {
            Accept::Duplicate => {
                self.stats.dup_recvs += 1;
                // Each is named by an ACK of its own: the sender learns which resend was
                // needless (a burst of them would otherwise share one ACK and one report).
                if p.dsacks.len() < MAX_DSACKS {
                    p.dsacks.push_back(h.seq as u16);
                }
                self.ack_now(pid);
                return RxOutcome::Dropped(DropReason::Duplicate);
            }
            Accept::Low => {
                self.stats.oow_low_recvs += 1;
                self.ack_now(pid);
                return RxOutcome::Dropped(DropReason::OutOfWindow);
            }
            Accept::High => {
                self.stats.oow_high_recvs += 1;
                self.ack_now(pid);
                return RxOutcome::Dropped(DropReason::OutOfWindow);
            }
            Accept::New {
                new_hole,
                fills_gap,
            } => {
                if !p.ack_owed {
                    p.ack_owed = true;
                    p.ack_deadline = now + self.cfg.ack_delay;
                }
                // Checked here: there is nearly never a held PUT, and the call cost every new
                // segment about 24 instructions (of a chunk's ~950 on both ranks together).
                if h.kind != Kind::PutRefuse && !p.held_puts.is_empty() {
                    self.release_held_puts(pid);
                }
                if new_hole || fills_gap {
                    // A gap just opened or closed: tell the sender at once, so it repairs
                    // quickly and does not take a reordered segment for a lost one.
                    self.ack_now(pid);
                }
            }
        }

        let p = self.peers[pid as usize].as_mut().expect("live");
        let plen = payload.len();
        match h.kind {
            Kind::Ack => RxOutcome::Consumed,
            Kind::Frag => {
                if plen >= self.cfg.prompt_ack_from {
                    self.ack_next_pass(pid, now);
                }
                RxOutcome::Deliver {
                    peer,
                    tag: h.tag,
                    payload,
                }
            }
            Kind::Chunk => {
                let offer = hold.map(|handle| (handle, payload.clone()));
                let budget = self.cfg.max_held.saturating_sub(self.held);
                let Ok((held, whole)) = p.reasm.add(
                    h.id,
                    h.tag,
                    h.total,
                    h.offset,
                    &datagram[payload],
                    offer,
                    budget,
                    &mut self.spares,
                ) else {
                    // Overlapping chunks come only from a broken or forged sender; its number
                    // is taken (a copy of it is a duplicate) and its bytes are not.
                    self.stats.bad_chunk_recvs += 1;
                    return RxOutcome::Dropped(DropReason::BadChunk);
                };
                if held {
                    self.held += 1;
                }
                if let Some(whole) = whole {
                    let ev = match whole {
                        Whole::Copied(tag, data) => Event::Deliver { peer, tag, data },
                        Whole::Pieces(tag, len, pieces, n) => {
                            // Handed to the edge with the event.
                            self.held -= n;
                            Event::DeliverPieces {
                                peer,
                                tag,
                                len,
                                pieces,
                            }
                        }
                    };
                    self.events.push_back(ev);
                    if h.total as usize >= self.cfg.prompt_ack_from {
                        self.ack_next_pass(pid, now);
                    }
                }
                if held {
                    RxOutcome::Held
                } else {
                    RxOutcome::Consumed
                }
            }
            Kind::Put => {
                if plen == 0 {
                    return RxOutcome::Consumed;
                }
                if h.offset as usize + plen == h.total as usize {
                    // The origin completes the PUT, and only then can its PML go on (ob1 sends
                    // its FIN), when the last byte is acknowledged; no reply will carry this ACK.
                    self.ack_now(pid);
                }
                self.last_write = Some(LastWrite::Put {
                    peer: pid,
                    id: h.id,
                });
                RxOutcome::Write {
                    peer,
                    region: h.region,
                    offset: h.region_offset + h.offset as u64,
                    payload,
                }
            }
            Kind::GetReq => {
                p.get_requests.insert(h.id, h.total as u64);
                self.events.push_back(Event::GetRequest {
                    peer,
                    request: h.id,
                    region: h.region,
                    offset: h.region_offset,
                    len: h.total as u64,
                });
                RxOutcome::Consumed
            }
            Kind::GetReply => {
                let Some(g) = p.gets.get_mut(&h.id) else {
                    // A GET already refused locally: its remaining bytes are dropped.
                    return RxOutcome::Consumed;
                };
                g.got += plen as u64;
                let region = g.local_region;
                let offset = g.local_offset + h.offset as u64;
                let cookie = g.cookie;
                let done = g.got >= g.len;
                // Reply data proves the target alive (the peer-failure clock).
                p.progressed(now);
                let completion = if done {
                    p.gets.remove(&h.id);
                    Some(Event::GetComplete {
                        peer,
                        cookie,
                        result: Ok(()),
                    })
                } else {
                    None
                };
                if plen == 0 {
                    if let Some(ev) = completion {
                        self.events.push_back(ev);
                    }
                    return RxOutcome::Consumed;
                }
                self.last_write = Some(LastWrite::Get {
                    peer: pid,
                    request: h.id,
                    cookie,
                    completion,
                });
                RxOutcome::Write {
                    peer,
                    region,
                    offset,
                    payload,
                }
            }
            Kind::PutRefuse => {
                let refused = if let Some(idx) = p.puts.remove(&h.id) {
                    p.ops.get_mut(idx).filter(|op| !op.reported).map(|op| {
                        op.reported = true;
                        op.cookie
                    })
                } else if let Some(i) = p.held_puts.iter().position(|x| x.id == h.id) {
                    Some(p.held_puts.remove(i).cookie)
                } else {
                    None
                };
                if let Some(cookie) = refused {
                    self.events.push_back(Event::PutComplete {
                        peer,
                        cookie,
                        result: Err(Failure::RemoteRefused),
                    });
                }
                self.release_held_puts(pid);
                RxOutcome::Consumed
            }
            Kind::GetRefuse => {
                if let Some(g) = p.gets.remove(&h.id) {
                    self.events.push_back(Event::GetComplete {
                        peer,
                        cookie: g.cookie,
                        result: Err(Failure::RemoteRefused),
                    });
                }
                RxOutcome::Consumed
            }
        }
    }

    /// While the receive side is held (`hold_receive`): a segment the window would newly accept
    /// is not accepted. Its number stays free (its retransmission is taken once the hold
    /// ends), nothing is delivered or acknowledged, and the peer hears of the hold in a
    /// standalone ACK (one per pass at most, however many segments arrive: the ACK list holds
    /// a peer once), which proves this side alive without opening the peer's window: the
    /// peer's sends wait, as a TCP sender's do behind a zero window, instead of piling up
    /// here. Its piggy-backed ACK information was processed already (it only frees our own
    /// send side). Duplicates and segments outside the window go the ordinary way (they
    /// cost nothing to keep). `None`: not refused.
    fn refuse_held(
        &mut self,
        now: Instant,
        pid: u32,
        channel: Channel,
        h: &wire::Header,
    ) -> Option<RxOutcome> {
        let p = self.peers[pid as usize].as_mut().expect("live");
        if !p.rw.is_new(h.seq) {
            return None;
        }
        // Work of ours that waits on receiving (a GET's reply, the segments below a held PUT's
        // barrier) is refused here too: the peer's new segment proves it alive as the reply
        // data itself would have, or our own failure clock would run out on a peer that is
        // sending all along.
        if !p.gets.is_empty() || !p.held_puts.is_empty() {
            p.progressed(now);
        }
        // The held ACK echoes this transmission: the peer takes it as proof of life only if it
        // names something sent since it last heard from us (a replay does not).
        if channel == Channel::Data {
            p.saw_tx(h.tx);
        }
        p.held_ack = true;
        self.stats.held_recvs += 1;
        self.ack_now(pid);
        Some(RxOutcome::Dropped(DropReason::Held))
    }

    /// Completes the held PUTs whose barrier the receive window has now passed.
    fn release_held_puts(&mut self, pid: u32) {
        let p = self.peers[pid as usize].as_mut().expect("live");
        let next = p.rw.next();
        let events = &mut self.events;
        p.held_puts.retain(|h| {
            if ext_diff(next, h.barrier) >= 0 {
                events.push_back(Event::PutComplete {
                    peer: PeerId(pid),
                    cookie: h.cookie,
                    result: Ok(()),
                });
                false
            } else {
                true
            }
        });
    }
}
