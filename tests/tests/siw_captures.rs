//! Real Linux siw traffic (shared/interop/captures, copied to
//! tests/fixtures/siw): our MPA frame parser, deframer (CRC byte order,
//! FPDUs split across TCP segments) and DDP/RDMAP header parsers must accept
//! every FPDU siw sent, and recognise the deliberate faults in mpa-probe.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::HashMap;

use iwarp_control::{MpaConfig, Responder, ResponderOutcome};
use iwarp_proto::mpa::{Deframer, MpaError, UlpduSink};
use iwarp_proto::wire::ddp::{DdpHeader, Opcode};
use iwarp_proto::wire::{FrameKind, MpaFrameRepr, TermCode, TerminateRepr};

type Key = ([u8; 4], u16, [u8; 4], u16);

#[derive(Default, Debug)]
struct Stream {
    next: u32,
    data: Vec<u8>,
}

/// Classic pcap (µs or ns), Ethernet, IPv4, TCP: reassemble each direction of
/// each connection by sequence number. Returns connections as (first direction, reverse).
fn tcp_streams(path: &str) -> Vec<(Key, Vec<u8>, Vec<u8>)> {
    let raw = std::fs::read(path).unwrap();
    assert!(matches!(
        u32::from_le_bytes(raw[0..4].try_into().unwrap()),
        0xa1b2_c3d4 | 0xa1b2_3c4d
    ));
    assert_eq!(
        u32::from_le_bytes(raw[20..24].try_into().unwrap()),
        1,
        "Ethernet link type"
    );
    let mut at = 24;
    let mut open: HashMap<Key, Stream> = HashMap::new();
    let mut order: Vec<Key> = Vec::new();
    let mut done: Vec<(Key, Stream)> = Vec::new();
    while at + 16 <= raw.len() {
        let caplen = u32::from_le_bytes(raw[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &raw[at + 16..at + 16 + caplen];
        at += 16 + caplen;
        if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[23] != 6 {
            continue;
        }
        let ihl = usize::from(f[14] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let ip = &f[14..14 + total];
        let t = &ip[ihl..];
        let key: Key = (
            ip[12..16].try_into().unwrap(),
            u16::from_be_bytes([t[0], t[1]]),
            ip[16..20].try_into().unwrap(),
            u16::from_be_bytes([t[2], t[3]]),
        );
        let seq = u32::from_be_bytes(t[4..8].try_into().unwrap());
        let flags = t[13];
        let payload = &t[usize::from(t[12] >> 4) * 4..];
        if flags & 0x02 != 0 {
            if let Some(old) = open.remove(&key) {
                done.push((key, old));
            }
            open.insert(
                key,
                Stream {
                    next: seq.wrapping_add(1),
                    data: Vec::new(),
                },
            );
            order.push(key);
            continue;
        }
        let Some(s) = open.get_mut(&key) else {
            continue;
        };
        let off = s.next.wrapping_sub(seq) as usize; // octets of this segment already seen
        if off < payload.len() {
            s.data.extend_from_slice(&payload[off..]);
            s.next = s.next.wrapping_add((payload.len() - off) as u32);
        }
    }
    done.extend(open);
    let mut conns = Vec::new();
    let mut used = vec![false; done.len()];
    for i in 0..done.len() {
        if used[i] {
            continue;
        }
        let (k, _) = done[i];
        let rev = (k.2, k.3, k.0, k.1);
        if let Some(j) = (0..done.len()).find(|&j| !used[j] && j != i && done[j].0 == rev) {
            used[i] = true;
            used[j] = true;
            conns.push((
                k,
                std::mem::take(&mut done[i].1.data),
                std::mem::take(&mut done[j].1.data),
            ));
        }
    }
    conns
}

#[derive(Default)]
struct Collect {
    hdrs: Vec<(u16, Option<DdpHeader>, Vec<u8>)>,
}

impl UlpduSink for Collect {
    fn segment_begin(&mut self, l: u16, h: &[u8]) {
        self.hdrs
            .push((l, DdpHeader::parse(h).ok().map(|x| x.0), Vec::new()));
    }
    fn segment_data(&mut self, d: &[u8]) {
        if let Some(x) = self.hdrs.last_mut() {
            x.2.extend_from_slice(d);
        }
    }
    fn segment_end(&mut self) {}
}

struct Decoded {
    crc: bool,
    rejected: bool,
    /// Per direction (initiator->responder, responder->initiator): FPDUs and the deframer result.
    dirs: [(Collect, Result<(), MpaError>); 2],
    request: Vec<u8>,
}

fn decode(a: &[u8], b: &[u8]) -> Option<Decoded> {
    let (ini, resp) = if a.starts_with(b"MPA ID Req Frame") {
        (a, b)
    } else if b.starts_with(b"MPA ID Req Frame") {
        (b, a)
    } else {
        return None;
    };
    let (req, rl) = MpaFrameRepr::parse_bytes(ini).ok()?;
    let (rep, pl) = MpaFrameRepr::parse_bytes(resp).ok()?;
    assert_eq!((req.kind, rep.kind), (FrameKind::Request, FrameKind::Reply));
    let crc = req.flags.crc() || rep.flags.crc();
    let rejected = rep.flags.reject();
    let run = |bytes: &[u8], markers: bool| {
        let mut d = Deframer::new(crc, markers);
        let mut c = Collect::default();
        let r = d.feed(bytes, &mut c);
        (c, r)
    };
    let dirs = [
        run(&ini[rl..], rep.flags.marker()),
        run(&resp[pl..], req.flags.marker()),
    ];
    Some(Decoded {
        crc,
        rejected,
        dirs,
        request: ini[..rl].to_vec(),
    })
}

fn check_clean(path: &str, want_crc: bool) -> usize {
    let mut fpdus = 0;
    for (_, a, b) in tcp_streams(path) {
        let Some(d) = decode(&a, &b) else { continue };
        assert_eq!(d.crc, want_crc, "{path}");
        // Our responder (willing to do peer-to-peer) accepts siw's Request.
        let mut r = Responder::new(MpaConfig {
            peer_to_peer: true,
            ..Default::default()
        });
        assert!(matches!(
            r.receive(&d.request).unwrap(),
            Some(ResponderOutcome::Accepted { .. })
        ));
        for (c, res) in &d.dirs {
            assert_eq!(*res, Ok(()), "{path}: siw stream rejected");
            for (len, h, _) in &c.hdrs {
                if *len == 0 {
                    continue;
                }
                let h = h.unwrap_or_else(|| panic!("{path}: unparsable DDP header"));
                assert_eq!((h.ddp().version(), h.rdmap().version()), (1, 1));
                assert!(!matches!(h.rdmap().opcode(), Opcode::Reserved(_)));
                fpdus += 1;
            }
        }
    }
    fpdus
}

#[test]
fn siw_crc_rping_and_read_bandwidth_decode_cleanly() {
    let n = check_clean(
        concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/siw/crc-rping.pcap"),
        true,
    );
    assert!(n >= 60, "{n} FPDUs");
    // RDMA Read Responses whose first FPDU is split 1444 + 4 octets across segments.
    let n = check_clean(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/siw/crc-ib_read_bw.pcap"
        ),
        true,
    );
    assert!(n >= 200, "{n} FPDUs");
}

#[test]
fn siw_p2p_rtr_and_no_crc_decode_cleanly() {
    assert!(
        check_clean(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/fixtures/siw/p2p-ib_write_lat.pcap"
            ),
            false
        ) > 0
    );
    let mut rtr = 0;
    for (_, a, b) in tcp_streams(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/siw/crcp2p-rping.pcap"
    )) {
        let Some(d) = decode(&a, &b) else { continue };
        // The initiator's first FPDU is the RTR: a zero-length RDMA Write to STag 1.
        if let Some((14, Some(DdpHeader::Tagged(t)), p)) = d.dirs[0].0.hdrs.first() {
            assert_eq!(
                (t.stag, t.to, t.rdmap.opcode(), p.len()),
                (1, 0, Opcode::Write, 0)
            );
            rtr += 1;
        }
    }
    assert!(rtr > 0);
}

#[test]
fn siw_mpa_probe_faults_are_recognised() {
    let mut crc_errors = 0;
    let mut siw_terminates = 0;
    let mut rejected = 0;
    for (_, a, b) in tcp_streams(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/siw/crc-mpa-probe.pcap"
    )) {
        let Some(d) = decode(&a, &b) else { continue };
        rejected += usize::from(d.rejected);
        // The probe's deliberately bad CRC is caught.
        if let Err(e) = d.dirs[0].1 {
            assert_eq!(e.term_code(), TermCode::MPA_CRC);
            crc_errors += 1;
            // siw answers with one Terminate on QN 2 whose control word is bit-swapped.
            let term = d.dirs[1].0.hdrs.iter().find(|(_, h, _)| {
                matches!(h, Some(DdpHeader::Untagged(u)) if u.rdmap.opcode() == Opcode::Terminate)
            });
            let (_, h, body) = term.expect("siw Terminate");
            let Some(DdpHeader::Untagged(u)) = h else {
                unreachable!()
            };
            assert_eq!((u.qn, u.msn), (2, 1));
            assert_eq!(&body[..4], &[0x02, 0x02, 0x00, 0x00]);
            assert_eq!(TerminateRepr::siw_swapped(body), Some(TermCode::MPA_CRC));
            siw_terminates += 1;
        }
    }
    assert_eq!(crc_errors, 1);
    assert_eq!(siw_terminates, 1);
    assert!(rejected >= 1, "the markers request is rejected");
}
