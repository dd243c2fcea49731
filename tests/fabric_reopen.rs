//! Modules close everything they open: drop then reopen works and leaks no file descriptor.
//! (One test in this binary, so no other test opens fds concurrently.)
use usnic_rs::fabric::{
    discover, parse_if_list, Completion, FabricConfig, Module, PeerAddr, Posted,
};
use usnic_rs::proto::Channel;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn one_way(from: &mut Module, to: &mut Module, peer: &PeerAddr) {
    let (id, buf) = from.tx_buffer(Channel::Data).unwrap();
    buf[..3].copy_from_slice(b"abc");
    let _ = from.post_send(Channel::Data, id, 3, peer).unwrap();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        to.poll(Channel::Data, 8, &mut out).unwrap();
        if let Some(&Completion::Recv { buf, len }) =
            out.iter().find(|c| matches!(c, Completion::Recv { .. }))
        {
            assert_eq!(to.rx_bytes(Channel::Data, buf, len), b"abc");
            to.repost(Channel::Data, buf);
            return;
        }
    }
    panic!("datagram lost");
}

fn exchange(cfg: &FabricConfig, leave_in_flight: bool) {
    let dev = discover(cfg).unwrap().into_iter().next().expect("lo");
    let mut a = Module::open(&dev, cfg).unwrap();
    let mut b = Module::open(&dev, cfg).unwrap();
    let pb = a.insert_peer(&b.local_address()).unwrap();
    let pa = b.insert_peer(&a.local_address()).unwrap();
    one_way(&mut a, &mut b, &pb);
    one_way(&mut b, &mut a, &pa);
    if leave_in_flight {
        // Unpolled send completions (where the provider sends), unflushed reposts, a datagram
        // waiting in b's socket, a lent send buffer: drop must still close everything.
        // (Longer than the inject size: injected sends leave no completion.)
        let long = a.inject_limit(Channel::Data) + 1;
        let want = if cfg.gso {
            Posted::Done
        } else {
            Posted::Pending
        };
        for _ in 0..5 {
            let (id, _) = a.tx_buffer(Channel::Data).unwrap();
            let posted = a.post_send(Channel::Data, id, long, &pb).unwrap();
            assert_eq!(posted, want);
        }
        let _lent = a.tx_buffer(Channel::Data).unwrap().0;
        drop(b);
        // Sending to a closed endpoint is not an error for UDP.
        let (id, _) = a.tx_buffer(Channel::Data).unwrap();
        let _ = a.post_send(Channel::Data, id, 10, &pb).unwrap();
    }
}

#[test]
fn drop_then_reopen_leaks_no_fd() {
    let cfg = FabricConfig {
        if_include: parse_if_list("lo").unwrap(),
        ..Default::default()
    };
    // Warm up: libfabric initialises its providers once per process.
    exchange(&cfg, false);
    let before = open_fds();
    // Sends on the socket, and through the provider (`gso` off).
    let provider_sends = FabricConfig {
        gso: false,
        ..cfg.clone()
    };
    for i in 0..20 {
        let c = if i % 4 < 2 { &cfg } else { &provider_sends };
        exchange(c, i % 2 == 1);
    }
    let after = open_fds();
    assert_eq!(
        before, after,
        "file descriptors leaked across 20 open/drop cycles"
    );
    // And failed opens release what they opened too.
    let dev = discover(&cfg).unwrap().into_iter().next().unwrap();
    let bad = FabricConfig {
        prio_rd_num: 0,
        ..cfg.clone()
    };
    assert!(Module::open(&dev, &bad).is_err());
    assert_eq!(open_fds(), before);
}
