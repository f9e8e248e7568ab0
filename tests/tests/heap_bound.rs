//! An invariant fuzzer that measures memory (issue 27, round two, part B):
//! a counting allocator (this test binary's `#[global_allocator]`) counts
//! the octets each thread holds on the heap, and property tests drive
//!
//! * an sctp-lite association with arbitrary peer packets (DATA chunks at
//!   arbitrary TSNs, streams, SSNs and flags, and raw chunk bytes; tag and
//!   checksum fixed up so they get past the first checks) while the
//!   application reads nothing or now and then everything;
//! * the RFC 5043 DDP stream session layer over such an association, a
//!   session open on stream 0, with arbitrary octets as DDP Segments and
//!   session control on any stream;
//! * an iWARP listener's stack over the hostile raw-TCP peer
//!   (`iwarp_tests::raw_tcp`) with arbitrary TCP payload after the
//!   handshake and the MPA exchange: in order, above gaps, anywhere in
//!   and out of the window;
//!
//! and after every step check that what the driven code holds on the heap
//! grew by at most its configured bound plus a fixed slack, and that the
//! work it did stays within a fixed amount per input: reassembly entries
//! visited per DATA chunk handed in (SCTP, amortised over the run:
//! `Association::rx_work`), range-set entries visited per TCP segment
//! (`tcp::Stats::reasm_steps`) — no walk along a chain a peer built. The
//! `sctp_heap` fuzz target runs the association version under libFuzzer.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;

/// The system allocator, counting per thread the octets allocated and not
/// yet freed (a block freed on another thread than the one that allocated
/// it skews both; the drivers here are single-threaded).
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

/// Octets this thread holds on the heap (net of what it freed), since it
/// started.
fn heap_held() -> isize {
    HELD.with(Cell::get)
}

fn count(delta: isize) {
    // `try_with`: nothing to count once the thread's locals are gone.
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are ours; the counting touches only
// a const-initialized thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by us, i.e. by `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds
        // `realloc`'s contract for `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

mod sctp {
    use super::heap_held;
    use proptest::prelude::*;
    use sctp_lite::assoc::{Association, Config, ListenOutcome, Listener};
    use sctp_lite::wire::{emit_packet, ChunkRepr, DataFlags, DataRepr, HeaderRepr, SctpPacket};

    pub const RECV_BUFFER: u32 = 64 * 1024;
    /// What an association holds beyond its charged receive buffer: event
    /// queue, SACK bookkeeping (gap blocks, duplicate TSNs), pending
    /// control chunks, and allocator rounding of collections that grew.
    pub const SLACK: isize = 48 * 1024;

    pub fn cfg(s: u8) -> Config {
        Config {
            secret: [s; 16],
            streams: 4,
            max_packet: 1200,
            recv_buffer: RECV_BUFFER,
            send_buffer: 64 * 1024,
            max_message: 16 * 1024,
            max_fragments: 64,
            max_tsn_window: 4096,
            ..Config::default()
        }
    }

    /// A DATA chunk; `flags` bits 3..0 are I, U, B and E.
    pub fn data(
        flags: u8,
        tsn: u32,
        stream: u16,
        ssn: u16,
        ppid: u32,
        payload: &[u8],
    ) -> DataRepr<'_> {
        DataRepr {
            flags: DataFlags {
                immediate: flags & 8 != 0,
                unordered: flags & 4 != 0,
                begin: flags & 2 != 0,
                end: flags & 1 != 0,
            },
            tsn,
            stream_id: stream,
            ssn,
            ppid,
            payload,
        }
    }

    /// What the hostile peer does in one step.
    #[derive(Debug, Clone)]
    pub enum Op {
        /// A DATA chunk `tsn_off` above the cumulative TSN.
        Data {
            tsn_off: u16,
            stream: u16,
            ssn: u16,
            flags: u8,
            len: u16,
        },
        /// Raw chunk bytes after a valid common header.
        Raw(Vec<u8>),
        /// Our application takes every event.
        Read,
        /// Everything we have to send goes out (and is lost).
        Transmit,
        /// Time passes (ms).
        Tick(u16),
    }

    pub fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..600, 0u16..6, 0u16..8, 0u8..16, 0u16..1200).prop_map(
                |(tsn_off, stream, ssn, flags, len)| Op::Data { tsn_off, stream, ssn, flags, len }
            ),
            1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Raw),
            1 => Just(Op::Read),
            1 => Just(Op::Transmit),
            1 => (0u16..3000).prop_map(Op::Tick),
        ]
    }

    /// An association `b` set up by the real handshake with `a`, and the
    /// TSN `b` expects next.
    pub fn pair() -> (Association, Association, u32) {
        let mut a = Association::connect(cfg(1), 1, 2, 0, 0).unwrap();
        let mut l = Listener::new(cfg(2)).unwrap();
        let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
        let n = a.poll_transmit(0, &mut buf).unwrap();
        let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
            panic!("no INIT-ACK");
        };
        a.handle_packet(0, &out[..m]);
        let n = a.poll_transmit(0, &mut buf).unwrap();
        let ListenOutcome::Accept(b) = l.handle_packet(0, &buf[..n], &mut out) else {
            panic!("no association");
        };
        let mut b = *b;
        while let Some(n) = b.poll_transmit(0, &mut out) {
            a.handle_packet(0, &out[..n]); // COOKIE-ACK
        }
        // One message from a shows its TSN; b takes it.
        a.send(0, 0, false, b"x").unwrap();
        let mut tsn = None;
        while let Some(n) = a.poll_transmit(0, &mut buf) {
            let p = SctpPacket::new_checked(&buf[..n]).unwrap();
            for c in p.chunks() {
                if let Ok(ChunkRepr::Data(d)) = ChunkRepr::parse(&c.unwrap()) {
                    tsn = Some(d.tsn);
                }
            }
            b.handle_packet(0, &buf[..n]);
        }
        while b.poll_event().is_some() {}
        (a, b, tsn.unwrap().wrapping_add(1))
    }

    /// Run `ops` against `b`; after each, what `b` holds on the heap grew
    /// by at most its receive buffer plus `SLACK`.
    pub fn drive(ops: &[Op]) -> Result<(), TestCaseError> {
        let (_a, mut b, base) = pair();
        let (mut pkt, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
        // DATA chunks handed in (a raw op may carry one per 16 octets),
        // and the association's reassembly work before the first.
        let (mut chunks, work0) = (0u64, b.rx_work());
        let payload = vec![0xa5u8; 1200];
        let h = HeaderRepr {
            src_port: b.peer_port(),
            dst_port: b.local_port(),
            verification_tag: b.local_tag(),
        };
        let mut now = 0u64;
        let start = heap_held();
        for op in ops {
            match op {
                &Op::Data {
                    tsn_off,
                    stream,
                    ssn,
                    flags,
                    len,
                } => {
                    let tsn = base.wrapping_add(u32::from(tsn_off));
                    let d = data(flags, tsn, stream, ssn, 0, &payload[..usize::from(len)]);
                    if let Ok(n) = emit_packet(&h, &[ChunkRepr::Data(d)], &mut pkt) {
                        chunks += 1;
                        b.handle_packet(now, &pkt[..n]);
                    }
                }
                Op::Raw(bytes) => {
                    chunks += bytes.len() as u64 / 16 + 1;
                    let n = 12 + bytes.len();
                    pkt[12..n].copy_from_slice(bytes);
                    let mut p = SctpPacket::new_unchecked(&mut pkt[..n]);
                    p.set_src_port(h.src_port);
                    p.set_dst_port(h.dst_port);
                    p.set_verification_tag(h.verification_tag);
                    p.fill_checksum();
                    b.handle_packet(now, &pkt[..n]);
                }
                Op::Read => while b.poll_event().is_some() {},
                Op::Transmit => while b.poll_transmit(now, &mut out).is_some() {},
                &Op::Tick(ms) => {
                    now += u64::from(ms) * 1_000_000;
                    if b.poll_timeout().is_some_and(|t| t <= now) {
                        b.handle_timeout(now);
                    }
                }
            }
            let grew = heap_held() - start;
            prop_assert!(
                b.recv_buffered() <= RECV_BUFFER as usize,
                "charged {} > {}",
                b.recv_buffered(),
                RECV_BUFFER
            );
            prop_assert!(
                grew <= RECV_BUFFER as isize + SLACK,
                "the association grew by {grew} octets (charged {}), more than {} + {SLACK}",
                b.recv_buffered(),
                RECV_BUFFER
            );
            let work = b.rx_work() - work0;
            prop_assert!(
                work <= WORK_PER_CHUNK * chunks,
                "{work} reassembly entries visited for {chunks} chunks handed in"
            );
        }
        Ok(())
    }

    /// Reassembly entries an association may visit per DATA chunk handed
    /// in, amortised: a few look-ups to join a chunk to the runs beside it
    /// and check them, one visit to deliver or prune it
    /// (`sctp_lite::assoc` hostile tests see at most 18).
    pub const WORK_PER_CHUNK: u64 = 24;
}

/// The DDP stream session layer (RFC 5043) over such an association: a
/// session the peer opened and we accepted on stream 0, then DATA chunks
/// carrying arbitrary octets as DDP Segments (PPID 16) or session control
/// (PPID 17) on any stream, the application reading now and then. The
/// heap may grow by the association's receive buffer, what the layer keeps
/// for the ULP (`set_max_held`) and the slack.
mod ddp {
    use super::heap_held;
    use super::sctp::{cfg, data, RECV_BUFFER, SLACK};
    use ddp_sctp::{DdpAssociation, DdpEvent};
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;
    use sctp_lite::assoc::ListenOutcome;
    use sctp_lite::wire::{emit_packet, ChunkRepr, HeaderRepr, SctpPacket};

    /// What the layer may keep for the ULP.
    pub const MAX_HELD: usize = 64 * 1024;

    #[derive(Debug, Clone)]
    pub enum Op {
        Data {
            tsn_off: u16,
            stream: u16,
            ssn: u16,
            flags: u8,
            session: bool,
            bytes: Vec<u8>,
        },
        Read,
        Transmit,
        Tick(u16),
    }

    pub fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u16..600, 0u16..3, 0u16..8, 0u8..16, any::<bool>(),
                  proptest::collection::vec(any::<u8>(), 0..1100)).prop_map(
                |(tsn_off, stream, ssn, flags, session, bytes)| Op::Data {
                    tsn_off, stream, ssn, flags, session, bytes
                }
            ),
            1 => Just(Op::Read),
            1 => Just(Op::Transmit),
            1 => (0u16..3000).prop_map(Op::Tick),
        ]
    }

    /// Our end `d` of a DDP association the peer `p` opened, with a session
    /// on stream 0 that `p` initiated and `d` accepted, and the TSN `d`
    /// expects next from `p`.
    fn pair() -> Result<(DdpAssociation, DdpAssociation, u32), TestCaseError> {
        let fail = |w: &str| TestCaseError::fail(w.to_string());
        let mut p = DdpAssociation::connect(cfg(1), 1, 2, 0, 0).map_err(fail)?;
        let mut l = ddp_sctp::listener(cfg(2)).map_err(fail)?;
        let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
        let n = p
            .poll_transmit(0, &mut buf)
            .ok_or_else(|| fail("no INIT"))?;
        let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
            return Err(fail("no INIT-ACK"));
        };
        p.handle_packet(0, &out[..m]);
        let n = p
            .poll_transmit(0, &mut buf)
            .ok_or_else(|| fail("no COOKIE-ECHO"))?;
        let ListenOutcome::Accept(b) = l.handle_packet(0, &buf[..n], &mut out) else {
            return Err(fail("no association"));
        };
        let mut d = DdpAssociation::wrap(*b, 1200);
        let mut next_tsn = None;
        let mut initiated = false;
        for _ in 0..8 {
            while let Some(n) = d.poll_transmit(0, &mut out) {
                p.handle_packet(0, &out[..n]);
            }
            while let Some(e) = p.poll_event() {
                let _ = e;
            }
            if !initiated && p.initiate(0, b"").is_ok() {
                initiated = true;
            }
            while let Some(n) = p.poll_transmit(0, &mut buf) {
                if let Ok(pk) = SctpPacket::new_checked(&buf[..n]) {
                    for c in pk.chunks().flatten() {
                        if let Ok(ChunkRepr::Data(x)) = ChunkRepr::parse(&c) {
                            next_tsn = Some(x.tsn.wrapping_add(1));
                        }
                    }
                }
                d.handle_packet(0, &buf[..n]);
            }
            while let Some(e) = d.poll_event() {
                if let DdpEvent::SessionRequested { stream, .. } = e {
                    d.accept(stream, b"")
                        .map_err(|e| fail(&format!("accept: {e:?}")))?;
                }
            }
        }
        let tsn = next_tsn.ok_or_else(|| fail("the peer sent no DATA"))?;
        Ok((p, d, tsn))
    }

    pub fn drive(ops: &[Op]) -> Result<(), TestCaseError> {
        let (_p, mut d, base) = pair()?;
        prop_assert!(
            d.session_state(0) == Some(ddp_sctp::SessionState::Established),
            "no session on stream 0: {:?}",
            d.session_state(0)
        );
        d.set_max_held(MAX_HELD);
        let (mut chunks, work0) = (0u64, d.sctp().rx_work());
        let h = HeaderRepr {
            src_port: d.sctp().peer_port(),
            dst_port: d.sctp().local_port(),
            verification_tag: d.sctp().local_tag(),
        };
        let (mut pkt, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
        let mut now = 0u64;
        let start = heap_held();
        for op in ops {
            match op {
                Op::Data {
                    tsn_off,
                    stream,
                    ssn,
                    flags,
                    session,
                    bytes,
                } => {
                    let tsn = base.wrapping_add(u32::from(*tsn_off));
                    let ppid = if *session { 17 } else { 16 };
                    let c = data(*flags, tsn, *stream, *ssn, ppid, bytes);
                    if let Ok(n) = emit_packet(&h, &[ChunkRepr::Data(c)], &mut pkt) {
                        chunks += 1;
                        d.handle_packet(now, &pkt[..n]);
                    }
                }
                Op::Read => while d.poll_event().is_some() {},
                Op::Transmit => while d.poll_transmit(now, &mut out).is_some() {},
                &Op::Tick(ms) => {
                    now += u64::from(ms) * 1_000_000;
                    if d.poll_timeout().is_some_and(|t| t <= now) {
                        d.handle_timeout(now);
                    }
                }
            }
            let grew = heap_held() - start;
            prop_assert!(d.held() <= MAX_HELD, "held {} > {MAX_HELD}", d.held());
            prop_assert!(
                grew <= RECV_BUFFER as isize + MAX_HELD as isize + SLACK,
                "the DDP association grew by {grew} octets (held {}, SCTP charged {})",
                d.held(),
                d.sctp().recv_buffered()
            );
            let work = d.sctp().rx_work() - work0;
            prop_assert!(
                work <= super::sctp::WORK_PER_CHUNK * chunks,
                "{work} reassembly entries visited for {chunks} chunks handed in"
            );
        }
        Ok(())
    }
}

mod listener {
    use super::heap_held;
    use iwarp_control::MpaConfig;
    use iwarp_datapath::over_tcp::CmEvent;
    use iwarp_datapath::stack::{Command, Output, Stack, StackConfig, Transport, Ulp};
    use iwarp_datapath::StreamParams;
    use iwarp_proto::mem::MemoryTable;
    use iwarp_tests::raw_tcp::RawPeer;
    use proptest::prelude::*;
    use tcp_lite::iface::IfaceConfig;
    use tcp_lite::wire::{EthernetAddress, Ipv4Address};

    const IP_A: Ipv4Address = Ipv4Address::new(10, 7, 0, 1);
    const IP_B: Ipv4Address = Ipv4Address::new(10, 7, 0, 2);
    const PORT: u16 = 5003;
    const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";
    /// `StackConfig::max_held_per_conn` here.
    pub const PER_CONN: usize = 32 * 1024;
    /// `tcp::Config::rcv_buf` here: the most one connection's out-of-order
    /// buffer takes, even from one segment at the window's far end (the
    /// buffer spans the gap).
    pub const WINDOW: usize = 64 * 1024;
    /// Connections the peer opens.
    pub const CONNS: usize = 3;
    /// The stack's own growth beyond what connections hold for peers:
    /// frames and segments in flight, the Terminate, events, timers.
    pub const SLACK: isize = 64 * 1024;

    /// What the hostile peer sends in one step on connection `conn`.
    #[derive(Debug, Clone)]
    pub enum Op {
        /// `data` at `offset` octets past our next sequence number
        /// (0: in order).
        Seg {
            conn: usize,
            offset: u32,
            data: Vec<u8>,
        },
        /// `len` octets of one value at `offset` (bulk, cheap to make).
        Fill {
            conn: usize,
            offset: u32,
            len: u16,
            byte: u8,
        },
        /// Steps of 100 µs pass.
        Wait(u16),
    }

    pub fn op() -> impl Strategy<Value = Op> {
        let offset = prop_oneof![
            1 => Just(0u32),
            6 => 1u32..(1 << 20),
            1 => any::<u32>(),
        ];
        prop_oneof![
            2 => (0usize..CONNS, offset.clone(), proptest::collection::vec(any::<u8>(), 0..64))
                .prop_map(|(conn, offset, data)| Op::Seg { conn, offset, data }),
            8 => (0usize..CONNS, offset, 1u16..1460, any::<u8>())
                .prop_map(|(conn, offset, len, byte)| Op::Fill { conn, offset, len, byte }),
            1 => (1u16..2000).prop_map(Op::Wait),
        ]
    }

    /// A listening stack with a 64 KiB per-connection budget, and three
    /// connections from the hostile peer through the MPA exchange.
    pub fn setup() -> RawPeer {
        let mut c = StackConfig::new(IfaceConfig::new(
            EthernetAddress([0x02, 0, 0, 0, 0, 1]),
            IP_A,
            24,
        ));
        c.max_held_per_conn = PER_CONN;
        c.max_held_total = 2 * PER_CONN;
        c.tcp.rcv_buf = WINDOW as u32;
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mut stack = Stack::new(c, mem);
        iwarp_datapath::runtime::Engine::handle_command(
            &mut stack,
            Command::Listen {
                transport: Transport::Tcp,
                port: PORT,
                ulp: Ulp::Iwarp {
                    mpa: MpaConfig::default(),
                    params: StreamParams {
                        pd,
                        emss: 1460,
                        sq_depth: 16,
                        rq_depth: 16,
                    },
                    manual: false,
                    cq: None,
                    srq: None,
                },
            },
            0,
        );
        let mut p = RawPeer::new(stack, IP_A, PORT, IP_B, 2, 100_000);
        for k in 0..CONNS as u16 {
            p.open(41_000 + k);
            p.run(if k == 0 { 10 } else { 1 });
        }
        p.run(10);
        for i in 0..CONNS {
            p.send_at(i, 0, REQUEST);
        }
        p.run(10);
        let up = p
            .outputs
            .iter()
            .filter(|o| matches!(o, Output::Cm(_, CmEvent::Established(_))))
            .count();
        assert_eq!(up, CONNS);
        p.outputs = Vec::new();
        p
    }

    /// Run `ops`; after each step the stack grew by at most a window per
    /// connection (what a connection holds before the budget aborts it:
    /// one segment far out in the window allocates the gap up to it) and
    /// `SLACK`, and what it reports holding agrees.
    pub fn drive(ops: &[Op]) -> Result<(), TestCaseError> {
        let mut p = setup();
        let fill = vec![0u8; 1460];
        let start = heap_held();
        // Segments handed in, and the range-set work before the first.
        let (mut segments, work0) = (0u64, p.stack.tcp_totals().reasm_steps);
        for op in ops {
            match op {
                Op::Seg { conn, offset, data } => {
                    segments += 1;
                    p.send_at(*conn, *offset, data)
                }
                &Op::Fill {
                    conn,
                    offset,
                    len,
                    byte,
                } => {
                    segments += 1;
                    let mut f = fill.clone();
                    f.fill(byte);
                    p.send_at(conn, offset, &f[..usize::from(len)]);
                }
                &Op::Wait(n) => p.run(usize::from(n) - 1),
            }
            p.step();
            p.outputs.clear();
            let grew = heap_held() - start;
            let s = p.stack.stats();
            prop_assert!(
                s.held_octets as usize <= CONNS * WINDOW,
                "held {} over a window per connection",
                s.held_octets
            );
            prop_assert!(
                grew <= (CONNS * WINDOW) as isize + SLACK,
                "the stack grew by {grew} octets (held {}, {} aborts)",
                s.held_octets,
                s.budget_aborts
            );
            // Merging a segment into the held ranges visits the ranges it
            // touches, each of which it then removes: a constant per
            // segment, amortised (tcp-lite's own test sees at most 2).
            let work = p.stack.tcp_totals().reasm_steps - work0;
            prop_assert!(
                work <= 4 * segments,
                "{work} range-set entries visited for {segments} segments"
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn an_association_holds_at_most_its_receive_buffer(ops in proptest::collection::vec(sctp::op(), 1..400)) {
        sctp::drive(&ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn an_iwarp_listener_holds_at_most_its_budget(ops in proptest::collection::vec(listener::op(), 1..300)) {
        listener::drive(&ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_ddp_stream_session_holds_at_most_its_bounds(ops in proptest::collection::vec(ddp::op(), 1..300)) {
        ddp::drive(&ops)?;
    }
}

/// The bounds are not vacuous: a peer that fills the receive buffer with
/// out-of-order DATA does make the association hold most of it.
#[test]
fn the_association_measure_sees_what_is_held() {
    let (_a, mut b, base) = sctp::pair();
    let start = heap_held();
    let payload = [0u8; 1000];
    let mut pkt = vec![0u8; 2048];
    let h = sctp_lite::wire::HeaderRepr {
        src_port: b.peer_port(),
        dst_port: b.local_port(),
        verification_tag: b.local_tag(),
    };
    for k in 1..200u32 {
        let d = sctp_lite::wire::DataRepr {
            flags: sctp_lite::wire::DataFlags {
                begin: true,
                end: true,
                ..Default::default()
            },
            tsn: base.wrapping_add(k),
            stream_id: 1,
            ssn: k as u16,
            ppid: 0,
            payload: &payload,
        };
        let n = sctp_lite::wire::emit_packet(&h, &[sctp_lite::wire::ChunkRepr::Data(d)], &mut pkt)
            .unwrap();
        b.handle_packet(0, &pkt[..n]);
    }
    let grew = heap_held() - start;
    assert!(
        b.recv_buffered() > (sctp::RECV_BUFFER / 2) as usize,
        "charged {} grew {grew} {:?}",
        b.recv_buffered(),
        b.stats()
    );
    assert!(grew > (sctp::RECV_BUFFER / 2) as isize, "grew {grew}");
}
