//! Frames from a fixed peer to a fixed interface, for the tests of this
//! crate and of the transports beside it (feature `fixtures`; never in a
//! build that talks to a network).
#![allow(clippy::unwrap_used)] // fixed, well-formed inputs: a failure is a broken fixture

use crate::arp;
use crate::iface::{IfaceConfig, Interface};
use crate::wire::{
    ArpOperation, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};

/// A sent frame's Ethernet and IPv4 headers and its IP payload.
pub fn parse_out(frame: &[u8]) -> (EthernetRepr, Ipv4Repr, Vec<u8>) {
    let eth = EthernetFrame::new_checked(frame).unwrap();
    let e = EthernetRepr::parse(&eth).unwrap();
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    let r = Ipv4Repr::parse(&ip).unwrap();
    (e, r, ip.payload().to_vec())
}

/// The interface's MAC.
pub const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
/// The interface's address (in 10.9.0.0/24).
pub const IP: Ipv4Address = Ipv4Address::new(10, 9, 0, 1);
/// The peer's MAC.
pub const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
/// The peer's address.
pub const PEER: Ipv4Address = Ipv4Address::new(10, 9, 0, 2);

/// An interface with [`MAC`] and [`IP`]/24.
pub fn iface() -> Interface {
    Interface::new(IfaceConfig::new(MAC, IP, 24))
}

/// An ARP frame from the peer asking for (or answering) [`IP`].
pub fn arp_frame(op: ArpOperation, target_mac: EthernetAddress) -> Vec<u8> {
    let repr = ArpRepr {
        operation: op,
        source_hardware_addr: PEER_MAC,
        source_protocol_addr: PEER,
        target_hardware_addr: target_mac,
        target_protocol_addr: IP,
    };
    let mut buf = vec![0u8; arp::FRAME_LEN];
    arp::emit_frame(&repr, PEER_MAC, &mut buf).unwrap();
    buf
}

/// An IPv4 frame from the peer to `dst` carrying `body` as `proto`.
pub fn ip_frame(dst: Ipv4Address, proto: IpProtocol, body: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + body.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: MAC,
        ethertype: EtherType::IPV4,
    }
    .emit(&mut eth)
    .unwrap();
    let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
    Ipv4Repr {
        src_addr: PEER,
        dst_addr: dst,
        protocol: proto,
        payload_len: body.len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        identification: 7,
        dont_frag: true,
        more_frags: false,
        fragment_offset: 0,
        options_len: 0,
    }
    .emit(&mut ip)
    .unwrap();
    ip.payload_mut()[..body.len()].copy_from_slice(body);
    buf
}

/// Every field the Debug spelling has is a line of the Display one,
/// `name value`, the values aligned: the check of every crate's counter
/// block (`stats_fmt.rs`) that `/metrics` and the tools print.
pub fn every_field_named<T: core::fmt::Debug + core::fmt::Display>(v: &T) {
    let debug = format!("{v:?}");
    let shown = v.to_string();
    let names: Vec<&str> = debug
        .split(['{', ','])
        .filter_map(|p| p.split_once(':').map(|(n, _)| n.trim()))
        .collect();
    assert!(!names.is_empty(), "{debug}");
    for n in &names {
        assert!(
            shown
                .lines()
                .any(|l| l.split_whitespace().next() == Some(*n)),
            "{n} missing:\n{shown}"
        );
    }
    let col: Vec<usize> = shown
        .lines()
        .map(|l| l.rfind(' ').expect("name value") + 1)
        .collect();
    assert!(
        col.windows(2).all(|w| w[0] == w[1]),
        "not aligned:\n{shown}"
    );
}
