//! RFC 5043 DDP Stream Sessions under a hostile raw-SCTP peer: the fuzzer
//! chooses streams, PPIDs, U flags and payloads the peer sends, and the
//! local ULP's initiate / accept / reject / terminate / send_segment calls.
//! Invariants: no panic; whatever the DDP side emits on the wire is PPID 16
//! or 17 and unordered (§5.2, §10).
#![no_main]
use ddp_sctp::{listener, DdpAssociation};
use libfuzzer_sys::fuzz_target;
use sctp_lite::assoc::{Association, Config, ListenOutcome};
use sctp_lite::wire::{ChunkRepr, SctpPacket};

fn cfg(s: u8) -> Config {
    Config {
        secret: [s; 16],
        streams: 4,
        ..Config::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut peer = Association::connect(ddp_sctp::config(cfg(1)), 1, 2, 0, 0).expect("config");
    let mut l = listener(cfg(2)).expect("config");
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = peer.poll_transmit(0, &mut buf).expect("INIT");
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        return;
    };
    peer.handle_packet(0, &out[..m]);
    let n = peer.poll_transmit(0, &mut buf).expect("COOKIE-ECHO");
    let ListenOutcome::Accept(s) = l.handle_packet(0, &buf[..n], &mut out) else {
        return;
    };
    let mut d = DdpAssociation::wrap(*s, cfg(2).max_packet);
    let mut i = 0;
    while i + 3 <= data.len() {
        let (op, stream, len) = (
            data[i],
            u16::from(data[i + 1] & 7),
            usize::from(data[i + 2]),
        );
        i += 3;
        let body = &data[i..(i + len).min(data.len())];
        i += body.len();
        match op & 7 {
            0 => {
                let ppid = if op & 8 != 0 { 16 } else { 17 };
                let _ = peer.send(
                    stream,
                    ppid,
                    op & 16 == 0,
                    if body.is_empty() { &[0] } else { body },
                );
            }
            1 => {
                let _ = d.initiate(stream, body);
            }
            2 => {
                let _ = d.accept(stream, body);
            }
            3 => {
                let _ = d.reject(stream, body);
            }
            4 => {
                let _ = d.terminate(0, stream);
            }
            5 => {
                let _ = d.send_segment(stream, body);
            }
            _ => {}
        }
        // Move everything both ways; check what the DDP side sends.
        for _ in 0..8 {
            let mut moved = false;
            while let Some(n) = peer.poll_transmit(0, &mut buf) {
                d.handle_packet(0, &buf[..n]);
                moved = true;
            }
            while let Some(n) = d.poll_transmit(0, &mut buf) {
                let p = SctpPacket::new_checked(&buf[..n]).expect("header");
                for c in p.chunks() {
                    if let Ok(ChunkRepr::Data(x)) = ChunkRepr::parse(&c.expect("chunk")) {
                        assert!(x.flags.unordered && (x.ppid == 16 || x.ppid == 17));
                    }
                }
                let pkt = buf[..n].to_vec();
                peer.handle_packet(0, &pkt);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        while d.poll_event().is_some() {}
        while peer.poll_event().is_some() {}
    }
});
