//! Shared helpers for the end-to-end tests: a hostile peer that frames
//! hand-made DDP segments, and memory snapshots to prove nothing outside a
//! target changed.
#![forbid(unsafe_code)]

pub mod raw_sctp;
pub mod raw_tcp;

use iwarp_datapath::runtime::Engine;
use iwarp_datapath::stack::{Output, Stack};
use iwarp_proto::mem::{MemoryTable, STag};
use iwarp_proto::mpa::Framer;
use iwarp_proto::wire::ddp::{
    DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader, UntaggedHeader,
};

/// Frames segments the way a (possibly hostile) peer would, continuing the
/// stream position of a peer that has not sent any FPDU yet.
#[derive(Debug)]
pub struct Hostile {
    /// The framer (CRC and markers as negotiated for this direction).
    pub framer: Framer,
}

impl Hostile {
    /// A hostile sender at the start of full operation.
    pub fn new(crc: bool, markers: bool) -> Self {
        Hostile {
            framer: Framer::new(crc, markers),
        }
    }

    /// One FPDU around a raw ULPDU.
    pub fn raw(&mut self, ulpdu: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.framer.emit(&[ulpdu], &mut out).expect("ulpdu fits");
        out
    }

    /// A tagged segment.
    pub fn tagged(&mut self, ddp: u8, rdmap: u8, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
        let h = DdpHeader::Tagged(TaggedHeader {
            ddp: DdpControl(ddp),
            rdmap: RdmapControl(rdmap),
            stag,
            to,
        });
        self.with_header(h, payload)
    }

    /// An untagged segment.
    #[allow(clippy::too_many_arguments)]
    pub fn untagged(
        &mut self,
        ddp: u8,
        rdmap: u8,
        inval: u32,
        qn: u32,
        msn: u32,
        mo: u32,
        payload: &[u8],
    ) -> Vec<u8> {
        let h = DdpHeader::Untagged(UntaggedHeader {
            ddp: DdpControl(ddp),
            rdmap: RdmapControl(rdmap),
            inval_stag: inval,
            qn,
            msn,
            mo,
        });
        self.with_header(h, payload)
    }

    /// A header plus payload.
    pub fn with_header(&mut self, h: DdpHeader, payload: &[u8]) -> Vec<u8> {
        let (hb, n) = h.to_array();
        let mut out = Vec::new();
        self.framer
            .emit(&[&hb[..n], payload], &mut out)
            .expect("ulpdu fits");
        out
    }
}

/// Control octets of a well-formed last segment.
pub fn ctrl(tagged: bool, op: Opcode) -> (u8, u8) {
    (DdpControl::new(tagged, true).0, RdmapControl::new(op).0)
}

/// Copies of the listed regions.
pub fn snapshot(mem: &MemoryTable, stags: &[STag]) -> Vec<Vec<u8>> {
    stags
        .iter()
        .map(|s| mem.snapshot(*s).map(|b| b.to_vec()).unwrap_or_default())
        .collect()
}

/// One round of a raw peer's link to `stack` at `now`: the frames queued
/// in `to_stack` delivered, the stack polled (its outputs appended to
/// `outputs`); the frames it sent.
fn stack_round(
    stack: &mut Stack,
    to_stack: &mut Vec<Vec<u8>>,
    outputs: &mut Vec<Output>,
    now: u64,
) -> Vec<Vec<u8>> {
    for f in std::mem::take(to_stack) {
        stack.handle_frame(&f, now);
    }
    let mut from_stack: Vec<Vec<u8>> = Vec::new();
    stack.poll(
        now,
        &mut |p: &[&[u8]]| from_stack.push(p.concat()),
        &mut |o| outputs.push(o),
    );
    from_stack
}
