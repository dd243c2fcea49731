//! Any bytes into the wire parser: never a panic; whatever is accepted re-emits identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usnic_rs::proto::wire;

fuzz_target!(|data: &[u8]| {
    if let Ok((h, r)) = wire::parse(data) {
        assert!(r.start == h.header_len() && r.end <= data.len());
        let mut e = vec![0u8; h.header_len()];
        h.emit(&mut e);
        assert_eq!(&e[..], &data[..h.header_len()]);
    }
});
