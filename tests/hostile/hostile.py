#!/usr/bin/python3
"""Hostile datagrams against a running usnic-rs job (tests/hostile/run.sh drives it).

Finds the job's UDP ports (ss -uanp, filtered by the job's PIDs), captures some of its real
datagrams from an AF_PACKET socket on lo (same-host traffic, even to eth0's address, is
looped through lo; a run sent as one GSO super-packet is split into its datagrams, as a wire
would carry them), then sends one class of hostile datagrams to those ports:

  garbage    random bytes of random lengths around every header length (half starting like a
             current header: version 5, a kind, zero flags/tag; a fifth of those with an old
             version 1, 2, 3 or 4 instead), plus a few datagrams larger than the channel MTU
  truncated  every prefix of real datagrams shorter than header + payload_len
  wrongkey   real datagrams with the key field replaced (random, 0, the other rank's key)
  replay     real datagrams sent again verbatim, repeatedly, for the rest of the job
  chunk      real Chunk datagrams (kind 3, and the same as GetReply, kind 6) mutated so
             offset + len overruns the fragment, offsets that wrap u32, totals over the limit,
             payload_len beyond the datagram; plus total changed consistently (parses, must be
             refused by the chunk consistency check)
  putget     PUT/GET (kinds 4/5) with the real key and sender id, extended sequence numbers
             (epoch from the captured datagrams, docs/wire.md 5a) inside the receive window
             (2500+ ahead of the last one seen: never reached by the slow target program),
             regions and offsets outside any registered memory; plus in-window fragments
             with tag 255 (past Open MPI's callback table) and 0x23 (vader's own handler)
  flood      one real sequenced datagram and one real ACK, each sent thousands of times

Wire format: docs/wire.md (version 5, little-endian: 48-byte base header with the epochs of
seq/ack/snd_next at 32..38, the duplicate report at 38..40, the transmission number tx at
40..44 (0 on the priority channel and in Acks) and its echo at 44..48 (0 without flag ACK),
message extension at 48..64, region extension at 64..80; key at 16 is the receiver's job key,
src at 8 the sender's id). Other versions are rejected by the job, so only version-5
datagrams are captured. Forged PUT/GET headers (putget, truncated) and the live chunk copies
(sent to a priority socket) carry tx 0 (not stamped: ignored by the receiver); putget's carry
no ACK information (echo 0), the others keep the captured ACK information and echo. Prints
what it sent, one 'HOSTILE <attack> sent=N ...' summary line last.
Root only (AF_PACKET). Python 3 stdlib only.
"""
import argparse
import os
import random
import re
import socket
import struct
import subprocess
import sys
import time

VERSION = 5
# version kind flags tag seq ack src key plen snd_next sack seq_epoch ack_epoch snd_next_epoch
# dsack tx echo
HDR = struct.Struct("<BBBBHHQQHHIHHHHII")
HDR_NAMES = ["version", "kind", "flags", "tag", "seq", "ack", "src", "key", "plen", "snd_next",
             "sack", "seq_epoch", "ack_epoch", "snd_next_epoch", "dsack", "tx", "echo"]
MSG = struct.Struct("<IIII")  # id total offset reserved
REGION = struct.Struct("<QQ")  # region region_offset
BASE = HDR.size  # 48
MSG_AT = BASE  # 48..64
REGION_AT = MSG_AT + MSG.size  # 64..80
HLEN = {1: 48, 2: 48, 3: 64, 4: 80, 5: 80, 6: 64, 7: 64, 8: 64}
assert BASE == 48 and MSG_AT + MSG.size == 64 and REGION_AT + REGION.size == 80
SEQUENCED = set(range(2, 9))
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_VNET_HDR = 15
# struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
VNET = struct.Struct("=BBHHHH")
VIRTIO_NET_HDR_GSO_UDP_L4 = 5


def log(msg):
    print(f"hostile: {msg}", flush=True)


def job_ports(pids):
    """UDP sockets of these PIDs: list of (ip, port, pid)."""
    out = subprocess.run(["ss", "-H", "-uanp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        m = re.search(r"\s(\d+\.\d+\.\d+\.\d+):(\d+)\s", line)
        if not m:
            continue
        for pid in re.findall(r"pid=(\d+)", line):
            if int(pid) in pids:
                found.append((m.group(1), int(m.group(2)), int(pid)))
    return found


def socket_drops(dsts):
    """Sum of the kernel's per-socket drop counters (/proc/net/udp, last column: datagrams
    the receive buffer had no room for) of the UDP sockets bound to these (ip, port)."""
    want = {(socket.inet_aton(ip)[::-1].hex().upper(), port) for ip, port in dsts}
    total = 0
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            c = line.split()
            ip, port = c[1].split(":")
            if (ip, int(port, 16)) in want:
                total += int(c[-1])
    return total


class Pkt:
    def __init__(self, dst, data, t):
        self.dst, self.data, self.t = dst, data, t
        self.h = None
        if len(data) >= BASE and data[0] == VERSION and data[1] in HLEN:
            self.h = HDR.unpack_from(data)

    @property
    def kind(self):
        return self.h[1] if self.h else None

    @property
    def seq(self):
        return self.h[4]

    @property
    def xseq(self):
        """Extended sequence number: epoch << 16 | seq (docs/wire.md 5a)."""
        return self.h[11] << 16 | self.h[4]

    @property
    def src(self):
        return self.h[6]

    @property
    def key(self):
        return self.h[7]

    @property
    def plen(self):
        return self.h[8]


def capture(targets, seconds, limit, enough=lambda got: True, max_wait=40.0, live=None,
            mine=()):
    """Datagrams to any (ip, port) in targets seen on lo: for `seconds` (at most `limit`),
    longer (up to `max_wait`) until `enough(got)` (a slow job, e.g. under valgrind).
    `live(pkt)`, if given, is called on each one as soon as it is seen, and then the capture
    goes on for `seconds` even past `limit` (only the first `limit` are kept). Datagrams from
    UDP source ports in `mine` (this tool's own) are skipped."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # Each frame then starts with a virtio_net_hdr giving its GSO segment size: the job sends
    # runs of datagrams as one GSO super-packet (btl_usnic_gso), which lo carries whole. A
    # wire would carry them one by one, and a replayed super-packet would be one datagram
    # longer than the MTU (dropped as oversize), not the datagrams an attacker would replay.
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.bind(("lo", 0))
    s.settimeout(0.2)
    got = []
    t0 = time.time()
    while len(got) < limit or (live and time.time() - t0 < seconds):
        now = time.time()
        if now - t0 >= max_wait or (now - t0 >= seconds and enough(got)):
            break
        try:
            frame, addr = s.recvfrom(70000)
        except socket.timeout:
            continue
        gso_type, gso_size = VNET.unpack_from(frame, 0)[1:4:2]
        frame = frame[VNET.size:]
        if addr[2] == PACKET_OUTGOING or len(frame) < 14 + 20 + 8:
            continue
        if frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17 or (struct.unpack_from("!H", ip, 6)[0] & 0x3FFF):
            continue  # not UDP, or an IP fragment
        dst_ip = socket.inet_ntoa(ip[16:20])
        udp = ip[ihl:]
        sport, dport = struct.unpack_from("!HH", udp, 0)
        if sport in mine:
            continue
        ulen = struct.unpack_from("!H", udp, 4)[0]
        if (dst_ip, dport) in targets:
            payload = bytes(udp[8:ulen])
            step = gso_size if gso_type == VIRTIO_NET_HDR_GSO_UDP_L4 and gso_size else len(payload)
            for at in range(0, len(payload), max(step, 1)):
                p = Pkt((dst_ip, dport), payload[at:at + step], time.time())
                if len(got) < limit:
                    got.append(p)
                if live:
                    live(p)
    s.close()
    return got


class Sender:
    def __init__(self, pace):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.s.bind(("0.0.0.0", 0))
        self.port = self.s.getsockname()[1]
        self.n = 0
        self.errors = 0
        self.pace = pace

    def send(self, dst, data):
        try:
            self.s.sendto(data, dst)
            self.n += 1
        except OSError:
            self.errors += 1
        # Stay below what the receiver can read, so the counters see most of what was sent.
        if self.pace and self.n % self.pace == 0:
            time.sleep(0.001)


def with_header(p, **kw):
    """p's datagram with header fields replaced (names as in HDR)."""
    f = dict(zip(HDR_NAMES, p.h))
    f.update(kw)
    return HDR.pack(*[f[n] for n in HDR_NAMES]) + p.data[BASE:]


def header(kind, xseq, src, key, plen, tag=0):
    """A base header without ACK information (so echo 0) for extended sequence number xseq;
    tx 0: not stamped, so the forgery cannot raise what the receiver echoes."""
    return HDR.pack(VERSION, kind, 0, tag, xseq & 0xFFFF, 0, src, key, plen, 0, 0,
                    (xseq >> 16) & 0xFFFF, 0, 0, 0, 0, 0)


def with_msg(data, **kw):
    names = ["id", "total", "offset", "rsvd"]
    f = dict(zip(names, MSG.unpack_from(data, MSG_AT)))
    f.update(kw)
    return data[:MSG_AT] + MSG.pack(*[f[n] for n in names]) + data[REGION_AT:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attack", required=True,
                    choices=["garbage", "truncated", "wrongkey", "replay", "chunk", "putget", "flood"])
    ap.add_argument("--pids", required=True, help="comma-separated PIDs of the job's ranks")
    ap.add_argument("--seconds", type=float, default=8.0, help="how long to keep attacking")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=20000, help="datagrams for garbage/flood")
    ap.add_argument("--interval", type=float, default=0.5, help="replay: seconds between rounds")
    ap.add_argument("--capture", type=float, default=1.5, help="seconds of capture")
    ap.add_argument("--kinds", default="", help="replay: only these kinds (e.g. 1 = ACKs)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("hostile: must run as root (AF_PACKET capture on lo)", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    pids = {int(p) for p in a.pids.split(",") if p}
    ports = []
    deadline = time.time() + 20
    while time.time() < deadline:
        ports = job_ports(pids)
        if len({p for _, _, p in ports}) == len(pids) and len(ports) >= 2 * len(pids):
            break
        time.sleep(0.2)
    if not ports:
        print(f"hostile: no UDP sockets found for PIDs {sorted(pids)}", file=sys.stderr)
        return 2
    targets = {(ip, port) for ip, port, _ in ports}
    pid_of = {(ip, port): pid for ip, port, pid in ports}
    log(f"ports: {sorted(f'{ip}:{port}(pid {pid})' for ip, port, pid in ports)}")

    def enough(got):
        v = [p for p in got if p.h]
        if a.attack == "chunk":
            return any(p.kind == 3 for p in v)
        if a.attack in ("putget", "flood"):
            dirs = {(p.src, p.key) for p in v if p.kind in SEQUENCED}
            return len(dirs) >= 2 and any(p.kind == 1 for p in v)
        return len(v) > 0

    tx = Sender(pace=100)
    live = None
    live_sent = [0]
    totals = set()
    ltx = Sender(pace=0)  # no pause: the capture must keep up
    if a.attack == "chunk":
        # The chunk consistency check compares against a reassembly in progress (docs/wire.md
        # 4: tag or total differing from earlier chunks of the same id). Once the fragment is
        # complete its id is forgotten and a copy is just a duplicate, so these mutations are
        # sent the moment a chunk is seen, while the receiver still reassembles its fragment.
        # The engine checks consistency before the receive window, so the copies carry a
        # sequence number 5000 below the real one: at least 904 below the receiver's window
        # (the sender is never more than 4096 ahead of it), a duplicate or out of window if
        # it passed the check. Even if the real chunk was lost (its copy would then start the
        # reassembly with the wrong total and starve the real fragment), nothing is lost.
        # The data channel's socket holds the rest of the fragment already queued (the sender
        # has the whole window out), so the copies go to the receiver's other socket on the
        # same address (its priority channel: every kind is accepted on either channel), cut
        # to 16 payload bytes to fit its MTU, where they are read before the queued chunks.
        # There they carry tx 0, as every priority-channel datagram does: the real chunk's
        # number would raise the receiver's echo before the real chunk has arrived.
        def live(p):
            if p.h and p.kind == 3 and p.plen > 0 and live_sent[0] < 8000:
                _, total, off, _ = MSG.unpack_from(p.data, MSG_AT)
                totals.add(total)
                # the first chunk of a fragment: the rest of it is still to come
                if off == 0 and p.plen < total:
                    old = (p.xseq - 5000) & 0xFFFFFFFF
                    n = min(p.plen, 16)
                    q = Pkt(p.dst, with_header(p, seq=old & 0xFFFF, seq_epoch=old >> 16, plen=n,
                                               tx=0)[:HLEN[3] + n], 0)
                    pid = pid_of[p.dst]
                    to = [d for d, x in pid_of.items() if x == pid and d[0] == p.dst[0] and d != p.dst]
                    for dst in to or [p.dst]:
                        ltx.send(dst, with_msg(q.data, total=min(total * 2, 64 << 20)))
                        ltx.send(dst, with_header(q, tag=p.h[3] ^ 0x01))
                        live_sent[0] += 2

    caps = capture(targets, a.capture, 3000, enough, live=live, mine={tx.port, ltx.port})
    valid = [p for p in caps if p.h]
    log(f"captured {len(caps)} datagrams ({len(valid)} parse as current headers); kinds "
        f"{sorted({p.kind for p in valid})}")
    if not valid:
        print("hostile: captured no datagram of the job (is it running over usnic?)", file=sys.stderr)
        return 2
    # Ports of modules that carry the job's traffic. A module without peers is not polled by
    # the plugin (its sockets are never read), so datagrams sent there could not be counted.
    active = sorted({p.dst for p in caps})
    idle = sorted(targets - set(active))
    if idle:
        log(f"idle ports (no job traffic seen, not attacked): {idle}")
    # The key of each rank (every datagram to its ports carries it) and its ports.
    key_of_pid = {}
    for p in valid:
        key_of_pid[pid_of[p.dst]] = p.key
    ports_of_key = {}
    for dst, pid in pid_of.items():
        if pid in key_of_pid:
            ports_of_key.setdefault(key_of_pid[pid], []).append(dst)
    extra = ""
    end = time.time() + a.seconds

    if a.attack == "garbage":
        over = 0
        for i in range(a.count):
            n = rng.choice([0, 1, 2, 31, 32, 33, 39, 40, 41, 47, 48, 49, 63, 64, 65, 79, 80, 81,
                            rng.randrange(0, 1400)])
            d = bytearray(rng.randbytes(n))
            if n and i % 2:
                # starts like a current header (version, a kind, flags and tag mostly clear): goes
                # further through parse; an old version byte (1 to 4) now and then (rejected
                # too)
                d[0] = VERSION if i % 10 != 1 else 1 + (i // 10) % 4
                if n > 1:
                    d[1] = rng.randrange(0, 10)
                if n > 3 and i % 4 == 1:
                    d[2] = rng.choice([0, 1, 5])
                    d[3] = 0
            tx.send(rng.choice(active), bytes(d))
        # Longer than the channel MTU (the provider truncates these; the edge must drop them).
        for n in [1373, 1500, 9000, 65507]:
            for dst in active:
                tx.send(dst, rng.randbytes(n))
                over += 1
        extra = f"oversize={over}"
    elif a.attack == "truncated":
        samples = {}
        for p in valid:
            samples.setdefault(p.kind, []).append(p)
        for kind, ps in samples.items():
            for p in ps[:3]:
                # every header length, and payloads cut at a few places (64 KiB datagrams on
                # lo would otherwise mean 64 Ki sends per sample)
                full = min(HLEN[kind] + p.plen, len(p.data))
                h, pl = HLEN[kind], p.plen
                cuts = set(range(0, min(h, full))) | {
                    n for n in (h, h + 1, h + 2, h + pl // 2, h + pl - 2, h + pl - 1) if h <= n < full}
                for n in sorted(cuts):
                    tx.send(p.dst, p.data[:n])
        # Headers of the 80-byte kinds (PUT/GET are not in the traffic): made from a captured
        # sequenced header (tx 0, like putget's forgeries), cut at every length.
        base = next(p for p in valid if p.kind in SEQUENCED)
        for kind in (4, 5):
            d = with_header(base, kind=kind, tag=0, plen=0, tx=0)[:BASE] + \
                MSG.pack(7, 64, 0, 0) + REGION.pack(1, 0)
            assert len(d) == HLEN[kind]
            for n in range(0, HLEN[kind]):
                tx.send(base.dst, d[:n])
    elif a.attack == "wrongkey":
        keys = list(key_of_pid.values())
        for p in valid:
            for k in [rng.getrandbits(64), 0, p.key ^ 1] + [k for k in keys if k != p.key]:
                if k != p.key:
                    tx.send(p.dst, with_header(p, key=k))
    elif a.attack == "replay":
        rounds = 0
        kinds = {int(k) for k in a.kinds.split(",") if k}
        old = [p for p in valid if not kinds or p.kind in kinds]
        seq = sum(1 for p in old if p.kind in SEQUENCED)
        # Drops counted where the sequenced copies go: the ACK sockets' drops are not theirs.
        hit = {p.dst for p in old if p.kind in SEQUENCED}
        drops0 = drops = socket_drops(hit)
        while time.time() < end and all(os.path.exists(f"/proc/{pid}") for pid in pids):
            for p in old:
                tx.send(p.dst, p.data)
            rounds += 1
            time.sleep(a.interval)
            # read while the sockets exist (the job may end any moment)
            drops = max(drops, socket_drops(hit))
        extra = f"rounds={rounds} sequenced_per_round={seq} kernel_drops={drops - drops0}"
    elif a.attack == "chunk":
        chunks = [p for p in valid if p.kind == 3 and p.plen > 0]
        if not chunks:
            print("hostile: no Chunk datagram captured (the target sends no large message?)",
                  file=sys.stderr)
            return 2
        consistent = 0
        for p in chunks[:200]:
            pid_, total, off, _ = MSG.unpack_from(p.data, MSG_AT)
            n = p.plen
            muts = [
                with_msg(p.data, offset=total - n + 1),
                with_msg(p.data, offset=total),
                with_msg(p.data, offset=0xFFFFFFFF - n // 2),
                with_msg(p.data, offset=0, total=max(n - 1, 1)),
                with_msg(p.data, total=(64 << 20) + 1),
                with_msg(p.data, total=0),
                with_msg(p.data, id=0),
                with_header(p, plen=n + 1),
                with_header(p, plen=0xFFFF),
            ]
            # The same as GetReply (tag 0): no GET is outstanding, and it overruns anyway.
            muts += [with_header(Pkt(p.dst, m, 0), kind=6, tag=0) for m in muts[:5]]
            for m in muts:
                tx.send(p.dst, m)
            # Parses (offset + len <= total) but contradicts the fragment's real total (the
            # fragment is complete by now: dropped as a duplicate).
            tx.send(p.dst, with_msg(p.data, total=min(total * 2, 64 << 20)))
            consistent += 1
        consistent += live_sent[0]
        tx.n += ltx.n
        tx.errors += ltx.errors
        log(f"chunked fragment sizes seen: {sorted(totals)[:5]}..{sorted(totals)[-3:]}")
        extra = (f"consistent_mutations={consistent} live_mutations={live_sent[0]} "
                 f"chunks_used={min(len(chunks), 200)}")
    elif a.attack == "putget":
        # Per direction (sender id -> receiver key): the highest extended sequence number seen
        # (epoch << 16 | seq, compared as signed 32-bit differences like the receiver does),
        # so the forgeries below carry the live epoch and really land in the receive window.
        last = {}
        proto = {}
        for p in valid:
            if p.kind in SEQUENCED:
                d = (p.src, p.key)
                if d not in last or ((p.xseq - last[d]) & 0xFFFFFFFF) < 0x80000000:
                    last[d] = p.xseq
                    proto[d] = p
        in_window = 0
        bad_tags = 0
        for (src, key), s in sorted(last.items()):
            p = proto[(src, key)]
            dst = p.dst
            for k in range(40):
                region = rng.choice([0, 1, 0xFFFFFFFFFFFFFFFF, rng.getrandbits(64)])
                roff = rng.choice([0, 1 << 40, 0xFFFFFFFFFFFFFFFF - 4096, rng.getrandbits(48)])
                payload = rng.randbytes(512)
                seq = s + 2500 + 2 * k
                put = header(4, seq, src, key, len(payload)) + \
                    MSG.pack(rng.randrange(1, 1 << 32), 4096, 0, 0) + REGION.pack(region, roff) + payload
                get = header(5, seq + 1, src, key, 0) + \
                    MSG.pack(rng.randrange(1, 1 << 32), rng.choice([1, 4096, 1 << 20, 64 << 20]), 0, 0) + \
                    REGION.pack(region, roff)
                tx.send(dst, put)
                tx.send(dst, get)
                in_window += 2
                # Old sequence numbers (duplicates) and region_offset + total overflowing u64.
                tx.send(dst, header(4, s - 5, src, key, len(payload))
                        + MSG.pack(9, 4096, 0, 0) + REGION.pack(region, roff) + payload)
                tx.send(dst, header(5, s + 3000, src, key, 0)
                        + MSG.pack(9, 8192, 0, 0) + REGION.pack(region, 0xFFFFFFFFFFFFF000))
            # Fragments with tag 255, one past Open MPI's table of active-message callbacks
            # (MCA_BTL_TAG_MAX entries), and with 0x23, vader's private handler (it copies to an
            # address from the payload; this one names no operation it knows, so a plugin that
            # delivers it does no harm here, and the missing drop line shows it): they must be
            # dropped as having no callback.
            for k, tag in enumerate([255, 255, 0x23, 0x23]):
                body = struct.pack("<QQ", 0x10, 8) if tag == 0x23 else rng.randbytes(16)
                tx.send(dst, header(2, s + 2600 + k, src, key, 16, tag=tag) + body)
                bad_tags += 1
        extra = f"in_window={in_window} directions={len(last)} bad_tags={bad_tags}"
    elif a.attack == "flood":
        seqd = [p for p in valid if p.kind in SEQUENCED]
        acks = [p for p in valid if p.kind == 1]
        hit = {p.dst for p in seqd[:1]}  # the ACKs' socket's drops are not the copies'
        drops0 = socket_drops(hit)
        # The burst, then a tail at a pace the target reads: the burst overflows its socket
        # (it polls between 10 ms sleeps), and the job's own datagrams dropped meanwhile count
        # in the drops too; once those reached the burst's size (one CI run), no copy could be
        # shown to have reached the plugin. The tail's copies mostly do.
        tail = a.count // 4
        fl = Sender(pace=200)
        for pace, copies in ((200, a.count), (10, tail)):
            fl.pace = pace
            for i in range(copies):
                if seqd:
                    fl.send(seqd[0].dst, seqd[0].data)
                if acks and i % 4 == 0:
                    fl.send(acks[0].dst, acks[0].data)
        tx = fl
        # Give the job a moment to read what is queued, then see what never reached it: copies
        # beyond its socket buffer are dropped by the kernel before the plugin could count them.
        time.sleep(0.5)
        extra = (f"sequenced_copies={a.count + tail if seqd else 0} "
                 f"kernel_drops={socket_drops(hit) - drops0}")
    alive = all(os.path.exists(f"/proc/{pid}") for pid in pids)
    log(f"sent {tx.n} datagrams ({tx.errors} send errors); job still running: {alive}")
    print(f"HOSTILE {a.attack} sent={tx.n} captured={len(caps)} alive={int(alive)} {extra}".rstrip(),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
