//! The plugin as Open MPI sees it: `ompi_info` listing and parameters, and small MPI jobs under
//! `mpirun --mca pml ob1 --mca btl usnic,self` (the freshly built library, not an installed
//! copy: each run points `mca_base_component_path` at a directory holding only a link to it).
//!
//! These need Open MPI's `ompi_info`, `mpicc` and `mpirun` (Debian: openmpi-bin,
//! libopenmpi-dev); their absence is a failure, not a skip.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// MPI jobs run one at a time (2 cores; the jobs busy-poll).
static SERIAL: Mutex<()> = Mutex::new(());

mod plugin_path;
use plugin_path::plugin_path;

/// A scratch directory with `mca_btl_usnic.so` -> the built plugin, and the test programs.
fn workdir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("usnic-rs-plugin-{}", std::process::id()));
        std::fs::create_dir_all(d.join("components")).unwrap();
        let link = d.join("components/mca_btl_usnic.so");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(plugin_path(), &link).unwrap();
        // The help file beside the plugin, as installed (the plugin finds it there).
        let help = d.join("components/help-mpi-btl-usnic-rs.txt");
        let _ = std::fs::remove_file(&help);
        std::os::unix::fs::symlink(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("help-mpi-btl-usnic-rs.txt"),
            &help,
        )
        .unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugin");
        for prog in [
            "pingpong",
            "stall",
            "compute",
            "threads",
            "idle",
            "pvars",
            "lentsend",
            "pvarthread",
            "late0",
            "spawnexit",
            "connect",
            "descown",
            "hold",
        ] {
            let mut cc = Command::new("mpicc");
            cc.args(["-O2", "-pthread"])
                .arg("-o")
                .arg(d.join(prog))
                .arg(src.join(format!("{prog}.c")));
            if prog == "descown" {
                // It calls the BTL itself: Open MPI's own headers (on mpicc's include path,
                // from libopenmpi-dev) and libopen-pal's symbols.
                cc.arg("-lopen-pal");
            }
            let st = cc
                .status()
                .expect("mpicc (libopenmpi-dev) must be installed");
            assert!(st.success(), "mpicc {prog}.c failed");
        }
        d
    })
}

fn component_path() -> String {
    let out = Command::new("ompi_info")
        .args(["--parsable", "--path", "pkglibdir"])
        .output()
        .expect("ompi_info (openmpi-bin) must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let sys = text
        .lines()
        .find_map(|l| l.strip_prefix("path:pkglibdir:"))
        .expect("ompi_info --path pkglibdir")
        .trim()
        .to_string();
    format!("{sys}:{}", workdir().join("components").display())
}

fn ompi(cmd: &str) -> Command {
    let mut c = Command::new(cmd);
    c.env("OMPI_MCA_mca_base_component_path", component_path())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env_remove("OMPI_MCA_btl");
    c
}

/// Run with a deadline; a hang is a failure with whatever was printed.
fn run(mut c: Command, limit: Duration) -> Output {
    use std::io::Read;
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let start = Instant::now();
    loop {
        if let Some(_st) = child.try_wait().unwrap() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let mut o = String::new();
            let mut e = String::new();
            let _ = child.stdout.take().unwrap().read_to_string(&mut o);
            let _ = child.stderr.take().unwrap().read_to_string(&mut e);
            let _ = child.wait();
            panic!("timed out after {limit:?}\nstdout:\n{o}\nstderr:\n{e}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mpirun(np: u32, extra: &[&str], prog: &[&str]) -> Output {
    let mut c = ompi("mpirun");
    c.args([
        "-np",
        &np.to_string(),
        "--oversubscribe",
        "--mca",
        "pml",
        "ob1",
    ]);
    c.args(extra);
    c.arg(workdir().join(prog[0]));
    c.args(&prog[1..]);
    run(c, Duration::from_secs(240))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// stdout and stderr of a run that must have exited 0 (both are shown when it did not).
/// A 2-rank pingpong over usnic,self,tcp with one usnic parameter set: how a bad or
/// unusable setting shows up while tcp still carries the job.
fn pingpong_beside_tcp(param: &str, value: &str) -> Output {
    mpirun(
        2,
        &["--mca", "btl", "usnic,self,tcp", "--mca", param, value],
        &["pingpong", "1024", "2"],
    )
}

fn succeeded(o: &Output) -> (String, String) {
    let (out, err) = text(o);
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    (out, err)
}

#[test]
fn ompi_info_lists_the_component() {
    let mut c = ompi("ompi_info");
    c.arg("--parsable");
    let o = run(c, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for v in ["mca:2.1.0", "api:3.1.0", "component:4.1.4"] {
        let line = format!("mca:btl:usnic:version:\"{v}\"");
        assert!(out.lines().any(|l| l == line), "missing {line}\n{out}");
    }
    // And the human-readable line users look for.
    let o = run(ompi("ompi_info"), Duration::from_secs(60));
    let (out, _) = text(&o);
    assert!(
        out.contains("MCA btl: usnic (MCA v2.1.0, API v3.1.0, Component v4.1.4)"),
        "{out}"
    );
}

#[test]
fn every_parameter_has_help() {
    let mut c = ompi("ompi_info");
    c.args(["--parsable", "--param", "btl", "usnic", "--level", "9"]);
    let o = run(c, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let expected = [
        ("if_include", ""),
        ("if_exclude", ""),
        ("max_btls", "0"),
        ("stats", "0"),
        ("stats_relative", "false"),
        ("sd_num", "-1"),
        ("rd_num", "-1"),
        ("prio_sd_num", "-1"),
        ("prio_rd_num", "-1"),
        ("cq_num", "-1"),
        ("av_eq_num", "1024"),
        ("base_udp_port", "0"),
        ("retrans_timeout", "5000"),
        ("max_resends_per_iteration", "16"),
        ("priority_limit", "0"),
        ("eager_limit", "0"),
        ("rndv_eager_limit", "0"),
        ("pack_lazy_threshold", "16384"),
        ("show_route_failures", "true"),
        ("connectivity_check", "true"),
        ("connectivity_ack_timeout", "250"),
        ("connectivity_error_num_retries", "40"),
        ("connectivity_map", ""),
        ("provider", "udp"),
        ("ack_delay", "30"),
        ("peer_timeout", "20000"),
        ("same_node", "true"),
        ("mtu", "0"),
        ("window", "4096"),
        ("verbose", "0"),
        ("ack_thread", "true"),
        ("rto_min", "0"),
        ("lent_hold", "1000"),
        ("lent_copy_limit", "65536"),
        ("rdma", "none"),
        ("fault_seed", "0"),
        ("fault_send_drop", "0.000000"),
        ("fault_send_dup", "0.000000"),
        ("fault_send_delay", "0.000000"),
        ("fault_recv_drop", "0.000000"),
        ("fault_recv_dup", "0.000000"),
        ("fault_delay_us", "1000"),
        ("fault_panic_after", "0"),
    ];
    for (name, value) in expected {
        let p = format!("mca:btl:usnic:param:btl_usnic_{name}:");
        let val = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{p}value:")))
            .unwrap_or_else(|| panic!("btl_usnic_{name} not listed"));
        assert_eq!(val.trim_matches('"'), value, "default of btl_usnic_{name}");
        let help = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{p}help:")))
            .unwrap_or_else(|| panic!("btl_usnic_{name} has no help"));
        assert!(help.len() > 20, "btl_usnic_{name}: help too short: {help}");
    }
    // What an admin reads in ompi_info to choose the provider, the interfaces and whether
    // same-node peers use this BTL, exactly.
    let documented = [
        (
            "provider",
            "libfabric provider offering FI_EP_DGRAM endpoints to use (udp everywhere, usnic on \
             Cisco VICs)",
        ),
        (
            "if_include",
            "Comma-delimited list of interface names (e.g. eth0) and/or CIDR subnets \
             (e.g. 10.10.0.0/16) to use; mutually exclusive with btl_usnic_if_exclude",
        ),
        (
            "if_exclude",
            "Comma-delimited list of interface names and/or CIDR subnets NOT to use; mutually \
             exclusive with btl_usnic_if_include",
        ),
        (
            "same_node",
            "Reach peers on the same node too (false = the original's rule: leave them to other \
             BTLs such as vader)",
        ),
    ];
    for (name, text) in documented {
        let line = format!("mca:btl:usnic:param:btl_usnic_{name}:help:{text}");
        assert!(out.lines().any(|l| l == line), "missing: {line}\n{out}");
    }
}

#[test]
fn pingpong_over_usnic_verifies_every_byte() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_stats",
            "1000",
        ],
        &["pingpong", "262144", "20"],
    );
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    // usnic carried it: self cannot reach the other rank, and on both ranks the final
    // statistics of a usnic module show sends and receives.
    let busy = per_rank(&err, |l| {
        !l.contains(" sends=0 ") && !l.contains(" recvs=0 ")
    });
    assert_eq!(busy, 2, "{err}");
}

#[test]
fn healthy_run_prints_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = mpirun(
        2,
        &["--mca", "btl", "usnic,self"],
        &["pingpong", "200000", "5"],
    );
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    // Neither our messages, nor tracing events, nor anything else.
    assert_eq!(err, "", "a healthy run printed on stderr");
    // Control: with btl_usnic_verbose the same run does print, each tracing line with its rank.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_verbose",
            "10",
        ],
        &["pingpong", "1000", "2"],
    );
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let traced: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" DEBUG ") || l.contains(" INFO "))
        .collect();
    assert!(!traced.is_empty(), "{err}");
    for rank in ["0", "1"] {
        let tag = format!("] btl:usnic: rank {rank} ");
        assert!(traced.iter().any(|l| l.contains(&tag)), "{err}");
    }
    assert!(
        traced
            .iter()
            .all(|l| l.starts_with('[') && l.contains("] btl:usnic: rank ")),
        "{err}"
    );
    // Every line of the run is ours and names its rank: tracing events ("rank R LEVEL") and
    // the plugin's own messages ("rank R: ...") alike.
    let ranked = |l: &str| {
        l.starts_with('[')
            && ["0", "1"].iter().any(|r| {
                l.contains(&format!("] btl:usnic: rank {r} "))
                    || l.contains(&format!("] btl:usnic: rank {r}: "))
            })
    };
    assert!(err.lines().all(ranked), "{err}");
    assert!(
        err.lines().any(|l| l.contains("] btl:usnic: rank 1: ")),
        "{err}"
    );
    // The level follows btl_base_verbose too: the framework's verbosity alone shows our lines.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_base_verbose",
            "10",
        ],
        &["pingpong", "1000", "2"],
    );
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("btl:usnic:")).collect();
    assert!(
        ours.iter().any(|l| l.contains("] btl:usnic: rank 0: ")),
        "{err}"
    );
    assert!(ours.iter().all(|l| ranked(l)), "{err}");
}

#[test]
fn stray_and_oversize_datagrams_on_idle_modules_are_counted() {
    use std::io::{BufRead, BufReader};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Same-node ranks pair over lo, so the eth0 (non-loopback) modules have no peer: before,
    // they were never polled and datagrams sent to them were never read.
    let mut c = ompi("mpirun");
    c.args([
        "-np",
        "2",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "usnic,self",
        "--mca",
        "btl_usnic_verbose",
        "10",
        "--mca",
        "btl_usnic_stats",
        "3600",
    ])
    .arg(workdir().join("idle"))
    .arg("4")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn mpirun");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l.clone());
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    // "usnic module eth0 192.0.2.2: priority port P (mtu 768, ...), data port D (mtu 1372, ...)"
    let mut targets: Vec<(String, u16, usize)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut modules = 0;
    while modules < 2 && Instant::now() < deadline {
        let Ok(l) = rx.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let Some(rest) = l.split("usnic module ").nth(1) else {
            continue;
        };
        let mut w = rest.split_whitespace();
        let (iface, ip) = (
            w.next().unwrap_or(""),
            w.next().unwrap_or("").trim_end_matches(':'),
        );
        if iface == "lo" {
            continue;
        }
        modules += 1;
        let num = |key: &str| -> usize {
            let after = rest.split(key).nth(1).unwrap_or("");
            after
                .trim_start()
                .split(|ch: char| !ch.is_ascii_digit())
                .next()
                .unwrap_or("")
                .parse()
                .unwrap_or(0)
        };
        for (port_key, mtu_at) in [
            ("priority port", "priority port"),
            ("data port", "data port"),
        ] {
            let port = num(port_key) as u16;
            let mtu_text = rest.split(mtu_at).nth(1).unwrap_or("");
            let mtu = mtu_text
                .split("mtu ")
                .nth(1)
                .and_then(|t| t.split(|ch: char| !ch.is_ascii_digit()).next())
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            assert!(port > 0 && mtu > 0, "cannot parse {l}");
            targets.push((ip.to_string(), port, mtu));
        }
    }
    assert_eq!(modules, 2, "no non-loopback module reported its ports");
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    for (ip, port, mtu) in &targets {
        for i in 0..10u8 {
            // Garbage inside the MTU: dropped as malformed.
            sock.send_to(&[i ^ 0x5a; 40], (ip.as_str(), *port)).unwrap();
        }
        for _ in 0..5 {
            // Longer than the channel's MTU: truncated by the fabric, counted as oversize.
            sock.send_to(&vec![0u8; mtu + 100], (ip.as_str(), *port))
                .unwrap();
        }
    }
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(60),
            "job hangs"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert!(st.success(), "{err}");
    let eth: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("stats (final)") && !l.contains(" iface=lo "))
        .collect();
    assert_eq!(eth.len(), 2, "{err}");
    let sum = |key: &str| -> u64 {
        let want = format!("{key}=");
        eth.iter()
            .flat_map(|l| l.split_whitespace())
            .filter_map(|w| w.strip_prefix(&want))
            .map(|v| v.parse::<u64>().unwrap())
            .sum()
    };
    // 2 ranks x 2 channels x 5 oversize datagrams, x 10 garbage ones.
    assert_eq!(sum("oversize_recvs"), 20, "{err}");
    assert_eq!(sum("malformed_recvs"), 40, "{err}");
}

/// Number of ranks (distinct `[host:pid]` prefixes) with a final statistics line matching `f`.
fn per_rank(err: &str, f: impl Fn(&str) -> bool) -> usize {
    let mut ranks: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("stats (final)") && f(l))
        .filter_map(|l| l.split(']').next())
        .collect();
    ranks.sort();
    ranks.dedup();
    ranks.len()
}

/// Sum over every final statistics line of counter `key` (`key=value` pairs).
fn stat_sum(err: &str, key: &str) -> u64 {
    let want = format!("{key}=");
    err.lines()
        .filter(|l| l.contains("stats (final)"))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| w.strip_prefix(&want))
        .map(|v| v.parse::<u64>().expect("numeric counter"))
        .sum()
}

#[test]
fn pingpong_survives_injected_faults() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_stats",
            "1000",
            "--mca",
            "btl_usnic_fault_seed",
            "12345",
            "--mca",
            "btl_usnic_fault_send_drop",
            "10",
            "--mca",
            "btl_usnic_fault_send_dup",
            "5",
            "--mca",
            "btl_usnic_fault_recv_drop",
            "5",
            "--mca",
            "btl_usnic_rto_min",
            "2000",
        ],
        &["pingpong", "262144", "10"],
    );
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    // Both ranks injected faults, and the losses were repaired by retransmission and the
    // copies dropped as duplicates.
    let injected = per_rank(&err, |l| {
        !l.contains(" fault_send_dropped=0 ") && !l.contains(" fault_recv_dropped=0 ")
    });
    assert_eq!(injected, 2, "{err}");
    let dropped = stat_sum(&err, "fault_send_dropped") + stat_sum(&err, "fault_recv_dropped");
    let resends = stat_sum(&err, "resends_timeout") + stat_sum(&err, "resends_fast");
    assert!(dropped > 100, "{err}");
    assert!(
        resends > 0,
        "no retransmission after {dropped} drops\n{err}"
    );
    assert!(stat_sum(&err, "fault_send_duplicated") > 0, "{err}");
    assert!(stat_sum(&err, "dup_recvs") > 0, "{err}");
    assert_eq!(stat_sum(&err, "peers_failed"), 0, "{err}");
    eprintln!(
        "faults: {dropped} dropped, {} duplicated; repairs: {resends} resends, {} dup_recvs",
        stat_sum(&err, "fault_send_duplicated"),
        stat_sum(&err, "dup_recvs")
    );

    // Delayed sends and duplicated receptions (the other two kinds), on both channels.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_stats",
            "1000",
            "--mca",
            "btl_usnic_fault_seed",
            "777",
            "--mca",
            "btl_usnic_fault_send_delay",
            "5",
            "--mca",
            "btl_usnic_fault_delay_us",
            "3000",
            "--mca",
            "btl_usnic_fault_recv_dup",
            "5",
        ],
        &["pingpong", "262144", "10"],
    );
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    assert_eq!(
        per_rank(&err, |l| !l.contains(" fault_send_delayed=0 ")
            && !l.contains(" fault_recv_duplicated=0 ")),
        2,
        "{err}"
    );
    assert!(stat_sum(&err, "dup_recvs") > 0, "{err}");
    assert_eq!(stat_sum(&err, "peers_failed"), 0, "{err}");

    // A percentage outside 0..100 declines the component with one line per rank.
    let o = pingpong_beside_tcp("btl_usnic_fault_send_drop", "150");
    let (_, err) = succeeded(&o);
    assert_param_help(&err, "fault_send_drop", "150", "a percentage, 0..100");
}

#[test]
fn four_ranks_all_pairs() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Ranks 0 and 1 ping-pong while 2 and 3 take part in the final allreduce only.
    let o = mpirun(
        4,
        &["--mca", "btl", "usnic,self"],
        &["pingpong", "70000", "5"],
    );
    let (out, _) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
}

/// The help messages (blocks between the dashed lines Open MPI draws) in `err`.
fn help_blocks(err: &str) -> Vec<String> {
    let bar = "-".repeat(74);
    let mut blocks = Vec::new();
    let mut cur: Option<Vec<&str>> = None;
    for l in err.lines() {
        if l == bar {
            match cur.take() {
                Some(b) => blocks.push(b.join("\n")),
                None => cur = Some(Vec::new()),
            }
        } else if let Some(b) = cur.as_mut() {
            b.push(l);
        }
    }
    blocks
}

fn hostname() -> String {
    let o = Command::new("hostname").output().expect("hostname");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Every rank (mpirun may aggregate identical messages: at least one) showed exactly this
/// "invalid mca param" message, and nothing else of ours.
fn assert_param_help(err: &str, name: &str, value: &str, problem: &str) {
    let want = format!(
        "An MCA parameter of the usnic BTL has a value it cannot use. The usnic\n\
         BTL disqualified itself on this host; other BTLs may carry the job.\n\
         \n  Host:        {}\n  Parameter:   btl_usnic_{name}\n  Value:       {value}\n  \
         Problem:     {problem}",
        hostname()
    );
    assert_exact_help(err, &want);
}

fn assert_exact_help(err: &str, want: &str) {
    let blocks = help_blocks(err);
    let n = blocks.iter().filter(|b| b.as_str() == want).count();
    assert!(
        (1..=2).contains(&n) && n == blocks.len(),
        "want (1 or 2 times, nothing else):\n{want}\n\ngot:\n{err}"
    );
    assert!(
        !err.contains("btl:usnic:"),
        "one-line fallback printed too:\n{err}"
    );
}

#[test]
fn invalid_parameters_show_help() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let host = hostname();
    let param = |name: &str, value: &str, problem: &str| {
        format!(
            "An MCA parameter of the usnic BTL has a value it cannot use. The usnic\n\
             BTL disqualified itself on this host; other BTLs may carry the job.\n\
             \n  Host:        {host}\n  Parameter:   btl_usnic_{name}\n  Value:       {value}\n  \
             Problem:     {problem}"
        )
    };
    let cases: [(&[&str], String); 4] = [
        (
            &["--mca", "btl_usnic_sd_num", "-7"],
            param("sd_num", "-7", "must be -1 for automatic, or >= 16"),
        ),
        (
            &[
                "--mca",
                "btl_usnic_if_include",
                "eth0",
                "--mca",
                "btl_usnic_if_exclude",
                "lo",
            ],
            format!(
                "Both btl_usnic_if_include and btl_usnic_if_exclude were set. They are\n\
                 mutually exclusive, so the usnic BTL disqualified itself on this host.\n\
                 \n  Host:        {host}\n  if_include:  eth0\n  if_exclude:  lo\n\
                 \nSet only one of them."
            ),
        ),
        (
            &["--mca", "btl_usnic_window", "5000"],
            param("window", "5000", "must be 1..4096"),
        ),
        // Two parameters that contradict each other: named in the user's terms, not the
        // protocol core's.
        (
            &["--mca", "btl_usnic_ack_delay", "1000"],
            param(
                "ack_delay",
                "1000",
                "must be below the retransmit timeout's floor, here 500 us (btl_usnic_rto_min; \
                 its default, 500, at most btl_usnic_retrans_timeout): every delayed ACK would \
                 look like a loss",
            ),
        ),
    ];
    for (args, want) in cases {
        let mut extra = vec!["--mca", "btl", "usnic,self,tcp"];
        extra.extend_from_slice(args);
        let o = mpirun(2, &extra, &["pingpong", "1024", "2"]);
        let (out, err) = text(&o);
        // The job still runs (over tcp); usnic said why it stepped aside.
        assert!(
            o.status.success(),
            "{args:?}\nstdout:\n{out}\nstderr:\n{err}"
        );
        assert!(out.contains("OK: 0 errors"), "{out}");
        assert_exact_help(&err, &want);
    }
    // A bad interface list names the parameter and the reason.
    let o = pingpong_beside_tcp("btl_usnic_if_include", "10.0.0.0/99");
    let (_, err) = succeeded(&o);
    let blocks = help_blocks(&err);
    assert!(!blocks.is_empty(), "{err}");
    for b in &blocks {
        assert!(
            b.contains("Parameter:   btl_usnic_if_include\n  Value:       10.0.0.0/99\n  Problem:"),
            "{b}"
        );
    }
    // A connectivity map that cannot be written: said, and the job goes on over usnic.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_connectivity_map",
            "/nonexistent-dir/map",
        ],
        &["pingpong", "1024", "2"],
    );
    let (_, err) = succeeded(&o);
    let blocks = help_blocks(&err);
    assert!(!blocks.is_empty(), "{err}");
    let head = format!(
        "The usnic BTL could not write its connectivity map file. The job goes\n\
         on without it.\n\n  Host:              {}\n  File:              /nonexistent-dir/map-",
        hostname()
    );
    for b in &blocks {
        assert!(
            b.starts_with(&head) && b.contains("\n  Error:             No such file or directory"),
            "{b}"
        );
    }
}

#[test]
fn without_help_file_errors_are_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A components directory with the plugin and no help file next to it.
    let bare = workdir().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let link = bare.join("mca_btl_usnic.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(plugin_path(), &link).unwrap();
    let path = component_path().replace(
        &workdir().join("components").display().to_string(),
        &bare.display().to_string(),
    );
    let mut c = ompi("mpirun");
    c.env("OMPI_MCA_mca_base_component_path", path).args([
        "-np",
        "2",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "usnic,self,tcp",
        "--mca",
        "btl_usnic_sd_num",
        "-7",
    ]);
    c.arg(workdir().join("pingpong")).args(["1024", "2"]);
    let o = run(c, Duration::from_secs(120));
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    // One line per process, naming its rank.
    for rank in 0..2 {
        let want = format!(
            "] btl:usnic: rank {rank}: btl_usnic_sd_num=-7 is invalid (must be -1 for automatic, \
             or >= 16); the usnic BTL disables itself"
        );
        let lines = err.lines().filter(|l| l.ends_with(&want)).count();
        assert_eq!(lines, 1, "{want}\n{err}");
    }
    assert!(help_blocks(&err).is_empty(), "{err}");
    assert!(!err.contains("Sorry!"), "{err}");
}

#[test]
fn failed_peer_is_named_and_the_job_ends() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    // Rank 1 stops (SIGSTOP) before rank 0's eager sends reach it: nothing is acknowledged.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_peer_timeout",
            "2000",
        ],
        &["stall"],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.contains("should not happen"), "{out}");
    let want = format!(
        "The usnic BTL stopped hearing from a peer process: it acknowledged\n\
         nothing for longer than btl_usnic_peer_timeout while data was waiting\n\
         for it. The peer has probably died, or the network between the two\n\
         hosts is cut. The MPI job will be aborted.\n\
         \n  Local host:      {h}\n  Local process:   rank 0\n  Peer host:       {h}\n  \
         Peer process:    rank 1\n  Peer address:    ",
        h = hostname()
    );
    let blocks = help_blocks(&err);
    assert!(
        blocks
            .iter()
            .any(|b| b.starts_with(&want) && b.ends_with("\n  Silent for:      2000 ms")),
        "want:\n{want}...\ngot:\n{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(120));
}

/// An internal error (a panic caught at an entry point; injected here in rank 0's 3000th
/// progress call, which falls while it waits in `MPI_Recv`) ends the job at once through the
/// PML's error callback, as the C original's `opal_btl_usnic_exit` does, with the error in
/// the output. Before, the failed BTL only returned errors: rank 0 waited for ever, and the job
/// ended after rank 1's peer timeout (20 s) named rank 0 a dead peer.
#[test]
fn an_internal_error_ends_the_job_with_its_message() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let prog = workdir().join("pingpong");
    let prog = prog.to_str().unwrap();
    // Two app contexts: rank 1 runs without the injection (its environment overrides it).
    let o = mpirun(
        1,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_fault_panic_after",
            "3000",
        ],
        &[
            "pingpong",
            "8",
            "1000000",
            ":",
            "-np",
            "1",
            "env",
            "OMPI_MCA_btl_usnic_fault_panic_after=0",
            prog,
            "8",
            "1000000",
        ],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains(
            "rank 0: internal error in progress: injected in progress call 3000 \
             (btl_usnic_fault_panic_after); the usnic BTL stops working now"
        ),
        "{err}"
    );
    assert!(!err.contains("rank 1: internal error"), "{err}");
    assert!(!err.contains("stopped hearing from a peer"), "{err}");
    // Where it happened, on a line that names the rank; not Rust's own lines, which name none.
    assert!(
        err.contains("rank 0: internal error (a Rust panic) at src/ompi/"),
        "{err}"
    );
    assert!(!err.contains("panicked at"), "{err}");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(15), "{took:?}\n{err}");
}

#[test]
fn computing_peer_is_not_declared_failed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args = |thread: &'static str| {
        [
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_peer_timeout",
            "2000",
            "--mca",
            "btl_usnic_ack_thread",
            thread,
        ]
    };
    let o = mpirun(2, &args("1"), &["compute"]);
    let (out, _) = succeeded(&o);
    assert!(out.contains("OK: computing peer survived"), "{out}");
    // Fragments of 4 datagrams each on lo: 40 of them need 160 receive buffers of the data
    // channel's 64, so the helper must give each back as it copies the fragment out.
    let o = mpirun(2, &args("1"), &["compute", "40", "204800"]);
    let (out, _) = succeeded(&o);
    assert!(
        out.contains("OK: computing peer survived, 40 messages of 204800 bytes checked"),
        "{out}"
    );
    // Control: without the helper thread the same run is (wrongly) declared failed, which is
    // what the thread exists to prevent.
    let o = mpirun(2, &args("0"), &["compute"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("peer rank 1 on host"), "{err}");
}

/// Rank 0 sends 12000 eager messages of 32 KiB (393 MB) to rank 1 while rank 1 sleeps for 8 s
/// outside MPI, longer than a lowered peer timeout (3 s). The ACK helper keeps what arrives up
/// to its bound (64 MiB per module), then holds rank 1's receive side: rank 0 waits instead of
/// pouring everything into rank 1 (before the hold, rank 1 peaked at 847 MB), its held ACKs keep
/// rank 0 from declaring it failed, and once back in MPI it takes everything, every byte checked.
#[test]
fn a_computing_rank_holds_what_it_receives() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_peer_timeout",
            "3000",
            "--mca",
            "btl_usnic_stats",
            "1000",
        ],
        &["hold", "12000", "32768", "8000"],
    );
    let (out, err) = succeeded(&o);
    assert!(
        out.contains("OK: 12000 messages of 32768 bytes checked"),
        "{out}"
    );
    let hwm_kb: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("rank 1: VmHWM "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in:\n{out}"));
    // The bound, ob1's copies of the unexpected messages it hands over, and the process
    // itself; the 393 MB sent are far above.
    let limit_kb = (64 + 150) * 1024;
    assert!(
        hwm_kb < limit_kb,
        "rank 1 peaked at {hwm_kb} kB (limit {limit_kb} kB)\n{out}"
    );
    assert_eq!(stat_sum(&err, "peers_failed"), 0, "{err}");
    assert!(stat_sum(&err, "holds") >= 1, "the helper never held\n{err}");
    assert!(stat_sum(&err, "held_recvs") >= 1, "{err}");
}

/// `lentsend` with `size` bytes (rank 0 sends them to rank 1, which computes 3 s outside MPI
/// first) and no ACK helper, so the receiver acknowledges nothing for 3 s; the fault injector
/// drops `drop` % of the sent datagrams, and `extra` sets the parameters under test. Checks
/// that the job succeeded and the bytes arrived as they were before rank 0 overwrote them;
/// returns how long rank 0's `MPI_Send` took (ms) and stderr (with the statistics lines).
fn lentsend(size: &str, drop: &str, extra: &[&str]) -> (u64, String) {
    let mut args = vec![
        "--mca",
        "btl",
        "usnic,self",
        "--mca",
        "btl_usnic_ack_thread",
        "0",
        "--mca",
        "btl_usnic_stats",
        "1000",
        "--mca",
        "btl_usnic_fault_seed",
        "7",
        "--mca",
        "btl_usnic_fault_send_drop",
        drop,
    ];
    args.extend_from_slice(extra);
    let o = mpirun(2, &args, &["lentsend", size]);
    let (out, err) = succeeded(&o);
    assert!(out.contains("received: 0 bytes differ"), "{out}");
    let took = out
        .lines()
        .find_map(|l| l.strip_prefix("send returned after "))
        .and_then(|v| v.strip_suffix(" ms"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no send time in:\n{out}"));
    (took, err)
}

#[test]
fn a_send_read_in_place_completes_while_its_receiver_computes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 64 KiB waits for its ACK or the hold. A third of the datagrams are dropped, so the data
    // reaches the receiver partly by retransmissions made after the sender reused its buffer.
    let (took, err) = lentsend("65536", "30", &["--mca", "btl_usnic_lent_hold", "1000"]);
    assert!(
        took < 1500,
        "the send waited for the computing receiver: {took} ms"
    );
    assert!(stat_sum(&err, "lent_released") >= 1, "{err}");
    assert!(stat_sum(&err, "fault_send_dropped") > 0, "{err}");
    // Control: held until acknowledged, the send returns only when the receiver computed (no
    // drops here: a lost barrier message would delay the sender's start by retransmit
    // timeouts, and the receiver's compute phase runs from its own start).
    let (took, err) = lentsend("65536", "0", &["--mca", "btl_usnic_lent_hold", "-1"]);
    assert!(took >= 2500, "{took} ms");
    assert_eq!(stat_sum(&err, "lent_released"), 0, "{err}");
}

#[test]
fn a_short_send_read_in_place_completes_without_waiting_for_its_ack() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 32 KiB is read in place (btl_usnic_pack_lazy_threshold 16 KiB) and shorter than
    // btl_usnic_lent_copy_limit (64 KiB): it is copied right after it left. The hold is off,
    // so nothing else could complete it before the receiver's ACK, 3 s later; retransmissions
    // of the dropped datagrams come from the copy.
    let limit = |l| {
        [
            "--mca",
            "btl_usnic_lent_hold",
            "-1",
            "--mca",
            "btl_usnic_lent_copy_limit",
            l,
        ]
    };
    let (took, err) = lentsend("32768", "30", &limit("65536"));
    assert!(took < 1000, "the send waited for its ACK: {took} ms");
    assert!(stat_sum(&err, "lent_released") >= 1, "{err}");
    assert!(stat_sum(&err, "fault_send_dropped") > 0, "{err}");
    // Control: with the limit at 0 the same send waits for the receiver's ACK.
    let (took, err) = lentsend("32768", "0", &limit("0"));
    assert!(took >= 2500, "{took} ms");
    assert_eq!(stat_sum(&err, "lent_released"), 0, "{err}");
}

/// btl.h's descriptor contract, driven straight into the BTL beside ob1 (`descown.c`): a
/// BTL-owned send completes once (btl_send returns 1, or one callback); a descriptor the PML
/// keeps (no `MCA_BTL_DES_FLAGS_BTL_OWNERSHIP`) is called back once, keeps its segment (no
/// other descriptor is given that memory) and can be filled and sent again, read in place
/// or not; a descriptor freed unsent is taken back once.
#[test]
fn descriptors_keep_the_btl_contract() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = mpirun(2, &["--mca", "btl", "usnic,self"], &["descown"]);
    let (out, err) = succeeded(&o);
    assert_eq!(out.matches(": 0 errors").count(), 2, "{out}\n{err}");
}

#[test]
fn thread_multiple_four_threads_per_rank() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for np in [2, 4] {
        let o = mpirun(np, &["--mca", "btl", "usnic,self"], &["threads", "100"]);
        let (out, err) = text(&o);
        assert!(
            o.status.success(),
            "np {np}\nstdout:\n{out}\nstderr:\n{err}"
        );
        assert!(out.contains("OK: 0 errors"), "{out}");
    }
}

#[test]
fn pingpong_with_emulated_put_and_get() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // "get": ob1 fetches large messages with btl_get (RGET); "put": the receiver asks the sender
    // to btl_put into its registered buffer. Every byte is checked by the program.
    for (rdma, counter) in [("get", " gets="), ("put", " puts=")] {
        let o = mpirun(
            2,
            &[
                "--mca",
                "btl",
                "usnic,self",
                "--mca",
                "btl_usnic_rdma",
                rdma,
                "--mca",
                "btl_usnic_stats",
                "1000",
            ],
            &["pingpong", "1048576", "3"],
        );
        let (out, err) = text(&o);
        assert!(o.status.success(), "{rdma}\nstdout:\n{out}\nstderr:\n{err}");
        assert!(out.contains("OK: 0 errors"), "{out}");
        let zero = format!("{counter}0 ");
        assert_eq!(per_rank(&err, |l| !l.contains(&zero)), 2, "{rdma}: {err}");
        assert!(
            err.lines()
                .filter(|l| l.contains("stats (final)"))
                .all(|l| l.contains(" refused_writes=0 ")),
            "{err}"
        );
    }
    // A bad value declines with one line per rank; tcp carries the job.
    let o = pingpong_beside_tcp("btl_usnic_rdma", "rput");
    let (_, err) = succeeded(&o);
    assert_param_help(
        &err,
        "rdma",
        "rput",
        "\"none\", or a comma list of \"put\" and \"get\"; \"rput\" is neither",
    );
}

/// `btl_usnic_rdma` set for one app context only (or in an MCA parameter file of one host):
/// ob1 asks a peer for RDMA by its own BTL's flags, and the process whose usnic offered none
/// crashed on the first large message (SIGSEGV in mca_pml_ob1_send_request_put_frag, a NULL
/// RDMA BTL). The modex carries the setting: usnic leaves the pair to another BTL and says
/// which setting differs (tcp carries this job; with usnic,self only, MPI_Init fails).
#[test]
fn ranks_that_differ_in_rdma_are_left_to_another_btl() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = ompi("mpirun");
    c.args(["--oversubscribe", "--mca", "pml", "ob1"]);
    c.args(["--mca", "btl", "usnic,self,tcp"]);
    let prog = workdir().join("pingpong");
    c.args(["-np", "1", "-x", "OMPI_MCA_btl_usnic_rdma=put"]);
    c.arg(&prog).args(["1048576", "3", ":", "-np", "1"]);
    c.arg(&prog).args(["1048576", "3"]);
    let o = run(c, Duration::from_secs(240));
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    for (local, remote) in [("put", "none"), ("none", "put")] {
        let want = format!(
            "  Setting:        btl_usnic_rdma\n  Local value:    {local}\n  Remote value:   {remote}\n"
        );
        assert!(err.contains(&want), "{err}");
    }
}

// ob1 moves the 1 MiB messages by RDMA (600000 bytes, above the eager limit, still went by
// send/receive: the counter check below caught it). With `get` (ob1 prefers it when both are
// offered) the replies are read from the registered user buffer in place; with `put` the PUT's
// source is. Valgrind sees every read of it either way.
#[test]
fn two_rank_run_is_valgrind_clean_with_get() {
    valgrind_clean("put,get", " gets=");
}

#[test]
fn two_rank_run_is_valgrind_clean_with_put() {
    valgrind_clean("put", " puts=");
}

/// `counter`: the statistic that shows the RDMA operation under test ran.
fn valgrind_clean(rdma: &str, counter: &str) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let vg = Command::new("valgrind").arg("--version").output();
    assert!(
        vg.is_ok_and(|o| o.status.success()),
        "valgrind must be installed (Debian: valgrind)"
    );
    let logs = workdir().join("vg");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    let mut c = ompi("mpirun");
    c.args([
        "-np",
        "2",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "usnic,self",
    ]);
    // Keep the plugin mapped at exit so valgrind can name its frames.
    c.args(["--mca", "mca_base_component_disable_dlclose", "1"]);
    c.args([
        "--mca",
        "btl_usnic_rdma",
        rdma,
        "--mca",
        "btl_usnic_stats",
        "1000",
    ]);
    c.args([
        "valgrind",
        "-q",
        "--leak-check=full",
        "--show-leak-kinds=definite",
    ]);
    let supp = Path::new("/usr/share/openmpi/openmpi-valgrind.supp");
    if supp.exists() {
        c.arg(format!("--suppressions={}", supp.display()));
    }
    c.arg(format!("--log-file={}/vg.%p", logs.display()));
    c.arg(workdir().join("pingpong")).args(["1048576", "3"]);
    let o = run(c, Duration::from_secs(400));
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    let zero = format!("{counter}0 ");
    assert_eq!(per_rank(&err, |l| !l.contains(&zero)), 2, "{rdma}: {err}");
    let mut n = 0;
    for f in std::fs::read_dir(&logs).unwrap() {
        let log = std::fs::read_to_string(f.unwrap().path()).unwrap();
        n += 1;
        // Open MPI itself leaks at finalize (ORTE, PMIx strings); only our frames count.
        for record in valgrind_records(&log) {
            assert!(
                !is_our_error(&record),
                "valgrind report in our code:\n{record}"
            );
        }
    }
    assert_eq!(n, 2, "expected one valgrind log per rank");
}

/// The records of a valgrind log: runs of `==pid== ...` lines separated by an empty message.
fn valgrind_records(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in log.lines() {
        let msg = match line.strip_prefix("==") {
            Some(rest) => rest.split_once("== ").map_or("", |(_, m)| m),
            None => line,
        };
        if msg.trim().is_empty() {
            if !cur.is_empty() {
                out.push(core::mem::take(&mut cur));
            }
        } else {
            cur.push_str(msg);
            cur.push('\n');
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_our_error(record: &str) -> bool {
    let ours = record.contains("usnic_rs") || record.contains("mca_btl_usnic");
    let bad = record.contains("Invalid ")
        || record.contains("uninitialised")
        || record.contains("definitely lost");
    ours && bad
}

#[test]
fn valgrind_log_parser_finds_our_leaks() {
    let log = "==7== 16 bytes in 1 blocks are definitely lost in loss record 1 of 9\n\
               ==7==    at 0x1: malloc (vg_replace_malloc.c:1)\n\
               ==7==    by 0x2: usnic_rs::ompi::rdma::register (rdma.rs:80)\n\
               ==7== \n\
               ==7== 2 bytes in 1 blocks are definitely lost in loss record 2 of 9\n\
               ==7==    at 0x1: malloc (vg_replace_malloc.c:1)\n\
               ==7==    by 0x3: orte_init (in libopen-rte.so)\n\
               ==7== \n";
    let recs = valgrind_records(log);
    assert_eq!(recs.len(), 2);
    assert!(is_our_error(&recs[0]));
    assert!(!is_our_error(&recs[1]));
}

#[test]
fn same_node_switch_and_connectivity_map() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let map = workdir().join("cmap");
    for f in std::fs::read_dir(workdir()).unwrap().flatten() {
        if f.file_name().to_string_lossy().starts_with("cmap-") {
            let _ = std::fs::remove_file(f.path());
        }
    }
    let map_arg = map.to_string_lossy().into_owned();
    // Default: same-node peers are reached over usnic (loopback module), and the map says so.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_connectivity_map",
            &map_arg,
        ],
        &["pingpong", "4096", "5"],
    );
    succeeded(&o);
    let maps: Vec<String> = std::fs::read_dir(workdir())
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with("cmap-"))
        .map(|f| std::fs::read_to_string(f.path()).unwrap())
        .collect();
    assert_eq!(maps.len(), 2, "one map per rank");
    // Each names the peer, its host, and which local interface talks to which peer address.
    let host = hostname();
    let mut want = vec![
        format!("rank 0 {host} via lo 127.0.0.1 -> 127.0.0.1\n"),
        format!("rank 1 {host} via lo 127.0.0.1 -> 127.0.0.1\n"),
    ];
    let mut got = maps.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // btl_usnic_same_node=0 restores the original rule: vader carries the traffic, usnic none.
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,vader,self",
            "--mca",
            "btl_usnic_same_node",
            "0",
            "--mca",
            "btl_usnic_stats",
            "1000",
        ],
        &["pingpong", "4096", "5"],
    );
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    let finals: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("stats (final)"))
        .collect();
    assert!(!finals.is_empty(), "{err}");
    assert!(
        finals
            .iter()
            .all(|l| l.contains(" sends=0 ") && l.contains(" recvs=0 ")),
        "{err}"
    );
}

/// `sends` of every statistics line of the loopback module (the one carrying same-node
/// traffic) of rank `rank`, in order, as (final?, value).
fn lo_sends(err: &str, rank: u32) -> Vec<(bool, u64)> {
    let want_rank = format!("rank={rank}");
    err.lines()
        .filter(|l| l.contains("btl:usnic: stats"))
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.contains(&want_rank.as_str()) && w.contains(&"iface=lo")
        })
        .map(|l| {
            let v = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("sends="))
                .expect("a sends= counter")
                .parse()
                .expect("numeric counter");
            (l.contains("stats (final)"), v)
        })
        .collect()
}

#[test]
fn periodic_statistics_are_cumulative_or_relative() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Rank 0 sends 100 messages, then waits inside MPI for about 5 s while rank 1 computes:
    // with btl_usnic_stats 1 its progress prints a line about every second.
    let run = |relative: &str| {
        let o = mpirun(
            2,
            &[
                "--mca",
                "btl",
                "usnic,self",
                "--mca",
                "btl_usnic_stats",
                "1",
                "--mca",
                "btl_usnic_stats_relative",
                relative,
            ],
            &["compute"],
        );
        let (_, err) = succeeded(&o);
        // The documented, stable form (docs/operations.md): marker, then rank, module, iface,
        // then the counters in this order, values decimal.
        let keys = "rank module iface sends frag_sends chunk_sends resends_timeout resends_fast \
                    acks_alone acks_piggybacked recvs dup_recvs oow_low_recvs oow_high_recvs \
                    malformed_recvs wrong_key_recvs unknown_sender_recvs bad_chunk_recvs \
                    refused_writes refused_gets ack_recvs dup_acks old_acks credits_exhausted \
                    bytes_sent bytes_received peers_failed lent_released spurious_resends held_recvs oversize_recvs puts gets frags_live \
                    gso_sends gso_datagrams gro_reads gro_datagrams busy_sends busy_batches cut_recvs \
                    lost_sends holds";
        for l in err.lines().filter(|l| l.contains("btl:usnic: stats")) {
            let (head, rest) = l.split_once("] btl:usnic: stats ").expect("marker");
            assert!(head.starts_with('['), "{l}");
            let rest = rest.strip_prefix("(final) ").unwrap_or(rest);
            let pairs: Vec<(&str, &str)> = rest
                .split(' ')
                .map(|kv| kv.split_once('=').expect("key=value"))
                .collect();
            let names: Vec<&str> = pairs.iter().map(|p| p.0).collect();
            assert_eq!(names.join(" "), keys, "{l}");
            for (k, v) in &pairs[3..] {
                assert!(v.parse::<u64>().is_ok(), "{k}={v} in {l}");
            }
        }
        let lines = lo_sends(&err, 0);
        let periodic: Vec<u64> = lines.iter().filter(|l| !l.0).map(|l| l.1).collect();
        let finals: Vec<u64> = lines.iter().filter(|l| l.0).map(|l| l.1).collect();
        assert!(periodic.len() >= 3, "want >= 3 periodic lines:\n{err}");
        assert_eq!(finals.len(), 1, "want one final line:\n{err}");
        assert!(finals[0] >= 100, "the final line is cumulative:\n{err}");
        (periodic, finals[0], err)
    };
    let (cumulative, fin, err) = run("0");
    assert!(
        cumulative.windows(2).all(|w| w[0] <= w[1]) && *cumulative.last().unwrap() <= fin,
        "cumulative lines never decrease:\n{err}"
    );
    assert!(
        *cumulative.last().unwrap() >= 100,
        "after the 100 sends, a cumulative line counts them:\n{err}"
    );
    let (relative, fin, err) = run("1");
    assert!(
        relative.iter().sum::<u64>() <= fin,
        "relative lines add up to at most the total:\n{err}"
    );
    assert!(
        *relative.last().unwrap() < 100,
        "while idle, a relative line shows the change, not the 100 earlier sends:\n{err}"
    );
}

#[test]
fn mpi_t_counters_count_sends() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = mpirun(2, &["--mca", "btl", "usnic,self"], &["pvars"]);
    let (out, _) = succeeded(&o);
    let grew: Vec<u64> = out
        .lines()
        .filter_map(|l| l.split("grew by ").nth(1))
        .map(|v| v.trim().parse().expect("a number"))
        .collect();
    assert_eq!(grew.len(), 2, "one line per rank:\n{out}");
    // 100 messages sent by each rank, each at least one datagram.
    assert!(grew.iter().all(|&g| g >= 100), "{out}");
    // Relative statistics lines change only the lines: the counters stay (they were not
    // registered at all with it).
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_stats_relative",
            "1",
        ],
        &["pvars"],
    );
    let (out, _) = succeeded(&o);
    assert_eq!(out.matches("grew by ").count(), 2, "{out}");
}

/// `ompi_info` lists the MPI_T counters (they were registered only by an initialized BTL,
/// which `ompi_info` never makes).
#[test]
fn ompi_info_lists_the_mpi_t_counters() {
    let mut c = ompi("ompi_info");
    c.args(["--param", "btl", "usnic", "--level", "9"]);
    let o = run(c, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for name in ["btl_usnic_num_total_sends", "btl_usnic_num_refused_gets"] {
        let line =
            format!("MCA btl usnic: performance \"{name}\" (type: unsigned_long, class: counter)");
        assert!(
            out.lines().any(|l| l.trim() == line),
            "missing {line}\n{out}"
        );
    }
}

/// An absurd completion-queue size the provider cannot allocate: every interface is named with
/// the exhausted resource (not a generic libfabric failure), the BTL steps aside with one line,
/// and the job still runs over tcp. Nothing else of ours is printed (no hang, no crash, no
/// complaint from the connectivity checker, which never starts without an interface).
/// An Open MPI built with the C original keeps its `help-mpi-btl-usnic.txt` in the data
/// directory, which Open MPI searches first; its topics share our names but take other
/// arguments (an int read as a string crashed MPI_Init). Ours has a name of its own.
#[test]
fn the_c_originals_help_file_in_the_data_directory_is_not_ours() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = workdir().join("opaldata");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    for e in std::fs::read_dir("/usr/share/openmpi").unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), data.join(e.file_name())).unwrap();
        }
    }
    // The original's argument order for this topic: strings where ours has ints.
    std::fs::write(
        data.join("help-mpi-btl-usnic.txt"),
        "[MTU mismatch]\nhost %s interface %s size %d peer %s size %d\n",
    )
    .unwrap();
    let prog = workdir().join("pingpong");
    let datadir = format!("OPAL_PKGDATADIR={}", data.display());
    let mut c = ompi("mpirun");
    c.args([
        "--oversubscribe",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "usnic,self",
    ]);
    // One rank caps its datagrams, so the pair's sizes differ (the warning), over eth0.
    c.args([
        "-np",
        "1",
        "-x",
        &datadir,
        "-x",
        "OMPI_MCA_btl_usnic_mtu=1000",
    ]);
    c.args(["-x", "OMPI_MCA_btl_usnic_if_exclude=lo"]);
    c.arg(&prog).args(["4096", "3", ":"]);
    c.args([
        "-np",
        "1",
        "-x",
        &datadir,
        "-x",
        "OMPI_MCA_btl_usnic_if_exclude=lo",
    ]);
    c.arg(&prog).args(["4096", "3"]);
    let o = run(c, Duration::from_secs(120));
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    // Both ends know the mismatch; on one host (equal addresses) only the lower rank says it.
    assert_eq!(
        err.matches("Two usnic interfaces that talk to each other")
            .count(),
        1,
        "{err}"
    );
}

/// One rank's datagrams capped at 512 bytes, below the other's 768-byte priority datagrams:
/// everything sent to it must fit its datagrams (the pair used to send it 768-byte data
/// datagrams, all dropped as oversized, until the peer timeout ended the job).
#[test]
fn a_rank_with_datagrams_below_the_priority_size_is_reached() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prog = workdir().join("pingpong");
    let mut c = ompi("mpirun");
    c.args([
        "--oversubscribe",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "usnic,self",
    ]);
    c.args(["--mca", "btl_usnic_peer_timeout", "5000"]);
    c.args(["-np", "1", "-x", "OMPI_MCA_btl_usnic_mtu=512"]);
    c.arg(&prog).args(["1048576", "3", ":"]);
    c.args(["-np", "1"]).arg(&prog).args(["1048576", "3"]);
    let o = run(c, Duration::from_secs(120));
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    assert!(err.contains("Size used:       512 bytes"), "{err}");
}

#[test]
fn mpi_t_reads_from_a_tool_thread_meet_progress_safely() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Without the ACK helper and below MPI_THREAD_MULTIPLE the BTL once took no lock, and a
    // read racing the main thread's progress ended the job ("already borrowed").
    let o = mpirun(
        2,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_ack_thread",
            "0",
        ],
        &["pvarthread"],
    );
    let (out, err) = succeeded(&o);
    assert_eq!(out.matches(": OK, ").count(), 2, "{out}\n{err}");
    assert!(!err.contains("internal error"), "{err}");
}

#[test]
fn exhausted_resource_is_named() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let host = hostname();
    let o = pingpong_beside_tcp("btl_usnic_cq_num", "2000000000");
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    let want = |iface: &str| {
        format!(
            "The usnic BTL could not get a resource it needs from the system or the\n\
             network provider.\n\
             \n  Host:        {host}\n  Interface:   {iface}\n  \
             Resource:    completion queue (btl_usnic_cq_num)\n  Call:        fi_cq_open\n  \
             Error:       Cannot allocate memory (12)\n  \
             Effect:      this interface is not used; other interfaces or BTLs may carry the job\n\
             \nCheck btl_usnic_sd_num, btl_usnic_rd_num, btl_usnic_prio_sd_num,\n\
             btl_usnic_prio_rd_num and btl_usnic_cq_num (-1 = automatic),\n\
             the locked-memory limit (\"ulimit -l\"; it should be unlimited), the\n\
             memory of the host, and the number of processes per host."
        )
    };
    let blocks = help_blocks(&err);
    assert!(!blocks.is_empty(), "{err}");
    for b in &blocks {
        let iface = b
            .lines()
            .find_map(|l| l.strip_prefix("  Interface:   "))
            .unwrap_or("?");
        assert_eq!(b, &want(iface), "\nstderr:\n{err}");
    }
    // Each process: one block per interface (the same interfaces), then the one line.
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("btl:usnic:")).collect();
    assert_eq!(ours.len(), 2, "{err}");
    for rank in 0..2 {
        let want = format!(
            "] btl:usnic: rank {rank}: no interface could be opened; the usnic BTL disables itself"
        );
        assert!(
            ours.iter()
                .any(|l| l.starts_with('[') && l.ends_with(&want)),
            "{want}\n{err}"
        );
    }
    assert_eq!(blocks.len() % 2, 0, "{err}");
}

/// The provider named by btl_usnic_provider does not exist: each process says so, exactly, and
/// the job runs over tcp.
#[test]
fn missing_provider_is_named() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let host = hostname();
    let o = pingpong_beside_tcp("btl_usnic_provider", "nosuch");
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    let want = format!(
        "The usnic BTL found no usable datagram device on this host, so it will\n\
         not be used here. Other BTLs may carry the job.\n\
         \n  Host:        {host}\n  Provider:    nosuch\n  \
         Reason:      libfabric's provider \"nosuch\" offers no usable FI_EP_DGRAM interface \
         here (is the provider name right?)\n\
         \nCheck \"fi_info -p <provider> -t FI_EP_DGRAM\", btl_usnic_provider,\n\
         btl_usnic_if_include and btl_usnic_if_exclude."
    );
    assert_exact_help(&err, &want);
}

/// Two processes whose interfaces share no subnet (rank 0 limited to eth0, rank 1 to lo, via
/// per-rank environment): each names the other as unreachable over usnic, exactly, and the
/// job runs over tcp.
#[test]
fn unreachable_peer_is_named() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let host = hostname();
    // The first non-loopback interface the plugin would use, from its own verbose output.
    let o = mpirun(
        1,
        &[
            "--mca",
            "btl",
            "usnic,self",
            "--mca",
            "btl_usnic_verbose",
            "5",
        ],
        &["pingpong", "1024", "1"],
    );
    let (_, err) = text(&o);
    let (iface, addr) = err
        .lines()
        .find_map(|l| {
            let rest = l.split(": module 0: ").nth(1)?;
            let mut w = rest.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .unwrap_or_else(|| panic!("no module 0 line:\n{err}"));
    assert_ne!(iface, "lo", "{err}");
    let mut c = ompi("mpirun");
    c.args([
        "--oversubscribe",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "usnic,self,tcp",
    ]);
    let prog = workdir().join("pingpong");
    c.args([
        "-np",
        "1",
        "-x",
        &format!("OMPI_MCA_btl_usnic_if_include={iface}"),
    ])
    .arg(&prog)
    .args(["1024", "2", ":"]);
    c.args(["-np", "1", "-x", "OMPI_MCA_btl_usnic_if_include=lo"])
        .arg(&prog)
        .args(["1024", "2"]);
    let o = run(c, Duration::from_secs(120));
    let (out, err) = succeeded(&o);
    assert!(out.contains("OK: 0 errors"), "{out}");
    let block = |local: &str, local_addr: &str, rank: u32, remote_addr: &str| {
        format!(
            "The usnic BTL has no route from a local interface to the address of a\n\
             peer process. That pair of interfaces will not be used; if no other\n\
             path exists, the processes cannot reach each other over usnic.\n\
             \n  Local host:      {host}\n  Local interface: {local} ({local_addr})\n  \
             Remote host:     {host} (rank {rank})\n  Remote address:  {remote_addr}\n  \
             Reason:          no local interface shares a subnet with the peer's; another BTL \
             must carry its traffic\n\
             \nSet btl_usnic_show_route_failures to 0 to silence this message."
        )
    };
    let mut want = vec![
        block(&iface, &addr, 1, "127.0.0.1/255.0.0.0"),
        block("lo", "127.0.0.1/255.0.0.0", 0, &addr),
    ];
    let mut got = help_blocks(&err);
    got.sort();
    want.sort();
    assert_eq!(got, want, "\nstderr:\n{err}");
}

/// The connectivity agent runs in whichever local process gets there first: a local rank 0 that
/// reaches MPI_Init 11 s after its siblings (past their 10 s wait for the agent) no longer leaves
/// them without a checker, each saying so, and their paths unchecked.
#[test]
fn a_late_local_rank_0_leaves_the_connectivity_checker_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prog = workdir().join("late0");
    let mut c = ompi("mpirun");
    c.args(["-np", "3", "--oversubscribe", "-x", "LATE0_S=11"]);
    c.args(["--mca", "pml", "ob1", "--mca", "btl", "usnic,self"]);
    c.args([
        "--mca",
        "btl_usnic_if_exclude",
        "lo",
        "--mca",
        "btl_usnic_verbose",
        "20",
    ]);
    c.arg(&prog);
    let o = run(c, Duration::from_secs(120));
    let (out, err) = succeeded(&o);
    assert!(out.contains("PASS sum=3"), "{out}");
    assert!(
        !err.contains("running without the connectivity checker"),
        "{err}"
    );
    assert!(err.contains("usnic connectivity GOOD between"), "{err}");
}

/// Spawned children that exit owing the ACK of the last message they received: the parent job
/// goes on for 8 s more, past its 3 s peer timeout, and must not declare them failed (Open MPI
/// 4.1 never removes an exited child, so the parent would resend to it and abort its own job;
/// 3 of 3 runs of the previous plugin did). Ignored by default: `MPI_Comm_spawn` under Open
/// MPI 4.1.4 with its PMIx hangs in about one run in forty, over tcp as well (a child stuck in
/// `PMIx_Init`). Run with `cargo test --release --test plugin_ompi -- --ignored`.
#[test]
#[ignore]
fn spawned_children_that_exit_are_not_declared_failed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prog = workdir().join("spawnexit");
    let mut c = ompi("mpirun");
    c.args(["-np", "2", "--oversubscribe", "-x", "PP=8"]);
    c.args(["--mca", "pml", "ob1", "--mca", "btl", "usnic,self"]);
    c.args([
        "--mca",
        "btl_usnic_peer_timeout",
        "3000",
        "--mca",
        "mpi_yield_when_idle",
        "1",
    ]);
    c.arg(&prog).stdin(std::process::Stdio::null());
    let o = run(c, Duration::from_secs(180));
    let (out, err) = succeeded(&o);
    assert!(out.contains("PASS parent"), "{out}");
    assert!(!err.contains("stopped hearing"), "{err}");
}

/// Two mpiruns on one host joined by `MPI_Comm_connect`/`MPI_Comm_accept` (through
/// `ompi-server`): Open MPI calls each other's processes remote, with host "unknown", and the
/// equal eth0 addresses are refused like two hosts' docker0 bridges; the host identity in the
/// modex tells the plugin they share `lo` (it found no route before: "no local interface shares
/// a subnet", both jobs exited 17).
#[test]
fn two_jobs_on_one_host_connect_over_usnic() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir().join("connect-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let uri = dir.join("uri.txt");
    let mut server = Command::new("ompi-server")
        .arg("--no-daemonize")
        .arg("-r")
        .arg(&uri)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .spawn()
        .expect("ompi-server (openmpi-bin)");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&uri).is_ok_and(|s| !s.trim().is_empty()) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "ompi-server wrote no URI"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let job = |role: &str| {
        let mut c = ompi("mpirun");
        c.args(["-np", "2", "--oversubscribe", "--ompi-server"])
            .arg(format!("file:{}", uri.display()));
        c.args(["--mca", "pml", "ob1", "--mca", "btl", "usnic,self"]);
        c.arg(workdir().join("connect"))
            .arg(role)
            .arg(dir.join("port.txt"));
        c.current_dir(&dir);
        c
    };
    let server_job = job("server");
    let accepting = std::thread::spawn(move || run(server_job, Duration::from_secs(90)));
    let client = run(job("client"), Duration::from_secs(90));
    let server_out = accepting.join().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let (out, _) = succeeded(&client);
    assert!(out.contains("PASS client"), "{out}");
    let (out, _) = succeeded(&server_out);
    assert!(out.contains("PASS server"), "{out}");
}
