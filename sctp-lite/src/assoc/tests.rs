//! Unit tests of the association and the listener: the handshake, the
//! State Cookie, verification tags, DATA and SACK, in place delivery, the
//! send queue's spares and external chunks, unknown chunks and TSN
//! serial arithmetic.

use super::*;

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        ..Config::default()
    }
}

/// Runs the handshake by hand; returns (client, server).
fn pair() -> (Association, Association) {
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let mut l = Listener::new(cfg(2)).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut out = vec![0u8; 2048];
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!("no INIT-ACK")
    };
    c.handle_packet(0, &out[..m]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Accept(mut s) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!("no accept")
    };
    let n = s.poll_transmit(0, &mut buf).unwrap();
    c.handle_packet(0, &buf[..n]);
    assert_eq!(c.state(), State::Established);
    (c, *s)
}

#[test]
fn cookie_round_trips_and_rejects_forgery_and_age() {
    let key = [7u8; 16];
    let c = Cookie {
        created: 1_000,
        local_tag: 1,
        peer_tag: 2,
        local_tsn: 3,
        peer_tsn: 4,
        peer_rwnd: 5,
        out_streams: 6,
        in_streams: 7,
        local_port: 8,
        peer_port: 9,
        peer_adaptation: Some(1),
        local_tie_tag: 10,
        peer_tie_tag: 11,
    };
    let b = c.encode(&key, Addrs::default());
    assert_eq!(
        Cookie::decode(&b, &key, Addrs::default(), 2_000, 10_000),
        Some(c)
    );
    // Another key: MAC fails (RFC 9260 §5.1.5 step 2).
    assert_eq!(
        Cookie::decode(&b, &[8u8; 16], Addrs::default(), 2_000, 10_000),
        None
    );
    // Any flipped bit: MAC fails.
    for i in 0..COOKIE_LEN {
        let mut f = b;
        f[i] ^= 0x10;
        assert_eq!(
            Cookie::decode(&f, &key, Addrs::default(), 2_000, 10_000),
            None,
            "bit flip at {i} accepted"
        );
    }
    // Stale (step 3), and from the future.
    assert_eq!(
        Cookie::decode(&b, &key, Addrs::default(), 20_000, 10_000),
        None
    );
    assert_eq!(
        Cookie::decode(&b, &key, Addrs::default(), 999, 10_000),
        None
    );
    // Wrong length.
    assert_eq!(
        Cookie::decode(&b[..COOKIE_LEN - 1], &key, Addrs::default(), 2_000, 10_000),
        None
    );
}

#[test]
fn handshake_agrees_on_tags_and_listener_checks_the_cookie_key() {
    let (c, s) = pair();
    assert_eq!(c.peer_tag(), s.local_tag());
    assert_eq!(s.peer_tag(), c.local_tag());
    assert_ne!(c.local_tag(), 0);
    // A COOKIE-ECHO for a listener with another secret is dropped.
    let mut c2 = Association::connect(cfg(1), 1000, 2000, 0, 5).unwrap();
    let mut l = Listener::new(cfg(2)).unwrap();
    let mut other = Listener::new(cfg(3)).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = c2.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!()
    };
    c2.handle_packet(0, &out[..m]);
    let n = c2.poll_transmit(0, &mut buf).unwrap();
    assert!(matches!(
        other.handle_packet(0, &buf[..n], &mut out),
        ListenOutcome::Drop
    ));
    // And the right listener refuses it once stale (Valid.Cookie.Life 60 s).
    assert!(matches!(
        l.handle_packet(61 * SEC, &buf[..n], &mut out),
        ListenOutcome::Drop
    ));
    assert!(matches!(
        l.handle_packet(SEC, &buf[..n], &mut out),
        ListenOutcome::Accept(_)
    ));
}

#[test]
fn wrong_verification_tag_is_discarded() {
    let (mut c, mut s) = pair();
    assert_eq!(s.poll_event(), Some(Event::Connected));
    c.send(0, 1, false, b"x").unwrap();
    let mut buf = vec![0u8; 2048];
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let mut bad = buf[..n].to_vec();
    let mut p = SctpPacket::new_unchecked(&mut bad[..]);
    p.set_verification_tag(s.local_tag() ^ 1);
    p.fill_checksum();
    s.handle_packet(0, &bad);
    assert_eq!(s.stats().packets_discarded, 1);
    assert!(s.poll_event().is_none());
    // ABORT with the T bit must carry the peer's tag, not ours.
    let (ab, m) = wire::error_cause(cause_code::USER_INITIATED_ABORT, &[]);
    let h = HeaderRepr {
        src_port: 1000,
        dst_port: 2000,
        verification_tag: s.local_tag(),
    };
    let k = emit_one(
        h,
        &ChunkRepr::Abort {
            t_bit: true,
            causes: &ab[..m],
        },
        &mut buf,
    )
    .unwrap();
    s.handle_packet(0, &buf[..k]);
    assert_eq!(s.state(), State::Established);
    // The right one is accepted.
    let h = HeaderRepr {
        src_port: 1000,
        dst_port: 2000,
        verification_tag: c.local_tag(),
    };
    let k = emit_one(
        h,
        &ChunkRepr::Abort {
            t_bit: true,
            causes: &ab[..m],
        },
        &mut buf,
    )
    .unwrap();
    s.handle_packet(0, &buf[..k]);
    assert_eq!(s.state(), State::Closed);
}

#[test]
fn slow_start_grows_cwnd_and_t3_collapses_it() {
    let (mut c, mut s) = pair();
    let mtu = c.cfg.max_packet;
    let initial = c.cwnd();
    assert_eq!(initial, (4 * mtu).min((2 * mtu).max(4380)));
    let mut buf = vec![0u8; 2048];
    let mut now = 0;
    for i in 0..40u32 {
        c.send(0, i, false, &[i as u8; 1000]).unwrap();
    }
    for _ in 0..20 {
        while let Some(n) = c.poll_transmit(now, &mut buf) {
            s.handle_packet(now, &buf[..n]);
        }
        now += 300 * MS;
        s.handle_timeout(now);
        while let Some(n) = s.poll_transmit(now, &mut buf) {
            c.handle_packet(now, &buf[..n]);
        }
    }
    assert!(
        c.cwnd() > initial,
        "cwnd {} did not grow from {initial}",
        c.cwnd()
    );
    assert_eq!(c.send_buffered(), 0);
    // Now lose everything: T3 fires, cwnd drops to one MTU (§6.3.3 E1).
    c.send(0, 99, false, &[1; 500]).unwrap();
    assert!(c.poll_transmit(now, &mut buf).is_some());
    let rto = c.rto();
    let t = c.poll_timeout().unwrap();
    assert!(t <= now + rto);
    c.handle_timeout(t);
    assert_eq!(c.cwnd(), mtu);
    assert_eq!(c.stats().t3_expiries, 1);
    assert_eq!(c.rto(), (rto * 2).min(c.cfg.rto_max));
    // The retransmission goes out at once.
    assert!(c.poll_transmit(t, &mut buf).is_some());
    assert_eq!(c.stats().retransmits, 1);
}

#[test]
fn oversized_message_from_peer_aborts_instead_of_stalling() {
    let mut sc = cfg(2);
    sc.max_message = 4000;
    sc.recv_buffer = 64 * 1024;
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let mut l = Listener::new(sc).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!()
    };
    c.handle_packet(0, &out[..m]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Accept(mut s) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!()
    };
    let n = s.poll_transmit(0, &mut buf).unwrap();
    c.handle_packet(0, &buf[..n]);
    c.send(1, 0, false, &[0; 10_000]).unwrap();
    while let Some(n) = c.poll_transmit(0, &mut buf) {
        s.handle_packet(0, &buf[..n]);
    }
    assert_eq!(s.state(), State::Closed);
    let mut reason = None;
    while let Some(e) = s.poll_event() {
        if let Event::Closed(r) = e {
            reason = Some(r);
        }
    }
    assert_eq!(
        reason,
        Some(CloseReason::ProtocolError(cause_code::OUT_OF_RESOURCE))
    );
}

/// A packet to `s` holding one DATA chunk written as octets (RFC 9260
/// §3.3.1): type 0, flags, length, TSN, stream, SSN, PPID, payload
/// (padded to 4), behind the common header with its CRC32c.
fn data_packet(s: &Association, flags: u8, tsn: u32, stream: u16, ssn: u16, p: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&s.peer_port().to_be_bytes());
    b.extend_from_slice(&s.local_port().to_be_bytes());
    b.extend_from_slice(&s.local_tag().to_be_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&[0x00, flags]);
    b.extend_from_slice(&(16 + p.len() as u16).to_be_bytes());
    b.extend_from_slice(&tsn.to_be_bytes());
    b.extend_from_slice(&stream.to_be_bytes());
    b.extend_from_slice(&ssn.to_be_bytes());
    b.extend_from_slice(&[0, 0, 0, 16]); // PPID 16
    b.extend_from_slice(p);
    b.resize(b.len().next_multiple_of(4), 0);
    let mut pkt = SctpPacket::new_unchecked(&mut b[..]);
    pkt.fill_checksum();
    b
}

/// Whole chunks due now are handed to the receiver in place (no
/// event, nothing held, acknowledged as usual); fragments, an ordered
/// chunk ahead of its SSN and chunks behind a waiting event take the
/// reassembly path.
#[test]
fn whole_chunks_are_delivered_in_place_the_rest_reassembled() {
    let (_c, mut s) = pair();
    assert_eq!(s.poll_event(), Some(Event::Connected));
    let tsn0 = (s.rx_cum as u32).wrapping_add(1);
    let mut took: Vec<(u16, bool, Vec<u8>)> = Vec::new();
    let mut rx = |m: MessageRef<'_>| {
        took.push((m.stream, m.unordered, m.data.to_vec()));
        true
    };
    // U|B|E (0x07): unordered, whole.
    s.handle_packet_with(0, &data_packet(&s, 0x07, tsn0, 0, 0, b"abc"), &mut rx);
    // B|E (0x03), ordered, SSN 0 = the next of stream 1.
    s.handle_packet_with(0, &data_packet(&s, 0x03, tsn0 + 1, 1, 0, b"de"), &mut rx);
    assert_eq!(s.stats().data_in_place, 2);
    assert_eq!(s.recv_buffered(), 0, "nothing held or charged");
    assert_eq!(s.rx_cum as u32, tsn0 + 1, "both TSNs received (§6.2)");
    // Ordered SSN 2 on stream 1 is ahead of SSN 1: held, not offered.
    s.handle_packet_with(0, &data_packet(&s, 0x03, tsn0 + 2, 1, 2, b"g"), &mut rx);
    // A B fragment then its E (0x06 = U|B, 0x05 = U|E): reassembled.
    s.handle_packet_with(0, &data_packet(&s, 0x06, tsn0 + 3, 0, 0, b"hi"), &mut rx);
    s.handle_packet_with(0, &data_packet(&s, 0x05, tsn0 + 4, 0, 0, b"jk"), &mut rx);
    assert_eq!(s.stats().data_in_place, 2);
    // SSN 1 of stream 1 arrives whole but an event (the reassembled
    // message) waits: it must not overtake it, so it is queued too,
    // and SSN 2 behind it.
    s.handle_packet_with(0, &data_packet(&s, 0x03, tsn0 + 5, 1, 1, b"f"), &mut rx);
    assert_eq!(s.stats().data_in_place, 2);
    let mut evs = Vec::new();
    while let Some(e) = s.poll_event() {
        if let Event::Message(m) = e {
            evs.push((m.stream, m.data));
        }
    }
    assert_eq!(
        evs,
        vec![
            (0, b"hijk".to_vec()),
            (1, b"f".to_vec()),
            (1, b"g".to_vec())
        ]
    );
    assert_eq!(s.recv_buffered(), 0);
    // Nothing waits now: the next one goes in place again, SSN 3.
    s.handle_packet_with(0, &data_packet(&s, 0x03, tsn0 + 6, 1, 3, b"l"), &mut rx);
    // A duplicate is acknowledged, never offered (§6.2).
    s.handle_packet_with(0, &data_packet(&s, 0x07, tsn0, 0, 0, b"abc"), &mut rx);
    // Declined by the receiver: queued as usual.
    s.handle_packet_with(0, &data_packet(&s, 0x07, tsn0 + 7, 0, 0, b"m"), &mut |_| {
        false
    });
    assert_eq!(s.stats().data_in_place, 3);
    assert_eq!(s.stats().dup_data_received, 1);
    assert!(matches!(s.poll_event(), Some(Event::Message(m)) if m.data == b"m"));
    assert_eq!(
        took,
        vec![
            (0, true, b"abc".to_vec()),
            (1, false, b"de".to_vec()),
            (1, false, b"l".to_vec())
        ]
    );
    assert_eq!(s.rx_cum as u32, tsn0 + 7);
}

/// `send_owned`: the vector becomes one DATA chunk's payload (the
/// chunk as octets below), a longer one is cut into fragments like
/// `send`, a refused one comes back.
#[test]
fn send_owned_queues_the_vector_as_one_chunk() {
    let (mut c, _s) = pair();
    let tsn = c.send_owned(1, 16, true, b"abcd".to_vec()).unwrap();
    let mut b = vec![0u8; 2048];
    let n = c.poll_transmit(0, &mut b).unwrap();
    let t = tsn.to_be_bytes();
    #[rustfmt::skip]
    let want = [
        0x00, 0x07, 0x00, 0x14, // DATA, U|B|E, length 20 (§3.3.1)
        t[0], t[1], t[2], t[3], // TSN
        0x00, 0x01, 0x00, 0x00, // stream 1, SSN 0 (unordered)
        0x00, 0x00, 0x00, 0x10, // PPID 16
        b'a', b'b', b'c', b'd',
    ];
    assert_eq!(&b[COMMON_HEADER_LEN..n], &want[..]);
    // Longer than one chunk: fragments B, -, E (§6.9).
    let per = c.max_chunk_payload();
    let last = c.send_owned(0, 16, true, vec![7; 2 * per + 1]).unwrap();
    assert_eq!(last, tsn.wrapping_add(3), "TSN of the last fragment");
    // Refused: the vector comes back.
    let (e, v) = c.send_owned(100, 16, true, b"xy".to_vec()).unwrap_err();
    assert_eq!(v, b"xy");
    assert!(matches!(e, SendError::InvalidStream { stream: 100, .. }));
}

/// A chunk with external payload (`send_ext`): its prefix, then the
/// tail the fill writes, under one DATA header whose length covers
/// both (§3.3.1), padded; counted in the send buffer until SACKed;
/// refilled at a retransmission; a fill that fails leaves the chunk
/// out and says so.
#[test]
fn an_external_chunk_is_written_by_the_fill_at_each_transmission() {
    let (mut c, mut s) = pair();
    let tsn = c.send_ext(1, 16, true, &[0xAA, 0xBB], 77, 5).unwrap();
    assert_eq!(c.send_buffered(), 7);
    let mut b = vec![0u8; 2048];
    let mut fills = Vec::new();
    let mut fill = |key: u64, dst: &mut [u8]| {
        fills.push((key, dst.len()));
        dst.copy_from_slice(b"hello");
        true
    };
    let n = c.poll_transmit_with(0, &mut b, &mut fill).unwrap();
    let t = tsn.to_be_bytes();
    #[rustfmt::skip]
    let want = [
        0x00, 0x07, 0x00, 0x17, // DATA, U|B|E, length 23 = 16 + 2 + 5
        t[0], t[1], t[2], t[3], // TSN
        0x00, 0x01, 0x00, 0x00, // stream 1, SSN 0 (unordered)
        0x00, 0x00, 0x00, 0x10, // PPID 16
        0xAA, 0xBB, b'h', b'e', b'l', b'l', b'o', 0x00, // padding to 4
    ];
    assert_eq!(&b[COMMON_HEADER_LEN..n], &want[..]);
    assert_eq!(fills, [(77, 5)]);
    // The peer takes it as a 7-octet message.
    s.handle_packet(0, &b[..n]);
    let got = core::iter::from_fn(|| s.poll_event())
        .find_map(|e| match e {
            Event::Message(m) => Some(m.data),
            _ => None,
        })
        .expect("delivered");
    assert_eq!(got, [0xAA, 0xBB, b'h', b'e', b'l', b'l', b'o']);
    // Lost: the T3-rtx timeout resends it, written by the fill again.
    let (mut c, _s) = pair();
    c.send_ext(0, 16, true, &[1, 2], 9, 3).unwrap();
    let mut fills = 0;
    let mut fill = |_: u64, dst: &mut [u8]| {
        fills += 1;
        dst.fill(3);
        true
    };
    assert!(c.poll_transmit_with(0, &mut b, &mut fill).is_some());
    let rto = c.rto();
    c.handle_timeout(rto + 1);
    assert!(c.poll_transmit_with(rto + 1, &mut b, &mut fill).is_some());
    assert_eq!(fills, 2, "refilled for the retransmission");
    // A fill that fails: the association ends, an ABORT in the
    // packet's place (no DATA), and the flag.
    let (mut c, _s) = pair();
    c.send_ext(0, 16, true, &[], 1, 100).unwrap();
    assert!(!c.ext_failed());
    let n = c.poll_transmit_with(0, &mut b, &mut |_, _| false).unwrap();
    assert_eq!(b[COMMON_HEADER_LEN], 6, "ABORT (§3.3.7)");
    assert_eq!(n, COMMON_HEADER_LEN + 8, "the ABORT and its cause alone");
    assert!(c.ext_failed());
    assert!(c.is_closed());
    assert_eq!(c.poll_transmit_with(0, &mut b, &mut |_, _| false), None);
    // One chunk at most, and the prefix bounded.
    let (mut c, _s) = pair();
    let per = c.max_chunk_payload();
    assert!(matches!(
        c.send_ext(0, 16, true, &[], 1, per + 1),
        Err(SendError::TooLarge { .. })
    ));
    assert!(matches!(
        c.send_ext(0, 16, true, &[0; EXT_PREFIX_MAX + 1], 1, 1),
        Err(SendError::TooLarge { .. })
    ));
}

/// An acknowledged external chunk leaves the send buffer and the
/// flight, as an owned one does.
#[test]
fn an_acknowledged_external_chunk_frees_its_room() {
    let (mut c, mut s) = pair();
    let mut b = vec![0u8; 2048];
    let tsn = c.send_ext(0, 16, true, &[1, 2], 5, 1000).unwrap();
    assert_eq!(c.send_buffered(), 1002);
    let mut fill = |_: u64, dst: &mut [u8]| {
        dst.fill(9);
        true
    };
    let mut now = 0;
    for _ in 0..4 {
        now += 1_000_000_000;
        while let Some(n) = c.poll_transmit_with(now, &mut b, &mut fill) {
            s.handle_packet(now, &b[..n]);
        }
        s.handle_timeout(now);
        while let Some(k) = s.poll_transmit(now, &mut b) {
            c.handle_packet(now, &b[..k]);
        }
    }
    assert!(c.is_acked(tsn));
    assert_eq!(c.send_buffered(), 0);
    assert_eq!(c.flight, 0);
}

/// Payload vectors come back for reuse once SACKed: only those of
/// at least `SPARE_MIN` capacity, within a quarter of the send buffer
/// and `SPARE_CAPACITY`, with their old contents (the caller
/// overwrites them).
#[test]
fn acknowledged_payload_vectors_come_back_within_the_bound() {
    let (mut c, mut s) = pair();
    let mut b = vec![0u8; 2048];
    assert_eq!(c.take_spare(), None);
    let per = c.max_chunk_payload();
    // Everything sent goes across; the delayed SACK's timer fires (a
    // second later each time); until nothing moves.
    let mut now = 0;
    let mut exchange = |c: &mut Association, s: &mut Association, b: &mut Vec<u8>| loop {
        now += 1_000_000_000;
        let mut moved = false;
        while let Some(n) = c.poll_transmit(now, b) {
            s.handle_packet(now, &b[..n]);
            moved = true;
        }
        s.handle_timeout(now);
        while let Some(k) = s.poll_transmit(now, b) {
            c.handle_packet(now, &b[..k]);
            moved = true;
        }
        if !moved {
            break;
        }
    };
    // Too small to keep.
    c.send_owned(0, 16, true, vec![1; 8]).unwrap();
    exchange(&mut c, &mut s, &mut b);
    assert_eq!(c.send_buffered(), 0, "acknowledged");
    assert_eq!(c.take_spare(), None);
    // One of a segment's size comes back, contents and all.
    let mut v = Vec::with_capacity(per);
    v.resize(per, 5);
    let ptr = v.as_ptr();
    c.send_owned(0, 16, true, v).unwrap();
    exchange(&mut c, &mut s, &mut b);
    assert_eq!(c.send_buffered(), 0, "acknowledged");
    let back = c.take_spare().expect("a spare");
    assert_eq!((back.as_ptr(), back.len(), back[0]), (ptr, per, 5));
    assert_eq!(c.take_spare(), None);
    // The bound: never more capacity kept than a quarter of the send
    // buffer or SPARE_CAPACITY.
    let bound = SPARE_CAPACITY.min(c.cfg.send_buffer / 4);
    for _ in 0..bound / per + 4 {
        c.send_owned(0, 16, true, vec![2; per]).unwrap();
    }
    exchange(&mut c, &mut s, &mut b);
    assert_eq!(c.send_buffered(), 0, "all acknowledged");
    assert!(c.spare_capacity <= bound, "{} > {bound}", c.spare_capacity);
    let mut kept = 0;
    while let Some(v) = c.take_spare() {
        kept += v.capacity();
    }
    assert!(kept + per > bound && kept <= bound, "{kept} of {bound}");
    assert_eq!(c.spare_capacity, 0);
}

/// While data is queued, spares may fill the room the send queue does
/// not use (queue and spares never above the send buffer), beyond the
/// idle bound, so a stream reuses every vector; once the queue is
/// empty they are cut back to the idle bound.
#[test]
fn spares_fill_the_room_the_queue_leaves_and_shrink_when_it_empties() {
    let (mut c, mut s) = pair();
    let mut b = vec![0u8; 2048];
    let per = c.max_chunk_payload();
    let bound = SPARE_CAPACITY.min(c.cfg.send_buffer / 4);
    let n = 2 * bound / per + 8;
    assert!(n * per < c.cfg.send_buffer, "fits the send buffer");
    for _ in 0..n {
        c.send_owned(0, 16, true, vec![3; per]).unwrap();
    }
    let (mut now, mut most, mut rounds) = (0u64, 0usize, 0);
    while c.send_buffered() > 0 {
        rounds += 1;
        assert!(rounds < 10_000, "the transfer ends");
        now += 1_000_000_000;
        while let Some(k) = c.poll_transmit(now, &mut b) {
            s.handle_packet(now, &b[..k]);
        }
        s.handle_timeout(now);
        while let Some(k) = s.poll_transmit(now, &mut b) {
            c.handle_packet(now, &b[..k]);
            assert!(
                c.spare_capacity + c.send_buffered() <= c.cfg.send_buffer,
                "queue {} and spares {} within the send buffer",
                c.send_buffered(),
                c.spare_capacity
            );
            if c.send_buffered() > 0 {
                most = most.max(c.spare_capacity);
            }
        }
    }
    assert!(
        most > bound,
        "spares beyond the idle bound while queued: {most}"
    );
    assert!(c.spare_capacity <= bound, "cut back: {}", c.spare_capacity);
}

/// An unordered whole chunk past a gap (TSN out of order) is due too
/// (§6.6: unordered delivery ignores sequence); the gap is SACKed.
#[test]
fn whole_unordered_chunk_past_a_gap_goes_in_place_and_the_gap_is_reported() {
    let (_c, mut s) = pair();
    assert_eq!(s.poll_event(), Some(Event::Connected));
    let tsn0 = (s.rx_cum as u32).wrapping_add(1);
    let mut n = 0;
    s.handle_packet_with(0, &data_packet(&s, 0x07, tsn0 + 1, 0, 0, b"x"), &mut |_| {
        n += 1;
        true
    });
    assert_eq!((n, s.stats().data_in_place), (1, 1));
    assert_eq!(s.stats().out_of_order_data, 1);
    assert_eq!(s.rx_cum as u32, tsn0.wrapping_sub(1));
    let mut b = vec![0u8; 2048];
    let k = s
        .poll_transmit(0, &mut b)
        .expect("SACK at once on a gap (§6.7)");
    let p = SctpPacket::new_checked(&b[..k]).unwrap();
    let c = p.chunks().next().unwrap().unwrap();
    let ChunkRepr::Sack(sack) = ChunkRepr::parse(&c).unwrap() else {
        panic!("not a SACK")
    };
    assert_eq!(sack.cum_tsn_ack, tsn0.wrapping_sub(1));
    assert_eq!(sack.gap_blocks.iter().collect::<Vec<_>>(), vec![(2, 2)]);
}

#[test]
fn send_checks_stream_size_and_state() {
    let (mut c, _s) = pair();
    let (os, _) = c.streams();
    assert_eq!(
        c.send(os, 0, false, b"x"),
        Err(SendError::InvalidStream {
            stream: os,
            streams: os
        })
    );
    assert_eq!(c.send(0, 0, false, b""), Err(SendError::Empty));
    let big = vec![0u8; c.cfg.max_message + 1];
    assert!(matches!(
        c.send(0, 0, false, &big),
        Err(SendError::TooLarge { .. })
    ));
    c.abort();
    assert_eq!(c.send(0, 0, false, b"x"), Err(SendError::NotEstablished));
}

/// Packet from `c` to `s` with `chunks`, tag and ports right.
fn packet_to(s: &Association, chunks: &[ChunkRepr<'_>]) -> Vec<u8> {
    let h = HeaderRepr {
        src_port: s.peer_port(),
        dst_port: s.local_port(),
        verification_tag: s.local_tag(),
    };
    let mut b = vec![0u8; 2048];
    let n = wire::emit_packet(&h, chunks, &mut b).unwrap();
    b.truncate(n);
    b
}

/// Chunks of the next packet `a` sends.
fn sent_chunk_types(a: &mut Association) -> Vec<u8> {
    let mut b = vec![0u8; 2048];
    let Some(n) = a.poll_transmit(0, &mut b) else {
        return vec![];
    };
    let p = SctpPacket::new_checked(&b[..n]).unwrap();
    p.chunks().map(|c| c.unwrap().ty).collect()
}

#[test]
fn unknown_chunks_follow_their_upper_two_bits() {
    // RFC 9260 §3.2: 00 stop, 01 stop + report, 10 skip, 11 skip + report.
    for (ty, delivered, reported) in [
        (0x3f, false, false),
        (0x7f, false, true),
        (0xbf, true, false),
        (0xff, true, true),
    ] {
        let (c, mut s) = pair();
        while s.poll_event().is_some() {}
        let data = ChunkRepr::Data(DataRepr {
            flags: DataFlags {
                immediate: true,
                unordered: true,
                begin: true,
                end: true,
            },
            tsn: c.init_tsn,
            stream_id: 0,
            ssn: 0,
            ppid: 1,
            payload: b"after",
        });
        let p = packet_to(
            &s,
            &[
                ChunkRepr::Unknown {
                    ty,
                    flags: 0,
                    value: b"??",
                },
                data,
            ],
        );
        s.handle_packet(0, &p);
        let got = matches!(s.poll_event(), Some(Event::Message(_)));
        assert_eq!(got, delivered, "type {ty:#x}");
        let types = sent_chunk_types(&mut s);
        assert_eq!(
            types.contains(&chunk_type::ERROR),
            reported,
            "type {ty:#x}: {types:?}"
        );
    }
}

#[test]
fn init_ack_reports_unrecognized_parameters() {
    let mut l = Listener::new(cfg(2)).unwrap();
    // An INIT with Forward-TSN-Supported (0xC000: skip and report).
    let b = [
        0x13, 0x88, 0x00, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, // header
        0x01, 0x00, 0x00, 0x18, 0x11, 0x22, 0x33, 0x44, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x01, 0xc0, 0x00, 0x00, 0x04,
    ];
    let mut b = b.to_vec();
    let mut p = SctpPacket::new_unchecked(&mut b[..]);
    p.fill_checksum();
    let mut out = vec![0u8; 2048];
    let ListenOutcome::Reply(n) = l.handle_packet(0, &b, &mut out) else {
        panic!("no INIT-ACK")
    };
    let p = SctpPacket::new_checked(&out[..n]).unwrap();
    p.verify_checksum().unwrap();
    assert_eq!(
        p.verification_tag(),
        0x1122_3344,
        "§8.5.1: the INIT's Initiate Tag"
    );
    let c = p.chunks().next().unwrap().unwrap();
    let ChunkRepr::InitAck(ia) = ChunkRepr::parse(&c).unwrap() else {
        panic!("not INIT-ACK")
    };
    assert_eq!(
        ia.params.unrecognized_reported,
        Some(&[0xc0, 0x00, 0x00, 0x04][..])
    );
    assert_eq!(ia.params.state_cookie.map(|c| c.len()), Some(COOKIE_LEN));
    // The INIT-ACK offers our own counts; the cookie records what both
    // sides will use, min(our OS, their MIS) and min(our MIS, their OS)
    // (§5.1.1): 2 each.
    assert_eq!(ia.num_outbound_streams, 16);
    let ck = Cookie::decode(
        ia.params.state_cookie.unwrap(),
        &cfg(2).secret,
        Addrs::default(),
        0,
        SEC,
    )
    .unwrap();
    assert_eq!(
        (ck.out_streams, ck.in_streams, ck.peer_tag, ck.peer_tsn),
        (2, 2, 0x1122_3344, 1)
    );
}

#[test]
fn data_crosses_the_tsn_wrap() {
    // The client's initial TSN just below 2^32: its DATA chunks wrap to
    // 0, exercising the sender's serial arithmetic and the receiver's
    // unwrapping, with fragmented and unfragmented, ordered and
    // unordered messages, and a lost packet in the middle.
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let start = u32::MAX - 3;
    c.init_tsn = start;
    c.next_tsn = start;
    c.peer_cum_ack = start.wrapping_sub(1);
    let mut l = Listener::new(cfg(2)).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!()
    };
    c.handle_packet(0, &out[..m]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Accept(s) = l.handle_packet(0, &buf[..n], &mut out) else {
        panic!()
    };
    let mut s = *s;
    let n = s.poll_transmit(0, &mut buf).unwrap();
    c.handle_packet(0, &buf[..n]);
    let msgs: Vec<Vec<u8>> = (0..12u32)
        .map(|i| vec![i as u8; 1 + (i as usize * 997) % 4000])
        .collect();
    for (i, m) in msgs.iter().enumerate() {
        c.send(0, i as u32, i % 2 == 0, m).unwrap();
    }
    let mut now = 0;
    let mut dropped = false;
    let mut got = Vec::new();
    for _ in 0..40 {
        while let Some(n) = c.poll_transmit(now, &mut buf) {
            if !dropped && c.next_tsn.wrapping_sub(start) > 3 {
                dropped = true; // lose one packet around the wrap
                continue;
            }
            s.handle_packet(now, &buf[..n]);
        }
        while let Some(n) = s.poll_transmit(now, &mut buf) {
            c.handle_packet(now, &buf[..n]);
        }
        while let Some(e) = s.poll_event() {
            if let Event::Message(m) = e {
                got.push((m.ppid, m.data));
            }
        }
        now += 300 * MS;
        c.handle_timeout(now);
        s.handle_timeout(now);
    }
    assert!(dropped);
    // Ordered ones (odd PPIDs, stream 0) in order despite the loss.
    let ordered: Vec<u32> = got.iter().map(|g| g.0).filter(|p| p % 2 == 1).collect();
    assert_eq!(ordered, vec![1, 3, 5, 7, 9, 11]);
    assert!(
        tsn_lt(start, c.next_tsn) && c.next_tsn < 100,
        "TSNs wrapped: next {}",
        c.next_tsn
    );
    got.sort();
    let want: Vec<_> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| (i as u32, m.clone()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(c.send_buffered(), 0);
}

#[test]
fn oversized_unrecognized_parameter_is_not_reported_but_init_is_answered() {
    let mut l = Listener::new(cfg(2)).unwrap();
    let mut b = vec![0x13, 0x88, 0x00, 0x50, 0, 0, 0, 0, 0, 0, 0, 0];
    let param_len = 1500usize;
    let chunk_len = 20 + param_len;
    b.extend_from_slice(&[0x01, 0x00]);
    b.extend_from_slice(&(chunk_len as u16).to_be_bytes());
    b.extend_from_slice(&[
        0x11, 0x22, 0x33, 0x44, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0, 0, 0, 1,
    ]);
    b.extend_from_slice(&[0xc0, 0x99]);
    b.extend_from_slice(&(param_len as u16).to_be_bytes());
    b.resize(12 + chunk_len, 0xab);
    let mut p = SctpPacket::new_unchecked(&mut b[..]);
    p.fill_checksum();
    let mut out = vec![0u8; 1480];
    let ListenOutcome::Reply(n) = l.handle_packet(0, &b, &mut out) else {
        panic!("INIT not answered")
    };
    let p = SctpPacket::new_checked(&out[..n]).unwrap();
    let c = p.chunks().next().unwrap().unwrap();
    let ChunkRepr::InitAck(ia) = ChunkRepr::parse(&c).unwrap() else {
        panic!("not INIT-ACK")
    };
    assert_eq!(ia.params.unrecognized_reported, None);
    assert!(ia.params.state_cookie.is_some());
}

#[test]
fn tsn_serial_arithmetic_wraps() {
    assert!(tsn_lt(u32::MAX, 0));
    assert!(tsn_lt(5, 6));
    assert!(!tsn_lt(6, 5));
    assert!(tsn_le(7, 7));
    assert!(tsn_lt(0x7fff_ffff, 0x8000_0000));
}

/// On a trusted link (`Config::trusted_link`) an association sends its
/// packets with a zero Checksum field and takes a packet whatever its
/// CRC32c says; an association that does not trust the link discards the
/// same packet. Out of the blue, a trusted end answers an INIT whose
/// CRC32c is zero, an untrusting one does not.
#[test]
fn a_trusted_link_neither_computes_nor_checks_the_crc32c() {
    // Received: a DATA packet whose Checksum field is zero.
    for trusted in [false, true] {
        let (_c, mut s) = pair();
        s.cfg.trusted_link = trusted;
        // Nothing waiting ahead: a whole chunk is handed over in place.
        assert_eq!(s.poll_event(), Some(Event::Connected));
        let tsn = (s.rx_cum as u32).wrapping_add(1);
        let mut p = data_packet(&s, 0x07, tsn, 0, 0, b"abc");
        p[8..12].copy_from_slice(&[0; 4]);
        let mut took = Vec::new();
        s.handle_packet_with(0, &p, &mut |m: MessageRef<'_>| {
            took.push(m.data.to_vec());
            true
        });
        if trusted {
            assert_eq!(took, [b"abc".to_vec()]);
            assert_eq!(s.stats().packets_discarded, 0);
        } else {
            assert!(took.is_empty());
            assert_eq!(s.stats().packets_discarded, 1);
        }
    }
    // Sent: the field is zero where trusted, the CRC32c elsewhere.
    for trusted in [false, true] {
        let (mut c, _s) = pair();
        c.cfg.trusted_link = trusted;
        c.send(0, 0, false, b"hello").unwrap();
        let mut b = vec![0u8; 2048];
        let n = c.poll_transmit(0, &mut b).expect("a DATA packet");
        let p = SctpPacket::new_checked(&b[..n]).unwrap();
        assert!(p.chunks().any(|k| k.unwrap().ty == 0), "DATA");
        if trusted {
            assert_eq!(p.checksum(), 0);
        } else {
            assert_ne!(p.checksum(), 0);
            p.verify_checksum().unwrap();
        }
    }
    // Out of the blue: an INIT whose Checksum field is zero, as a
    // trusting peer may send.
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let mut init = vec![0u8; 2048];
    let n = c.poll_transmit(0, &mut init).unwrap();
    init.truncate(n);
    init[8..12].copy_from_slice(&[0; 4]);
    let mut out = vec![0u8; 2048];
    assert_eq!(out_of_the_blue(&init, false, &mut out), None);
    let m = out_of_the_blue(&init, true, &mut out).expect("an ABORT");
    let reply = SctpPacket::new_checked(&out[..m]).unwrap();
    reply
        .verify_checksum()
        .expect("the reply's CRC32c computed");
    assert_eq!(reply.chunks().next().unwrap().unwrap().ty, 6, "ABORT");
}
