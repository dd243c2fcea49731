//! Operations entering the engine from the edge.

use super::{Engine, LastWrite};
use crate::proto::api::*;
use crate::proto::fragment::{Op, OpKind};
use crate::proto::payload::Payload;
use crate::proto::peer::PendingGet;
use crate::proto::wire::{BASE_LEN, MAX_REASSEMBLY};

impl Engine {
    fn usable_peer(&self, peer: PeerId) -> Result<(), SubmitError> {
        match self.peer(peer) {
            None => Err(SubmitError::UnknownPeer),
            Some(p) if p.failed => Err(SubmitError::PeerFailed),
            Some(_) => Ok(()),
        }
    }

    fn new_op(kind: OpKind, data: impl Into<Payload>, total: u32, id: u32, cookie: Cookie) -> Op {
        Op {
            kind,
            data: data.into(),
            cookie,
            id,
            total,
            next_off: 0,
            segs_out: 0,
            all_sent: false,
            reported: false,
            release_at: None,
            tx_mark: [0; 2],
        }
    }

    /// Queues `op` for `pid` (peer known and not failed); returns its slab index.
    fn enqueue(&mut self, now: Instant, pid: u32, op: Op, prio: bool) -> u32 {
        let p = self.peers[pid as usize]
            .as_mut()
            .expect("checked by usable_peer");
        if !p.outstanding() {
            // The peer-failure clock starts with the first outstanding work.
            p.progressed(now);
        }
        let idx = p.ops.insert(op);
        if prio {
            p.prio_q.push_back(idx);
        } else {
            p.data_q.push_back(idx);
        }
        self.ensure_ready(pid);
        idx
    }

    /// Queue a PML fragment. Tiny ones (one datagram of the peer's priority size) go on the
    /// priority channel, others on the data channel, chunked when larger than one datagram to
    /// this peer.
    /// `SendComplete` follows when every byte is acknowledged. Lent bytes (`Payload::Lent`)
    /// are read until then and dropped before that event.
    pub fn submit_send(
        &mut self,
        now: Instant,
        peer: PeerId,
        tag: u8,
        data: impl Into<Payload>,
        cookie: Cookie,
    ) -> Result<(), SubmitError> {
        let data = data.into();
        self.commit_write();
        self.touch(now);
        self.usable_peer(peer)?;
        let len = data.len();
        let p = self.peers[peer.0 as usize].as_mut().expect("usable");
        let chunked = len > p.mtu - BASE_LEN;
        if chunked && len > MAX_REASSEMBLY as usize {
            return Err(SubmitError::TooLarge);
        }
        let id = if chunked { p.alloc_msg_id() } else { 0 };
        let prio = len <= p.prio_mtu - BASE_LEN;
        let op = Self::new_op(OpKind::Send { tag, chunked }, data, len as u32, id, cookie);
        self.enqueue(now, peer.0, op, prio);
        Ok(())
    }

    /// Emulated PUT: `data` lands at `offset` of the peer's region `region` with no upcall there.
    /// Lent bytes are read until the PUT completes (or `own_lent` copies them).
    pub fn submit_put(
        &mut self,
        now: Instant,
        peer: PeerId,
        region: u64,
        offset: u64,
        data: impl Into<Payload>,
        cookie: Cookie,
    ) -> Result<(), SubmitError> {
        let data = data.into();
        self.commit_write();
        self.touch(now);
        self.usable_peer(peer)?;
        let len = data.len();
        if len > u32::MAX as usize || offset.checked_add(len as u64).is_none() {
            return Err(SubmitError::TooLarge);
        }
        let p = self.peers[peer.0 as usize].as_mut().expect("usable");
        let id = p.alloc_msg_id();
        let op = Self::new_op(OpKind::Put { region, offset }, data, len as u32, id, cookie);
        let idx = self.enqueue(now, peer.0, op, false);
        self.peers[peer.0 as usize]
            .as_mut()
            .expect("usable")
            .puts
            .insert(id, idx);
        Ok(())
    }

    /// Emulated GET: read `len` bytes at `offset` of the peer's region `remote_region`; the
    /// bytes come back as `RxOutcome::Write { region: local_region, offset: local_offset + i }`.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_get(
        &mut self,
        now: Instant,
        peer: PeerId,
        remote_region: u64,
        remote_offset: u64,
        local_region: u64,
        local_offset: u64,
        len: u64,
        cookie: Cookie,
    ) -> Result<(), SubmitError> {
        self.commit_write();
        self.touch(now);
        self.usable_peer(peer)?;
        // The reply's datagrams land in registered memory, not a reassembly buffer, but a
        // receiver takes no reply larger than one (wire::validate), so a larger GET could
        // never complete.
        if len > MAX_REASSEMBLY as u64
            || remote_offset.checked_add(len).is_none()
            || local_offset.checked_add(len).is_none()
        {
            return Err(SubmitError::TooLarge);
        }
        let request = self.peers[peer.0 as usize]
            .as_mut()
            .expect("usable")
            .alloc_request();
        let kind = OpKind::GetReq {
            region: remote_region,
            offset: remote_offset,
        };
        let op = Self::new_op(kind, Vec::new(), len as u32, request, cookie);
        self.enqueue(now, peer.0, op, false);
        self.peers[peer.0 as usize]
            .as_mut()
            .expect("usable")
            .gets
            .insert(
                request,
                PendingGet {
                    local_region,
                    local_offset,
                    len,
                    got: 0,
                    cookie,
                },
            );
        Ok(())
    }

    /// Answer an `Event::GetRequest`: `Ok(data)` sends the bytes back, `Err(())` refuses.
    /// Data of another length than requested is refused too. Unknown requests are ignored.
    /// Lent bytes are read until the reply is acknowledged (or copied by `own_lent`).
    pub fn answer_get(
        &mut self,
        now: Instant,
        peer: PeerId,
        request: u32,
        data: Result<Payload, ()>,
    ) {
        self.commit_write();
        self.touch(now);
        if self.usable_peer(peer).is_err() {
            return;
        }
        let p = self.peers[peer.0 as usize].as_mut().expect("usable");
        let Some(len) = p.get_requests.remove(&request) else {
            return;
        };
        let op = match data {
            Ok(d) if d.len() as u64 == len => {
                Self::new_op(OpKind::GetReply, d, len as u32, request, Cookie(0))
            }
            _ => {
                self.stats.refused_gets += 1;
                Self::new_op(OpKind::GetRefuse, Vec::new(), 0, request, Cookie(0))
            }
        };
        self.enqueue(now, peer.0, op, false);
    }

    /// Copies every operation's bytes still lent by `owner` (`Lent::owner`), so the owner may
    /// let go of them now; returns how many operations it copied.
    pub fn own_lent(&mut self, owner: u64) -> usize {
        let mut n = 0;
        for p in self.peers.iter_mut().flatten() {
            for op in p.ops.iter_mut() {
                n += usize::from(op.data.own(owner));
            }
        }
        n
    }

    /// The edge refused the `RxOutcome::Write` the immediately preceding `handle_datagram`
    /// returned (outside registered memory): counted, and the originating PUT (at the peer,
    /// through a refusal message) or local GET completes with `RemoteRefused`. Must be called
    /// before any other engine call (including `poll_event`) after that `handle_datagram`.
    pub fn refuse_write(&mut self, now: Instant, peer: PeerId) {
        self.touch(now);
        self.stats.refused_writes += 1;
        match self.last_write.take() {
            Some(LastWrite::Put { peer: pid, id }) if pid == peer.0 => {
                if self.usable_peer(peer).is_err() {
                    return;
                }
                let p = self.peers[pid as usize].as_mut().expect("usable");
                // One refusal per put is enough; its other chunks are refused silently.
                if p.last_refused_put != Some(id) {
                    p.last_refused_put = Some(id);
                    p.refusals_unsent += 1;
                    if !p.outstanding() {
                        p.progressed(now);
                    }
                    let op = Self::new_op(OpKind::PutRefuse, Vec::new(), 0, id, Cookie(0));
                    // First in line: acknowledgements are held until it has a sequence number.
                    let idx = p.ops.insert(op);
                    p.data_q.push_front(idx);
                    self.ensure_ready(pid);
                }
            }
            Some(LastWrite::Get {
                peer: pid,
                request,
                cookie,
                ..
            }) if pid == peer.0 => {
                let Some(p) = self.peers[pid as usize].as_mut() else {
                    return;
                };
                let cookie = p.gets.remove(&request).map_or(cookie, |g| g.cookie);
                self.events.push_back(Event::GetComplete {
                    peer,
                    cookie,
                    result: Err(Failure::RemoteRefused),
                });
            }
            other => self.last_write = other,
        }
    }
}
