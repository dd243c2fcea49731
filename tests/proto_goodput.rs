//! Goodput table (loss x window) kept as a reviewed plain-text snapshot:
//! `tests/snapshots/goodput.txt`, compared exactly. Regenerate after a deliberate protocol
//! change with `UPDATE_SNAPSHOTS=1 cargo test --release --test proto_goodput` and review the
//! diff.

mod sim;

use sim::*;

const LOSSES: [f64; 4] = [0.0, 0.01, 0.10, 0.30];
const WINDOWS: [u16; 3] = [16, 256, 4096];
const FRAGS: u64 = 150;
const FRAG_LEN: usize = 64 << 10;

struct Cell {
    gbps: f64,
    resends: u64,
    acks: u64,
}

fn cell(loss: f64, window: u16) -> Cell {
    let mut s = Sim::new(
        SimConfig::uniform(Link::lossy(loss), window),
        0x600d + window as u64,
    );
    for id in 0..FRAGS {
        s.send(0, id + 1, 1, FRAG_LEN);
    }
    assert!(
        s.run(5_000_000, 60_000_000_000),
        "loss {loss} window {window}: no quiescence"
    );
    let st = s.nodes[0].eng.stats();
    Cell {
        gbps: (FRAGS * FRAG_LEN as u64 * 8) as f64 / s.now as f64,
        resends: st.resends_fast + st.resends_timeout,
        acks: s.nodes[1].eng.stats().acks_alone,
    }
}

fn table() -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "# goodput of {FRAGS} x {} KiB fragments, one direction, 10 Gb/s NIC, 10 us one-way delay,\n\
         # independent loss on every link (data, priority, both directions).\n\
         # gbps = payload bits / simulated ns; ratio = vs. lossless at the same window;\n\
         # resends = sender retransmissions; acks = receiver standalone ACKs.\n",
        FRAG_LEN >> 10
    ));
    out.push_str(&format!(
        "{:>6} {:>6} {:>8} {:>6} {:>8} {:>7}\n",
        "loss", "window", "gbps", "ratio", "resends", "acks"
    ));
    for &w in &WINDOWS {
        let base = cell(0.0, w).gbps;
        for &l in &LOSSES {
            let c = cell(l, w);
            out.push_str(&format!(
                "{:>6.2} {:>6} {:>8.3} {:>6.3} {:>8} {:>7}\n",
                l,
                w,
                c.gbps,
                c.gbps / base,
                c.resends,
                c.acks
            ));
        }
    }
    out
}

#[test]
fn goodput_table_matches_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/goodput.txt");
    let got = table();
    eprint!("{got}");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &got).unwrap();
        return;
    }
    let want =
        std::fs::read_to_string(path).expect("snapshot missing: run with UPDATE_SNAPSHOTS=1");
    assert!(got == want, "goodput table changed; review and regenerate with UPDATE_SNAPSHOTS=1\n--- want\n{want}--- got\n{got}");
}
