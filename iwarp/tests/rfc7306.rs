//! RFC 7306 through the Rust API over the simulated link: RDMA Write with
//! Immediate (the receiver's completion carries the immediate), Fetch and
//! Add, Compare and Swap, their masked forms and Swap, and the responder's refusals (no remote-atomic
//! access, a misaligned target) as the requester sees them.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, Atomic, ConnectOptions, Context, ListenOptions, QpEvent, Status,
    TermCode, Transport, WcOpcode, WcStatus, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

struct Pair {
    _ctx: (Context, Context),
    sqp: iwarp::Qp,
    cqp: iwarp::Qp,
    scq: iwarp::Cq,
    ccq: iwarp::Cq,
    /// Server memory: remote write and remote atomic.
    target: iwarp::Mr,
    /// Server memory without remote-atomic access.
    plain: iwarp::Mr,
    /// Client memory: source and result buffers.
    local: iwarp::Mr,
}

fn connected(port: u16, recvs: u64) -> Pair {
    let (server, client) = Context::sim_pair();
    connected_on(server, client, port, recvs)
}

fn connected_on(server: Context, client: Context, port: u16, recvs: u64) -> Pair {
    connected_over(server, client, port, recvs, Transport::Mpa)
}

fn connected_over(
    server: Context,
    client: Context,
    port: u16,
    recvs: u64,
    transport: Transport,
) -> Pair {
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let mut init = vec![0u8; 4096];
    init[8..16].copy_from_slice(&40u64.to_ne_bytes());
    init[16..24].copy_from_slice(&7u64.to_ne_bytes());
    let target = spd
        .register(
            init,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    let plain = spd
        .register(
            vec![0; 64],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let local = cpd.register(vec![0xab; 4096], Access::LOCAL_WRITE).unwrap();
    let mut lo = ListenOptions::new(&spd);
    lo.transport = transport;
    let listener = server.listen(port, &lo).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.transport = transport;
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    for i in 0..recvs {
        req.post_recv(i, inbox.sge(0, 0)).unwrap();
    }
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    Pair {
        _ctx: (server, client),
        sqp,
        cqp,
        scq,
        ccq,
        target,
        plain,
        local,
    }
}

fn u64_at(mr: &iwarp::Mr, at: usize) -> u64 {
    u64::from_ne_bytes(mr.read(at, 8).unwrap().try_into().unwrap())
}

#[test]
fn write_with_immediate_completes_a_receive_with_the_immediate() {
    write_with_immediate(connected(9701, 4));
}

fn write_with_immediate(p: Pair) {
    p.local.write(0, b"immediate!").unwrap();
    p.cqp
        .post_send(WorkRequest::WriteImm {
            wr_id: 1,
            signaled: true,
            local: p.local.sge(0, 10).into(),
            remote_stag: p.target.stag(),
            remote_to: p.target.sge(100, 10).to,
            imm: 0x1234_5678,
            solicited: true,
        })
        .unwrap();
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (1, Some(WcOpcode::WriteImm), Status::Wc(WcStatus::Success))
    );
    let wc = p.scq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.imm, wc.solicited, wc.status),
        (
            0,
            Some(WcOpcode::RecvRdmaWithImm),
            Some(0x1234_5678),
            true,
            Status::Wc(WcStatus::Success)
        )
    );
    // Placed before the completion was visible.
    assert_eq!(p.target.read(100, 10).unwrap(), b"immediate!");
    assert!(p.scq.poll_one().is_none());
    drop(p.sqp);
}

#[test]
fn fetch_add_and_compare_swap() {
    atomics(connected(9702, 0));
}

fn atomics(p: Pair) {
    p.cqp
        .post_send(WorkRequest::FetchAdd {
            wr_id: 1,
            signaled: true,
            local: p.local.sge(0, 8),
            remote_stag: p.target.stag(),
            remote_to: p.target.sge(8, 8).to,
            add: 2,
        })
        .unwrap();
    p.cqp
        .post_send(WorkRequest::CmpSwap {
            wr_id: 2,
            signaled: true,
            local: p.local.sge(8, 8),
            remote_stag: p.target.stag(),
            remote_to: p.target.sge(16, 8).to,
            compare: 7,
            swap: 99,
        })
        .unwrap();
    for (id, op) in [(1, WcOpcode::FetchAdd), (2, WcOpcode::CmpSwap)] {
        let wc = p.ccq.wait(T).unwrap();
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status, wc.byte_len),
            (id, Some(op), Status::Wc(WcStatus::Success), 8)
        );
    }
    assert_eq!(u64_at(&p.local, 0), 40);
    assert_eq!(u64_at(&p.local, 8), 7);
    assert_eq!(u64_at(&p.target, 8), 42);
    assert_eq!(u64_at(&p.target, 16), 99);
    assert!(p.scq.poll_one().is_none());
    drop(p.sqp);
}

#[test]
fn masked_atomics_and_swap() {
    masked_atomics(connected(9705, 0));
}

/// RFC 7306's masks through the API (`WorkRequest::Atomic`): Fetch and Add
/// by 32-bit fields, a Swap of the low 16 bits, a Compare and Swap that
/// compares and stores only the low octet.
fn masked_atomics(p: Pair) {
    // target[8] = 40, target[16] = 7, both host order.
    p.cqp
        .post_send(WorkRequest::Atomic {
            wr_id: 1,
            signaled: true,
            local: p.local.sge(0, 8),
            remote_stag: p.target.stag(),
            remote_to: p.target.sge(8, 8).to,
            // Low field 40 + 0xffff_ffd8 wraps to 0 without carrying.
            op: Atomic::FetchAdd {
                add: 0x0000_0005_ffff_ffd8,
                field_mask: 0x8000_0000_8000_0000,
            },
        })
        .unwrap();
    p.cqp
        .post_send(WorkRequest::Atomic {
            wr_id: 2,
            signaled: true,
            local: p.local.sge(8, 8),
            remote_stag: p.target.stag(),
            remote_to: p.target.sge(16, 8).to,
            op: Atomic::Swap {
                swap: 0xdead_beef_0000_1234,
                swap_mask: 0xffff,
            },
        })
        .unwrap();
    p.cqp
        .post_send(WorkRequest::Atomic {
            wr_id: 3,
            signaled: true,
            local: p.local.sge(16, 8),
            remote_stag: p.target.stag(),
            remote_to: p.target.sge(16, 8).to,
            // 0x1234 against 0xff34: only the low octet is compared.
            op: Atomic::CmpSwap {
                compare: 0xff34,
                compare_mask: 0xff,
                swap: 0xffff_ffff_ffff_ff56,
                swap_mask: 0xff,
            },
        })
        .unwrap();
    for (id, op) in [
        (1, WcOpcode::FetchAdd),
        (2, WcOpcode::Swap),
        (3, WcOpcode::CmpSwap),
    ] {
        let wc = p.ccq.wait(T).unwrap();
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status, wc.byte_len),
            (id, Some(op), Status::Wc(WcStatus::Success), 8)
        );
    }
    assert_eq!(u64_at(&p.local, 0), 40);
    assert_eq!(u64_at(&p.target, 8), 0x0000_0005_0000_0000);
    assert_eq!(u64_at(&p.local, 8), 7);
    assert_eq!(u64_at(&p.local, 16), 0x1234);
    assert_eq!(u64_at(&p.target, 16), 0x1256);
    assert!(p.scq.poll_one().is_none());
    drop(p.sqp);
}

fn refused(p: &Pair, remote: &iwarp::Mr, offset: u64, code: TermCode) {
    p.cqp
        .post_send(WorkRequest::FetchAdd {
            wr_id: 9,
            signaled: true,
            local: p.local.sge(0, 8),
            remote_stag: remote.stag(),
            remote_to: remote.sge(offset, 8).to,
            add: 1,
        })
        .unwrap();
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status),
        (9, Status::Wc(WcStatus::RemoteAccess))
    );
    // The responder sent the Terminate.
    let deadline = std::time::Instant::now() + T;
    let ev = loop {
        if let Some(ev) = p.sqp.poll_event() {
            break ev;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no event at the responder"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(
        matches!(ev, QpEvent::LocalError(t) if t.code == code),
        "{ev:?}"
    );
    // The local buffer was not written.
    assert_eq!(p.local.read(0, 8).unwrap(), vec![0xab; 8]);
}

#[test]
fn atomic_without_remote_atomic_access_is_refused() {
    let p = connected(9703, 0);
    refused(&p, &p.plain, 8, TermCode::RDMAP_ACCESS);
    assert_eq!(p.plain.read(8, 8).unwrap(), vec![0; 8]);
}

#[test]
fn misaligned_atomic_is_refused() {
    let p = connected(9704, 0);
    refused(&p, &p.target, 12, TermCode::RDMAP_BASE_BOUNDS);
    assert_eq!(u64_at(&p.target, 8), 40);
    assert_eq!(u64_at(&p.target, 16), 7);
}

/// The same operations between two stacks on AF_XDP, each in its own
/// network namespace over a veth (needs root; skipped without).
#[cfg(feature = "xdp")]
#[test]
fn rfc7306_over_af_xdp_in_two_namespaces() {
    use netns_harness::{End, Netns, NsPair};
    if netns_harness::skip_test_without_root() {
        return;
    }
    let net = NsPair::new("r73").unwrap();
    for end in [End::A, End::B] {
        net.veth.disable_tx_offload(end).unwrap();
    }
    let (a, b) = (&net.a, &net.b);
    let opts = |end: End, ns: &Netns, last: u8| {
        let mut o = iwarp::XdpOptions::new(net.veth.name(end), net.addr(last), 24);
        o.host.netns = Some(ns.ns_path());
        o.bind = iwarp::XskMode::Copy;
        o.ring_size = 512;
        o.rx_frames = 512;
        o.frame_count = 2048;
        o.host.tcp.rto_min = Duration::from_millis(20);
        o
    };
    for (i, port) in [9711u16, 9712].into_iter().enumerate() {
        let server = Context::af_xdp(&opts(End::A, a, 1)).unwrap();
        let client = Context::af_xdp(&opts(End::B, b, 2)).unwrap();
        let p = connected_on(server, client, port, 4);
        let st = p._ctx.0.stats().unwrap();
        assert!(matches!(st.device, iwarp::DeviceStats::Xdp(_)), "{st}");
        if i == 0 {
            write_with_immediate(p);
        } else {
            atomics(p);
        }
    }
}

/// Over DDP/SCTP (RFC 5043) on the simulated link: the same queue-pair code
/// over the segment lower layer.
#[test]
fn rfc7306_over_sctp_on_the_simulated_link() {
    let (server, client) = Context::sim_pair();
    let p = connected_over(server, client, 9721, 4, Transport::Sctp);
    let st = p._ctx.0.sctp_stats().unwrap().unwrap();
    assert_eq!(st.connections, 1, "{st:?}");
    write_with_immediate(p);
    let (server, client) = Context::sim_pair();
    atomics(connected_over(server, client, 9722, 0, Transport::Sctp));
    let (server, client) = Context::sim_pair();
    masked_atomics(connected_over(server, client, 9723, 0, Transport::Sctp));
}
