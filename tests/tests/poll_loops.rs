//! Two pinned poll loops, one per host, joined by an in-memory frame link:
//! the application thread posts through the lock-free queue and polls
//! completions back; 8 MiB of RDMA Writes and a Send arrive intact.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use iwarp_control::MpaConfig;
use iwarp_datapath::link::{MemDevice, TcpHost};
use iwarp_datapath::over_tcp::{HostCommand, HostOutput, IwarpOverTcp, Role};
use iwarp_datapath::runtime::{spawn, Mode};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::qp::{Sge, WcOpcode, WcStatus, WorkRequest};
use tcp_lite::tcp::{Config, Connection};
use tcp_lite::wire::{Ipv4Address, TcpPacket, TcpRepr};

#[test]
fn two_pinned_loops_move_eight_mebibytes() {
    let cfg = Config {
        rto_min: 5_000_000,
        rto_initial: 50_000_000,
        ..Config::default()
    };
    let (ip_a, ip_b) = ([10, 1, 0, 1], [10, 1, 0, 2]);
    let mut tcp_a = Connection::connect(cfg, 40000, 7174, 1234);
    let mut syn = Vec::new();
    tcp_a.poll_transmit(0, 1, &mut |r| {
        syn = vec![0; r.buffer_len()];
        r.emit(
            &mut TcpPacket::new_unchecked(&mut syn[..]),
            &Ipv4Address(ip_a),
            &Ipv4Address(ip_b),
        )
        .unwrap();
    });
    let syn_r = TcpRepr::parse(
        &TcpPacket::new_checked(&syn[..]).unwrap(),
        &Ipv4Address(ip_a),
        &Ipv4Address(ip_b),
    )
    .unwrap();
    let tcp_b = Connection::accept(cfg, &syn_r, 99);

    const LEN: usize = 8 << 20;
    const CHUNK: usize = 256 << 10;
    let data: Vec<u8> = (0..LEN).map(|i| (i * 131 % 251) as u8).collect();
    let mut mem_a = MemoryTable::new();
    let pd_a = mem_a.alloc_pd();
    let src = mem_a
        .register(pd_a, data.clone(), Access::LOCAL_READ, 0)
        .unwrap();
    let msg = mem_a
        .register(pd_a, b"done".to_vec(), Access::LOCAL_READ, 0)
        .unwrap();
    let mut mem_b = MemoryTable::new();
    let pd_b = mem_b.alloc_pd();
    let dst = mem_b
        .register(pd_b, vec![0; LEN], Access::REMOTE_WRITE, 0)
        .unwrap();
    let rbuf = mem_b
        .register(pd_b, vec![0; 16], Access::LOCAL_WRITE, 0)
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
    let host_a = TcpHost::new(
        IwarpOverTcp::new(tcp_a, Role::Initiator, mpa.clone(), params(pd_a)),
        mem_a,
        ip_a,
        ip_b,
    );
    let host_b = TcpHost::new(
        IwarpOverTcp::new(tcp_b, Role::Responder, mpa, params(pd_b)),
        mem_b,
        ip_b,
        ip_a,
    );
    let (dev_a, dev_b) = MemDevice::pair(4096);
    let mode = Mode::Adaptive {
        spins: 2000,
        max_sleep: Duration::from_micros(200),
    };
    let a = spawn(host_a, dev_a, Some(0), mode, 1024);
    let b = spawn(host_b, dev_b, Some(1), mode, 1024);
    let start = Instant::now();

    b.post(HostCommand::PostRecv(
        7,
        Sge {
            stag: rbuf,
            to: 0,
            len: 16,
        }
        .into(),
    ))
    .unwrap();
    for i in 0..LEN / CHUNK {
        let off = (i * CHUNK) as u64;
        let wr = WorkRequest::Write {
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
        };
        a.post(HostCommand::PostSend(wr)).unwrap();
    }
    a.post(HostCommand::PostSend(WorkRequest::Send {
        wr_id: 1000,
        signaled: true,
        local: Sge {
            stag: msg,
            to: 0,
            len: 4,
        }
        .into(),
        solicited: true,
        invalidate: None,
    }))
    .unwrap();

    // Bounded wait for the Send to arrive at b (it follows every Write).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = None;
    let mut a_done = Vec::new();
    while got.is_none() && Instant::now() < deadline {
        if let Some(o) = b.poll() {
            got = Some(o);
        }
        while let Some(o) = a.poll() {
            a_done.push(o);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let elapsed = start.elapsed();
    let got = got.expect("the Send did not arrive within 60 s");
    match got {
        HostOutput::Completion(c) => {
            assert_eq!(
                (c.wr_id, c.opcode, c.status, c.byte_len, c.solicited),
                (7, WcOpcode::Recv, WcStatus::Success, 4, true)
            )
        }
        o => panic!("unexpected output at b: {o:?}"),
    }
    let (hb, sb) = b.stop().unwrap();
    let (_ha, sa) = a.stop().unwrap();
    assert!(
        hb.mem.snapshot(dst).unwrap() == data[..],
        "written data differs"
    );
    assert_eq!(&hb.mem.snapshot(rbuf).unwrap()[..4], b"done");
    assert!(
        a_done
            .iter()
            .all(|o| matches!(o, HostOutput::Completion(c) if c.status == WcStatus::Success)),
        "{a_done:?}"
    );
    eprintln!(
        "8 MiB over two pinned loops in {elapsed:?} ({:.0} MB/s); pinned {}/{}; frames a tx {} rx {}, sleeps a {} b {}",
        LEN as f64 / elapsed.as_secs_f64() / 1e6,
        sa.pinned,
        sb.pinned,
        sa.tx_frames,
        sa.rx_frames,
        sa.sleeps,
        sb.sleeps
    );
}
