//! Classic pcap output and a TCP flow recorder that wraps the simulated
//! stream in Ethernet/IPv4/TCP frames with consistent sequence numbers, so
//! Wireshark's heuristic `iwarp_mpa` dissector picks the session up from the
//! handshake on (wire-facts.md, "Checking bytes with Wireshark").

use std::io::Write;

/// Classic libpcap file writer: nanosecond timestamps (magic 0xa1b23c4d),
/// version 2.4, link type 1 (Ethernet).
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

/// Snap length written in the header.
pub const SNAPLEN: u32 = 262_144;

impl<W: Write> PcapWriter<W> {
    /// Write the global header.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Append one frame.
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> std::io::Result<()> {
        let len =
            u32::try_from(frame.len()).map_err(|_| std::io::Error::other("frame too large"))?;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&len.min(SNAPLEN).to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&h)?;
        self.out
            .write_all(&frame[..frame.len().min(SNAPLEN as usize)])
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

/// Why a frame could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLarge(pub usize);

impl core::fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "TCP payload of {} octets does not fit one IPv4 packet",
            self.0
        )
    }
}

impl std::error::Error for FrameTooLarge {}

#[derive(Debug, Clone, Copy)]
struct Half {
    ep: FlowEndpoint,
    next_seq: u32,
    ip_id: u16,
}

/// Builds the frames of one TCP connection between `a` (active opener) and `b`.
#[derive(Debug, Clone)]
pub struct TcpFlowRecorder {
    a: Half,
    b: Half,
    mss: u16,
}

const ETH: usize = 14;
const IP: usize = 20;
const TCP: usize = 20;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// RFC 1071 one's complement sum.
fn ones_sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
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

    fn frame(&mut self, from_a: bool, flags: u8, payload: &[u8], options: &[u8]) -> Vec<u8> {
        let (src, dst) = if from_a {
            (self.a, self.b)
        } else {
            (self.b, self.a)
        };
        let ack = if flags & ACK != 0 { dst.next_seq } else { 0 };
        let tcp_len = TCP + options.len() + payload.len();
        let total = IP + tcp_len;
        let mut f = vec![0u8; ETH + total];
        f[0..6].copy_from_slice(&dst.ep.mac);
        f[6..12].copy_from_slice(&src.ep.mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[ETH..ETH + IP];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&src.ip_id.to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&src.ep.ip);
        ip[16..20].copy_from_slice(&dst.ep.ip);
        let c = fold(ones_sum(0, ip));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let t = &mut f[ETH + IP..];
        t[0..2].copy_from_slice(&src.ep.port.to_be_bytes());
        t[2..4].copy_from_slice(&dst.ep.port.to_be_bytes());
        t[4..8].copy_from_slice(&src.next_seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = (((TCP + options.len()) / 4) as u8) << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&65535u16.to_be_bytes());
        t[TCP..TCP + options.len()].copy_from_slice(options);
        t[TCP + options.len()..].copy_from_slice(payload);
        // RFC 9293 §3.1: checksum over the IPv4 pseudo-header and the segment.
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&src.ep.ip);
        pseudo[4..8].copy_from_slice(&dst.ep.ip);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        let c = fold(ones_sum(ones_sum(0, &pseudo), t));
        t[16..18].copy_from_slice(&c.to_be_bytes());
        let consumed = payload.len() as u32 + u32::from(flags & (SYN | FIN) != 0);
        let h = if from_a { &mut self.a } else { &mut self.b };
        h.next_seq = h.next_seq.wrapping_add(consumed);
        h.ip_id = h.ip_id.wrapping_add(1);
        f
    }

    /// SYN, SYN-ACK (both with the MSS option), ACK.
    pub fn handshake(&mut self) -> Vec<Vec<u8>> {
        let mut mss = [2u8, 4, 0, 0];
        mss[2..4].copy_from_slice(&self.mss.to_be_bytes());
        vec![
            self.frame(true, SYN, &[], &mss),
            self.frame(false, SYN | ACK, &[], &mss),
            self.frame(true, ACK, &[], &[]),
        ]
    }

    /// One PSH|ACK data segment carrying `payload` verbatim.
    pub fn data(&mut self, from_a: bool, payload: &[u8]) -> Result<Vec<u8>, FrameTooLarge> {
        if payload.len() > 65535 - IP - TCP {
            return Err(FrameTooLarge(payload.len()));
        }
        Ok(self.frame(from_a, PSH | ACK, payload, &[]))
    }

    /// A pure ACK.
    pub fn ack(&mut self, from_a: bool) -> Vec<u8> {
        self.frame(from_a, ACK, &[], &[])
    }

    /// FIN|ACK (consumes one sequence number).
    pub fn fin(&mut self, from_a: bool) -> Vec<u8> {
        self.frame(from_a, FIN | ACK, &[], &[])
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
            [0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0]
        );
    }

    fn ep(last: u8, port: u16) -> FlowEndpoint {
        FlowEndpoint {
            mac: [2, 0, 0, 0, 0, last],
            ip: [10, 0, 0, last],
            port,
        }
    }

    #[test]
    fn sequence_numbers_and_checksums() {
        let mut r = TcpFlowRecorder::new(ep(1, 1000), ep(2, 2000), 100, 5000, 1448);
        let hs = r.handshake();
        assert_eq!(hs.len(), 3);
        let d = r.data(true, b"hello").unwrap();
        let back = r.data(false, b"hi").unwrap();
        let fin = r.fin(true);
        let seq = |f: &[u8]| u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        let ack = |f: &[u8]| u32::from_be_bytes([f[42], f[43], f[44], f[45]]);
        assert_eq!(seq(&hs[0]), 100);
        assert_eq!((seq(&hs[1]), ack(&hs[1])), (5000, 101));
        assert_eq!((seq(&d), ack(&d)), (101, 5001));
        assert_eq!((seq(&back), ack(&back)), (5001, 106));
        assert_eq!(seq(&fin), 106);
        for f in hs.iter().chain([&d, &back, &fin]) {
            // A correct checksum makes the sum over the header fold to zero.
            assert_eq!(fold(ones_sum(0, &f[14..34])), 0);
            let tcp = &f[34..];
            let mut pseudo = [0u8; 12];
            pseudo[0..8].copy_from_slice(&f[26..34]);
            pseudo[9] = 6;
            pseudo[10..12].copy_from_slice(&(tcp.len() as u16).to_be_bytes());
            assert_eq!(fold(ones_sum(ones_sum(0, &pseudo), tcp)), 0);
        }
        assert!(r.data(true, &vec![0; 70_000]).is_err());
    }
}
