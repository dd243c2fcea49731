//! `parse_if_list`: the original's if_include/if_exclude syntax.
use std::net::Ipv4Addr;
use usnic_rs::fabric::{parse_if_list, IfFilter};

fn cidr(a: [u8; 4], prefix: u8) -> IfFilter {
    IfFilter::Cidr {
        addr: Ipv4Addr::from(a),
        prefix,
    }
}

#[test]
fn names_and_cidrs() {
    assert_eq!(parse_if_list("").unwrap(), vec![]);
    assert_eq!(parse_if_list("  ").unwrap(), vec![]);
    assert_eq!(
        parse_if_list("eth0").unwrap(),
        vec![IfFilter::Name("eth0".into())]
    );
    assert_eq!(
        parse_if_list("eth0, lo,usnic_0").unwrap(),
        vec![
            IfFilter::Name("eth0".into()),
            IfFilter::Name("lo".into()),
            IfFilter::Name("usnic_0".into())
        ]
    );
    assert_eq!(
        parse_if_list("10.1.2.3/16").unwrap(),
        vec![cidr([10, 1, 0, 0], 16)]
    );
    assert_eq!(
        parse_if_list("192.0.2.2/32").unwrap(),
        vec![cidr([192, 0, 2, 2], 32)]
    );
    assert_eq!(
        parse_if_list("255.255.255.255/1").unwrap(),
        vec![cidr([128, 0, 0, 0], 1)]
    );
    assert_eq!(
        parse_if_list("eth0,127.0.0.1/8").unwrap(),
        vec![IfFilter::Name("eth0".into()), cidr([127, 0, 0, 0], 8)]
    );
}

#[test]
fn rejects_bad_tokens_naming_them() {
    for (input, needle) in [
        ("eth0,,lo", "empty"),
        (",eth0", "empty"),
        ("eth0,", "empty"),
        ("10.0.0.0/0", "\"0\""),
        ("10.0.0.0/33", "\"33\""),
        ("10.0.0.0/", "\"\""),
        ("10.0.0.0/x", "\"x\""),
        ("10.0.0.0", "10.0.0.0"),
        ("10.0.0/8", "10.0.0"),
        ("300.1.1.1/8", "300.1.1.1"),
        ("1.2.3.4.5/8", "1.2.3.4.5"),
        ("eth 0", "eth 0"),
        ("-eth0", "-eth0"),
        ("eth0,10.0.0.1/40", "40"),
    ] {
        let err = parse_if_list(input).expect_err(input);
        assert!(
            err.contains(needle),
            "error for {input:?} should mention {needle:?}: {err}"
        );
    }
}

#[test]
fn matching() {
    let f = parse_if_list("lo,192.0.2.0/24").unwrap();
    assert!(f[0].matches("lo", Ipv4Addr::new(127, 0, 0, 1)));
    assert!(!f[0].matches("lo0", Ipv4Addr::new(127, 0, 0, 1)));
    assert!(f[1].matches("eth0", Ipv4Addr::new(192, 0, 2, 2)));
    assert!(!f[1].matches("eth0", Ipv4Addr::new(192, 0, 3, 2)));
    let wide = parse_if_list("192.0.0.0/16").unwrap();
    assert!(wide[0].matches("eth0", Ipv4Addr::new(192, 0, 2, 2)));
}
