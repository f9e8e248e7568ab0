//! The iWARP engine over tcp-lite TCP over a faulty link: for many seeds, a
//! mixed workload with 5% loss, 5% reordering, 1% duplication and 0.1%
//! corruption must finish with every byte right and no hang. Odd seeds start
//! both sequence spaces within 16 KiB of 2^32, so half the runs wrap.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_proto::mem::Access;
use iwarp_proto::qp::{Sge, WcStatus, WorkRequest};
use iwarp_sim::tcp_link::{Faults, TcpSim, TcpSimConfig};
use iwarp_sim::Rng;

fn run(seed: u64) -> (u64, u64) {
    let cfg = TcpSimConfig {
        seed,
        faults: Faults {
            loss: 50,
            reorder: 50,
            dup: 10,
            corrupt: 1,
        },
        ..Default::default()
    };
    let mut s = TcpSim::new(cfg);
    assert!(
        s.run_until(200_000, |s| s.a.ready() && s.b.ready()),
        "seed {seed}: no full operation"
    );
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut src = vec![0u8; 256 << 10];
    rng.fill(&mut src);
    let mut rsrc = vec![0u8; 64 << 10];
    rng.fill(&mut rsrc);
    let l = s.a.register(src.clone(), Access::LOCAL_READ);
    let remote = s.b.register(vec![0; 256 << 10], Access::REMOTE_WRITE);
    let read_src = s.b.register(rsrc.clone(), Access::REMOTE_READ);
    let sink = s.a.register(vec![0; 64 << 10], Access::LOCAL_WRITE);
    let rbuf = s.b.register(vec![0; 16 * 4096], Access::LOCAL_WRITE);
    for i in 0..16u64 {
        s.b.post_recv(
            i,
            Sge {
                stag: rbuf,
                to: i * 4096,
                len: 4096,
            },
        )
        .unwrap();
    }
    // A mixed workload: writes to disjoint places, reads, sends.
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    let mut sends = Vec::new();
    let (mut w_at, mut r_at) = (0usize, 0usize);
    let ops = 12;
    for i in 0..ops {
        let len = rng.range(0, 30_000) as usize;
        let off = rng.range(0, (src.len() - len) as u64) as usize;
        let wr = match rng.range(0, 2) {
            0 if w_at + len <= 256 << 10 => {
                writes.push((off, w_at, len));
                w_at += len;
                WorkRequest::Write {
                    wr_id: i,
                    signaled: true,
                    local: Sge {
                        stag: l,
                        to: off as u64,
                        len: len as u32,
                    }
                    .into(),
                    remote_stag: remote,
                    remote_to: (w_at - len) as u64,
                }
            }
            1 if r_at + len.min(8000) <= 64 << 10 => {
                let len = len.min(8000);
                let roff = rng.range(0, (rsrc.len() - len) as u64) as usize;
                reads.push((roff, r_at, len));
                r_at += len;
                WorkRequest::Read {
                    wr_id: i,
                    signaled: true,
                    local: Sge {
                        stag: sink,
                        to: (r_at - len) as u64,
                        len: len as u32,
                    }
                    .into(),
                    remote_stag: read_src,
                    remote_to: roff as u64,
                }
            }
            _ => {
                let len = len.min(4096);
                sends.push((off, len));
                WorkRequest::Send {
                    wr_id: i,
                    signaled: true,
                    local: Sge {
                        stag: l,
                        to: off as u64,
                        len: len as u32,
                    }
                    .into(),
                    solicited: false,
                    invalidate: None,
                }
            }
        };
        s.a.post_send(wr).unwrap();
    }
    // A Write completes at the source once TCP has it (RFC 5040 §5.5 rule 14);
    // it is placed at the sink once TCP has delivered it, i.e. once acknowledged.
    let done = s.run_until(3_000_000, |s| {
        s.a.completions.len() == ops as usize
            && s.b.completions.len() == sends.len()
            && s.a.stack.tcp.unacked() == 0
    });
    assert!(
        done,
        "seed {seed}: hang ({} of {ops} completions, events {:?} {:?})",
        s.a.completions.len(),
        s.a.events,
        s.b.events
    );
    assert!(
        s.a.completions
            .iter()
            .enumerate()
            .all(|(i, c)| c.wr_id == i as u64 && c.status == WcStatus::Success),
        "seed {seed}"
    );
    let rm = s.b.mem.snapshot(remote).unwrap();
    for &(off, at, len) in &writes {
        if rm[at..at + len] != src[off..off + len] {
            let first = (0..len).find(|&k| rm[at + k] != src[off + k]).unwrap_or(0);
            panic!("seed {seed}: write mismatch at {at}+{first} of {len} (writes {writes:?}); got {:?} want {:?}", &rm[at + first..(at + first + 8).min(at + len)], &src[off + first..(off + first + 8).min(off + len)]);
        }
    }
    let sk = s.a.mem.snapshot(sink).unwrap();
    for &(roff, at, len) in &reads {
        assert!(
            sk[at..at + len] == rsrc[roff..roff + len],
            "seed {seed}: read mismatch"
        );
    }
    let rb = s.b.mem.snapshot(rbuf).unwrap();
    for (k, &(off, len)) in sends.iter().enumerate() {
        assert_eq!(s.b.completions[k].byte_len as usize, len);
        assert!(
            rb[k * 4096..k * 4096 + len] == src[off..off + len],
            "seed {seed}: send mismatch"
        );
    }
    assert!(
        s.a.events.is_empty() && s.b.events.is_empty(),
        "seed {seed}: {:?} {:?}",
        s.a.events,
        s.b.events
    );
    let st = s.a.stack.tcp.stats();
    (st.rto_retransmits + st.fast_retransmits, s.checksum_drops)
}

#[test]
fn thousand_seeds_with_loss_reordering_duplication_and_corruption() {
    let n: u64 = std::env::var("IWARP_TCP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let (mut rtx, mut bad) = (0, 0);
    for seed in 0..n {
        let (r, b) = run(seed);
        rtx += r;
        bad += b;
    }
    eprintln!("{n} seeds: {rtx} retransmissions by the initiator, {bad} corrupted segments dropped by checksum");
    assert!(rtx > 0 && bad > 0, "the faults must have been exercised");
}
