//! Randomized end-to-end runs: for many seeds, a mix of every operation in
//! both directions, sizes from 0 B to 1 MiB, CRC on and off, markers off, on
//! and one-way, with the stream delivered in pieces of random size (down to a
//! single octet). Every placed byte, every received message and the order of
//! every completion are checked against a model.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::MpaConfig;
use iwarp_proto::mem::{Access, STag};
use iwarp_proto::qp::{Sge, WcOpcode, WcStatus, WorkRequest};
use iwarp_sim::{Node, Rng, Sim, SimConfig};

const REMOTE: usize = 3 << 20;
const READ_SRC: usize = 1 << 20;
const RECV_SLOT: usize = 64 << 10;
const RECV_SLOTS: usize = 64;

struct Side {
    src: STag,
    src_data: Vec<u8>,
    remote: STag,
    read_src: STag,
    read_data: Vec<u8>,
    sink: STag,
    recv: STag,
    inval: Vec<STag>,
}

fn setup(n: &mut Node, rng: &mut Rng) -> Side {
    let mut src_data = vec![0u8; 2 << 20];
    rng.fill(&mut src_data);
    let mut read_data = vec![0u8; READ_SRC];
    rng.fill(&mut read_data);
    let src = n.register_buf(src_data.clone(), Access::LOCAL_READ, 0);
    let remote = n.register_buf(vec![0; REMOTE], Access::REMOTE_WRITE, 0x7000_0000_0000);
    let read_src = n.register_buf(read_data.clone(), Access::REMOTE_READ, 0x10);
    let sink = n.register(REMOTE, Access::LOCAL_WRITE);
    let recv = n.register(RECV_SLOT * RECV_SLOTS, Access::LOCAL_WRITE);
    let inval = (0..8)
        .map(|_| n.register(16, Access::REMOTE_WRITE))
        .collect();
    Side {
        src,
        src_data,
        remote,
        read_src,
        read_data,
        sink,
        recv,
        inval,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        off: usize,
        len: usize,
        at: usize,
    },
    Read {
        off: usize,
        len: usize,
        at: usize,
    },
    Send {
        off: usize,
        len: usize,
        se: bool,
        inval: Option<usize>,
    },
}

fn size(rng: &mut Rng, big: &mut bool) -> usize {
    match rng.range(0, 20) {
        0 => 0,
        1..=8 => rng.range(1, 64) as usize,
        9..=15 => rng.range(65, 4096) as usize,
        16..=18 => rng.range(4097, 60_000) as usize,
        _ if *big => rng.range(60_001, 200_000) as usize,
        _ => {
            *big = true;
            1 << 20
        }
    }
}

struct Plan {
    ops: Vec<Op>,
}

fn plan(rng: &mut Rng, count: usize) -> Plan {
    let mut ops = Vec::new();
    let mut write_at = 0usize;
    let mut read_at = 0usize;
    let mut big = false;
    let mut inval_next = 0;
    for _ in 0..count {
        let len = size(rng, &mut big);
        let off = rng.range(0, ((2 << 20) - len) as u64) as usize;
        match rng.range(0, 5) {
            0 | 1 if write_at + len <= REMOTE => {
                ops.push(Op::Write {
                    off,
                    len,
                    at: write_at,
                });
                write_at += len;
            }
            2 if read_at + len <= REMOTE && len <= READ_SRC => {
                let off = rng.range(0, (READ_SRC - len) as u64) as usize;
                ops.push(Op::Read {
                    off,
                    len,
                    at: read_at,
                });
                read_at += len;
            }
            _ => {
                let len = len.min(RECV_SLOT);
                let inval = if inval_next < 8 && rng.chance(1, 4) {
                    inval_next += 1;
                    Some(inval_next - 1)
                } else {
                    None
                };
                ops.push(Op::Send {
                    off,
                    len,
                    se: rng.chance(1, 2),
                    inval,
                });
            }
        }
    }
    Plan { ops }
}

fn post(from: &mut Node, me: &Side, peer: &Side, plan: &Plan) {
    for (i, op) in plan.ops.iter().enumerate() {
        let wr = match *op {
            Op::Write { off, len, at } => WorkRequest::Write {
                wr_id: i as u64,
                signaled: true,
                local: Sge {
                    stag: me.src,
                    to: off as u64,
                    len: len as u32,
                }
                .into(),
                remote_stag: peer.remote,
                remote_to: 0x7000_0000_0000 + at as u64,
            },
            Op::Read { off, len, at } => WorkRequest::Read {
                wr_id: i as u64,
                signaled: true,
                local: Sge {
                    stag: me.sink,
                    to: at as u64,
                    len: len as u32,
                }
                .into(),
                remote_stag: peer.read_src,
                remote_to: 0x10 + off as u64,
            },
            Op::Send {
                off,
                len,
                se,
                inval,
            } => WorkRequest::Send {
                wr_id: i as u64,
                signaled: true,
                local: Sge {
                    stag: me.src,
                    to: off as u64,
                    len: len as u32,
                }
                .into(),
                solicited: se,
                invalidate: inval.map(|k| peer.inval[k]),
            },
        };
        from.post_send(wr).expect("post");
    }
}

fn post_recvs(n: &mut Node, me: &Side, count: usize) {
    for i in 0..count {
        n.post_recv(
            i as u64,
            Sge {
                stag: me.recv,
                to: ((i % RECV_SLOTS) * RECV_SLOT) as u64,
                len: RECV_SLOT as u32,
            },
        )
        .expect("post recv");
    }
}

/// Check what `sender` did to `receiver`, by the plan.
fn verify(tag: &str, sender: &Node, s: &Side, receiver: &Node, r: &Side, plan: &Plan) {
    // Sender completions: every op, in order, successful.
    let c: Vec<_> = sender
        .completions
        .iter()
        .filter(|c| c.opcode != WcOpcode::Recv)
        .collect();
    assert_eq!(
        c.len(),
        plan.ops.len(),
        "{tag}: completions {:?}",
        sender.events
    );
    for (i, (op, c)) in plan.ops.iter().zip(&c).enumerate() {
        assert_eq!(c.wr_id, i as u64, "{tag}: order");
        assert_eq!(c.status, WcStatus::Success, "{tag}: op {i} {op:?}");
        let want = match op {
            Op::Write { .. } => WcOpcode::Write,
            Op::Read { .. } => WcOpcode::Read,
            Op::Send { .. } => WcOpcode::Send,
        };
        assert_eq!(c.opcode, want);
    }
    let remote = receiver.mem.snapshot(r.remote).unwrap();
    let sink = sender.mem.snapshot(s.sink).unwrap();
    let recvs: Vec<_> = receiver
        .completions
        .iter()
        .filter(|c| c.opcode == WcOpcode::Recv)
        .collect();
    let recv_mem = receiver.mem.snapshot(r.recv).unwrap();
    let mut k = 0;
    let mut write_end = 0;
    for op in &plan.ops {
        match *op {
            Op::Write { off, len, at } => {
                assert_eq!(
                    &remote[at..at + len],
                    &s.src_data[off..off + len],
                    "{tag}: write at {at}"
                );
                write_end = at + len;
            }
            Op::Read { off, len, at } => {
                assert_eq!(
                    &sink[at..at + len],
                    &r.read_data[off..off + len],
                    "{tag}: read at {at}"
                );
            }
            Op::Send {
                off,
                len,
                se,
                inval,
            } => {
                let c = recvs[k];
                assert_eq!(
                    (c.wr_id, c.status, c.byte_len as usize, c.solicited),
                    (k as u64, WcStatus::Success, len, se),
                    "{tag}"
                );
                assert_eq!(c.invalidated, inval.map(|i| r.inval[i]));
                if let Some(i) = inval {
                    assert!(!receiver.mem.is_valid(r.inval[i]));
                }
                let slot = (k % RECV_SLOTS) * RECV_SLOT;
                // Slots are reused after RECV_SLOTS messages; check only the latest user.
                let last_user = plan
                    .ops
                    .iter()
                    .filter(|o| matches!(o, Op::Send { .. }))
                    .count();
                if k + RECV_SLOTS >= last_user {
                    assert_eq!(
                        &recv_mem[slot..slot + len],
                        &s.src_data[off..off + len],
                        "{tag}: send {k}"
                    );
                }
                k += 1;
            }
        }
    }
    assert_eq!(recvs.len(), k, "{tag}: receive count");
    // Nothing beyond the written range changed.
    assert!(
        remote[write_end..].iter().all(|b| *b == 0),
        "{tag}: stray bytes past the writes"
    );
}

/// What one seed exercised.
#[derive(Default, Debug)]
struct Covered {
    mib_ops: usize,
    zero_ops: usize,
    bytes_placed: u64,
    fpdus: u64,
}

fn run_seed(seed: u64, cov: &mut Covered) {
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let crc = seed.is_multiple_of(2);
    let (ma, mb) = match seed % 4 {
        0 => (false, false),
        1 => (true, true),
        2 => (true, false),
        _ => (false, true),
    };
    let emss = [536u16, 1448, 1460, 8960][(seed / 4 % 4) as usize];
    let max_piece = match seed % 5 {
        0 => 3,
        1 => 17,
        2 => 700,
        3 => 1500,
        _ => 65536,
    };
    let cfg = SimConfig {
        seed,
        emss,
        max_piece,
        initiator: MpaConfig {
            crc,
            markers_rx: ma,
            ird: 4,
            ord: 4,
            ..Default::default()
        },
        responder: MpaConfig {
            markers_rx: mb,
            ird: 4,
            ord: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    let tag =
        format!("seed {seed} crc {crc} markers a<-{ma} b<-{mb} emss {emss} piece {max_piece}");
    let mut s = Sim::new(cfg);
    s.connect().expect("connect");
    let sa = setup(&mut s.a, &mut rng);
    let sb = setup(&mut s.b, &mut rng);
    let pa = plan(&mut rng, 40);
    let pb = plan(&mut rng, 40);
    let sends = |p: &Plan| {
        p.ops
            .iter()
            .filter(|o| matches!(o, Op::Send { .. }))
            .count()
    };
    post_recvs(&mut s.b, &sb, sends(&pa));
    post_recvs(&mut s.a, &sa, sends(&pb));
    post(&mut s.a, &sa, &sb, &pa);
    post(&mut s.b, &sb, &sa, &pb);
    s.run_until_idle(5_000_000)
        .unwrap_or_else(|e| panic!("{tag}: {e:?}"));
    assert!(
        s.a.events.is_empty() && s.b.events.is_empty(),
        "{tag}: {:?} {:?}",
        s.a.events,
        s.b.events
    );
    // Every FPDU fits one TCP segment of the EMSS (MULPDU from the EMSS, wire-facts.md).
    assert!(
        s.max_segment <= usize::from(emss),
        "{tag}: segment of {} octets",
        s.max_segment
    );
    verify(&format!("{tag} a->b"), &s.a, &sa, &s.b, &sb, &pa);
    verify(&format!("{tag} b->a"), &s.b, &sb, &s.a, &sa, &pb);
    for op in pa.ops.iter().chain(&pb.ops) {
        let len = match *op {
            Op::Write { len, .. } | Op::Read { len, .. } | Op::Send { len, .. } => len,
        };
        cov.mib_ops += usize::from(len == 1 << 20);
        cov.zero_ops += usize::from(len == 0);
    }
    let (qa, qb) = (s.a.qp().stats(), s.b.qp().stats());
    cov.bytes_placed += qa.bytes_placed + qb.bytes_placed;
    cov.fpdus += qa.fpdus_rx + qb.fpdus_rx;
}

#[test]
fn many_seeds() {
    let n: u64 = std::env::var("IWARP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut cov = Covered::default();
    for seed in 0..n {
        run_seed(seed, &mut cov);
    }
    eprintln!("random mix over {n} seeds: {cov:?}");
    // The mix must really contain the extremes it claims to cover.
    assert!(cov.mib_ops > 0 && cov.zero_ops > 0, "{cov:?}");
}
