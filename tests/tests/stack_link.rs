//! Two host stacks (Ethernet, ARP, IPv4, TCP, byte streams and iWARP) in
//! pinned poll loops, joined by the simulated link backend
//! (`link::FaultyDevice`): seeded loss, reordering, duplication,
//! corruption and delay. No privileges needed.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use iwarp_control::{MpaConfig, PeerRequest, SetupFailure};
use iwarp_datapath::link::{Faults, FaultyDevice, MemDevice};
use iwarp_datapath::over_tcp::{CmEvent, HostCommand, HostOutput};
use iwarp_datapath::runtime::FrameDevice;
use iwarp_datapath::runtime::{spawn, LoopHandle, Mode};
use iwarp_datapath::stack::{
    flags, Command, Output, SendError, SockId, Stack, StackConfig, StreamShared, Transport, Ulp,
    WaitError,
};
use iwarp_datapath::ConnError;
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{Access, MemoryTable, STag};
use iwarp_proto::qp::{QpEvent, Sge, WcOpcode, WcStatus, WorkRequest};
use iwarp_proto::wire::TermCode;
use std::sync::{Arc, Mutex};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const IP_A: Ipv4Address = Ipv4Address::new(10, 3, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 3, 0, 2);

fn config(ip: Ipv4Address, last: u8) -> StackConfig {
    let mut c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        ip,
        24,
    ));
    c.tcp.rto_min = 5_000_000;
    c.tcp.rto_initial = 50_000_000;
    // TIME-WAIT must outlast the peer's retransmissions of its FIN (with
    // RTO backoff on a loaded machine), or the peer's last segments meet
    // a closed port and it sees RST with data still unacknowledged.
    c.tcp.time_wait = 2_000_000_000;
    c
}

fn mode() -> Mode {
    Mode::Adaptive {
        spins: 1000,
        max_sleep: Duration::from_micros(200),
    }
}

/// Control segments (SYN, FIN, RST) each stack received, and per-tuple
/// data counts: printed when a transfer goes wrong.
type Trace = Arc<Mutex<Vec<String>>>;

struct Traced {
    dev: FaultyDevice,
    side: char,
    trace: Trace,
}

fn describe(f: &[u8]) -> Option<(bool, String)> {
    if f.len() < 34 || f[12..14] != [8, 0] || f[23] != 6 {
        return None;
    }
    let ihl = usize::from(f[14] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let t = f.get(14 + ihl..14 + total)?;
    if t.len() < 20 {
        return None;
    }
    let word = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    let doff = usize::from(t[12] >> 4) * 4;
    let flags = t[13];
    let names: String = [(2, 'S'), (1, 'F'), (4, 'R'), (16, '.')]
        .iter()
        .filter(|(b, _)| flags & b != 0)
        .map(|(_, c)| *c)
        .collect();
    Some((
        flags & 7 != 0,
        format!(
            "{}>{} [{names}] seq {} ack {} len {}",
            u16::from_be_bytes([t[0], t[1]]),
            u16::from_be_bytes([t[2], t[3]]),
            word(4),
            word(8),
            t.len().saturating_sub(doff)
        ),
    ))
}

impl FrameDevice for Traced {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let (side, trace) = (self.side, &self.trace);
        self.dev.rx_burst(max, &mut |f| {
            if let Some((control, d)) = describe(f) {
                if control {
                    trace.lock().unwrap().push(format!("{side} got {d}"));
                }
            }
            sink(f)
        })
    }
    fn tx(&mut self, frame: &[u8]) -> bool {
        if let Some((control, d)) = describe(frame) {
            let mut t = self.trace.lock().unwrap();
            if control || t.len() < 400 {
                t.push(format!("{} sent {d}", self.side));
            }
        }
        self.dev.tx(frame)
    }
    fn flush(&mut self) {
        self.dev.flush()
    }
}

fn pair(
    seed: u64,
    loss: u32,
    mem_a: MemoryTable,
    mem_b: MemoryTable,
) -> (LoopHandle<Stack>, LoopHandle<Stack>) {
    let (a, b, _) = traced_pair(seed, loss, mem_a, mem_b);
    (a, b)
}

fn traced_pair(
    seed: u64,
    loss: u32,
    mem_a: MemoryTable,
    mem_b: MemoryTable,
) -> (LoopHandle<Stack>, LoopHandle<Stack>, Trace) {
    traced_pair_with(seed, loss, mem_a, mem_b, |_| {})
}

/// [`traced_pair`] with `tweak_a` applied to A's configuration.
fn traced_pair_with(
    seed: u64,
    loss: u32,
    mem_a: MemoryTable,
    mem_b: MemoryTable,
    tweak_a: fn(&mut StackConfig),
) -> (LoopHandle<Stack>, LoopHandle<Stack>, Trace) {
    traced_pair_tweaked(seed, loss, mem_a, mem_b, tweak_a, |_| {})
}

/// [`traced_pair`] with `tweak_a` and `tweak_b` applied to A's and B's
/// configurations.
fn traced_pair_tweaked(
    seed: u64,
    loss: u32,
    mem_a: MemoryTable,
    mem_b: MemoryTable,
    tweak_a: fn(&mut StackConfig),
    tweak_b: fn(&mut StackConfig),
) -> (LoopHandle<Stack>, LoopHandle<Stack>, Trace) {
    let (da, db) = MemDevice::pair(4096);
    let faults = Faults {
        loss,
        reorder: loss,
        dup: loss / 5,
        corrupt: loss / 50,
        delayed: loss / 2,
        delay: Duration::from_micros(300),
    };
    let trace = Trace::default();
    let fa = Traced {
        dev: FaultyDevice::new(da, faults, seed),
        side: 'a',
        trace: trace.clone(),
    };
    let fb = Traced {
        dev: FaultyDevice::new(db, faults, seed ^ 0xdead_beef),
        side: 'b',
        trace: trace.clone(),
    };
    let mut cfg_a = config(IP_A, 1);
    tweak_a(&mut cfg_a);
    let a = spawn(Stack::new(cfg_a, mem_a), fa, Some(0), mode(), 4096);
    let mut cfg_b = config(IP_B, 2);
    tweak_b(&mut cfg_b);
    let b = spawn(Stack::new(cfg_b, mem_b), fb, Some(1), mode(), 4096);
    (a, b, trace)
}

fn wait_output(h: &LoopHandle<Stack>, what: &str, mut f: impl FnMut(&Output) -> bool) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(o) = h.poll() {
            if f(&o) {
                return o;
            }
            if std::env::var_os("STACK_DEBUG").is_some() {
                eprintln!("{what}: skipped {o:?}");
            }
            continue;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    panic!("no {what} within 30 s");
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Send `len` octets through `s` and then close; read everything that
/// arrives until end of stream. Returns what was read.
fn pump(s: &StreamShared, len: usize, offset: usize) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0;
    let mut got = Vec::new();
    let mut closed = false;
    while Instant::now() < deadline {
        let mut idle = true;
        while sent < len {
            let n = (len - sent).min(16 << 10);
            let chunk: Vec<u8> = (sent..sent + n).map(|i| pattern(i + offset)).collect();
            if s.tx.push(chunk).is_err() {
                break;
            }
            sent += n;
            idle = false;
        }
        if sent == len && !closed {
            s.close.store(true, Ordering::Release);
            closed = true;
        }
        while let Some(v) = s.rx.pop() {
            got.extend_from_slice(&v);
            idle = false;
        }
        let f = s.flags();
        assert_eq!(f & flags::FAILED, 0, "stream failed: {:?}", s.error());
        if f & flags::CLOSED != 0 && f & flags::RX_EOF != 0 && s.rx.is_empty() {
            return got;
        }
        if idle {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    panic!(
        "stream did not finish within 60 s: sent {sent}, got {}",
        got.len()
    );
}

fn streams_both_ways(seed: u64, loss: u32, len: usize) {
    streams_both_ways_with(seed, loss, len, |_| {})
}

/// [`streams_both_ways`] with `tweak_a` applied to the listener's stack.
fn streams_both_ways_with(seed: u64, loss: u32, len: usize, tweak_a: fn(&mut StackConfig)) {
    let (a, b, trace) =
        traced_pair_with(seed, loss, MemoryTable::new(), MemoryTable::new(), tweak_a);
    let (sa, sb) = open_streams(&a, &b);
    let t = std::thread::spawn(move || pump(&sa, len, 7));
    let got_b = pump(&sb, len, 0);
    let got_a = t.join().unwrap();
    let (sa, _) = a.stop().unwrap();
    let (sb, _) = b.stop().unwrap();
    let why = || {
        format!(
            "seed {seed}: a {:?}\nb {:?}\n{}",
            sa.stats(),
            sb.stats(),
            trace.lock().unwrap().join("\n")
        )
    };
    let first_bad = |got: &[u8], offset: usize| {
        got.iter()
            .enumerate()
            .position(|(i, &x)| x != pattern(i + offset))
    };
    assert_eq!(
        (got_a.len(), first_bad(&got_a, 0)),
        (len, None),
        "{}",
        why()
    );
    assert_eq!(
        (got_b.len(), first_bad(&got_b, 7)),
        (len, None),
        "{}",
        why()
    );
    // Both ends answered ARP for each other and nothing went unrouted.
    assert!(sa.iface().arp().stats().replies_sent + sb.iface().arp().stats().replies_sent >= 1);
}

#[test]
fn byte_streams_both_ways_over_a_clean_link() {
    streams_both_ways(1, 0, 4 << 20);
}

#[test]
fn byte_streams_both_ways_over_a_lossy_link() {
    // 2% loss, 2% reordering, 1% delayed 300 µs, 0.4% duplication, 0.04% corruption.
    for seed in 0..3 {
        streams_both_ways(seed, 20_000, 1 << 20);
    }
}

/// A byte stream from B to A's listener: A's end, B's end.
fn open_streams(
    a: &LoopHandle<Stack>,
    b: &LoopHandle<Stack>,
) -> (Arc<StreamShared>, Arc<StreamShared>) {
    a.post(Command::Listen {
        transport: Transport::Tcp,
        port: 5001,
        ulp: Ulp::Stream,
    })
    .unwrap();
    wait_output(a, "Listening", |o| {
        matches!(o, Output::Listening { result: Ok(()), .. })
    });
    b.post(Command::Connect {
        transport: Transport::Tcp,
        token: 1,
        remote: IP_A,
        port: 5001,
        ulp: Ulp::Stream,
    })
    .unwrap();
    let Output::Connected {
        stream: Some(sb), ..
    } = wait_output(b, "Connected", |o| matches!(o, Output::Connected { .. }))
    else {
        unreachable!()
    };
    let Output::Accepted {
        stream: Some(sa),
        remote,
        ..
    } = wait_output(a, "Accepted", |o| matches!(o, Output::Accepted { .. }))
    else {
        unreachable!()
    };
    assert_eq!(remote, IP_B);
    (sa, sb)
}

/// A stream pair between A (listening) and B (connecting), `tweak`
/// applied to both stacks' configurations.
fn stream_pair(
    seed: u64,
    loss: u32,
    tweak: fn(&mut StackConfig),
) -> (
    LoopHandle<Stack>,
    LoopHandle<Stack>,
    Arc<StreamShared>,
    Arc<StreamShared>,
) {
    let (a, b, _) = traced_pair_tweaked(
        seed,
        loss,
        MemoryTable::new(),
        MemoryTable::new(),
        tweak,
        tweak,
    );
    let (sa, sb) = open_streams(&a, &b);
    (a, b, sa, sb)
}

/// Send `len` octets of [`pattern`] through `s` in `chunk`-octet blocking
/// sends (each allowed to wait `wait`), then close.
fn send_pattern(s: &StreamShared, len: usize, chunk: usize, wait: Duration) {
    let mut sent = 0;
    while sent < len {
        let n = (len - sent).min(chunk);
        let v: Vec<u8> = (sent..sent + n).map(pattern).collect();
        s.send(v, wait).expect("send");
        sent += n;
    }
    s.close.store(true, Ordering::Release);
}

#[test]
fn blocking_send_and_recv_are_woken_by_the_stack() {
    // Four-chunk rings: the sender fills its ring at once and must wait
    // for the stack to drain it, over and over; the reader waits for data.
    // Each call may wait 120 s, the whole transfer gets 90 (a loaded
    // machine needs a few): a wake-up the stack failed to give would show
    // as a 120 s park and fail the send or the deadline.
    let (a, b, sa, sb) = stream_pair(41, 5_000, |c| c.ring_chunks = 4);
    let len = 8 << 20;
    let started = Instant::now();
    let wait = Duration::from_secs(120);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(len);
        while let Some(v) = sa.recv(wait).expect("recv") {
            got.extend_from_slice(&v);
        }
        sa.close.store(true, Ordering::Release);
        sa.wait_closed(wait).expect("A closes");
        (got, sa.parks())
    });
    send_pattern(&sb, len, 16 << 10, wait);
    // B's receive side: A sends nothing, so the stream ends at once.
    assert_eq!(sb.recv(wait), Ok(None));
    sb.wait_closed(wait).expect("B closes");
    let (got, a_parks) = reader.join().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(got.len(), len);
    assert!(got.iter().enumerate().all(|(i, &x)| x == pattern(i)));
    assert!(
        elapsed < Duration::from_secs(90),
        "transfer took {elapsed:?}: a wake-up went missing"
    );
    // Both sides really waited (else this test proves nothing about
    // wake-ups): B's sender for room, A's reader for data.
    let (b_tx_parks, _) = sb.parks();
    assert!(b_tx_parks > 0, "the sender never waited");
    assert!(a_parks.1 > 0, "the reader never waited");
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn a_slow_reader_closes_the_window_and_the_stack_drops_nothing() {
    // A reader that falls behind: a four-chunk ring, then the stack's
    // backlog, then the window closes. Everything the window let in must
    // fit the backlog (`rx_backlog_limit`, the TCP buffer's size): no data
    // segment dropped for lack of room, and every octet delivered.
    let (a, b, sa, sb) = stream_pair(43, 0, |c| c.ring_chunks = 4);
    let len = 4 << 20;
    let wait = Duration::from_secs(30);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(len);
        while let Some(v) = sa.recv(wait).expect("recv") {
            got.extend_from_slice(&v);
            // Slower than the link for the first half.
            if got.len() < len / 2 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        sa.close.store(true, Ordering::Release);
        sa.wait_closed(wait).expect("A closes");
        got
    });
    send_pattern(&sb, len, 64 << 10, wait);
    sb.wait_closed(wait).expect("B closes");
    let got = reader.join().unwrap();
    assert_eq!(got.len(), len);
    assert!(got.iter().enumerate().all(|(i, &x)| x == pattern(i)));
    let (sa, _) = a.stop().unwrap();
    b.stop().unwrap();
    assert_eq!(sa.stats().rx_backpressure_drops, 0, "{:?}", sa.stats());
}

#[test]
fn one_thread_waits_for_the_close_while_another_sends() {
    // B's sender thread parks on a full ring again and again while B's
    // main thread parks in `wait_closed`: each is woken for its own
    // event. With one wake-up slot for both, the close's wake-up went to
    // the sender's handle and the waiter slept out its wait (120 s here;
    // the whole gets 90 s, room for a loaded machine).
    let (a, b, sa, sb) = stream_pair(44, 0, |c| c.ring_chunks = 4);
    let len = 4 << 20;
    let wait = Duration::from_secs(120);
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut n = 0;
        while let Some(v) = sa.recv(wait).expect("recv") {
            n += v.len();
        }
        sa.close.store(true, Ordering::Release);
        sa.wait_closed(wait).expect("A closes");
        n
    });
    let tx = sb.clone();
    let sender = std::thread::spawn(move || {
        send_pattern(&tx, len, 16 << 10, wait);
        tx.parks().0
    });
    sb.wait_closed(wait).expect("B closes");
    let elapsed = started.elapsed();
    let sender_parks = sender.join().unwrap();
    assert_eq!(reader.join().unwrap(), len);
    assert!(sender_parks > 0, "the sender never waited");
    assert!(
        elapsed < Duration::from_secs(90),
        "the close took {elapsed:?}: its wake-up went missing"
    );
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn blocking_calls_time_out_and_report_failure() {
    let (a, b, sa, sb) = stream_pair(42, 0, |c| c.ring_chunks = 2);
    // Nothing to read yet: recv waits its timeout and says so.
    let t = Instant::now();
    assert_eq!(sa.recv(Duration::from_millis(50)), Err(WaitError::TimedOut));
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert_eq!(
        sa.wait_closed(Duration::from_millis(20)),
        Err(WaitError::TimedOut)
    );
    // A never reads: its two-chunk ring, its backlog and B's send buffer
    // fill, and then B's send gives the chunk back after its timeout.
    let mut timed_out = None;
    for i in 0..4096u32 {
        let chunk = vec![i as u8; 16 << 10];
        match sb.send(chunk, Duration::from_millis(200)) {
            Ok(()) => {}
            Err(e) => {
                timed_out = Some((i, e));
                break;
            }
        }
    }
    let (i, e) = timed_out.expect("B's sends never timed out against a reader that never reads");
    assert_eq!(e.clone().into_data(), vec![i as u8; 16 << 10]);
    assert!(matches!(e, SendError::TimedOut(_)), "{e}");
    // A resets: B's blocked calls end with the failure, not their 120 s
    // timeout (60 s for all three leaves a loaded machine room).
    sa.abort.store(true, Ordering::Release);
    let t = Instant::now();
    let e = sb.send(vec![1; 10], Duration::from_secs(120)).unwrap_err();
    assert_eq!(e, SendError::Failed(ConnError::Reset, vec![1; 10]));
    assert_eq!(
        sb.recv(Duration::from_secs(120)),
        Err(WaitError::Failed(ConnError::Reset))
    );
    assert_eq!(
        sb.wait_closed(Duration::from_secs(120)),
        Err(WaitError::Failed(ConnError::Reset))
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn a_listener_without_half_open_room_accepts_through_syn_cookies() {
    // No half-open entry at all: every SYN is answered with a stateless
    // SYN cookie (RFC 4987 §3.6), and the handshake completes only if the
    // cookie ACK rebuilds the connection; data then flows both ways.
    streams_both_ways_with(31, 0, 200_000, |c| c.max_half_open = 0);
}

#[test]
fn closed_port_is_refused() {
    let (a, b) = pair(9, 0, MemoryTable::new(), MemoryTable::new());
    b.post(Command::Connect {
        transport: Transport::Tcp,
        token: 42,
        remote: IP_A,
        port: 9999,
        ulp: Ulp::Stream,
    })
    .unwrap();
    match wait_output(&b, "Failed", |o| matches!(o, Output::Failed { .. })) {
        Output::Failed { token, error } => {
            assert_eq!(token, 42);
            assert_eq!(error, ConnError::Refused);
            assert_eq!(error.to_string(), "connection refused (TCP RST)");
        }
        _ => unreachable!(),
    }
    let (sa, _) = a.stop().unwrap();
    let (sb, _) = b.stop().unwrap();
    // Every SYN B sent (the first and any its timer resent before the RST
    // came back on a loaded machine) met the closed port.
    let syns = 1 + sb.stats().tcp_closed.rto_retransmits;
    assert_eq!(sa.stats().rx_no_socket, syns);
}

#[test]
fn iwarp_write_and_send_through_listener_over_lossy_link() {
    const LEN: usize = 2 << 20;
    let data: Vec<u8> = (0..LEN).map(pattern).collect();
    let mut mem_b = MemoryTable::new();
    let pd_b = mem_b.alloc_pd();
    let src = mem_b
        .register(pd_b, data.clone(), Access::LOCAL_READ, 0)
        .unwrap();
    let mut mem_a = MemoryTable::new();
    let pd_a = mem_a.alloc_pd();
    let dst = mem_a
        .register(pd_a, vec![0; LEN], Access::REMOTE_WRITE, 0)
        .unwrap();
    let rbuf = mem_a
        .register(pd_a, vec![0; 64], Access::LOCAL_WRITE, 0)
        .unwrap();
    let params = |pd| StreamParams {
        pd,
        emss: 1460,
        sq_depth: 256,
        rq_depth: 16,
    };
    let mpa = MpaConfig {
        crc: true,
        ..Default::default()
    };
    let (a, b) = pair(5, 10_000, mem_a, mem_b);
    a.post(Command::Listen {
        transport: Transport::Tcp,
        port: 7174,
        ulp: Ulp::Iwarp {
            mpa: mpa.clone(),
            params: params(pd_a),
            manual: false,
            cq: None,
            srq: None,
        },
    })
    .unwrap();
    wait_output(&a, "Listening", |o| {
        matches!(o, Output::Listening { result: Ok(()), .. })
    });
    b.post(Command::Connect {
        transport: Transport::Tcp,
        token: 3,
        remote: IP_A,
        port: 7174,
        ulp: Ulp::Iwarp {
            mpa,
            params: params(pd_b),
            manual: false,
            cq: None,
            srq: None,
        },
    })
    .unwrap();
    let Output::Accepted { sock: sa, .. } =
        wait_output(&a, "Accepted", |o| matches!(o, Output::Accepted { .. }))
    else {
        unreachable!()
    };
    a.post(Command::Iwarp(
        sa,
        HostCommand::PostRecv(
            9,
            Sge {
                stag: rbuf,
                to: 0,
                len: 64,
            }
            .into(),
        ),
    ))
    .unwrap();
    let Output::Connected { sock: sb, .. } =
        wait_output(&b, "Connected", |o| matches!(o, Output::Connected { .. }))
    else {
        unreachable!()
    };
    const CHUNK: usize = 256 << 10;
    for i in 0..LEN / CHUNK {
        let off = (i * CHUNK) as u64;
        b.post(Command::Iwarp(
            sb,
            HostCommand::PostSend(WorkRequest::Write {
                wr_id: i as u64,
                signaled: true,
                local: Sge {
                    stag: src,
                    to: off,
                    len: CHUNK as u32,
                }
                .into(),
                remote_stag: dst,
                remote_to: off,
            }),
        ))
        .unwrap();
    }
    b.post(Command::Iwarp(
        sb,
        HostCommand::PostSend(WorkRequest::Send {
            wr_id: 99,
            signaled: true,
            local: Sge {
                stag: src,
                to: 0,
                len: 16,
            }
            .into(),
            solicited: false,
            invalidate: None,
        }),
    ))
    .unwrap();
    match wait_output(&a, "Recv completion", |o| {
        matches!(o, Output::Iwarp(_, HostOutput::Completion(_)))
    }) {
        Output::Iwarp(s, HostOutput::Completion(c)) => {
            assert_eq!(s, sa);
            assert_eq!(
                (c.wr_id, c.opcode, c.status, c.byte_len),
                (9, WcOpcode::Recv, WcStatus::Success, 16)
            );
        }
        _ => unreachable!(),
    }
    // The Send follows every Write, so all of them are placed.
    a.post(Command::ReadMem {
        token: 1,
        stag: dst,
        offset: 0,
        len: LEN,
    })
    .unwrap();
    let Output::Memory {
        data: Some(got), ..
    } = wait_output(&a, "Memory", |o| matches!(o, Output::Memory { .. }))
    else {
        panic!("ReadMem refused")
    };
    assert!(got == data, "placed data differs");
}

// ---- Connection manager and teardown over the stack ----------------------

fn iwarp_ulp(pd: iwarp_proto::mem::PdId, mpa: MpaConfig, manual: bool) -> Ulp {
    Ulp::Iwarp {
        mpa,
        params: StreamParams {
            pd,
            emss: 1460,
            sq_depth: 64,
            rq_depth: 64,
        },
        manual,
        cq: None,
        srq: None,
    }
}

fn cm_event(h: &LoopHandle<Stack>, what: &str, f: impl Fn(&CmEvent) -> bool) -> (SockId, CmEvent) {
    match wait_output(h, what, |o| matches!(o, Output::Cm(_, e) if f(e))) {
        Output::Cm(s, e) => (s, e),
        _ => unreachable!(),
    }
}

/// A manual listener on B and a connection from A; returns after B has
/// seen the Request.
fn connect_manual(
    mpa_a: MpaConfig,
    mem_a: MemoryTable,
    mem_b: MemoryTable,
    pd_a: iwarp_proto::mem::PdId,
    pd_b: iwarp_proto::mem::PdId,
) -> (LoopHandle<Stack>, LoopHandle<Stack>, SockId, PeerRequest) {
    let (a, b) = pair(11, 0, mem_a, mem_b);
    b.post(Command::Listen {
        transport: Transport::Tcp,
        port: 7200,
        ulp: iwarp_ulp(pd_b, MpaConfig::default(), true),
    })
    .unwrap();
    wait_output(&b, "Listening", |o| {
        matches!(o, Output::Listening { result: Ok(()), .. })
    });
    a.post(Command::Connect {
        transport: Transport::Tcp,
        token: 1,
        remote: IP_B,
        port: 7200,
        ulp: iwarp_ulp(pd_a, mpa_a, false),
    })
    .unwrap();
    let (sb, e) = cm_event(&b, "ConnectRequest", |e| {
        matches!(e, CmEvent::ConnectRequest(_))
    });
    let CmEvent::ConnectRequest(req) = e else {
        unreachable!()
    };
    (a, b, sb, req)
}

#[test]
fn manual_accept_shows_the_request_and_answers_with_our_private_data() {
    let (mut mem_a, mut mem_b) = (MemoryTable::new(), MemoryTable::new());
    let (pd_a, pd_b) = (mem_a.alloc_pd(), mem_b.alloc_pd());
    let mpa_a = MpaConfig {
        ird: 4,
        ord: 2,
        crc: true,
        private_data: b"client hello".to_vec(),
        ..Default::default()
    };
    let (a, b, sb, req) = connect_manual(mpa_a, mem_a, mem_b, pd_a, pd_b);
    assert_eq!(req.private_data, b"client hello");
    assert_eq!(
        (req.ird, req.ord, req.crc, req.rev),
        (Some(4), Some(2), true, 2)
    );
    b.post(Command::Accept {
        sock: sb,
        private_data: b"server hello".to_vec(),
        ird: 1,
        ord: 3,
        cq: None,
        pd: None,
    })
    .unwrap();
    let (_, e) = cm_event(&a, "Established at A", |e| {
        matches!(e, CmEvent::Established(_))
    });
    let CmEvent::Established(na) = e else {
        unreachable!()
    };
    assert_eq!(na.peer_private_data, b"server hello");
    assert!(na.crc);
    // A's ORD is capped by B's IRD (1); B's IRD by A's ORD (2 → 1 asked).
    assert_eq!(na.ord, 1);
    let (_, e) = cm_event(&b, "Established at B", |e| {
        matches!(e, CmEvent::Established(_))
    });
    let CmEvent::Established(nb) = e else {
        unreachable!()
    };
    assert_eq!(nb.peer_private_data, b"client hello");
    // B asked IRD 1, ORD 3; A offered IRD 4, ORD 2: B keeps IRD 1 (≤ 2), ORD 3 (≤ 4).
    assert_eq!((nb.ird, nb.ord), (1, 3));
}

#[test]
fn reject_carries_512_octets_of_private_data_to_the_initiator() {
    let (mut mem_a, mut mem_b) = (MemoryTable::new(), MemoryTable::new());
    let (pd_a, pd_b) = (mem_a.alloc_pd(), mem_b.alloc_pd());
    let (a, b, sb, _) = connect_manual(MpaConfig::default(), mem_a, mem_b, pd_a, pd_b);
    let why: Vec<u8> = (0..512u32).map(|i| (i * 13 + 1) as u8).collect();
    b.post(Command::Reject {
        sock: sb,
        private_data: why.clone(),
    })
    .unwrap();
    let (_, e) = cm_event(&a, "SetupFailed at A", |e| {
        matches!(e, CmEvent::SetupFailed(_))
    });
    let CmEvent::SetupFailed(err) = e else {
        unreachable!()
    };
    assert_eq!(err.reason, SetupFailure::Rejected);
    assert_eq!(err.peer_private_data, why);
    let (_, e) = cm_event(&b, "SetupFailed at B", |e| {
        matches!(e, CmEvent::SetupFailed(_))
    });
    assert!(matches!(e, CmEvent::SetupFailed(ref x) if x.reason == SetupFailure::RejectedByUs));
    cm_event(&a, "Disconnected at A", |e| *e == CmEvent::Disconnected);
    cm_event(&b, "Disconnected at B", |e| *e == CmEvent::Disconnected);
}

#[test]
fn a_peer_that_never_replies_times_out() {
    let (mut mem_a, mem_b) = (MemoryTable::new(), MemoryTable::new());
    let pd_a = mem_a.alloc_pd();
    let (a, b) = pair(12, 0, mem_a, mem_b);
    // B accepts TCP but speaks no MPA: A's Request goes unanswered.
    b.post(Command::Listen {
        transport: Transport::Tcp,
        port: 7201,
        ulp: Ulp::Stream,
    })
    .unwrap();
    wait_output(&b, "Listening", |o| {
        matches!(o, Output::Listening { result: Ok(()), .. })
    });
    let mpa = MpaConfig {
        reply_timeout: 200_000_000,
        ..Default::default()
    };
    let started = Instant::now();
    a.post(Command::Connect {
        transport: Transport::Tcp,
        token: 1,
        remote: IP_B,
        port: 7201,
        ulp: iwarp_ulp(pd_a, mpa, false),
    })
    .unwrap();
    let (_, e) = cm_event(&a, "SetupFailed", |e| matches!(e, CmEvent::SetupFailed(_)));
    assert!(matches!(e, CmEvent::SetupFailed(ref x) if x.reason == SetupFailure::TimedOut));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "timed out after {waited:?}"
    );
    cm_event(&a, "Disconnected", |e| *e == CmEvent::Disconnected);
}

/// Connect A→B (auto accept), B posts `recvs` receive buffers of 64 octets
/// in region `rbuf`, A has `src` of 4 KiB.
#[allow(clippy::type_complexity)]
fn connected(
    recvs: u64,
) -> (
    LoopHandle<Stack>,
    LoopHandle<Stack>,
    SockId,
    SockId,
    STag,
    STag,
) {
    let mut mem_a = MemoryTable::new();
    let pd_a = mem_a.alloc_pd();
    let src = mem_a
        .register(
            pd_a,
            (0..4096).map(|i| i as u8).collect::<Vec<u8>>(),
            Access::LOCAL_READ,
            0,
        )
        .unwrap();
    let mut mem_b = MemoryTable::new();
    let pd_b = mem_b.alloc_pd();
    let rbuf = mem_b
        .register(
            pd_b,
            vec![0xee; 64 * 16],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            0,
        )
        .unwrap();
    let (a, b) = pair(13, 0, mem_a, mem_b);
    b.post(Command::Listen {
        transport: Transport::Tcp,
        port: 7202,
        ulp: iwarp_ulp(pd_b, MpaConfig::default(), false),
    })
    .unwrap();
    wait_output(&b, "Listening", |o| {
        matches!(o, Output::Listening { result: Ok(()), .. })
    });
    a.post(Command::Connect {
        transport: Transport::Tcp,
        token: 1,
        remote: IP_B,
        port: 7202,
        ulp: iwarp_ulp(pd_a, MpaConfig::default(), false),
    })
    .unwrap();
    let (sa, _) = cm_event(&a, "Established at A", |e| {
        matches!(e, CmEvent::Established(_))
    });
    let (sb, _) = cm_event(&b, "Established at B", |e| {
        matches!(e, CmEvent::Established(_))
    });
    for i in 0..recvs {
        b.post(Command::Iwarp(
            sb,
            HostCommand::PostRecv(
                i,
                Sge {
                    stag: rbuf,
                    to: i * 64,
                    len: 64,
                }
                .into(),
            ),
        ))
        .unwrap();
    }
    (a, b, sa, sb, src, rbuf)
}

fn send_wr(wr_id: u64, src: STag, len: u32) -> HostCommand {
    HostCommand::PostSend(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: Sge {
            stag: src,
            to: 0,
            len,
        }
        .into(),
        solicited: false,
        invalidate: None,
    })
}

fn completion(h: &LoopHandle<Stack>, what: &str) -> iwarp_proto::qp::Completion {
    match wait_output(h, what, |o| {
        matches!(o, Output::Iwarp(_, HostOutput::Completion(_)))
    }) {
        Output::Iwarp(_, HostOutput::Completion(c)) => c,
        _ => unreachable!(),
    }
}

fn read_all(h: &LoopHandle<Stack>, stag: STag, len: usize) -> Vec<u8> {
    h.post(Command::ReadMem {
        token: 77,
        stag,
        offset: 0,
        len,
    })
    .unwrap();
    match wait_output(h, "Memory", |o| matches!(o, Output::Memory { .. })) {
        Output::Memory { data: Some(d), .. } => d,
        o => panic!("ReadMem: {o:?}"),
    }
}

#[test]
fn graceful_disconnect_completes_work_then_flushes_and_places_nothing_more() {
    let (a, b, sa, _sb, src, rbuf) = connected(4);
    a.post(Command::Iwarp(sa, send_wr(1, src, 64))).unwrap();
    let c = completion(&a, "Send completion");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    let c = completion(&b, "first Recv");
    assert_eq!(
        (c.wr_id, c.opcode, c.status),
        (0, WcOpcode::Recv, WcStatus::Success)
    );
    a.post(Command::Close(sa)).unwrap();
    cm_event(&a, "Disconnected at A", |e| *e == CmEvent::Disconnected);
    cm_event(&b, "Disconnected at B", |e| *e == CmEvent::Disconnected);
    // B's three other receives complete as flushed, in order.
    for want in 1..4 {
        let c = completion(&b, "flushed Recv");
        assert_eq!((c.wr_id, c.status), (want, WcStatus::Flushed));
    }
    // A post after the disconnect is refused; nothing reaches B.
    a.post(Command::Iwarp(sa, send_wr(2, src, 64))).unwrap();
    wait_output(
        &a,
        "refusal",
        |o| matches!(o, Output::Iwarp(s, HostOutput::Refused(2, _)) if *s == sa),
    );
    let mem = read_all(&b, rbuf, 64 * 16);
    assert!(mem[..64].iter().enumerate().all(|(i, &x)| x == i as u8));
    assert!(
        mem[64..].iter().all(|&x| x == 0xee),
        "placed after disconnect"
    );
}

#[test]
fn abort_sends_terminate_then_reset_and_the_peer_flushes_posted_work() {
    let (a, b, sa, _sb, src, rbuf) = connected(3);
    a.post(Command::Abort(sa)).unwrap();
    // Everything B reports until its stream is gone.
    let mut outs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !outs
        .iter()
        .any(|o| matches!(o, Output::Cm(_, CmEvent::Disconnected)))
    {
        assert!(Instant::now() < deadline, "B never disconnected: {outs:?}");
        match b.poll() {
            Some(o) => outs.push(o),
            None => std::thread::sleep(Duration::from_micros(100)),
        }
    }
    // B heard the Terminate (RDMAP local catastrophic error)...
    assert!(
        outs.iter().any(|o| matches!(o,
        Output::Iwarp(_, HostOutput::Event(QpEvent::TerminateReceived(t)))
            if t.code == TermCode::RDMAP_LOCAL_CATASTROPHIC)),
        "{outs:?}"
    );
    // ...and its three receives completed as flushed, in order.
    let flushed: Vec<u64> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Iwarp(_, HostOutput::Completion(c)) if c.status == WcStatus::Flushed => {
                Some(c.wr_id)
            }
            _ => None,
        })
        .collect();
    assert_eq!(flushed, vec![0, 1, 2]);
    cm_event(&a, "Disconnected at A", |e| *e == CmEvent::Disconnected);
    a.post(Command::Iwarp(sa, send_wr(9, src, 64))).unwrap();
    let mem = read_all(&b, rbuf, 64 * 16);
    assert!(mem.iter().all(|&x| x == 0xee), "placed after abort");
}

#[test]
fn a_peer_that_never_sends_its_request_times_out() {
    let (mem_a, mut mem_b) = (MemoryTable::new(), MemoryTable::new());
    let pd_b = mem_b.alloc_pd();
    let (a, b) = pair(14, 0, mem_a, mem_b);
    let mpa = MpaConfig {
        request_timeout: 200_000_000,
        ..Default::default()
    };
    b.post(Command::Listen {
        transport: Transport::Tcp,
        port: 7203,
        ulp: iwarp_ulp(pd_b, mpa, false),
    })
    .unwrap();
    wait_output(&b, "Listening", |o| {
        matches!(o, Output::Listening { result: Ok(()), .. })
    });
    // A opens plain TCP and says nothing.
    a.post(Command::Connect {
        transport: Transport::Tcp,
        token: 1,
        remote: IP_B,
        port: 7203,
        ulp: Ulp::Stream,
    })
    .unwrap();
    let started = Instant::now();
    let (_, e) = cm_event(&b, "SetupFailed", |e| matches!(e, CmEvent::SetupFailed(_)));
    assert!(matches!(e, CmEvent::SetupFailed(ref x) if x.reason == SetupFailure::TimedOut));
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    cm_event(&b, "Disconnected", |e| *e == CmEvent::Disconnected);
}
