//! `discover`: the udp provider's interfaces, filtering, MTU rule.
use usnic_rs::fabric::{discover, parse_if_list, FabricConfig, IPV4_UDP_HEADERS, MAX_UDP_PAYLOAD};

fn cfg() -> FabricConfig {
    FabricConfig {
        include_loopback: true,
        ..Default::default()
    }
}

fn names(c: &FabricConfig) -> Vec<String> {
    discover(c).unwrap().into_iter().map(|d| d.name).collect()
}

fn lo_if_mtu() -> usize {
    std::fs::read_to_string("/sys/class/net/lo/mtu")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn finds_lo_with_udp() {
    let devs = discover(&cfg()).unwrap();
    let lo = devs
        .iter()
        .find(|d| d.name == "lo")
        .expect("udp provider lists lo");
    assert_eq!(lo.ipv4, std::net::Ipv4Addr::LOCALHOST);
    assert_eq!(lo.netmask, std::net::Ipv4Addr::new(255, 0, 0, 0));
    assert!(lo.is_loopback);
    assert_eq!(lo.provider, "udp");
    assert_eq!(lo.if_mtu, lo_if_mtu());
    // The udp provider follows the interface MTU, not its advertised max_msg_size.
    assert_eq!(
        lo.mtu,
        (lo_if_mtu() - IPV4_UDP_HEADERS).min(MAX_UDP_PAYLOAD)
    );
    assert_eq!(lo.provider_max_msg_size, 1472);
    // One entry per interface, IPv4 only.
    let mut n: Vec<_> = devs.iter().map(|d| d.name.clone()).collect();
    n.dedup();
    assert_eq!(n.len(), devs.len());
    assert!(devs.iter().all(|d| !d.ipv4.is_unspecified()));
}

#[test]
fn loopback_only_when_asked() {
    let default = FabricConfig::default();
    assert!(!names(&default).contains(&"lo".to_string()));
    // Naming it in if_include is asking for it.
    let only_lo = FabricConfig {
        if_include: parse_if_list("lo").unwrap(),
        ..Default::default()
    };
    assert_eq!(names(&only_lo), vec!["lo"]);
}

#[test]
fn filter_by_name_and_cidr() {
    let c = |inc: &str, exc: &str| FabricConfig {
        if_include: parse_if_list(inc).unwrap(),
        if_exclude: parse_if_list(exc).unwrap(),
        ..cfg()
    };
    assert_eq!(names(&c("lo", "")), vec!["lo"]);
    assert_eq!(names(&c("127.0.0.0/8", "")), vec!["lo"]);
    assert_eq!(names(&c("127.0.0.1/32", "")), vec!["lo"]);
    assert!(names(&c("127.0.0.2/32", "")).is_empty());
    assert!(names(&c("nosuchif0", "")).is_empty());
    assert!(!names(&c("", "lo")).contains(&"lo".to_string()));
    assert!(!names(&c("", "127.0.0.0/8")).contains(&"lo".to_string()));
    assert!(names(&c("", "nosuchif0")).contains(&"lo".to_string()));
    let all = names(&cfg());
    let without_lo = names(&c("", "lo"));
    assert_eq!(without_lo.len() + 1, all.len());
}

#[test]
fn include_and_exclude_together_is_an_error() {
    let c = FabricConfig {
        if_include: parse_if_list("lo").unwrap(),
        if_exclude: parse_if_list("eth0").unwrap(),
        ..cfg()
    };
    let e = discover(&c).unwrap_err();
    assert!(e.to_string().contains("mutually exclusive"), "{e}");
}

#[test]
fn mtu_cap() {
    let capped = discover(&FabricConfig {
        mtu_cap: 9000,
        if_include: parse_if_list("lo").unwrap(),
        ..cfg()
    })
    .unwrap();
    assert_eq!(capped[0].mtu, 9000);
}

#[test]
fn unknown_provider_is_no_device() {
    let c = FabricConfig {
        provider: "no-such-provider".into(),
        ..cfg()
    };
    assert!(discover(&c).unwrap().is_empty());
    let bad = FabricConfig {
        provider: "ud\0p".into(),
        ..cfg()
    };
    assert!(discover(&bad).is_err());
}

#[test]
fn clock_is_monotonic_nanoseconds() {
    let a = usnic_rs::fabric::now();
    let t = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let b = usnic_rs::fabric::now();
    let real = t.elapsed().as_nanos() as u64;
    assert!(b.0 > a.0);
    let d = b.0 - a.0;
    assert!(d >= 20_000_000 && d <= real + 5_000_000, "{d} vs {real}");
}

/// The interface MTU is the one of the caller's network namespace. sysfs shows the namespace it
/// was mounted in (the host's here), so in a namespace whose `lo` has MTU 1500 discovery saw the
/// host's 65536 and gave 65507-byte datagrams. A thread of its own moves to a fresh network
/// namespace (only that thread; it needs root), where `ip` sets its `lo` to 1500.
#[test]
fn interface_mtu_is_the_callers_network_namespaces() {
    std::thread::spawn(|| {
        // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only the calling thread, and the
        // namespace goes away with it.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET): {} (this test needs root)",
            std::io::Error::last_os_error()
        );
        // A child forked from this thread starts in its namespace.
        let ip = std::process::Command::new("ip")
            .args(["link", "set", "lo", "mtu", "1500", "up"])
            .status()
            .expect("ip (iproute2)");
        assert!(ip.success(), "ip link set lo mtu 1500 up: {ip}");
        let lo = discover(&FabricConfig {
            if_include: parse_if_list("lo").unwrap(),
            ..cfg()
        })
        .unwrap()
        .into_iter()
        .next()
        .expect("lo in the new namespace");
        assert_eq!(
            (lo.if_mtu, lo.mtu),
            (1500, 1500 - IPV4_UDP_HEADERS),
            "{lo:?}"
        );
    })
    .join()
    .unwrap();
}
