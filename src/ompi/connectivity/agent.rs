//! The per-host agent: one thread, one poll loop over its UNIX socket, its clients, its UDP
//! listeners and a wake-up socket for stop.
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ipc::{self, Msg};
use super::wire::{Header, Kind, HEADER_LEN};
use super::{sys, Failure, SMALL_SIZE};

/// Largest UDP payload over IPv4; a larger probe size is clamped (and would fail anyway).
const MAX_UDP_PAYLOAD: u32 = 65507;
/// How much later than the peer's agent the agent with the higher address of a path reports
/// its failure, beyond the peer's own probing time: most breaks (a firewall, a switch port MTU)
/// fail both agents' round trips at about the same moment, and two texts describing one broken
/// path from both ends are one too many. The lower end reports and aborts; mpirun takes a few
/// seconds to end the other processes (measured across two netns hosts on a loaded machine: 3 to
/// 8 s). When the lower end did not fail (the break is in one direction and size only) or
/// never checked the path (it never sent to this peer), the higher end still reports, this
/// much later, but within `AgentConfig::report_within`.
pub const REPORT_STAGGER: Duration = Duration::from_secs(10);

/// Datagrams read from one listener per poll round.
const READS_PER_POLL: usize = 64;

#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Where to bind the UNIX socket (in use already: `AddrInUse`, another process's agent).
    pub socket_path: PathBuf,
    /// This host's name, for messages.
    pub hostname: String,
    /// Resend period of unanswered probes.
    pub ack_timeout: Duration,
    /// Sends of a probe before the path is declared bad (at least 1).
    pub retries: u32,
    /// A failed path is reported at most this long after its check began, staggered or not:
    /// the BTL's peer timeout would otherwise end the job first, naming a dead peer instead of
    /// the broken path (with the defaults, 2 x 10 s of probing plus the stagger came after
    /// its 20 s).
    pub report_within: Duration,
    /// Test hook: answer only small probes, as a path with a too-small MTU would.
    pub drop_large_probes: bool,
}

/// A log sink: verbosity level (0 = always shown) and the line.
pub type LogFn = Box<dyn Fn(u32, &str) + Send>;

/// What the edge lets the agent do to the outside world.
pub struct Hooks {
    /// Print the help message of a failed path (called once per path).
    pub report: Box<dyn Fn(&Failure) + Send>,
    /// Stop the job (called right after `report`). May not return.
    pub abort: Box<dyn Fn() + Send>,
    /// A log line at a verbosity level (0 = always shown).
    pub log: LogFn,
}

/// The running agent; stops (and removes its socket) when stopped or dropped.
pub struct Agent {
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Agent {
    /// Binds the UNIX socket and starts the thread. Clients can connect when this returns.
    pub fn start(cfg: AgentConfig, hooks: Hooks) -> io::Result<Agent> {
        if let Some(dir) = cfg.socket_path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Not removed first: an existing socket is another process's agent (`AddrInUse`).
        let listener = UnixListener::bind(&cfg.socket_path)?;
        listener.set_nonblocking(true)?;
        let (wake, wake_rx) = UnixStream::pair()?;
        let path = cfg.socket_path.clone();
        let thread = std::thread::Builder::new()
            .name("usnic-cagent".into())
            .spawn(move || {
                let log_panic = |hooks: &Hooks| {
                    (hooks.log)(0, "connectivity agent stopped by an internal error (panic)")
                };
                let mut state = State::new(cfg, hooks, listener, wake_rx);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.run()));
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => (state.hooks.log)(0, &format!("connectivity agent stopped: {e}")),
                    Err(_) => log_panic(&state.hooks),
                }
            })?;
        Ok(Agent {
            wake,
            thread: Some(thread),
            path,
        })
    }

    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Stops the thread and removes the socket file. Pending checks are dropped silently (the
    /// job is ending; a peer agent that stopped first is not a connectivity fault).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = sys::NoSigPipe(&self.wake).write_all(&[1]);
            let _ = t.join();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Listener {
    sock: UdpSocket,
    ipv4: Ipv4Addr,
    port: u16,
    interface: String,
    prefix: u32,
}

struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    greeted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PathKey {
    src: SocketAddrV4,
    dst: SocketAddrV4,
}

struct Check {
    listener: usize,
    dst_host: String,
    large: u32,
    small_ok: bool,
    large_ok: bool,
    sends: u32,
    deadline: Instant,
    /// None while probing; Some(passed) once decided (kept so a path is checked once per host).
    outcome: Option<bool>,
    /// Out of retries and waiting [`REPORT_STAGGER`] before reporting.
    staggered: bool,
    send_error: Option<String>,
}

struct State {
    cfg: AgentConfig,
    hooks: Hooks,
    unix: UnixListener,
    wake: UnixStream,
    listeners: Vec<Listener>,
    conns: Vec<Conn>,
    checks: HashMap<PathKey, Check>,
    buf: Vec<u8>,
}

impl State {
    fn new(cfg: AgentConfig, hooks: Hooks, unix: UnixListener, wake: UnixStream) -> State {
        State {
            cfg,
            hooks,
            unix,
            wake,
            listeners: Vec::new(),
            conns: Vec::new(),
            checks: HashMap::new(),
            buf: vec![0u8; 65536],
        }
    }

    fn log(&self, level: u32, msg: &str) {
        (self.hooks.log)(level, msg);
    }

    fn run(&mut self) -> io::Result<()> {
        loop {
            let mut fds = vec![self.wake.as_raw_fd(), self.unix.as_raw_fd()];
            fds.extend(self.listeners.iter().map(|l| l.sock.as_raw_fd()));
            fds.extend(self.conns.iter().map(|c| c.stream.as_raw_fd()));
            let now = Instant::now();
            let next = self
                .checks
                .values()
                .filter(|c| c.outcome.is_none())
                .map(|c| c.deadline)
                .min();
            // Rounded up: rounded down, the last millisecond before a deadline polled with 0,
            // a busy loop on a host whose cores the ranks need.
            let timeout_ms = match next {
                Some(d) => d
                    .saturating_duration_since(now)
                    .as_micros()
                    .div_ceil(1000)
                    .min(1000) as i32,
                None => 1000,
            };
            let ready = sys::poll_readable(&fds, timeout_ms)?;
            if ready[0] {
                return Ok(());
            }
            // Only connections that were polled are served this round (accept adds more).
            let nc = self.conns.len();
            if ready[1] {
                self.accept();
            }
            let nl = self.listeners.len();
            for i in 0..nl {
                if ready[2 + i] {
                    self.receive_udp(i);
                }
            }
            // Walk connections from the back so removal keeps earlier indexes valid.
            for i in (0..nc).rev() {
                if ready[2 + nl + i] && !self.serve(i) {
                    self.conns.swap_remove(i);
                }
            }
            self.expire(Instant::now());
        }
    }

    fn accept(&mut self) {
        loop {
            match self.unix.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        self.conns.push(Conn {
                            stream,
                            buf: Vec::new(),
                            greeted: false,
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }

    /// Reads what a client sent and acts on every complete frame; false = drop the client.
    fn serve(&mut self, i: usize) -> bool {
        let mut chunk = [0u8; 1024];
        loop {
            match self.conns[i].stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.conns[i].buf.extend_from_slice(&chunk[..n]);
                    if self.conns[i].buf.len() > 64 * 1024 {
                        self.log(0, "connectivity agent: a client floods its socket; dropped");
                        return false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        if !self.conns[i].greeted {
            if self.conns[i].buf.len() < ipc::HELLO_LEN {
                return true;
            }
            let hello = ipc::hello();
            if self.conns[i].buf[..ipc::HELLO_LEN] != hello {
                self.log(
                    0,
                    "connectivity agent: a client speaks another protocol version; dropped",
                );
                return false;
            }
            self.conns[i].buf.drain(..ipc::HELLO_LEN);
            self.conns[i].greeted = true;
            if sys::NoSigPipe(&self.conns[i].stream)
                .write_all(&hello)
                .is_err()
            {
                return false;
            }
        }
        loop {
            let msg = match Msg::take(&mut self.conns[i].buf) {
                Ok(Some(m)) => m,
                Ok(None) => return true,
                Err(e) => {
                    self.log(
                        0,
                        &format!("connectivity agent: bad request ({e}); client dropped"),
                    );
                    return false;
                }
            };
            match msg {
                Msg::Listen(l) => {
                    let result = self
                        .listen(l.ipv4)
                        .map_err(|e| e.raw_os_error().unwrap_or(1));
                    let reply = Msg::ListenReply(ipc::ListenReply {
                        ipv4: l.ipv4,
                        result,
                    });
                    // The reply is 18 bytes into an otherwise idle socket: it does not block.
                    if ipc::write_frame(&mut sys::NoSigPipe(&self.conns[i].stream), &reply).is_err()
                    {
                        return false;
                    }
                }
                Msg::Ping(p) => self.start_check(p),
                Msg::ListenReply(_) => return false,
            }
        }
    }

    /// The port of the listener on `ipv4`, creating it on first request.
    fn listen(&mut self, ipv4: Ipv4Addr) -> io::Result<u16> {
        if let Some(l) = self.listeners.iter().find(|l| l.ipv4 == ipv4) {
            return Ok(l.port);
        }
        let sock = UdpSocket::bind(SocketAddrV4::new(ipv4, 0))?;
        sys::set_dont_fragment(sock.as_raw_fd())?;
        sock.set_nonblocking(true)?;
        let port = sock.local_addr()?.port();
        let (interface, prefix) = sys::interface_of(ipv4).unwrap_or_else(|| ("?".into(), 32));
        self.log(
            30,
            &format!("connectivity agent: listening on {interface} {ipv4}:{port}"),
        );
        self.listeners.push(Listener {
            sock,
            ipv4,
            port,
            interface,
            prefix,
        });
        Ok(port)
    }

    fn start_check(&mut self, p: ipc::Ping) {
        let src = SocketAddrV4::new(p.src_ipv4, p.src_port);
        let dst = SocketAddrV4::new(p.dst_ipv4, p.dst_port);
        let key = PathKey { src, dst };
        if self.checks.contains_key(&key) {
            return;
        }
        let Some(listener) = self
            .listeners
            .iter()
            .position(|l| SocketAddrV4::new(l.ipv4, l.port) == src)
        else {
            self.log(
                0,
                &format!("connectivity agent: check from {src} requested, but no listener there; ignored"),
            );
            return;
        };
        let large = p.large_size.clamp(SMALL_SIZE, MAX_UDP_PAYLOAD);
        self.checks.insert(
            key,
            Check {
                listener,
                dst_host: p.dst_host,
                large,
                small_ok: false,
                large_ok: large == SMALL_SIZE,
                sends: 0,
                deadline: Instant::now(),
                outcome: None,
                staggered: false,
                send_error: None,
            },
        );
        self.send_probes(key);
    }

    fn send_probes(&mut self, key: PathKey) {
        let Some(c) = self.checks.get_mut(&key) else {
            return;
        };
        c.sends += 1;
        c.deadline = Instant::now() + self.cfg.ack_timeout;
        let l = &self.listeners[c.listener];
        let mut sizes = Vec::with_capacity(2);
        if !c.small_ok {
            sizes.push(SMALL_SIZE);
        }
        if !c.large_ok {
            sizes.push(c.large);
        }
        // The report names this round's error, not one an earlier round met and this one did not
        // (a route that was not up yet).
        c.send_error = None;
        for size in sizes {
            let h = Header {
                kind: Kind::Ping,
                src_ipv4: l.ipv4,
                src_port: l.port,
                size,
                attempt: c.sends,
            };
            if let Err(e) = l.sock.send_to(&h.encode(size as usize), key.dst) {
                // Every send error counts as a lost probe: EMSGSIZE (local MTU too small), EPERM
                // (local firewall), unreachable network are exactly what the check is for.
                c.send_error = Some(format!("sending {size} bytes to {}: {e}", key.dst));
            }
        }
    }

    fn receive_udp(&mut self, i: usize) {
        // Bounded, so a flood of datagrams cannot keep the agent from its clients and timers:
        // the socket stays readable and the next poll comes back to it.
        for _ in 0..READS_PER_POLL {
            let (n, from) = match self.listeners[i].sock.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // WouldBlock, or an ICMP error queued on the socket: nothing more to read now.
                Err(_) => return,
            };
            let SocketAddr::V4(from) = from else { continue };
            let h = match Header::decode(&self.buf[..n]) {
                Ok(h) => h,
                Err(e) => {
                    self.log(
                        20,
                        &format!("connectivity agent: ignored a datagram from {from}: {e}"),
                    );
                    continue;
                }
            };
            match h.kind {
                Kind::Ping => self.answer(i, from, h),
                Kind::Ack => self.acked(i, from, h),
            }
        }
    }

    fn answer(&mut self, i: usize, from: SocketAddrV4, h: Header) {
        if *from.ip() != h.src_ipv4 {
            // Asymmetric routing: the peer's ACK matching would fail anyway; let its check say so.
            self.log(
                20,
                &format!(
                    "connectivity agent: probe claiming {} arrived from {from}; not answered",
                    h.src_ipv4
                ),
            );
            return;
        }
        if self.cfg.drop_large_probes && h.size > SMALL_SIZE {
            return;
        }
        let ack = Header {
            kind: Kind::Ack,
            ..h
        }
        .encode(HEADER_LEN);
        let _ = self.listeners[i].sock.send_to(&ack, from);
    }

    fn acked(&mut self, i: usize, from: SocketAddrV4, h: Header) {
        let l = &self.listeners[i];
        let key = PathKey {
            src: SocketAddrV4::new(l.ipv4, l.port),
            dst: from,
        };
        let Some(c) = self.checks.get_mut(&key) else {
            return;
        };
        if c.outcome.is_some() {
            return;
        }
        if h.size == SMALL_SIZE {
            c.small_ok = true;
        }
        if h.size == c.large {
            c.large_ok = true;
        }
        if c.small_ok && c.large_ok {
            c.outcome = Some(true);
            let msg = format!(
                "usnic connectivity GOOD between {} {} {} and {} {} (sizes {} and {}, {} send(s))",
                self.cfg.hostname,
                l.interface,
                l.ipv4,
                c.dst_host,
                from.ip(),
                SMALL_SIZE,
                c.large,
                c.sends
            );
            self.log(20, &msg);
        }
    }

    fn expire(&mut self, now: Instant) {
        let due: Vec<PathKey> = self
            .checks
            .iter()
            .filter(|(_, c)| c.outcome.is_none() && c.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let c = &self.checks[&key];
            if c.sends < self.cfg.retries.max(1) {
                self.send_probes(key);
                continue;
            }
            if !c.staggered && u32::from(*key.src.ip()) > u32::from(*key.dst.ip()) {
                if let Some(c) = self.checks.get_mut(&key) {
                    c.staggered = true;
                    // Out of retries now, so the check began a probing time ago.
                    let probing = self.cfg.ack_timeout * self.cfg.retries;
                    let wait = (probing + REPORT_STAGGER)
                        .min(self.cfg.report_within.saturating_sub(probing));
                    c.deadline = now + wait;
                }
                continue;
            }
            let l = &self.listeners[c.listener];
            let failure = Failure {
                local_host: self.cfg.hostname.clone(),
                local_interface: l.interface.clone(),
                local_address: format!("{}/{}", l.ipv4, l.prefix),
                remote_host: c.dst_host.clone(),
                remote_address: *key.dst.ip(),
                remote_port: key.dst.port(),
                small_size: SMALL_SIZE,
                large_size: c.large,
                small_ok: c.small_ok,
                large_ok: c.large_ok,
                send_error: c.send_error.clone(),
            };
            if let Some(c) = self.checks.get_mut(&key) {
                c.outcome = Some(false);
            }
            (self.hooks.report)(&failure);
            (self.hooks.abort)();
        }
    }
}
