//! `SctpHost`'s frames, byte by byte, with no second engine: ARP before the
//! first packet, the INIT inside IPv4 protocol 132 or inside UDP 9899 →
//! 9899 (RFC 6951) with a UDP checksum recomputed here independently
//! (RFC 768 / RFC 1071), the DDP adaptation indication in it, fragments
//! and other addresses dropped, and the out-of-the-blue ABORT of RFC 9260
//! §8.4 for a packet to a port nobody listens on.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_datapath::over_sctp::{SctpCommand, SctpHost, SctpHostConfig, SctpOutput};
use iwarp_datapath::runtime::Engine;
use tcp_lite::arp::emit_frame;
use tcp_lite::wire::{ArpOperation, ArpRepr, EthernetAddress, Ipv4Address};

const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const OUR_IP: [u8; 4] = [192, 168, 50, 1];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const PEER_IP: [u8; 4] = [192, 168, 50, 2];

fn host(udp: bool) -> SctpHost {
    let mut cfg = SctpHostConfig::new(OUR_MAC, OUR_IP, [9; 16]);
    if udp {
        cfg.udp_port = Some(9899);
        cfg.sctp.max_packet = 1472;
    }
    SctpHost::new(cfg).unwrap()
}

/// Frames (joined parts) and outputs of one poll.
fn poll(h: &mut SctpHost, now: u64) -> (Vec<Vec<u8>>, Vec<SctpOutput>) {
    let mut frames = Vec::new();
    let mut outs = Vec::new();
    h.poll(
        now,
        &mut |parts: &[&[u8]]| frames.push(parts.concat()),
        &mut |o| outs.push(o),
    );
    (frames, outs)
}

fn arp_reply() -> Vec<u8> {
    let mut f = vec![0u8; 64];
    let n = emit_frame(
        &ArpRepr {
            operation: ArpOperation::REPLY,
            source_hardware_addr: EthernetAddress(PEER_MAC),
            source_protocol_addr: Ipv4Address(PEER_IP),
            target_hardware_addr: EthernetAddress(OUR_MAC),
            target_protocol_addr: Ipv4Address(OUR_IP),
        },
        EthernetAddress(PEER_MAC),
        &mut f,
    )
    .unwrap();
    f.truncate(n);
    f
}

/// RFC 1071 sum, written here rather than taken from tcp-lite.
fn ones_sum(parts: &[&[u8]]) -> u16 {
    let mut acc: u32 = 0;
    for p in parts {
        for w in p.chunks(2) {
            let v = u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]);
            acc += u32::from(v);
        }
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Connects to the peer and returns the frame that carries the INIT.
fn init_frame(udp: bool) -> Vec<u8> {
    let mut h = host(udp);
    h.handle_command(
        SctpCommand::Connect {
            token: 1,
            remote: PEER_IP,
            port: 5000,
            local_port: 40000,
            udp_port: udp.then_some(9899),
        },
        0,
    );
    let (frames, outs) = poll(&mut h, 0);
    assert!(matches!(
        outs[..],
        [SctpOutput::Opening {
            token: 1,
            result: Ok(_)
        }]
    ));
    // Only an ARP request (broadcast, EtherType 0x0806) until the peer's
    // MAC is known; the INIT waits in the ARP queue.
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0][0..6], [0xff; 6]);
    assert_eq!(frames[0][12..14], [0x08, 0x06]);
    h.handle_frame(&arp_reply(), 1);
    let (frames, _) = poll(&mut h, 1);
    assert_eq!(frames.len(), 1, "the INIT, once ARP resolved");
    frames.into_iter().next().unwrap()
}

#[test]
fn init_in_raw_ipv4() {
    let f = init_frame(false);
    assert_eq!(f[0..6], PEER_MAC);
    assert_eq!(f[6..12], OUR_MAC);
    assert_eq!(f[12..14], [0x08, 0x00]);
    let ip = &f[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[6] & 0x40, 0x40, "DF");
    assert_eq!(ip[9], 132, "protocol SCTP");
    assert_eq!(ip[12..16], OUR_IP);
    assert_eq!(ip[16..20], PEER_IP);
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        f.len() - 14
    );
    assert_eq!(ones_sum(&[ip]), 0xffff, "IPv4 header checksum");
    let sctp = &f[34..];
    assert_eq!(sctp[0..4], [0x9c, 0x40, 0x13, 0x88], "ports 40000 -> 5000");
    assert_eq!(sctp[4..8], [0, 0, 0, 0], "INIT's verification tag is 0");
    assert_eq!(sctp[12], 1, "INIT chunk");
    let want = [0xc0, 0x06, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01];
    assert!(sctp.windows(8).any(|w| w == want), "no DDP indication");
}

#[test]
fn init_in_udp_9899() {
    let f = init_frame(true);
    let ip = &f[14..34];
    assert_eq!(ip[9], 17, "protocol UDP");
    assert_eq!(ones_sum(&[ip]), 0xffff, "IPv4 header checksum");
    let udp = &f[34..];
    assert_eq!(udp[0..4], [0x26, 0xab, 0x26, 0xab], "9899 -> 9899");
    let len = u16::from_be_bytes([udp[4], udp[5]]);
    assert_eq!(usize::from(len), udp.len());
    assert_ne!(udp[6..8], [0, 0], "UDP checksum sent");
    // Pseudo-header (RFC 768): source, destination, zero, 17, UDP length.
    let mut ph = [0u8; 12];
    ph[0..4].copy_from_slice(&OUR_IP);
    ph[4..8].copy_from_slice(&PEER_IP);
    ph[9] = 17;
    ph[10..12].copy_from_slice(&len.to_be_bytes());
    assert_eq!(ones_sum(&[&ph, udp]), 0xffff, "UDP checksum");
    let sctp = &udp[8..];
    assert_eq!(sctp[0..4], [0x9c, 0x40, 0x13, 0x88]);
    assert_eq!(sctp[12], 1, "INIT chunk inside UDP");
    let want = [0xc0, 0x06, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01];
    assert!(sctp.windows(8).any(|w| w == want));
}

/// An Ethernet/IPv4 frame from the peer to us carrying `payload` with
/// protocol `proto`, flags/fragment offset `frag`.
fn ipv4_frame(proto: u8, frag: u16, dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&OUR_MAC);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&PEER_IP);
    ip[16..20].copy_from_slice(&dst);
    let c = !ones_sum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(payload);
    f
}

/// A SCTP packet 5000 -> `dport`, tag 0x11223344, with one DATA chunk
/// (TSN 1, stream 0, PPID 16), CRC32c filled in.
fn data_packet(dport: u16) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&5000u16.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&0x1122_3344u32.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    // DATA: type 0, flags U|B|E, length 16 + 4.
    p.extend_from_slice(&[0, 0x07, 0, 20]);
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&16u32.to_be_bytes());
    p.extend_from_slice(&[0, 1, 0xaa, 0xbb]);
    let crc = crc32c::crc32c(&p);
    // RFC 9260 Appendix A: least significant octet first.
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn out_of_the_blue_data_gets_abort_with_t_bit() {
    let mut h = host(false);
    h.handle_frame(&arp_reply(), 0);
    h.handle_frame(&ipv4_frame(132, 0, OUR_IP, &data_packet(7777)), 0);
    let (frames, _) = poll(&mut h, 0);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    assert_eq!(f[23], 132);
    let sctp = &f[34..];
    assert_eq!(sctp[0..4], [0x1e, 0x61, 0x13, 0x88], "7777 -> 5000");
    // §8.4 item 8 / §8.5.1 B: the packet's tag reflected, T bit set.
    assert_eq!(sctp[4..8], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(sctp[12], 6, "ABORT");
    assert_eq!(sctp[13] & 1, 1, "T bit");
    assert_eq!(h.stats().ootb_replies, 1);
}

/// A SCTP packet 5000 -> `dport` with tag `vtag` holding one INIT
/// (Initiate Tag `itag`, a_rwnd 65536, 4 streams each way, TSN 1), and
/// `extra` chunk octets after it; CRC32c filled in.
fn init_packet(dport: u16, vtag: u32, itag: u32, extra: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&5000u16.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&vtag.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&[1, 0, 0, 20]);
    p.extend_from_slice(&itag.to_be_bytes());
    p.extend_from_slice(&65_536u32.to_be_bytes());
    p.extend_from_slice(&[0, 4, 0, 4]);
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(extra);
    let crc = crc32c::crc32c(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn an_init_to_a_port_nobody_listens_on_gets_abort_with_its_initiate_tag() {
    let mut h = host(false);
    h.handle_frame(&arp_reply(), 0);
    h.handle_frame(
        &ipv4_frame(132, 0, OUR_IP, &init_packet(7777, 0, 0xa1b2_c3d4, &[])),
        0,
    );
    let (frames, _) = poll(&mut h, 0);
    assert_eq!(frames.len(), 1, "one ABORT");
    let sctp = &frames[0][34..];
    assert_eq!(sctp[0..4], [0x1e, 0x61, 0x13, 0x88], "7777 -> 5000");
    // RFC 9260 §8.4 item 3: the tag is the INIT's Initiate Tag, T bit 0.
    assert_eq!(sctp[4..8], [0xa1, 0xb2, 0xc3, 0xd4]);
    assert_eq!(sctp[12..16], [6, 0, 0, 4], "ABORT, T bit clear, no cause");
    assert_eq!(h.stats().ootb_replies, 1);
    // An INIT whose own tag is not 0 (§8.5.1 A), or one bundled with
    // another chunk (§6.10), gets nothing.
    h.handle_frame(
        &ipv4_frame(132, 0, OUR_IP, &init_packet(7777, 9, 0xa1b2_c3d4, &[])),
        0,
    );
    let heartbeat = [4, 0, 0, 8, 0, 1, 0, 4];
    h.handle_frame(
        &ipv4_frame(
            132,
            0,
            OUR_IP,
            &init_packet(7777, 0, 0xa1b2_c3d4, &heartbeat),
        ),
        0,
    );
    let (frames, _) = poll(&mut h, 0);
    assert!(frames.is_empty(), "no answer: {frames:?}");
    assert_eq!(h.stats().ootb_replies, 1);
}

#[test]
fn fragments_other_addresses_and_bad_udp_checksums_are_dropped() {
    let mut h = host(true);
    h.handle_frame(&arp_reply(), 0);
    let d = data_packet(7777);
    // MF set; then a non-zero fragment offset.
    h.handle_frame(&ipv4_frame(132, 0x2000, OUR_IP, &d), 0);
    h.handle_frame(&ipv4_frame(132, 0x0001, OUR_IP, &d), 0);
    // Not our address.
    h.handle_frame(&ipv4_frame(132, 0, [192, 168, 50, 9], &d), 0);
    assert_eq!(h.stats().rx_dropped, 3);
    assert_eq!(h.stats().rx_packets, 0);
    // UDP to 9899 with a wrong checksum: dropped, counted.
    let mut u = Vec::new();
    u.extend_from_slice(&9899u16.to_be_bytes());
    u.extend_from_slice(&9899u16.to_be_bytes());
    u.extend_from_slice(&((8 + d.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0x12, 0x34]);
    u.extend_from_slice(&d);
    h.handle_frame(&ipv4_frame(17, 0, OUR_IP, &u), 0);
    assert_eq!(h.stats().udp_bad_checksum, 1);
    assert_eq!(h.stats().rx_packets, 0);
    // The same with checksum 0 (none, RFC 768): taken, answered with ABORT
    // inside UDP back to the source port.
    u[6..8].copy_from_slice(&[0, 0]);
    h.handle_frame(&ipv4_frame(17, 0, OUR_IP, &u), 0);
    assert_eq!(h.stats().rx_packets, 1);
    let (frames, _) = poll(&mut h, 0);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0][23], 17);
    assert_eq!(frames[0][34..38], [0x26, 0xab, 0x26, 0xab]);
    assert_eq!(frames[0][42 + 12], 6, "ABORT inside UDP");
    assert!(frames.iter().all(|f| f.len() > 42));
}

/// UDP datagram `sport` -> 9899 carrying `sctp`, checksum 0 (none).
fn udp_frame(sport: u16, sctp: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&9899u16.to_be_bytes());
    u.extend_from_slice(&((8 + sctp.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(sctp);
    ipv4_frame(17, 0, OUR_IP, &u)
}

/// Issue 27 item 4, RFC 6951 §5.4: an INIT (tag 0) on an established
/// UDP-encapsulated association does not move its remote UDP port; a
/// packet with the association's tag does.
#[test]
fn an_init_does_not_move_the_udp_port() {
    use sctp_lite::assoc::{Association, Config, State};
    use sctp_lite::wire::{self, ChunkRepr, HeaderRepr, InitParams, InitRepr};
    let mut h = host(true);
    h.handle_command(SctpCommand::Listen { port: 5000 }, 0);
    h.handle_frame(&arp_reply(), 0);
    let cfg = ddp_sctp::config(Config {
        secret: [3; 16],
        max_packet: 1472,
        ..Config::default()
    });
    let mut peer = Association::connect(cfg, 6000, 5000, 0, 1).unwrap();
    let mut buf = vec![0u8; 2048];
    // Frames from `h` to the peer: (UDP destination port, SCTP packet).
    let mut exchange = |h: &mut SctpHost, peer: &mut Association, sport: u16, now: u64| {
        let mut got = Vec::new();
        for i in 0..4 {
            // The last round after the delayed SACK timer (200 ms).
            let now = now + i * 100_000_000;
            while let Some(n) = peer.poll_transmit(now, &mut buf) {
                h.handle_frame(&udp_frame(sport, &buf[..n]), now);
            }
            let (frames, _) = poll(h, now);
            for f in frames {
                assert_eq!(f[23], 17, "inside UDP");
                let dport = u16::from_be_bytes([f[36], f[37]]);
                peer.handle_packet(now, &f[42..]);
                got.push((dport, f[42..].to_vec()));
            }
        }
        got
    };
    exchange(&mut h, &mut peer, 40001, 0);
    assert_eq!(peer.state(), State::Established);
    // An INIT from anyone who knows the ports, from UDP port 6666.
    let init = InitRepr {
        initiate_tag: 0x5555_5555,
        a_rwnd: 65536,
        num_outbound_streams: 4,
        num_inbound_streams: 4,
        initial_tsn: 1,
        params: InitParams {
            adaptation: Some(ddp_sctp::ADAPTATION_DDP),
            ..Default::default()
        },
    };
    let hdr = HeaderRepr {
        src_port: 6000,
        dst_port: 5000,
        verification_tag: 0,
    };
    let mut p = vec![0u8; 512];
    let n = wire::emit_packet(&hdr, &[ChunkRepr::Init(init)], &mut p).unwrap();
    h.handle_frame(&udp_frame(6666, &p[..n]), 0);
    let (frames, _) = poll(&mut h, 0);
    assert_eq!(frames.len(), 1, "the INIT-ACK");
    assert_eq!(frames[0][54], 2, "INIT-ACK");
    assert_eq!(
        u16::from_be_bytes([frames[0][36], frames[0][37]]),
        40001,
        "the association's UDP port, not the INIT's"
    );
    // The peer's own packets, from a new UDP port, move it (a SACK
    // answers its DATA there).
    peer.send(0, 16, true, &[0, 0, 1, 2]).unwrap();
    let got = exchange(&mut h, &mut peer, 40002, 0);
    assert!(!got.is_empty());
    assert!(got.iter().all(|(d, _)| *d == 40002), "{got:?}");
}

/// Issue 27 item 5: out-of-the-blue answers are rate limited (RFC 9260
/// §8.4 allows not answering): a burst of OOTB_BURST, then OOTB_PER_SEC.
#[test]
fn out_of_the_blue_answers_are_rate_limited() {
    use iwarp_datapath::over_sctp::{OOTB_BURST, OOTB_PER_SEC};
    let mut h = host(false);
    h.handle_frame(&arp_reply(), 0);
    let f = ipv4_frame(132, 0, OUR_IP, &data_packet(7777));
    for _ in 0..1000 {
        h.handle_frame(&f, 0);
    }
    assert_eq!(h.stats().ootb_replies, u64::from(OOTB_BURST));
    assert_eq!(h.stats().ootb_limited, 1000 - u64::from(OOTB_BURST));
    // One second later: at most OOTB_PER_SEC more.
    for _ in 0..1000 {
        h.handle_frame(&f, 1_000_000_000);
    }
    assert!(h.stats().ootb_replies <= u64::from(OOTB_BURST) + OOTB_PER_SEC);
    assert!(h.stats().ootb_replies > u64::from(OOTB_BURST));
}
