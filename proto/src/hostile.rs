//! Hostile-peer driver: test support shared by the `hostile_fuzz` property
//! test and the `hostile_qp` fuzz target. Nothing in the stack calls it.
//!
//! [`run`] reads its input as a string of decisions and drives one [`Qp`] in
//! full operation over a [`MemoryTable`] holding regions of several PDs and
//! rights and memory windows, interleaving
//!
//! * peer octets given to [`Qp::receive`]: well-formed FPDUs built with the
//!   crate's own [`Framer`] and header `emit`s, naming real or nearly-real
//!   STags, TOs, MSNs and lengths so that placement is really reached, and
//!   raw or corrupted octets; every FPDU may be cut anywhere, with local
//!   operations between its pieces;
//! * local operations: register, deregister, invalidate, revalidate, allocate,
//!   bind, unbind and free windows, post receives, Sends, Writes and Reads,
//!   transmit, Terminate, loss of the LLP.
//!
//! [`run_segments`] does the same to a QP over the segment lower layer
//! (DDP over SCTP, RFC 5043): the peer's DDP Segments go whole to
//! [`Qp::receive_segment`] with their DDP-SSN, and a segment may be held
//! back and delivered later, in any order (RFC 5043 §10: every chunk is
//! unordered); a hostile peer also repeats DDP-SSNs, skips them, sends
//! them far ahead and sends raw or empty segments.
//!
//! It keeps a shadow copy of every region and, after every step, checks:
//!
//! * no octet of any region changed unless, when the step began, it was
//!   inside a valid STag of the QP's PD with Remote Write (a region, or a
//!   bound window's range; RFC 5040 §8.1.1, RFC 5041 §7.1 tagged checks
//!   1-5), or inside a posted receive buffer or RDMA Read sink not yet
//!   completed whose STag was still valid for local write;
//! * queues stay within their bounds: inbound Read Requests ≤ IRD (RFC 5040
//!   §6.1), outstanding Reads ≤ ORD, posted receives as the model counts
//!   them, at most three stream events in the QP's life;
//! * every completion names posted, not yet completed work, in posting
//!   order per queue (RFC 5040 §5.5 rule 15), with a plausible length; and
//!   once the LLP is gone every posted request has completed;
//! * nothing panics.
//!
//! The shadow is updated only for octets that changed legitimately.

use std::collections::VecDeque;

use crate::mem::{Access, MemError, MemoryTable, PdId, STag};
use crate::wire::{AtomicOp, AtomicRequest};

/// What lets the peer change memory: RDMA Write and RFC 7306 atomics.
const PEER_WRITES: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);
use crate::mpa::Framer;
use crate::qp::llp::{LowerLayer, SegmentConfig};
use crate::qp::{
    InlineData, Qp, QpConfig, QpEvent, QpState, SgList, Sge, WcOpcode, WcStatus, WorkRequest,
};
use crate::wire::{
    DdpControl, DdpHeader, Opcode, RdmapControl, ReadRequest, TaggedHeader, TermCode,
    TerminateRepr, UntaggedHeader,
};

/// What one run reached (to check that the driver gets past the header checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Steps taken.
    pub steps: usize,
    /// FPDUs the QP received with a good CRC.
    pub fpdus_rx: u64,
    /// Payload octets the QP placed.
    pub bytes_placed: u64,
    /// Receive completions with success.
    pub recv_ok: usize,
    /// RDMA Read completions with success.
    pub read_ok: usize,
    /// Read Responses the QP sent (inbound Read Requests accepted).
    pub fpdus_tx: u64,
    /// Segments the QP held for an earlier DDP-SSN (segment mode).
    pub segments_held: u64,
    /// Octets that changed in regions only an RFC 7306 atomic can write
    /// (remote atomic access, neither local nor remote write, no window).
    pub atomic_octets: u64,
}

/// A broken invariant: what, and at which step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Decisions read from the fuzzer's octets; zeros once they run out.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    /// Uniform-ish in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.u16()) % n.max(1)
    }
    fn chance(&mut self, one_in: u8) -> bool {
        self.byte().is_multiple_of(one_in.max(1))
    }
    fn chance16(&mut self, one_in: u16) -> bool {
        self.u16().is_multiple_of(one_in.max(1))
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> Option<T> {
        if from.is_empty() {
            None
        } else {
            Some(from[self.below(from.len())])
        }
    }
}

#[derive(Debug)]
struct RegionModel {
    stag: STag,
    pd: PdId,
    access: Access,
    base_to: u64,
    shadow: Vec<u8>,
    valid: bool,
}

#[derive(Debug, Clone, Copy)]
struct Binding {
    region: usize,
    offset: u64,
    len: u64,
    access: Access,
}

#[derive(Debug)]
struct WindowModel {
    stag: STag,
    pd: PdId,
    binding: Option<Binding>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
}

#[derive(Debug, Clone, Copy)]
struct PostedSq {
    wr_id: u64,
    kind: Kind,
    len: u32,
    signaled: bool,
    /// Read sink.
    sink: SgList,
}

/// A Read as the peer sees it: the sink it was told, and how much it sent.
#[derive(Debug, Clone, Copy)]
struct PeerRead {
    wr_id: u64,
    stag: STag,
    to: u64,
    len: u32,
    sent: u32,
}

struct Driver {
    mem: MemoryTable,
    pds: [PdId; 3],
    qp: Qp,
    cfg: QpConfig,
    regions: Vec<Option<RegionModel>>,
    windows: Vec<Option<WindowModel>>,
    /// Every STag ever handed out (stale ones too): what a peer names.
    known: Vec<STag>,
    recvs: VecDeque<(u64, SgList)>,
    sq: VecDeque<PostedSq>,
    peer_reads: VecDeque<PeerRead>,
    next_wr: u64,
    last_recv_done: u64,
    last_sq_done: u64,
    framer: Framer,
    peer_msn: [u32; 3],
    /// Message offset of a Send message the peer left open (no L bit yet).
    open_send_mo: Option<u32>,
    /// The rest of an FPDU the peer has started to send.
    pending: Vec<u8>,
    events: usize,
    /// Half the runs speak the protocol correctly nearly always (so they
    /// get deep into placement) and break it only now and then.
    polite: bool,
    summary: Summary,
    step: usize,
    /// Over the segment lower layer: the peer's DDP-SSNs and what it holds back.
    seg: Option<SegPeer>,
}

/// The peer's side of the segment lower layer.
struct SegPeer {
    next_ssn: u16,
    /// Segments built but not yet delivered (delivered later, any order).
    held: Vec<(u16, Vec<u8>)>,
}

/// Most segments the peer holds back at once.
const MAX_PEER_HELD: usize = 12;

const MAX_REGIONS: usize = 10;
const MAX_WINDOWS: usize = 4;

fn fail<T>(msg: String) -> Result<T, Violation> {
    Err(Violation(msg))
}

/// Drive one QP through the steps `data` describes, checking the invariants
/// listed in the module documentation after each.
pub fn run(data: &[u8]) -> Result<Summary, Violation> {
    run_with(data, false)
}

/// [`run`] against a QP over the segment lower layer (DDP over SCTP),
/// segments delivered out of order.
pub fn run_segments(data: &[u8]) -> Result<Summary, Violation> {
    run_with(data, true)
}

fn run_with(data: &[u8], segments: bool) -> Result<Summary, Violation> {
    let mut input = Input { data, pos: 0 };
    let mut mem = MemoryTable::with_seed(u64::from(input.u32()));
    let pds = [mem.alloc_pd(), mem.alloc_pd(), mem.alloc_pd()];
    let flags = input.byte();
    let cfg = QpConfig {
        pd: pds[0],
        ird: 1 + u16::from(flags & 3),
        ord: 1 + u16::from((flags >> 2) & 3),
        mulpdu: QpConfig::MIN_MULPDU + (input.byte() as u16),
        crc: flags & 0x10 == 0,
        markers_tx: flags & 0x20 != 0,
        markers_rx: flags & 0x40 != 0,
        sq_depth: 2 + usize::from(input.byte() % 7),
        rq_depth: 2 + usize::from(input.byte() % 7),
    };
    let mut d = Driver {
        mem,
        pds,
        qp: if segments {
            Qp::with_lower(
                cfg,
                None,
                LowerLayer::Segments(SegmentConfig {
                    first_ssn: 1,
                    window: 64,
                    max_held: 4096,
                }),
            )
        } else {
            Qp::new(cfg)
        },
        cfg,
        regions: Vec::new(),
        windows: Vec::new(),
        known: Vec::new(),
        recvs: VecDeque::new(),
        sq: VecDeque::new(),
        peer_reads: VecDeque::new(),
        next_wr: 1,
        last_recv_done: 0,
        last_sq_done: 0,
        framer: Framer::new(cfg.crc, cfg.markers_rx),
        peer_msn: [1; 3],
        open_send_mo: None,
        pending: Vec::new(),
        events: 0,
        polite: flags & 0x80 != 0,
        summary: Summary::default(),
        step: 0,
        seg: segments.then(|| SegPeer {
            next_ssn: 1,
            held: Vec::new(),
        }),
    };
    // A few regions to start with: one remotely writable, one read-only,
    // one for atomics only, one of another PD, one with bind rights for
    // windows.
    d.register_with(pds[0], Access::ALL, 0x1000, 96);
    d.register_with(pds[0], Access::LOCAL_READ | Access::REMOTE_READ, 0, 64);
    // One only RFC 7306 atomics may change.
    d.register_with(pds[0], Access::REMOTE_ATOMIC, 0x2000, 64);
    d.register_with(pds[1], Access::ALL, 0x1000, 64);
    d.register_with(pds[0], Access::LOCAL_WRITE | Access::MW_BIND, 0x8000, 128);
    d.check_all(&d.allowed())?;
    while !input.done() {
        d.step += 1;
        let allowed = d.allowed();
        d.one_step(&mut input)?;
        d.check_all(&allowed)?;
        d.drain()?;
        d.check_queues()?;
    }
    // The LLP goes: everything posted completes (flushed if need be).
    let allowed = d.allowed();
    d.qp.llp_lost();
    d.check_all(&allowed)?;
    d.drain()?;
    d.check_queues()?;
    if let Some((wr_id, _)) = d.recvs.front() {
        return fail(format!("receive {wr_id} never completed after LLP loss"));
    }
    if let Some(p) = d.sq.iter().find(|p| p.signaled) {
        return fail(format!(
            "request {} never completed after LLP loss",
            p.wr_id
        ));
    }
    let st = d.qp.stats();
    d.summary.steps = d.step;
    d.summary.fpdus_rx = st.fpdus_rx;
    d.summary.bytes_placed = st.bytes_placed;
    d.summary.fpdus_tx = st.fpdus_tx;
    d.summary.segments_held = d.qp.segment_stats().map_or(0, |s| s.held);
    Ok(d.summary)
}

impl Driver {
    /// A protocol violation with chance one in `n` (far rarer when polite).
    fn evil(&self, input: &mut Input<'_>, n: u16) -> bool {
        if self.polite {
            input.chance16(n.saturating_mul(32))
        } else {
            input.chance16(n)
        }
    }

    /// STag, base TO and size of a region or bound window of our PD whose
    /// rights include `need`.
    fn good_targets(&self, need: Access) -> Vec<(u32, u64, u64)> {
        let pd = self.cfg.pd;
        let mut v: Vec<(u32, u64, u64)> = self
            .regions
            .iter()
            .flatten()
            .filter(|r| r.valid && r.pd == pd && r.access.contains(need))
            .map(|r| (r.stag.0, r.base_to, r.shadow.len() as u64))
            .collect();
        for w in self.windows.iter().flatten() {
            let Some(b) = w.binding else { continue };
            let Some(r) = self.regions[b.region].as_ref() else {
                continue;
            };
            if r.valid && w.pd == pd && b.access.contains(need) {
                v.push((w.stag.0, r.base_to + b.offset, b.len));
            }
        }
        v
    }

    /// A valid target when polite (and not evil this time), else anything.
    fn target_for(&mut self, input: &mut Input<'_>, need: Access) -> (u32, u64, u64, bool) {
        if !self.evil(input, 2) {
            let good = self.good_targets(need);
            if let Some((s, b, n)) = input.pick(&good) {
                return (s, b, n, true);
            }
        }
        let (s, b, n) = self.target(input);
        (s, b, n, false)
    }

    fn register_with(&mut self, pd: PdId, access: Access, base_to: u64, len: usize) {
        let fill = (self.regions.len() as u8).wrapping_mul(37) | 0x80;
        let buf: Vec<u8> = (0..len).map(|i| fill ^ (i as u8)).collect();
        if let Ok(stag) = self.mem.register(pd, buf.clone(), access, base_to) {
            self.known.push(stag);
            let m = RegionModel {
                stag,
                pd,
                access,
                base_to,
                shadow: buf,
                valid: true,
            };
            match self.regions.iter_mut().find(|r| r.is_none()) {
                Some(slot) => *slot = Some(m),
                None => self.regions.push(Some(m)),
            }
        }
    }

    /// Whether only an atomic can change region `i` (see
    /// [`Summary::atomic_octets`]).
    fn atomic_only(&self, i: usize) -> bool {
        self.regions[i].as_ref().is_some_and(|r| {
            r.access.contains(Access::REMOTE_ATOMIC)
                && !r
                    .access
                    .intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        }) && !self
            .windows
            .iter()
            .flatten()
            .any(|w| w.binding.is_some_and(|b| b.region == i))
    }

    /// Which octets of each region may change in the next step.
    fn allowed(&self) -> Vec<Vec<bool>> {
        let mut mask: Vec<Vec<bool>> = self
            .regions
            .iter()
            .map(|r| vec![false; r.as_ref().map_or(0, |r| r.shadow.len())])
            .collect();
        let pd = self.cfg.pd;
        let allow = |mask: &mut Vec<Vec<bool>>, i: usize, lo: u64, len: u64| {
            let m = &mut mask[i];
            let lo = lo.min(m.len() as u64) as usize;
            let hi = (lo as u64).saturating_add(len).min(m.len() as u64) as usize;
            m[lo..hi].iter_mut().for_each(|b| *b = true);
        };
        for (i, r) in self.regions.iter().enumerate() {
            let Some(r) = r else { continue };
            if r.valid
                && self.mem.is_valid(r.stag)
                && r.pd == pd
                && r.access.intersects(PEER_WRITES)
            {
                allow(&mut mask, i, 0, r.shadow.len() as u64);
            }
        }
        for w in self.windows.iter().flatten() {
            let Some(b) = w.binding else { continue };
            let region_ok = self.regions[b.region].as_ref().is_some_and(|r| r.valid);
            if region_ok
                && self.mem.is_valid(w.stag)
                && w.pd == pd
                && b.access.intersects(PEER_WRITES)
            {
                allow(&mut mask, b.region, b.offset, b.len);
            }
        }
        // Posted receives and Read sinks not yet completed, while their STag
        // is valid for local write in our PD.
        let sinks = self.recvs.iter().map(|(_, s)| *s).chain(
            self.sq
                .iter()
                .filter(|p| p.kind == Kind::Read)
                .map(|p| p.sink),
        );
        for sgl in sinks {
            for sge in sgl.as_slice().iter().filter(|s| s.len > 0) {
                let Some(i) = self
                    .regions
                    .iter()
                    .position(|r| r.as_ref().is_some_and(|r| r.stag == sge.stag))
                else {
                    continue;
                };
                let Some(r) = &self.regions[i] else { continue };
                if r.valid
                    && self.mem.is_valid(r.stag)
                    && r.pd == pd
                    && r.access.contains(Access::LOCAL_WRITE)
                    && sge.to >= r.base_to
                {
                    allow(&mut mask, i, sge.to - r.base_to, u64::from(sge.len));
                }
            }
        }
        mask
    }

    /// Compare every region with its shadow; accept changes only where
    /// `allowed` (computed before the step) says so.
    fn check_all(&mut self, allowed: &[Vec<bool>]) -> Result<(), Violation> {
        let atomic_only: Vec<bool> = (0..self.regions.len())
            .map(|i| self.atomic_only(i))
            .collect();
        for (i, r) in self.regions.iter_mut().enumerate() {
            let Some(r) = r else { continue };
            let Some(now) = self.mem.snapshot(r.stag) else {
                return fail(format!(
                    "step {}: region {i} ({:?}) vanished from the table",
                    self.step, r.stag
                ));
            };
            if now.len() != r.shadow.len() {
                return fail(format!("step {}: region {i} changed length", self.step));
            }
            for (k, (old, new)) in r.shadow.iter().zip(&now).enumerate() {
                if old != new
                    && !allowed
                        .get(i)
                        .and_then(|m| m.get(k))
                        .copied()
                        .unwrap_or(false)
                {
                    return fail(format!(
                        "step {}: octet {k} of region {i} ({:?}, {:?}, {:?}, valid {}) changed \
                         {old:#04x} -> {new:#04x} outside every writable range",
                        self.step, r.stag, r.pd, r.access, r.valid
                    ));
                }
            }
            if atomic_only[i] {
                let n = r.shadow.iter().zip(&now).filter(|(a, b)| a != b).count();
                self.summary.atomic_octets += n as u64;
            }
            r.shadow = now;
        }
        // Validity only ever goes away behind the model's back (a peer's
        // Send with Invalidate); it never comes back by itself.
        for r in self.regions.iter_mut().flatten() {
            let v = self.mem.is_valid(r.stag);
            if v && !r.valid {
                return fail(format!(
                    "step {}: {:?} became valid by itself",
                    self.step, r.stag
                ));
            }
            r.valid = v;
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), Violation> {
        while let Some(c) = self.qp.poll_completion() {
            if c.opcode == WcOpcode::Recv {
                let Some(pos) = self.recvs.iter().position(|(id, _)| *id == c.wr_id) else {
                    return fail(format!(
                        "step {}: completion for receive {} not posted or already done",
                        self.step, c.wr_id
                    ));
                };
                // RFC 5040 §5.5: receives complete in the order posted.
                if c.wr_id < self.last_recv_done || pos != 0 {
                    return fail(format!(
                        "step {}: receive {} completed out of order",
                        self.step, c.wr_id
                    ));
                }
                self.last_recv_done = c.wr_id;
                let (_, sgl) = self.recvs.remove(pos).unwrap_or((0, SgList::EMPTY));
                if c.status == WcStatus::Success {
                    if c.byte_len > sgl.total_len() {
                        return fail(format!(
                            "step {}: receive {} reports {} octets in a {}-octet buffer",
                            self.step,
                            c.wr_id,
                            c.byte_len,
                            sgl.total_len()
                        ));
                    }
                    self.summary.recv_ok += 1;
                }
            } else {
                let Some(pos) = self.sq.iter().position(|p| p.wr_id == c.wr_id) else {
                    return fail(format!(
                        "step {}: completion for request {} not posted or already done",
                        self.step, c.wr_id
                    ));
                };
                // RFC 5040 §5.5 rule 15: in submission order (unsignaled
                // requests before it are done silently).
                if self.sq.iter().take(pos).any(|p| p.signaled) || c.wr_id < self.last_sq_done {
                    return fail(format!(
                        "step {}: request {} completed before an earlier signaled one",
                        self.step, c.wr_id
                    ));
                }
                self.last_sq_done = c.wr_id;
                let p = self.sq[pos];
                self.sq.drain(..=pos);
                let want = match p.kind {
                    Kind::Send => WcOpcode::Send,
                    Kind::Write => WcOpcode::Write,
                    Kind::Read => WcOpcode::Read,
                };
                if c.opcode != want {
                    return fail(format!(
                        "step {}: request {} completed as {:?}, posted as {:?}",
                        self.step, c.wr_id, c.opcode, p.kind
                    ));
                }
                if c.status == WcStatus::Success {
                    if c.byte_len != p.len {
                        return fail(format!(
                            "step {}: request {} reports {} octets of {}",
                            self.step, c.wr_id, c.byte_len, p.len
                        ));
                    }
                    if p.kind == Kind::Read {
                        self.summary.read_ok += 1;
                    }
                }
                self.peer_reads.retain(|r| r.wr_id > p.wr_id);
            }
        }
        while let Some(e) = self.qp.poll_event() {
            self.events += 1;
            if matches!(
                e,
                QpEvent::TerminateReceived(_) | QpEvent::MalformedTerminate(_)
            ) {
                self.pending.clear();
            }
        }
        // One error reported, one Terminate sent or received: nothing the
        // peer sends can make the QP queue more.
        if self.events > 3 {
            return fail(format!("step {}: {} stream events", self.step, self.events));
        }
        Ok(())
    }

    fn check_queues(&self) -> Result<(), Violation> {
        let q = &self.qp;
        // RFC 5040 §6.1: no more inbound Read Requests than the IRD we advertised.
        if q.inbound_reads() > usize::from(self.cfg.ird) {
            return fail(format!(
                "step {}: {} inbound Read Requests queued, IRD {}",
                self.step,
                q.inbound_reads(),
                self.cfg.ird
            ));
        }
        if q.outstanding_reads() > usize::from(self.cfg.ord.max(1)) {
            return fail(format!(
                "step {}: {} Reads outstanding, ORD {}",
                self.step,
                q.outstanding_reads(),
                self.cfg.ord
            ));
        }
        if q.posted_recvs() != self.recvs.len() || q.posted_recvs() > self.cfg.rq_depth {
            return fail(format!(
                "step {}: QP holds {} receives, {} posted and not completed (depth {})",
                self.step,
                q.posted_recvs(),
                self.recvs.len(),
                self.cfg.rq_depth
            ));
        }
        // Unsignaled requests leave the model only when a later one
        // completes; the signaled ones still posted fit the send queue.
        let signaled = self.sq.iter().filter(|p| p.signaled).count();
        if signaled > self.cfg.sq_depth {
            return fail(format!(
                "step {}: {signaled} requests outstanding, depth {}",
                self.step, self.cfg.sq_depth
            ));
        }
        if q.state() == QpState::Error
            && (q.inbound_reads() != 0 || q.outstanding_reads() != 0 || q.posted_recvs() != 0)
        {
            return fail(format!(
                "step {}: queues kept after the stream failed",
                self.step
            ));
        }
        Ok(())
    }

    fn one_step(&mut self, input: &mut Input<'_>) -> Result<(), Violation> {
        let op = input.byte();
        match op % 32 {
            0..=13 => self.wire(input)?,
            14..=16 if !self.polite || input.chance(32) => self.raw(input)?,
            14..=16 => self.wire(input)?,
            17 => {
                let pd = if input.chance(3) {
                    self.pds[1 + input.below(2)]
                } else {
                    self.pds[0]
                };
                let access = Access(input.byte() & Access::ALL.0);
                let len = 1 + input.below(160);
                let base_to = match input.byte() % 4 {
                    0 => 0,
                    1 => u64::from(input.u32()),
                    2 => u64::MAX - len as u64 - u64::from(input.byte()),
                    _ => 0x1000 * u64::from(input.byte()),
                };
                if self.regions.iter().flatten().count() < MAX_REGIONS {
                    self.register_with(pd, access, base_to, len);
                }
            }
            18 => {
                let i = input.below(self.regions.len());
                if let Some(Some(r)) = self.regions.get(i) {
                    match self.mem.deregister(r.stag) {
                        Ok(_) => self.regions[i] = None,
                        Err(MemError::RegionHasWindows) => {}
                        Err(e) => return fail(format!("step {}: deregister: {e:?}", self.step)),
                    }
                }
            }
            19 => {
                let i = input.below(self.regions.len());
                if let Some(Some(r)) = self.regions.get_mut(i) {
                    if self.mem.invalidate(r.stag).is_ok() {
                        r.valid = false;
                    }
                }
            }
            20 => {
                let i = input.below(self.regions.len());
                let key = input.byte();
                if let Some(Some(r)) = self.regions.get_mut(i) {
                    if !r.valid {
                        if let Ok(stag) = self.mem.revalidate(r.stag, key) {
                            r.stag = stag;
                            r.valid = true;
                            self.known.push(stag);
                        }
                    }
                }
            }
            21 => self.window_op(input)?,
            22..=24 => self.post_recv(input),
            25..=28 => self.post_send(input),
            29 => {
                let mut out = Vec::new();
                let budget = 1 + input.below(600);
                self.qp
                    .poll_transmit(&self.mem, &mut out, budget, usize::MAX);
            }
            30 => {
                if input.chance(if self.polite { 64 } else { 4 }) {
                    self.qp.terminate(TermCode::RDMAP_LOCAL_CATASTROPHIC);
                }
            }
            _ => {
                if input.chance(if self.polite { 128 } else { 8 }) {
                    self.qp.llp_lost();
                    self.pending.clear();
                }
            }
        }
        if input.chance(2) {
            let mut out = Vec::new();
            self.qp
                .poll_transmit(&self.mem, &mut out, 1 << 16, usize::MAX);
        }
        Ok(())
    }

    fn window_op(&mut self, input: &mut Input<'_>) -> Result<(), Violation> {
        match input.byte() % 4 {
            0 => {
                let pd = if input.chance(4) {
                    self.pds[1]
                } else {
                    self.pds[0]
                };
                if self.windows.iter().flatten().count() < MAX_WINDOWS {
                    if let Ok(stag) = self.mem.alloc_mw(pd) {
                        self.known.push(stag);
                        let w = WindowModel {
                            stag,
                            pd,
                            binding: None,
                        };
                        match self.windows.iter_mut().find(|w| w.is_none()) {
                            Some(slot) => *slot = Some(w),
                            None => self.windows.push(Some(w)),
                        }
                    }
                }
            }
            1 => {
                let wi = input.below(self.windows.len());
                let ri = input.below(self.regions.len());
                let offset = u64::from(input.byte());
                let len = u64::from(input.byte());
                let access = Access(input.byte() & Access::ANY_REMOTE.0);
                let (Some(Some(w)), Some(Some(r))) = (self.windows.get(wi), self.regions.get(ri))
                else {
                    return Ok(());
                };
                if let Ok(stag) = self.mem.bind_mw(w.stag, r.stag, offset, len, access) {
                    self.known.push(stag);
                    if let Some(Some(w)) = self.windows.get_mut(wi) {
                        w.stag = stag;
                        w.binding = Some(Binding {
                            region: ri,
                            offset,
                            len,
                            access,
                        });
                    }
                }
            }
            2 => {
                let wi = input.below(self.windows.len());
                if let Some(Some(w)) = self.windows.get_mut(wi) {
                    if self.mem.invalidate(w.stag).is_ok() {
                        w.binding = None;
                    }
                }
            }
            _ => {
                let wi = input.below(self.windows.len());
                if let Some(Some(w)) = self.windows.get(wi) {
                    match self.mem.dealloc_mw(w.stag) {
                        Ok(()) => self.windows[wi] = None,
                        Err(e) => return fail(format!("step {}: dealloc_mw: {e:?}", self.step)),
                    }
                }
            }
        }
        // A window's memory goes with its region: forget bindings whose
        // region the model no longer has.
        for w in self.windows.iter_mut().flatten() {
            if let Some(b) = w.binding {
                if self.regions[b.region].is_none() {
                    w.binding = None;
                }
            }
        }
        Ok(())
    }

    /// An entry over some live region (or a stale/garbage STag now and then).
    fn sge(&mut self, input: &mut Input<'_>) -> Sge {
        let live: Vec<usize> = (0..self.regions.len())
            .filter(|i| self.regions[*i].is_some())
            .collect();
        let stag_noise = input.chance(8);
        let Some(i) = input.pick(&live) else {
            return Sge::EMPTY;
        };
        let Some(r) = &self.regions[i] else {
            return Sge::EMPTY;
        };
        let n = r.shadow.len() as u64;
        let off = input.below(n as usize + 1) as u64;
        let len = input.below((n - off) as usize + 2) as u32;
        Sge {
            stag: if stag_noise {
                input.pick(&self.known).unwrap_or(r.stag)
            } else {
                r.stag
            },
            to: r.base_to.wrapping_add(off),
            len,
        }
    }

    fn sgl(&mut self, input: &mut Input<'_>) -> SgList {
        let n = 1 + input.below(3);
        let mut l = SgList::EMPTY;
        for _ in 0..n {
            let s = self.sge(input);
            let _ = l.push(s);
        }
        l
    }

    fn post_recv(&mut self, input: &mut Input<'_>) {
        let sgl = self.sgl(input);
        let wr_id = self.next_wr;
        self.next_wr += 1;
        if self.qp.post_recv(&self.mem, wr_id, sgl).is_ok() {
            self.recvs.push_back((wr_id, sgl));
        }
    }

    fn post_send(&mut self, input: &mut Input<'_>) {
        let local = self.sgl(input);
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let signaled = !input.chance(8);
        let remote_stag = input.pick(&self.known).unwrap_or(STag(input.u32()));
        let remote_to = u64::from(input.u16());
        let data_len = input.below(40);
        let data = InlineData::new(&vec![0x3c; data_len]).unwrap_or_else(|_| {
            InlineData::new(&[]).unwrap_or_else(|_| unreachable!("empty inline data fits"))
        });
        let (wr, kind, len) = match input.byte() % 5 {
            0 => (
                WorkRequest::Send {
                    wr_id,
                    signaled,
                    local,
                    solicited: input.chance(2),
                    invalidate: input.chance(2).then_some(remote_stag),
                },
                Kind::Send,
                local.total_len(),
            ),
            1 => (
                WorkRequest::SendInline {
                    wr_id,
                    signaled,
                    data,
                    solicited: false,
                    invalidate: None,
                },
                Kind::Send,
                data_len as u32,
            ),
            2 => (
                WorkRequest::Write {
                    wr_id,
                    signaled,
                    local,
                    remote_stag,
                    remote_to,
                },
                Kind::Write,
                local.total_len(),
            ),
            3 => (
                WorkRequest::WriteInline {
                    wr_id,
                    signaled,
                    data,
                    remote_stag,
                    remote_to,
                },
                Kind::Write,
                data_len as u32,
            ),
            _ => (
                WorkRequest::Read {
                    wr_id,
                    signaled,
                    local,
                    remote_stag,
                    remote_to,
                },
                Kind::Read,
                local.total_len(),
            ),
        };
        if self.qp.post_send(&self.mem, wr).is_ok() {
            self.sq.push_back(PostedSq {
                wr_id,
                kind,
                len,
                signaled,
                sink: if kind == Kind::Read {
                    local
                } else {
                    SgList::EMPTY
                },
            });
            if kind == Kind::Read {
                // What the Read Request will advertise (first non-empty entry).
                let first = local.as_slice().first().copied().unwrap_or(Sge::EMPTY);
                let adv = local
                    .as_slice()
                    .iter()
                    .copied()
                    .find(|s| s.len > 0)
                    .unwrap_or(first);
                self.peer_reads.push_back(PeerRead {
                    wr_id,
                    stag: adv.stag,
                    to: adv.to,
                    len,
                    sent: 0,
                });
            }
        }
    }

    /// An STag a peer might name, with a TO near something real.
    fn target(&mut self, input: &mut Input<'_>) -> (u32, u64, u64) {
        let mut stag = input.pick(&self.known).map_or(0, |s| s.0);
        match input.byte() % 16 {
            0 => stag ^= 1 + u32::from(input.byte() % 3), // a wrong key
            1 => stag = input.u32(),
            _ => {}
        }
        // Base TO and size of what it names, if the model knows it.
        let (base, size) = self
            .regions
            .iter()
            .flatten()
            .find(|r| r.stag.0 == stag)
            .map(|r| (r.base_to, r.shadow.len() as u64))
            .or_else(|| {
                self.windows
                    .iter()
                    .flatten()
                    .find(|w| w.stag.0 == stag)
                    .and_then(|w| {
                        let b = w.binding?;
                        let r = self.regions[b.region].as_ref()?;
                        Some((r.base_to + b.offset, b.len))
                    })
            })
            .unwrap_or((0, 64));
        (stag, base, size)
    }

    fn near_to(&mut self, input: &mut Input<'_>, base: u64, size: u64) -> u64 {
        match input.byte() % 8 {
            0 => base.wrapping_sub(1 + u64::from(input.byte() % 4)),
            1 => base
                .wrapping_add(size)
                .wrapping_sub(u64::from(input.byte() % 8)),
            2 => u64::MAX - u64::from(input.byte()),
            _ => base.wrapping_add(input.below(size as usize + 1) as u64),
        }
    }

    /// Build one well-formed FPDU (as a hostile but protocol-speaking peer
    /// would), or continue the one in progress, and feed a piece of it.
    fn wire(&mut self, input: &mut Input<'_>) -> Result<(), Violation> {
        if self.seg.is_some() {
            return self.wire_segment(input);
        }
        if self.pending.is_empty() {
            let Some(fpdu) = self.build_fpdu(input) else {
                return Ok(());
            };
            self.pending = fpdu;
        }
        // Cut anywhere: a header split from its payload, the payload split
        // with local operations in between.
        let n = if input.chance(2) {
            self.pending.len()
        } else {
            1 + input.below(self.pending.len())
        };
        let piece: Vec<u8> = self.pending.drain(..n).collect();
        self.qp.receive(&piece, &mut self.mem);
        Ok(())
    }

    /// Segment mode: build one segment and deliver it or hold it back, or
    /// deliver one held back; now and then break the DDP-SSN rules.
    fn wire_segment(&mut self, input: &mut Input<'_>) -> Result<(), Violation> {
        let held = self.seg.as_ref().map_or(0, |p| p.held.len());
        if held > 0 && (held >= MAX_PEER_HELD || input.chance(3)) {
            let i = input.below(held);
            if let Some(p) = self.seg.as_mut() {
                let (ssn, s) = p.held.swap_remove(i);
                self.qp.receive_segment(ssn, &s, &mut self.mem);
            }
            return Ok(());
        }
        let Some(ulpdu) = self.build_ulpdu(input) else {
            return Ok(());
        };
        if ulpdu.is_empty() && !self.evil(input, 2) {
            return Ok(()); // no RTR over SCTP: an empty segment is malformed
        }
        let evil_ssn = self.evil(input, 32);
        let hold = input.chance(2);
        let Some(p) = self.seg.as_mut() else {
            return Ok(());
        };
        let mut ssn = p.next_ssn;
        if evil_ssn {
            // A repeated, skipped or far-ahead DDP-SSN.
            ssn = ssn.wrapping_add(input.u16() % 200).wrapping_sub(100);
        } else {
            p.next_ssn = p.next_ssn.wrapping_add(1);
        }
        if hold {
            p.held.push((ssn, ulpdu));
        } else {
            self.qp.receive_segment(ssn, &ulpdu, &mut self.mem);
        }
        Ok(())
    }

    fn raw(&mut self, input: &mut Input<'_>) -> Result<(), Violation> {
        if self.seg.is_some() {
            // Raw octets, or a nearly-well-formed segment, as the next segment.
            let bytes: Vec<u8> = if input.chance(2) {
                let n = input.below(64);
                (0..n).map(|_| input.byte()).collect()
            } else {
                let Some(mut f) = self.build_ulpdu(input) else {
                    return Ok(());
                };
                let at = input.below(f.len());
                let x = input.byte() | 1;
                if let Some(b) = f.get_mut(at) {
                    *b ^= x;
                }
                f
            };
            if let Some(p) = self.seg.as_mut() {
                let ssn = p.next_ssn;
                p.next_ssn = ssn.wrapping_add(1);
                self.qp.receive_segment(ssn, &bytes, &mut self.mem);
            }
            return Ok(());
        }
        let bytes = if input.chance(2) {
            let n = input.below(64);
            (0..n).map(|_| input.byte()).collect()
        } else {
            // A nearly-well-formed FPDU: one octet flipped.
            let Some(mut f) = self.build_fpdu(input) else {
                return Ok(());
            };
            let at = input.below(f.len());
            let x = input.byte() | 1;
            if let Some(b) = f.get_mut(at) {
                *b ^= x;
            }
            f
        };
        self.pending.clear();
        self.qp.receive(&bytes, &mut self.mem);
        Ok(())
    }

    fn build_fpdu(&mut self, input: &mut Input<'_>) -> Option<Vec<u8>> {
        let ulpdu = self.build_ulpdu(input)?;
        let mut out = Vec::new();
        self.framer.emit(&[&ulpdu], &mut out).ok()?;
        Some(out)
    }

    /// One ULPDU (a DDP Segment): header and payload.
    fn build_ulpdu(&mut self, input: &mut Input<'_>) -> Option<Vec<u8>> {
        let room = usize::from(self.cfg.mulpdu);
        let mut hdr = [0u8; 18];
        let mut body: Vec<u8> = Vec::new();
        let payload_byte = input.byte();
        let hlen = match input.byte() % 16 {
            0..=4 => {
                // RDMA Write.
                let (stag, base, size, good) = self.target_for(input, Access::REMOTE_WRITE);
                let mut len = input.below(room.min(120) - 14 + 1);
                let to = if good && !self.evil(input, 4) {
                    len = len.min(size as usize);
                    base + input.below(size as usize - len + 1) as u64
                } else {
                    self.near_to(input, base, size)
                };
                body = (0..len)
                    .map(|i| payload_byte.wrapping_add(i as u8))
                    .collect();
                let h = DdpHeader::Tagged(TaggedHeader {
                    ddp: DdpControl::new(true, !input.chance(4)),
                    rdmap: RdmapControl::new(Opcode::Write),
                    stag,
                    to,
                });
                h.emit(&mut hdr).ok()?
            }
            5..=8 => {
                // A Send of some kind, possibly continuing an open message.
                let op = [
                    Opcode::Send,
                    Opcode::SendSe,
                    Opcode::SendInvalidate,
                    Opcode::SendSeInvalidate,
                ][input.below(4)];
                let (inval, _, _, good_inval) = self.target_for(input, Access::REMOTE_WRITE);
                let op = if op.invalidates() && !good_inval && !self.evil(input, 2) {
                    Opcode::Send
                } else {
                    op
                };
                let mut msn = self.peer_msn[0];
                let mut mo = self.open_send_mo.unwrap_or(0);
                if self.evil(input, 16) {
                    msn = msn
                        .wrapping_add(u32::from(input.byte() % 3))
                        .wrapping_sub(1);
                }
                if self.evil(input, 16) {
                    mo = mo.wrapping_add(u32::from(input.u16()));
                }
                let mut len = input.below(room.min(100) - 18 + 1);
                if self.polite && !self.evil(input, 4) {
                    // Only into a posted buffer, and only what fits.
                    let cap = self.recvs.front().map(|(_, l)| l.total_len());
                    let cap = cap?;
                    len = len.min(cap.saturating_sub(mo) as usize);
                }
                let last = !input.chance(3);
                body = (0..len)
                    .map(|i| payload_byte.wrapping_add(i as u8))
                    .collect();
                if last {
                    self.peer_msn[0] = self.peer_msn[0].wrapping_add(1);
                    self.open_send_mo = None;
                } else {
                    self.open_send_mo = Some(mo.wrapping_add(len as u32));
                }
                let h = DdpHeader::Untagged(UntaggedHeader {
                    ddp: DdpControl::new(false, last),
                    rdmap: RdmapControl::new(op),
                    inval_stag: if op.invalidates() { inval } else { 0 },
                    qn: 0,
                    msn,
                    mo,
                });
                h.emit(&mut hdr).ok()?
            }
            9..=10 => {
                // An RDMA Read Request, within IRD or not.
                if self.polite
                    && self.qp.inbound_reads() >= usize::from(self.cfg.ird)
                    && !self.evil(input, 2)
                {
                    return None;
                }
                let (src_stag, base, size, good) = self.target_for(input, Access::REMOTE_READ);
                let (src_to, rsize) = if good && !self.evil(input, 4) {
                    let off = input.below(size as usize + 1) as u64;
                    (base + off, input.below((size - off) as usize + 1) as u32)
                } else {
                    let to = self.near_to(input, base, size);
                    let n = if input.chance(8) {
                        input.u32()
                    } else {
                        input.below(size as usize + 2) as u32
                    };
                    (to, n)
                };
                let req = ReadRequest {
                    sink_stag: input.u32(),
                    sink_to: u64::from(input.u32()),
                    size: rsize,
                    src_stag,
                    src_to,
                };
                body = req.to_bytes().to_vec();
                let msn = self.peer_msn[1];
                self.peer_msn[1] = msn.wrapping_add(1);
                let h = DdpHeader::Untagged(UntaggedHeader {
                    ddp: DdpControl::new(false, true),
                    rdmap: RdmapControl::new(Opcode::ReadRequest),
                    inval_stag: 0,
                    qn: 1,
                    msn,
                    mo: 0,
                });
                h.emit(&mut hdr).ok()?
            }
            11..=13 => {
                // A Read Response to our oldest Read, mostly in order.
                if self.polite && self.qp.outstanding_reads() == 0 && !self.evil(input, 2) {
                    return None;
                }
                let r = self.peer_reads.front().copied();
                let (stag, to, left) = match r {
                    Some(r) if !self.evil(input, 8) => (
                        r.stag.0,
                        r.to.wrapping_add(u64::from(r.sent)),
                        r.len.saturating_sub(r.sent),
                    ),
                    _ => {
                        let (s, base, size) = self.target(input);
                        (s, self.near_to(input, base, size), size as u32)
                    }
                };
                let max = (room.min(120) - 14).min(left as usize + 2);
                let len = input.below(max + 1);
                let len = if self.polite && !self.evil(input, 4) {
                    len.min(left as usize)
                } else {
                    len
                };
                let last = len as u32 >= left || self.evil(input, 8);
                if let Some(r) = self.peer_reads.front_mut() {
                    r.sent = r.sent.saturating_add(len as u32);
                    if last {
                        self.peer_reads.pop_front();
                    }
                }
                body = (0..len)
                    .map(|i| payload_byte.wrapping_add(i as u8))
                    .collect();
                let h = DdpHeader::Tagged(TaggedHeader {
                    ddp: DdpControl::new(true, last),
                    rdmap: RdmapControl::new(Opcode::ReadResponse),
                    stag,
                    to,
                });
                h.emit(&mut hdr).ok()?
            }
            14 if input.chance(2) => {
                // An RFC 7306 Atomic Request on QN 1 (it shares the Read
                // Requests' MSNs and IRD): mostly 8-aligned in a target with
                // remote atomic access; else any region (aligned too, so a
                // missing access check would show), misaligned, or cut.
                let (stag, base, size, _) = self.target_for(input, Access::REMOTE_ATOMIC);
                // The first 8-aligned TO in the target, then a multiple of 8 on
                // (none in a region that ends within 7 octets of 2^64).
                let first = base.checked_next_multiple_of(8);
                let end = base.saturating_add(size);
                let to = match first {
                    Some(first) if first.saturating_add(8) <= end && !self.evil(input, 4) => {
                        first + 8 * input.below(((end - first) / 8) as usize) as u64
                    }
                    _ => self.near_to(input, base, size),
                };
                let req = AtomicRequest {
                    op: AtomicOp::from_bits(if self.evil(input, 8) {
                        input.byte()
                    } else {
                        input.byte() % 3
                    }),
                    req_id: input.u32(),
                    stag,
                    to,
                    add_swap: u64::from(input.u32()),
                    add_swap_mask: if input.chance(4) {
                        u64::from(input.u32())
                    } else {
                        0
                    },
                    compare: u64::from(input.byte()),
                    compare_mask: u64::MAX,
                };
                body = req.to_bytes().to_vec();
                if self.evil(input, 8) {
                    body.truncate(input.below(body.len() + 1));
                }
                let msn = self.peer_msn[1];
                self.peer_msn[1] = msn.wrapping_add(1);
                let h = DdpHeader::Untagged(UntaggedHeader {
                    ddp: DdpControl::new(false, true),
                    rdmap: RdmapControl::new(Opcode::AtomicRequest),
                    inval_stag: 0,
                    qn: 1,
                    msn,
                    mo: 0,
                });
                h.emit(&mut hdr).ok()?
            }
            14 => {
                // A Terminate (rarely), or a zero-length FPDU.
                if self.evil(input, 4) {
                    let t = TerminateRepr {
                        code: TermCode::RDMAP_CATASTROPHIC_STREAM,
                        flag_m: false,
                        ddp_segment_len: None,
                        ddp_header: None,
                        rdma_header: None,
                        reserved: 0,
                    };
                    let (b, n) = t.to_array();
                    body = b[..n].to_vec();
                    let msn = self.peer_msn[2];
                    self.peer_msn[2] = msn.wrapping_add(1);
                    let h = DdpHeader::Untagged(UntaggedHeader {
                        ddp: DdpControl::new(false, true),
                        rdmap: RdmapControl::new(Opcode::Terminate),
                        inval_stag: 0,
                        qn: 2,
                        msn,
                        mo: 0,
                    });
                    h.emit(&mut hdr).ok()?
                } else {
                    0
                }
            }
            _ if !self.evil(input, 1) => 0,
            _ => {
                // An untagged header on a queue that does not exist, or with a
                // reserved opcode.
                let h = DdpHeader::Untagged(UntaggedHeader {
                    ddp: DdpControl::new(false, true),
                    rdmap: RdmapControl(0x40 | (input.byte() & 0x0f)),
                    inval_stag: 0,
                    qn: u32::from(input.byte() % 5),
                    msn: self.peer_msn[0],
                    mo: 0,
                });
                h.emit(&mut hdr).ok()?
            }
        };
        let mut out = hdr[..hlen].to_vec();
        out.extend_from_slice(&body);
        Some(out)
    }
}
