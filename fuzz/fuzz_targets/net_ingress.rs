//! `iwarp_net::ingress::parse` (a received frame parsed once and dispatched
//! by IP protocol) on arbitrary frames: never panics, and what it hands up
//! is for us and within the frame. The first octets of the input steer it
//! past the cheap refusals (our MAC, our address, a good IPv4 header
//! checksum), so that the IPv4, UDP and protocol paths are reached.
#![no_main]
use iwarp_net::ingress::{parse, Datagram, Ingress};
use iwarp_net::wire::{EthernetAddress, IpProtocol, Ipv4Address, Ipv4Packet};
use libfuzzer_sys::fuzz_target;

const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
const IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);

fuzz_target!(|data: &[u8]| {
    let Some((&steer, rest)) = data.split_first() else { return };
    let mut frame = rest.to_vec();
    if steer & 1 != 0 && frame.len() >= 6 {
        frame[..6].copy_from_slice(&MAC.0);
    }
    if steer & 2 != 0 && frame.len() >= 34 {
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[30..34].copy_from_slice(&IP.0);
        if steer & 4 != 0 {
            if let Ok(mut p) = Ipv4Packet::new_checked(&mut frame[14..]) {
                p.fill_checksum();
            }
        }
    }
    let range = frame.as_ptr_range();
    let inside = |d: &Datagram<'_>| {
        let r = d.payload.as_ptr_range();
        // Borrowed from the frame, behind the Ethernet and IPv4 headers.
        r.start >= range.start && r.end <= range.end && d.payload.len() + 34 <= frame.len()
    };
    match parse(&frame, MAC, IP) {
        Ingress::Tcp(d) => {
            assert!(inside(&d));
            assert_eq!((d.ip.dst_addr, d.ip.protocol), (IP, IpProtocol::TCP));
        }
        Ingress::Sctp(d) => {
            assert!(inside(&d));
            assert_eq!((d.ip.dst_addr, d.ip.protocol), (IP, IpProtocol::SCTP));
        }
        Ingress::Icmp(d) => {
            assert!(inside(&d));
            assert_eq!((d.ip.dst_addr, d.ip.protocol), (IP, IpProtocol::ICMP));
        }
        Ingress::Udp(d, _) => {
            // The UDP data, behind the 8-octet UDP header too.
            assert!(inside(&d) && d.payload.len() + 42 <= frame.len());
            assert_eq!((d.ip.dst_addr, d.ip.protocol), (IP, IpProtocol::UDP));
        }
        Ingress::Arp(_) | Ingress::Dropped(_) => {}
    }
});
