//! Classic pcap output and a TCP flow recorder that wraps the simulated
//! stream in Ethernet/IPv4/TCP frames with consistent sequence numbers, so
//! Wireshark's heuristic `iwarp_mpa` dissector picks the session up from the
//! handshake on (wire-facts.md, "Checking bytes with Wireshark").
//!
//! Frames are built with [`tcp_lite::wire`], which fills in the IPv4 header
//! checksum (RFC 791 §3.1) and the TCP checksum over the pseudo-header
//! (RFC 9293 §3.1).

use std::io::{self, Write};

use tcp_lite::wire::{
    Error, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv4Repr, Layer, TcpFlags, TcpPacket, TcpRepr,
};

/// Magic number of a classic pcap file with nanosecond timestamps.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// pcap format version written: 2.4.
pub const VERSION: (u16, u16) = (2, 4);
/// Snap length written in the header; longer frames are cut to it.
pub const SNAPLEN: u32 = 262_144;
/// Link type 1: Ethernet (LINKTYPE_ETHERNET).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Length of the global header.
pub const GLOBAL_HEADER_LEN: usize = 24;
/// Length of a record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// Classic libpcap file writer (magic 0xa1b23c4d = nanosecond timestamps,
/// version 2.4, linktype 1 = Ethernet, snaplen 262144), little-endian.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC_NANOS.to_le_bytes());
        h[4..6].copy_from_slice(&VERSION.0.to_le_bytes());
        h[6..8].copy_from_slice(&VERSION.1.to_le_bytes());
        // thiszone (GMT offset) and sigfigs: zero.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Append one frame captured at `ts_ns` nanoseconds since the epoch.
    /// A frame longer than [`SNAPLEN`] is cut to it, its original length
    /// kept in the record. Fails on a timestamp past 2106 (32-bit seconds)
    /// or a frame longer than 4 GiB.
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let secs = u32::try_from(ts_ns / 1_000_000_000).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "pcap timestamp past 32-bit seconds",
            )
        })?;
        let nanos = (ts_ns % 1_000_000_000) as u32;
        let orig_len = u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
        let incl_len = orig_len.min(SNAPLEN);
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&nanos.to_le_bytes());
        h[8..12].copy_from_slice(&incl_len.to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&h)?;
        let kept = frame.get(..incl_len as usize).unwrap_or(frame);
        self.out.write_all(kept)
    }

    /// Flush the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One end of the recorded TCP connection.
#[derive(Debug, Clone, Copy)]
pub struct FlowEndpoint {
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 address.
    pub ip: [u8; 4],
    /// TCP port.
    pub port: u16,
}

/// Largest TCP payload of one frame: Total Length 65535 less 20 octets of
/// IPv4 header and 20 of TCP header (data segments carry no options).
pub const MAX_PAYLOAD: usize = 65_535 - 20 - 20;
/// Window advertised in every segment.
pub const WINDOW: u16 = 65_535;
/// Time to Live of every packet.
pub const TTL: u8 = 64;

#[derive(Debug, Clone, Copy)]
struct Half {
    ep: FlowEndpoint,
    /// Next sequence number this side sends (SND.NXT).
    next_seq: u32,
    /// Identification of this side's next IPv4 packet.
    ip_id: u16,
}

/// Builds the Ethernet/IPv4/TCP frames of one TCP connection between `a`
/// (the active opener) and `b`, keeping sequence and acknowledgment numbers
/// consistent: SYN and FIN take one sequence number, data its length
/// (RFC 9293 §3.4), and every segment after the SYN acknowledges all the
/// other side has sent.
///
/// Every packet has DF set, TTL 64, an Identification that counts up per
/// side from 1, window 65535, and correct IPv4 and TCP checksums.
#[derive(Debug, Clone)]
pub struct TcpFlowRecorder {
    a: Half,
    b: Half,
    mss: u16,
}

impl TcpFlowRecorder {
    /// A connection about to open; `mss` is announced in the SYNs.
    pub fn new(a: FlowEndpoint, b: FlowEndpoint, isn_a: u32, isn_b: u32, mss: u16) -> Self {
        TcpFlowRecorder {
            a: Half {
                ep: a,
                next_seq: isn_a,
                ip_id: 1,
            },
            b: Half {
                ep: b,
                next_seq: isn_b,
                ip_id: 1,
            },
            mss,
        }
    }

    /// MSS announced.
    pub fn mss(&self) -> u16 {
        self.mss
    }

    /// The next sequence number of `a` (`from_a`) or `b`.
    pub fn next_seq(&self, from_a: bool) -> u32 {
        if from_a {
            self.a.next_seq
        } else {
            self.b.next_seq
        }
    }

    /// Build one frame and, only when that succeeds, advance the sender's
    /// sequence number and IP Identification.
    fn frame(
        &mut self,
        from_a: bool,
        flags: TcpFlags,
        payload: &[u8],
        mss: Option<u16>,
    ) -> Result<Vec<u8>, Error> {
        let (src, dst) = if from_a {
            (self.a, self.b)
        } else {
            (self.b, self.a)
        };
        let (src_ip, dst_ip) = (Ipv4Address(src.ep.ip), Ipv4Address(dst.ep.ip));
        let tcp = TcpRepr {
            // RFC 9293 §3.1: the Acknowledgment Number is meaningful only with
            // ACK set; the opening SYN carries zero.
            ack_number: if flags.contains(TcpFlags::ACK) {
                dst.next_seq
            } else {
                0
            },
            window: WINDOW,
            max_seg_size: mss,
            payload,
            ..TcpRepr::new(src.ep.port, dst.ep.port, src.next_seq, flags)
        };
        let ip = Ipv4Repr {
            src_addr: src_ip,
            dst_addr: dst_ip,
            protocol: IpProtocol::TCP,
            payload_len: tcp.buffer_len(),
            ttl: TTL,
            dscp: 0,
            ecn: 0,
            identification: src.ip_id,
            dont_frag: true,
            more_frags: false,
            fragment_offset: 0,
            options_len: 0,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress(src.ep.mac),
            dst_addr: EthernetAddress(dst.ep.mac),
            ethertype: EtherType::IPV4,
        };
        let total = ip.buffer_len() + ip.payload_len;
        if total > usize::from(u16::MAX) {
            return Err(Error::TooLarge {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: total,
                max: usize::from(u16::MAX),
            });
        }
        let mut buf = vec![0u8; eth.buffer_len() + total];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame)?;
        let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
        ip.emit(&mut packet)?;
        tcp.emit(
            &mut TcpPacket::new_unchecked(packet.payload_mut()),
            &src_ip,
            &dst_ip,
        )?;

        let consumed = tcp.segment_len() as u32; // at most MAX_PAYLOAD + 2
        let half = if from_a { &mut self.a } else { &mut self.b };
        half.next_seq = half.next_seq.wrapping_add(consumed);
        half.ip_id = half.ip_id.wrapping_add(1);
        Ok(buf)
    }

    /// A frame without payload: its build cannot fail (the sizes are fixed
    /// and small), but an empty vector stands in rather than a panic.
    fn control(&mut self, from_a: bool, flags: TcpFlags, mss: Option<u16>) -> Vec<u8> {
        let built = self.frame(from_a, flags, &[], mss);
        debug_assert!(built.is_ok(), "{built:?}");
        built.unwrap_or_default()
    }

    /// SYN (with MSS option), SYN-ACK (with MSS option), ACK.
    pub fn handshake(&mut self) -> Vec<Vec<u8>> {
        let mss = Some(self.mss);
        vec![
            self.control(true, TcpFlags::SYN, mss),
            self.control(false, TcpFlags::SYN | TcpFlags::ACK, mss),
            self.control(true, TcpFlags::ACK, None),
        ]
    }

    /// One data segment (PSH|ACK) from `a` (`from_a`) or `b` carrying
    /// `payload` verbatim; acknowledges everything the other side sent so far.
    /// A payload longer than [`MAX_PAYLOAD`] does not fit one IPv4 packet:
    /// the error says so and the flow is left as it was.
    pub fn data(&mut self, from_a: bool, payload: &[u8]) -> Result<Vec<u8>, Error> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::TooLarge {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: payload.len().saturating_add(40),
                max: usize::from(u16::MAX),
            });
        }
        self.frame(from_a, TcpFlags::PSH | TcpFlags::ACK, payload, None)
    }

    /// A pure ACK from one side.
    pub fn ack(&mut self, from_a: bool) -> Vec<u8> {
        self.control(from_a, TcpFlags::ACK, None)
    }

    /// FIN|ACK from one side (consumes one sequence number).
    pub fn fin(&mut self, from_a: bool) -> Vec<u8> {
        self.control(from_a, TcpFlags::FIN | TcpFlags::ACK, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_header_bytes() {
        let w = PcapWriter::new(Vec::new()).unwrap().into_inner();
        assert_eq!(
            w,
            [
                0x4d, 0x3c, 0xb2, 0xa1, // magic, nanosecond resolution
                0x02, 0x00, 0x04, 0x00, // version 2.4
                0x00, 0x00, 0x00, 0x00, // thiszone
                0x00, 0x00, 0x00, 0x00, // sigfigs
                0x00, 0x00, 0x04, 0x00, // snaplen 262144
                0x01, 0x00, 0x00, 0x00, // LINKTYPE_ETHERNET
            ]
        );
    }

    #[test]
    fn record_header_bytes() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(3_000_000_123, &[0xaa, 0xbb, 0xcc]).unwrap();
        let out = w.into_inner();
        assert_eq!(
            out[GLOBAL_HEADER_LEN..],
            [
                3, 0, 0, 0, // ts_sec
                123, 0, 0, 0, // ts_nsec
                3, 0, 0, 0, // incl_len
                3, 0, 0, 0, // orig_len
                0xaa, 0xbb, 0xcc,
            ]
        );
    }

    #[test]
    fn long_frames_are_cut_to_snaplen() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let frame = vec![7u8; SNAPLEN as usize + 10];
        w.write_frame(0, &frame).unwrap();
        let out = w.into_inner();
        let rec = &out[GLOBAL_HEADER_LEN..];
        assert_eq!(rec[8..12], SNAPLEN.to_le_bytes());
        assert_eq!(rec[12..16], (SNAPLEN + 10).to_le_bytes());
        assert_eq!(rec.len(), RECORD_HEADER_LEN + SNAPLEN as usize);
    }

    #[test]
    fn timestamp_past_2106_is_an_error() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        assert!(w.write_frame(u64::MAX, &[]).is_err());
        assert_eq!(w.into_inner().len(), GLOBAL_HEADER_LEN, "nothing written");
    }

    fn ep(last: u8, port: u16) -> FlowEndpoint {
        FlowEndpoint {
            mac: [2, 0, 0, 0, 0, last],
            ip: [10, 0, 0, last],
            port,
        }
    }

    /// Everything the tests check about one frame, parsed with tcp-lite
    /// (which verifies both checksums).
    #[derive(Debug)]
    struct Seen {
        eth: EthernetRepr,
        ip: Ipv4Repr,
        flags: TcpFlags,
        seq: u32,
        ack: u32,
        ports: (u16, u16),
        window: u16,
        mss: Option<u16>,
        payload: Vec<u8>,
    }

    fn parse(frame: &[u8]) -> Seen {
        let eth_frame = EthernetFrame::new_checked(frame).unwrap();
        let eth = EthernetRepr::parse(&eth_frame).unwrap();
        let packet = Ipv4Packet::new_checked(eth_frame.payload()).unwrap();
        let ip = Ipv4Repr::parse(&packet).unwrap();
        assert!(packet.verify_checksum());
        let segment = TcpPacket::new_checked(packet.payload()).unwrap();
        assert!(segment.verify_checksum(&ip.src_addr, &ip.dst_addr));
        let tcp = TcpRepr::parse(&segment, &ip.src_addr, &ip.dst_addr).unwrap();
        assert_eq!(frame.len(), 14 + 20 + tcp.buffer_len());
        Seen {
            eth,
            ip,
            flags: tcp.flags,
            seq: tcp.seq_number,
            ack: tcp.ack_number,
            ports: (tcp.src_port, tcp.dst_port),
            window: tcp.window,
            mss: tcp.max_seg_size,
            payload: tcp.payload.to_vec(),
        }
    }

    #[test]
    fn handshake_data_fin_parse_back() {
        let (a, b) = (ep(1, 1000), ep(2, 2000));
        let mut r = TcpFlowRecorder::new(a, b, 100, 0xffff_fffe, 1448);
        assert_eq!(r.mss(), 1448);
        let hs = r.handshake();
        assert_eq!(hs.len(), 3);
        let d1 = r.data(true, b"hello").unwrap();
        let d2 = r.data(false, b"hi!").unwrap(); // b's sequence numbers wrap
        let d3 = r.data(true, &[0x5a; 1448]).unwrap();
        let ack = r.ack(false);
        let fin_a = r.fin(true);
        let fin_b = r.fin(false);
        let last = r.ack(true);

        let syn = parse(&hs[0]);
        let syn_ack = parse(&hs[1]);
        let hs_ack = parse(&hs[2]);
        let (d1, d2, d3) = (parse(&d1), parse(&d2), parse(&d3));
        let (ack, fin_a, fin_b, last) = (parse(&ack), parse(&fin_a), parse(&fin_b), parse(&last));

        // (frame, flags, seq, ack, from a)
        let (syn_f, ack_f, psh_ack) = (TcpFlags::SYN, TcpFlags::ACK, TcpFlags::PSH | TcpFlags::ACK);
        let fin_ack = TcpFlags::FIN | TcpFlags::ACK;
        let expect = [
            (&syn, syn_f, 100, 0, true),
            (&syn_ack, syn_f | ack_f, 0xffff_fffe, 101, false), // SYN takes one
            (&hs_ack, ack_f, 101, 0xffff_ffff, true),
            (&d1, psh_ack, 101, 0xffff_ffff, true),
            (&d2, psh_ack, 0xffff_ffff, 106, false), // data takes its length
            (&d3, psh_ack, 106, 2, true),            // 0xffff_ffff + 3 wraps to 2
            (&ack, ack_f, 2, 106 + 1448, false),
            (&fin_a, fin_ack, 106 + 1448, 2, true),
            (&fin_b, fin_ack, 2, 106 + 1448 + 1, false), // FIN takes one
            (&last, ack_f, 106 + 1448 + 1, 3, true),
        ];
        let mut ids = (0u16, 0u16);
        for (i, (seen, flags, seq, ack, from_a)) in expect.into_iter().enumerate() {
            assert_eq!(seen.flags, flags, "frame {i}");
            assert_eq!((seen.seq, seen.ack), (seq, ack), "frame {i}");
            let (src, dst) = if from_a { (a, b) } else { (b, a) };
            assert_eq!(seen.eth.src_addr.0, src.mac);
            assert_eq!(seen.eth.dst_addr.0, dst.mac);
            assert_eq!(seen.eth.ethertype, EtherType::IPV4);
            assert_eq!((seen.ip.src_addr.0, seen.ip.dst_addr.0), (src.ip, dst.ip));
            assert_eq!(seen.ports, (src.port, dst.port));
            assert_eq!(seen.ip.protocol, IpProtocol::TCP);
            assert!(seen.ip.dont_frag && !seen.ip.more_frags);
            assert_eq!(seen.ip.ttl, 64);
            assert_eq!(seen.window, 65535);
            // Identification counts up per side from 1.
            let id = if from_a { &mut ids.0 } else { &mut ids.1 };
            *id += 1;
            assert_eq!(seen.ip.identification, *id, "frame {i}");
            assert_eq!(seen.mss, if i < 2 { Some(1448) } else { None });
        }
        assert_eq!(d1.payload, b"hello");
        assert_eq!(d2.payload, b"hi!");
        assert_eq!(d3.payload, [0x5a; 1448]);
        assert!(syn.payload.is_empty() && fin_b.payload.is_empty());
        assert_eq!(r.next_seq(true), 106 + 1448 + 1);
        assert_eq!(r.next_seq(false), 3);
    }

    #[test]
    fn payload_limit() {
        let mut r = TcpFlowRecorder::new(ep(1, 1), ep(2, 2), 0, 0, 1460);
        r.handshake();
        let before = r.next_seq(true);
        let max = r.data(true, &vec![1u8; MAX_PAYLOAD]).unwrap();
        assert_eq!(max.len(), 14 + 65_535);
        assert_eq!(parse(&max).payload.len(), 65_495);
        assert_eq!(r.next_seq(true), before.wrapping_add(65_495));
        assert_eq!(
            r.data(true, &vec![1u8; MAX_PAYLOAD + 1]),
            Err(Error::TooLarge {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: 65_536,
                max: 65_535,
            })
        );
        // A refused segment leaves the flow as it was.
        assert_eq!(r.next_seq(true), before.wrapping_add(65_495));
        assert_eq!(parse(&r.ack(true)).ip.identification, 4);
    }

    #[test]
    fn written_capture_reads_back() {
        let mut r = TcpFlowRecorder::new(ep(1, 1000), ep(2, 2000), 7, 9, 1460);
        let mut frames = r.handshake();
        frames.push(r.data(true, b"abc").unwrap());
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            w.write_frame(1_000 * i as u64, f).unwrap();
        }
        let out = w.into_inner();
        // Walk the records back.
        let mut at = GLOBAL_HEADER_LEN;
        for (i, f) in frames.iter().enumerate() {
            let rec = &out[at..at + RECORD_HEADER_LEN];
            assert_eq!(rec[4..8], (1_000 * i as u32).to_le_bytes());
            assert_eq!(rec[8..12], (f.len() as u32).to_le_bytes());
            at += RECORD_HEADER_LEN;
            assert_eq!(&out[at..at + f.len()], &f[..]);
            at += f.len();
        }
        assert_eq!(at, out.len());
    }
}
