//! Connection setup over SCTP (RFC 5043 §6): the DDP Stream Session
//! Initiate / Accept / Reject exchange takes the place of the MPA
//! Request / Reply, and carries IRD/ORD the way MPA private data does
//! for RFC 6581.
//!
//! RFC 5043 §6.1.1 gives Initiate and Accept up to 512 octets of Private
//! Data for the ULP and says nothing about Read queue depths. We put the
//! RFC 6581 IRD/ORD word (four octets, [`EnhancedParams`]) first in the
//! Private Data of every Initiate and Accept we send, and the
//! application's private data after it (so at most 508 octets of it), as
//! MPA Rev 2 enhanced setup does. The peer-to-peer and RTR bits are sent
//! as zero and ignored: RFC 5043 has no MPA responder that waits for a
//! first FPDU, so there is nothing for an RTR to do. A Reject carries the
//! application's private data alone (up to 512 octets), since there is no
//! IRD/ORD to settle.
//!
//! Negotiation (RFC 6581 §3, as over MPA): the responder's IRD is capped
//! by the initiator's ORD and its ORD by the initiator's IRD; the
//! initiator refuses an Accept whose ORD is above its own IRD
//! ([`SetupFailure::InsufficientIrd`]) and caps its ORD by the
//! responder's IRD. An Initiate or Accept without the four octets is
//! refused as malformed ([`SetupFailure::Malformed`]): both ends are ours.
//!
//! I/O-free: bytes in, bytes and [`Negotiated`] / [`PeerRequest`] out.

use iwarp_proto::wire::mpa_frame::MAX_PRIVATE_DATA;
use iwarp_proto::wire::{EnhancedParams, TermCode, WireError};

use crate::{Negotiated, PeerRequest, RtrOffer, SetupError, SetupFailure};

/// Most application private data in an Initiate or Accept (512 less the
/// IRD/ORD word).
pub const MAX_ULP_PRIVATE_DATA: usize = MAX_PRIVATE_DATA - EnhancedParams::LEN;

fn fail(code: TermCode, reason: SetupFailure) -> SetupError {
    SetupError {
        code,
        reason,
        peer_private_data: Vec::new(),
    }
}

fn with_words(ird: u16, ord: u16, private_data: &[u8]) -> Result<Vec<u8>, SetupError> {
    if private_data.len() > MAX_ULP_PRIVATE_DATA {
        return Err(fail(
            TermCode::MPA_LOCAL_CATASTROPHIC,
            SetupFailure::BadConfig,
        ));
    }
    let words = EnhancedParams {
        ird,
        ord,
        ..Default::default()
    }
    .to_bytes();
    let mut v = Vec::with_capacity(EnhancedParams::LEN + private_data.len());
    v.extend_from_slice(&words);
    v.extend_from_slice(private_data);
    Ok(v)
}

fn split(pd: &[u8]) -> Result<(EnhancedParams, &[u8]), SetupError> {
    let e = EnhancedParams::parse(pd)
        .map_err(|w: WireError| fail(TermCode::MPA_BAD_REQ_REP, SetupFailure::Malformed(w)))?;
    Ok((e, &pd[EnhancedParams::LEN..]))
}

/// The Private Data of our Initiate: our IRD/ORD word, then
/// `private_data` (at most [`MAX_ULP_PRIVATE_DATA`] octets).
pub fn initiate(ird: u16, ord: u16, private_data: &[u8]) -> Result<Vec<u8>, SetupError> {
    with_words(ird, ord, private_data)
}

/// The peer's Initiate Private Data as a request for our application.
/// `rev` is 0 (no MPA), `crc` and `markers` false (SCTP's CRC32c covers
/// every packet, RFC 5043 §4), no peer-to-peer or RTR.
pub fn parse_initiate(pd: &[u8]) -> Result<PeerRequest, SetupError> {
    let (e, ulp) = split(pd)?;
    Ok(PeerRequest {
        rev: 0,
        crc: false,
        markers: false,
        ird: Some(e.ird),
        ord: Some(e.ord),
        peer_to_peer: false,
        rtr: RtrOffer::default(),
        private_data: ulp.to_vec(),
    })
}

/// Accept `req` with our IRD/ORD (capped by the peer's: our IRD by its
/// ORD, our ORD by its IRD, RFC 6581 §3) and `private_data`: the Accept's
/// Private Data and what full operation uses.
pub fn accept(
    req: &PeerRequest,
    ird: u16,
    ord: u16,
    private_data: &[u8],
) -> Result<(Vec<u8>, Negotiated), SetupError> {
    let ird = ird.min(req.ord.unwrap_or(0)).min(EnhancedParams::MAX_DEPTH);
    let ord = ord.min(req.ird.unwrap_or(0)).min(EnhancedParams::MAX_DEPTH);
    let bytes = with_words(ird, ord, private_data)?;
    Ok((
        bytes,
        Negotiated {
            rev: 0,
            crc: false,
            markers_tx: false,
            markers_rx: false,
            ird,
            ord,
            rtr: None,
            peer_private_data: req.private_data.clone(),
        },
    ))
}

/// The peer's Accept, for an Initiate we sent with `ird`/`ord`: the
/// responder's ORD must fit our IRD (RFC 6581 §3: else 0x06), our ORD is
/// capped by its IRD.
pub fn parse_accept(pd: &[u8], ird: u16, ord: u16) -> Result<Negotiated, SetupError> {
    let (e, ulp) = split(pd)?;
    if e.ord > ird {
        let mut err = fail(
            TermCode::MPA_INSUFFICIENT_IRD,
            SetupFailure::InsufficientIrd,
        );
        err.peer_private_data = ulp.to_vec();
        return Err(err);
    }
    Ok(Negotiated {
        rev: 0,
        crc: false,
        markers_tx: false,
        markers_rx: false,
        ird,
        ord: ord.min(e.ird),
        rtr: None,
        peer_private_data: ulp.to_vec(),
    })
}

/// The error an initiator reports for the peer's Reject with Private
/// Data `pd` (RFC 5043 §6.3).
pub fn rejected(pd: &[u8]) -> SetupError {
    SetupError {
        code: TermCode::MPA_BAD_REQ_REP,
        reason: SetupFailure::Rejected,
        peer_private_data: pd.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiate_bytes_are_the_rfc6581_word_then_private_data() {
        let pd = initiate(16, 8, b"hi").expect("fits");
        assert_eq!(pd, [0x00, 0x10, 0x00, 0x08, b'h', b'i']);
        let req = parse_initiate(&pd).expect("parses");
        assert_eq!((req.ird, req.ord), (Some(16), Some(8)));
        assert_eq!(req.private_data, b"hi");
    }

    #[test]
    fn limits_are_capped_both_ways() {
        let req = parse_initiate(&initiate(4, 2, b"").expect("fits")).expect("parses");
        // Responder asks IRD 16 / ORD 16: IRD capped by the peer's ORD (2),
        // ORD by its IRD (4).
        let (bytes, n) = accept(&req, 16, 16, b"ok").expect("accepts");
        assert_eq!((n.ird, n.ord), (2, 4));
        assert_eq!(&bytes[..4], &[0, 2, 0, 4]);
        let ini = parse_accept(&bytes, 4, 2).expect("fits our IRD");
        assert_eq!((ini.ird, ini.ord), (4, 2));
        assert_eq!(ini.peer_private_data, b"ok");
    }

    #[test]
    fn accept_whose_ord_exceeds_our_ird_is_refused() {
        let bytes = initiate(1, 9, b"").expect("fits"); // the responder's IRD 1, ORD 9
        let e = parse_accept(&bytes, 4, 4).expect_err("ORD 9 > IRD 4");
        assert_eq!(e.reason, SetupFailure::InsufficientIrd);
        assert_eq!(e.code, TermCode::MPA_INSUFFICIENT_IRD);
    }

    #[test]
    fn short_or_oversized_private_data_is_refused() {
        for n in 0..4 {
            let e = parse_initiate(&[0u8; 4][..n]).expect_err("short");
            assert!(matches!(e.reason, SetupFailure::Malformed(_)), "{n}: {e:?}");
            assert!(parse_accept(&[0u8; 4][..n], 1, 1).is_err());
        }
        assert!(initiate(1, 1, &[0; MAX_ULP_PRIVATE_DATA]).is_ok());
        let e = initiate(1, 1, &[0; MAX_ULP_PRIVATE_DATA + 1]).expect_err("509");
        assert_eq!(e.reason, SetupFailure::BadConfig);
    }

    #[test]
    fn reject_keeps_the_peer_private_data() {
        let e = rejected(b"busy");
        assert_eq!(e.reason, SetupFailure::Rejected);
        assert_eq!(e.peer_private_data, b"busy");
    }
}
