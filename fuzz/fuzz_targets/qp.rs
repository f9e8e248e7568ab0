//! A queue pair driven by random operations and random peer bytes: never
//! panics, never writes outside registered memory (guard regions stay intact).
#![no_main]
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::mpa::Framer;
use iwarp_proto::qp::{Qp, QpConfig, Sge, WorkRequest};
use iwarp_proto::mem::STag;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let guard_a = mem.register(pd, vec![0xa5; 64], Access::LOCAL_READ, 0).expect("reg");
    let buf = mem.register(pd, vec![0; 4096], Access::ALL, 0).expect("reg");
    let guard_b = mem.register(pd, vec![0x5a; 64], Access::LOCAL_READ, 0).expect("reg");
    let flags = data.first().copied().unwrap_or(0);
    let cfg = QpConfig {
        pd,
        ird: 2,
        ord: 2,
        mulpdu: 200 + u16::from(flags >> 4) * 50,
        crc: flags & 1 != 0,
        markers_tx: flags & 2 != 0,
        markers_rx: flags & 4 != 0,
        sq_depth: 16,
        rq_depth: 16,
    };
    let mut qp = Qp::new(cfg);
    // Peer bytes are framed properly half of the time so the fuzzer reaches DDP/RDMAP.
    let mut framer = Framer::new(cfg.crc, cfg.markers_rx);
    let mut out = Vec::new();
    for op in data.get(1..).unwrap_or(&[]).chunks(24) {
        let k = op[0] % 6;
        let n = usize::from(op.get(1).copied().unwrap_or(0));
        let sge = Sge { stag: buf, to: n as u64 * 7, len: (n * 13) as u32 };
        match k {
            0 => { let _ = qp.post_recv(&mem, n as u64, sge); }
            1 => { let _ = qp.post_send(&mem, WorkRequest::Write { wr_id: 1, signaled: true, local: sge.into(), remote_stag: STag(n as u32), remote_to: 0 }); }
            2 => { let _ = qp.post_send(&mem, WorkRequest::Read { wr_id: 2, signaled: true, local: sge.into(), remote_stag: STag(n as u32), remote_to: 0 }); }
            3 => { let _ = qp.post_send(&mem, WorkRequest::Send { wr_id: 3, signaled: true, local: sge.into(), solicited: n & 1 != 0, invalidate: (n & 2 != 0).then_some(buf) }); }
            4 => {
                let mut seg = Vec::new();
                let _ = framer.emit(&[&op[1..]], &mut seg);
                qp.receive(&seg, &mut mem);
            }
            _ => qp.receive(&op[1..], &mut mem),
        }
        out.clear();
        qp.poll_transmit(&mem, &mut out, 1500, usize::MAX);
        while qp.poll_completion().is_some() {}
        while qp.poll_event().is_some() {}
    }
    assert!(mem.snapshot(guard_a).expect("guard").iter().all(|b| *b == 0xa5));
    assert!(mem.snapshot(guard_b).expect("guard").iter().all(|b| *b == 0x5a));
});
