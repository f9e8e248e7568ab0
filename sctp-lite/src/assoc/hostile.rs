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
    // Before the last chunk: a few map look-ups per chunk.
    assert!(
        before_last <= 8 * u64::from(n),
        "{before_last} entries visited for {n} chunks"
    );
    // Delivery walks the message once.
    assert!(
        s.rx_work <= 10 * u64::from(n),
        "{} entries visited for {n} chunks",
        s.rx_work
    );
}
