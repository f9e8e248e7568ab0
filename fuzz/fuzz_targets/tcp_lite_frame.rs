//! tcp-lite's Ethernet/IPv4/TCP parsers on arbitrary frames: never panic;
//! what parses re-emits and parses again to the same representation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tcp_lite::wire::{EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(eth) = EthernetFrame::new_checked(data) else { return };
    let _ = EthernetRepr::parse(&eth);
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else { return };
    let Ok(ipr) = Ipv4Repr::parse(&ip) else { return };
    let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else { return };
    let Ok(r) = TcpRepr::parse(&tcp, &ipr.src_addr, &ipr.dst_addr) else { return };
    let mut buf = vec![0u8; r.buffer_len()];
    let mut out = TcpPacket::new_unchecked(&mut buf[..]);
    if r.emit(&mut out, &ipr.src_addr, &ipr.dst_addr).is_ok() {
        let again = TcpPacket::new_checked(&buf[..]).expect("re-emitted segment checks");
        let back = TcpRepr::parse(&again, &ipr.src_addr, &ipr.dst_addr).expect("re-emitted segment parses");
        assert_eq!(back.payload, r.payload);
        assert_eq!((back.seq_number, back.ack_number), (r.seq_number, r.ack_number));
    }
});
