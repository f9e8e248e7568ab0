//! A received frame, parsed once and dispatched by protocol.
//!
//! [`parse`] peels Ethernet, then ARP or IPv4, and names the IP payload's
//! protocol, the way smoltcp's `process_ipv4` matches `next_header`: the
//! interface answers ARP and ICMP itself and hands the transports their
//! part (TCP to tcp-lite, SCTP raw or inside UDP to the SCTP glue) with
//! the IPv4 header already read. Each transport parses only its own
//! header after this.
//!
//! What is refused comes back as a [`Refused`] naming the reason, for the
//! interface's counters:
//!
//! * frames for another MAC (not ours, not broadcast);
//! * IPv4 datagrams for another address;
//! * fragments (RFC 791 §2.3: a host must reassemble, but an iWARP peer
//!   sends with DF within the path MTU, so reassembly is left out and each
//!   fragment is dropped and counted);
//! * datagrams with IP options (RFC 1122 §3.2.1.8 lets a host ignore
//!   options it does not implement; we implement none and drop the
//!   datagram so that nothing slips past a source route);
//! * bad IPv4 header checksums (RFC 1122 §3.2.1.2: MUST silently discard)
//!   and anything else malformed;
//! * UDP datagrams whose non-zero checksum fails (RFC 768).

use crate::wire::{
    ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

/// An IPv4 datagram for us: the sender's MAC, the parsed header and the
/// payload (borrowed from the frame, ending at Total Length: Ethernet
/// padding cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The sender's MAC (the previous hop).
    pub src_mac: EthernetAddress,
    /// The IPv4 header.
    pub ip: Ipv4Repr,
    /// The IP payload.
    pub payload: &'a [u8],
}

/// What a received frame is. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress<'a> {
    /// An ARP packet (for the neighbour cache, which answers requests).
    Arp(ArpRepr),
    /// IPv4 protocol 6: `payload` is the TCP segment, not yet parsed.
    Tcp(Datagram<'a>),
    /// IPv4 protocol 132: `payload` is the SCTP packet, not yet parsed.
    Sctp(Datagram<'a>),
    /// IPv4 protocol 17, its checksum verified when non-zero: the ports,
    /// and `payload` is the UDP data (SCTP inside UDP, RFC 6951, when the
    /// destination port is the encapsulation port).
    Udp(Datagram<'a>, UdpRepr),
    /// IPv4 protocol 1: `payload` is the ICMP message, not yet parsed.
    Icmp(Datagram<'a>),
    /// Not taken.
    Dropped(Refused),
}

/// Why [`parse`] did not take a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A header did not parse (Ethernet, ARP, IPv4 or UDP), or the IPv4
    /// header checksum failed.
    Malformed,
    /// For another MAC.
    NotForUsMac,
    /// An IPv4 datagram for another address.
    NotForUsIp,
    /// An IPv4 fragment.
    Fragment,
    /// An IPv4 header with options.
    Options,
    /// An IP protocol this interface does not serve.
    OtherProtocol(IpProtocol),
    /// An EtherType this interface does not serve.
    OtherEthertype(EtherType),
    /// A UDP datagram whose checksum failed.
    UdpBadChecksum,
}

/// Parse `frame`, received by the interface with `mac` and `ip`, once,
/// down to the IP payload's protocol. See the [module docs](self).
#[inline]
pub fn parse(frame: &[u8], mac: EthernetAddress, ip: Ipv4Address) -> Ingress<'_> {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Ingress::Dropped(Refused::Malformed);
    };
    let dst = eth.dst_addr();
    if dst != mac && !dst.is_broadcast() {
        return Ingress::Dropped(Refused::NotForUsMac);
    }
    let src_mac = eth.src_addr();
    match eth.ethertype() {
        EtherType::ARP => {
            match ArpPacket::new_checked(eth.payload()).and_then(|p| ArpRepr::parse(&p)) {
                Ok(repr) => Ingress::Arp(repr),
                Err(_) => Ingress::Dropped(Refused::Malformed),
            }
        }
        EtherType::IPV4 => ipv4(eth.payload(), src_mac, ip),
        other => Ingress::Dropped(Refused::OtherEthertype(other)),
    }
}

#[inline]
fn ipv4(payload: &[u8], src_mac: EthernetAddress, ours: Ipv4Address) -> Ingress<'_> {
    let Ok(pkt) = Ipv4Packet::new_checked(payload) else {
        return Ingress::Dropped(Refused::Malformed);
    };
    let Ok(ip) = Ipv4Repr::parse(&pkt) else {
        return Ingress::Dropped(Refused::Malformed);
    };
    if ip.dst_addr != ours {
        return Ingress::Dropped(Refused::NotForUsIp);
    }
    if ip.more_frags || ip.fragment_offset != 0 {
        return Ingress::Dropped(Refused::Fragment);
    }
    if ip.options_len != 0 {
        return Ingress::Dropped(Refused::Options);
    }
    // Ethernet pads short frames: the datagram ends at Total Length.
    let d = Datagram {
        src_mac,
        ip,
        payload: pkt.payload(),
    };
    match ip.protocol {
        IpProtocol::TCP => Ingress::Tcp(d),
        IpProtocol::SCTP => Ingress::Sctp(d),
        IpProtocol::ICMP => Ingress::Icmp(d),
        IpProtocol::UDP => {
            let Ok(u) = UdpPacket::new_checked(d.payload) else {
                return Ingress::Dropped(Refused::Malformed);
            };
            // RFC 768: a non-zero checksum is verified; zero means the
            // sender computed none (allowed over IPv4).
            if !u.verify_checksum(&ip.src_addr, &ip.dst_addr) {
                return Ingress::Dropped(Refused::UdpBadChecksum);
            }
            let ports = UdpRepr {
                src_port: u.src_port(),
                dst_port: u.dst_port(),
            };
            Ingress::Udp(
                Datagram {
                    payload: u.payload(),
                    ..d
                },
                ports,
            )
        }
        other => Ingress::Dropped(Refused::OtherProtocol(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ArpOperation;

    const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
    const IP: Ipv4Address = Ipv4Address::new(10, 9, 0, 1);
    const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
    const PEER: Ipv4Address = Ipv4Address::new(10, 9, 0, 2);

    /// 10.9.0.2 → 10.9.0.1, ident 1, DF, TTL 64, a 20-octet TCP SYN
    /// 50000 → 3000 (not parsed here).
    const TCP: [u8; 54] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x28, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x26, 0xbb, 0x0a, 0x09, 0x00, 0x02,
        0x0a, 0x09, 0x00, 0x01, 0xc3, 0x50, 0x0b, 0xb8, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x02, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
    ];
    /// Ident 2, protocol 132: an SCTP common header 5000 → 5001.
    const SCTP: [u8; 46] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x20, 0x00, 0x02, 0x40, 0x00, 0x40, 0x84, 0x26, 0x44, 0x0a, 0x09, 0x00, 0x02,
        0x0a, 0x09, 0x00, 0x01, 0x13, 0x88, 0x13, 0x89, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00,
    ];
    /// Ident 3, protocol 17: UDP 9899 → 9899, length 20, no checksum,
    /// carrying the same SCTP common header (RFC 6951).
    const UDP: [u8; 54] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x28, 0x00, 0x03, 0x40, 0x00, 0x40, 0x11, 0x26, 0xae, 0x0a, 0x09, 0x00, 0x02,
        0x0a, 0x09, 0x00, 0x01, 0x26, 0xab, 0x26, 0xab, 0x00, 0x14, 0x00, 0x00, 0x13, 0x88, 0x13,
        0x89, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    /// Ident 4, protocol 1: Echo, identifier 0x1234, sequence 1, "hi".
    const ICMP: [u8; 44] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x1e, 0x00, 0x04, 0x40, 0x00, 0x40, 0x01, 0x26, 0xc7, 0x0a, 0x09, 0x00, 0x02,
        0x0a, 0x09, 0x00, 0x01, 0x08, 0x00, 0x7d, 0x61, 0x12, 0x34, 0x00, 0x01, 0x68, 0x69,
    ];
    /// A broadcast ARP request from the peer for our address.
    const ARP: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x0a, 0x09,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x09, 0x00, 0x01,
    ];

    fn datagram(i: Ingress<'_>) -> Datagram<'_> {
        match i {
            Ingress::Tcp(d) | Ingress::Sctp(d) | Ingress::Icmp(d) | Ingress::Udp(d, _) => d,
            other => panic!("not a datagram: {other:?}"),
        }
    }

    #[test]
    fn each_protocol_goes_its_own_way() {
        let i = parse(&TCP, MAC, IP);
        assert!(matches!(i, Ingress::Tcp(_)), "{i:?}");
        let d = datagram(i);
        assert_eq!(
            (d.src_mac, d.ip.src_addr, d.ip.identification),
            (PEER_MAC, PEER, 1)
        );
        assert_eq!(d.payload, &TCP[34..]);

        let i = parse(&SCTP, MAC, IP);
        assert!(matches!(i, Ingress::Sctp(_)), "{i:?}");
        assert_eq!(datagram(i).payload, &SCTP[34..]);

        let i = parse(&UDP, MAC, IP);
        let Ingress::Udp(d, ports) = i else {
            panic!("{i:?}")
        };
        assert_eq!((ports.src_port, ports.dst_port), (9899, 9899));
        // The UDP data is the SCTP packet, as the raw frame carries it.
        assert_eq!(d.payload, &SCTP[34..]);

        let i = parse(&ICMP, MAC, IP);
        assert!(matches!(i, Ingress::Icmp(_)), "{i:?}");
        assert_eq!(datagram(i).payload, &ICMP[34..]);

        let Ingress::Arp(a) = parse(&ARP, MAC, IP) else {
            panic!("not ARP")
        };
        assert_eq!(a.operation, ArpOperation::REQUEST);
        assert_eq!(
            (
                a.source_hardware_addr,
                a.source_protocol_addr,
                a.target_protocol_addr
            ),
            (PEER_MAC, PEER, IP)
        );
    }

    #[test]
    fn padding_after_total_length_is_not_payload() {
        let mut f = SCTP.to_vec();
        f.extend_from_slice(&[0xee; 14]);
        assert_eq!(datagram(parse(&f, MAC, IP)).payload, &SCTP[34..]);
    }

    #[test]
    fn refusals_name_their_reason() {
        let other_ip = Ipv4Address::new(10, 9, 0, 3);
        assert_eq!(
            parse(&TCP, MAC, other_ip),
            Ingress::Dropped(Refused::NotForUsIp)
        );
        let other_mac = EthernetAddress([0x02, 0, 0, 0, 0, 0x03]);
        assert_eq!(
            parse(&TCP, other_mac, IP),
            Ingress::Dropped(Refused::NotForUsMac)
        );
        // Broadcast ARP reaches any MAC.
        assert!(matches!(parse(&ARP, other_mac, IP), Ingress::Arp(_)));
        for n in [0, 13, 20, 33] {
            assert_eq!(
                parse(&TCP[..n], MAC, IP),
                Ingress::Dropped(Refused::Malformed),
                "{n}"
            );
        }
        // A corrupt IPv4 header checksum (RFC 1122 §3.2.1.2).
        let mut f = TCP;
        f[25] ^= 1;
        assert_eq!(parse(&f, MAC, IP), Ingress::Dropped(Refused::Malformed));
        // Protocol 47 (GRE), header checksum adjusted by hand: 0x26bb
        // covers protocol 6; 47 adds 41 (0x29) to the sum, so 0x2692.
        let mut f = TCP;
        f[23] = 47;
        f[24..26].copy_from_slice(&[0x26, 0x92]);
        assert_eq!(
            parse(&f, MAC, IP),
            Ingress::Dropped(Refused::OtherProtocol(IpProtocol(47)))
        );
        let mut f = TCP;
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(
            parse(&f, MAC, IP),
            Ingress::Dropped(Refused::OtherEthertype(EtherType(0x86dd)))
        );
    }

    #[test]
    fn a_udp_checksum_is_verified_when_sent() {
        // 9899 → 9899 over the SCTP header, checksum 0x1234: wrong.
        let mut f = UDP;
        f[40..42].copy_from_slice(&[0x12, 0x34]);
        assert_eq!(
            parse(&f, MAC, IP),
            Ingress::Dropped(Refused::UdpBadChecksum)
        );
        // The right one, computed by the emitter, passes.
        let mut h = [0u8; 8];
        UdpRepr {
            src_port: 9899,
            dst_port: 9899,
        }
        .emit_header(&mut h, &UDP[42..], &PEER, &IP)
        .unwrap();
        f[34..42].copy_from_slice(&h);
        assert!(matches!(parse(&f, MAC, IP), Ingress::Udp(..)));
        // A UDP length past the datagram is malformed.
        let mut f = UDP;
        f[39] = 0x40;
        assert_eq!(parse(&f, MAC, IP), Ingress::Dropped(Refused::Malformed));
    }

    #[test]
    fn fragments_and_options_are_refused() {
        // MF set: flags/offset 0x2000 instead of 0x4000; the checksum
        // drops by 0x2000 → 0x46bb.
        let mut f = TCP;
        f[20] = 0x20;
        f[24..26].copy_from_slice(&[0x46, 0xbb]);
        assert_eq!(parse(&f, MAC, IP), Ingress::Dropped(Refused::Fragment));
        // IHL 6 with one option word of zeros (End of Options): the
        // header grows by 4, Total Length by 4.
        let mut f = Vec::from(&TCP[..34]);
        f[14] = 0x46;
        f[17] = 0x2c;
        f[24..26].copy_from_slice(&[0, 0]);
        f.extend_from_slice(&[0; 4]);
        let sum = !crate::wire::checksum::data(&f[14..38]);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&TCP[34..]);
        assert_eq!(parse(&f, MAC, IP), Ingress::Dropped(Refused::Options));
    }
}
