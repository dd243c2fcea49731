//! What the Open MPI edge calls: start at component init, a listener port per module for the
//! modex, a [`PathCheck`] per endpoint (requested on its first send), stop at close. Open MPI
//! facts come in as plain values (the launcher's environment for local rank and session dir).
use std::cell::Cell;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::agent::{Agent, AgentConfig, Hooks};
use super::client::Client;
use super::ipc::Ping;
use super::{render_help, Failure, SOCKET_NAME};
use crate::ompi::log;

/// The help texts as built, so the message never depends on where the file was installed.
const HELP: &str = include_str!("../../../help-mpi-btl-usnic-rs.txt");
/// How long a process waits for the agent's socket to accept (it is bound and listened on in one
/// step by whichever process gets there first; this covers the instant between the two).
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// The longest path a UNIX socket address holds (`sun_path`, 108 bytes with its NUL).
const SUN_PATH_MAX: usize = 107;
const RULE: &str = "--------------------------------------------------------------------------";

struct Checker {
    /// Only in the local process that bound the socket first.
    agent: Option<Agent>,
    client: Client,
    /// The session directory, open, where its own path is too long for a socket address: the
    /// socket is then named through `/proc/self/fd/<fd>/`, which needs the descriptor.
    _dir: Option<std::fs::File>,
}

static CHECKER: Mutex<Option<Checker>> = Mutex::new(None);

fn checker() -> std::sync::MutexGuard<'static, Option<Checker>> {
    CHECKER.lock().unwrap_or_else(|p| p.into_inner())
}

/// The settings the edge passes at init.
pub struct Setup<'a> {
    pub enabled: bool,
    pub ack_timeout_ms: u32,
    pub retries: u32,
    /// `btl_usnic_peer_timeout`: a failed path is reported well before it ends the job.
    pub peer_timeout_ms: u64,
    pub hostname: &'a str,
    pub jobid: u32,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`.
    pub local_rank: Option<u32>,
    /// A directory private to this job on this host, shared by its local processes.
    pub session_dir: Option<PathBuf>,
}

impl Setup<'_> {
    /// Local rank and session directory from what mpirun's launcher puts in the environment
    /// (`OMPI_FILE_LOCATION` is the same directory for every local process of a job and names
    /// the host, so hosts sharing /tmp do not collide).
    pub fn from_env(mut self) -> Self {
        self.local_rank = std::env::var("OMPI_COMM_WORLD_LOCAL_RANK")
            .ok()
            .and_then(|v| v.trim().parse().ok());
        self.session_dir = std::env::var_os("OMPI_FILE_LOCATION").map(PathBuf::from);
        self
    }
}

/// Starts the agent (in the first local process to get here) and connects this process to it.
/// False: no checker (disabled, not launched by mpirun, or the agent unreachable, which is said
/// once).
pub fn start(s: Setup<'_>) -> bool {
    if !s.enabled {
        return false;
    }
    let (Some(_), Some(dir)) = (s.local_rank, s.session_dir) else {
        log::verbose(5, || {
            "connectivity checker off: no local rank / session directory from the launcher"
                .to_string()
        });
        return false;
    };
    let name = format!("{SOCKET_NAME}.{}", s.jobid);
    let (path, dir_fd) = match socket_path(&dir, &name) {
        Ok(p) => p,
        Err(e) => {
            log::error(&format!(
                "the connectivity agent's socket cannot be named in {}: {e}; running without \
                 the connectivity checker",
                dir.display()
            ));
            return false;
        }
    };
    // Whichever local process binds the socket first runs the agent; the others find the
    // address in use and connect. (Local rank 0 ran it, and a rank 0 that reached MPI_Init
    // more than 10 s after its siblings left them without a checker, each saying so.) The
    // session directory belongs to this mpirun, so a file there is this job's.
    let cfg = AgentConfig {
        socket_path: path.clone(),
        hostname: s.hostname.to_string(),
        // 0 (the original resent on every pass) is the shortest wait the agent has.
        ack_timeout: Duration::from_millis(u64::from(s.ack_timeout_ms.max(1))),
        retries: s.retries.max(1),
        report_within: Duration::from_millis(s.peer_timeout_ms) * 3 / 4,
        drop_large_probes: false,
    };
    let agent = match Agent::start(cfg, hooks()) {
        Ok(a) => Some(a),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => None,
        Err(e) => {
            log::error(&format!(
                "cannot start the connectivity agent at {}: {e}; running without the \
                 connectivity checker",
                path.display()
            ));
            return false;
        }
    };
    match Client::connect(&path, CONNECT_WAIT) {
        Ok(client) => {
            *checker() = Some(Checker {
                agent,
                client,
                _dir: dir_fd,
            });
            true
        }
        Err(e) => {
            log::error(&format!("{e}; running without the connectivity checker"));
            false
        }
    }
}

/// The socket's path: `dir/name`, or where that is too long for a socket address (a long
/// TMPDIR or host name), `/proc/self/fd/<fd>/name` through `dir` held open.
fn socket_path(
    dir: &std::path::Path,
    name: &str,
) -> std::io::Result<(PathBuf, Option<std::fs::File>)> {
    let plain = dir.join(name);
    if plain.as_os_str().len() <= SUN_PATH_MAX {
        return Ok((plain, None));
    }
    let d = std::fs::File::open(dir)?;
    let short = PathBuf::from(format!(
        "/proc/self/fd/{}/{name}",
        std::os::fd::AsRawFd::as_raw_fd(&d)
    ));
    Ok((short, Some(d)))
}

/// The agent's UDP port for a module on `ipv4` (0 = no checker for it).
pub fn listen(ipv4: Ipv4Addr, largest_datagram: u32) -> u16 {
    let g = checker();
    let Some(c) = g.as_ref() else { return 0 };
    match c.client.listen(ipv4, largest_datagram) {
        Ok(p) => p,
        Err(e) => {
            log::error(&format!(
                "the connectivity agent cannot listen on {ipv4}: {e}; paths from it are not checked"
            ));
            0
        }
    }
}

/// Component close: disconnect, and stop the agent if it is ours.
pub fn stop() {
    let taken = checker().take();
    if let Some(c) = taken {
        drop(c.client);
        if let Some(a) = c.agent {
            a.stop();
        }
    }
}

/// One endpoint's path, checked once on its first send.
pub struct PathCheck {
    ping: Option<Ping>,
    requested: Cell<bool>,
}

impl PathCheck {
    /// `local`/`remote`: interface address, checker port (0 = none), largest datagram.
    pub fn new(local: (Ipv4Addr, u16, u32), remote: (Ipv4Addr, u16, u32), host: &str) -> Self {
        let ping = (local.1 != 0 && remote.1 != 0).then(|| Ping {
            src_ipv4: local.0,
            src_port: local.1,
            dst_ipv4: remote.0,
            dst_port: remote.1,
            large_size: local.2.min(remote.2),
            dst_host: host.to_string(),
        });
        PathCheck {
            ping,
            requested: Cell::new(false),
        }
    }

    /// Cheap after the first call.
    pub fn request(&self) {
        if self.requested.replace(true) {
            return;
        }
        let Some(p) = &self.ping else { return };
        if let Some(c) = checker().as_ref() {
            if let Err(e) = c.client.ping(p.clone()) {
                log::verbose(5, || {
                    format!("connectivity check of {} not requested: {e}", p.dst_ipv4)
                });
            }
        }
    }
}

/// The framed help message, as Open MPI's show_help frames it, rendered from the copy of the
/// help file built into the plugin. It is written on the agent's thread, never through Open
/// MPI's show_help (the C original's agent called it from its own event thread): Open MPI's
/// output and help-file parser keep global state and lock it only under MPI_THREAD_MULTIPLE.
/// The process prints the text itself, so it is on stderr before the abort that follows: handed
/// to mpirun for aggregation instead, it was lost in half the runs (see the shim's
/// `usnic_shim_show_help`). Both agents of a broken path usually detect it; the one with the
/// higher address waits before reporting, so normally only one text appears (see `agent`).
pub fn message(f: &Failure) -> String {
    let body = render_help(HELP, f.topic(), &f.params())
        .unwrap_or_else(|| format!("{}: {:?}\n", f.topic(), f.params()));
    format!("{RULE}\n{body}{RULE}\n")
}

fn report(f: &Failure) {
    log::mark_own_thread();
    // One write so the lines of several processes do not interleave.
    let _ = std::io::stderr().write_all(message(f).as_bytes());
    if let Some(e) = &f.send_error {
        log::error(&format!(
            "connectivity check {} {} -> {} {}: last send error: {e}",
            f.local_host, f.local_interface, f.remote_host, f.remote_address
        ));
    }
}

fn hooks() -> Hooks {
    Hooks {
        report: Box::new(report),
        abort: Box::new(|| {
            let _ = std::io::stderr()
                .write_all(b"*** The Open MPI usnic BTL is aborting the MPI job (via exit(3)).\n");
            // SAFETY: _exit ends the process at once without running atexit handlers, which could
            // block on locks the MPI threads hold; stderr is unbuffered, so nothing is lost.
            unsafe { libc::_exit(1) }
        }),
        log: Box::new(|level, m| {
            log::mark_own_thread();
            if level == 0 {
                log::error(m);
            } else {
                log::verbose(level, || m.to_string());
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_directory_too_long_for_a_socket_address_is_named_through_its_descriptor() {
        // A long TMPDIR: the plain path passes 107 bytes, so bind would fail with "path must
        // be shorter than SUN_LEN" in every process.
        let long = std::env::temp_dir().join(format!(
            "usnic-cc-{}-{}",
            std::process::id(),
            "x".repeat(80)
        ));
        std::fs::create_dir_all(&long).unwrap();
        let name = format!("{SOCKET_NAME}.123456789");
        assert!(long.join(&name).as_os_str().len() > SUN_PATH_MAX);
        let (path, dir) = socket_path(&long, &name).unwrap();
        assert!(
            dir.is_some() && path.starts_with("/proc/self/fd/"),
            "{path:?}"
        );
        let cfg = |p: &std::path::Path| AgentConfig {
            socket_path: p.to_path_buf(),
            hostname: "h".into(),
            ack_timeout: Duration::from_millis(50),
            retries: 1,
            report_within: Duration::from_secs(1),
            drop_large_probes: false,
        };
        let quiet = || Hooks {
            report: Box::new(|_| {}),
            abort: Box::new(|| {}),
            log: Box::new(|_, _| {}),
        };
        let agent = Agent::start(cfg(&path), quiet()).unwrap();
        assert!(
            long.join(&name).exists(),
            "the socket is in the session directory"
        );
        Client::connect(&path, Duration::from_secs(2)).unwrap();
        // A second process finds the address in use and becomes a client (its own descriptor
        // names the same directory).
        let (again, _d2) = socket_path(&long, &name).unwrap();
        let e = Agent::start(cfg(&again), quiet())
            .err()
            .expect("address in use");
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        Client::connect(&again, Duration::from_secs(2)).unwrap();
        agent.stop();
        drop(dir);
        assert!(!long.join(&name).exists(), "removed at stop");
        std::fs::remove_dir_all(&long).unwrap();
        // A short one keeps its plain path.
        let (plain, none) = socket_path(&std::env::temp_dir(), &name).unwrap();
        assert!(none.is_none() && plain.starts_with(std::env::temp_dir()));
    }

    #[test]
    fn message_is_the_framed_topic_with_every_value() {
        let f = Failure {
            local_host: "h1".into(),
            local_interface: "veth0".into(),
            local_address: "10.77.0.1/24".into(),
            remote_host: "h2".into(),
            remote_address: Ipv4Addr::new(10, 77, 0, 2),
            remote_port: 4000,
            small_size: 40,
            large_size: 1472,
            small_ok: true,
            large_ok: false,
            send_error: Some("sending 1472 bytes to 10.77.0.2:4000: Message too long".into()),
        };
        let m = message(&f);
        assert!(m.starts_with(&format!(
            "{RULE}\nThe usnic connectivity checker found that small"
        )));
        for line in [
            "  Local host:      h1\n",
            "  Local interface: veth0 (10.77.0.1/24)\n",
            "  Remote host:     h2\n",
            "  Remote address:  10.77.0.2\n",
            "  Small size:      40 bytes (got through)\n",
            "  Large size:      1472 bytes (did not)\n",
        ] {
            assert!(m.contains(line), "{line:?} missing from\n{m}");
        }
        assert!(m.ends_with(&format!("to help find the faulty path.\n{RULE}\n")));
        assert!(!m.contains('%'));
    }

    #[test]
    fn a_path_without_ports_is_never_requested() {
        let none = PathCheck::new(
            (Ipv4Addr::LOCALHOST, 0, 1472),
            (Ipv4Addr::LOCALHOST, 9, 1472),
            "x",
        );
        assert!(none.ping.is_none());
        let some = PathCheck::new(
            (Ipv4Addr::new(10, 0, 0, 1), 7, 1472),
            (Ipv4Addr::new(10, 0, 0, 2), 9, 1172),
            "h2",
        );
        // The large probe is what the BTL sends on the path: the smaller end's datagram.
        assert_eq!(some.ping.as_ref().unwrap().large_size, 1172);
        // No checker running in this process: requesting is a no-op, and only the first counts.
        some.request();
        assert!(some.requested.get());
    }
}
