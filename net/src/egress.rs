//! The headers of what an interface sends.

use crate::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};

/// Octets of the Ethernet and IPv4 headers [`write_eth_ipv4`] writes.
pub const ETH_IPV4_LEN: usize = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;

/// Who sends, and how: the interface's addresses and TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Our MAC address.
    pub mac: EthernetAddress,
    /// Our IPv4 address.
    pub ip: Ipv4Address,
    /// Time to live.
    pub ttl: u8,
}

/// Write Ethernet and IPv4 headers (no options, DF set) for a
/// `payload_len`-octet datagram into the start of `buf`; false, with
/// nothing promised about `buf`, when `buf` is shorter than
/// [`ETH_IPV4_LEN`] or `payload_len` does not fit Total Length.
#[inline]
pub fn write_eth_ipv4(
    src: &Source,
    ident: u16,
    buf: &mut [u8],
    dst_mac: EthernetAddress,
    dst: Ipv4Address,
    protocol: IpProtocol,
    payload_len: usize,
) -> bool {
    let Some(head) = buf.get_mut(..ETH_IPV4_LEN) else {
        return false;
    };
    let mut eth = EthernetFrame::new_unchecked(head);
    let e = EthernetRepr {
        src_addr: src.mac,
        dst_addr: dst_mac,
        ethertype: EtherType::IPV4,
    }
    .emit(&mut eth);
    let i = Ipv4Repr {
        src_addr: src.ip,
        dst_addr: dst,
        protocol,
        payload_len,
        ttl: src.ttl,
        dscp: 0,
        ecn: 0,
        identification: ident,
        // RFC 1122 §3.3.4: we never fragment, and set DF so path MTU
        // discovery (RFC 1191) can work on routed paths.
        dont_frag: true,
        more_frags: false,
        fragment_offset: 0,
        options_len: 0,
    }
    .emit(&mut Ipv4Packet::new_unchecked(eth.payload_mut()));
    e.is_ok() && i.is_ok()
}
