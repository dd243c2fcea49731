//! A live engine fed a sequence of datagrams cut from the input. The first bytes of each
//! record choose the channel, a time step and whether to refuse a returned write; bytes 8..24
//! of every datagram are overwritten with a known sender and the right key half of the time,
//! so the fuzzer gets past identity checks into the protocol logic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usnic_rs::proto::*;

fuzz_target!(|data: &[u8]| {
    let cfg = Config {
        local_id: 1,
        local_key: 11,
        window: 64,
        ..Config::default()
    };
    let mut e = Engine::new(cfg).unwrap();
    let peer = e.add_peer(
        Instant(0),
        PeerInfo {
            remote_id: 2,
            remote_key: 22,
            remote_isn: 0,
            remote_data_mtu: 1472,
            remote_rx_window: 0,
            remote_priority_mtu: 768,
        },
    );
    let _ = e.submit_send(Instant(0), peer, 1, vec![0; 5000], Cookie(1));
    let _ = e.submit_put(Instant(0), peer, 3, 0, vec![0; 100], Cookie(2));
    let _ = e.submit_get(Instant(0), peer, 3, 0, 4, 0, 100, Cookie(3));
    let mut now = 0u64;
    let mut buf = vec![0u8; 2048];
    let mut rest = data;
    while rest.len() >= 3 {
        let (ctl, len) = (
            rest[0],
            u16::from_le_bytes([rest[1], rest[2]]) as usize % 1600,
        );
        rest = &rest[3..];
        let n = len.min(rest.len());
        let mut dg = rest[..n].to_vec();
        rest = &rest[n..];
        if ctl & 1 == 0 && dg.len() >= 24 {
            dg[8..16].copy_from_slice(&2u64.to_le_bytes());
            dg[16..24].copy_from_slice(&11u64.to_le_bytes());
        }
        let ch = if ctl & 2 == 0 {
            Channel::Priority
        } else {
            Channel::Data
        };
        now += (ctl >> 4) as u64 * 100_000;
        let t = Instant(now);
        if let RxOutcome::Write { peer, .. } = e.handle_datagram(t, ch, &dg) {
            if ctl & 4 != 0 {
                e.refuse_write(t, peer);
            }
        }
        while let Some(ev) = e.poll_event() {
            if let Event::GetRequest {
                peer, request, len, ..
            } = ev
            {
                let d = if ctl & 8 != 0 && len < 4096 {
                    Ok(vec![0; len as usize])
                } else {
                    Err(())
                };
                e.answer_get(t, peer, request, d);
            }
        }
        if e.poll_timeout().is_some_and(|d| d <= t) {
            e.handle_timeout(t);
        }
        for c in [Channel::Priority, Channel::Data] {
            while let Some(x) = e.poll_transmit(t, c, &mut buf) {
                e.handle_send_complete(c);
                assert!(usnic_rs::proto::wire::parse(&buf[..x.len]).is_ok());
            }
        }
    }
});
