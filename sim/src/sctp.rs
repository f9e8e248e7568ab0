//! One scripted RDMAP session over DDP/SCTP (RFC 5043) in virtual time,
//! every transfer checked, written as Ethernet/IPv4 (protocol 132) frames:
//! `iwarp-sim pcap --transport sctp`.
//!
//! Two `DdpAssociation`s (A connects, B listens) on a lossless link with a
//! fixed one-way delay; one `SctpQp` each on DDP stream 0 after a DDP Stream
//! Session Initiate/Accept (PPID 17). A runs RDMA Write, Send, Send with
//! SE, Send with Invalidate, Send with SE and Invalidate and RDMA Read (Read
//! Request out, Read Response back); B then sends a Terminate (its RDMAP
//! Terminate, PPID 16, then the DDP Stream Session Terminate, PPID 17, RFC
//! 5043 §6.2); A's QP goes to error on it and A's Session Terminate follows
//! unless B's has already ended the session there; the association shuts
//! down (SHUTDOWN, -ACK, -COMPLETE). The capture covers every RDMAP
//! opcode. `seed` picks the tags and initial TSNs (the SCTP nonce) and the
//! data patterns: same seed, same capture.

use std::collections::BTreeMap;
use std::io::Write;

use ddp_sctp::{listener, DdpAssociation, DdpEvent, SegmentChunk};
use iwarp_datapath::over_sctp::qp::{AssocSink, SctpQp};
use iwarp_proto::mem::{Access, MemoryTable, PdId, STag};
use iwarp_proto::qp::{Completion, QpConfig, QpEvent, Sge, WcStatus, WorkRequest};
use iwarp_proto::wire::ddp::{DdpHeader, Opcode};
use iwarp_proto::wire::TermCode;
use iwarp_testlink::{DatagramLink, Dir, LinkConfig};
use sctp_lite::assoc::{Config, ListenOutcome, Listener};
use sctp_lite::wire::{ChunkRepr, SctpPacket};
use tcp_lite::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};

use crate::pcap::PcapWriter;

const MS: u64 = 1_000_000;
/// 2026-01-01T00:00:00Z, so the capture has plausible timestamps.
const EPOCH: u64 = 1_767_225_600 * 1_000 * MS;

/// MAC and IPv4 address of one simulated node.
#[derive(Debug, Clone, Copy)]
struct Node {
    mac: [u8; 6],
    ip: [u8; 4],
}
const A: Node = Node {
    mac: [0x02, 0, 0, 0, 0x5c, 0x0a],
    ip: [10, 0, 14, 1],
};
const B: Node = Node {
    mac: [0x02, 0, 0, 0, 0x5c, 0x0b],
    ip: [10, 0, 14, 2],
};

/// What the session did, for the summary and the tests.
#[derive(Debug, Clone, Default)]
pub struct SctpReport {
    /// Operations that completed with their data checked.
    pub ops: usize,
    /// Octets compared with what was sent.
    pub bytes_verified: usize,
    /// SCTP packets in the capture.
    pub packets: usize,
    /// RDMAP opcodes seen in the DDP Segments (PPID 16) of the capture, by
    /// name, with their counts.
    pub opcodes: BTreeMap<&'static str, usize>,
    /// DATA chunks with PPID 16 (DDP Segments).
    pub ppid16: usize,
    /// DATA chunks with PPID 17 (DDP Stream Session Control).
    pub ppid17: usize,
    /// The Terminate A received.
    pub terminate: String,
}

/// The capture: SCTP packets with time and direction.
#[derive(Debug, Default)]
pub struct SctpCapture {
    packets: Vec<(u64, bool, Vec<u8>)>,
}

impl SctpCapture {
    /// The SCTP packets (time in ns, A to B, bytes).
    pub fn packets(&self) -> &[(u64, bool, Vec<u8>)] {
        &self.packets
    }

    /// Write as a pcap of Ethernet II / IPv4 frames (protocol 132).
    pub fn write_pcap<W: Write>(&self, out: W) -> std::io::Result<()> {
        let mut w = PcapWriter::new(out)?;
        for (i, (now, a_to_b, p)) in self.packets.iter().enumerate() {
            let (from, to) = if *a_to_b { (A, B) } else { (B, A) };
            w.write_frame(EPOCH + now, &frame(from, to, i as u16, p)?)?;
        }
        w.flush()
    }
}

/// Ethernet II and a 20-octet IPv4 header (DF, TTL 64) around one SCTP packet.
fn frame(from: Node, to: Node, ident: u16, sctp: &[u8]) -> std::io::Result<Vec<u8>> {
    let bad = |e| std::io::Error::other(format!("cannot frame an SCTP packet: {e:?}"));
    let mut f = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + sctp.len()];
    EthernetRepr {
        src_addr: EthernetAddress(from.mac),
        dst_addr: EthernetAddress(to.mac),
        ethertype: EtherType::IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]))
    .map_err(bad)?;
    Ipv4Repr {
        src_addr: Ipv4Address(from.ip),
        dst_addr: Ipv4Address(to.ip),
        protocol: IpProtocol::SCTP,
        payload_len: sctp.len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        identification: ident,
        dont_frag: true,
        more_frags: false,
        fragment_offset: 0,
        options_len: 0,
    }
    .emit(&mut Ipv4Packet::new_unchecked(
        &mut f[ETHERNET_HEADER_LEN..],
    ))
    .map_err(bad)?;
    f[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN..].copy_from_slice(sctp);
    Ok(f)
}

fn sctp_cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        streams: 1,
        max_packet: 1480,
        ..Config::default()
    }
}

fn qp_cfg(pd: PdId) -> QpConfig {
    QpConfig {
        pd,
        ird: 2,
        ord: 2,
        mulpdu: 0, // from the association
        crc: false,
        markers_tx: false,
        markers_rx: false,
        sq_depth: 16,
        rq_depth: 16,
    }
}

struct Side {
    assoc: Option<DdpAssociation>,
    mem: MemoryTable,
    pd: PdId,
    qp: Option<SctpQp>,
    events: Vec<DdpEvent>,
    comps: Vec<Completion>,
    qp_events: Vec<QpEvent>,
}

impl Side {
    fn new(assoc: Option<DdpAssociation>) -> Side {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        Side {
            assoc,
            mem,
            pd,
            qp: None,
            events: Vec::new(),
            comps: Vec::new(),
            qp_events: Vec::new(),
        }
    }

    fn reg(&mut self, buf: Vec<u8>, access: Access) -> Result<STag, String> {
        self.mem
            .register(self.pd, buf, access, 0)
            .map_err(|e| format!("register: {e:?}"))
    }

    fn post(&mut self, wr: WorkRequest) -> Result<(), String> {
        let q = self.qp.as_mut().ok_or("no QP")?;
        q.qp()
            .post_send(&self.mem, wr)
            .map_err(|e| format!("post_send: {e}"))
    }

    fn turn(&mut self, now: u64) -> Vec<Vec<u8>> {
        let mut pkts = Vec::new();
        let Some(a) = self.assoc.as_mut() else {
            return pkts;
        };
        if let Some(q) = self.qp.as_mut() {
            q.transmit(&self.mem, &mut AssocSink { assoc: a, now });
        }
        while let Some(e) = a.poll_event() {
            let used = match self.qp.as_mut() {
                Some(q) => q.handle_event(&e, &mut self.mem),
                None => false,
            };
            if !used || matches!(e, DdpEvent::SessionEnded { .. } | DdpEvent::Closed(_)) {
                self.events.push(e);
            }
        }
        if let Some(q) = self.qp.as_mut() {
            q.transmit(&self.mem, &mut AssocSink { assoc: a, now });
            while let Some(c) = q.qp().poll_completion() {
                self.comps.push(c);
            }
            while let Some(e) = q.qp().poll_event() {
                self.qp_events.push(e);
            }
        }
        let mut buf = vec![0u8; 2048];
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            pkts.push(buf[..n].to_vec());
        }
        pkts
    }
}

struct World {
    now: u64,
    /// Lossless, `MS` one way.
    link: DatagramLink,
    a: Side,
    b: Side,
    l: Listener,
    cap: SctpCapture,
}

impl World {
    fn step(&mut self) -> bool {
        for p in self.a.turn(self.now) {
            self.send(true, p);
        }
        for p in self.b.turn(self.now) {
            self.send(false, p);
        }
        let next = [
            self.link.next_arrival(),
            self.a.assoc.as_ref().and_then(|a| a.poll_timeout()),
            self.b.assoc.as_ref().and_then(|b| b.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        while let Some((dir, p)) = self.link.pop_due(self.now) {
            if dir == Dir::BtoA {
                if let Some(a) = self.a.assoc.as_mut() {
                    a.handle_packet(self.now, &p);
                }
            } else if let Some(b) = self.b.assoc.as_mut() {
                b.handle_packet(self.now, &p);
            } else {
                let mut out = vec![0u8; 2048];
                match self.l.handle_packet(self.now, &p, &mut out) {
                    ListenOutcome::Reply(n) => {
                        let r = out[..n].to_vec();
                        self.send(false, r);
                    }
                    ListenOutcome::Accept(s) => {
                        self.b.assoc = Some(DdpAssociation::wrap(*s, sctp_cfg(2).max_packet))
                    }
                    ListenOutcome::Drop => {}
                }
            }
        }
        for s in [&mut self.a, &mut self.b] {
            if let Some(x) = s.assoc.as_mut() {
                if x.poll_timeout().is_some_and(|t| t <= self.now) {
                    x.handle_timeout(self.now);
                }
            }
        }
        true
    }

    fn send(&mut self, to_b: bool, p: Vec<u8>) {
        self.cap.packets.push((self.now, to_b, p.clone()));
        self.link.send(self.now, Dir::to_b(to_b), p);
    }

    fn run_until(&mut self, what: &str, done: impl Fn(&World) -> bool) -> Result<(), String> {
        for _ in 0..200_000 {
            if done(self) {
                return Ok(());
            }
            let more = self.step();
            if !more && !done(self) {
                return Err(format!("stalled waiting for {what}"));
            }
        }
        Err(format!("no {what} after 200000 steps"))
    }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt))
        .collect()
}

/// Run the session; the capture and what was checked.
pub fn rdmap_session(seed: u64) -> Result<(SctpCapture, SctpReport), String> {
    let a = DdpAssociation::connect(sctp_cfg(1), 4000, 5000, 0, seed)?;
    let mut w = World {
        now: 0,
        link: DatagramLink::new(LinkConfig::clean(MS)),
        a: Side::new(Some(a)),
        b: Side::new(None),
        l: listener(sctp_cfg(2))?,
        cap: SctpCapture::default(),
    };
    let mut rep = SctpReport::default();
    w.run_until("association", |w| {
        w.a.events.contains(&DdpEvent::Connected) && w.b.events.contains(&DdpEvent::Connected)
    })?;
    let mp = w.a.assoc.as_ref().ok_or("no association")?.mulpdu();
    w.a.qp = Some(SctpQp::new(qp_cfg(w.a.pd), None, 0, mp, false));
    w.a.assoc
        .as_mut()
        .ok_or("no association")?
        .initiate(0, b"iwarp-sim")
        .map_err(|e| format!("initiate: {e:?}"))?;
    w.run_until("session request", |w| {
        w.b.events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionRequested { .. }))
    })?;
    let b = w.b.assoc.as_mut().ok_or("no association at B")?;
    b.accept(0, b"iwarp-sim")
        .map_err(|e| format!("accept: {e:?}"))?;
    let mp = b.mulpdu();
    w.b.qp = Some(SctpQp::new(qp_cfg(w.b.pd), None, 0, mp, true));
    w.run_until("session accept", |w| {
        w.a.events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionAccepted { .. }))
    })?;

    // Buffers; the patterns depend on the seed.
    let salt = seed as u8;
    const WLEN: usize = 4000;
    const SLEN: usize = 700;
    const RLEN: usize = 3000;
    let wsrc = w.a.reg(pattern(WLEN, salt), Access::LOCAL_READ)?;
    let wdst = w.b.reg(vec![0; WLEN], Access::ALL)?;
    let ssrc =
        w.a.reg(pattern(4 * SLEN, salt ^ 0x55), Access::LOCAL_READ)?;
    let rbuf = w.b.reg(vec![0; 4 * SLEN], Access::LOCAL_WRITE)?;
    let rsrc = w.b.reg(pattern(RLEN, salt ^ 0xaa), Access::ALL)?;
    let rsink = w.a.reg(vec![0; RLEN], Access::LOCAL_WRITE)?;
    let inv1 = w.b.reg(vec![0; 16], Access::ALL)?;
    let inv2 = w.b.reg(vec![0; 16], Access::ALL)?;
    {
        let q = w.b.qp.as_mut().ok_or("no QP at B")?;
        for k in 0..4u32 {
            let s = Sge {
                stag: rbuf,
                to: u64::from(k) * SLEN as u64,
                len: SLEN as u32,
            };
            q.qp()
                .post_recv(&w.b.mem, u64::from(k), s)
                .map_err(|e| format!("post_recv: {e}"))?;
        }
    }
    w.a.post(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: Sge {
            stag: wsrc,
            to: 0,
            len: WLEN as u32,
        }
        .into(),
        remote_stag: wdst,
        remote_to: 0,
    })?;
    for (k, (se, inv)) in [
        (false, None),
        (true, None),
        (false, Some(inv1)),
        (true, Some(inv2)),
    ]
    .into_iter()
    .enumerate()
    {
        w.a.post(WorkRequest::Send {
            wr_id: 2 + k as u64,
            signaled: true,
            local: Sge {
                stag: ssrc,
                to: (k * SLEN) as u64,
                len: SLEN as u32,
            }
            .into(),
            solicited: se,
            invalidate: inv,
        })?;
    }
    w.a.post(WorkRequest::Read {
        wr_id: 6,
        signaled: true,
        local: Sge {
            stag: rsink,
            to: 0,
            len: RLEN as u32,
        }
        .into(),
        remote_stag: rsrc,
        remote_to: 0,
    })?;
    w.run_until("every operation", |w| {
        w.a.comps.len() == 6 && w.b.comps.len() == 4
    })?;
    if let Some(c) =
        w.a.comps
            .iter()
            .chain(&w.b.comps)
            .find(|c| c.status != WcStatus::Success)
    {
        return Err(format!("completion failed: {c:?}"));
    }
    let snap = |s: &Side, t: STag| s.mem.snapshot(t).ok_or("region gone");
    let checks = [
        (snap(&w.b, wdst)?, pattern(WLEN, salt)),
        (snap(&w.b, rbuf)?, pattern(4 * SLEN, salt ^ 0x55)),
        (snap(&w.a, rsink)?, pattern(RLEN, salt ^ 0xaa)),
    ];
    for (got, want) in &checks {
        if got != want {
            return Err("data differs from what was sent".into());
        }
        rep.bytes_verified += want.len();
    }
    let invalidated: Vec<_> = w.b.comps.iter().filter_map(|c| c.invalidated).collect();
    if invalidated != [inv1, inv2] {
        return Err(format!("invalidated STags {invalidated:?}"));
    }
    rep.ops = w.a.comps.len() + w.b.comps.len();

    // B ends the stream with an RDMAP Terminate, then the Session Terminate.
    w.b.qp
        .as_mut()
        .ok_or("no QP at B")?
        .qp()
        .terminate(TermCode::RDMAP_CATASTROPHIC_STREAM);
    let ended = |s: &Side| {
        s.events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionEnded { .. }))
    };
    w.run_until("Terminate", |w| ended(&w.a) && ended(&w.b))?;
    let t =
        w.a.qp_events
            .iter()
            .find_map(|e| match e {
                QpEvent::TerminateReceived(t) => Some(*t),
                _ => None,
            })
            .ok_or("A received no Terminate")?;
    if t.code != TermCode::RDMAP_CATASTROPHIC_STREAM {
        return Err(format!("A received {t:?}"));
    }
    rep.terminate = format!("{:?}", t.code);
    w.a.assoc.as_mut().ok_or("no association")?.shutdown(w.now);
    w.run_until("shutdown", |w| {
        let closed = |s: &Side| s.events.iter().any(|e| matches!(e, DdpEvent::Closed(_)));
        closed(&w.a) && closed(&w.b)
    })?;

    // What is on the wire, parsed by our own code.
    for (_, _, p) in &w.cap.packets {
        let p = SctpPacket::new_checked(&p[..]).map_err(|e| format!("{e:?}"))?;
        for c in p.chunks() {
            let c = c.map_err(|e| format!("{e:?}"))?;
            let Ok(ChunkRepr::Data(d)) = ChunkRepr::parse(&c) else {
                continue;
            };
            match d.ppid {
                16 => {
                    rep.ppid16 += 1;
                    let seg = SegmentChunk::parse(d.payload).map_err(|e| format!("{e:?}"))?;
                    if let Ok((h, _)) = DdpHeader::parse(seg.segment) {
                        let op = match h {
                            DdpHeader::Tagged(t) => t.rdmap.opcode(),
                            DdpHeader::Untagged(u) => u.rdmap.opcode(),
                        };
                        *rep.opcodes.entry(opcode_name(op)).or_default() += 1;
                    }
                }
                17 => rep.ppid17 += 1,
                _ => {}
            }
        }
    }
    rep.packets = w.cap.packets.len();
    Ok((w.cap, rep))
}

/// RFC 5040 §4.3 (and RFC 7306 §4) name of an opcode.
pub fn opcode_name(op: Opcode) -> &'static str {
    match op {
        Opcode::Write => "RDMA Write",
        Opcode::ReadRequest => "RDMA Read Request",
        Opcode::ReadResponse => "RDMA Read Response",
        Opcode::Send => "Send",
        Opcode::SendInvalidate => "Send with Invalidate",
        Opcode::SendSe => "Send with SE",
        Opcode::SendSeInvalidate => "Send with SE and Invalidate",
        Opcode::Terminate => "Terminate",
        Opcode::ImmediateData => "Immediate Data",
        Opcode::ImmediateDataSe => "Immediate Data with SE",
        Opcode::AtomicRequest => "Atomic Request",
        Opcode::AtomicResponse => "Atomic Response",
        Opcode::Reserved(_) => "reserved",
    }
}

/// Every RDMAP opcode of RFC 5040 §4.3 this session must show.
pub const ALL_OPCODES: [&str; 8] = [
    "RDMA Write",
    "RDMA Read Request",
    "RDMA Read Response",
    "Send",
    "Send with Invalidate",
    "Send with SE",
    "Send with SE and Invalidate",
    "Terminate",
];
