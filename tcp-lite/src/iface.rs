//! TCP over the one Ethernet/IPv4 interface ([`iwarp_net::iface`]): what
//! of the interface's work is TCP's, as [`TcpInterface`], implemented for
//! [`Interface`].
//!
//! * Receiving: the interface parses a frame once and hands a TCP
//!   datagram up ([`IpIngress::Tcp`]); [`TcpInterface::receive_tcp`]
//!   checks the segment's checksum over the pseudo-header (RFC 9293
//!   §3.1) and parses it, its payload still borrowed from the frame, so
//!   it goes straight to the MPA deframer ([`TcpInterface::receive`] is
//!   the TCP-only form of [`Interface::receive_ip`]).
//! * Sending: [`TcpInterface::send_tcp`] frames a segment through
//!   [`Interface::send_ipv4_parts`] (headers built here, the payload
//!   gathered from the send buffer by the device);
//!   [`TcpInterface::send_tcp_filled`] one whose payload a callback
//!   writes, through [`Interface::send_ipv4_sg`]: the whole frame is built
//!   in place in the device's buffer, the payload written once, and the
//!   TCP checksum computed here over the payload where it then lies.
//!   Routing, ARP, the hold queue and the IPv4 identification are the
//!   interface's.
//!
//! TCP segments that fail their checksum are dropped and counted
//! ([`IfaceStats::rx_bad_checksum`]). Those whose Checksum field holds only
//! the folded pseudo-header sum are counted apart
//! ([`IfaceStats::rx_partial_checksum`]): that is what a Linux sender with
//! TX checksum offload leaves for the NIC to finish (`CHECKSUM_PARTIAL`),
//! and a veth peer hands such frames to an XDP program unfinished. With
//! [`IfaceConfig::accept_partial_checksum`] they are taken (the kernel
//! trusts them too: they never left the host); otherwise
//! [`IfaceStats::checksum_diagnosis`] names the cause and the fix.
//!
//! On a link that cannot alter a frame, between two stacks that both set
//! [`IfaceConfig::trusted_link`] (shared memory: DPDK memif, an in-memory
//! link), neither end sums a TCP segment: sent ones carry that partial
//! pseudo-header sum, received ones are parsed without being summed, as
//! Linux skips the sum between the two ends of a veth.
//!
//! The interface's own types are re-exported here, so that code which
//! names them through `tcp_lite::iface` (tests, tools, benchmarks) keeps
//! compiling; the datapath names [`iwarp_net::iface`].

pub use iwarp_net::iface::{
    FrameSink, IfaceConfig, IfaceStats, Interface, IpIngress, SctpIngress, SctpServed, SendError,
    TcpDatagram,
};

use crate::tcp::PayloadFill;
use crate::wire::checksum;
use crate::wire::{EthernetAddress, IpProtocol, Ipv4Address, TcpPacket, TcpRepr};

/// Octets of the largest TCP header (Data Offset 15).
const MAX_TCP_HEADER_LEN: usize = 60;

/// A TCP segment received for our address.
#[derive(Debug)]
pub struct TcpIngress<'a> {
    /// Sender's address.
    pub src: Ipv4Address,
    /// The sender's MAC (for diagnostics; replies go through ARP).
    pub src_mac: EthernetAddress,
    /// The segment, payload borrowed from the frame.
    pub seg: TcpRepr<'a>,
}

/// TCP's part of an [`Interface`]. See the [module docs](self).
pub trait TcpInterface {
    /// Largest TCP segment (header and payload) that fits the MTU.
    fn max_tcp_len(&self) -> usize;

    /// Handle one received frame. ARP and ICMP Echo are answered through
    /// `tx`; a TCP segment for our address comes back to the caller, its
    /// checksum verified ([`receive_tcp`](Self::receive_tcp)); SCTP is
    /// not served ([`Interface::receive_ip`] serves it).
    fn receive<'a>(
        &mut self,
        frame: &'a [u8],
        now: u64,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Option<TcpIngress<'a>>;

    /// The segment of a TCP datagram the interface handed up
    /// ([`IpIngress::Tcp`]), its checksum verified over the pseudo-header
    /// and parsed; `None` (counted) when it is malformed or fails its
    /// checksum. See the [module docs](self) on partial checksums.
    fn receive_tcp<'a>(&mut self, d: &TcpDatagram<'a>) -> Option<TcpIngress<'a>>;

    /// Send one TCP segment to `dst`: straight out through `tx` when the
    /// next hop's MAC is known, or held (and an ARP request sent) until it
    /// resolves ([`Interface::send_ipv4_parts`]). `Ok` means sent or held
    /// (a device that refuses the frame drops it as a full NIC queue
    /// would; TCP retransmits).
    ///
    /// The frame goes to [`FrameSink::send_parts`] as consecutive parts,
    /// the headers and then the payload where it lies (the TCP send
    /// buffer): a device copies both into its own buffer in one pass, so
    /// the data is not first copied into a frame here.
    fn send_tcp(
        &mut self,
        dst: Ipv4Address,
        seg: &TcpRepr<'_>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(), SendError>;

    /// [`send_tcp`](Self::send_tcp) for a segment whose payload is written
    /// by `fill` (`seg.payload` must be empty; the segment carries
    /// `fill.len` octets): same routing, ARP and size rules, on a segment of
    /// `seg.header_len() + fill.len` octets.
    ///
    /// With the next hop's MAC known, the frame is built in place in a
    /// buffer the device lends ([`Interface::send_ipv4_sg`]): the payload
    /// is written first, by `fill.write`, straight into its place in that
    /// buffer, then the TCP header, the checksum computed over the payload
    /// where it now lies, and the interface's Ethernet and IPv4 headers.
    /// The payload is written once, into the device's memory. While ARP
    /// resolves, the frame is built the same way into a `Vec` and held.
    ///
    /// If `fill.write` returns false, nothing is sent or held (the device's
    /// buffer goes back), [`IfaceStats::tx_fill_failed`] counts it, and the
    /// answer is [`SendError::FillFailed`]. A device with no free buffer
    /// does not call `fill.write`: the frame is dropped as by
    /// [`send_tcp`](Self::send_tcp), and the answer is `Ok`.
    fn send_tcp_filled(
        &mut self,
        dst: Ipv4Address,
        seg: &TcpRepr<'_>,
        fill: PayloadFill<'_>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(), SendError>;
}

/// How one in-place build of a filled segment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Built {
    /// Not called (the device had no buffer), or the frame is out.
    NotCalled,
    /// The segment is complete.
    Done,
    /// The payload could not be written.
    FillFailed,
    /// The TCP header could not be written (an option out of range, or a
    /// first piece too short for it).
    HeaderFailed,
}

/// Write a whole filled TCP segment into the IP payload the interface
/// lends, `first` and then `rest` (consecutive, exactly header + payload
/// octets in all, the header within `first`): the payload first, through
/// `write`, into its place after the header, piece by piece, then the
/// header, with a TCP checksum over the payload where it now lies (RFC 9293
/// §3.1; the pieces' sums combine as RFC 1071 §2 (C) allows, one that
/// starts at an odd payload offset byte-swapped, §2 (B)), or with
/// `partial` (a trusted link) the pseudo-header's sum alone and nothing
/// summed.
#[inline]
fn build_filled(
    first: &mut [u8],
    rest: &mut [&mut [u8]],
    (src, dst): (&Ipv4Address, &Ipv4Address),
    seg: &TcpRepr<'_>,
    write: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    fill_len: usize,
    partial: bool,
) -> Built {
    let Some((head, p0)) = first.split_at_mut_checked(seg.header_len()) else {
        return Built::HeaderFailed;
    };
    let mut at = 0;
    let mut sum = 0u16;
    for piece in std::iter::once(p0).chain(rest.iter_mut().map(|p| &mut **p)) {
        if piece.is_empty() {
            continue;
        }
        if !write(at, piece) {
            return Built::FillFailed;
        }
        if !partial {
            let s = checksum::data(piece);
            sum = checksum::combine(&[sum, if at % 2 == 1 { s.swap_bytes() } else { s }]);
        }
        at += piece.len();
    }
    let header = if partial {
        seg.emit_header_partial(head, fill_len, src, dst)
    } else {
        seg.emit_header_sum(head, fill_len, sum, src, dst)
    };
    match header {
        Ok(()) => Built::Done,
        Err(_) => Built::HeaderFailed,
    }
}

impl TcpInterface for Interface {
    #[inline]
    fn max_tcp_len(&self) -> usize {
        self.max_payload_len()
    }

    #[inline]
    fn receive<'a>(
        &mut self,
        frame: &'a [u8],
        now: u64,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Option<TcpIngress<'a>> {
        match self.receive_ip(frame, now, SctpServed::NONE, tx)? {
            IpIngress::Tcp(d) => self.receive_tcp(&d),
            IpIngress::Sctp(_) => None,
        }
    }

    #[inline]
    fn receive_tcp<'a>(&mut self, d: &TcpDatagram<'a>) -> Option<TcpIngress<'a>> {
        let (src, dst) = (d.src, d.dst);
        let body = d.segment;
        let Ok(tcp) = TcpPacket::new_checked(body) else {
            self.stats_mut().rx_malformed += 1;
            return None;
        };
        // Checks the checksum over the pseudo-header, unless the link is
        // trusted (`IfaceConfig::trusted_link`: nothing on it can alter
        // the segment, and its sender left the sum to the link).
        let parsed = if self.config().trusted_link {
            TcpRepr::parse_unverified(&tcp)
        } else {
            TcpRepr::parse(&tcp, &src, &dst)
        };
        let seg = match parsed {
            Ok(seg) => seg,
            Err(crate::wire::Error::BadChecksum { found, .. }) => {
                self.stats_mut().rx_bad_checksum += 1;
                let partial = checksum::pseudo_header(
                    &src,
                    &dst,
                    IpProtocol::TCP,
                    body.len().min(usize::from(u16::MAX)) as u16,
                );
                if found != partial {
                    return None;
                }
                self.stats_mut().rx_partial_checksum += 1;
                if !self.config().accept_partial_checksum {
                    return None;
                }
                let Some(seg) = parse_partial(&tcp, &src, &dst) else {
                    self.stats_mut().rx_malformed += 1;
                    return None;
                };
                self.stats_mut().rx_bad_checksum -= 1;
                seg
            }
            Err(_) => {
                self.stats_mut().rx_malformed += 1;
                return None;
            }
        };
        self.stats_mut().rx_tcp += 1;
        Some(TcpIngress {
            src,
            src_mac: d.src_mac,
            seg,
        })
    }

    fn send_tcp(
        &mut self,
        dst: Ipv4Address,
        seg: &TcpRepr<'_>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(), SendError> {
        let src = self.config().ip;
        let partial = self.config().trusted_link;
        self.send_ipv4_parts(
            dst,
            IpProtocol::TCP,
            seg.header_len(),
            seg.payload,
            now,
            tx,
            |head| {
                if partial {
                    seg.emit_header_partial(head, seg.payload.len(), &src, &dst)
                        .is_ok()
                } else {
                    seg.emit_header(head, &src, &dst).is_ok()
                }
            },
        )
    }

    fn send_tcp_filled(
        &mut self,
        dst: Ipv4Address,
        seg: &TcpRepr<'_>,
        fill: PayloadFill<'_>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(), SendError> {
        debug_assert!(
            seg.payload.is_empty(),
            "a filled segment's payload is empty"
        );
        let PayloadFill {
            len: fill_len,
            write,
        } = fill;
        let src = self.config().ip;
        let partial = self.config().trusted_link;
        let mut built = Built::NotCalled;
        self.send_ipv4_sg(
            dst,
            IpProtocol::TCP,
            seg.header_len() + fill_len,
            now,
            tx,
            |first, rest| {
                built = build_filled(first, rest, (&src, &dst), seg, write, fill_len, partial);
                built == Built::Done
            },
        )?;
        match built {
            Built::FillFailed => {
                self.stats_mut().tx_fill_failed += 1;
                Err(SendError::FillFailed)
            }
            Built::HeaderFailed => {
                self.stats_mut().tx_dropped += 1;
                Ok(())
            }
            // Sent, held, or refused by the device (dropped as a full NIC
            // queue drops; TCP retransmits): the interface counted it.
            Built::NotCalled | Built::Done => Ok(()),
        }
    }
}

/// Parse a segment whose checksum is partial (already matched): the
/// header is checked on a copy with its checksum filled in, the payload
/// stays borrowed from the frame.
fn parse_partial<'a>(
    tcp: &TcpPacket<&'a [u8]>,
    src: &Ipv4Address,
    dst: &Ipv4Address,
) -> Option<TcpRepr<'a>> {
    let hdr_len = tcp.header_len();
    let raw: &'a [u8] = tcp.clone().into_inner();
    let mut copy = [0u8; MAX_TCP_HEADER_LEN];
    let hdr = copy.get_mut(..hdr_len)?;
    hdr.copy_from_slice(raw.get(..hdr_len)?);
    TcpPacket::new_unchecked(&mut *hdr).fill_checksum(src, dst);
    let h = TcpPacket::new_checked(&*hdr)
        .ok()
        .and_then(|p| TcpRepr::parse(&p, src, dst).ok())?;
    Some(TcpRepr {
        src_port: h.src_port,
        dst_port: h.dst_port,
        seq_number: h.seq_number,
        ack_number: h.ack_number,
        flags: h.flags,
        window: h.window,
        urgent_pointer: h.urgent_pointer,
        max_seg_size: h.max_seg_size,
        window_scale: h.window_scale,
        sack_permitted: h.sack_permitted,
        sack_ranges: h.sack_ranges,
        timestamp: h.timestamp,
        payload: tcp.payload(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{
        ArpOperation, EtherType, EthernetFrame, TcpFlags, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
    };
    use iwarp_net::fixtures::{arp_frame, iface, ip_frame, parse_out, IP, MAC, PEER, PEER_MAC};

    fn tcp_bytes(seg: &TcpRepr<'_>, src: Ipv4Address, dst: Ipv4Address) -> Vec<u8> {
        let mut b = vec![0u8; seg.buffer_len()];
        seg.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &src, &dst)
            .unwrap();
        b
    }

    #[test]
    fn tcp_for_us_comes_back_with_payload_borrowed() {
        let mut i = iface();
        let mut seg = TcpRepr::new(40000, 80, 1000, TcpFlags::ACK | TcpFlags::PSH);
        seg.payload = b"abc";
        let frame = ip_frame(IP, IpProtocol::TCP, &tcp_bytes(&seg, PEER, IP));
        let got = i.receive(&frame, 0, &mut |_| panic!("no output")).unwrap();
        assert_eq!(got.src, PEER);
        assert_eq!(got.seg.payload, b"abc");
        assert_eq!(got.seg.dst_port, 80);
    }

    /// A bad TCP checksum: dropped and counted apart from malformed
    /// frames; a segment too short for its header is malformed; SCTP is
    /// not served by the TCP-only `receive`.
    #[test]
    fn a_bad_checksum_is_counted_apart_from_malformed_frames() {
        let mut i = iface();
        let mut none = |_: &[u8]| panic!("no output");
        let seg = TcpRepr::new(1, 2, 3, TcpFlags::SYN);
        let mut f = ip_frame(IP, IpProtocol::TCP, &tcp_bytes(&seg, PEER, IP));
        f[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + 16] ^= 1;
        assert!(i.receive(&f, 0, &mut none).is_none());
        let st = *i.stats();
        assert_eq!((st.rx_bad_checksum, st.rx_malformed, st.rx_tcp), (1, 0, 0));
        assert!(i
            .receive(&ip_frame(IP, IpProtocol::TCP, &[0; 19]), 0, &mut none)
            .is_none());
        assert_eq!(i.stats().rx_malformed, 1);
        let sctp = [0x13, 0x88, 0x13, 0x89, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(i
            .receive(&ip_frame(IP, IpProtocol::SCTP, &sctp), 0, &mut none)
            .is_none());
        assert_eq!(i.stats().rx_other_protocol, 1);
        assert_eq!(i.stats().rx_tcp, 0);
    }

    /// What the interface holds while ARP resolves leaves, as TCP framed
    /// it, once the reply comes; then segments go at once.
    #[test]
    fn send_holds_until_arp_resolves_then_flushes() {
        let mut i = iface();
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut seg = TcpRepr::new(80, 40000, 5, TcpFlags::ACK);
        seg.payload = b"held";
        i.send_tcp(PEER, &seg, 0, &mut |f: &[&[u8]]| out.push(f.concat()))
            .unwrap();
        assert_eq!(out.len(), 1, "only the ARP request");
        out.clear();
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        assert!(i
            .receive(&reply, 1, &mut |f| out.push(f.to_vec()))
            .is_none());
        assert_eq!(out.len(), 1);
        let (e, r, payload) = parse_out(&out[0]);
        assert_eq!(
            (e.dst_addr, r.dst_addr, r.protocol),
            (PEER_MAC, PEER, IpProtocol::TCP)
        );
        let t = TcpPacket::new_checked(&payload[..]).unwrap();
        let t = TcpRepr::parse(&t, &IP, &PEER).unwrap();
        assert_eq!(t.payload, b"held");
        out.clear();
        i.send_tcp(PEER, &seg, 2, &mut |f: &[&[u8]]| out.push(f.concat()))
            .unwrap();
        assert_eq!(out.len(), 1);
        // Too big for the MTU, and off-link with no gateway.
        let big = vec![0u8; 1461];
        let mut s = seg;
        s.payload = &big;
        assert_eq!(i.max_tcp_len(), 1480);
        assert_eq!(
            i.send_tcp(PEER, &s, 2, &mut |_: &[&[u8]]| ()),
            Err(SendError::TooBig)
        );
        let far = Ipv4Address::new(192, 0, 2, 1);
        assert_eq!(
            i.send_tcp(far, &seg, 2, &mut |_: &[&[u8]]| ()),
            Err(SendError::NoRoute)
        );
    }

    /// 10.9.0.1:80 → 10.9.0.2:40000, ACK|PSH, seq 5, ack 77, window 8192,
    /// payload "filled!" (odd length), IPv4 identification 1, DF, TTL 64:
    /// the first segment a fresh interface sends to a known peer. Checksums
    /// computed apart from this crate: IPv4 0x26b4, TCP 0x8594.
    const FILLED_FRAME: [u8; 61] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x2f, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x26, 0xb4, 0x0a, 0x09, //
        0x00, 0x01, 0x0a, 0x09, 0x00, 0x02, 0x00, 0x50, 0x9c, 0x40, 0x00, 0x00, 0x00, 0x05, //
        0x00, 0x00, 0x00, 0x4d, 0x50, 0x18, 0x20, 0x00, 0x85, 0x94, 0x00, 0x00, 0x66, 0x69, //
        0x6c, 0x6c, 0x65, 0x64, 0x21, //
    ];

    fn filled_seg() -> TcpRepr<'static> {
        let mut seg = TcpRepr::new(80, 40000, 5, TcpFlags::ACK | TcpFlags::PSH);
        seg.ack_number = 77;
        seg.window = 8192;
        seg
    }

    /// An interface that knows the peer's MAC (learnt from its ARP request).
    fn iface_knowing_peer() -> Interface {
        knowing_peer(iface())
    }

    /// `i`, once it has learnt the peer's MAC from its ARP request.
    fn knowing_peer(mut i: Interface) -> Interface {
        let req = arp_frame(ArpOperation::REQUEST, EthernetAddress([0; 6]));
        assert!(i.receive(&req, 0, &mut |_| ()).is_none());
        assert_eq!(i.arp().lookup(PEER, 0), Some(PEER_MAC));
        i
    }

    /// A device that records how each frame came and lends a buffer full of
    /// junk (so a frame that leaves octets unwritten shows it).
    #[derive(Default)]
    struct Recorder {
        parts: Vec<Vec<u8>>,
        built: Vec<Vec<u8>>,
        cancelled: usize,
        refuse: bool,
    }

    impl FrameSink for Recorder {
        fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
            self.parts.push(parts.concat());
            true
        }
        fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
            if self.refuse {
                return false;
            }
            let mut buf = vec![0xa5; len];
            if build(&mut buf) {
                self.built.push(buf);
                true
            } else {
                self.cancelled += 1;
                false
            }
        }
    }

    /// A device that lends a frame as pieces of the given lengths (the
    /// last takes the rest).
    struct Pieces(Vec<usize>, Vec<Vec<u8>>);

    impl FrameSink for Pieces {
        fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
            self.1.push(parts.concat());
            true
        }
        fn send_built(&mut self, _: usize, _: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
            panic!("a filled segment goes through send_built_sg");
        }
        fn send_built_sg(
            &mut self,
            len: usize,
            build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool,
        ) -> bool {
            let mut bufs: Vec<Vec<u8>> = Vec::new();
            let mut left = len;
            for &n in &self.0 {
                let n = n.min(left);
                bufs.push(vec![0x5a; n]);
                left -= n;
            }
            bufs.push(vec![0x5a; left]);
            let mut pieces: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
            if !build(&mut pieces) {
                return false;
            }
            self.1.push(bufs.concat());
            true
        }
    }

    /// A frame lent in pieces (as AF_XDP lends the chunks of a jumbo
    /// frame), cut at odd payload offsets too: the same octets and
    /// checksums as the literal frame, the payload written piece by piece
    /// at the right offsets.
    #[test]
    fn a_filled_segment_built_in_pieces_is_the_literal_frame() {
        // Headers are 54 octets: pieces of 55 (headers and one payload
        // octet), 3, 1 and the rest (2).
        let mut i = iface_knowing_peer();
        let mut dev = Pieces(vec![55, 3, 1], Vec::new());
        let mut calls = Vec::new();
        let mut write = |at: usize, b: &mut [u8]| {
            calls.push((at, b.len()));
            b.copy_from_slice(&b"filled!"[at..at + b.len()]);
            true
        };
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut dev)
            .unwrap();
        assert_eq!(calls, [(0, 1), (1, 3), (4, 1), (5, 2)]);
        assert_eq!(dev.1.last().map(|f| &f[..]), Some(&FILLED_FRAME[..]));
        // Headers that do not fit the first piece: nothing built.
        let mut dev = Pieces(vec![40], Vec::new());
        let mut write = |_: usize, _: &mut [u8]| true;
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        let _ = i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut dev);
        assert!(dev.1.is_empty());
    }

    #[test]
    fn a_filled_segment_is_built_in_place_as_the_literal_frame() {
        let mut i = iface_knowing_peer();
        let mut dev = Recorder::default();
        let mut calls = 0;
        let mut write = |_at: usize, b: &mut [u8]| {
            calls += 1;
            assert_eq!(b.len(), 7, "the payload's place, exactly");
            b.copy_from_slice(b"filled!");
            true
        };
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut dev)
            .unwrap();
        assert_eq!(calls, 1);
        assert!(dev.parts.is_empty(), "not gathered from parts");
        assert_eq!(dev.built.len(), 1);
        assert_eq!(dev.built[0], FILLED_FRAME);
        assert_eq!(i.stats().tx_frames, 2, "the ARP reply and the segment");
        // The same segment with its payload given as octets: the same frame.
        let mut j = iface_knowing_peer();
        let mut seg = filled_seg();
        seg.payload = b"filled!";
        let mut out = Vec::new();
        j.send_tcp(PEER, &seg, 0, &mut |f: &[&[u8]]| out.push(f.concat()))
            .unwrap();
        assert_eq!(out, [FILLED_FRAME.to_vec()]);
    }

    #[test]
    fn a_failed_fill_sends_nothing_and_is_counted() {
        let mut i = iface_knowing_peer();
        let mut dev = Recorder::default();
        let mut write = |_at: usize, b: &mut [u8]| {
            b[0] = 1; // partly written, then fails
            false
        };
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        assert_eq!(
            i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut dev),
            Err(SendError::FillFailed)
        );
        assert!(dev.built.is_empty() && dev.parts.is_empty());
        assert_eq!(dev.cancelled, 1, "the lent buffer went back");
        assert_eq!(i.stats().tx_fill_failed, 1);
        assert_eq!(i.stats().tx_frames, 1, "only the ARP reply");
        // While ARP resolves: nothing held either.
        let mut i = iface();
        let mut out = Vec::new();
        let mut write = |_: usize, _: &mut [u8]| false;
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        assert_eq!(
            i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut |f: &[&[u8]]| out
                .push(f.concat())),
            Err(SendError::FillFailed)
        );
        assert_eq!(out.len(), 1, "only the ARP request");
        assert_eq!(i.stats().tx_queued, 0);
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        out.clear();
        assert!(i
            .receive(&reply, 1, &mut |f| out.push(f.to_vec()))
            .is_none());
        assert!(out.is_empty(), "nothing was held");
    }

    #[test]
    fn a_filled_segment_waits_for_arp_like_any_other() {
        let mut i = iface();
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut write = |_at: usize, b: &mut [u8]| {
            b.copy_from_slice(b"filled!");
            true
        };
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut |f: &[&[u8]]| {
            out.push(f.concat())
        })
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(
            EthernetFrame::new_checked(&out[0][..]).unwrap().ethertype(),
            EtherType::ARP
        );
        assert_eq!(i.stats().tx_queued, 1);
        out.clear();
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        assert!(i
            .receive(&reply, 1, &mut |f| out.push(f.to_vec()))
            .is_none());
        assert_eq!(out, [FILLED_FRAME.to_vec()]);
    }

    #[test]
    fn filled_segments_follow_the_size_and_route_rules_and_device_refusals() {
        let mut i = iface_knowing_peer();
        let mut dev = Recorder::default();
        let mut calls = 0;
        let mut write = |_: usize, _: &mut [u8]| {
            calls += 1;
            true
        };
        // 20 octets of TCP header + 1481 > 1500 - 20.
        let big = PayloadFill {
            len: 1481,
            write: &mut write,
        };
        assert_eq!(
            i.send_tcp_filled(PEER, &filled_seg(), big, 0, &mut dev),
            Err(SendError::TooBig)
        );
        assert_eq!(i.stats().tx_too_big, 1);
        let far = Ipv4Address::new(192, 0, 2, 1);
        let fill = PayloadFill {
            len: 10,
            write: &mut write,
        };
        assert_eq!(
            i.send_tcp_filled(far, &filled_seg(), fill, 0, &mut dev),
            Err(SendError::NoRoute)
        );
        // Exactly the MTU fits.
        let fits = PayloadFill {
            len: 1460,
            write: &mut write,
        };
        i.send_tcp_filled(PEER, &filled_seg(), fits, 0, &mut dev)
            .unwrap();
        assert_eq!(dev.built.len(), 1);
        assert_eq!(dev.built[0].len(), ETHERNET_HEADER_LEN + 1500);
        // A device with no buffer: dropped as a full queue drops, the
        // payload never written.
        dev.refuse = true;
        let fill = PayloadFill {
            len: 10,
            write: &mut write,
        };
        assert_eq!(
            i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut dev),
            Ok(())
        );
        assert_eq!(calls, 1, "only the frame that fit was written");
        assert_eq!(dev.built.len(), 1);
        assert_eq!(i.stats().tx_fill_failed, 0);
    }

    #[test]
    fn a_filled_segment_with_options_overwrites_every_lent_octet() {
        // The Recorder lends 0xa5 junk: options, padding and payload must
        // all be written, giving the frame send_tcp gathers from zeros.
        let mut seg = filled_seg();
        seg.timestamp = Some(crate::wire::TcpTimestamp {
            tsval: 0x0102_0304,
            tsecr: 0x0506_0708,
        });
        seg.sack_ranges[0] = Some((1000, 2000));
        seg.window_scale = Some(7);
        let payload: Vec<u8> = (0..333u32).map(|i| (i * 7) as u8).collect();
        let mut i = iface_knowing_peer();
        let mut dev = Recorder::default();
        let mut write = |_at: usize, b: &mut [u8]| {
            b.copy_from_slice(&payload);
            true
        };
        let fill = PayloadFill {
            len: payload.len(),
            write: &mut write,
        };
        i.send_tcp_filled(PEER, &seg, fill, 0, &mut dev).unwrap();
        let mut j = iface_knowing_peer();
        let mut given = seg;
        given.payload = &payload;
        let mut out = Vec::new();
        j.send_tcp(PEER, &given, 0, &mut |f: &[&[u8]]| out.push(f.concat()))
            .unwrap();
        assert_eq!(dev.built, out);
        let (_, _, tcp) = parse_out(&dev.built[0]);
        let back = TcpRepr::parse(&TcpPacket::new_checked(&tcp[..]).unwrap(), &IP, &PEER).unwrap();
        assert_eq!(back.payload, &payload[..]);
        assert_eq!(back.timestamp, seg.timestamp);
    }

    /// 10.9.0.2:40000 → 10.9.0.1:5001, ACK|PSH, seq 1000, ack 77, window
    /// 8192, payload "hi", as a Linux sender with TX checksum offload hands
    /// it to a veth peer: the Checksum field (offset 50, 0x1431) holds only
    /// the folded pseudo-header sum (10.9.0.2 + 10.9.0.1 + 6 + 22 octets);
    /// the finished checksum would be 0x5f4e. The IPv4 header checksum is
    /// complete (the kernel always fills it in).
    const PARTIAL_CSUM_FRAME: [u8; 56] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x2a, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x26, 0xb9, 0x0a, 0x09, //
        0x00, 0x02, 0x0a, 0x09, 0x00, 0x01, 0x9c, 0x40, 0x13, 0x89, 0x00, 0x00, 0x03, 0xe8, //
        0x00, 0x00, 0x00, 0x4d, 0x50, 0x18, 0x20, 0x00, 0x14, 0x31, 0x00, 0x00, 0x68, 0x69, //
    ];

    #[test]
    fn partial_checksum_is_dropped_counted_and_diagnosed_by_default() {
        let mut i = iface();
        assert!(i
            .receive(&PARTIAL_CSUM_FRAME, 0, &mut |_| panic!("nothing to send"))
            .is_none());
        let st = *i.stats();
        assert_eq!((st.rx_bad_checksum, st.rx_partial_checksum), (1, 1));
        assert_eq!((st.rx_tcp, st.rx_malformed), (0, 0));
        let why = st.checksum_diagnosis().expect("a diagnosis");
        assert!(why.contains("ethtool -K <peer> tx off"), "{why}");
        assert!(why.contains("accept_partial_checksum"), "{why}");
    }

    #[test]
    fn partial_checksum_is_accepted_when_configured() {
        let mut cfg = IfaceConfig::new(MAC, IP, 24);
        cfg.accept_partial_checksum = true;
        let mut i = Interface::new(cfg);
        let ing = i
            .receive(&PARTIAL_CSUM_FRAME, 0, &mut |_| panic!("nothing to send"))
            .expect("the segment");
        assert_eq!(ing.src, PEER);
        let seg = &ing.seg;
        assert_eq!((seg.src_port, seg.dst_port), (40000, 5001));
        assert_eq!(
            (seg.seq_number, seg.ack_number, seg.window),
            (1000, 77, 8192)
        );
        assert_eq!(seg.flags, TcpFlags::ACK | TcpFlags::PSH);
        assert_eq!(seg.payload, b"hi");
        let st = *i.stats();
        assert_eq!((st.rx_bad_checksum, st.rx_partial_checksum), (0, 1));
        assert_eq!(st.rx_tcp, 1);
        assert_eq!(st.checksum_diagnosis(), None);
    }

    #[test]
    fn a_corrupt_checksum_is_not_taken_for_a_partial_one() {
        for accept in [false, true] {
            let mut cfg = IfaceConfig::new(MAC, IP, 24);
            cfg.accept_partial_checksum = accept;
            let mut i = Interface::new(cfg);
            let mut f = PARTIAL_CSUM_FRAME;
            // Neither the finished checksum (0x5f4e) nor the partial one.
            f[50..52].copy_from_slice(&[0x14, 0x32]);
            assert!(i.receive(&f, 0, &mut |_| {}).is_none());
            let st = *i.stats();
            assert_eq!((st.rx_bad_checksum, st.rx_partial_checksum), (1, 0));
            assert_eq!(st.checksum_diagnosis(), None);
            // The finished checksum passes either way.
            f[50..52].copy_from_slice(&[0x5f, 0x4e]);
            assert!(i.receive(&f, 0, &mut |_| {}).is_some());
        }
    }

    /// The frames a fresh `i` sends for [`filled_seg`] with payload
    /// "filled!" (once it knows the peer): filled in place, then given as
    /// octets.
    fn both_ways(i: Interface) -> [Vec<u8>; 2] {
        let mut dev = Recorder::default();
        let mut write = |_at: usize, b: &mut [u8]| {
            b.copy_from_slice(b"filled!");
            true
        };
        let fill = PayloadFill {
            len: 7,
            write: &mut write,
        };
        let mut i = knowing_peer(i);
        let cfg = *i.config();
        i.send_tcp_filled(PEER, &filled_seg(), fill, 0, &mut dev)
            .unwrap();
        let mut j = knowing_peer(Interface::new(cfg));
        let mut seg = filled_seg();
        seg.payload = b"filled!";
        let mut out = Vec::new();
        j.send_tcp(PEER, &seg, 0, &mut |f: &[&[u8]]| out.push(f.concat()))
            .unwrap();
        assert_eq!((dev.built.len(), out.len()), (1, 1));
        [dev.built.remove(0), out.remove(0)]
    }

    /// An interface on a trusted link (`IfaceConfig::trusted_link`).
    fn trusted(ip: Ipv4Address) -> Interface {
        let mut cfg = IfaceConfig::new(MAC, ip, 24);
        cfg.trusted_link = true;
        Interface::new(cfg)
    }

    /// On a trusted link the segment is [`FILLED_FRAME`] octet for octet
    /// but for its TCP Checksum, which holds the folded pseudo-header sum
    /// alone (10.9.0.1 + 10.9.0.2 + 6 + 27 octets = 0x1436, the form of
    /// [`PARTIAL_CSUM_FRAME`]'s), filled in place or given as octets.
    #[test]
    fn a_trusted_link_sends_the_pseudo_header_sum_alone() {
        let mut want = FILLED_FRAME;
        want[50..52].copy_from_slice(&[0x14, 0x36]);
        assert_eq!(both_ways(trusted(IP)), [want.to_vec(), want.to_vec()]);
        // A peer that verifies sees what a Linux sender with TX checksum
        // offload leaves, and says so.
        let mut cfg = IfaceConfig::new(PEER_MAC, PEER, 24);
        cfg.accept_partial_checksum = false;
        let mut peer = Interface::new(cfg);
        assert!(peer.receive(&want, 0, &mut |_| {}).is_none());
        let st = *peer.stats();
        assert_eq!((st.rx_partial_checksum, st.rx_tcp), (1, 0));
        assert!(st.checksum_diagnosis().is_some());
    }

    /// A trusted link's receiver does not sum: the partial checksum, a
    /// full one and a wrong one are all taken, and nothing is counted as a
    /// bad or partial checksum; a header too short is still malformed.
    #[test]
    fn a_trusted_link_takes_segments_without_summing_them() {
        let mut i = trusted(IP);
        for sum in [[0x14, 0x31], [0x5f, 0x4e], [0x14, 0x32]] {
            let mut f = PARTIAL_CSUM_FRAME;
            f[50..52].copy_from_slice(&sum);
            let ing = i.receive(&f, 0, &mut |_| {}).expect("the segment");
            assert_eq!(ing.seg.payload, b"hi");
            assert_eq!((ing.seg.seq_number, ing.seg.ack_number), (1000, 77));
        }
        let st = *i.stats();
        assert_eq!(st.rx_tcp, 3);
        assert_eq!((st.rx_bad_checksum, st.rx_partial_checksum), (0, 0));
        let mut f = PARTIAL_CSUM_FRAME;
        f[46] = 0x40; // Data Offset 4: shorter than a TCP header
        assert!(i.receive(&f, 0, &mut |_| {}).is_none());
        assert_eq!(i.stats().rx_malformed, 1);
    }
}
