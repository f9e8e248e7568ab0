//! A deterministic two-node iWARP simulator.
//!
//! Two endpoints — `a`, the MPA initiator, and `b`, the responder — each with
//! its own memory table and [`Connection`], joined by one reliable in-memory
//! byte stream per direction. Each direction delivers its octets in pieces
//! whose sizes a seeded RNG picks, so FPDUs arrive split at arbitrary points
//! and several at once, exactly as TCP may hand them up. Time is virtual
//! (nanoseconds, advanced by a fixed tick per step); a given seed always gives
//! the same run. Optionally every transmitted segment is recorded as an
//! Ethernet/IPv4/TCP frame for a pcap that Wireshark decodes.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod pcap;
pub mod scenario;
pub mod sctp;
pub mod tcp_link;

use std::collections::VecDeque;

use iwarp_control::MpaConfig;
use iwarp_datapath::{ConnState, Connection, StreamParams};
use iwarp_proto::mem::{Access, MemoryTable, PdId, STag};
use iwarp_proto::mpa::{Deframer, UlpduSink};
use iwarp_proto::qp::{Completion, Qp, QpEvent};
use iwarp_proto::wire::DdpHeader;
use pcap::{FlowEndpoint, TcpFlowRecorder};

/// The simulators' seeded generator: the tests' SplitMix64
/// ([`iwarp_testlink::Rng`], the same sequence as
/// `iwarp_frame::SplitMix64`), with the draws the simulators need.
pub use iwarp_testlink::Rng;

/// Simulation settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// RNG seed: same seed, same run.
    pub seed: u64,
    /// Effective MSS of the simulated TCP connection.
    pub emss: u16,
    /// MPA settings of the initiator (`a`).
    pub initiator: MpaConfig,
    /// MPA settings of the responder (`b`).
    pub responder: MpaConfig,
    /// Largest piece a direction delivers at once (pieces are 1..=this, random).
    pub max_piece: usize,
    /// One-way delay.
    pub latency_ns: u64,
    /// Virtual time per step.
    pub tick_ns: u64,
    /// Queue depths.
    pub sq_depth: usize,
    /// Queue depths.
    pub rq_depth: usize,
    /// Put one FPDU per TCP segment (as deployed peers do; Wireshark needs it with markers).
    pub one_fpdu_per_segment: bool,
    /// Record frames for a pcap.
    pub capture: bool,
    /// TCP ports of `a` and `b` in the capture.
    pub ports: (u16, u16),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            emss: 1448,
            initiator: MpaConfig::default(),
            responder: MpaConfig::default(),
            max_piece: 3000,
            latency_ns: 5_000,
            tick_ns: 1_000,
            sq_depth: 4096,
            rq_depth: 4096,
            one_fpdu_per_segment: false,
            capture: false,
            ports: (40000, 7174),
        }
    }
}

/// One simulated host.
#[derive(Debug)]
pub struct Node {
    /// Its memory table.
    pub mem: MemoryTable,
    /// The protection domain its QP uses.
    pub pd: PdId,
    /// The connection.
    pub conn: Connection,
    /// Completions drained from the QP, in order.
    pub completions: Vec<Completion>,
    /// Events drained from the QP, in order.
    pub events: Vec<QpEvent>,
}

impl Node {
    /// Register a zero-filled buffer of `len` octets (zero-based TO).
    pub fn register(&mut self, len: usize, access: Access) -> STag {
        self.register_buf(vec![0; len], access, 0)
    }
    /// Register `buf` with base TO `base_to`.
    pub fn register_buf(&mut self, buf: Vec<u8>, access: Access, base_to: u64) -> STag {
        match self.mem.register(self.pd, buf, access, base_to) {
            Ok(s) => s,
            Err(e) => panic!("simulator registration failed: {e}"),
        }
    }
    /// The queue pair (panics before full operation: a test-harness helper).
    pub fn qp(&mut self) -> &mut Qp {
        let state = self.conn.state();
        match self.conn.qp() {
            Some(q) => q,
            None => panic!("connection not in full operation: {state:?}"),
        }
    }
    /// Post to the send queue.
    pub fn post_send(
        &mut self,
        wr: iwarp_proto::qp::WorkRequest,
    ) -> Result<(), iwarp_proto::qp::PostError> {
        match self.conn.qp() {
            Some(q) => q.post_send(&self.mem, wr),
            None => Err(iwarp_proto::qp::PostError::NotReady(
                iwarp_proto::qp::QpState::Error,
            )),
        }
    }
    /// Post a receive buffer.
    pub fn post_recv(
        &mut self,
        wr_id: u64,
        sge: iwarp_proto::qp::Sge,
    ) -> Result<(), iwarp_proto::qp::PostError> {
        match self.conn.qp() {
            Some(q) => q.post_recv(&self.mem, wr_id, sge),
            None => Err(iwarp_proto::qp::PostError::NotReady(
                iwarp_proto::qp::QpState::Error,
            )),
        }
    }
    fn drain(&mut self) {
        if let Some(q) = self.conn.qp() {
            while let Some(c) = q.poll_completion() {
                self.completions.push(c);
            }
            while let Some(e) = q.poll_event() {
                self.events.push(e);
            }
        }
    }
}

/// One FPDU as a wiretap saw it on the sender's side of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapFpdu {
    /// ULPDU_LENGTH.
    pub ulpdu_len: u16,
    /// Its DDP header (`None` for a zero-length or truncated ULPDU).
    pub header: Option<DdpHeader>,
    /// The first octets of an untagged FPDU's payload (up to
    /// [`TAP_BODY`]): the RDMAP body of a Read Request, an RFC 7306
    /// Atomic Request or Response, or Immediate Data.
    pub body: [u8; TAP_BODY],
    /// How many of `body` are set.
    pub body_len: usize,
}

/// Octets of an untagged payload a [`TapFpdu`] keeps: an Atomic Request.
pub const TAP_BODY: usize = iwarp_proto::wire::rdmap::ATOMIC_REQUEST_LEN;

impl TapFpdu {
    /// The payload octets kept.
    pub fn body(&self) -> &[u8] {
        &self.body[..self.body_len]
    }
}

/// A transmitted TCP segment as captured.
#[derive(Debug, Clone)]
pub struct CapturedFrame {
    /// Virtual time.
    pub ts_ns: u64,
    /// The Ethernet frame.
    pub frame: Vec<u8>,
    /// Sent by the initiator.
    pub from_a: bool,
    /// The FPDUs it carries, in order (empty for handshake, setup and control frames).
    pub fpdus: Vec<TapFpdu>,
}

#[derive(Debug, Default)]
struct TapSink {
    got: Vec<TapFpdu>,
}

impl UlpduSink for TapSink {
    fn segment_begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        let header = DdpHeader::parse(header).ok().map(|(h, _)| h);
        self.got.push(TapFpdu {
            ulpdu_len,
            header,
            body: [0; TAP_BODY],
            body_len: 0,
        });
    }
    fn segment_data(&mut self, data: &[u8]) {
        let Some(f) = self.got.last_mut() else {
            return;
        };
        if !matches!(f.header, Some(DdpHeader::Untagged(_))) {
            return;
        }
        let n = data.len().min(TAP_BODY - f.body_len);
        f.body[f.body_len..f.body_len + n].copy_from_slice(&data[..n]);
        f.body_len += n;
    }
    fn segment_end(&mut self) {}
}

#[derive(Debug, Default)]
struct Link {
    /// Segments in flight: (ready time, octets).
    flight: VecDeque<(u64, Vec<u8>)>,
    /// Octets that have arrived and wait to be handed up.
    ready: Vec<u8>,
    /// Total octets carried.
    carried: u64,
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimError {
    /// Still busy after the step budget.
    Stuck {
        /// Steps taken.
        steps: u64,
    },
}

/// The simulator.
#[derive(Debug)]
pub struct Sim {
    /// The initiator.
    pub a: Node,
    /// The responder.
    pub b: Node,
    /// Virtual time.
    pub now_ns: u64,
    cfg: SimConfig,
    rng: Rng,
    links: [Link; 2],
    flow: Option<TcpFlowRecorder>,
    frames: Vec<CapturedFrame>,
    /// Per direction (a->b, b->a): a deframer over the transmitted FPDU stream.
    taps: [Option<Deframer>; 2],
    /// TCP segments sent, both directions.
    pub segments: u64,
    /// Largest segment either side produced (must never exceed the EMSS).
    pub max_segment: usize,
}

fn node(conn: Connection, mem: MemoryTable, pd: PdId) -> Node {
    Node {
        mem,
        pd,
        conn,
        completions: Vec::new(),
        events: Vec::new(),
    }
}

impl Sim {
    /// Build both endpoints; the MPA Request is queued at `a`.
    pub fn new(cfg: SimConfig) -> Self {
        let mut mem_a = MemoryTable::new();
        let pd_a = mem_a.alloc_pd();
        let mut mem_b = MemoryTable::new();
        let pd_b = mem_b.alloc_pd();
        let params = |pd| StreamParams {
            pd,
            emss: cfg.emss,
            sq_depth: cfg.sq_depth,
            rq_depth: cfg.rq_depth,
        };
        let conn_a = match Connection::initiator(cfg.initiator.clone(), params(pd_a)) {
            Ok(c) => c,
            Err(e) => panic!("initiator config rejected: {e}"),
        };
        let conn_b = Connection::responder(cfg.responder.clone(), params(pd_b));
        let mut frames = Vec::new();
        let flow = cfg.capture.then(|| {
            let ea = FlowEndpoint {
                mac: [0x02, 0, 0, 0, 0, 0x0a],
                ip: [10, 0, 0, 1],
                port: cfg.ports.0,
            };
            let eb = FlowEndpoint {
                mac: [0x02, 0, 0, 0, 0, 0x0b],
                ip: [10, 0, 0, 2],
                port: cfg.ports.1,
            };
            let isn_a = (cfg.seed as u32).wrapping_mul(2_654_435_761);
            let isn_b = isn_a.rotate_left(13) ^ 0x5a5a_5a5a;
            let mut f = TcpFlowRecorder::new(ea, eb, isn_a, isn_b, cfg.emss);
            for (i, fr) in f.handshake().into_iter().enumerate() {
                frames.push(CapturedFrame {
                    ts_ns: 0,
                    frame: fr,
                    from_a: i != 1,
                    fpdus: Vec::new(),
                });
            }
            f
        });
        Sim {
            a: node(conn_a, mem_a, pd_a),
            b: node(conn_b, mem_b, pd_b),
            now_ns: 0,
            rng: Rng::new(cfg.seed),
            links: [Link::default(), Link::default()],
            flow,
            frames,
            taps: [None, None],
            segments: 0,
            max_segment: 0,
            cfg,
        }
    }

    /// Settings.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The simulator's RNG (for test data that must follow the seed).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Inject raw octets into the stream towards `b` (from_a) or `a`, as if the
    /// peer had sent them: how hostile-peer tests send crafted FPDUs.
    pub fn inject(&mut self, from_a: bool, bytes: &[u8]) {
        let ready = self.now_ns + self.cfg.latency_ns;
        self.record(from_a, bytes, false);
        self.links[usize::from(!from_a)]
            .flight
            .push_back((ready, bytes.to_vec()));
    }

    fn record(&mut self, from_a: bool, seg: &[u8], fpdus: bool) {
        self.segments += 1;
        let Some(f) = &mut self.flow else { return };
        let mut tapped = Vec::new();
        if fpdus {
            let dir = usize::from(!from_a);
            if self.taps[dir].is_none() {
                let node = if from_a { &self.a } else { &self.b };
                if let Some(n) = node.conn.negotiated() {
                    self.taps[dir] = Some(Deframer::new(n.crc, n.markers_tx));
                }
            }
            if let Some(tap) = &mut self.taps[dir] {
                let mut sink = TapSink::default();
                let _ = tap.feed(seg, &mut sink);
                tapped = sink.got;
            }
        }
        // Split anything over the MSS (injected bytes) into several frames.
        let mut first = true;
        for chunk in seg.chunks(usize::from(f.mss()).max(1)) {
            if let Ok(fr) = f.data(from_a, chunk) {
                let fpdus = if first {
                    core::mem::take(&mut tapped)
                } else {
                    Vec::new()
                };
                first = false;
                self.frames.push(CapturedFrame {
                    ts_ns: self.now_ns,
                    frame: fr,
                    from_a,
                    fpdus,
                });
            }
        }
    }

    /// One tick: both sides transmit what they can, links deliver what is due.
    pub fn step(&mut self) {
        self.now_ns += self.cfg.tick_ns;
        let max_fpdus = if self.cfg.one_fpdu_per_segment {
            1
        } else {
            usize::MAX
        };
        let emss = self.cfg.emss as usize;
        for from_a in [true, false] {
            for _ in 0..256 {
                let mut seg = Vec::with_capacity(emss);
                let (n, setup) = {
                    let node = if from_a { &mut self.a } else { &mut self.b };
                    let setup = node.conn.pending_setup();
                    (
                        node.conn
                            .poll_transmit(&node.mem, &mut seg, emss, max_fpdus),
                        setup,
                    )
                };
                if n == 0 {
                    break;
                }
                self.max_segment = self.max_segment.max(seg.len());
                self.record(from_a, &seg, !setup);
                let ready = self.now_ns + self.cfg.latency_ns;
                let link = &mut self.links[usize::from(!from_a)];
                link.carried += seg.len() as u64;
                link.flight.push_back((ready, seg));
            }
        }
        for to_b in [true, false] {
            let li = usize::from(!to_b);
            while let Some((t, _)) = self.links[li].flight.front() {
                if *t > self.now_ns {
                    break;
                }
                if let Some((_, seg)) = self.links[li].flight.pop_front() {
                    self.links[li].ready.extend_from_slice(&seg);
                }
            }
            let ready = core::mem::take(&mut self.links[li].ready);
            let mut at = 0;
            while at < ready.len() {
                let piece = self.rng.range(1, self.cfg.max_piece.max(1) as u64) as usize;
                let end = (at + piece).min(ready.len());
                let node = if to_b { &mut self.b } else { &mut self.a };
                node.conn.receive(&ready[at..end], &mut node.mem);
                at = end;
            }
        }
        self.a.drain();
        self.b.drain();
    }

    /// True when nothing is in flight and neither side has anything to send.
    pub fn idle(&self) -> bool {
        self.links
            .iter()
            .all(|l| l.flight.is_empty() && l.ready.is_empty())
            && self.a.conn.tx_idle()
            && self.b.conn.tx_idle()
    }

    /// Step until idle, at most `max_steps` steps.
    pub fn run_until_idle(&mut self, max_steps: u64) -> Result<u64, SimError> {
        for i in 0..max_steps {
            self.step();
            if self.idle() {
                return Ok(i + 1);
            }
        }
        Err(SimError::Stuck { steps: max_steps })
    }

    /// Run the MPA exchange to full operation (or failure).
    pub fn connect(&mut self) -> Result<(), SimError> {
        self.run_until_idle(10_000)?;
        Ok(())
    }

    /// Both sides in full operation?
    pub fn connected(&self) -> bool {
        matches!(self.a.conn.state(), ConnState::Rdma(_))
            && matches!(self.b.conn.state(), ConnState::Rdma(_))
    }

    /// Close the capture with FIN from each side and return its frames.
    pub fn finish_capture(&mut self) -> Vec<CapturedFrame> {
        if let Some(f) = &mut self.flow {
            let t = self.now_ns + self.cfg.tick_ns;
            for (fr, from_a) in [
                (f.fin(true), true),
                (f.fin(false), false),
                (f.ack(true), true),
            ] {
                self.frames.push(CapturedFrame {
                    ts_ns: t,
                    frame: fr,
                    from_a,
                    fpdus: Vec::new(),
                });
            }
        }
        core::mem::take(&mut self.frames)
    }
}
