//! Hostile-peer regression tests (issue 27): literal packets driven
//! through [`Association::handle_packet`] and the [`Listener`].

use super::*;

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        ..Config::default()
    }
}

/// Runs the handshake; returns (client, server).
fn pair_with(sc: Config) -> (Association, Association) {
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let mut l = Listener::new(sc).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
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

/// A packet to `s` from its peer, tag and ports right.
fn packet_to(s: &Association, chunks: &[ChunkRepr<'_>]) -> Vec<u8> {
    let h = HeaderRepr {
        src_port: s.peer_port(),
        dst_port: s.local_port(),
        verification_tag: s.local_tag(),
    };
    let mut b = vec![0u8; 4096];
    let n = wire::emit_packet(&h, chunks, &mut b).unwrap();
    b.truncate(n);
    b
}

/// The first TSN the peer of `s` may send.
fn first_tsn(s: &Association) -> u32 {
    (s.rx_cum as u32).wrapping_add(1)
}

fn data_on(s: &Association, tsn: u32, stream: u16, b: bool, e: bool, payload: &[u8]) -> Vec<u8> {
    packet_to(
        s,
        &[ChunkRepr::Data(DataRepr {
            flags: DataFlags {
                immediate: false,
                unordered: true,
                begin: b,
                end: e,
            },
            tsn,
            stream_id: stream,
            ssn: 0,
            ppid: 0,
            payload,
        })],
    )
}

fn messages(s: &mut Association) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Some(e) = s.poll_event() {
        if let Event::Message(m) = e {
            v.push(m.data);
        }
    }
    v
}

/// Issue 27 item 2: a chain of middle fragments costs amortised O(1)
/// reassembly work per chunk, not a walk back to the chain's start.
#[test]
fn reassembly_work_is_bounded_per_chunk() {
    let mut sc = cfg(2);
    sc.max_fragments = 1024;
    let (_c, mut s) = pair_with(sc);
    let n = 1000u32;
    let t0 = first_tsn(&s);
    s.handle_packet(0, &data_on(&s, t0, 0, true, false, b"b"));
    for i in 1..n - 1 {
        s.handle_packet(0, &data_on(&s, t0 + i, 0, false, false, b"m"));
    }
    let before_last = s.rx_work;
    s.handle_packet(0, &data_on(&s, t0 + n - 1, 0, false, true, b"e"));
    let got = messages(&mut s);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len(), n as usize);
    // Before the last chunk: a few map look-ups per chunk (joining the
    // runs beside it, checking them for chunks that cannot complete).
    assert!(
        before_last <= 16 * u64::from(n),
        "{before_last} entries visited for {n} chunks"
    );
    // Delivery walks the message once.
    assert!(
        s.rx_work <= 18 * u64::from(n),
        "{} entries visited for {n} chunks",
        s.rx_work
    );
}

/// Issue 27 item 1: fragments that can never complete (an E chunk whose
/// predecessor was delivered, a middle chunk after it) are dropped once
/// the TSN before them has arrived, instead of staying for the life of
/// the association.
#[test]
fn fragments_that_cannot_complete_are_pruned() {
    let (_c, mut s) = pair_with(cfg(2));
    let t0 = first_tsn(&s);
    s.handle_packet(0, &data_on(&s, t0, 0, true, true, b"whole"));
    for i in 1..1000 {
        // One-octet orphans in TSN order: E without B, or middles.
        s.handle_packet(0, &data_on(&s, t0 + i, 0, false, i % 2 == 0, b"x"));
    }
    assert_eq!(messages(&mut s), vec![b"whole".to_vec()]);
    assert!(s.rx_chunks.is_empty(), "{} held", s.rx_chunks.len());
    assert!(s.rx_runs.is_empty());
    assert_eq!(s.recv_buffered(), 0);
    assert_eq!(s.stats().pruned_chunks, 999);
    // Orphans met from the other side: the run waits for its B chunk
    // until the TSN before it arrives, not joining it.
    let t1 = t0 + 1000;
    s.handle_packet(0, &data_on(&s, t1 + 1, 0, false, true, b"tail"));
    assert_eq!(s.rx_chunks.len(), 1);
    s.handle_packet(0, &data_on(&s, t1, 0, true, true, b"other"));
    assert_eq!(messages(&mut s), vec![b"other".to_vec()]);
    assert!(s.rx_chunks.is_empty());
    assert_eq!(s.recv_buffered(), 0);
    assert_eq!(s.state(), State::Established);
    // A run that waited for the TSN after it, which came as a new B.
    let t2 = t1 + 2;
    s.handle_packet(0, &data_on(&s, t2 + 1, 0, false, false, b"mid"));
    s.handle_packet(0, &data_on(&s, t2 + 2, 0, true, false, b"new"));
    assert_eq!(s.rx_chunks.len(), 1, "only the new B waits");
    assert_eq!(s.recv_buffered(), 3 + RX_CHUNK_OVERHEAD);
}

/// Issue 27 item 1: each held chunk costs the receive buffer its
/// bookkeeping too, so one-octet fragments cannot hold many times the
/// buffer in heap.
#[test]
fn held_chunks_are_charged_their_overhead() {
    let mut sc = cfg(2);
    sc.recv_buffer = 64 * 1024;
    sc.max_message = 16 * 1024;
    sc.max_fragments = 64;
    let (_c, mut s) = pair_with(sc);
    let t0 = first_tsn(&s);
    // t0 never comes; middles at every other TSN stay completable.
    for i in (2..8000).step_by(2) {
        s.handle_packet(0, &data_on(&s, t0 + i, 0, false, false, b"m"));
    }
    let held = s.rx_chunks.len();
    assert!(held > 0);
    assert!(
        held * (1 + RX_CHUNK_OVERHEAD) <= 64 * 1024,
        "{held} chunks held in a 64 KiB buffer"
    );
    assert_eq!(s.recv_buffered(), held * (1 + RX_CHUNK_OVERHEAD));
    assert_eq!(s.state(), State::Established);
}

fn close_reason(s: &mut Association) -> Option<CloseReason> {
    let mut r = None;
    while let Some(e) = s.poll_event() {
        if let Event::Closed(c) = e {
            r = Some(c);
        }
    }
    r
}

fn shutdown_from_peer(s: &Association) -> Vec<u8> {
    packet_to(
        s,
        &[ChunkRepr::Shutdown {
            cum_tsn_ack: s.peer_cum_ack,
        }],
    )
}

/// Issue 27 item 1, RFC 9260 §9.2: the peer sends SHUTDOWN only once all
/// its DATA is acknowledged and its user may send no more, so new DATA
/// after its SHUTDOWN (SHUTDOWN-RECEIVED, SHUTDOWN-ACK-SENT) is a
/// protocol violation; a retransmission of acknowledged DATA is not.
#[test]
fn new_data_after_the_peers_shutdown_aborts() {
    for outstanding in [false, true] {
        let (_c, mut s) = pair_with(cfg(2));
        let t0 = first_tsn(&s);
        s.handle_packet(0, &data_on(&s, t0, 0, true, true, b"before"));
        if outstanding {
            s.send(0, 0, false, b"ours").unwrap();
            let mut b = vec![0u8; 2048];
            while s.poll_transmit(0, &mut b).is_some() {}
        }
        s.handle_packet(0, &shutdown_from_peer(&s));
        let want = if outstanding {
            State::ShutdownReceived
        } else {
            State::ShutdownAckSent
        };
        assert_eq!(s.state(), want);
        // A duplicate is fine.
        s.handle_packet(0, &data_on(&s, t0, 0, true, true, b"before"));
        assert_eq!(s.state(), want);
        assert_eq!(s.stats().dup_data_received, 1);
        // New DATA is not.
        s.handle_packet(0, &data_on(&s, t0 + 1, 0, true, true, b"after"));
        assert_eq!(s.state(), State::Closed);
        assert_eq!(
            close_reason(&mut s),
            Some(CloseReason::ProtocolError(cause_code::PROTOCOL_VIOLATION))
        );
        assert!(s.pending.abort.is_some());
    }
}

/// RFC 9260 §9.2: in SHUTDOWN-SENT the peer may still be sending; its
/// DATA is taken and each packet of it answered with SHUTDOWN.
#[test]
fn data_in_shutdown_sent_is_taken_and_answered_with_shutdown() {
    let (_c, mut s) = pair_with(cfg(2));
    s.shutdown(0);
    let mut b = vec![0u8; 2048];
    while s.poll_transmit(0, &mut b).is_some() {}
    assert_eq!(s.state(), State::ShutdownSent);
    let t0 = first_tsn(&s);
    s.handle_packet(0, &data_on(&s, t0, 0, true, true, b"late"));
    assert_eq!(messages(&mut s), vec![b"late".to_vec()]);
    assert!(s.pending.shutdown);
    assert_eq!(s.state(), State::ShutdownSent);
}

/// Issue 27 item 1: a complete ordered message repeating a stream
/// sequence number already waiting (or delivered) is dropped; before, it
/// replaced the waiting one, whose chunks stayed held for good.
#[test]
fn repeated_stream_sequence_numbers_are_not_held() {
    let (_c, mut s) = pair_with(cfg(2));
    let t0 = first_tsn(&s);
    let ordered = |s: &Association, tsn: u32, ssn: u16, p: &[u8]| {
        packet_to(
            s,
            &[ChunkRepr::Data(DataRepr {
                flags: DataFlags {
                    immediate: false,
                    unordered: false,
                    begin: true,
                    end: true,
                },
                tsn,
                stream_id: 0,
                ssn,
                ppid: 0,
                payload: p,
            })],
        )
    };
    s.handle_packet(0, &ordered(&s, t0, 1, b"one"));
    s.handle_packet(0, &ordered(&s, t0 + 1, 1, b"one again"));
    assert_eq!(s.rx_chunks.len(), 1);
    s.handle_packet(0, &ordered(&s, t0 + 2, 0, b"zero"));
    assert_eq!(messages(&mut s), vec![b"zero".to_vec(), b"one".to_vec()]);
    // Behind the next expected SSN (2): already delivered.
    s.handle_packet(0, &ordered(&s, t0 + 3, 1, b"one, late"));
    assert!(s.rx_chunks.is_empty());
    assert!(s.ready.is_empty());
    assert_eq!(s.recv_buffered(), 0);
    assert_eq!(s.stats().pruned_chunks, 2);
}

/// The INIT-ACK `s` answers `init` with, parsed: (its packet's tag, its
/// Initiate Tag, its cookie).
fn init_ack_to(s: &mut Association, init: &[u8]) -> (u32, u32, Vec<u8>) {
    s.handle_packet(0, init);
    let mut b = vec![0u8; 2048];
    let n = s.poll_transmit(0, &mut b).expect("INIT-ACK");
    let (h, chunks) = parse_all(&b[..n], false).unwrap();
    let ChunkRepr::InitAck(ia) = &chunks[0] else {
        panic!("not INIT-ACK: {chunks:?}")
    };
    (
        h.verification_tag,
        ia.initiate_tag,
        ia.params.state_cookie.unwrap().to_vec(),
    )
}

fn init_from_peer(s: &Association, tag: u32) -> Vec<u8> {
    let h = HeaderRepr {
        src_port: s.peer_port(),
        dst_port: s.local_port(),
        verification_tag: 0,
    };
    let init = InitRepr {
        initiate_tag: tag,
        a_rwnd: 65536,
        num_outbound_streams: 4,
        num_inbound_streams: 4,
        initial_tsn: 77,
        params: InitParams::default(),
    };
    let mut b = vec![0u8; 512];
    let n = wire::emit_packet(&h, &[ChunkRepr::Init(init)], &mut b).unwrap();
    b.truncate(n);
    b
}

/// Issue 27 item 4, RFC 9260 §5.2.2: an INIT on an established
/// association is answered with a new random Initiate Tag, and the
/// cookie carries tie-tags, not the association's tags; an ABORT with
/// the advertised tag does not close the association.
#[test]
fn init_on_an_established_association_does_not_disclose_its_tag() {
    let (_c, mut s) = pair_with(cfg(2));
    let (own, peer) = (s.local_tag(), s.peer_tag());
    let verified = s.stats().tag_verified_packets;
    let init = init_from_peer(&s, 0xdead_beef);
    let (vt, advertised, cookie) = init_ack_to(&mut s, &init);
    assert_eq!(vt, 0xdead_beef, "§8.5.1: the INIT's Initiate Tag");
    assert_ne!(advertised, own, "§5.2.2: a new Initiate Tag");
    // Neither tag of the association appears anywhere in the cookie.
    for tag in [own, peer] {
        assert!(
            !cookie.windows(4).any(|w| w == tag.to_be_bytes()),
            "tag {tag:#x} in the cookie"
        );
    }
    // An INIT (tag 0) does not count as a packet that passed the
    // verification tag check (RFC 6951 §5.4 moves the UDP port only for
    // those).
    assert_eq!(s.stats().tag_verified_packets, verified);
    // The attacker tries the tag it learned.
    let h = HeaderRepr {
        src_port: s.peer_port(),
        dst_port: s.local_port(),
        verification_tag: advertised,
    };
    let mut b = vec![0u8; 64];
    let n = wire::emit_packet(
        &h,
        &[ChunkRepr::Abort {
            t_bit: false,
            causes: &[],
        }],
        &mut b,
    )
    .unwrap();
    s.handle_packet(0, &b[..n]);
    assert_eq!(s.state(), State::Established);
    // Two INITs get two different tags (each INIT-ACK a new one).
    let (_, again, _) = init_ack_to(&mut s, &init);
    assert_ne!(again, own);
    assert_ne!(again, advertised);
    // A packet with the right tag counts as verified.
    let t0 = first_tsn(&s);
    s.handle_packet(0, &data_on(&s, t0, 0, true, true, b"x"));
    assert_eq!(s.stats().tag_verified_packets, verified + 1);
}

/// The addresses of the cookie tests' INIT, as our end sees them.
const REAL: Addrs<'static> = Addrs {
    local: &[10, 0, 0, 1],
    peer: &[10, 0, 0, 2],
};

/// A Listener that answered an INIT between [`REAL`]'s addresses, and the
/// COOKIE-ECHO the initiator sends back to it.
fn listener_and_cookie_echo() -> (Listener, Vec<u8>) {
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let mut l = Listener::new(cfg(2)).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let ListenOutcome::Reply(m) = l.handle_packet_from(0, REAL, &buf[..n], &mut out) else {
        panic!("no INIT-ACK")
    };
    c.handle_packet(0, &out[..m]);
    let n = c.poll_transmit(0, &mut buf).unwrap();
    (l, buf[..n].to_vec())
}

/// Issue 27 item 3: a State Cookie is bound to the addresses its INIT
/// came between; echoed from another (spoofed) source it makes no
/// association.
#[test]
fn cookie_is_bound_to_the_addresses() {
    let (mut l, echo) = listener_and_cookie_echo();
    let mut out = vec![0u8; 2048];
    let real = REAL;
    for wrong in [
        Addrs {
            peer: &[10, 0, 0, 3],
            ..real
        },
        Addrs {
            local: &[10, 0, 0, 9],
            ..real
        },
        Addrs::default(),
    ] {
        assert!(
            matches!(
                l.handle_packet_from(0, wrong, &echo, &mut out),
                ListenOutcome::Drop
            ),
            "accepted from {wrong:?}"
        );
    }
    assert!(matches!(
        l.handle_packet_from(0, real, &echo, &mut out),
        ListenOutcome::Accept(_)
    ));
}

/// A COOKIE-ECHO sent again because its COOKIE-ACK was lost reaches the
/// association the first one made (the caller demultiplexes by address
/// and ports) and is acknowledged again (RFC 9260 §5.2.4 case D), also
/// when the Listener bound the cookie to addresses: with the binding the
/// association decoded it against no address, dropped it, and the peer
/// never connected (`sctp_engines_over_faulty_link` hung in COOKIE-ECHOED).
#[test]
fn a_repeated_cookie_echo_is_acknowledged_again() {
    let (mut l, echo) = listener_and_cookie_echo();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let real = REAL;
    let ListenOutcome::Accept(mut a) = l.handle_packet_from(0, real, &echo, &mut out) else {
        panic!("the first COOKIE-ECHO was not accepted")
    };
    // Its COOKIE-ACK is lost; the peer echoes again.
    let mut first = 0;
    while let Some(k) = a.poll_transmit(1, &mut buf) {
        first += k;
    }
    assert!(first > 0, "no COOKIE-ACK at first");
    a.handle_packet(2, &echo);
    let again = a.poll_transmit(2, &mut buf).expect("a COOKIE-ACK again");
    // Common header (12 octets), then a COOKIE-ACK chunk (type 11).
    assert_eq!(buf[12], 11, "{:02x?}", &buf[..again]);
}

/// Issue 27 item 5: with RTO.Min at [`RTO_MIN_ABOVE_DELAYED_SACK`], a
/// lone message to a peer that delays its SACK 200 ms (Linux, usrsctp)
/// is not retransmitted; with TCP's 5 ms it was, five times.
#[test]
fn a_lone_message_outlives_the_peers_delayed_sack() {
    let resent = |rto_min: u64| {
        let mut cc = cfg(1);
        cc.rto_min = rto_min;
        cc.rto_initial = rto_min;
        let mut c = Association::connect(cc, 1000, 2000, 0, 0).unwrap();
        let mut l = Listener::new(cfg(2)).unwrap();
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
        c.send(0, 0, true, b"lone").unwrap();
        // 1 ms steps, 0 ms one-way delay, until the SACK is back.
        let mut now = 0;
        while !c.is_acked(c.next_tsn.wrapping_sub(1)) && now < 2 * SEC {
            while let Some(n) = c.poll_transmit(now, &mut buf) {
                s.handle_packet(now, &buf[..n]);
            }
            while let Some(n) = s.poll_transmit(now, &mut buf) {
                c.handle_packet(now, &buf[..n]);
            }
            now += MS;
            c.handle_timeout(now);
            s.handle_timeout(now);
        }
        c.stats().retransmits
    };
    assert!(resent(5 * MS) > 0, "the 5 ms RTO resends");
    assert_eq!(resent(RTO_MIN_ABOVE_DELAYED_SACK), 0);
}

/// A DATA chunk with every flag and the SSN chosen.
#[allow(clippy::too_many_arguments)]
fn data_full(
    s: &Association,
    tsn: u32,
    stream: u16,
    ssn: u16,
    unordered: bool,
    b: bool,
    e: bool,
    payload: &[u8],
) -> Vec<u8> {
    packet_to(
        s,
        &[ChunkRepr::Data(DataRepr {
            flags: DataFlags {
                immediate: false,
                unordered,
                begin: b,
                end: e,
            },
            tsn,
            stream_id: stream,
            ssn,
            ppid: 0,
            payload,
        })],
    )
}

/// Fragments in consecutive TSNs join only within one message (RFC 9260
/// §6.9: same stream, same U flag, and for ordered ones the same SSN):
/// a B and an E of different streams, U flags or SSNs are no message.
/// The same pair within one message is.
#[test]
fn fragments_of_different_messages_never_join() {
    let (_c, mut s) = pair_with(cfg(2));
    let mut t = first_tsn(&s);
    // (stream, ssn, unordered) of the B chunk, then of the E chunk.
    let pairs = [
        ((0, 0, true), (1, 0, true)),
        ((0, 0, true), (0, 0, false)),
        ((0, 0, false), (0, 0, true)),
        ((2, 0, false), (2, 1, false)),
    ];
    for ((bs, bn, bu), (es, en, eu)) in pairs {
        s.handle_packet(0, &data_full(&s, t, bs, bn, bu, true, false, b"b"));
        s.handle_packet(0, &data_full(&s, t + 1, es, en, eu, false, true, b"e"));
        assert_eq!(messages(&mut s), Vec::<Vec<u8>>::new(), "{bs} {bn} {bu}");
        t += 2;
    }
    s.handle_packet(0, &data_full(&s, t, 3, 0, false, true, false, b"b"));
    s.handle_packet(0, &data_full(&s, t + 1, 3, 0, false, false, true, b"e"));
    assert_eq!(messages(&mut s), vec![b"be".to_vec()]);
}

/// `Config::max_fragments` counts a message's fragments wherever its TSNs
/// lie (here far above 0: TSNs are extended to 64 bits above 2^32): one
/// fragment more than the limit aborts (Out of Resource, §3.3.10.4),
/// the limit itself is delivered.
#[test]
fn a_message_of_one_fragment_too_many_aborts() {
    let mut sc = cfg(2);
    sc.max_fragments = 4;
    let (_c, mut s) = pair_with(sc);
    let t0 = first_tsn(&s);
    s.handle_packet(0, &data_on(&s, t0, 0, true, false, b"a"));
    s.handle_packet(0, &data_on(&s, t0 + 1, 0, false, false, b"b"));
    s.handle_packet(0, &data_on(&s, t0 + 2, 0, false, false, b"c"));
    s.handle_packet(0, &data_on(&s, t0 + 3, 0, false, true, b"d"));
    assert_eq!(messages(&mut s), vec![b"abcd".to_vec()]);
    let t1 = t0 + 4;
    for i in 0..4 {
        s.handle_packet(0, &data_on(&s, t1 + i, 0, i == 0, false, b"x"));
    }
    assert_eq!(s.state(), State::Established);
    s.handle_packet(0, &data_on(&s, t1 + 4, 0, false, true, b"y"));
    assert_eq!(
        close_reason(&mut s),
        Some(CloseReason::ProtocolError(cause_code::OUT_OF_RESOURCE))
    );
}

/// The reassembly work measure (`rx_work`, what `heap_bound` and the
/// `sctp_heap` fuzz target bound per chunk) is pinned exactly on one
/// literal sequence (in order, out of order, orphans pruned), as
/// measured: the joins looked up, runs merged, prune checks, chunks
/// delivered or dropped each count, so a broken count shows here and not
/// only as a looser bound elsewhere.
#[test]
fn reassembly_work_is_counted_exactly() {
    let (_c, mut s) = pair_with(cfg(2));
    let t0 = first_tsn(&s);
    let mut steps = Vec::new();
    let mut last = s.rx_work;
    let mut step = |s: &mut Association, tsn: u32, b: bool, e: bool, payload: &[u8]| {
        let p = data_on(s, tsn, 0, b, e, payload);
        s.handle_packet(0, &p);
        steps.push(s.rx_work - last);
        last = s.rx_work;
    };
    // A three-fragment message in order: B, M, E (delivered).
    step(&mut s, t0, true, false, b"b");
    step(&mut s, t0 + 1, false, false, b"m");
    step(&mut s, t0 + 2, false, true, b"e");
    // Out of order: E above a gap, then B, then the middle.
    step(&mut s, t0 + 5, false, true, b"e");
    step(&mut s, t0 + 3, true, false, b"b");
    step(&mut s, t0 + 4, false, false, b"m");
    // Orphans: a middle and an E after a whole message (pruned).
    step(&mut s, t0 + 6, true, true, b"w");
    step(&mut s, t0 + 7, false, false, b"x");
    step(&mut s, t0 + 8, false, true, b"y");
    assert_eq!(
        messages(&mut s),
        vec![b"bme".to_vec(), b"bme".to_vec(), b"w".to_vec()]
    );
    assert!(s.rx_chunks.is_empty());
    assert_eq!(
        steps,
        // Where no run is held after delivery (3rd, 6th, 7th), the
        // prune checks beside the chunk are skipped.
        [11, 13, 11, 11, 11, 12, 8, 12, 12],
        "steps per chunk"
    );
}

/// An ABORT sent before the peer's tag is known (our INIT unanswered)
/// carries our own tag with the T bit set (RFC 9260 §8.5.1), not tag 0.
#[test]
fn an_abort_before_the_peers_tag_carries_ours_with_the_t_bit() {
    let mut c = Association::connect(cfg(1), 1000, 2000, 0, 0).unwrap();
    let mut buf = vec![0u8; 2048];
    assert!(c.poll_transmit(0, &mut buf).is_some(), "INIT");
    c.abort();
    let n = c.poll_transmit(0, &mut buf).unwrap();
    let p = wire::SctpPacket::new_checked(&buf[..n]).unwrap();
    assert_ne!(c.local_tag(), 0);
    assert_eq!(p.verification_tag(), c.local_tag());
    let ch = p.chunks().next().unwrap().unwrap();
    assert_eq!((ch.ty, ch.flags & 1), (wire::chunk_type::ABORT, 1));
}
