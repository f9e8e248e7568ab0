//! Receive-side scaling (RSS): the Toeplitz hash of Microsoft's RSS
//! specification, an indirection table from hash to receive queue, and the
//! choice of a local port whose reply flow lands on a given queue.
//!
//! A NIC (or DPDK's RSS, or a software steering step in front of several
//! poll loops) spreads received frames over its queues by hashing each
//! frame's flow and looking the hash up in a table of queue numbers. This
//! module computes the same thing, so that a stack with one poll loop per
//! queue knows which loop a frame reaches and can pick the loop that owns
//! a connection.
//!
//! # The hash input
//!
//! [`toeplitz`] hashes an octet string with a secret key (at least four
//! octets longer than the input; see its documentation). For a received
//! IPv4 packet the input is, in this order and in network byte order:
//!
//! | octets | field |
//! |---|---|
//! | 0..4 | source address |
//! | 4..8 | destination address |
//! | 8..10 | source port |
//! | 10..12 | destination port |
//!
//! the "4-tuple" of TCP, UDP and SCTP (whose common header starts with the
//! two ports, as TCP's and UDP's do). Other protocols, and every fragment
//! of a fragmented datagram (the first, which carries the ports, included,
//! so that all fragments of one datagram reach one queue), hash the
//! "2-tuple", octets 0..8 alone. This is the input of the specification's
//! IPv4 and IPv4-with-TCP hash types, on which its verification vectors
//! are computed.
//!
//! # Keys and symmetry
//!
//! [`MICROSOFT_KEY`] is the specification's 40-octet example key, on
//! which its verification vectors are computed. With it a flow and its
//! reverse (source and destination swapped) hash differently: the two
//! directions of one connection are unrelated, and may reach different
//! queues.
//!
//! [`SYMMETRIC_KEY`] (0x6d, 0x5a repeated) repeats every 16 bits. A field
//! and the field it is swapped with start 32 bits (addresses) or 16 bits
//! (ports) apart, so both meet the same key bits: the hash depends only on
//! `src ^ dst` and `sport ^ dport`, and a flow and its reverse hash alike.
//! That matters where our own stack steers both ends of a link, for
//! example two multi-queue contexts on one memif link, or the test links
//! of `iwarp-testlink`: with a symmetric key the queue a connection's
//! segments reach on one side has the same number as the queue its
//! answers reach on the other, so each end can give the connection to the
//! poll loop of that number, and both directions of it meet the loop that
//! owns it. The price is a coarser spread (flows with the same `src ^ dst`
//! and `sport ^ dport` collide), which for a few connections between known
//! hosts does not matter.
//!
//! # Queues
//!
//! [`Rss`] holds a key, a queue count and a 128-entry indirection table
//! (the size of many NICs' tables, the Intel 82599's for one, which
//! Linux's `ethtool -X` rewrites): a hash
//! selects entry `hash % 128` (its low seven bits), whose value is the
//! queue. The default table is round robin, entry `i` → queue
//! `i % queues`, as Linux's `ethtool_rxfh_indir_default` fills it.
//!
//! [`Rss::queue_of_frame`] answers `None` for frames that are not IPv4
//! (ARP above all) or whose IPv4 header is malformed. Such a frame should
//! go to queue 0: that is where RSS NICs put what they do not hash by
//! default, so a design that works with queue 0 alone receiving ARP works
//! on them too, whereas one that relies on every queue seeing ARP would
//! not. The multi-queue link of `iwarp-testlink` does the same.
//!
//! [`Rss::port_for_queue`] is for an active open on the loop of queue `q`:
//! it picks a local port such that the peer's answers (remote → local)
//! hash to `q`.
//!
//! Like the rest of the crate, this module does no I/O and holds no
//! `unsafe`.

use core::fmt;
use core::ops::RangeInclusive;

use crate::wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Address, Ipv4Packet};

/// Length of an RSS key: 40 octets, enough for the 36-octet IPv6 4-tuple
/// (and more than the 12-octet IPv4 one needs).
pub const KEY_LEN: usize = 40;

/// Entries in the indirection table.
pub const TABLE_LEN: usize = 128;

/// The example key of Microsoft's RSS specification ("Verifying the RSS
/// Hash Calculation"), with which its verification vectors are computed.
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// A key with which a flow and its reverse hash alike: 0x6d, 0x5a
/// repeated (see the module docs for why).
pub const SYMMETRIC_KEY: [u8; KEY_LEN] = {
    let mut k = [0u8; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// The Toeplitz hash of `input` under `key`, as Microsoft's RSS
/// specification defines it: for each bit of the input, most significant
/// bit of the first octet first, that is set, the 32 key bits starting at
/// the same bit position are XORed into the result.
///
/// The key must be at least `input.len() + 4` octets long for every input
/// bit to meet 32 key bits; key bits past its end count as zero (a shorter
/// key hashes the input's tail weakly or not at all, but never panics).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    for (i, &octet) in input.iter().enumerate() {
        // Key bits 8i .. 8i+64, big-endian: the windows of this octet's
        // eight bits are bits 0..32, 1..33, ..., 7..39 of it.
        let mut w = 0u64;
        for j in 0..8 {
            w = (w << 8) | u64::from(key.get(i + j).copied().unwrap_or(0));
        }
        for b in 0..8 {
            if octet & (0x80 >> b) != 0 {
                hash ^= (w >> (32 - b)) as u32;
            }
        }
    }
    hash
}

/// Whether RSS hashes `proto`'s ports (TCP, UDP, SCTP) or only the
/// addresses.
pub fn hashes_ports(proto: IpProtocol) -> bool {
    matches!(proto, IpProtocol::TCP | IpProtocol::UDP | IpProtocol::SCTP)
}

/// The 12-octet IPv4 4-tuple input (see the module docs).
fn input4(src: Ipv4Address, dst: Ipv4Address, sport: u16, dport: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..4].copy_from_slice(src.as_bytes());
    b[4..8].copy_from_slice(dst.as_bytes());
    b[8..10].copy_from_slice(&sport.to_be_bytes());
    b[10..12].copy_from_slice(&dport.to_be_bytes());
    b
}

/// Why an [`Rss`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RssError {
    /// A queue count of zero.
    NoQueues,
    /// More queues than table entries (some queues could never be chosen).
    TooManyQueues {
        /// The count asked for.
        queues: u16,
    },
    /// An indirection table entry naming a queue that does not exist.
    EntryOutOfRange {
        /// The entry's index.
        index: usize,
        /// Its queue.
        queue: u16,
        /// The queue count.
        queues: u16,
    },
}

impl fmt::Display for RssError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RssError::NoQueues => write!(f, "RSS needs at least one queue"),
            RssError::TooManyQueues { queues } => write!(
                f,
                "RSS over {queues} queues: at most {TABLE_LEN} (the indirection table's entries)"
            ),
            RssError::EntryOutOfRange {
                index,
                queue,
                queues,
            } => write!(
                f,
                "RSS indirection entry {index} names queue {queue}, but there are {queues} queues"
            ),
        }
    }
}

impl std::error::Error for RssError {}

/// An active open, seen from the side that opens: what
/// [`Rss::port_for_queue`] chooses a local port for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveOpen {
    /// Our address (the destination of the answers).
    pub local: Ipv4Address,
    /// The peer's address (their source).
    pub remote: Ipv4Address,
    /// The peer's port (their source port).
    pub remote_port: u16,
    /// The transport (TCP, SCTP, UDP; any other hashes no ports).
    pub proto: IpProtocol,
}

/// Receive-side scaling over `queues` queues: a key and an indirection
/// table (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rss {
    key: [u8; KEY_LEN],
    queues: u16,
    table: [u16; TABLE_LEN],
}

impl Rss {
    /// RSS with `key` over `queues` queues (1 to [`TABLE_LEN`]), the table
    /// round robin.
    pub fn new(key: [u8; KEY_LEN], queues: u16) -> Result<Rss, RssError> {
        if queues == 0 {
            return Err(RssError::NoQueues);
        }
        if usize::from(queues) > TABLE_LEN {
            return Err(RssError::TooManyQueues { queues });
        }
        let mut table = [0u16; TABLE_LEN];
        for (i, e) in table.iter_mut().enumerate() {
            // i < 128 and queues >= 1: fits.
            *e = (i % usize::from(queues)) as u16;
        }
        Ok(Rss { key, queues, table })
    }

    /// [`Rss::new`] with [`MICROSOFT_KEY`].
    pub fn microsoft(queues: u16) -> Result<Rss, RssError> {
        Rss::new(MICROSOFT_KEY, queues)
    }

    /// [`Rss::new`] with [`SYMMETRIC_KEY`].
    pub fn symmetric(queues: u16) -> Result<Rss, RssError> {
        Rss::new(SYMMETRIC_KEY, queues)
    }

    /// The key.
    pub fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// The queue count.
    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// The indirection table.
    pub fn table(&self) -> &[u16; TABLE_LEN] {
        &self.table
    }

    /// Replace the indirection table (as `ethtool -X ... weight` or DPDK's
    /// `rte_eth_dev_rss_reta_update` do); refused, the table unchanged,
    /// if an entry names a queue at or past the queue count.
    pub fn set_table(&mut self, table: [u16; TABLE_LEN]) -> Result<(), RssError> {
        if let Some((index, &queue)) = table.iter().enumerate().find(|(_, &q)| q >= self.queues) {
            return Err(RssError::EntryOutOfRange {
                index,
                queue,
                queues: self.queues,
            });
        }
        self.table = table;
        Ok(())
    }

    /// The queue of a hash: table entry `hash % 128`.
    pub fn queue_of_hash(&self, hash: u32) -> u16 {
        self.table[hash as usize % TABLE_LEN]
    }

    /// The hash of the 2-tuple (source and destination address).
    pub fn hash2(&self, src: Ipv4Address, dst: Ipv4Address) -> u32 {
        toeplitz(&self.key, &input4(src, dst, 0, 0)[..8])
    }

    /// The hash of the 4-tuple (addresses, then ports).
    pub fn hash4(&self, src: Ipv4Address, dst: Ipv4Address, sport: u16, dport: u16) -> u32 {
        toeplitz(&self.key, &input4(src, dst, sport, dport))
    }

    /// The hash of an unfragmented packet of `proto` from `src:sport` to
    /// `dst:dport`: the 4-tuple for TCP, UDP and SCTP, the 2-tuple (ports
    /// ignored) for any other protocol.
    pub fn hash_of(
        &self,
        src: Ipv4Address,
        dst: Ipv4Address,
        sport: u16,
        dport: u16,
        proto: IpProtocol,
    ) -> u32 {
        if hashes_ports(proto) {
            self.hash4(src, dst, sport, dport)
        } else {
            self.hash2(src, dst)
        }
    }

    /// The queue that receives an unfragmented packet of `proto` from
    /// `src:sport` to `dst:dport` ([`hash_of`](Self::hash_of), then the
    /// table).
    pub fn queue_of(
        &self,
        src: Ipv4Address,
        dst: Ipv4Address,
        sport: u16,
        dport: u16,
        proto: IpProtocol,
    ) -> u16 {
        self.queue_of_hash(self.hash_of(src, dst, sport, dport, proto))
    }

    /// The hash of a received Ethernet frame: `None` unless it is IPv4
    /// (untagged EtherType 0x0800, version 4, lengths consistent; the
    /// checksum is not checked, as NICs do not before hashing). A fragment,
    /// a protocol other than TCP, UDP and SCTP, or a packet too short for
    /// the two ports hashes the 2-tuple; the rest the 4-tuple.
    pub fn hash_of_frame(&self, frame: &[u8]) -> Option<u32> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.ethertype() != EtherType::IPV4 {
            return None;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        if ip.version() != 4 {
            return None;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let fragment = ip.more_frags() || ip.fragment_offset() != 0;
        if !fragment && hashes_ports(ip.protocol()) {
            if let Some(p) = ip.payload().get(..4) {
                let sport = u16::from_be_bytes([p[0], p[1]]);
                let dport = u16::from_be_bytes([p[2], p[3]]);
                return Some(self.hash4(src, dst, sport, dport));
            }
        }
        Some(self.hash2(src, dst))
    }

    /// The queue a received Ethernet frame reaches
    /// ([`hash_of_frame`](Self::hash_of_frame), then the table); `None`
    /// for a frame RSS does not hash (ARP, anything not IPv4, a malformed
    /// IPv4 header), which the module docs recommend delivering to queue 0.
    pub fn queue_of_frame(&self, frame: &[u8]) -> Option<u16> {
        self.hash_of_frame(frame).map(|h| self.queue_of_hash(h))
    }

    /// A local port from `ports` such that the answers to `open` (from
    /// `open.remote:open.remote_port` to `open.local:port`) reach `queue`,
    /// and that `in_use` does not claim. The scan starts at `start` (the
    /// range's first port if `start` is outside it), goes up and wraps
    /// around, so callers can spread their choices; `in_use` is asked only
    /// about ports that hash to `queue`. At most one hash per port in the
    /// range.
    ///
    /// `None` when `queue` is not below the queue count, the range is empty,
    /// no port in it hashes to `queue`, or every one that does is in use.
    /// For a protocol whose ports are not hashed, the port does not change
    /// the queue: the first free port if the addresses hash to `queue`,
    /// else `None`.
    pub fn port_for_queue(
        &self,
        queue: u16,
        open: &ActiveOpen,
        ports: RangeInclusive<u16>,
        start: u16,
        mut in_use: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        if queue >= self.queues || ports.is_empty() {
            return None;
        }
        let (lo, hi) = (u32::from(*ports.start()), u32::from(*ports.end()));
        let n = hi - lo + 1;
        let first = if ports.contains(&start) {
            u32::from(start) - lo
        } else {
            0
        };
        let ports_hashed = hashes_ports(open.proto);
        // The hash is linear (XOR) in its input: the answers' hash is that
        // of the tuple with destination port 0, XOR that of the port alone
        // at octets 10..12, whose key bits start at key octet 10.
        let base = if ports_hashed {
            self.hash4(open.remote, open.local, open.remote_port, 0)
        } else {
            self.hash2(open.remote, open.local)
        };
        if !ports_hashed && self.queue_of_hash(base) != queue {
            return None;
        }
        for i in 0..n {
            // lo + (first + i) % n <= hi <= u16::MAX.
            let port = (lo + (first + i) % n) as u16;
            let fits = !ports_hashed
                || self.queue_of_hash(base ^ toeplitz(&self.key[10..], &port.to_be_bytes()))
                    == queue;
            if fits && !in_use(port) {
                return Some(port);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: [u8; 4]) -> Ipv4Address {
        Ipv4Address(s)
    }

    /// Microsoft's RSS verification suite for IPv4, "Verifying the RSS
    /// Hash Calculation" in the Windows driver documentation
    /// (learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation;
    /// read here from its mirror in the repository
    /// i35010u/windows-driver-docs.zh-cn,
    /// windows-driver-docs-pr/network/verifying-the-rss-hash-calculation.md):
    /// destination address and port, source address and port, the IPv4-only
    /// hash, the IPv4-with-TCP hash; key [`MICROSOFT_KEY`].
    #[allow(clippy::type_complexity)]
    const MS_IPV4: [([u8; 4], u16, [u8; 4], u16, u32, u32); 5] = [
        (
            [161, 142, 100, 80],
            1766,
            [66, 9, 149, 187],
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            [65, 69, 140, 83],
            4739,
            [199, 92, 111, 2],
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            [12, 22, 207, 184],
            38024,
            [24, 19, 198, 95],
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            [209, 142, 163, 6],
            2217,
            [38, 27, 205, 30],
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            [202, 188, 127, 2],
            1303,
            [153, 39, 163, 191],
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    #[test]
    fn microsoft_verification_suite_ipv4() {
        let rss = Rss::microsoft(1).unwrap();
        for (dst, dport, src, sport, ip_only, with_tcp) in MS_IPV4 {
            let (src, dst) = (a(src), a(dst));
            assert_eq!(rss.hash2(src, dst), ip_only, "{src} -> {dst}");
            assert_eq!(
                rss.hash4(src, dst, sport, dport),
                with_tcp,
                "{src} -> {dst}"
            );
            assert_eq!(
                rss.hash_of(src, dst, sport, dport, IpProtocol::TCP),
                with_tcp
            );
            assert_eq!(
                rss.hash_of(src, dst, sport, dport, IpProtocol::ICMP),
                ip_only
            );
        }
        // The free function on the raw input, the layout the module docs
        // give: source, destination, source port, destination port.
        let input = [
            66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6, // 2794, 1766
        ];
        assert_eq!(toeplitz(&MICROSOFT_KEY, &input), 0x51ccc178);
        assert_eq!(toeplitz(&MICROSOFT_KEY, &input[..8]), 0x323e8fc2);
    }

    #[test]
    fn toeplitz_edges() {
        assert_eq!(toeplitz(&MICROSOFT_KEY, &[]), 0);
        // One set bit selects the 32 key bits at its position.
        assert_eq!(toeplitz(&MICROSOFT_KEY, &[0x80]), 0x6d5a56da);
        // The last bit of the second octet: key bits 15..47 (0x5a56da255b >> 1).
        assert_eq!(toeplitz(&MICROSOFT_KEY, &[0x00, 0x01]), 0x2b6d12ad);
        // A short key: missing bits are zero, no panic.
        assert_eq!(toeplitz(&[0xff], &[0x80]), 0xff00_0000);
        assert_eq!(toeplitz(&[], &[0xff; 64]), 0);
        // XOR-linear in the input.
        let x = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        let y = [0xf0, 0x0f, 0x55, 0xaa, 0, 1, 0x80, 7, 9, 0x33, 0xcc, 0xff];
        let z: Vec<u8> = x.iter().zip(&y).map(|(p, q)| p ^ q).collect();
        assert_eq!(
            toeplitz(&MICROSOFT_KEY, &z),
            toeplitz(&MICROSOFT_KEY, &x) ^ toeplitz(&MICROSOFT_KEY, &y)
        );
    }

    #[test]
    fn symmetric_key_hashes_a_flow_and_its_reverse_alike() {
        assert_eq!(SYMMETRIC_KEY[..4], [0x6d, 0x5a, 0x6d, 0x5a]);
        assert_eq!(SYMMETRIC_KEY[38..], [0x6d, 0x5a]);
        let sym = Rss::symmetric(8).unwrap();
        let ms = Rss::microsoft(8).unwrap();
        let mut asymmetric = 0;
        for (dst, dport, src, sport, _, _) in MS_IPV4 {
            let (src, dst) = (a(src), a(dst));
            assert_eq!(
                sym.hash4(src, dst, sport, dport),
                sym.hash4(dst, src, dport, sport)
            );
            assert_eq!(sym.hash2(src, dst), sym.hash2(dst, src));
            for p in [
                IpProtocol::TCP,
                IpProtocol::UDP,
                IpProtocol::SCTP,
                IpProtocol::ICMP,
            ] {
                assert_eq!(
                    sym.queue_of(src, dst, sport, dport, p),
                    sym.queue_of(dst, src, dport, sport, p)
                );
            }
            if ms.hash4(src, dst, sport, dport) != ms.hash4(dst, src, dport, sport) {
                asymmetric += 1;
            }
        }
        // The Microsoft key is not symmetric: every row differs reversed.
        assert_eq!(asymmetric, MS_IPV4.len());
        // The hash depends on src ^ dst and sport ^ dport alone
        // (1000 ^ 2000 = 0x438).
        let h = sym.hash4(a([10, 0, 0, 1]), a([10, 0, 0, 2]), 1000, 2000);
        assert_eq!(
            h,
            toeplitz(&SYMMETRIC_KEY, &[0, 0, 0, 3, 0, 0, 0, 0, 0x04, 0x38, 0, 0])
        );
        assert_eq!(
            h,
            sym.hash4(a([192, 168, 7, 0]), a([192, 168, 7, 3]), 0x438, 0)
        );
    }

    #[test]
    fn indirection_table() {
        assert_eq!(Rss::microsoft(0), Err(RssError::NoQueues));
        assert_eq!(
            Rss::microsoft(129),
            Err(RssError::TooManyQueues { queues: 129 })
        );
        let full = Rss::microsoft(128).unwrap();
        assert!(full
            .table()
            .iter()
            .enumerate()
            .all(|(i, &q)| usize::from(q) == i));
        let mut rss = Rss::microsoft(3).unwrap();
        assert_eq!(rss.queues(), 3);
        assert_eq!(rss.key(), &MICROSOFT_KEY);
        assert_eq!(rss.table()[..7], [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(rss.table()[127], 127 % 3);
        // Low seven bits pick the entry: 0x51ccc178 -> entry 0x78 = 120.
        assert_eq!(rss.queue_of_hash(0x51ccc178), 0);
        assert_eq!(rss.queue_of_hash(0x323e8fc2), 0x42 % 3);
        assert_eq!(rss.queue_of_hash(0xffff_ff80), 0);
        assert_eq!(rss.queue_of_hash(0x0000_007f), 1);
        // A table of our own: everything to queue 2 but entry 0x78.
        let mut t = [2u16; TABLE_LEN];
        t[0x78] = 1;
        rss.set_table(t).unwrap();
        assert_eq!(rss.queue_of_hash(0x51ccc178), 1);
        assert_eq!(rss.queue_of_hash(0x323e8fc2), 2);
        let (src, dst) = (a([66, 9, 149, 187]), a([161, 142, 100, 80]));
        assert_eq!(rss.queue_of(src, dst, 2794, 1766, IpProtocol::TCP), 1);
        // An entry naming queue 3 of 3 is refused and changes nothing.
        let mut bad = [0u16; TABLE_LEN];
        bad[77] = 3;
        let err = rss.set_table(bad).unwrap_err();
        assert_eq!(
            err,
            RssError::EntryOutOfRange {
                index: 77,
                queue: 3,
                queues: 3
            }
        );
        assert!(err.to_string().contains("entry 77"), "{err}");
        assert_eq!(rss.table(), &t);
    }

    /// A frame from 66.9.149.187 to 161.142.100.80 (the first
    /// verification row), IPv4 protocol `proto`, flags/fragment `frag`,
    /// carrying `l4`.
    fn frame(proto: u8, frag: [u8; 2], l4: &[u8]) -> Vec<u8> {
        let total = (20 + l4.len()) as u16;
        let mut f = vec![
            0x02, 0, 0, 0, 0, 0x01, // destination MAC
            0x02, 0, 0, 0, 0, 0x02, // source MAC
            0x08, 0x00, // IPv4
            0x45, 0x00, // version 4, IHL 5
        ];
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34]); // identification
        f.extend_from_slice(&frag);
        f.extend_from_slice(&[64, proto, 0, 0]); // TTL, protocol, checksum (not checked)
        f.extend_from_slice(&[66, 9, 149, 187, 161, 142, 100, 80]);
        f.extend_from_slice(l4);
        f
    }

    /// Source port 2794, destination port 1766, then a few octets.
    const PORTS: [u8; 8] = [0x0a, 0xea, 0x06, 0xe6, 0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn queue_of_frame_on_literal_frames() {
        let rss = Rss::microsoft(16).unwrap();
        let q4 = (0x51ccc178u32 & 0x7f) as u16 % 16; // 0x78 % 16 = 8
        let q2 = (0x323e8fc2u32 & 0x7f) as u16 % 16; // 0x42 % 16 = 2
        assert_eq!((q4, q2), (8, 2));
        let df = [0x40, 0x00];
        // TCP, UDP, SCTP: the 4-tuple.
        for proto in [6, 17, 132] {
            let f = frame(proto, df, &PORTS);
            assert_eq!(rss.hash_of_frame(&f), Some(0x51ccc178), "protocol {proto}");
            assert_eq!(rss.queue_of_frame(&f), Some(q4));
        }
        // ICMP: the 2-tuple.
        let icmp = frame(1, df, &[8, 0, 0, 0, 0, 1, 0, 1]);
        assert_eq!(rss.hash_of_frame(&icmp), Some(0x323e8fc2));
        // Fragments, first (MF, offset 0, ports present) and later: 2-tuple.
        let first = frame(6, [0x20, 0x00], &PORTS);
        let later = frame(6, [0x00, 0x03], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(rss.hash_of_frame(&first), Some(0x323e8fc2));
        assert_eq!(rss.queue_of_frame(&later), Some(q2));
        // Too short for the ports: 2-tuple.
        assert_eq!(
            rss.hash_of_frame(&frame(6, df, &[0x0a, 0xea])),
            Some(0x323e8fc2)
        );
        // Ethernet padding past Total Length is not the ports.
        let mut padded = frame(17, df, &[]);
        padded.extend_from_slice(&PORTS);
        assert_eq!(rss.hash_of_frame(&padded), Some(0x323e8fc2));
        // An ARP request (who has 10.9.0.1, tell 10.9.0.2): not hashed.
        let arp = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x02, 0x08,
            0x06, // Ethernet
            0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, // Ethernet/IPv4, request
            0x02, 0, 0, 0, 0, 0x02, 10, 9, 0, 2, // sender
            0, 0, 0, 0, 0, 0, 10, 9, 0, 1, // target
        ];
        assert_eq!(rss.queue_of_frame(&arp), None);
        // Not IPv4 or not well formed: None, never a panic.
        let mut v6 = frame(6, df, &PORTS);
        v6[14] = 0x65;
        assert_eq!(rss.queue_of_frame(&v6), None);
        let mut ihl4 = frame(6, df, &PORTS);
        ihl4[14] = 0x44;
        assert_eq!(rss.queue_of_frame(&ihl4), None);
        let tcp = frame(6, df, &PORTS);
        for cut in 0..34 {
            assert_eq!(rss.queue_of_frame(&tcp[..cut]), None, "cut at {cut}");
        }
        let mut ipv6_type = tcp.clone();
        ipv6_type[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(rss.queue_of_frame(&ipv6_type), None);
    }

    fn open(proto: IpProtocol) -> ActiveOpen {
        ActiveOpen {
            local: a([10, 9, 0, 1]),
            remote: a([10, 9, 0, 2]),
            remote_port: 5000,
            proto,
        }
    }

    #[test]
    fn port_for_queue_round_trip() {
        for rss in [Rss::microsoft(4).unwrap(), Rss::symmetric(4).unwrap()] {
            for proto in [IpProtocol::TCP, IpProtocol::SCTP] {
                let o = open(proto);
                for q in 0..4 {
                    let p = rss
                        .port_for_queue(q, &o, 49152..=65535, 49152, |_| false)
                        .unwrap();
                    assert!(p >= 49152);
                    assert_eq!(rss.queue_of(o.remote, o.local, o.remote_port, p, proto), q);
                    // The first such port from the start: none before it fits.
                    for earlier in 49152..p {
                        assert_ne!(
                            rss.queue_of(o.remote, o.local, o.remote_port, earlier, proto),
                            q
                        );
                    }
                    // Taken: the next one that fits.
                    let p2 = rss
                        .port_for_queue(q, &o, 49152..=65535, 49152, |x| x == p)
                        .unwrap();
                    assert!(p2 > p);
                    assert_eq!(rss.queue_of(o.remote, o.local, o.remote_port, p2, proto), q);
                }
            }
        }
        // The scan starts at `start` and wraps around.
        let rss = Rss::microsoft(2).unwrap();
        let o = open(IpProtocol::TCP);
        let p = rss
            .port_for_queue(1, &o, 1000..=1100, 1100, |_| false)
            .unwrap();
        let fits = |x: u16| rss.queue_of(o.remote, o.local, o.remote_port, x, IpProtocol::TCP) == 1;
        assert!(fits(p));
        if !fits(1100) {
            let lowest = (1000..=1100).find(|&x| fits(x)).unwrap();
            assert_eq!(p, lowest, "wrapped to the range's first fitting port");
        }
        // A start outside the range begins at the range's start.
        assert_eq!(
            rss.port_for_queue(1, &o, 1000..=1100, 7, |_| false),
            rss.port_for_queue(1, &o, 1000..=1100, 1000, |_| false)
        );
    }

    #[test]
    fn port_for_queue_none_cases() {
        let rss = Rss::microsoft(4).unwrap();
        let o = open(IpProtocol::TCP);
        let fits = |x: u16, q: u16| rss.queue_of(o.remote, o.local, o.remote_port, x, o.proto) == q;
        // No such queue; an empty range.
        assert_eq!(rss.port_for_queue(4, &o, 1..=65535, 1, |_| false), None);
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 10..=9;
        assert_eq!(rss.port_for_queue(0, &o, empty, 10, |_| false), None);
        // A one-port range whose port hashes elsewhere.
        let p = 40000u16;
        let other = (0..4).find(|&q| !fits(p, q)).unwrap();
        assert_eq!(rss.port_for_queue(other, &o, p..=p, p, |_| false), None);
        let own = (0..4).find(|&q| fits(p, q)).unwrap();
        assert_eq!(rss.port_for_queue(own, &o, p..=p, p, |_| false), Some(p));
        // Every fitting port taken; `in_use` asked only about fitting ones.
        let mut asked = Vec::new();
        let got = rss.port_for_queue(own, &o, 40000..=40100, 40000, |x| {
            asked.push(x);
            true
        });
        assert_eq!(got, None);
        let fitting: Vec<u16> = (40000..=40100).filter(|&x| fits(x, own)).collect();
        assert!(!fitting.is_empty());
        assert_eq!(asked, fitting);
        // Ports not hashed (ICMP): the first free port when the addresses
        // hash to the queue, None otherwise.
        let icmp = open(IpProtocol::ICMP);
        let q = rss.queue_of_hash(rss.hash2(icmp.remote, icmp.local));
        assert_eq!(rss.port_for_queue(q, &icmp, 7..=9, 7, |x| x == 7), Some(8));
        assert_eq!(rss.port_for_queue(q, &icmp, 7..=9, 7, |_| true), None);
        assert_eq!(
            rss.port_for_queue((q + 1) % 4, &icmp, 7..=9, 7, |_| false),
            None
        );
    }

    proptest::proptest! {
        /// Whatever the addresses, ports, key, queue count and range,
        /// a port `port_for_queue` returns hashes (the plain way, through
        /// `queue_of`) to the queue asked for, lies in the range and is not
        /// in use; and `None` only when no free port in the range fits.
        #[test]
        fn port_for_queue_answers_hash_to_the_queue(
            local: [u8; 4],
            remote: [u8; 4],
            remote_port: u16,
            symmetric: bool,
            proto in proptest::sample::select(vec![6u8, 17, 132, 1, 47]),
            queues in 1u16..=16,
            queue_seed: u16,
            lo: u16,
            span in 0u16..600,
            start: u16,
            taken_mod in 2u16..7,
        ) {
            let rss = if symmetric { Rss::symmetric(queues) } else { Rss::microsoft(queues) }
                .unwrap();
            let queue = queue_seed % queues;
            let hi = lo.saturating_add(span);
            let o = ActiveOpen {
                local: Ipv4Address(local),
                remote: Ipv4Address(remote),
                remote_port,
                proto: IpProtocol(proto),
            };
            let in_use = |p: u16| p.is_multiple_of(taken_mod);
            let got = rss.port_for_queue(queue, &o, lo..=hi, start, in_use);
            let fits = |p: u16| rss.queue_of(o.remote, o.local, o.remote_port, p, o.proto) == queue;
            match got {
                Some(p) => {
                    proptest::prop_assert!((lo..=hi).contains(&p));
                    proptest::prop_assert!(fits(p));
                    proptest::prop_assert!(!in_use(p));
                }
                None => {
                    proptest::prop_assert!((lo..=hi).all(|p| !fits(p) || in_use(p)));
                }
            }
        }
    }
}
