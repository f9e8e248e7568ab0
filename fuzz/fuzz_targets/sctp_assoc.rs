//! Two sctp-lite associations, set up by the real handshake, then driven
//! by the fuzzer: hostile packets (with ports, tag and checksum fixed up so
//! they get past the first checks), user sends, time jumps, shutdown and
//! abort, and forwarding between the two. Invariants: no panic, every
//! packet we emit carries a good checksum and parses, and nothing grows
//! without bound.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sctp_lite::assoc::{Association, Config, ListenOutcome, Listener};
use sctp_lite::wire::{ChunkRepr, SctpPacket};

fn cfg(s: u8) -> Config {
    Config {
        secret: [s; 16],
        streams: 4,
        max_packet: 600,
        recv_buffer: 64 * 1024,
        send_buffer: 64 * 1024,
        max_message: 16 * 1024,
        max_fragments: 64,
        max_tsn_window: 512,
        ..Config::default()
    }
}

fn check(p: &[u8]) {
    let v = SctpPacket::new_checked(p).expect("emitted packet has a header");
    v.verify_checksum()
        .expect("emitted packet has a good checksum");
    for c in v.chunks() {
        ChunkRepr::parse(&c.expect("emitted chunk parses")).expect("emitted chunk has a repr");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut a = Association::connect(cfg(1), 1, 2, 0, 0).expect("config");
    let mut l = Listener::new(cfg(2)).expect("config");
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = a.poll_transmit(0, &mut buf).expect("INIT");
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        return;
    };
    a.handle_packet(0, &out[..m]);
    let n = a.poll_transmit(0, &mut buf).expect("COOKIE-ECHO");
    let ListenOutcome::Accept(b) = l.handle_packet(0, &buf[..n], &mut out) else {
        return;
    };
    let mut b = *b;
    let mut now = 0u64;
    let mut sides = [&mut a, &mut b];
    let mut i = 0;
    let mut events = 0usize;
    while i + 2 <= data.len() {
        let op = data[i];
        let arg = data[i + 1];
        i += 2;
        let who = usize::from(op & 1);
        match op >> 1 & 7 {
            0 | 1 => {
                // Hostile packet of `arg` octets from the input.
                let len = usize::from(arg).min(data.len() - i);
                let mut p = data[i..i + len].to_vec();
                i += len;
                if p.len() >= 12 {
                    let s = &sides[who];
                    let mut v = SctpPacket::new_unchecked(&mut p[..]);
                    v.set_src_port(s.peer_port());
                    v.set_dst_port(s.local_port());
                    if op & 0x10 == 0 {
                        v.set_verification_tag(s.local_tag());
                    }
                    v.fill_checksum();
                }
                sides[who].handle_packet(now, &p);
            }
            2 => {
                let len = usize::from(arg) * 97;
                let _ = sides[who].send(
                    u16::from(arg & 3),
                    u32::from(arg),
                    arg & 4 != 0,
                    &vec![arg; len.max(1)],
                );
            }
            3 => {
                now = now.saturating_add(u64::from(arg) * 50_000_000);
                for s in sides.iter_mut() {
                    if s.poll_timeout().is_some_and(|t| t <= now) {
                        s.handle_timeout(now);
                    }
                }
            }
            4 | 5 => {
                // Forward up to `arg` packets from `who` to the other side,
                // dropping those whose index bit says so.
                for k in 0..usize::from(arg % 16) {
                    let Some(n) = sides[who].poll_transmit(now, &mut buf) else {
                        break;
                    };
                    check(&buf[..n]);
                    if arg & (1 << (k % 8)) == 0 || k >= 8 {
                        let pkt = buf[..n].to_vec();
                        sides[1 - who].handle_packet(now, &pkt);
                    }
                }
            }
            6 => {
                if arg < 8 {
                    sides[who].abort();
                } else if arg < 32 {
                    sides[who].shutdown(now);
                }
            }
            _ => {
                while sides[who].poll_event().is_some() {
                    events += 1;
                }
            }
        }
        for s in sides.iter() {
            assert!(s.send_buffered() <= 64 * 1024);
        }
    }
    let _ = events;
});
