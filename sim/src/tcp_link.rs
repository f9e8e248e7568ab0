//! The same iWARP engine over tcp-lite TCP and a faulty in-memory link:
//! seeded loss, reordering, duplication, corruption and delay, no privileges
//! needed. Segments cross the link as encoded TCP/IP octets, so corruption is
//! caught (or not) by the real checksum code.

use iwarp_control::MpaConfig;
use iwarp_datapath::over_tcp::{encode_segment, IwarpOverTcp, Role};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{MemoryTable, PdId, STag};
use iwarp_proto::qp::{Completion, Qp, QpEvent};
use tcp_lite::tcp::{Config as TcpConfig, Connection as Tcp};
use tcp_lite::wire::{Ipv4Address, TcpPacket, TcpRepr};

use crate::Rng;

/// Link faults, in parts per thousand (per segment).
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Dropped.
    pub loss: u64,
    /// Held back by `reorder_delay_ns`.
    pub reorder: u64,
    /// Delivered twice.
    pub dup: u64,
    /// One random bit flipped.
    pub corrupt: u64,
}

/// Settings.
#[derive(Debug, Clone)]
pub struct TcpSimConfig {
    /// Seed.
    pub seed: u64,
    /// Faults.
    pub faults: Faults,
    /// One-way delay.
    pub latency_ns: u64,
    /// Extra delay of a reordered segment.
    pub reorder_delay_ns: u64,
    /// Step.
    pub tick_ns: u64,
    /// TCP settings (both sides).
    pub tcp: TcpConfig,
    /// MPA settings.
    pub initiator: MpaConfig,
    /// MPA settings.
    pub responder: MpaConfig,
}

impl Default for TcpSimConfig {
    fn default() -> Self {
        TcpSimConfig {
            seed: 1,
            faults: Faults::default(),
            latency_ns: 20_000,
            reorder_delay_ns: 100_000,
            tick_ns: 5_000,
            tcp: TcpConfig {
                rto_min: 1_000_000,
                rto_initial: 10_000_000,
                rto_max: 200_000_000,
                time_wait: 1_000_000,
                max_retransmits: 30,
                ..TcpConfig::default()
            },
            initiator: MpaConfig {
                crc: true,
                ..Default::default()
            },
            responder: MpaConfig::default(),
        }
    }
}

/// One host.
#[derive(Debug)]
pub struct TcpNode {
    /// Memory.
    pub mem: MemoryTable,
    /// PD of its QP.
    pub pd: PdId,
    /// The stack.
    pub stack: IwarpOverTcp,
    /// Completions drained so far.
    pub completions: Vec<Completion>,
    /// Events drained so far.
    pub events: Vec<QpEvent>,
}

impl TcpNode {
    /// The QP (panics before full operation: a test helper).
    pub fn qp(&mut self) -> &mut Qp {
        match self.stack.iwarp.as_mut().and_then(|c| c.qp()) {
            Some(q) => q,
            None => panic!("not in full operation"),
        }
    }
    /// Post to the send queue.
    pub fn post_send(
        &mut self,
        wr: iwarp_proto::qp::WorkRequest,
    ) -> Result<(), iwarp_proto::qp::PostError> {
        match self.stack.iwarp.as_mut().and_then(|c| c.qp()) {
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
        match self.stack.iwarp.as_mut().and_then(|c| c.qp()) {
            Some(q) => q.post_recv(&self.mem, wr_id, sge),
            None => Err(iwarp_proto::qp::PostError::NotReady(
                iwarp_proto::qp::QpState::Error,
            )),
        }
    }
    /// Whether the QP exists.
    pub fn ready(&mut self) -> bool {
        self.stack.iwarp.as_mut().and_then(|c| c.qp()).is_some()
    }
    /// Register a buffer.
    pub fn register(&mut self, buf: Vec<u8>, access: iwarp_proto::mem::Access) -> STag {
        match self.mem.register(self.pd, buf, access, 0) {
            Ok(s) => s,
            Err(e) => panic!("register: {e}"),
        }
    }
    fn drain(&mut self) {
        if let Some(q) = self.stack.iwarp.as_mut().and_then(|c| c.qp()) {
            while let Some(c) = q.poll_completion() {
                self.completions.push(c);
            }
            while let Some(e) = q.poll_event() {
                self.events.push(e);
            }
        }
    }
}

const IP_A: Ipv4Address = Ipv4Address([10, 9, 0, 1]);
const IP_B: Ipv4Address = Ipv4Address([10, 9, 0, 2]);

/// Two hosts running iWARP over tcp-lite over a faulty link.
#[derive(Debug)]
pub struct TcpSim {
    /// Initiator.
    pub a: TcpNode,
    /// Responder.
    pub b: TcpNode,
    /// Virtual time.
    pub now: u64,
    cfg: TcpSimConfig,
    rng: Rng,
    flight: Vec<(u64, bool, Vec<u8>)>,
    /// Segments dropped by the receiver's checksum check.
    pub checksum_drops: u64,
    /// Segments sent.
    pub segments: u64,
}

fn encode(r: &TcpRepr<'_>, src: Ipv4Address, dst: Ipv4Address) -> Vec<u8> {
    let mut buf = vec![0u8; r.buffer_len()];
    let mut p = TcpPacket::new_unchecked(&mut buf[..]);
    if r.emit(&mut p, &src, &dst).is_err() {
        buf.clear();
    }
    buf
}

impl TcpSim {
    /// Both hosts; `a` opens TCP then MPA.
    pub fn new(cfg: TcpSimConfig) -> Self {
        let mut mem_a = MemoryTable::new();
        let pd_a = mem_a.alloc_pd();
        let mut mem_b = MemoryTable::new();
        let pd_b = mem_b.alloc_pd();
        let mut rng = Rng::new(cfg.seed);
        let mut iss_a = rng.next_u64() as u32;
        let mut iss_b = rng.next_u64() as u32;
        if cfg.seed % 2 == 1 {
            // Odd seeds start both directions just below 2^32, so every such
            // run's sequence numbers wrap early in the transfer.
            iss_a = u32::MAX - (iss_a % 16_384);
            iss_b = u32::MAX - (iss_b % 16_384);
        }
        let params = |pd| StreamParams {
            pd,
            emss: 1460,
            sq_depth: 4096,
            rq_depth: 4096,
        };
        let mut tcp_a = Tcp::connect(cfg.tcp, 40000, 7174, iss_a);
        // The listener side: accept the first SYN (delivered by hand, lossless).
        let mut syn = Vec::new();
        tcp_a.poll_transmit(0, 1, &mut |r| syn = encode(r, IP_A, IP_B));
        let tcp_b = match TcpPacket::new_checked(&syn[..])
            .and_then(|p| TcpRepr::parse(&p, &IP_A, &IP_B).map(|r| Tcp::accept(cfg.tcp, &r, iss_b)))
        {
            Ok(t) => t,
            Err(e) => panic!("SYN did not parse: {e}"),
        };
        let a = TcpNode {
            mem: mem_a,
            pd: pd_a,
            stack: IwarpOverTcp::new(tcp_a, Role::Initiator, cfg.initiator.clone(), params(pd_a)),
            completions: Vec::new(),
            events: Vec::new(),
        };
        let b = TcpNode {
            mem: mem_b,
            pd: pd_b,
            stack: IwarpOverTcp::new(tcp_b, Role::Responder, cfg.responder.clone(), params(pd_b)),
            completions: Vec::new(),
            events: Vec::new(),
        };
        TcpSim {
            a,
            b,
            now: 0,
            rng,
            cfg,
            flight: Vec::new(),
            checksum_drops: 0,
            segments: 0,
        }
    }

    /// One tick.
    pub fn step(&mut self) {
        self.now += self.cfg.tick_ns;
        let now = self.now;
        for from_a in [true, false] {
            let (node, src, dst) = if from_a {
                (&mut self.a, IP_A, IP_B)
            } else {
                (&mut self.b, IP_B, IP_A)
            };
            let mut out = Vec::new();
            node.stack.poll(now, &node.mem, 64, &mut |r, fill| {
                out.push(encode_segment(r, fill, &src, &dst).unwrap_or_default())
            });
            for mut seg in out {
                self.segments += 1;
                let f = self.cfg.faults;
                if self.rng.chance(f.loss, 1000) {
                    continue;
                }
                if self.rng.chance(f.corrupt, 1000) && !seg.is_empty() {
                    let bit = self.rng.range(0, seg.len() as u64 * 8 - 1);
                    seg[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
                let delay = if self.rng.chance(f.reorder, 1000) {
                    self.cfg.reorder_delay_ns
                } else {
                    0
                };
                if self.rng.chance(f.dup, 1000) {
                    self.flight.push((
                        now + self.cfg.latency_ns + delay + self.cfg.tick_ns,
                        from_a,
                        seg.clone(),
                    ));
                }
                self.flight
                    .push((now + self.cfg.latency_ns + delay, from_a, seg));
            }
        }
        let mut due = Vec::new();
        self.flight.retain(|x| {
            if x.0 <= now {
                due.push(x.clone());
                false
            } else {
                true
            }
        });
        due.sort_by_key(|x| x.0);
        for (_, from_a, seg) in due {
            let (src, dst) = if from_a { (IP_A, IP_B) } else { (IP_B, IP_A) };
            let parsed = TcpPacket::new_checked(&seg[..])
                .and_then(|p| TcpRepr::parse(&p, &src, &dst).map(|r| (r.seq_number, r)));
            let node = if from_a { &mut self.b } else { &mut self.a };
            match &parsed {
                Ok((_, r)) => node.stack.handle_segment(r, now, &mut node.mem),
                Err(_) => self.checksum_drops += 1,
            }
        }
        self.a.drain();
        self.b.drain();
    }

    /// Step until `done` or the step budget runs out; true if `done`.
    pub fn run_until(&mut self, max_steps: u64, mut done: impl FnMut(&mut TcpSim) -> bool) -> bool {
        for _ in 0..max_steps {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }
}
