//! An independent check of sctp-lite's and ddp-sctp's bytes: a whole
//! simulated DDP-over-SCTP association (RFC 5043 over RFC 9260) — INIT /
//! INIT-ACK with the Adaptation Layer Indication, COOKIE-ECHO / COOKIE-ACK,
//! DDP Stream Session Control (PPID 17), DDP Segments (PPID 16), SACKs, a
//! HEARTBEAT and its ACK, SHUTDOWN / SHUTDOWN-ACK / SHUTDOWN-COMPLETE — is
//! written as Ethernet/IPv4 (protocol 132) frames into a pcap with the
//! simulator's [`PcapWriter`], and decoded by Wireshark (tshark) with CRC32c
//! verification on (RFC 9260 §6.8, Appendix A).
//!
//! Skipped (with a `SKIP` line) where tshark is not installed, except under
//! CI (`CI` set), where a missing tshark is a failure.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::process::Command;

use ddp_sctp::{listener, DdpAssociation, DdpEvent, ADAPTATION_DDP};
use iwarp_sim::pcap::PcapWriter;
use sctp_lite::assoc::{Config, ListenOutcome};
use sctp_lite::wire::{ChunkRepr, SctpPacket};
use tcp_lite::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
/// 2026-01-01T00:00:00Z, so the capture has plausible timestamps.
const EPOCH: u64 = 1_767_225_600 * SEC;

#[derive(Clone, Copy)]
struct Host {
    mac: [u8; 6],
    ip: [u8; 4],
}
const A: Host = Host {
    mac: [0x02, 0, 0, 0, 0, 0x0a],
    ip: [10, 0, 5, 1],
};
const B: Host = Host {
    mac: [0x02, 0, 0, 0, 0, 0x0b],
    ip: [10, 0, 5, 2],
};

/// Wraps one SCTP packet in Ethernet II and a 20-octet IPv4 header
/// (protocol 132, RFC 9260 §1.1 / IANA).
fn frame(from: Host, to: Host, ident: u16, sctp: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + sctp.len()];
    EthernetRepr {
        src_addr: EthernetAddress(from.mac),
        dst_addr: EthernetAddress(to.mac),
        ethertype: EtherType::IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]))
    .unwrap();
    Ipv4Repr {
        src_addr: Ipv4Address(from.ip),
        dst_addr: Ipv4Address(to.ip),
        protocol: IpProtocol::SCTP,
        payload_len: sctp.len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        identification: ident,
        dont_frag: true,
        more_frags: false,
        fragment_offset: 0,
        options_len: 0,
    }
    .emit(&mut Ipv4Packet::new_unchecked(
        &mut f[ETHERNET_HEADER_LEN..],
    ))
    .unwrap();
    f[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN..].copy_from_slice(sctp);
    f
}

/// The capture: every SCTP packet with its direction and time.
struct Capture {
    packets: Vec<(u64, bool, Vec<u8>)>,
}

impl Capture {
    fn push(&mut self, now: u64, a_to_b: bool, p: &[u8]) {
        self.packets.push((now, a_to_b, p.to_vec()));
    }

    fn write(&self, path: &std::path::Path) {
        let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
        for (i, (now, a_to_b, p)) in self.packets.iter().enumerate() {
            let (from, to) = if *a_to_b { (A, B) } else { (B, A) };
            w.write_frame(EPOCH + now, &frame(from, to, i as u16, p))
                .unwrap();
        }
        w.flush().unwrap();
    }

    /// (chunk type, ppid for DATA) of every chunk we sent, parsed by our
    /// own code — what tshark must agree with.
    fn chunk_types(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for (_, _, p) in &self.packets {
            let p = SctpPacket::new_checked(&p[..]).unwrap();
            for c in p.chunks() {
                v.push(c.unwrap().ty);
            }
        }
        v
    }

    fn ppids(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for (_, _, p) in &self.packets {
            let p = SctpPacket::new_checked(&p[..]).unwrap();
            for c in p.chunks() {
                if let Ok(ChunkRepr::Data(d)) = ChunkRepr::parse(&c.unwrap()) {
                    v.push(d.ppid);
                }
            }
        }
        v
    }
}

/// Moves packets both ways at `now` until both sides are quiet (bounded).
fn exchange(now: u64, a: &mut DdpAssociation, b: &mut DdpAssociation, cap: &mut Capture) {
    let mut buf = vec![0u8; 2048];
    for _ in 0..100 {
        let mut moved = false;
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            cap.push(now, true, &buf[..n]);
            b.handle_packet(now, &buf[..n]);
            moved = true;
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            cap.push(now, false, &buf[..n]);
            a.handle_packet(now, &buf[..n]);
            moved = true;
        }
        if !moved {
            return;
        }
    }
    panic!("link never went quiet");
}

/// Runs both sides' timers up to `until` (bounded), moving packets after each.
fn run_until(until: u64, a: &mut DdpAssociation, b: &mut DdpAssociation, cap: &mut Capture) {
    for _ in 0..1000 {
        let next = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t <= until => {
                a.handle_timeout(t);
                b.handle_timeout(t);
                exchange(t, a, b, cap);
            }
            _ => return,
        }
    }
    panic!("timers never settled");
}

fn events(d: &mut DdpAssociation) -> Vec<DdpEvent> {
    std::iter::from_fn(|| d.poll_event()).collect()
}

/// The whole association, captured.
fn simulate() -> Capture {
    let mut cap = Capture {
        packets: Vec::new(),
    };
    let cfg = |secret| Config {
        secret: [secret; 16],
        streams: 2,
        heartbeat_interval: 30 * SEC,
        ..Config::default()
    };
    let mut a = DdpAssociation::connect(cfg(1), 40_000, 5_000, 0, 7).unwrap();
    let mut l = listener(cfg(2)).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut out = vec![0u8; 2048];
    // INIT → INIT-ACK → COOKIE-ECHO → (Listener's) Accept.
    let mut server = None;
    for _ in 0..4 {
        let Some(n) = a.poll_transmit(0, &mut buf) else {
            continue;
        };
        cap.push(0, true, &buf[..n]);
        match l.handle_packet(0, &buf[..n], &mut out) {
            ListenOutcome::Reply(m) => {
                cap.push(0, false, &out[..m]);
                a.handle_packet(0, &out[..m]);
            }
            ListenOutcome::Accept(s) => {
                server = Some(*s);
                break;
            }
            ListenOutcome::Drop => panic!("listener dropped a packet of the handshake"),
        }
    }
    let mut b = DdpAssociation::wrap(server.unwrap(), cfg(2).max_packet);
    exchange(0, &mut a, &mut b, &mut cap);
    assert_eq!(events(&mut a), [DdpEvent::Connected]);
    assert_eq!(events(&mut b), [DdpEvent::Connected]);

    // DDP Stream Session Initiate / Accept (PPID 17), then segments both
    // ways (PPID 16), then a Terminate (PPID 17).
    let t = 10 * MS;
    a.initiate(0, b"hello").unwrap();
    exchange(t, &mut a, &mut b, &mut cap);
    assert!(matches!(
        events(&mut b)[..],
        [DdpEvent::SessionRequested { stream: 0, .. }]
    ));
    b.accept(0, b"welcome").unwrap();
    exchange(t, &mut a, &mut b, &mut cap);
    assert!(matches!(
        events(&mut a)[..],
        [DdpEvent::SessionAccepted { stream: 0, .. }]
    ));
    let t = 20 * MS;
    for i in 0..4u8 {
        a.send_segment(0, &[i; 100]).unwrap();
    }
    b.send_segment(0, &[0xee; 300]).unwrap();
    exchange(t, &mut a, &mut b, &mut cap);
    // Let the delayed SACK timers fire so SACKs are in the capture.
    run_until(t + SEC, &mut a, &mut b, &mut cap);
    let got_b: Vec<_> = events(&mut b)
        .into_iter()
        .filter(|e| matches!(e, DdpEvent::Segment { .. }))
        .collect();
    assert_eq!(got_b.len(), 4);
    let t = 2 * SEC;
    a.terminate(t, 0).unwrap();
    exchange(t, &mut a, &mut b, &mut cap);
    run_until(t + SEC, &mut a, &mut b, &mut cap);

    // Idle until a HEARTBEAT has been sent and answered.
    let mut now = 3 * SEC;
    for _ in 0..10 {
        if a.sctp().stats().heartbeat_acks > 0 && b.sctp().stats().heartbeat_acks > 0 {
            break;
        }
        now += 30 * SEC;
        run_until(now, &mut a, &mut b, &mut cap);
    }
    assert!(a.sctp().stats().heartbeat_acks > 0);

    // Graceful shutdown (RFC 9260 §9.2).
    now += SEC;
    a.shutdown(now);
    exchange(now, &mut a, &mut b, &mut cap);
    run_until(now + 5 * SEC, &mut a, &mut b, &mut cap);
    assert!(a.sctp().is_closed() && b.sctp().is_closed());
    cap
}

fn tshark(path: &str, extra: &[&str]) -> String {
    let o = Command::new("tshark")
        .args(["-r", path, "-o", "sctp.checksum:CRC 32c"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn wireshark_decodes_a_ddp_sctp_association() {
    if Command::new("tshark").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "tshark missing under CI");
        println!("SKIP: tshark not installed");
        eprintln!("SKIP: tshark not installed");
        return;
    }
    let cap = simulate();
    // Our own parse: every chunk type the brief asks for is in the capture.
    let types = cap.chunk_types();
    for (t, name) in [
        (1, "INIT"),
        (2, "INIT-ACK"),
        (10, "COOKIE-ECHO"),
        (11, "COOKIE-ACK"),
        (0, "DATA"),
        (3, "SACK"),
        (4, "HEARTBEAT"),
        (5, "HEARTBEAT-ACK"),
        (7, "SHUTDOWN"),
        (8, "SHUTDOWN-ACK"),
        (14, "SHUTDOWN-COMPLETE"),
    ] {
        assert!(types.contains(&t), "no {name} chunk in the capture");
    }
    let ppids = cap.ppids();

    let dir = std::env::temp_dir().join(format!("iwarp-sctp-wireshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ddp-sctp.pcap");
    cap.write(&path);
    let p = path.to_str().unwrap();

    // 1. Full decode: every packet's CRC32c verified, none bad.
    let text = tshark(p, &["-V"]);
    assert!(!text.is_empty());
    assert_eq!(
        text.matches("[Checksum Status: Good]").count(),
        cap.packets.len(),
        "not every packet's checksum is good"
    );
    for bad in ["incorrect", "Bad SCTP checksum", "[Checksum Status: Bad]"] {
        assert!(!text.contains(bad), "tshark reports {bad:?}");
    }
    assert!(!text.contains("Malformed"), "malformed packet in decode");

    // 2. Per packet, as fields: checksum status and chunk types agree with
    // what we sent.
    let fields = tshark(
        p,
        &[
            "-T",
            "fields",
            "-e",
            "sctp.checksum.status",
            "-e",
            "sctp.chunk_type",
        ],
    );
    let rows: Vec<&str> = fields.lines().collect();
    assert_eq!(rows.len(), cap.packets.len());
    let mut ws_types = Vec::new();
    for r in &rows {
        let (status, types) = r.split_once('\t').unwrap();
        // Wireshark's PROTO_CHECKSUM_E_GOOD = 1.
        assert_eq!(status, "1", "checksum status of row {r:?}");
        ws_types.extend(types.split(',').map(|t| t.parse::<u8>().unwrap()));
    }
    assert_eq!(ws_types, types, "chunk types as Wireshark decoded them");

    // 3. The Adaptation Layer Indication (RFC 5061 §4.2.7, value 1 from
    // RFC 5043 §11.1) in INIT and INIT-ACK.
    let adap = tshark(
        p,
        &[
            "-Y",
            "sctp.adaptation_layer_indication",
            "-T",
            "fields",
            "-e",
            "sctp.chunk_type",
            "-e",
            "sctp.adaptation_layer_indication",
        ],
    );
    // tshark prints the indication in hex ("0x00000001").
    let adap: Vec<(u8, u32)> = adap
        .lines()
        .map(|l| {
            let (ty, v) = l.split_once('\t').unwrap();
            let v = u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap();
            (ty.parse().unwrap(), v)
        })
        .collect();
    assert_eq!(adap, [(1, ADAPTATION_DDP), (2, ADAPTATION_DDP)]);

    // 4. DATA chunks' PPIDs: 17 (DDP Stream Session Control) and 16 (DDP
    // Segment), exactly as we sent them.
    let ws_ppids = tshark(
        p,
        &[
            "-Y",
            "sctp.data_payload_proto_id",
            "-T",
            "fields",
            "-e",
            "sctp.data_payload_proto_id",
        ],
    );
    let ws_ppids: Vec<u32> = ws_ppids
        .lines()
        .flat_map(|l| l.split(','))
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(ws_ppids, ppids);
    assert!(ws_ppids.contains(&16) && ws_ppids.contains(&17));
    println!(
        "tshark: {} SCTP packets, {} chunks, all checksums good; PPIDs {:?}",
        cap.packets.len(),
        types.len(),
        ws_ppids
    );
    let _ = std::fs::remove_dir_all(&dir);
}
