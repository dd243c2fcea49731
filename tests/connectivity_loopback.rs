//! The connectivity agent/client pair on loopback, in one process: two agents stand for two
//! hosts (127.0.0.1 and 127.0.0.2 are both on `lo`).
use usnic_rs::ompi::connectivity;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use connectivity::agent::{Agent, AgentConfig, Hooks};
use connectivity::client::Client;
use connectivity::ipc::Ping;
use connectivity::Failure;

const A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

enum Event {
    Report(Failure),
    Abort,
    Log(u32, String),
}

struct Host {
    agent: Agent,
    client: Client,
    events: Receiver<Event>,
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usnic-cc-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn host(name: &str, ack_ms: u64, retries: u32, drop_large: bool) -> Host {
    host_within(name, ack_ms, retries, drop_large, Duration::from_secs(3600))
}

/// `host` whose failures are reported within `report_within` of their check's start.
fn host_within(
    name: &str,
    ack_ms: u64,
    retries: u32,
    drop_large: bool,
    report_within: Duration,
) -> Host {
    let (tx, rx) = channel();
    let (t1, t2, t3) = (tx.clone(), tx.clone(), tx);
    let hooks = Hooks {
        report: Box::new(move |f| {
            let _ = t1.send(Event::Report(f.clone()));
        }),
        abort: Box::new(move || {
            let _ = t2.send(Event::Abort);
        }),
        log: Box::new(move |lvl, m| {
            let _ = t3.send(Event::Log(lvl, m.to_string()));
        }),
    };
    let path = tmpdir(name).join(connectivity::SOCKET_NAME);
    let agent = Agent::start(
        AgentConfig {
            socket_path: path.clone(),
            hostname: name.into(),
            ack_timeout: Duration::from_millis(ack_ms),
            retries,
            report_within,
            drop_large_probes: drop_large,
        },
        hooks,
    )
    .unwrap();
    let client = Client::connect(&path, Duration::from_secs(5)).unwrap();
    Host {
        agent,
        client,
        events: rx,
    }
}

fn ping(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), large: u32, host: &str) -> Ping {
    Ping {
        src_ipv4: src.0,
        src_port: src.1,
        dst_ipv4: dst.0,
        dst_port: dst.1,
        large_size: large,
        dst_host: host.into(),
    }
}

/// Waits for the first report (with the abort that must follow it) or a GOOD log line.
fn outcome(h: &Host, within: Duration) -> Result<String, Box<Failure>> {
    let until = Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match h.events.recv_timeout(left).expect("no outcome in time") {
            Event::Report(f) => {
                match h.events.recv_timeout(Duration::from_secs(1)) {
                    Ok(Event::Abort) => {}
                    _ => panic!("report without abort"),
                }
                return Err(Box::new(f));
            }
            Event::Abort => panic!("abort without report"),
            Event::Log(20, m) if m.contains("GOOD") => return Ok(m),
            Event::Log(0, m) => panic!("unexpected error log: {m}"),
            Event::Log(..) => {}
        }
    }
}

fn help_file() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/help-mpi-btl-usnic-rs.txt"
    ))
    .unwrap()
}

#[test]
fn healthy_path_passes_once_per_pair() {
    let a = host("hosta", 50, 10, false);
    let b = host("hostb", 50, 10, false);
    let pa = a.client.listen(A, 1472).unwrap();
    let pb = b.client.listen(B, 1472).unwrap();
    // A second LISTEN of the same address reuses the listener.
    assert_eq!(a.client.listen(A, 1472).unwrap(), pa);
    a.client
        .ping(ping((A, pa), (B, pb), 1472, "hostb"))
        .unwrap();
    // Same path again (another rank of host A): de-duplicated, no second probe round.
    a.client
        .ping(ping((A, pa), (B, pb), 1472, "hostb"))
        .unwrap();
    let good = outcome(&a, Duration::from_secs(5)).unwrap();
    assert!(
        good.contains("hosta lo 127.0.0.1 and hostb 127.0.0.2"),
        "{good}"
    );
    assert!(good.contains("sizes 40 and 1472, 1 send(s)"), "{good}");
    // Nothing else happens: no second GOOD, no report, on either side.
    std::thread::sleep(Duration::from_millis(300));
    for h in [&a, &b] {
        for e in h.events.try_iter() {
            match e {
                Event::Log(_, m) if !m.contains("GOOD") && !m.contains("listening") => {
                    panic!("unexpected log {m}")
                }
                Event::Log(_, m) if m.contains("GOOD") => panic!("checked twice: {m}"),
                Event::Report(f) => panic!("unexpected failure {f:?}"),
                Event::Abort => panic!("unexpected abort"),
                Event::Log(..) => {}
            }
        }
    }
    a.agent.stop();
    b.agent.stop();
}

#[test]
fn silent_peer_fails_small_bad_large_bad_in_time() {
    let a = host("hosta2", 50, 6, false);
    let pa = a.client.listen(A, 1472).unwrap();
    // Bound but never read: no ICMP port-unreachable, the probes just vanish.
    let silent = UdpSocket::bind((B, 0)).unwrap();
    let ps = silent.local_addr().unwrap().port();
    let t0 = Instant::now();
    a.client
        .ping(ping((A, pa), (B, ps), 1472, "hostz"))
        .unwrap();
    let f = outcome(&a, Duration::from_secs(5)).unwrap_err();
    let took = t0.elapsed();
    // 6 sends 50 ms apart, declared bad 50 ms after the last: 300 ms.
    assert!(took >= Duration::from_millis(280), "{took:?}");
    assert!(took < Duration::from_millis(1000), "{took:?}");
    assert_eq!(f.topic(), "connectivity error: small bad, large bad");
    let text = connectivity::render_help(&help_file(), f.topic(), &f.params()).unwrap();
    let expected = String::from(
        "The usnic connectivity checker could not get any UDP datagram to the
peer below and back. Likely causes: a firewall dropping UDP, no route
between the two interfaces, or asymmetric routing so that replies come
from an unexpected address. The MPI job will be aborted.

  Local host:      hosta2
  Local interface: lo (127.0.0.1/8)
  Remote host:     hostz
  Remote address:  127.0.0.2
  Small size:      40 bytes
  Large size:      1472 bytes
",
    );
    assert_eq!(text, expected);
    // The silent socket really got the probes (6 small + 6 large): the loss is on the answer side.
    silent.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let mut sizes = Vec::new();
    while let Ok((n, _)) = silent.recv_from(&mut buf) {
        sizes.push(n);
    }
    assert_eq!(sizes.iter().filter(|&&n| n == 40).count(), 6, "{sizes:?}");
    assert_eq!(sizes.iter().filter(|&&n| n == 1472).count(), 6, "{sizes:?}");
    drop(silent);
}

/// The agent with the higher address of a path waits before reporting its failure (the lower
/// end, which meets the same break, reports it first), but not past `report_within`: with the
/// defaults it reported 30 s after the check began, after the BTL's 20 s peer timeout had ended
/// the job naming a dead peer instead of the broken path.
#[test]
fn the_higher_end_waits_but_reports_within_its_bound() {
    let silent = UdpSocket::bind((A, 0)).unwrap();
    let ps = silent.local_addr().unwrap().port();
    // Unbounded: 300 ms of probing, then as long again plus the stagger (10 s).
    let late = host("hostb8", 50, 6, false);
    let pl = late.client.listen(B, 1472).unwrap();
    late.client
        .ping(ping((B, pl), (A, ps), 1472, "hosta8"))
        .unwrap();
    let until = Instant::now() + Duration::from_millis(1500);
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match late.events.recv_timeout(left) {
            Ok(Event::Report(_) | Event::Abort) => {
                panic!("the higher end reported without waiting")
            }
            Ok(Event::Log(..)) => {}
            Err(_) => break,
        }
    }
    // Bound to 1 s: the wait after the probing is cut to end by then.
    let b = host_within("hostb9", 50, 6, false, Duration::from_secs(1));
    let pb = b.client.listen(B, 1472).unwrap();
    let t0 = Instant::now();
    b.client
        .ping(ping((B, pb), (A, ps), 1472, "hosta9"))
        .unwrap();
    let f = outcome(&b, Duration::from_secs(5)).unwrap_err();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(950), "{took:?}");
    assert!(took < Duration::from_millis(2000), "{took:?}");
    assert_eq!(f.topic(), "connectivity error: small bad, large bad");
    drop(silent);
}

#[test]
fn dropped_large_probes_give_small_ok_large_bad() {
    let a = host("hosta3", 40, 5, false);
    let b = host("hostb3", 40, 5, true);
    let pa = a.client.listen(A, 9000).unwrap();
    let pb = b.client.listen(B, 9000).unwrap();
    a.client
        .ping(ping((A, pa), (B, pb), 9000, "hostb3"))
        .unwrap();
    let f = outcome(&a, Duration::from_secs(5)).unwrap_err();
    assert_eq!(f.topic(), "connectivity error: small ok, large bad");
    assert_eq!((f.small_size, f.large_size), (40, 9000));
    assert_eq!(f.remote_address, B);
    let text = connectivity::render_help(&help_file(), f.topic(), &f.params()).unwrap();
    assert!(
        text.contains("  Local interface: lo (127.0.0.1/8)\n"),
        "{text}"
    );
    assert!(
        text.contains("  Small size:      40 bytes (got through)\n"),
        "{text}"
    );
    assert!(
        text.contains("  Large size:      9000 bytes (did not)\n"),
        "{text}"
    );
    // The other direction through the same agents works for small and large alike when the
    // dropping agent is the originator (A answers everything).
    b.client
        .ping(ping((B, pb), (A, pa), 9000, "hosta3"))
        .unwrap();
    assert!(outcome(&b, Duration::from_secs(5)).is_ok());
}

#[test]
fn probe_size_is_clamped_to_the_udp_maximum() {
    // A size above what one IPv4 UDP datagram can carry is clamped to 65507, which lo's 65536
    // MTU passes with don't-fragment set. (A path whose MTU is below the probe, where DF makes
    // the probe fail, is exercised across namespaces by tests/connectivity/netns.sh.)
    let a = host("hosta4", 30, 3, false);
    let b = host("hostb4", 30, 3, false);
    let pa = a.client.listen(A, 70000).unwrap();
    let pb = b.client.listen(B, 70000).unwrap();
    a.client
        .ping(ping((A, pa), (B, pb), 70000, "hostb4"))
        .unwrap();
    let good = outcome(&a, Duration::from_secs(5)).unwrap();
    assert!(good.contains("sizes 40 and 65507"), "{good}");
}

#[test]
fn wrong_protocol_version_is_refused_and_bad_requests_drop_the_client() {
    let a = host("hosta5", 50, 3, false);
    let path = a.agent.socket_path().to_path_buf();
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = connectivity::ipc::hello();
    hello[16] ^= 0xff;
    s.write_all(&hello).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(
        s.read(&mut b).unwrap(),
        0,
        "agent must close on a version mismatch"
    );
    // A greeted client sending garbage is dropped, and the agent keeps serving others.
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&connectivity::ipc::hello()).unwrap();
    let mut back = [0u8; connectivity::ipc::HELLO_LEN];
    s.read_exact(&mut back).unwrap();
    s.write_all(&[77, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    assert_eq!(s.read(&mut b).unwrap(), 0);
    assert!(a.client.listen(A, 1472).is_ok());
    // A check from an address with no listener is refused with a log line, not a crash.
    a.client.ping(ping((A, 1), (B, 2), 1472, "x")).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let mut saw = false;
    while let Ok(e) = a
        .events
        .recv_timeout(until.saturating_duration_since(Instant::now()))
    {
        if let Event::Log(0, m) = e {
            if m.contains("no listener there") {
                saw = true;
                break;
            }
        }
    }
    assert!(saw);
}

#[test]
fn client_waits_for_a_late_agent_and_gives_up_on_none() {
    let dir = tmpdir("late");
    let path = dir.join(connectivity::SOCKET_NAME);
    let _ = std::fs::remove_file(&path);
    let t0 = Instant::now();
    assert!(Client::connect(&path, Duration::from_millis(200)).is_err());
    assert!(t0.elapsed() >= Duration::from_millis(200));
    let p2 = path.clone();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        Agent::start(
            AgentConfig {
                socket_path: p2,
                hostname: "late".into(),
                ack_timeout: Duration::from_millis(50),
                retries: 3,
                report_within: Duration::from_secs(3600),
                drop_large_probes: false,
            },
            Hooks {
                report: Box::new(|_| {}),
                abort: Box::new(|| {}),
                log: Box::new(|_, _| {}),
            },
        )
        .unwrap()
    });
    let c = Client::connect(&path, Duration::from_secs(5)).unwrap();
    let agent = starter.join().unwrap();
    assert!(c.listen(A, 1472).unwrap() > 0);
    agent.stop();
    assert!(!path.exists(), "stop removes the socket");
}

#[test]
fn requests_to_a_stopped_agent_fail_without_killing_the_process() {
    let a = host("hosta6", 50, 3, false);
    a.client.listen(A, 1472).unwrap();
    a.agent.stop();
    // Open MPI processes keep SIGPIPE's default action (terminate), unlike Rust's test harness,
    // which ignores it: restore the default so a plain write() would end this binary.
    // SAFETY: setting a signal disposition to SIG_DFL installs no handler code.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let mut failed = false;
    for _ in 0..50 {
        if a.client.ping(ping((A, 1), (B, 2), 1472, "gone")).is_err() {
            failed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(failed, "writes to a closed agent socket never failed");
    assert!(a.client.listen(A, 1472).is_err());
}
