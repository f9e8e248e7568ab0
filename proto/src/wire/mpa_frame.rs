//! MPA Request and Reply frames (RFC 5044 §7.1) with the RFC 6581 enhanced
//! IRD/ORD words (wire-facts.md "Connection setup", "Enhanced connection setup").
//!
//! ```text
//! 0..16  key "MPA ID Req Frame" / "MPA ID Rep Frame"
//! 16     flags M C R E(nhanced, RFC 6581) rsvd[4]
//! 17     Rev
//! 18..20 PD_Length
//! 20..   private data (for Rev 2 + Enhanced: IRD word, ORD word, then ULP data)
//! ```

use super::{be16, need, put16, WireError};

/// The request key (RFC 5044 §7.1).
pub const REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// The reply key (RFC 5044 §7.1).
pub const REPLY_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// Fixed part of a Request/Reply frame.
pub const HEADER_LEN: usize = 20;
/// RFC 5044 §7.1: PD_Length MUST NOT exceed 512.
pub const MAX_PRIVATE_DATA: usize = 512;

mod field {
    use core::ops::Range;
    pub const KEY: Range<usize> = 0..16;
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LENGTH: usize = 18;
    pub const PRIVATE_DATA: usize = 20;
}

/// Request or Reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Sent by the initiator.
    Request,
    /// Sent by the responder.
    Reply,
}

/// The flags octet. Keeps reserved bits so they can be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MpaFlags(pub u8);

impl MpaFlags {
    /// M: the sender wants markers in the FPDUs sent *to* it.
    pub const MARKER: u8 = 0x80;
    /// C: CRC in both directions if either side sets it.
    pub const CRC: u8 = 0x40;
    /// R: the reply rejects the connection.
    pub const REJECT: u8 = 0x20;
    /// RFC 6581 enhanced connection setup.
    pub const ENHANCED: u8 = 0x10;
    /// Bits this implementation does not know.
    pub const RESERVED: u8 = 0x0f;

    /// M flag.
    pub fn marker(self) -> bool {
        self.0 & Self::MARKER != 0
    }
    /// C flag.
    pub fn crc(self) -> bool {
        self.0 & Self::CRC != 0
    }
    /// R flag.
    pub fn reject(self) -> bool {
        self.0 & Self::REJECT != 0
    }
    /// Enhanced (RFC 6581) flag.
    pub fn enhanced(self) -> bool {
        self.0 & Self::ENHANCED != 0
    }
    /// Reserved bits as received.
    pub fn reserved(self) -> u8 {
        self.0 & Self::RESERVED
    }
    /// Build from the individual flags (reserved bits zero).
    pub fn new(marker: bool, crc: bool, reject: bool, enhanced: bool) -> Self {
        let mut v = 0;
        if marker {
            v |= Self::MARKER;
        }
        if crc {
            v |= Self::CRC;
        }
        if reject {
            v |= Self::REJECT;
        }
        if enhanced {
            v |= Self::ENHANCED;
        }
        MpaFlags(v)
    }
}

/// Zero-copy view of a Request/Reply frame.
#[derive(Debug, Clone)]
pub struct MpaFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MpaFrame<T> {
    /// Wrap without checks; getters on a short buffer return zeros.
    pub fn new_unchecked(buffer: T) -> Self {
        MpaFrame { buffer }
    }

    /// Wrap after checking that the fixed header and the private data it
    /// declares are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Check the fixed header and the private data length.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        need("MPA frame", b, HEADER_LEN)?;
        let pd = self.pd_length() as usize;
        if pd > MAX_PRIVATE_DATA {
            return Err(WireError::Malformed {
                what: "MPA frame",
                field: "PD_Length",
                value: pd as u32,
            });
        }
        need("MPA frame", b, HEADER_LEN + pd)
    }

    /// The 16-octet key.
    pub fn key(&self) -> &[u8] {
        self.buffer.as_ref().get(field::KEY).unwrap_or(&[])
    }
    /// Request or Reply by key; `None` for any other key.
    pub fn kind(&self) -> Option<FrameKind> {
        match self.key() {
            k if k == REQUEST_KEY => Some(FrameKind::Request),
            k if k == REPLY_KEY => Some(FrameKind::Reply),
            _ => None,
        }
    }
    /// Flags octet.
    pub fn flags(&self) -> MpaFlags {
        MpaFlags(self.buffer.as_ref().get(field::FLAGS).copied().unwrap_or(0))
    }
    /// Rev.
    pub fn rev(&self) -> u8 {
        self.buffer.as_ref().get(field::REV).copied().unwrap_or(0)
    }
    /// PD_Length.
    pub fn pd_length(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PD_LENGTH)
    }
    /// The private data (all of it, including RFC 6581 words).
    pub fn private_data(&self) -> &[u8] {
        let end = field::PRIVATE_DATA + self.pd_length() as usize;
        self.buffer
            .as_ref()
            .get(field::PRIVATE_DATA..end)
            .unwrap_or(&[])
    }
    /// Octets this frame occupies in the stream.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.pd_length() as usize
    }
}

/// RFC 6581 §3 IRD/ORD words at the start of the private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EnhancedParams {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// Peer-to-peer mode (IRD word bit 15).
    pub peer_to_peer: bool,
    /// Zero-length FPDU RTR allowed (IRD word bit 14).
    pub rtr_zero_len_fpdu: bool,
    /// RDMA Write RTR allowed (ORD word bit 15).
    pub rtr_write: bool,
    /// RDMA Read RTR allowed (ORD word bit 14).
    pub rtr_read: bool,
}

impl EnhancedParams {
    /// Octets on the wire.
    pub const LEN: usize = 4;
    /// Largest IRD/ORD value the 14-bit fields hold.
    pub const MAX_DEPTH: u16 = 0x3fff;

    /// Parse the first four private-data octets.
    pub fn parse(pd: &[u8]) -> Result<Self, WireError> {
        need("RFC 6581 IRD/ORD", pd, Self::LEN)?;
        let ird = be16(pd, 0);
        let ord = be16(pd, 2);
        Ok(EnhancedParams {
            ird: ird & Self::MAX_DEPTH,
            ord: ord & Self::MAX_DEPTH,
            peer_to_peer: ird & 0x8000 != 0,
            rtr_zero_len_fpdu: ird & 0x4000 != 0,
            rtr_write: ord & 0x8000 != 0,
            rtr_read: ord & 0x4000 != 0,
        })
    }

    /// The four octets.
    pub fn to_bytes(&self) -> [u8; 4] {
        let mut ird = self.ird.min(Self::MAX_DEPTH);
        let mut ord = self.ord.min(Self::MAX_DEPTH);
        if self.peer_to_peer {
            ird |= 0x8000;
        }
        if self.rtr_zero_len_fpdu {
            ird |= 0x4000;
        }
        if self.rtr_write {
            ord |= 0x8000;
        }
        if self.rtr_read {
            ord |= 0x4000;
        }
        let mut b = [0u8; 4];
        put16(&mut b, 0, ird);
        put16(&mut b, 2, ord);
        b
    }
}

/// Plain representation of a Request/Reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpaFrameRepr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// Flags as sent (reserved bits kept).
    pub flags: MpaFlags,
    /// Revision: 1 = RFC 5044, 2 = RFC 6581.
    pub rev: u8,
    /// RFC 6581 words, present when `rev >= 2` and the Enhanced flag is set.
    pub enhanced: Option<EnhancedParams>,
    /// The application's private data (after the RFC 6581 words, if any).
    pub ulp_data: &'a [u8],
}

impl<'a> MpaFrameRepr<'a> {
    /// Parse straight from a byte slice (convenience over [`MpaFrame::new_checked`]).
    pub fn parse_bytes(buf: &'a [u8]) -> Result<(Self, usize), WireError> {
        let f = MpaFrame::new_checked(buf)?;
        let len = f.total_len();
        let kind = f.kind().ok_or(WireError::Malformed {
            what: "MPA frame",
            field: "key",
            value: 0,
        })?;
        let flags = f.flags();
        let rev = f.rev();
        let pd = buf.get(HEADER_LEN..len).unwrap_or(&[]);
        let (enhanced, ulp_data) = if rev >= 2 && flags.enhanced() {
            let e = EnhancedParams::parse(pd)?;
            (Some(e), pd.get(EnhancedParams::LEN..).unwrap_or(&[]))
        } else {
            (None, pd)
        };
        Ok((
            MpaFrameRepr {
                kind,
                flags,
                rev,
                enhanced,
                ulp_data,
            },
            len,
        ))
    }

    /// PD_Length this frame will carry.
    pub fn pd_length(&self) -> usize {
        self.ulp_data.len()
            + if self.enhanced.is_some() {
                EnhancedParams::LEN
            } else {
                0
            }
    }

    /// Octets [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Write the frame into `buf` (at least [`buffer_len`](Self::buffer_len) octets).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.buffer_len();
        if self.pd_length() > MAX_PRIVATE_DATA {
            return Err(WireError::Malformed {
                what: "MPA frame",
                field: "PD_Length",
                value: self.pd_length() as u32,
            });
        }
        if buf.len() < len {
            return Err(WireError::Truncated {
                what: "MPA frame",
                needed: len,
                have: buf.len(),
            });
        }
        let key = match self.kind {
            FrameKind::Request => REQUEST_KEY,
            FrameKind::Reply => REPLY_KEY,
        };
        buf[field::KEY].copy_from_slice(key);
        let mut flags = self.flags.0;
        if self.enhanced.is_some() {
            flags |= MpaFlags::ENHANCED;
        }
        buf[field::FLAGS] = flags;
        buf[field::REV] = self.rev;
        put16(buf, field::PD_LENGTH, self.pd_length() as u16);
        let mut at = HEADER_LEN;
        if let Some(e) = self.enhanced {
            buf[at..at + 4].copy_from_slice(&e.to_bytes());
            at += 4;
        }
        buf[at..at + self.ulp_data.len()].copy_from_slice(self.ulp_data);
        Ok(len)
    }

    /// Emit into a fresh vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, WireError> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The siw request from shared/interop/README.md: "MPA ID Req Frame" 10 02 0004 0001 0001.
    const SIW_REQ: [u8; 24] = [
        b'M', b'P', b'A', b' ', b'I', b'D', b' ', b'R', b'e', b'q', b' ', b'F', b'r', b'a', b'm',
        b'e', 0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01,
    ];

    #[test]
    fn parse_siw_request() {
        let (r, len) = MpaFrameRepr::parse_bytes(&SIW_REQ).unwrap();
        assert_eq!(len, 24);
        assert_eq!(r.kind, FrameKind::Request);
        assert!(!r.flags.marker() && !r.flags.crc() && !r.flags.reject() && r.flags.enhanced());
        assert_eq!(r.rev, 2);
        let e = r.enhanced.unwrap();
        assert_eq!((e.ird, e.ord, e.peer_to_peer), (1, 1, false));
        assert!(r.ulp_data.is_empty());
        assert_eq!(r.to_vec().unwrap(), SIW_REQ);
    }

    /// The siw p2p reply: flags 0x50? no: p2p variant PD `8001 8001` (write RTR chosen).
    #[test]
    fn enhanced_words_p2p() {
        let e = EnhancedParams::parse(&[0x80, 0x01, 0xc0, 0x01]).unwrap();
        assert!(e.peer_to_peer && !e.rtr_zero_len_fpdu && e.rtr_write && e.rtr_read);
        assert_eq!((e.ird, e.ord), (1, 1));
        assert_eq!(e.to_bytes(), [0x80, 0x01, 0xc0, 0x01]);
        let e = EnhancedParams::parse(&[0x40, 0x80, 0x00, 0x80]).unwrap();
        assert!(e.rtr_zero_len_fpdu && !e.peer_to_peer);
        assert_eq!((e.ird, e.ord), (128, 128));
    }

    #[test]
    fn build_rev1_reply_with_reject_and_data() {
        let r = MpaFrameRepr {
            kind: FrameKind::Reply,
            flags: MpaFlags::new(false, true, true, false),
            rev: 1,
            enhanced: None,
            ulp_data: b"no",
        };
        let v = r.to_vec().unwrap();
        let mut want = REPLY_KEY.to_vec();
        want.extend_from_slice(&[0x60, 0x01, 0x00, 0x02, b'n', b'o']);
        assert_eq!(v, want);
        let (back, _) = MpaFrameRepr::parse_bytes(&v).unwrap();
        assert_eq!(back, r);
    }

    /// Each flag of a received Reply read from its own bit: R set alone,
    /// then every flag but R.
    #[test]
    fn reject_flag_from_literal_reply() {
        let mut b = REPLY_KEY.to_vec();
        b.extend_from_slice(&[0x20, 0x01, 0x00, 0x00]);
        let (r, _) = MpaFrameRepr::parse_bytes(&b).unwrap();
        assert!(r.flags.reject());
        assert!(!r.flags.marker() && !r.flags.crc() && !r.flags.enhanced());
        b[16] = 0xdf;
        let (r, _) = MpaFrameRepr::parse_bytes(&b).unwrap();
        assert!(!r.flags.reject());
        assert!(r.flags.marker() && r.flags.crc() && r.flags.enhanced());
    }

    #[test]
    fn reserved_flags_are_kept() {
        let mut f = SIW_REQ;
        f[16] = 0x1f;
        let (r, _) = MpaFrameRepr::parse_bytes(&f).unwrap();
        assert_eq!(r.flags.reserved(), 0x0f);
    }

    #[test]
    fn bad_key_and_oversized_pd() {
        let mut f = SIW_REQ;
        f[0] = b'X';
        assert!(matches!(
            MpaFrameRepr::parse_bytes(&f),
            Err(WireError::Malformed { field: "key", .. })
        ));
        let mut f = SIW_REQ.to_vec();
        f[18] = 0x02;
        f[19] = 0x01; // 513
        assert!(matches!(
            MpaFrame::new_checked(&f[..]),
            Err(WireError::Malformed {
                field: "PD_Length",
                value: 513,
                ..
            })
        ));
    }

    #[test]
    fn every_truncation_is_an_error() {
        for n in 0..SIW_REQ.len() {
            assert!(
                matches!(
                    MpaFrameRepr::parse_bytes(&SIW_REQ[..n]),
                    Err(WireError::Truncated { .. })
                ),
                "length {n}"
            );
        }
    }

    /// The zero-copy view on a literal Reply: each field at its offset, the
    /// private data exactly PD_Length long whatever follows it.
    #[test]
    fn frame_view_reads_every_field_from_literal_bytes() {
        let mut b = REPLY_KEY.to_vec();
        b.extend_from_slice(&[0xc0, 0x01, 0x00, 0x03, b'a', b'b', b'c', 0xff, 0xff]);
        let f = MpaFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.key(), REPLY_KEY);
        assert_eq!(f.kind(), Some(FrameKind::Reply));
        assert!(f.flags().marker() && f.flags().crc() && !f.flags().reject());
        assert_eq!((f.rev(), f.pd_length(), f.total_len()), (1, 3, 23));
        assert_eq!(f.private_data(), b"abc");
        // PD_Length past the buffer: refused, and the view reads nothing.
        b[19] = 0x06;
        assert_eq!(
            MpaFrame::new_checked(&b[..23]).unwrap_err(),
            WireError::Truncated {
                what: "MPA frame",
                needed: 26,
                have: 23
            }
        );
        assert_eq!(MpaFrame::new_unchecked(&b[..23]).private_data(), b"");
        // A key of neither kind; a buffer too short for the key.
        b[0] = b'm';
        assert_eq!(MpaFrame::new_unchecked(&b[..]).kind(), None);
        let f = MpaFrame::new_unchecked(&b[..10]);
        assert_eq!(
            (f.key(), f.kind(), f.rev(), f.pd_length()),
            (&[][..], None, 0, 0)
        );
        // RFC 5044 §7.1: PD_Length 512 is the most allowed.
        let mut big = REQUEST_KEY.to_vec();
        big.extend_from_slice(&[0x00, 0x01, 0x02, 0x00]);
        big.resize(HEADER_LEN + 512, 9);
        let f = MpaFrame::new_checked(&big[..]).unwrap();
        assert_eq!(f.private_data().len(), 512);
    }

    /// `emit` writes into any buffer of at least `buffer_len` octets and
    /// refuses a shorter one with the length it needs; PD_Length 512 goes,
    /// 513 does not.
    #[test]
    fn emit_checks_the_output_length_and_the_private_data_limit() {
        let r = MpaFrameRepr {
            kind: FrameKind::Request,
            flags: MpaFlags::new(false, true, false, false),
            rev: 2,
            enhanced: Some(EnhancedParams {
                ird: 4,
                ord: 2,
                ..Default::default()
            }),
            ulp_data: b"pd",
        };
        let len = r.buffer_len();
        assert_eq!(len, HEADER_LEN + 4 + 2);
        for have in 0..len {
            let mut buf = vec![0xee; have];
            assert_eq!(
                r.emit(&mut buf),
                Err(WireError::Truncated {
                    what: "MPA frame",
                    needed: len,
                    have
                })
            );
            assert!(buf.iter().all(|&o| o == 0xee), "nothing written at {have}");
        }
        let mut buf = vec![0xee; len + 3];
        assert_eq!(r.emit(&mut buf), Ok(len));
        assert_eq!(&buf[..len], &r.to_vec().unwrap()[..]);
        assert_eq!(&buf[len..], &[0xee; 3]);
        assert_eq!(
            &buf[16..26],
            &[0x50, 0x02, 0x00, 0x06, 0, 4, 0, 2, b'p', b'd']
        );
        let pd = [1u8; 513];
        let r = MpaFrameRepr {
            enhanced: None,
            ulp_data: &pd[..512],
            ..r
        };
        assert_eq!(r.to_vec().map(|v| v.len()), Ok(HEADER_LEN + 512));
        let r = MpaFrameRepr { ulp_data: &pd, ..r };
        assert_eq!(
            r.emit(&mut [0u8; HEADER_LEN + 513]),
            Err(WireError::Malformed {
                what: "MPA frame",
                field: "PD_Length",
                value: 513
            })
        );
    }
}
