//! sctp-lite's packet, chunk and parameter parsers (every chunk family of
//! RFC 9260 §3.3) and ddp-sctp's RFC 5043 payload parsers on arbitrary
//! bytes: never panic; what parses re-emits and parses again the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sctp_lite::wire::{self, ChunkRepr, Params, SctpPacket};

fn same(a: &ChunkRepr<'_>, b: &ChunkRepr<'_>) -> bool {
    match (a, b) {
        (ChunkRepr::Sack(x), ChunkRepr::Sack(y)) => {
            x.cum_tsn_ack == y.cum_tsn_ack
                && x.a_rwnd == y.a_rwnd
                && x.gap_blocks.iter().eq(y.gap_blocks.iter())
                && x.dup_tsns.iter().eq(y.dup_tsns.iter())
        }
        // INIT / INIT-ACK keep only the parameters this stack knows, so
        // compare the fixed part and what is re-emitted.
        (ChunkRepr::Init(x), ChunkRepr::Init(y))
        | (ChunkRepr::InitAck(x), ChunkRepr::InitAck(y)) => {
            x.initiate_tag == y.initiate_tag
                && x.a_rwnd == y.a_rwnd
                && x.initial_tsn == y.initial_tsn
                && x.params.state_cookie == y.params.state_cookie
                && x.params.adaptation == y.params.adaptation
        }
        _ => a == b,
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = wire::checksum(data);
    let Ok(p) = SctpPacket::new_checked(data) else {
        return;
    };
    let _ = p.verify_checksum();
    for c in p.chunks() {
        let Ok(c) = c else { break };
        let Ok(r) = ChunkRepr::parse(&c) else {
            continue;
        };
        match r {
            ChunkRepr::Abort { causes, .. } | ChunkRepr::Error { causes } => {
                for _ in Params::new(causes) {}
            }
            ChunkRepr::Data(d) => {
                let _ = ddp_sctp::ControlMessage::parse(d.payload);
                let _ = ddp_sctp::SegmentChunk::parse(d.payload);
            }
            _ => {}
        }
        let Some(len) = r.buffer_len() else { continue };
        let mut buf = vec![0u8; len];
        if r.emit(&mut buf).is_ok() {
            let (c2, _) = wire::parse_chunk(&buf).expect("re-emitted chunk parses");
            let back = ChunkRepr::parse(&c2).expect("re-emitted chunk parses to a repr");
            assert!(same(&r, &back), "{r:?} != {back:?}");
        }
    }
});
