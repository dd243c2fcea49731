use super::*;

/// One valid sample of every packet kind, with payload.
pub(crate) fn samples() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let ack = Some(AckInfo {
        cum: 0x0002_fffa,
        sack: 0xdead_beef,
        snd_next: 0x0001_10e1,
        dsack: None,
        echo: 0x8000_0001,
        held: false,
    });
    let mk = |h: Header, payload: &[u8]| {
        let mut b = vec![0u8; h.header_len() + payload.len()];
        let n = h.emit(&mut b);
        b[n..].copy_from_slice(payload);
        b
    };
    let mut h = Header::new(Kind::Ack);
    h.ack = ack.map(|a| AckInfo {
        dsack: Some(0xfff0),
        ..a
    });
    h.src = 7;
    h.key = 9;
    h.payload_len = 3;
    out.push(mk(h, &[1, 2, 3]));
    let mut h = Header::new(Kind::Frag);
    h.tag = 65;
    h.seq = 0x0003_ffff;
    h.tx = 0xffff_fffe;
    h.ack = ack;
    h.src = u64::MAX;
    h.key = 1;
    h.payload_len = 5;
    out.push(mk(h, b"hello"));
    let mut h = Header::new(Kind::Chunk);
    h.tag = 3;
    h.seq = 12;
    h.tx = 3;
    h.id = 44;
    h.total = 100;
    h.offset = 96;
    h.payload_len = 4;
    out.push(mk(h, b"abcd"));
    let mut h = Header::new(Kind::Put);
    h.seq = 13;
    h.ack = ack;
    h.id = 45;
    h.total = 10;
    h.offset = 2;
    h.region = 0x1234;
    h.region_offset = 1 << 40;
    h.payload_len = 8;
    out.push(mk(h, b"12345678"));
    let mut h = Header::new(Kind::GetReq);
    h.seq = 14;
    h.id = 46;
    h.total = 1 << 20;
    h.region = 77;
    h.region_offset = 4096;
    out.push(mk(h, b""));
    let mut h = Header::new(Kind::GetReply);
    h.seq = 0xffff_000f;
    h.id = 46;
    h.total = 1 << 20;
    h.offset = 1000;
    h.payload_len = 2;
    out.push(mk(h, b"xy"));
    let mut h = Header::new(Kind::PutRefuse);
    h.seq = 16;
    h.id = 45;
    out.push(mk(h, b""));
    let mut h = Header::new(Kind::GetRefuse);
    h.seq = 17;
    h.id = 46;
    out.push(mk(h, b""));
    // Last, so the indices above stay: a held receiver's ACK (version 5), with a duplicate.
    let mut h = Header::new(Kind::Ack);
    h.ack = ack.map(|a| AckInfo {
        held: true,
        dsack: Some(3),
        ..a
    });
    h.src = 7;
    h.key = 9;
    out.push(mk(h, b""));
    out
}

#[test]
fn round_trip_every_kind() {
    for s in samples() {
        let (h, range) = parse(&s).expect("valid sample parses");
        assert_eq!(range.end, s.len());
        assert_eq!(range.start, h.header_len());
        let mut b = vec![0u8; h.header_len()];
        h.emit(&mut b);
        assert_eq!(
            &b[..],
            &s[..h.header_len()],
            "emit(parse(x)) == x for {:?}",
            h.kind
        );
    }
}

#[test]
fn every_truncated_prefix_rejected() {
    for s in samples() {
        let hl = parse(&s).unwrap().1.start;
        for n in 0..s.len() {
            // A cut header is short; a whole header with a cut payload has the wrong length.
            let want = if n < hl {
                ParseError::Short
            } else {
                ParseError::Length
            };
            assert_eq!(
                parse(&s[..n]).unwrap_err(),
                want,
                "prefix {n} of {:?}",
                s[1]
            );
        }
    }
}

#[test]
fn trailing_padding_ignored() {
    for s in samples() {
        let mut p = s.clone();
        p.extend_from_slice(&[0xee; 7]);
        let (_, r) = parse(&p).unwrap();
        assert_eq!(r.end, s.len());
    }
}

#[test]
fn field_rules() {
    let s = samples();
    let bad = |mut b: Vec<u8>, off: usize, v: u8| {
        b[off] = v;
        parse(&b).is_err()
    };
    assert!(bad(s[1].clone(), OFF_VERSION, 1), "version 1 has no epochs");
    assert!(bad(s[1].clone(), OFF_VERSION, 2), "version 2 has no D-SACK");
    assert!(
        bad(s[1].clone(), OFF_VERSION, 3),
        "version 3 has no transmission numbers"
    );
    assert!(
        bad(s[1].clone(), OFF_VERSION, 4),
        "version 4 knows no held receivers"
    );
    assert!(bad(s[1].clone(), OFF_VERSION, 6));
    assert!(bad(s[1].clone(), OFF_VERSION, 0));
    // The echo rides an ACK only; an Ack, sent on neither channel's behalf, has no number.
    assert!(bad(s[2].clone(), OFF_ECHO, 1));
    assert!(bad(s[2].clone(), OFF_ECHO + 3, 0x80));
    assert!(bad(s[0].clone(), OFF_TX, 1));
    assert!(!bad(s[1].clone(), OFF_TX, 0), "an unnumbered segment");
    assert!(
        !bad(s[1].clone(), OFF_ECHO, 0),
        "an ACK echoing nothing yet"
    );
    // the D-SACK bytes after the epochs: zero without the flag, the flag only beside ACK
    assert!(bad(s[1].clone(), OFF_DSACK, 1));
    assert!(bad(s[1].clone(), OFF_DSACK + 1, 0x80));
    assert!(bad(s[2].clone(), OFF_FLAGS, FLAG_DSACK));
    assert!(
        !bad(s[1].clone(), OFF_FLAGS, FLAG_ACK | FLAG_DSACK),
        "D-SACK of segment 0"
    );
    assert!(bad(s[1].clone(), OFF_FLAGS, 4));
    // epochs of ack fields must be zero without the ACK flag, the seq epoch zero for an Ack
    assert!(bad(s[2].clone(), OFF_ACK_EPOCH, 1));
    assert!(bad(s[2].clone(), OFF_SND_NEXT_EPOCH + 1, 1));
    assert!(bad(s[0].clone(), OFF_SEQ_EPOCH, 1));
    assert!(bad(s[0].clone(), OFF_SEQ_EPOCH + 1, 1));
    assert!(bad(s[1].clone(), OFF_KIND, 0));
    assert!(bad(s[1].clone(), OFF_KIND, 9));
    assert!(bad(s[1].clone(), OFF_FLAGS, 2));
    assert!(
        bad(s[2].clone(), OFF_SND_NEXT, 1),
        "snd_next must be 0 without the ACK flag"
    );
    assert!(bad(s[2].clone(), OFF_RESERVED1 + 3, 1));
    // ack fields must be zero without the flag
    assert!(bad(s[2].clone(), OFF_ACK, 1));
    // ACK without the flag, with a seq, with a tag
    assert!(bad(s[0].clone(), OFF_FLAGS, 0));
    assert!(bad(s[0].clone(), OFF_SEQ, 1));
    assert!(bad(s[0].clone(), OFF_TAG, 1));
    // chunk offset+len beyond total
    assert!(bad(s[2].clone(), OFF_OFFSET, 97));
    // chunk id zero
    let mut c = s[2].clone();
    put32(&mut c, OFF_ID, 0);
    assert!(parse(&c).is_err());
    // chunk total beyond the reassembly limit
    let mut c = s[2].clone();
    put32(&mut c, OFF_TOTAL, MAX_REASSEMBLY + 1);
    put32(&mut c, OFF_OFFSET, 0);
    assert!(parse(&c).is_err());
    // get reply total beyond the reassembly limit (the same limit as a chunk)
    let mut c = s[5].clone();
    put32(&mut c, OFF_TOTAL, MAX_REASSEMBLY + 1);
    assert!(parse(&c).is_err());
    put32(&mut c, OFF_TOTAL, MAX_REASSEMBLY);
    assert!(parse(&c).is_ok());
    // and a get request for more: its answer would be refused
    let mut c = s[4].clone();
    put32(&mut c, OFF_TOTAL, MAX_REASSEMBLY + 1);
    assert!(parse(&c).is_err());
    put32(&mut c, OFF_TOTAL, MAX_REASSEMBLY);
    assert!(parse(&c).is_ok());
    // put region offset overflowing
    let mut c = s[3].clone();
    put64(&mut c, OFF_REGION_OFFSET, u64::MAX - 3);
    assert!(parse(&c).is_err());
    // payload length beyond the datagram
    let mut c = s[1].clone();
    put16(&mut c, OFF_PAYLOAD_LEN, 6);
    assert!(parse(&c).is_err());
    // get request with payload
    let mut c = s[4].clone();
    put16(&mut c, OFF_PAYLOAD_LEN, 1);
    c.push(0);
    assert!(parse(&c).is_err());
    // refusal with a total
    let mut c = s[6].clone();
    put32(&mut c, OFF_TOTAL, 1);
    assert!(parse(&c).is_err());
    // oversized ack map
    let mut c = s[0].clone();
    put16(&mut c, OFF_PAYLOAD_LEN, (MAX_ACK_MAP + 1) as u16);
    c.resize(BASE_LEN + MAX_ACK_MAP + 1, 0);
    assert!(parse(&c).is_err());
}

#[test]
fn random_corruption_never_panics_and_accepted_reemits() {
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let s = samples();
    let mut accepted = 0;
    for i in 0..200_000 {
        let mut b = s[i % s.len()].clone();
        let flips = 1 + next() % 4;
        for _ in 0..flips {
            let pos = (next() as usize) % b.len();
            b[pos] ^= 1 << (next() % 8);
        }
        if next() % 5 == 0 {
            let n = (next() as usize) % (b.len() + 1);
            b.truncate(n);
        }
        if let Ok((h, r)) = parse(&b) {
            accepted += 1;
            assert!(r.end <= b.len() && r.start == h.header_len());
            let mut e = vec![0u8; h.header_len()];
            h.emit(&mut e);
            assert_eq!(&e[..], &b[..h.header_len()]);
        }
    }
    // Flipping payload bytes or free fields (seq, src, key, ...) keeps packets valid.
    assert!(accepted > 1000);
}

#[test]
fn epochs_round_trip_into_extended_values() {
    let s = samples();
    let (h, _) = parse(&s[1]).unwrap();
    assert_eq!(h.seq, 0x0003_ffff);
    assert_eq!(get16(&s[1], OFF_SEQ), 0xffff);
    assert_eq!(get16(&s[1], OFF_SEQ_EPOCH), 3);
    let a = h.ack.unwrap();
    assert_eq!((a.cum, a.snd_next), (0x0002_fffa, 0x0001_10e1));
    assert_eq!(get16(&s[1], OFF_ACK_EPOCH), 2);
    assert_eq!(get16(&s[1], OFF_SND_NEXT_EPOCH), 1);
    assert_eq!(parse(&s[5]).unwrap().0.seq, 0xffff_000f);
}

#[test]
fn transmission_number_and_echo_at_their_offsets() {
    let s = samples();
    let (h, _) = parse(&s[1]).unwrap();
    assert_eq!((h.tx, h.ack.unwrap().echo), (0xffff_fffe, 0x8000_0001));
    assert_eq!(get32(&s[1], OFF_TX), 0xffff_fffe);
    assert_eq!(get32(&s[1], OFF_ECHO), 0x8000_0001);
    let (h, r) = parse(&s[2]).unwrap();
    assert_eq!((h.tx, h.ack, r.start), (3, None, MSG_LEN));
    assert_eq!(get32(&s[2], OFF_ID), 44);
}

#[test]
fn region_fields_at_their_offsets() {
    let s = samples();
    let (h, r) = parse(&s[3]).unwrap();
    assert_eq!(
        (h.kind, h.region, h.region_offset),
        (Kind::Put, 0x1234, 1 << 40)
    );
    assert_eq!(r.start, REGION_LEN);
    assert_eq!(get64(&s[3], OFF_REGION), 0x1234);
    assert_eq!(get64(&s[3], OFF_REGION_OFFSET), 1 << 40);
    assert_eq!((get32(&s[3], OFF_ID), get32(&s[3], OFF_OFFSET)), (45, 2));
}

/// A well-formed version 1 datagram (32-byte header, no epochs) of every kind that has a
/// sample is rejected as a version error, whatever its length.
#[test]
fn version_1_datagrams_rejected() {
    for s in samples() {
        let mut v1 = s.clone();
        v1[OFF_VERSION] = 1;
        assert_eq!(parse(&v1), Err(ParseError::Version));
        // The v1 layout: base header 32 bytes (the v2 epoch bytes removed).
        let mut old = s[..32].to_vec();
        old.extend_from_slice(&s[40..]);
        old[OFF_VERSION] = 1;
        assert!(parse(&old).is_err());
        for n in 0..old.len() {
            assert!(parse(&old[..n]).is_err());
        }
    }
}

/// `HELD` (version 5): a standalone ACK's flag, round trip exact; nowhere else, never without
/// `ACK`, and a version 4 datagram carrying it is rejected as the other version it is.
#[test]
fn the_held_flag_rides_a_standalone_ack_only() {
    let s = samples();
    let held = s.last().unwrap().clone();
    let (h, r) = parse(&held).unwrap();
    let a = h.ack.unwrap();
    assert!(a.held && a.dsack == Some(3), "{a:?}");
    assert_eq!(held[OFF_FLAGS], FLAG_ACK | FLAG_DSACK | FLAG_HELD);
    let mut again = vec![0u8; r.end];
    assert_eq!(h.emit(&mut again), BASE_LEN);
    assert_eq!(again, held);
    // Without the duplicate: the flag alone beside ACK.
    let mut b = held.clone();
    b[OFF_FLAGS] = FLAG_ACK | FLAG_HELD;
    put16(&mut b, OFF_DSACK, 0);
    let (h, _) = parse(&b).unwrap();
    assert_eq!(h.ack.map(|a| (a.held, a.dsack)), Some((true, None)));
    // An ordinary ACK reads as not held.
    assert!(!parse(&s[0]).unwrap().0.ack.unwrap().held);
    let bad = |mut b: Vec<u8>, off: usize, v: u8| {
        b[off] = v;
        parse(&b).err()
    };
    // Never without ACK (an Ack without ACK fails its own rule first; a Frag has none).
    let mut bare = s[1].clone();
    for r in [
        OFF_ACK..OFF_ACK + 2,
        OFF_SND_NEXT..OFF_SND_NEXT + 2,
        OFF_SACK..OFF_SACK + 4,
        OFF_ACK_EPOCH..OFF_DSACK + 2,
        OFF_ECHO..OFF_ECHO + 4,
    ] {
        bare[r].fill(0);
    }
    bare[OFF_FLAGS] = 0;
    assert!(parse(&bare).is_ok(), "the segment without ACK information");
    assert_eq!(bad(bare, OFF_FLAGS, FLAG_HELD), Some(ParseError::Flags));
    // On a sequenced segment's piggy-backed ACK: rejected.
    for seg in &s[1..s.len() - 1] {
        if parse(seg).unwrap().0.ack.is_some() {
            assert_eq!(
                bad(seg.clone(), OFF_FLAGS, FLAG_ACK | FLAG_HELD),
                Some(ParseError::Field)
            );
        }
    }
    // The flag bits above HELD stay reserved.
    for bit in 3..8 {
        assert_eq!(
            bad(held.clone(), OFF_FLAGS, FLAG_ACK | 1 << bit),
            Some(ParseError::Flags)
        );
    }
    // A version 4 peer's datagrams, held flag or not, are another version's.
    assert_eq!(bad(held.clone(), OFF_VERSION, 4), Some(ParseError::Version));
    assert_eq!(bad(s[0].clone(), OFF_VERSION, 4), Some(ParseError::Version));
}
