//! memif's control messages: 128 octets each on a `SOCK_SEQPACKET` Unix
//! socket, a little-endian `u16` type then the packed body (DPDK's
//! `drivers/net/memif/memif.h`, libmemif's `memif.h`: protocol version
//! 2.0). Pure encoding and decoding, tested on literal octets.

/// Every message is this long (`memif_msg_t` is aligned to 128).
pub const MSG_LEN: usize = 128;
/// memif protocol version 2.0 (`MEMIF_VERSION`: major << 8 | minor).
pub const VERSION: u16 = 2 << 8;
/// Interface, application and reason names are at most this long.
pub const NAME_LEN: usize = 32;
/// The secret is at most this long.
pub const SECRET_LEN: usize = 24;

/// A control message (`memif_msg_type_t` and its body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Acknowledges INIT, ADD_REGION and ADD_RING (server to client).
    Ack,
    /// The server's limits, first on a new connection.
    Hello {
        /// The server application's name.
        name: Vec<u8>,
        /// Lowest and highest protocol version it speaks.
        min_version: u16,
        /// See `min_version`.
        max_version: u16,
        /// Highest region index it takes.
        max_region: u16,
        /// Highest server-to-client ring index.
        max_m2s_ring: u16,
        /// Highest client-to-server ring index.
        max_s2m_ring: u16,
        /// Largest ring it takes, as log2 of its slots.
        max_log2_ring_size: u8,
    },
    /// The client names the interface it wants (id, secret).
    Init {
        /// Protocol version (must be [`VERSION`]).
        version: u16,
        /// The interface id both ends were given.
        id: u32,
        /// 0: Ethernet frames.
        mode: u8,
        /// Zero-padded; empty for none.
        secret: Vec<u8>,
        /// The client application's name.
        name: Vec<u8>,
    },
    /// A shared-memory region; its memfd rides in the message's ancillary
    /// data.
    AddRegion {
        /// Regions are announced in order from 0.
        index: u16,
        /// Its length in octets.
        size: u64,
    },
    /// A ring in a region; its interrupt eventfd rides in the ancillary
    /// data.
    AddRing {
        /// [`RING_S2M`] for a client-to-server ring.
        flags: u16,
        /// Ring index within its direction.
        index: u16,
        /// Region holding the ring.
        region: u16,
        /// Where in the region it starts.
        offset: u32,
        /// Its slots, as log2.
        log2_ring_size: u8,
        /// Octets of private header before each buffer (0 here).
        private_hdr_size: u16,
    },
    /// Client: all announced, connect.
    Connect {
        /// The client interface's name.
        if_name: Vec<u8>,
    },
    /// Server: mapped and connected.
    Connected {
        /// The server interface's name.
        if_name: Vec<u8>,
    },
    /// Either end: the link is closed, with a reason.
    Disconnect {
        /// Error code (0: none).
        code: u32,
        /// Why, in text.
        reason: Vec<u8>,
    },
}

/// `MEMIF_MSG_ADD_RING_FLAG_S2M`: the ring carries client-to-server frames.
pub const RING_S2M: u16 = 1;

const T_ACK: u16 = 1;
const T_HELLO: u16 = 2;
const T_INIT: u16 = 3;
const T_ADD_REGION: u16 = 4;
const T_ADD_RING: u16 = 5;
const T_CONNECT: u16 = 6;
const T_CONNECTED: u16 = 7;
const T_DISCONNECT: u16 = 8;

/// What is wrong with a received control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgError {
    /// Not 128 octets.
    Length(usize),
    /// A type this protocol version does not have.
    Type(u16),
}

impl std::fmt::Display for MsgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MsgError::Length(n) => {
                write!(f, "a memif control message of {n} octets, not {MSG_LEN}")
            }
            MsgError::Type(t) => write!(f, "a memif control message of unknown type {t}"),
        }
    }
}

fn put_name(b: &mut [u8], at: usize, len: usize, s: &[u8]) {
    let n = s.len().min(len);
    b[at..at + n].copy_from_slice(&s[..n]);
}

fn name_at(b: &[u8], at: usize, len: usize) -> Vec<u8> {
    let f = &b[at..at + len];
    let end = f.iter().position(|&c| c == 0).unwrap_or(len);
    f[..end].to_vec()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

impl Msg {
    /// The message's 128 octets (names and secrets cut to their fields).
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        let t = match self {
            Msg::Ack => T_ACK,
            Msg::Hello {
                name,
                min_version,
                max_version,
                max_region,
                max_m2s_ring,
                max_s2m_ring,
                max_log2_ring_size,
            } => {
                put_name(&mut b, 2, NAME_LEN, name);
                b[34..36].copy_from_slice(&min_version.to_le_bytes());
                b[36..38].copy_from_slice(&max_version.to_le_bytes());
                b[38..40].copy_from_slice(&max_region.to_le_bytes());
                b[40..42].copy_from_slice(&max_m2s_ring.to_le_bytes());
                b[42..44].copy_from_slice(&max_s2m_ring.to_le_bytes());
                b[44] = *max_log2_ring_size;
                T_HELLO
            }
            Msg::Init {
                version,
                id,
                mode,
                secret,
                name,
            } => {
                b[2..4].copy_from_slice(&version.to_le_bytes());
                b[4..8].copy_from_slice(&id.to_le_bytes());
                b[8] = *mode;
                put_name(&mut b, 9, SECRET_LEN, secret);
                put_name(&mut b, 33, NAME_LEN, name);
                T_INIT
            }
            Msg::AddRegion { index, size } => {
                b[2..4].copy_from_slice(&index.to_le_bytes());
                b[4..12].copy_from_slice(&size.to_le_bytes());
                T_ADD_REGION
            }
            Msg::AddRing {
                flags,
                index,
                region,
                offset,
                log2_ring_size,
                private_hdr_size,
            } => {
                b[2..4].copy_from_slice(&flags.to_le_bytes());
                b[4..6].copy_from_slice(&index.to_le_bytes());
                b[6..8].copy_from_slice(&region.to_le_bytes());
                b[8..12].copy_from_slice(&offset.to_le_bytes());
                b[12] = *log2_ring_size;
                b[13..15].copy_from_slice(&private_hdr_size.to_le_bytes());
                T_ADD_RING
            }
            Msg::Connect { if_name } => {
                put_name(&mut b, 2, NAME_LEN, if_name);
                T_CONNECT
            }
            Msg::Connected { if_name } => {
                put_name(&mut b, 2, NAME_LEN, if_name);
                T_CONNECTED
            }
            Msg::Disconnect { code, reason } => {
                b[2..6].copy_from_slice(&code.to_le_bytes());
                put_name(&mut b, 6, 96, reason);
                T_DISCONNECT
            }
        };
        b[0..2].copy_from_slice(&t.to_le_bytes());
        b
    }

    /// Decode a received message (exactly [`MSG_LEN`] octets).
    pub fn decode(b: &[u8]) -> Result<Msg, MsgError> {
        if b.len() != MSG_LEN {
            return Err(MsgError::Length(b.len()));
        }
        Ok(match u16_at(b, 0) {
            T_ACK => Msg::Ack,
            T_HELLO => Msg::Hello {
                name: name_at(b, 2, NAME_LEN),
                min_version: u16_at(b, 34),
                max_version: u16_at(b, 36),
                max_region: u16_at(b, 38),
                max_m2s_ring: u16_at(b, 40),
                max_s2m_ring: u16_at(b, 42),
                max_log2_ring_size: b[44],
            },
            T_INIT => Msg::Init {
                version: u16_at(b, 2),
                id: u32_at(b, 4),
                mode: b[8],
                secret: name_at(b, 9, SECRET_LEN),
                name: name_at(b, 33, NAME_LEN),
            },
            T_ADD_REGION => Msg::AddRegion {
                index: u16_at(b, 2),
                size: u64_at(b, 4),
            },
            T_ADD_RING => Msg::AddRing {
                flags: u16_at(b, 2),
                index: u16_at(b, 4),
                region: u16_at(b, 6),
                offset: u32_at(b, 8),
                log2_ring_size: b[12],
                private_hdr_size: u16_at(b, 13),
            },
            T_CONNECT => Msg::Connect {
                if_name: name_at(b, 2, NAME_LEN),
            },
            T_CONNECTED => Msg::Connected {
                if_name: name_at(b, 2, NAME_LEN),
            },
            T_DISCONNECT => Msg::Disconnect {
                code: u32_at(b, 2),
                reason: name_at(b, 6, 96),
            },
            t => return Err(MsgError::Type(t)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_ring_is_packed_as_memif_h_lays_it_out() {
        let m = Msg::AddRing {
            flags: RING_S2M,
            index: 0,
            region: 0,
            offset: 0x0001_0080,
            log2_ring_size: 10,
            private_hdr_size: 0,
        };
        let b = m.encode();
        assert_eq!(
            &b[..16],
            &[5, 0, 1, 0, 0, 0, 0, 0, 0x80, 0, 1, 0, 10, 0, 0, 0]
        );
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(Msg::decode(&b), Ok(m));
    }

    #[test]
    fn init_carries_version_id_mode_secret_and_name_at_their_offsets() {
        let m = Msg::Init {
            version: VERSION,
            id: 0x0102_0304,
            mode: 0,
            secret: b"s3".to_vec(),
            name: b"iwarp".to_vec(),
        };
        let b = m.encode();
        assert_eq!(&b[..11], &[3, 0, 0, 2, 4, 3, 2, 1, 0, b's', b'3']);
        assert_eq!(&b[33..38], b"iwarp");
        assert_eq!(Msg::decode(&b), Ok(m));
    }

    #[test]
    fn hello_region_connect_and_disconnect_round_trip() {
        for m in [
            Msg::Ack,
            Msg::Hello {
                name: b"DPDK 22.11.11".to_vec(),
                min_version: VERSION,
                max_version: VERSION,
                max_region: 255,
                max_m2s_ring: 255,
                max_s2m_ring: 255,
                max_log2_ring_size: 14,
            },
            Msg::AddRegion {
                index: 1,
                size: 1 << 33,
            },
            Msg::Connect {
                if_name: b"c".to_vec(),
            },
            Msg::Connected {
                if_name: b"s".to_vec(),
            },
            Msg::Disconnect {
                code: 7,
                reason: b"bye".to_vec(),
            },
        ] {
            assert_eq!(Msg::decode(&m.encode()), Ok(m));
        }
        let h = Msg::AddRegion { index: 1, size: 3 }.encode();
        assert_eq!(&h[..12], &[4, 0, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_short_message_or_an_unknown_type_is_an_error() {
        assert_eq!(Msg::decode(&[1, 0]), Err(MsgError::Length(2)));
        let mut b = [0u8; MSG_LEN];
        b[0] = 9;
        assert_eq!(Msg::decode(&b), Err(MsgError::Type(9)));
        b[0] = 0;
        assert_eq!(Msg::decode(&b), Err(MsgError::Type(0)));
    }

    #[test]
    fn a_name_fills_its_field_without_a_terminator_and_is_cut_to_it() {
        let long = vec![b'x'; 40];
        let b = Msg::Connect { if_name: long }.encode();
        assert_eq!(
            Msg::decode(&b),
            Ok(Msg::Connect {
                if_name: vec![b'x'; NAME_LEN]
            })
        );
    }
}
