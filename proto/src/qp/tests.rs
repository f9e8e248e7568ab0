//! Unit tests of the verbs features of [`Qp`]: scatter/gather lists,
//! signaled and unsignaled requests, memory windows through the wire,
//! shared receive queues and completion statuses. Two QPs talk through
//! `poll_transmit` / `receive`; Terminate cases follow
//! `tests/tests/terminate.rs`: the offending request, the Terminate both
//! sides see, and memory that did not change.

use super::*;
use crate::mem::{Access, MemoryTable, PdId, STag};
use crate::wire::ddp::{DdpControl, RdmapControl, TaggedHeader};
use proptest::prelude::*;

const MR_BASE: u64 = 0x5000;

fn cfg(pd: PdId, mulpdu: u16) -> QpConfig {
    QpConfig {
        pd,
        ird: 4,
        ord: 4,
        mulpdu,
        crc: true,
        markers_tx: false,
        markers_rx: false,
        sq_depth: 64,
        rq_depth: 64,
    }
}

struct End {
    mem: MemoryTable,
    pd: PdId,
    qp: Qp,
}

impl End {
    fn new(mulpdu: u16) -> End {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        End {
            qp: Qp::new(cfg(pd, mulpdu)),
            mem,
            pd,
        }
    }
    fn reg(&mut self, buf: Vec<u8>, access: Access) -> STag {
        self.mem.register(self.pd, buf, access, 0).unwrap()
    }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(salt))
        .collect()
}

fn sge(stag: STag, to: u64, len: u32) -> Sge {
    Sge { stag, to, len }
}

/// Move what `from` transmits into `to`, in pieces of at most `cut` octets.
fn xfer(
    from: &mut Qp,
    fmem: &MemoryTable,
    to: &mut Qp,
    tmem: &mut MemoryTable,
    cut: usize,
) -> bool {
    let mut out = Vec::new();
    from.poll_transmit(fmem, &mut out, usize::MAX, usize::MAX);
    for piece in out.chunks(cut.max(1)) {
        to.receive(piece, tmem);
    }
    !out.is_empty()
}

fn pump_raw(qa: &mut Qp, ma: &mut MemoryTable, qb: &mut Qp, mb: &mut MemoryTable, cut: usize) {
    for _ in 0..100_000 {
        let x = xfer(qa, ma, qb, mb, cut);
        let y = xfer(qb, mb, qa, ma, cut);
        if !x && !y {
            return;
        }
    }
    panic!("no quiescence");
}

fn pump(a: &mut End, b: &mut End) {
    pump_raw(&mut a.qp, &mut a.mem, &mut b.qp, &mut b.mem, usize::MAX);
}

fn comps(q: &mut Qp) -> Vec<Completion> {
    core::iter::from_fn(|| q.poll_completion()).collect()
}

fn events(q: &mut Qp) -> Vec<QpEvent> {
    core::iter::from_fn(|| q.poll_event()).collect()
}

fn statuses(c: &[Completion]) -> Vec<(u64, WcStatus)> {
    c.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// Run until idle; return the Terminate `a` received after checking that `b`
/// reported the same one and went to error.
fn terminate_seen(a: &mut End, b: &mut End) -> TerminateRepr {
    terminate_seen_by(a, b, true)
}

/// The same, with `a` the one that detects the error when `!peer_detects`.
fn terminate_seen_by(a: &mut End, b: &mut End, peer_detects: bool) -> TerminateRepr {
    pump(a, b);
    if !peer_detects {
        return terminate_seen_by(b, a, true);
    }
    let ea = events(&mut a.qp);
    let eb = events(&mut b.qp);
    let got = ea
        .iter()
        .find_map(|e| match e {
            QpEvent::TerminateReceived(t) => Some(*t),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Terminate reached a; b events {eb:?}"));
    assert!(eb.contains(&QpEvent::LocalError(got)), "{eb:?}");
    assert!(eb.contains(&QpEvent::TerminateSent(got)), "{eb:?}");
    assert_eq!(b.qp.state(), QpState::Error);
    assert_eq!(a.qp.state(), QpState::Error);
    // A post after it names the Terminate, from either end.
    let (rx, tx) = (
        DisconnectCause::TerminateReceived(got.code),
        DisconnectCause::TerminateSent(got.code),
    );
    assert_eq!(a.qp.disconnect_cause(), Some(rx));
    assert_eq!(b.qp.disconnect_cause(), Some(tx));
    let empty = SgList::default();
    assert_eq!(
        a.qp.post_send(&a.mem, send(u64::MAX, empty, None)),
        Err(PostError::Disconnected(rx))
    );
    assert_eq!(
        b.qp.post_send(&b.mem, send(u64::MAX, empty, None)),
        Err(PostError::Disconnected(tx))
    );
    got
}

fn write(wr_id: u64, local: impl Into<SgList>, remote_stag: STag, remote_to: u64) -> WorkRequest {
    WorkRequest::Write {
        wr_id,
        signaled: true,
        local: local.into(),
        remote_stag,
        remote_to,
    }
}

fn read(wr_id: u64, local: impl Into<SgList>, remote_stag: STag, remote_to: u64) -> WorkRequest {
    WorkRequest::Read {
        wr_id,
        signaled: true,
        local: local.into(),
        remote_stag,
        remote_to,
    }
}

fn send(wr_id: u64, local: impl Into<SgList>, invalidate: Option<STag>) -> WorkRequest {
    WorkRequest::Send {
        wr_id,
        signaled: true,
        local: local.into(),
        solicited: false,
        invalidate,
    }
}

fn unsignaled(wr: WorkRequest) -> WorkRequest {
    wr.with_signaled(false)
}

// ---------------------------------------------------------------- SgList

#[test]
fn sglist_limits_and_length() {
    let s = sge(STag(0x100), 0, 10);
    assert_eq!(SgList::new(&[s; 5]), Err(PostError::TooManySge));
    let l = SgList::new(&[s; 4]).unwrap();
    assert_eq!((l.num_sge(), l.total_len()), (4, 40));
    assert_eq!(l.as_slice(), &[s; 4]);
    let mut full = l;
    assert_eq!(full.push(s), Err(PostError::TooManySge));
    let big = sge(STag(0x200), 0, u32::MAX);
    assert_eq!(SgList::new(&[big]).map(|l| l.total_len()), Ok(u32::MAX));
    assert_eq!(
        SgList::new(&[big, sge(STag(0x100), 0, 1)]),
        Err(PostError::TooLong)
    );
    assert_eq!(SgList::new(&[s, big]), Err(PostError::TooLong));
    assert_eq!(SgList::from(s).as_slice(), &[s]);
    assert_eq!(SgList::EMPTY.total_len(), 0);
    assert_eq!(SgList::new(&[]), Ok(SgList::EMPTY));
    assert_eq!(SgList::default(), SgList::EMPTY);
}

/// Where each message octet lands: (region index, offset) for a list of
/// (region index, offset, len).
fn scatter_model(images: &mut [Vec<u8>], list: &[(usize, u64, u32)], msg: &[u8]) {
    let mut k = 0;
    for &(r, off, len) in list {
        for i in 0..len as usize {
            if k == msg.len() {
                return;
            }
            images[r][off as usize + i] = msg[k];
            k += 1;
        }
    }
}

fn gather_model(images: &[Vec<u8>], list: &[(usize, u64, u32)]) -> Vec<u8> {
    list.iter()
        .flat_map(|&(r, off, len)| images[r][off as usize..(off + len as u64) as usize].to_vec())
        .collect()
}

const REGION: usize = 1024;

/// Send, Write and Read with `gather` as a's local list and `scatter` as
/// b's receive list / a's Read sink list, over `mulpdu` and stream `cut`.
fn sgl_round(gather: &[(usize, u64, u32)], scatter: &[(usize, u64, u32)], mulpdu: u16, cut: usize) {
    let mut a = End::new(mulpdu);
    let mut b = End::new(mulpdu);
    let src_img = [pattern(REGION, 1), pattern(REGION, 2)];
    let src = [
        a.reg(src_img[0].clone(), Access::LOCAL_READ),
        a.reg(src_img[1].clone(), Access::LOCAL_READ),
    ];
    let sink = [
        a.reg(vec![0xee; REGION], Access::LOCAL_WRITE),
        a.reg(vec![0xee; REGION], Access::LOCAL_WRITE),
    ];
    let rbuf = [
        b.reg(vec![0xdd; REGION], Access::LOCAL_WRITE),
        b.reg(vec![0xdd; REGION], Access::LOCAL_WRITE),
    ];
    let rsrc_img = pattern(4 * REGION, 3);
    let rsrc = b
        .mem
        .register(b.pd, rsrc_img.clone(), Access::REMOTE_READ, 0x9000)
        .unwrap();
    let rdst = b
        .mem
        .register(b.pd, vec![0xcc; 4 * REGION], Access::REMOTE_WRITE, 0x7000)
        .unwrap();
    let to_sgl = |stags: &[STag; 2], list: &[(usize, u64, u32)]| {
        let v: Vec<Sge> = list
            .iter()
            .map(|&(r, off, len)| sge(stags[r], off, len))
            .collect();
        SgList::new(&v).unwrap()
    };
    let g = to_sgl(&src, gather);
    let s_recv = to_sgl(&rbuf, scatter);
    let s_read = to_sgl(&sink, scatter);
    let msg = gather_model(&src_img, gather);
    assert!(msg.len() <= s_recv.total_len() as usize);
    b.qp.post_recv(&b.mem, 77, s_recv).unwrap();
    a.qp.post_send(&a.mem, send(1, g, None)).unwrap();
    a.qp.post_send(&a.mem, write(2, g, rdst, 0x7000 + 5))
        .unwrap();
    a.qp.post_send(&a.mem, read(3, s_read, rsrc, 0x9000 + 11))
        .unwrap();
    pump_raw(&mut a.qp, &mut a.mem, &mut b.qp, &mut b.mem, cut);

    let n = msg.len() as u32;
    let t = s_read.total_len();
    let ca = comps(&mut a.qp);
    assert_eq!(
        ca.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::Send, WcStatus::Success, n),
            (2, WcOpcode::Write, WcStatus::Success, n),
            (3, WcOpcode::Read, WcStatus::Success, t),
        ]
    );
    let cb = comps(&mut b.qp);
    assert_eq!(
        cb.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(77, WcOpcode::Recv, WcStatus::Success, n)]
    );
    // Send: scattered over b's receive list, nothing else touched.
    let mut want = vec![vec![0xdd; REGION], vec![0xdd; REGION]];
    scatter_model(&mut want, scatter, &msg);
    assert_eq!(b.mem.snapshot(rbuf[0]).unwrap(), &want[0][..]);
    assert_eq!(b.mem.snapshot(rbuf[1]).unwrap(), &want[1][..]);
    // Write: gathered, contiguous at the remote TO.
    let mut wd = vec![0xcc; 4 * REGION];
    wd[5..5 + msg.len()].copy_from_slice(&msg);
    assert_eq!(b.mem.snapshot(rdst).unwrap(), &wd[..]);
    // Read: the response scattered over a's sink list.
    let mut want = vec![vec![0xee; REGION], vec![0xee; REGION]];
    scatter_model(&mut want, scatter, &rsrc_img[11..11 + t as usize]);
    assert_eq!(a.mem.snapshot(sink[0]).unwrap(), &want[0][..]);
    assert_eq!(a.mem.snapshot(sink[1]).unwrap(), &want[1][..]);
    assert!(events(&mut a.qp).is_empty() && events(&mut b.qp).is_empty());
}

#[test]
fn segments_gather_and_scatter_across_entries() {
    // 90 octets from four entries (one empty) into 99 octets of four others;
    // 52-octet Send payloads and 56-octet tagged payloads straddle entries on
    // both sides.
    sgl_round(
        &[(0, 3, 7), (1, 10, 50), (0, 0, 0), (0, 60, 33)],
        &[(0, 5, 20), (1, 0, 5), (0, 40, 24), (1, 10, 50)],
        QpConfig::MIN_MULPDU,
        7,
    );
    // One entry each: the plain case.
    sgl_round(&[(0, 0, 1000)], &[(1, 24, 1000)], 1000, 3000);
    // Zero-length message.
    sgl_round(&[(0, 0, 0)], &[(0, 0, 0)], 200, 1);
}

fn entries() -> impl Strategy<Value = Vec<(usize, u64, u32)>> {
    prop::collection::vec((0usize..2, 0u64..200, 0u32..200), 1..=MAX_SGE)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Any lists, any MULPDU, any stream cut: the receiver sees exactly the
    /// concatenation, laid out over its list, and nothing else changes.
    #[test]
    fn scatter_gather_matches_the_model(
        gather in entries(),
        mut scatter in entries(),
        mulpdu in QpConfig::MIN_MULPDU..400,
        cut in 1usize..2000,
    ) {
        let need: u32 = gather.iter().map(|e| e.2).sum();
        let have: u32 = scatter.iter().map(|e| e.2).sum();
        if have < need {
            // Room for the whole message (a region holds REGION = 1024 octets).
            if let Some(last) = scatter.last_mut() {
                last.2 += need - have;
            }
        }
        sgl_round(&gather, &scatter, mulpdu, cut);
    }
}

#[test]
fn post_checks_every_entry() {
    let mut a = End::new(200);
    let ok = a.reg(vec![0; 64], Access::LOCAL_READ | Access::LOCAL_WRITE);
    let ro = a.reg(vec![0; 64], Access::LOCAL_READ);
    let good = sge(ok, 0, 64);
    let bad = SgList::new(&[good, sge(STag(0x0bad_0000), 0, 4)]).unwrap();
    assert_eq!(
        a.qp.post_send(&a.mem, send(1, bad, None)),
        Err(PostError::Local(AccessError::InvalidStag))
    );
    let no_write = SgList::new(&[good, sge(ro, 0, 4)]).unwrap();
    assert_eq!(
        a.qp.post_send(&a.mem, read(2, no_write, STag(0x100), 0)),
        Err(PostError::Local(AccessError::Access))
    );
    assert_eq!(
        a.qp.post_recv(&a.mem, 3, no_write),
        Err(PostError::Local(AccessError::Access))
    );
    let beyond = SgList::new(&[good, sge(ok, 60, 8)]).unwrap();
    assert_eq!(
        a.qp.post_send(&a.mem, write(4, beyond, STag(0x100), 0)),
        Err(PostError::Local(AccessError::Bounds))
    );
    // Zero-length entries are never validated (RFC 5041 §5.2).
    let with_empty = SgList::new(&[good, sge(STag(0x0bad_0000), 0, 0)]).unwrap();
    assert_eq!(a.qp.post_send(&a.mem, send(5, with_empty, None)), Ok(()));
    assert_eq!(a.qp.post_recv(&a.mem, 6, with_empty), Ok(()));
}

#[test]
fn entry_that_goes_away_fails_the_segment_that_reaches_it() {
    let mut a = End::new(QpConfig::MIN_MULPDU);
    let mut b = End::new(QpConfig::MIN_MULPDU);
    let s1 = a.reg(pattern(100, 1), Access::LOCAL_READ);
    let s2 = a.reg(pattern(100, 2), Access::LOCAL_READ);
    let dst = b.reg(vec![0; 300], Access::REMOTE_WRITE);
    let list = SgList::new(&[sge(s1, 0, 100), sge(s2, 0, 100)]).unwrap();
    a.qp.post_send(&a.mem, write(1, list, dst, 0)).unwrap();
    a.mem.deregister(s2).unwrap();
    let t = terminate_seen_by(&mut a, &mut b, false);
    // RFC 5040 §7.1 case 1: no headers.
    assert_eq!(t, TerminateRepr::bare(TermCode::RDMAP_LOCAL_CATASTROPHIC));
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::LocalProtection(AccessError::InvalidStag))]
    );
    // The segments from the first entry went out (56 octets each) before the
    // one reaching into the second entry failed.
    let got = b.mem.snapshot(dst).unwrap();
    assert_eq!(&got[..56], &pattern(100, 1)[..56]);
    assert!(got[112..].iter().all(|b| *b == 0));
}

#[test]
fn send_longer_than_the_receive_list_is_a_length_error() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let src = a.reg(pattern(40, 1), Access::LOCAL_READ);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    let list = SgList::new(&[sge(r, 0, 10), sge(r, 30, 20)]).unwrap();
    b.qp.post_recv(&b.mem, 9, list).unwrap();
    b.qp.post_recv(&b.mem, 10, sge(r, 0, 64)).unwrap();
    a.qp.post_send(&a.mem, send(1, sge(src, 0, 40), None))
        .unwrap();
    let t = terminate_seen(&mut a, &mut b);
    assert_eq!(t.code, TermCode::DDP_U_TOO_LONG);
    assert_eq!(
        statuses(&comps(&mut b.qp)),
        vec![(9, WcStatus::LocalLength), (10, WcStatus::Flushed)]
    );
}

#[test]
fn vanished_receive_buffer_completes_with_local_protection() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let src = a.reg(pattern(8, 1), Access::LOCAL_READ);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 4, sge(r, 0, 64)).unwrap();
    b.mem.deregister(r).unwrap();
    a.qp.post_send(&a.mem, send(1, sge(src, 0, 8), None))
        .unwrap();
    let t = terminate_seen(&mut a, &mut b);
    assert_eq!(t, TerminateRepr::bare(TermCode::DDP_LOCAL_CATASTROPHIC));
    assert_eq!(
        statuses(&comps(&mut b.qp)),
        vec![(4, WcStatus::LocalProtection(AccessError::InvalidStag))]
    );
}

// ---------------------------------------------------------------- signaled

#[test]
fn unsignaled_success_is_silent_but_keeps_its_place() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let src = a.reg(pattern(64, 1), Access::LOCAL_READ);
    let sink = a.reg(vec![0; 64], Access::LOCAL_WRITE);
    let dst = b.reg(vec![0; 64], Access::REMOTE_WRITE | Access::REMOTE_READ);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 50, sge(r, 0, 64)).unwrap();
    b.qp.post_recv(&b.mem, 51, sge(r, 0, 64)).unwrap();
    a.qp.post_send(&a.mem, unsignaled(write(1, sge(src, 0, 16), dst, 0)))
        .unwrap();
    a.qp.post_send(&a.mem, unsignaled(send(2, sge(src, 0, 4), None)))
        .unwrap();
    a.qp.post_send(&a.mem, unsignaled(read(3, sge(sink, 0, 16), dst, 0)))
        .unwrap();
    a.qp.post_send(&a.mem, send(4, sge(src, 4, 4), None))
        .unwrap();
    // Everything is on the wire, the Send too, but its completion waits for
    // the unsignaled Read ahead of it (RFC 5040 §5.5 rules 15, 19).
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    assert!(comps(&mut a.qp).is_empty());
    b.qp.receive(&out, &mut b.mem);
    pump(&mut a, &mut b);
    let c = comps(&mut a.qp);
    assert_eq!(statuses(&c), vec![(4, WcStatus::Success)]);
    assert_eq!(c[0].byte_len, 4);
    assert_eq!(&a.mem.snapshot(sink).unwrap()[..16], &pattern(64, 1)[..16]);
    assert_eq!(comps(&mut b.qp).len(), 2);
}

#[test]
fn each_completion_carries_its_own_requests_tag() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let src = a.reg(pattern(64, 1), Access::LOCAL_READ);
    let sink = a.reg(vec![0; 64], Access::LOCAL_WRITE);
    let dst = b.reg(vec![0; 64], Access::REMOTE_WRITE | Access::REMOTE_READ);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 50, sge(r, 0, 64)).unwrap();
    // An unsignaled Write (tag 10, no completion) ahead of a signaled
    // Write, a Read and a Send: each completion has its own tag, not the
    // tag of the request before it.
    a.qp.post_send_tagged(&a.mem, unsignaled(write(1, sge(src, 0, 16), dst, 0)), 10)
        .unwrap();
    a.qp.post_send_tagged(&a.mem, write(2, sge(src, 0, 16), dst, 16), 20)
        .unwrap();
    a.qp.post_send_tagged(&a.mem, read(3, sge(sink, 0, 16), dst, 0), 30)
        .unwrap();
    a.qp.post_send(&a.mem, send(4, sge(src, 0, 4), None))
        .unwrap();
    pump(&mut a, &mut b);
    let mut got = Vec::new();
    while let Some((c, tag)) = a.qp.poll_completion_tagged() {
        got.push((c.wr_id, c.status, tag));
    }
    assert_eq!(
        got,
        [
            (2, WcStatus::Success, 20),
            (3, WcStatus::Success, 30),
            (4, WcStatus::Success, 0)
        ]
    );
    // A receive's completion carries 0.
    let (c, tag) = b.qp.poll_completion_tagged().unwrap();
    assert_eq!((c.wr_id, c.opcode, tag), (50, WcOpcode::Recv, 0));
    // Flushed requests keep theirs.
    a.qp.post_send_tagged(&a.mem, unsignaled(write(5, sge(src, 0, 8), dst, 0)), 50)
        .unwrap();
    a.qp.llp_lost();
    let (c, tag) = a.qp.poll_completion_tagged().unwrap();
    assert_eq!((c.wr_id, c.status, tag), (5, WcStatus::Flushed, 50));
}

#[test]
fn unsignaled_failure_and_flush_complete() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let src = a.reg(pattern(64, 1), Access::LOCAL_READ);
    let gone = a.reg(pattern(64, 1), Access::LOCAL_READ);
    let dst = b.reg(vec![0; 64], Access::REMOTE_WRITE);
    a.qp.post_send(&a.mem, unsignaled(write(1, sge(src, 0, 8), dst, 0)))
        .unwrap();
    a.qp.post_send(&a.mem, unsignaled(write(2, sge(gone, 0, 8), dst, 0)))
        .unwrap();
    a.qp.post_send(&a.mem, unsignaled(write(3, sge(src, 0, 8), dst, 0)))
        .unwrap();
    a.mem.deregister(gone).unwrap();
    let t = terminate_seen_by(&mut a, &mut b, false);
    assert_eq!(t.code, TermCode::RDMAP_LOCAL_CATASTROPHIC);
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![
            (2, WcStatus::LocalProtection(AccessError::InvalidStag)),
            (3, WcStatus::Flushed)
        ]
    );
}

#[test]
fn unsignaled_requests_flush_on_connection_loss() {
    let mut a = End::new(200);
    let src = a.reg(pattern(64, 1), Access::LOCAL_READ);
    a.qp.post_send(&a.mem, unsignaled(send(1, sge(src, 0, 8), None)))
        .unwrap();
    a.qp.post_send(&a.mem, unsignaled(write(2, sge(src, 0, 8), STag(0x100), 0)))
        .unwrap();
    a.qp.llp_lost();
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::Flushed), (2, WcStatus::Flushed)]
    );
}

// ---------------------------------------------------------------- windows

struct WinFix {
    a: End,
    b: End,
    mr: STag,
    /// Remote read and write, MR octets 64..128.
    w: STag,
    /// Remote read only, 128..160.
    w_ro: STag,
    /// Remote write only, 192..224.
    w_wo: STag,
    /// A window of another PD.
    foreign: STag,
    src: STag,
    sink: STag,
    recv: STag,
}

impl WinFix {
    fn new() -> WinFix {
        let mut a = End::new(200);
        let mut b = End::new(200);
        // The region itself grants no remote access.
        let mr = b
            .mem
            .register(
                b.pd,
                pattern(256, 9),
                Access::LOCAL_WRITE | Access::MW_BIND,
                MR_BASE,
            )
            .unwrap();
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let bind = |m: &mut MemoryTable, pd, off, len, acc| {
            let mw = m.alloc_mw(pd).unwrap();
            m.bind_mw(mw, mr, off, len, acc).unwrap()
        };
        let w = bind(&mut b.mem, b.pd, 64, 64, rw);
        let w_ro = bind(&mut b.mem, b.pd, 128, 32, Access::REMOTE_READ);
        let w_wo = bind(&mut b.mem, b.pd, 192, 32, Access::REMOTE_WRITE);
        let other = b.mem.alloc_pd();
        let omr = b
            .mem
            .register(other, vec![0x44; 64], Access::ALL, 0)
            .unwrap();
        let ow = b.mem.alloc_mw(other).unwrap();
        let foreign = b.mem.bind_mw(ow, omr, 0, 64, rw).unwrap();
        let recv = b.reg(vec![0; 64], Access::LOCAL_WRITE);
        b.qp.post_recv(&b.mem, 100, sge(recv, 0, 64)).unwrap();
        let src = a.reg(pattern(256, 1), Access::LOCAL_READ);
        let sink = a.reg(vec![0; 256], Access::LOCAL_WRITE);
        WinFix {
            a,
            b,
            mr,
            w,
            w_ro,
            w_wo,
            foreign,
            src,
            sink,
            recv,
        }
    }
    fn image(&self) -> Vec<u8> {
        self.b.mem.snapshot(self.mr).unwrap().to_vec()
    }
    fn post(&mut self, wr: WorkRequest) {
        self.a.qp.post_send(&self.a.mem, wr).unwrap();
    }
    /// Provoke: run, check the MR did not change, return the Terminate.
    fn provoke(&mut self) -> TerminateRepr {
        let before = self.image();
        let foreign = self.b.mem.snapshot(self.foreign).unwrap().to_vec();
        let t = terminate_seen(&mut self.a, &mut self.b);
        assert_eq!(self.image(), before, "memory changed");
        assert_eq!(self.b.mem.snapshot(self.foreign).unwrap(), &foreign[..]);
        t
    }
}

#[test]
fn window_write_and_read_land_inside_the_window() {
    let mut f = WinFix::new();
    let mut want = f.image();
    let base = f.b.mem.base_to(f.w).unwrap();
    assert_eq!(base, MR_BASE + 64);
    f.post(write(1, sge(f.src, 0, 16), f.w, base + 8));
    f.post(read(2, sge(f.sink, 0, 20), f.w, base + 30));
    f.post(read(3, sge(f.sink, 32, 32), f.w_ro, MR_BASE + 128));
    // The whole window, first to last octet.
    f.post(write(4, sge(f.src, 100, 64), f.w, base));
    f.post(write(5, sge(f.src, 200, 32), f.w_wo, MR_BASE + 192));
    pump(&mut f.a, &mut f.b);
    assert!(statuses(&comps(&mut f.a.qp))
        .iter()
        .all(|c| c.1 == WcStatus::Success));
    let src = pattern(256, 1);
    want[72..88].copy_from_slice(&src[..16]);
    want[64..128].copy_from_slice(&src[100..164]);
    // RFC 5040 §5.5 rule 12 note: the Read may see the later Write (b placed
    // it before answering, as everything arrived at once).
    let read_back = want[94..114].to_vec();
    want[192..224].copy_from_slice(&src[200..232]);
    assert_eq!(f.image(), want);
    assert_eq!(&f.a.mem.snapshot(f.sink).unwrap()[..20], &read_back[..]);
    assert_eq!(
        &f.a.mem.snapshot(f.sink).unwrap()[32..64],
        &pattern(256, 9)[128..160]
    );
    assert!(events(&mut f.b.qp).is_empty());
}

fn tagged_write_hdr(stag: STag, to: u64) -> Option<DdpHeader> {
    Some(DdpHeader::Tagged(TaggedHeader {
        ddp: DdpControl::new(true, true),
        rdmap: RdmapControl::new(Opcode::Write),
        stag: stag.0,
        to,
    }))
}

#[test]
fn window_write_terminates() {
    type Pick = fn(&WinFix) -> (STag, u64, u32);
    let cases: [(TermCode, Pick); 6] = [
        (TermCode::DDP_T_BASE_BOUNDS, |f| (f.w, MR_BASE + 63, 4)),
        (TermCode::DDP_T_BASE_BOUNDS, |f| (f.w, MR_BASE + 124, 8)),
        // RFC 5041 has no access code: a missing right is Invalid STag.
        (TermCode::DDP_T_INVALID_STAG, |f| (f.w_ro, MR_BASE + 128, 4)),
        // The region's own STag has no remote rights; windows do not lend theirs.
        (TermCode::DDP_T_INVALID_STAG, |f| (f.mr, MR_BASE + 64, 4)),
        (TermCode::DDP_T_STAG_NOT_ASSOC, |f| (f.foreign, 0, 4)),
        (TermCode::DDP_T_TO_WRAP, |f| (f.w, u64::MAX - 1, 4)),
    ];
    for (code, pick) in cases {
        let mut f = WinFix::new();
        let (stag, to, len) = pick(&f);
        f.post(write(1, sge(f.src, 0, len), stag, to));
        let t = f.provoke();
        assert_eq!(t.code, code, "{} for {stag} at {to:#x}", t.code);
        assert_eq!(t.ddp_header, tagged_write_hdr(stag, to));
        assert_eq!(t.ddp_segment_len, Some(14 + len as u16));
    }
}

#[test]
fn window_read_terminates_and_the_read_completes_with_remote_access() {
    type Pick = fn(&WinFix) -> (STag, u64, u32);
    let cases: [(TermCode, Pick); 5] = [
        (TermCode::RDMAP_ACCESS, |f| (f.w_wo, MR_BASE + 192, 4)),
        (TermCode::RDMAP_BASE_BOUNDS, |f| (f.w, MR_BASE + 120, 9)),
        (TermCode::RDMAP_BASE_BOUNDS, |f| (f.w_ro, MR_BASE + 127, 1)),
        (TermCode::RDMAP_STAG_NOT_ASSOC, |f| (f.foreign, 0, 4)),
        (TermCode::RDMAP_TO_WRAP, |f| (f.w, u64::MAX - 1, 4)),
    ];
    for (code, pick) in cases {
        let mut f = WinFix::new();
        let (stag, to, len) = pick(&f);
        let src = f.src;
        let dst = f.w;
        f.post(write(1, sge(src, 0, 4), dst, MR_BASE + 64));
        f.post(read(2, sge(f.sink, 0, len), stag, to));
        f.post(write(3, sge(src, 0, 4), dst, MR_BASE + 64));
        let mut want = f.image();
        want[64..68].copy_from_slice(&pattern(256, 1)[..4]);
        let before = f.b.mem.snapshot(f.foreign).unwrap().to_vec();
        let t = terminate_seen(&mut f.a, &mut f.b);
        // Only the first Write landed: the one after the Read was dropped.
        assert_eq!(f.image(), want);
        assert_eq!(f.b.mem.snapshot(f.foreign).unwrap(), &before[..]);
        assert_eq!(t.code, code, "{}", t.code);
        // RFC 5040 §7.1 case 3: DDP and RDMA headers of the Read Request.
        let rr = t.rdma_header.unwrap();
        assert_eq!((rr.src_stag, rr.src_to, rr.size), (stag.0, to, len));
        let Some(DdpHeader::Untagged(u)) = t.ddp_header else {
            panic!("{t:?}")
        };
        assert_eq!((u.qn, u.msn), (queue::READ_REQUEST, 1));
        assert_eq!(
            statuses(&comps(&mut f.a.qp)),
            vec![
                (1, WcStatus::Success),
                (2, WcStatus::RemoteAccess),
                (3, WcStatus::Flushed)
            ]
        );
    }
}

#[test]
fn invalidated_window_refuses_access() {
    let mut f = WinFix::new();
    let w = f.w;
    f.b.mem.invalidate(w).unwrap();
    f.post(write(1, sge(f.src, 0, 4), w, MR_BASE + 64));
    assert_eq!(f.provoke().code, TermCode::DDP_T_INVALID_STAG);

    let mut f = WinFix::new();
    let w = f.w;
    f.b.mem.invalidate(w).unwrap();
    f.post(read(1, sge(f.sink, 0, 4), w, MR_BASE + 64));
    assert_eq!(f.provoke().code, TermCode::RDMAP_INVALID_STAG);
    assert_eq!(
        statuses(&comps(&mut f.a.qp)),
        vec![(1, WcStatus::RemoteAccess)]
    );
}

#[test]
fn send_with_invalidate_revokes_a_window() {
    let mut f = WinFix::new();
    let (w, src) = (f.w, f.src);
    f.post(send(1, sge(src, 0, 3), Some(w)));
    f.post(write(2, sge(src, 0, 4), w, MR_BASE + 64));
    let t = f.provoke();
    assert_eq!(t.code, TermCode::DDP_T_INVALID_STAG);
    let c = comps(&mut f.b.qp);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].invalidated),
        (100, WcStatus::Success, Some(w))
    );
    assert!(!f.b.mem.is_valid(w));
    assert_eq!(
        &f.b.mem.snapshot(f.recv).unwrap()[..3],
        &pattern(256, 1)[..3]
    );

    // A window of another PD cannot be invalidated through this stream.
    let mut f = WinFix::new();
    let (foreign, src) = (f.foreign, f.src);
    f.post(send(1, sge(src, 0, 3), Some(foreign)));
    let t = f.provoke();
    assert_eq!(t.code, TermCode::RDMAP_CANNOT_INVALIDATE);
    assert!(f.b.mem.is_valid(foreign));
    // Nor twice.
    let mut f = WinFix::new();
    let w = f.w;
    f.b.mem.invalidate(w).unwrap();
    f.post(send(1, sge(src, 0, 3), Some(w)));
    assert_eq!(f.provoke().code, TermCode::RDMAP_INVALID_STAG);
}

#[test]
fn rebinding_rotates_the_key() {
    let mut f = WinFix::new();
    let old = f.w;
    let new =
        f.b.mem
            .bind_mw(old, f.mr, 0, 16, Access::REMOTE_WRITE)
            .unwrap();
    assert_eq!(new.index(), old.index());
    assert_ne!(new, old);
    assert_eq!(f.b.mem.base_to(new), Some(MR_BASE));
    let mut want = f.image();
    want[..16].copy_from_slice(&pattern(256, 1)[..16]);
    f.post(write(1, sge(f.src, 0, 16), new, MR_BASE));
    pump(&mut f.a, &mut f.b);
    assert_eq!(f.image(), want);
    f.post(write(2, sge(f.src, 0, 4), old, MR_BASE + 64));
    assert_eq!(f.provoke().code, TermCode::DDP_T_INVALID_STAG);
}

// ---------------------------------------------------------------- SRQ

struct SrqHost {
    mem: MemoryTable,
    pd: PdId,
    srq: Srq,
    qps: Vec<Qp>,
}

impl SrqHost {
    fn new(n: usize, depth: usize) -> SrqHost {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let srq = Srq::new(depth);
        let qps = (0..n)
            .map(|_| Qp::with_srq(cfg(pd, QpConfig::MIN_MULPDU), srq.clone()))
            .collect();
        SrqHost { mem, pd, srq, qps }
    }
}

/// A sender that posts one Send of `msg`.
fn sender(msg: &[u8]) -> End {
    let mut a = End::new(QpConfig::MIN_MULPDU);
    let src = a.reg(msg.to_vec(), Access::LOCAL_READ);
    a.qp.post_send(&a.mem, send(1, sge(src, 0, msg.len() as u32), None))
        .unwrap();
    a
}

#[test]
fn srq_is_shared_between_queue_pairs() {
    let mut h = SrqHost::new(2, 8);
    let buf = h
        .mem
        .register(h.pd, vec![0; 400], Access::LOCAL_WRITE, 0)
        .unwrap();
    for i in 0..4u64 {
        // Two entries per buffer: 40 + 60 octets, 100 octets apart.
        let l = SgList::new(&[sge(buf, i * 100, 40), sge(buf, i * 100 + 40, 60)]).unwrap();
        h.srq.post_recv(10 + i, l).unwrap();
    }
    assert_eq!(h.srq.len(), 4);
    assert_eq!(
        h.qps[0].post_recv(&h.mem, 1, sge(buf, 0, 8)),
        Err(PostError::UsesSrq)
    );
    let msgs = [pattern(70, 1), pattern(100, 2), pattern(1, 3)];
    let mut a0 = sender(&msgs[0]);
    pump_raw(&mut a0.qp, &mut a0.mem, &mut h.qps[0], &mut h.mem, 5);
    let mut a1 = sender(&msgs[1]);
    pump_raw(&mut a1.qp, &mut a1.mem, &mut h.qps[1], &mut h.mem, 5);
    let third = a0.reg(msgs[2].clone(), Access::LOCAL_READ);
    a0.qp
        .post_send(&a0.mem, send(2, sge(third, 0, 1), None))
        .unwrap();
    pump_raw(&mut a0.qp, &mut a0.mem, &mut h.qps[0], &mut h.mem, 5);
    let c0 = comps(&mut h.qps[0]);
    let c1 = comps(&mut h.qps[1]);
    // Buffers are taken in post order, whichever QP receives.
    assert_eq!(
        c0.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(10, WcStatus::Success, 70), (12, WcStatus::Success, 1)]
    );
    assert_eq!(
        c1.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(11, WcStatus::Success, 100)]
    );
    let mem = h.mem.snapshot(buf).unwrap();
    assert_eq!(&mem[..70], &msgs[0][..]);
    assert_eq!(&mem[100..200], &msgs[1][..]);
    assert_eq!(mem[200], msgs[2][0]);
    assert!(mem[70..100].iter().chain(&mem[201..]).all(|b| *b == 0));
    assert_eq!(h.srq.len(), 1);
    // Going to error flushes nothing of the SRQ: its buffers are not this QP's.
    h.qps[0].llp_lost();
    assert!(comps(&mut h.qps[0]).is_empty());
    assert_eq!(h.srq.len(), 1);
}

#[test]
fn srq_is_postable_from_another_thread() {
    let mut h = SrqHost::new(1, 64);
    let buf = h
        .mem
        .register(h.pd, vec![0; 64 * 8], Access::LOCAL_WRITE, 0)
        .unwrap();
    let poster = h.srq.clone();
    std::thread::spawn(move || {
        for i in 0..64u64 {
            poster.post_recv(i, sge(buf, i * 8, 8)).unwrap();
        }
        assert_eq!(poster.post_recv(64, Sge::EMPTY), Err(PostError::QueueFull));
    })
    .join()
    .unwrap();
    let mut a = End::new(200);
    let src = a.reg(pattern(8 * 64, 4), Access::LOCAL_READ);
    for i in 0..64u64 {
        a.qp.post_send(&a.mem, send(i, sge(src, i * 8, 8), None))
            .unwrap();
    }
    pump_raw(&mut a.qp, &mut a.mem, &mut h.qps[0], &mut h.mem, 1000);
    let c = comps(&mut h.qps[0]);
    assert_eq!(c.len(), 64);
    assert!(c
        .iter()
        .enumerate()
        .all(|(i, c)| c.wr_id == i as u64 && c.status == WcStatus::Success));
    assert_eq!(h.mem.snapshot(buf).unwrap(), &pattern(8 * 64, 4)[..]);
    assert!(h.srq.is_empty());
}

#[test]
fn empty_srq_is_no_buffer() {
    let mut h = SrqHost::new(1, 4);
    let mut a = sender(b"hello");
    pump_raw(&mut a.qp, &mut a.mem, &mut h.qps[0], &mut h.mem, 100);
    let t = events(&mut a.qp).into_iter().find_map(|e| match e {
        QpEvent::TerminateReceived(t) => Some(t),
        _ => None,
    });
    assert_eq!(t.map(|t| t.code), Some(TermCode::DDP_U_NO_BUFFER));
    assert_eq!(h.qps[0].state(), QpState::Error);
}

#[test]
fn srq_buffer_failing_its_checks_is_a_local_protection_error() {
    let mut h = SrqHost::new(1, 4);
    let ro = h
        .mem
        .register(h.pd, vec![0x77; 64], Access::LOCAL_READ, 0)
        .unwrap();
    let ok = h
        .mem
        .register(h.pd, vec![0; 64], Access::LOCAL_WRITE, 0)
        .unwrap();
    let list = SgList::new(&[sge(ok, 0, 8), sge(ro, 0, 8)]).unwrap();
    h.srq.post_recv(5, list).unwrap();
    h.srq.post_recv(6, sge(ok, 0, 64)).unwrap();
    let mut a = sender(b"hi");
    pump_raw(&mut a.qp, &mut a.mem, &mut h.qps[0], &mut h.mem, 100);
    let t = events(&mut a.qp).into_iter().find_map(|e| match e {
        QpEvent::TerminateReceived(t) => Some(t),
        _ => None,
    });
    // Our fault, not the peer's: DDP local catastrophic, no headers.
    assert_eq!(
        t,
        Some(TerminateRepr::bare(TermCode::DDP_LOCAL_CATASTROPHIC))
    );
    assert_eq!(
        statuses(&comps(&mut h.qps[0])),
        vec![(5, WcStatus::LocalProtection(AccessError::Access))]
    );
    assert!(h.mem.snapshot(ok).unwrap().iter().all(|b| *b == 0));
    assert!(h.mem.snapshot(ro).unwrap().iter().all(|b| *b == 0x77));
    // The next buffer stays for the other QPs.
    assert_eq!(h.srq.len(), 1);
}

#[test]
fn srq_limit_fires_once_per_arming() {
    let mut h = SrqHost::new(1, 8);
    let buf = h
        .mem
        .register(h.pd, vec![0; 64], Access::LOCAL_WRITE, 0)
        .unwrap();
    for i in 0..5 {
        h.srq.post_recv(i, sge(buf, 0, 64)).unwrap();
    }
    h.srq.arm_limit(3);
    assert_eq!(h.srq.limit(), 3);
    let mut a = End::new(200);
    let src = a.reg(pattern(4, 1), Access::LOCAL_READ);
    let mut fired = Vec::new();
    for i in 0..4 {
        a.qp.post_send(&a.mem, send(i, sge(src, 0, 4), None))
            .unwrap();
        pump_raw(&mut a.qp, &mut a.mem, &mut h.qps[0], &mut h.mem, 100);
        fired.push(events(&mut h.qps[0]).contains(&QpEvent::SrqLimitReached));
    }
    // 4 left, 3 left, 2 left (below 3: fires), 1 left (disarmed).
    assert_eq!(fired, vec![false, false, true, false]);
    assert_eq!(h.srq.limit(), 0);
    assert_eq!(comps(&mut h.qps[0]).len(), 4);
}

#[test]
fn partly_received_srq_buffer_flushes_on_its_qp() {
    let mut h = SrqHost::new(1, 4);
    let buf = h
        .mem
        .register(h.pd, vec![0; 256], Access::LOCAL_WRITE, 0)
        .unwrap();
    h.srq.post_recv(1, sge(buf, 0, 256)).unwrap();
    h.srq.post_recv(2, sge(buf, 0, 256)).unwrap();
    let mut a = sender(&pattern(200, 1));
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, 1);
    h.qps[0].receive(&out, &mut h.mem);
    assert_eq!(h.qps[0].posted_recvs(), 1);
    h.qps[0].llp_lost();
    assert_eq!(
        statuses(&comps(&mut h.qps[0])),
        vec![(1, WcStatus::Flushed)]
    );
    assert_eq!(h.srq.len(), 1);
}

// ---------------------------------------------------------------- statuses

#[test]
fn read_beyond_the_peer_ird_is_a_remote_invalid_request() {
    let mut a = End::new(200);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut b = End {
        qp: Qp::new(QpConfig {
            ird: 1,
            ..cfg(pd, 200)
        }),
        mem,
        pd,
    };
    let src = b.reg(pattern(64, 1), Access::REMOTE_READ);
    let sink = a.reg(vec![0; 64], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, read(1, sge(sink, 0, 8), src, 0))
        .unwrap();
    a.qp.post_send(&a.mem, read(2, sge(sink, 8, 8), src, 0))
        .unwrap();
    let t = terminate_seen(&mut a, &mut b);
    assert_eq!(t.code, TermCode::DDP_U_NO_BUFFER);
    // b sends its Terminate before answering the first Read.
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::Flushed), (2, WcStatus::RemoteInvalidRequest)]
    );
}

#[test]
fn peer_remote_operation_terminate_names_the_read() {
    let mut a = End::new(200);
    let sink = a.reg(vec![0; 64], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, read(1, sge(sink, 0, 8), STag(0x100), 0))
        .unwrap();
    a.qp.post_send(&a.mem, read(2, sge(sink, 8, 8), STag(0x100), 0))
        .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    // The peer quotes our second Read Request (QN 1, MSN 2).
    let quoted = UntaggedHeader {
        ddp: DdpControl::new(false, true),
        rdmap: RdmapControl::new(Opcode::ReadRequest),
        inval_stag: 0,
        qn: queue::READ_REQUEST,
        msn: 2,
        mo: 0,
    };
    let body = TerminateRepr {
        code: TermCode::RDMAP_UNEXPECTED_OPCODE,
        flag_m: true,
        ddp_segment_len: Some(46),
        ddp_header: Some(DdpHeader::Untagged(quoted)),
        rdma_header: None,
        reserved: 0,
    };
    let (tb, n) = body.to_array();
    let hdr = DdpHeader::Untagged(UntaggedHeader {
        ddp: DdpControl::new(false, true),
        rdmap: RdmapControl::new(Opcode::Terminate),
        inval_stag: 0,
        qn: queue::TERMINATE,
        msn: 1,
        mo: 0,
    });
    let (hb, hn) = hdr.to_array();
    let mut framer = Framer::new(true, false);
    let mut bytes = Vec::new();
    framer.emit(&[&hb[..hn], &tb[..n]], &mut bytes).unwrap();
    a.qp.receive(&bytes, &mut a.mem);
    assert_eq!(events(&mut a.qp), vec![QpEvent::TerminateReceived(body)]);
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::Flushed), (2, WcStatus::RemoteOperation)]
    );
}

#[test]
fn status_mapping_from_terminate_codes() {
    use WcStatus::*;
    let cases = [
        (TermCode::RDMAP_INVALID_STAG, Some(RemoteAccess)),
        (TermCode::RDMAP_CANNOT_INVALIDATE, Some(RemoteAccess)),
        (TermCode::RDMAP_UNEXPECTED_OPCODE, Some(RemoteOperation)),
        (TermCode::RDMAP_OP_UNSPECIFIED, Some(RemoteOperation)),
        (TermCode::DDP_U_TOO_LONG, Some(RemoteInvalidRequest)),
        (TermCode::DDP_U_NO_BUFFER, Some(RemoteInvalidRequest)),
        (TermCode::RDMAP_LOCAL_CATASTROPHIC, None),
        (TermCode::DDP_LOCAL_CATASTROPHIC, None),
        (TermCode::DDP_T_BASE_BOUNDS, None),
        (TermCode::MPA_CRC, None),
    ];
    for (code, want) in cases {
        assert_eq!(WcStatus::from_peer_terminate(code), want, "{code}");
    }
}

#[test]
fn srq_handles_cross_threads_and_qps_stay_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Srq>();
    send::<Qp>();
}

// ------------------------------------------------------------------ inline

#[test]
fn inline_send_is_one_fpdu_with_the_payload_after_the_header() {
    let mut a = End::new(200);
    let data = InlineData::new(b"hello").unwrap();
    a.qp.post_send(
        &a.mem,
        WorkRequest::SendInline {
            wr_id: 7,
            signaled: true,
            data,
            solicited: false,
            invalidate: None,
        },
    )
    .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    // MPA length 23 (18-octet untagged header + 5), DDP untagged last
    // (0x41), RDMAP Send (0x43), no Invalidate STag, QN 0, MSN 1, MO 0,
    // the payload, 3 octets of PAD to a multiple of 4, then the CRC.
    assert_eq!(out.len(), 2 + 23 + 3 + 4);
    assert_eq!(
        &out[..2 + 23],
        &[
            0x00, 0x17, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, b'h', b'e',
            b'l', b'l', b'o'
        ]
    );
    assert_eq!(&out[25..28], &[0, 0, 0]);
    let crc = crate::crc::crc32c(&out[..28]).to_le_bytes();
    assert_eq!(&out[28..], &crc);
    let c = comps(&mut a.qp);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status, c[0].byte_len),
        (7, WcOpcode::Send, WcStatus::Success, 5)
    );
}

#[test]
fn inline_send_and_write_land_without_a_registered_source() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let dst = b.reg(vec![0; 64], Access::REMOTE_WRITE);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 50, sge(r, 0, 64)).unwrap();
    let msg: Vec<u8> = (0..MAX_INLINE as u8).collect();
    a.qp.post_send(
        &a.mem,
        WorkRequest::WriteInline {
            wr_id: 1,
            signaled: false,
            data: InlineData::new(&msg[..40]).unwrap(),
            remote_stag: dst,
            remote_to: 8,
        },
    )
    .unwrap();
    a.qp.post_send(
        &a.mem,
        WorkRequest::SendInline {
            wr_id: 2,
            signaled: true,
            data: InlineData::new(&msg[..64]).unwrap(),
            solicited: true,
            invalidate: None,
        },
    )
    .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(statuses(&comps(&mut a.qp)), vec![(2, WcStatus::Success)]);
    let c = comps(&mut b.qp);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].byte_len, c[0].solicited),
        (50, WcOpcode::Recv, 64, true)
    );
    assert_eq!(&b.mem.snapshot(r).unwrap()[..64], &msg[..64]);
    let d = b.mem.snapshot(dst).unwrap();
    assert_eq!(&d[8..48], &msg[..40]);
    assert!(d[..8].iter().chain(&d[48..]).all(|&x| x == 0));
}

#[test]
fn inline_data_too_long_is_refused() {
    assert_eq!(
        InlineData::new(&[0; MAX_INLINE + 1]).unwrap_err(),
        PostError::InlineTooLong
    );
    // At the smallest MULPDU (70) an inline Send of 60 octets cannot fit one
    // FPDU with its 18-octet header.
    let mut a = End::new(QpConfig::MIN_MULPDU);
    let wr = WorkRequest::SendInline {
        wr_id: 1,
        signaled: true,
        data: InlineData::new(&[1; 60]).unwrap(),
        solicited: false,
        invalidate: None,
    };
    assert_eq!(a.qp.post_send(&a.mem, wr), Err(PostError::InlineTooLong));
    let wr = WorkRequest::SendInline {
        wr_id: 1,
        signaled: true,
        data: InlineData::new(&[1; 52]).unwrap(),
        solicited: false,
        invalidate: None,
    };
    assert_eq!(a.qp.post_send(&a.mem, wr), Ok(()));
}

// ---------------------------------------------------------------- hostile peers
//
// Attacks sent as literal FPDUs (built with the crate's own header builders
// and framer) straight into `Qp::receive`, in pieces, with local memory
// operations done between the pieces as a poll loop would.

/// One FPDU (CRC on, no markers) carrying `hdr` and `payload`.
fn fpdu(framer: &mut Framer, hdr: DdpHeader, payload: &[u8]) -> Vec<u8> {
    let (hb, hn) = hdr.to_array();
    let mut out = Vec::new();
    framer.emit(&[&hb[..hn], payload], &mut out).unwrap();
    out
}

fn write_hdr(stag: STag, to: u64, last: bool) -> DdpHeader {
    DdpHeader::Tagged(TaggedHeader {
        ddp: DdpControl::new(true, last),
        rdmap: RdmapControl::new(Opcode::Write),
        stag: stag.0,
        to,
    })
}

fn read_resp_hdr(stag: STag, to: u64, last: bool) -> DdpHeader {
    DdpHeader::Tagged(TaggedHeader {
        ddp: DdpControl::new(true, last),
        rdmap: RdmapControl::new(Opcode::ReadResponse),
        stag: stag.0,
        to,
    })
}

fn untagged_hdr(op: Opcode, inval: u32, msn: u32, mo: u32, last: bool) -> DdpHeader {
    DdpHeader::Untagged(UntaggedHeader {
        ddp: DdpControl::new(false, last),
        rdmap: RdmapControl::new(op),
        inval_stag: inval,
        qn: op.queue().unwrap(),
        msn,
        mo,
    })
}

/// The Terminate `q` queued for a local error (exactly one), after checking
/// that it is what `poll_transmit` sends.
fn queued_terminate(q: &mut Qp, mem: &MemoryTable) -> TerminateRepr {
    let ev = events(q);
    let t = ev
        .iter()
        .find_map(|e| match e {
            QpEvent::LocalError(t) => Some(*t),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Terminate queued: {ev:?}"));
    assert_eq!(q.state(), QpState::Terminating);
    let mut out = Vec::new();
    q.poll_transmit(mem, &mut out, usize::MAX, usize::MAX);
    assert!(!out.is_empty());
    assert_eq!(events(q), vec![QpEvent::TerminateSent(t)]);
    t
}

/// Finding 1: a Write header and 10 octets arrive, the application
/// deregisters the target and registers a new region (another PD, no remote
/// rights) that reuses its slot, then the rest of the Write arrives. Nothing
/// of it may land in the new region.
#[test]
fn write_after_deregistration_mid_segment_places_nothing() {
    let mut b = End::new(200);
    let dst = b.reg(vec![0; 128], Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    let mut framer = Framer::new(true, false);
    let bytes = fpdu(&mut framer, write_hdr(dst, 0, true), &pattern(100, 3));
    let cut = 2 + TAGGED_HEADER_LEN + 10;
    b.qp.receive(&bytes[..cut], &mut b.mem);
    assert_eq!(&b.mem.snapshot(dst).unwrap()[..10], &pattern(100, 3)[..10]);

    b.mem.deregister(dst).unwrap();
    let other = b.mem.alloc_pd();
    let fresh = b
        .mem
        .register(other, vec![0x5a; 128], Access::LOCAL_WRITE, 0)
        .unwrap();
    assert_eq!(fresh.index(), dst.index(), "the slot is reused");
    for piece in bytes[cut..].chunks(7) {
        b.qp.receive(piece, &mut b.mem);
    }
    assert_eq!(b.mem.snapshot(fresh).unwrap(), vec![0x5a; 128]);
    assert_eq!(b.qp.stats().bytes_placed, 10);
    let t = queued_terminate(&mut b.qp, &b.mem);
    assert_eq!(t.code, TermCode::DDP_T_INVALID_STAG);
    assert_eq!(t.ddp_header, Some(write_hdr(dst, 0, true)));
    assert_eq!(t.ddp_segment_len, Some(14 + 100));
}

/// Finding 1, invalidation: the same through local invalidation of a window.
#[test]
fn write_after_invalidation_mid_segment_places_nothing() {
    let mut b = End::new(200);
    let mr = b.reg(vec![0; 128], Access::LOCAL_WRITE | Access::MW_BIND);
    let mw = b.mem.alloc_mw(b.pd).unwrap();
    let w = b.mem.bind_mw(mw, mr, 0, 128, Access::REMOTE_WRITE).unwrap();
    let mut framer = Framer::new(true, false);
    let bytes = fpdu(&mut framer, write_hdr(w, 0, true), &pattern(100, 3));
    let cut = 2 + TAGGED_HEADER_LEN + 10;
    b.qp.receive(&bytes[..cut], &mut b.mem);
    b.mem.invalidate(w).unwrap();
    b.qp.receive(&bytes[cut..], &mut b.mem);
    let got = b.mem.snapshot(mr).unwrap();
    assert_eq!(&got[..10], &pattern(100, 3)[..10]);
    assert!(got[10..].iter().all(|x| *x == 0));
    assert_eq!(
        queued_terminate(&mut b.qp, &b.mem).code,
        TermCode::DDP_T_INVALID_STAG
    );
}

/// Finding 1 for a Send: the receive buffer is deregistered mid-message.
#[test]
fn send_after_receive_buffer_deregistration_places_nothing() {
    let mut b = End::new(200);
    let r = b.reg(vec![0; 128], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 4, sge(r, 0, 128)).unwrap();
    let mut framer = Framer::new(true, false);
    let bytes = fpdu(
        &mut framer,
        untagged_hdr(Opcode::Send, 0, 1, 0, true),
        &pattern(100, 3),
    );
    let cut = 2 + UNTAGGED_HEADER_LEN + 10;
    b.qp.receive(&bytes[..cut], &mut b.mem);
    b.mem.deregister(r).unwrap();
    let other = b.mem.alloc_pd();
    let fresh = b
        .mem
        .register(other, vec![0x5a; 128], Access::LOCAL_WRITE, 0)
        .unwrap();
    assert_eq!(fresh.index(), r.index());
    b.qp.receive(&bytes[cut..], &mut b.mem);
    assert_eq!(b.mem.snapshot(fresh).unwrap(), vec![0x5a; 128]);
    let t = queued_terminate(&mut b.qp, &b.mem);
    assert_eq!(t, TerminateRepr::bare(TermCode::DDP_LOCAL_CATASTROPHIC));
    assert_eq!(
        statuses(&comps(&mut b.qp)),
        vec![(4, WcStatus::LocalProtection(AccessError::InvalidStag))]
    );
}

/// Finding 1 for a Read Response: the Read's sink is deregistered while
/// the response is arriving.
#[test]
fn read_response_after_sink_deregistration_places_nothing() {
    let mut a = End::new(200);
    let sink = a.reg(vec![0; 128], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, read(1, sge(sink, 0, 100), STag(0x4242_4200), 0))
        .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    let mut framer = Framer::new(true, false);
    let bytes = fpdu(&mut framer, read_resp_hdr(sink, 0, true), &pattern(100, 3));
    let cut = 2 + TAGGED_HEADER_LEN + 10;
    a.qp.receive(&bytes[..cut], &mut a.mem);
    a.mem.deregister(sink).unwrap();
    let other = a.mem.alloc_pd();
    let fresh = a
        .mem
        .register(other, vec![0x5a; 128], Access::LOCAL_WRITE, 0)
        .unwrap();
    assert_eq!(fresh.index(), sink.index());
    a.qp.receive(&bytes[cut..], &mut a.mem);
    assert_eq!(a.mem.snapshot(fresh).unwrap(), vec![0x5a; 128]);
    let t = queued_terminate(&mut a.qp, &a.mem);
    assert_eq!(t, TerminateRepr::bare(TermCode::DDP_LOCAL_CATASTROPHIC));
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::LocalProtection(AccessError::InvalidStag))]
    );
}

/// A Read Request body (28 octets) reading `size` octets at TO 0 of `src`
/// into TO 0 of `sink`.
fn read_req_body(sink: STag, size: u32, src: STag) -> [u8; READ_REQUEST_LEN] {
    let mut b = [0u8; READ_REQUEST_LEN];
    ReadRequest {
        sink_stag: sink.0,
        sink_to: 0,
        size,
        src_stag: src.0,
        src_to: 0,
    }
    .emit(&mut b)
    .unwrap();
    b
}

fn ird_end(ird: u16) -> (End, STag) {
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut b = End {
        qp: Qp::new(QpConfig {
            ird,
            ..cfg(pd, 200)
        }),
        mem,
        pd,
    };
    let src = b.reg(pattern(4096, 1), Access::REMOTE_READ);
    (b, src)
}

/// Finding 2: Read Requests with MO != 0 were not counted against the IRD
/// and queued without limit. Now MO != 0 is an invalid MO (RFC 5041 §7.1
/// check 3) and nothing is queued.
#[test]
fn read_requests_with_nonzero_mo_are_refused_not_queued() {
    let (mut b, src) = ird_end(2);
    let mut framer = Framer::new(true, false);
    let body = read_req_body(STag(0x77_0000), u32::MAX, src);
    let mut bytes = Vec::new();
    for i in 0..10_000u32 {
        let hdr = untagged_hdr(Opcode::ReadRequest, 0, i + 1, 1 + i % 1000, true);
        bytes.extend(fpdu(&mut framer, hdr, &body));
    }
    for piece in bytes.chunks(1460) {
        b.qp.receive(piece, &mut b.mem);
        assert!(b.qp.inbound_reads() <= 2);
    }
    assert_eq!(b.qp.inbound_reads(), 0);
    let t = queued_terminate(&mut b.qp, &b.mem);
    assert_eq!(t.code, TermCode::DDP_U_INVALID_MO);
    assert_eq!(
        t.ddp_header,
        Some(untagged_hdr(Opcode::ReadRequest, 0, 1, 1, true))
    );
}

/// Finding 2: every Read Request counts against the IRD; the one beyond it
/// is DDP untagged "no buffer" (RFC 5040 §6.1, RFC 5041 §7.2 0x2/0x02).
#[test]
fn read_requests_beyond_ird_are_no_buffer() {
    let (mut b, src) = ird_end(2);
    let mut framer = Framer::new(true, false);
    let body = read_req_body(STag(0x77_0000), 4096, src);
    let mut bytes = Vec::new();
    for i in 0..10_000u32 {
        let hdr = untagged_hdr(Opcode::ReadRequest, 0, i + 1, 0, true);
        bytes.extend(fpdu(&mut framer, hdr, &body));
    }
    for piece in bytes.chunks(1460) {
        b.qp.receive(piece, &mut b.mem);
        assert!(b.qp.inbound_reads() <= 2);
    }
    assert_eq!(b.qp.inbound_reads(), 2);
    let t = queued_terminate(&mut b.qp, &b.mem);
    assert_eq!(t.code, TermCode::DDP_U_NO_BUFFER);
    assert_eq!(
        t.ddp_header,
        Some(untagged_hdr(Opcode::ReadRequest, 0, 3, 0, true))
    );
}

/// Finding 2: a Read Request longer than its 28-octet header is "message too
/// long" (RFC 5041 §7.1 check 4, §7.2 0x2/0x05); nothing is queued.
#[test]
fn read_request_longer_than_its_header_is_too_long() {
    let (mut b, src) = ird_end(2);
    let mut framer = Framer::new(true, false);
    let mut body = read_req_body(STag(0x77_0000), 8, src).to_vec();
    body.extend([0; 4]);
    let hdr = untagged_hdr(Opcode::ReadRequest, 0, 1, 0, true);
    b.qp.receive(&fpdu(&mut framer, hdr, &body), &mut b.mem);
    assert_eq!(b.qp.inbound_reads(), 0);
    assert_eq!(
        queued_terminate(&mut b.qp, &b.mem).code,
        TermCode::DDP_U_TOO_LONG
    );
}

/// `a` with one RDMA Read of `len` octets into `sink` sent (its Read
/// Request handed to the LLP), awaiting the response.
fn read_outstanding(len: u32) -> (End, STag) {
    let mut a = End::new(200);
    let sink = a.reg(vec![0; len as usize], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, read(1, sge(sink, 0, len), STag(0x4242_4200), 0))
        .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    assert_eq!(a.qp.outstanding_reads(), 1);
    (a, sink)
}

/// Finding 9: a Read of 4096 answered by a 0-octet or 100-octet Read
/// Response with L = 1 completed as a success of 4096 octets. It is an
/// invalid Read Response now: RDMAP remote operation Terminate with the DDP
/// header, and the Read fails.
#[test]
fn short_read_response_fails_the_read() {
    for n in [0usize, 100] {
        let (mut a, sink) = read_outstanding(4096);
        let mut framer = Framer::new(true, false);
        let hdr = read_resp_hdr(sink, 0, true);
        let bytes = fpdu(&mut framer, hdr, &pattern(n, 3));
        for piece in bytes.chunks(9) {
            a.qp.receive(piece, &mut a.mem);
        }
        let t = queued_terminate(&mut a.qp, &a.mem);
        assert_eq!(t.code, TermCode::RDMAP_OP_UNSPECIFIED, "{n} octets");
        assert_eq!(t.ddp_header, Some(hdr));
        assert_eq!(t.ddp_segment_len, Some((14 + n) as u16));
        let c = comps(&mut a.qp);
        assert_eq!(statuses(&c), vec![(1, WcStatus::BadResponse)]);
        assert_eq!(c[0].byte_len, 0);
        assert_eq!(a.qp.outstanding_reads(), 0);
    }
}

/// Finding 9: response segments that overlap (or leave a gap) cannot add up
/// to a complete response: the segment that does not start where the last
/// one ended is refused before placement.
#[test]
fn read_response_segments_must_be_contiguous() {
    let (mut a, sink) = read_outstanding(200);
    let mut framer = Framer::new(true, false);
    let mut bytes = fpdu(&mut framer, read_resp_hdr(sink, 0, false), &[1; 100]);
    bytes.extend(fpdu(&mut framer, read_resp_hdr(sink, 0, true), &[2; 100]));
    a.qp.receive(&bytes, &mut a.mem);
    let t = queued_terminate(&mut a.qp, &a.mem);
    assert_eq!(t.code, TermCode::RDMAP_OP_UNSPECIFIED);
    assert_eq!(t.ddp_header, Some(read_resp_hdr(sink, 0, true)));
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::BadResponse)]
    );
    let got = a.mem.snapshot(sink).unwrap();
    assert!(got[..100].iter().all(|x| *x == 1) && got[100..].iter().all(|x| *x == 0));
}

/// The exact response, in several segments, still completes the Read.
#[test]
fn complete_read_response_in_segments_succeeds() {
    let (mut a, sink) = read_outstanding(200);
    let mut framer = Framer::new(true, false);
    let mut bytes = fpdu(&mut framer, read_resp_hdr(sink, 0, false), &pattern(120, 3));
    bytes.extend(fpdu(
        &mut framer,
        read_resp_hdr(sink, 120, true),
        &pattern(80, 4),
    ));
    for piece in bytes.chunks(5) {
        a.qp.receive(piece, &mut a.mem);
    }
    assert!(events(&mut a.qp).is_empty());
    let c = comps(&mut a.qp);
    assert_eq!(statuses(&c), vec![(1, WcStatus::Success)]);
    assert_eq!(c[0].byte_len, 200);
    let got = a.mem.snapshot(sink).unwrap();
    assert_eq!(&got[..120], &pattern(120, 3)[..]);
    assert_eq!(&got[120..], &pattern(80, 4)[..]);
}

/// Finding 7: a Send with Invalidate naming a local-only region (STags are
/// guessable) must not revoke it: "STag cannot be invalidated" (RFC 5040
/// §7.2 items 4-5, §8.1.1 item 7), and the region stays valid.
#[test]
fn send_with_invalidate_of_a_local_only_region_is_refused() {
    let mut b = End::new(200);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    let local = b.reg(vec![0; 64], Access::LOCAL_READ | Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 4, sge(r, 0, 64)).unwrap();
    let mut framer = Framer::new(true, false);
    let hdr = untagged_hdr(Opcode::SendInvalidate, local.0, 1, 0, true);
    let bytes = fpdu(&mut framer, hdr, &pattern(8, 3));
    for piece in bytes.chunks(3) {
        b.qp.receive(piece, &mut b.mem);
    }
    assert!(b.mem.is_valid(local));
    let t = queued_terminate(&mut b.qp, &b.mem);
    assert_eq!(t.code, TermCode::RDMAP_CANNOT_INVALIDATE);
    assert_eq!(t.ddp_header, Some(hdr));
    // The receive buffer did not complete as a success.
    assert_eq!(statuses(&comps(&mut b.qp)), vec![(4, WcStatus::Flushed)]);

    // A region enabled for remote access can be invalidated.
    let mut b = End::new(200);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    let exposed = b.reg(vec![0; 64], Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 4, sge(r, 0, 64)).unwrap();
    let hdr = untagged_hdr(Opcode::SendInvalidate, exposed.0, 1, 0, true);
    b.qp.receive(
        &fpdu(&mut Framer::new(true, false), hdr, &[1; 8]),
        &mut b.mem,
    );
    assert!(!b.mem.is_valid(exposed));
    let c = comps(&mut b.qp);
    assert_eq!(
        (c[0].status, c[0].invalidated),
        (WcStatus::Success, Some(exposed))
    );
}

/// Any single FPDU with a good CRC, whatever its header fields (extreme MO,
/// TO, MSN, lengths, opcodes), cut anywhere: no arithmetic overflow or
/// panic (overflow checks are on in tests), nothing placed into a local-only
/// region, and at most IRD Read Requests queued.
fn any_header() -> impl Strategy<Value = DdpHeader> {
    let edge32 = prop_oneof![Just(0u32), Just(1), Just(28), Just(u32::MAX), any::<u32>()];
    let edge64 = prop_oneof![Just(0u64), Just(u64::MAX), Just(u64::MAX - 3), any::<u64>()];
    let ctrl = (any::<bool>(), any::<u8>(), 0u8..4);
    prop_oneof![
        (ctrl.clone(), any::<u8>(), edge32.clone(), edge64).prop_map(
            |((last, rsvd, dv), rdmap, stag, to)| {
                let mut ddp = DdpControl::new(true, last);
                ddp.0 = (ddp.0 & !0x3f) | (rsvd & 0x3c) | (dv & 3);
                DdpHeader::Tagged(TaggedHeader {
                    ddp,
                    rdmap: RdmapControl(rdmap),
                    stag,
                    to,
                })
            }
        ),
        (
            ctrl,
            any::<u8>(),
            edge32.clone(),
            0u32..4,
            prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX)],
            edge32
        )
            .prop_map(|((last, rsvd, dv), rdmap, inval, qn, msn, mo)| {
                let mut ddp = DdpControl::new(false, last);
                ddp.0 = (ddp.0 & !0x3f) | (rsvd & 0x3c) | (dv & 3);
                DdpHeader::Untagged(UntaggedHeader {
                    ddp,
                    rdmap: RdmapControl(rdmap),
                    inval_stag: inval,
                    qn,
                    msn,
                    mo,
                })
            }),
    ]
}

proptest! {
    #[test]
    fn hostile_headers_never_overflow(
        hdrs in proptest::collection::vec((any_header(), 0usize..120), 1..6),
        cut in 1usize..40,
    ) {
        let mut b = End::new(200);
        let local = b.reg(vec![0x11; 256], Access::LOCAL_READ | Access::LOCAL_WRITE);
        let exposed = b.reg(vec![0; 256], Access::ALL);
        b.qp.post_recv(&b.mem, 1, sge(local, 0, 64)).unwrap();
        b.qp.post_send(&b.mem, read(2, sge(local, 64, 100), exposed, 0)).unwrap();
        let mut out = Vec::new();
        b.qp.poll_transmit(&b.mem, &mut out, usize::MAX, usize::MAX);
        let mut framer = Framer::new(true, false);
        let mut bytes = Vec::new();
        for (i, (h, n)) in hdrs.iter().enumerate() {
            // Aim some headers at the real STags.
            let h = match *h {
                DdpHeader::Tagged(mut t) if i % 2 == 0 => {
                    t.stag = if i % 4 == 0 { exposed.0 } else { local.0 };
                    DdpHeader::Tagged(t)
                }
                h => h,
            };
            bytes.extend(fpdu(&mut framer, h, &pattern(*n, i as u8)));
        }
        for piece in bytes.chunks(cut) {
            b.qp.receive(piece, &mut b.mem);
            prop_assert!(b.qp.inbound_reads() <= 4);
        }
        // The receive buffer and the Read sink are local: only a Send or the
        // Read Response may fill them, never a tagged Write.
        let img = b.mem.snapshot(local).unwrap();
        prop_assert!(img[164..].iter().all(|x| *x == 0x11));
        let _ = comps(&mut b.qp);
        let _ = events(&mut b.qp);
        b.qp.poll_transmit(&b.mem, &mut out, usize::MAX, usize::MAX);
    }
}

/// A whole RDMA Write FPDU to a region takes `RxCtx::whole_tagged`'s one
/// step; the same FPDU cut in pieces takes the general path. Both must
/// place the same octets, and every check that fails must raise the same
/// Terminate (RFC 5041 §7.1 tagged checks, §7.2 codes) with nothing placed.
#[test]
fn whole_and_cut_write_fpdus_place_and_terminate_alike() {
    type Pick = fn(&mut End, STag) -> (STag, u64, u32);
    let cases: [(Option<TermCode>, Pick); 7] = [
        (None, |_, mr| (mr, 8, 40)),
        (Some(TermCode::DDP_T_INVALID_STAG), |_, mr| {
            (STag(mr.0 ^ 1), 0, 4)
        }),
        (Some(TermCode::DDP_T_BASE_BOUNDS), |_, mr| (mr, 60, 8)),
        (Some(TermCode::DDP_T_TO_WRAP), |_, mr| (mr, u64::MAX - 1, 4)),
        // RFC 5041 has no access code: a missing right is Invalid STag.
        (Some(TermCode::DDP_T_INVALID_STAG), |b, _| {
            (b.reg(vec![0x33; 64], Access::REMOTE_READ), 0, 4)
        }),
        (Some(TermCode::DDP_T_STAG_NOT_ASSOC), |b, _| {
            let other = b.mem.alloc_pd();
            let s = b
                .mem
                .register(other, vec![0x44; 64], Access::ALL, 0)
                .unwrap();
            (s, 0, 4)
        }),
        (Some(TermCode::DDP_T_INVALID_STAG), |b, mr| {
            b.mem.invalidate(mr).unwrap();
            (mr, 0, 4)
        }),
    ];
    for (want, pick) in cases {
        let mut seen = Vec::new();
        for cut in [usize::MAX, 7] {
            let (mut a, mut b) = (End::new(1024), End::new(1024));
            let mr = b.reg(vec![0x11; 64], Access::REMOTE_WRITE | Access::LOCAL_WRITE);
            let (stag, to, len) = pick(&mut b, mr);
            let before: Vec<_> = [mr, stag].iter().map(|&s| b.mem.snapshot(s)).collect();
            let src = a.reg(pattern(64, 5), Access::LOCAL_READ);
            a.qp.post_send(&a.mem, write(1, sge(src, 0, len), stag, to))
                .unwrap();
            pump_raw(&mut a.qp, &mut a.mem, &mut b.qp, &mut b.mem, cut);
            let after: Vec<_> = [mr, stag].iter().map(|&s| b.mem.snapshot(s)).collect();
            let term = events(&mut b.qp).into_iter().find_map(|e| match e {
                QpEvent::TerminateSent(t) => Some(t),
                _ => None,
            });
            match want {
                None => {
                    assert!(term.is_none(), "cut {cut}: {term:?}");
                    let mut image = [0x11u8; 64];
                    image[8..48].copy_from_slice(&pattern(64, 5)[..40]);
                    assert_eq!(after[0].as_deref(), Some(&image[..]), "cut {cut}");
                }
                Some(code) => {
                    let t = term.unwrap_or_else(|| panic!("cut {cut}: no Terminate"));
                    assert_eq!(t.code, code, "cut {cut}: {stag} at {to:#x}");
                    assert_eq!(t.ddp_header, tagged_write_hdr(stag, to), "cut {cut}");
                    assert_eq!(t.ddp_segment_len, Some(14 + len as u16));
                    assert_eq!(after, before, "cut {cut}: memory changed");
                }
            }
            seen.push((term, after, b.qp.stats().bytes_placed));
        }
        assert_eq!(seen[0], seen[1], "whole and cut differ");
    }
}

/// Read Responses arriving whole take `RxCtx::whole_tagged`'s one step
/// (one-element sink list) or the general path (two elements); cut in
/// pieces they take the general path. Every case must end alike: the same
/// completions, Terminate, sink octets and count placed. The failing cases
/// are RFC 5040 §5.2.2's checks of a response against its request.
#[test]
fn whole_and_cut_read_responses_end_alike() {
    type Resp = (u32, u64, usize, bool); // STag xor, TO, length, last
    let data = pattern(128, 9);
    let cases: [(&str, bool, &[Resp], Option<TermCode>); 7] = [
        (
            "in two",
            false,
            &[(0, 0, 32, false), (0, 32, 32, true)],
            None,
        ),
        (
            "two-element sink",
            true,
            &[(0, 0, 40, false), (0, 40, 24, true)],
            None,
        ),
        (
            "wrong STag",
            false,
            &[(1, 0, 32, false)],
            Some(TermCode::DDP_T_INVALID_STAG),
        ),
        (
            "past the sink",
            false,
            &[(0, 32, 40, true)],
            Some(TermCode::DDP_T_BASE_BOUNDS),
        ),
        (
            "gap",
            false,
            &[(0, 8, 16, false)],
            Some(TermCode::RDMAP_OP_UNSPECIFIED),
        ),
        (
            "short last",
            false,
            &[(0, 0, 32, true)],
            Some(TermCode::RDMAP_OP_UNSPECIFIED),
        ),
        (
            "overlap",
            false,
            &[(0, 0, 32, false), (0, 16, 48, true)],
            Some(TermCode::RDMAP_OP_UNSPECIFIED),
        ),
    ];
    for (name, split, resps, want) in cases {
        let mut seen = Vec::new();
        for cut in [usize::MAX, 7] {
            let mut a = End::new(1024);
            let s1 = a.reg(vec![0; 64], Access::LOCAL_WRITE);
            let s2 = a.reg(vec![0; 64], Access::LOCAL_WRITE);
            let local = if split {
                SgList::new(&[sge(s1, 0, 40), sge(s2, 8, 24)]).unwrap()
            } else {
                SgList::from(sge(s1, 0, 64))
            };
            a.qp.post_send(&a.mem, read(7, local, STag(0x1234_5600), 0))
                .unwrap();
            let mut out = Vec::new();
            a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
            assert!(!out.is_empty(), "{name}: no Read Request");
            let mut framer = Framer::new(true, false);
            for &(x, to, len, last) in resps {
                let o = to as usize;
                let bytes = fpdu(
                    &mut framer,
                    read_resp_hdr(STag(s1.0 ^ x), to, last),
                    &data[o..o + len],
                );
                for piece in bytes.chunks(cut) {
                    a.qp.receive(piece, &mut a.mem);
                }
            }
            let term = events(&mut a.qp).into_iter().find_map(|e| match e {
                QpEvent::LocalError(t) => Some(t),
                _ => None,
            });
            assert_eq!(term.map(|t| t.code), want, "{name}, cut {cut}");
            let done = statuses(&comps(&mut a.qp));
            if want.is_none() {
                assert_eq!(done, vec![(7, WcStatus::Success)], "{name}, cut {cut}");
                let mut got = a.mem.snapshot(s1).unwrap();
                if split {
                    got.truncate(40);
                    got.extend_from_slice(&a.mem.snapshot(s2).unwrap()[8..32]);
                }
                assert_eq!(got, data[..64], "{name}, cut {cut}");
            }
            let mem = (a.mem.snapshot(s1), a.mem.snapshot(s2));
            seen.push((term, done, mem, a.qp.stats().bytes_placed));
        }
        assert_eq!(seen[0], seen[1], "{name}: whole and cut differ");
    }
}

#[test]
fn a_disconnect_reads_as_who_and_why() {
    let e = PostError::Disconnected(DisconnectCause::PeerClosed);
    assert_eq!(e.to_string(), "disconnected: peer closed the connection");
    let c = DisconnectCause::TerminateReceived(TermCode::RDMAP_LOCAL_CATASTROPHIC);
    let text = PostError::Disconnected(c).to_string();
    assert!(
        text.starts_with("disconnected: Terminate received: "),
        "{text}"
    );
    // The code as TermCode shows it: layer, type and error named.
    assert!(text.contains("RDMAP: local catastrophic error"), "{text}");
}

/// The Solicited Event flag of a receive completion comes from the opcode
/// on the wire (RFC 5040 §5.3): a Send (control octets 41 43) completes
/// unsolicited, a Send with SE (41 45) solicited.
#[test]
fn receive_completion_is_solicited_only_for_send_with_se() {
    let mut b = End::new(200);
    let r = b.reg(vec![0; 64], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 1, sge(r, 0, 32)).unwrap();
    b.qp.post_recv(&b.mem, 2, sge(r, 32, 32)).unwrap();
    let mut framer = Framer::new(true, false);
    for (rdmap, msn) in [(0x43u8, 1u8), (0x45, 2)] {
        let hdr = [
            0x41, rdmap, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, msn, 0, 0, 0, 0,
        ];
        let mut bytes = Vec::new();
        framer.emit(&[&hdr[..], b"hello"], &mut bytes).unwrap();
        b.qp.receive(&bytes, &mut b.mem);
    }
    let c = comps(&mut b.qp);
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len, c.solicited))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, 5, false),
            (2, WcStatus::Success, 5, true)
        ]
    );
}

// ------------------------------------------------- RFC 7306: immediate data, atomics

fn write_imm(wr_id: u64, local: impl Into<SgList>, stag: STag, to: u64, imm: u32) -> WorkRequest {
    WorkRequest::WriteImm {
        wr_id,
        signaled: true,
        local: local.into(),
        remote_stag: stag,
        remote_to: to,
        imm,
        solicited: false,
    }
}

fn fetch_add(wr_id: u64, local: Sge, stag: STag, to: u64, add: u64) -> WorkRequest {
    WorkRequest::FetchAdd {
        wr_id,
        signaled: true,
        local,
        remote_stag: stag,
        remote_to: to,
        add,
    }
}

fn cmp_swap(wr_id: u64, local: Sge, stag: STag, to: u64, compare: u64, swap: u64) -> WorkRequest {
    WorkRequest::CmpSwap {
        wr_id,
        signaled: true,
        local,
        remote_stag: stag,
        remote_to: to,
        compare,
        swap,
    }
}

fn u64_at(mem: &MemoryTable, stag: STag, at: usize) -> u64 {
    let img = mem.snapshot(stag).unwrap();
    u64::from_ne_bytes(img[at..at + 8].try_into().unwrap())
}

fn target(end: &mut End, access: Access, values: &[u64]) -> STag {
    let buf: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    end.reg(buf, access)
}

#[test]
fn write_with_immediate_places_then_completes_a_receive_with_the_immediate() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let src = a.reg(pattern(300, 7), Access::LOCAL_READ);
    let dst = b.reg(vec![0; 300], Access::REMOTE_WRITE);
    // The receive buffer is consumed but not written: zero length is fine.
    b.qp.post_recv(&b.mem, 9, SgList::default()).unwrap();
    a.qp.post_send(&a.mem, write_imm(1, sge(src, 0, 300), dst, 0, 0xdead_beef))
        .unwrap();
    // A bare Immediate Data (no Write) with Solicited Event.
    b.qp.post_recv(&b.mem, 10, SgList::default()).unwrap();
    a.qp.post_send(
        &a.mem,
        WorkRequest::WriteImm {
            wr_id: 2,
            signaled: true,
            local: SgList::default(),
            remote_stag: STag(0),
            remote_to: 0,
            imm: 7,
            solicited: true,
        },
    )
    .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.mem.snapshot(dst).unwrap(), pattern(300, 7));
    let rc = comps(&mut b.qp);
    assert_eq!(
        rc.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.imm, c.solicited, c.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (
                9,
                WcOpcode::RecvRdmaWithImm,
                WcStatus::Success,
                Some(0xdead_beef),
                false,
                0
            ),
            (
                10,
                WcOpcode::RecvRdmaWithImm,
                WcStatus::Success,
                Some(7),
                true,
                0
            ),
        ]
    );
    let sc = comps(&mut a.qp);
    assert_eq!(
        sc.iter()
            .map(|c| (c.wr_id, c.opcode, c.status))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::WriteImm, WcStatus::Success),
            (2, WcOpcode::WriteImm, WcStatus::Success)
        ]
    );
}

#[test]
fn immediate_data_is_untagged_qn0_with_eight_octets_on_the_wire() {
    let mut a = End::new(200);
    a.qp.post_send(
        &a.mem,
        WorkRequest::WriteImm {
            wr_id: 2,
            signaled: true,
            local: SgList::default(),
            remote_stag: STag(0),
            remote_to: 0,
            imm: 0x0102_0304,
            solicited: false,
        },
    )
    .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    // MPA length 26, then the untagged header: L, RV 1 opcode 1000b, QN 0, MSN 1, MO 0.
    assert_eq!(
        &out[..28],
        &[
            0, 26, 0x41, 0x48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, // header
            1, 2, 3, 4, 0, 0, 0, 0, // Immediate Data: imm32 first, as iw_cxgb4
        ]
    );
}

#[test]
fn immediate_data_without_a_receive_buffer_is_no_buffer() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    a.qp.post_send(&a.mem, write_imm(1, SgList::default(), STag(0), 0, 1))
        .unwrap();
    let t = terminate_seen(&mut a, &mut b);
    assert_eq!(t.code, TermCode::DDP_U_NO_BUFFER);
}

#[test]
fn fetch_add_and_compare_swap_run_on_the_target_and_return_the_original() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let t = target(&mut b, Access::REMOTE_ATOMIC, &[0, 40, 7]);
    let local = a.reg(vec![0xee; 32], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, fetch_add(1, sge(local, 0, 8), t, 8, 2))
        .unwrap();
    a.qp.post_send(&a.mem, cmp_swap(2, sge(local, 8, 8), t, 16, 7, 99))
        .unwrap();
    a.qp.post_send(&a.mem, cmp_swap(3, sge(local, 16, 8), t, 16, 7, 5))
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(u64_at(&b.mem, t, 8), 42);
    // The first swap matched; the second compared 7 with 99 and stored nothing.
    assert_eq!(u64_at(&b.mem, t, 16), 99);
    assert_eq!(u64_at(&a.mem, local, 0), 40);
    assert_eq!(u64_at(&a.mem, local, 8), 7);
    assert_eq!(u64_at(&a.mem, local, 16), 99);
    assert_eq!(&a.mem.snapshot(local).unwrap()[24..], &[0xee; 8]);
    let c = comps(&mut a.qp);
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::FetchAdd, WcStatus::Success, 8),
            (2, WcOpcode::CmpSwap, WcStatus::Success, 8),
            (3, WcOpcode::CmpSwap, WcStatus::Success, 8),
        ]
    );
    assert!(comps(&mut b.qp).is_empty());
}

#[test]
fn atomic_request_and_response_literal_bytes() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let t = target(&mut b, Access::REMOTE_ATOMIC, &[5]);
    let local = a.reg(vec![0; 8], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, cmp_swap(1, sge(local, 0, 8), t, 0, 5, 6))
        .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    let stag = t.0.to_be_bytes();
    let mut want = vec![
        0, 70, 0x41, 0x4a, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0,
    ];
    want.extend([0, 0, 0, 2, 0, 0, 0, 0]); // CmpSwap, request identifier 0
    want.extend(stag);
    want.extend([0; 8]); // remote TO
    want.extend(6u64.to_be_bytes());
    want.extend(u64::MAX.to_be_bytes());
    want.extend(5u64.to_be_bytes());
    want.extend(u64::MAX.to_be_bytes());
    assert_eq!(&out[..2 + 70], &want[..]);
    b.qp.receive(&out, &mut b.mem);
    let mut back = Vec::new();
    b.qp.poll_transmit(&b.mem, &mut back, usize::MAX, usize::MAX);
    // Atomic Response: QN 3, MSN 1, request identifier 0, original value 5.
    let mut want = vec![
        0, 30, 0x41, 0x4b, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0,
    ];
    want.extend([0, 0, 0, 0]);
    want.extend(5u64.to_be_bytes());
    assert_eq!(&back[..2 + 30], &want[..]);
    a.qp.receive(&back, &mut a.mem);
    assert_eq!(u64_at(&a.mem, local, 0), 5);
    assert_eq!(u64_at(&b.mem, t, 0), 6);
}

fn atomic(wr_id: u64, local: Sge, stag: STag, to: u64, op: Atomic) -> WorkRequest {
    WorkRequest::Atomic {
        wr_id,
        signaled: true,
        local,
        remote_stag: stag,
        remote_to: to,
        op,
    }
}

/// The masked forms and Swap: the Atomic Request's bytes as Wireshark's
/// `dissect_iwarp_atomic` reads them (AtomicOp in the low 4 bits of the
/// first word, then Request Identifier, Remote STag, Remote TO, Add-or-Swap
/// Data and Mask, Compare Data and Mask; docs/rfc7306.md, "RFC 7306"), and
/// the responder's execution.
#[test]
fn masked_atomics_and_swap_literal_bytes_and_semantics() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let t = target(
        &mut b,
        Access::REMOTE_ATOMIC,
        &[0x1122_3344_5566_7788, 0x0000_0001_ffff_ffff, 0xab03, 0xab04],
    );
    let local = a.reg(vec![0xee; 32], Access::LOCAL_WRITE);
    // Swap only the low 16 bits.
    a.qp.post_send(
        &a.mem,
        atomic(
            1,
            sge(local, 0, 8),
            t,
            0,
            Atomic::Swap {
                swap: 0xaaaa_bbbb_cccc_dddd,
                swap_mask: 0xffff,
            },
        ),
    )
    .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    let mut want = vec![
        0, 70, 0x41, 0x4a, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0,
    ];
    want.extend([0, 0, 0, 1]); // reserved | AtomicOp 0001b (Swap)
    want.extend([0, 0, 0, 0]); // Request Identifier 0
    want.extend(t.0.to_be_bytes());
    want.extend([0; 8]); // Remote TO
    want.extend([0xaa, 0xaa, 0xbb, 0xbb, 0xcc, 0xcc, 0xdd, 0xdd]); // Swap Data
    want.extend([0, 0, 0, 0, 0, 0, 0xff, 0xff]); // Swap Mask
    want.extend([0; 16]); // Compare Data, Compare Mask (unused by Swap)
    assert_eq!(&out[..2 + 70], &want[..]);
    b.qp.receive(&out, &mut b.mem);
    // Two 32-bit fields: the low one wraps without carrying into the high one.
    a.qp.post_send(
        &a.mem,
        atomic(
            2,
            sge(local, 8, 8),
            t,
            8,
            Atomic::FetchAdd {
                add: 0x0000_0002_0000_0001,
                field_mask: 0x8000_0000_8000_0000,
            },
        ),
    )
    .unwrap();
    // Compare only the low octet (03 matches), store only the low octet.
    a.qp.post_send(
        &a.mem,
        atomic(
            3,
            sge(local, 16, 8),
            t,
            16,
            Atomic::CmpSwap {
                compare: 0xff03,
                compare_mask: 0xff,
                swap: 0x7709,
                swap_mask: 0xff,
            },
        ),
    )
    .unwrap();
    // The low octet differs (04 against 03): nothing stored.
    a.qp.post_send(
        &a.mem,
        atomic(
            4,
            sge(local, 24, 8),
            t,
            24,
            Atomic::CmpSwap {
                compare: 0xab03,
                compare_mask: 0xff,
                swap: 0,
                swap_mask: u64::MAX,
            },
        ),
    )
    .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    // The Fetch and Add's request: AtomicOp 0000b, Add Mask as given.
    assert_eq!(&out[..4], &[0, 70, 0x41, 0x4a]);
    assert_eq!(&out[20..24], &[0, 0, 0, 0]);
    assert_eq!(&out[40..48], &0x0000_0002_0000_0001u64.to_be_bytes());
    assert_eq!(&out[48..56], &0x8000_0000_8000_0000u64.to_be_bytes());
    // The masked Compare and Swap's (after the first FPDU's CRC): AtomicOp
    // 0010b and its four fields.
    let second = 2 + 70 + 4;
    assert_eq!(&out[second..second + 4], &[0, 70, 0x41, 0x4a]);
    assert_eq!(&out[second + 20..second + 24], &[0, 0, 0, 2]);
    assert_eq!(
        &out[second + 40..second + 72],
        &[
            0, 0, 0, 0, 0, 0, 0x77, 0x09, // Swap Data
            0, 0, 0, 0, 0, 0, 0, 0xff, // Swap Mask
            0, 0, 0, 0, 0, 0, 0xff, 0x03, // Compare Data
            0, 0, 0, 0, 0, 0, 0, 0xff, // Compare Mask
        ]
    );
    b.qp.receive(&out, &mut b.mem);
    pump(&mut a, &mut b);
    assert_eq!(u64_at(&b.mem, t, 0), 0x1122_3344_5566_dddd);
    assert_eq!(u64_at(&b.mem, t, 8), 0x0000_0003_0000_0000);
    assert_eq!(u64_at(&b.mem, t, 16), 0xab09);
    assert_eq!(u64_at(&b.mem, t, 24), 0xab04);
    assert_eq!(u64_at(&a.mem, local, 0), 0x1122_3344_5566_7788);
    assert_eq!(u64_at(&a.mem, local, 8), 0x0000_0001_ffff_ffff);
    assert_eq!(u64_at(&a.mem, local, 16), 0xab03);
    assert_eq!(u64_at(&a.mem, local, 24), 0xab04);
    let c = comps(&mut a.qp);
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::Swap, WcStatus::Success, 8),
            (2, WcOpcode::FetchAdd, WcStatus::Success, 8),
            (3, WcOpcode::CmpSwap, WcStatus::Success, 8),
            (4, WcOpcode::CmpSwap, WcStatus::Success, 8),
        ]
    );
    assert!(comps(&mut b.qp).is_empty());
}

#[test]
fn atomic_without_remote_atomic_access_is_refused() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let t = target(&mut b, Access::REMOTE_WRITE | Access::REMOTE_READ, &[40]);
    let local = a.reg(vec![0; 8], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, fetch_add(1, sge(local, 0, 8), t, 0, 2))
        .unwrap();
    let term = terminate_seen(&mut a, &mut b);
    assert_eq!(term.code, TermCode::RDMAP_ACCESS);
    assert_eq!(u64_at(&b.mem, t, 0), 40);
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::RemoteAccess)]
    );
}

#[test]
fn misaligned_or_out_of_bounds_atomic_is_refused() {
    for (to, code) in [
        (4, TermCode::RDMAP_BASE_BOUNDS),
        (12, TermCode::RDMAP_BASE_BOUNDS),
        (16, TermCode::RDMAP_BASE_BOUNDS),
    ] {
        let mut a = End::new(200);
        let mut b = End::new(200);
        let t = target(&mut b, Access::REMOTE_ATOMIC, &[1, 2]);
        let local = a.reg(vec![0; 8], Access::LOCAL_WRITE);
        a.qp.post_send(&a.mem, cmp_swap(1, sge(local, 0, 8), t, to, 0, u64::MAX))
            .unwrap();
        let term = terminate_seen(&mut a, &mut b);
        assert_eq!(term.code, code, "TO {to}");
        let img: Vec<u8> = [1u64, 2].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(b.mem.snapshot(t).unwrap(), img, "TO {to}");
        assert_eq!(
            statuses(&comps(&mut a.qp)),
            vec![(1, WcStatus::RemoteAccess)]
        );
    }
}

#[test]
fn atomics_beyond_the_peer_ird_are_no_buffer() {
    let mut a = End::new(200);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut b = End {
        qp: Qp::new(QpConfig {
            ird: 1,
            ..cfg(pd, 200)
        }),
        mem,
        pd,
    };
    let t = target(&mut b, Access::REMOTE_ATOMIC, &[0]);
    let local = a.reg(vec![0; 16], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, fetch_add(1, sge(local, 0, 8), t, 0, 1))
        .unwrap();
    a.qp.post_send(&a.mem, fetch_add(2, sge(local, 8, 8), t, 0, 1))
        .unwrap();
    let term = terminate_seen(&mut a, &mut b);
    assert_eq!(term.code, TermCode::DDP_U_NO_BUFFER);
    // Only the first ran.
    assert_eq!(u64_at(&b.mem, t, 0), 1);
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::Flushed), (2, WcStatus::RemoteInvalidRequest)]
    );
}

#[test]
fn atomics_wait_for_ord_with_reads() {
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut a = End {
        qp: Qp::new(QpConfig {
            ord: 1,
            ..cfg(pd, 200)
        }),
        mem,
        pd,
    };
    let mut b = End::new(200);
    let t = target(&mut b, Access::REMOTE_ATOMIC | Access::REMOTE_READ, &[3]);
    let local = a.reg(vec![0; 16], Access::LOCAL_WRITE);
    a.qp.post_send(&a.mem, read(1, sge(local, 8, 8), t, 0))
        .unwrap();
    a.qp.post_send(&a.mem, fetch_add(2, sge(local, 0, 8), t, 0, 1))
        .unwrap();
    let mut out = Vec::new();
    a.qp.poll_transmit(&a.mem, &mut out, usize::MAX, usize::MAX);
    // Only the Read Request left (MPA length, 46-octet ULPDU, CRC; no
    // pad): ORD 1 holds the Atomic Request back.
    assert_eq!(out.len(), 2 + 18 + 28 + 4);
    b.qp.receive(&out, &mut b.mem);
    pump(&mut a, &mut b);
    assert_eq!(u64_at(&b.mem, t, 0), 4);
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn atomic_local_buffer_must_be_eight_octets() {
    let mut a = End::new(200);
    let local = a.reg(vec![0; 16], Access::LOCAL_WRITE);
    assert_eq!(
        a.qp.post_send(&a.mem, fetch_add(1, sge(local, 0, 4), STag(1), 0, 1)),
        Err(PostError::AtomicLength)
    );
    let ro = a.reg(vec![0; 8], Access::LOCAL_READ);
    assert!(matches!(
        a.qp.post_send(&a.mem, fetch_add(1, sge(ro, 0, 8), STag(1), 0, 1)),
        Err(PostError::Local(_))
    ));
}

#[test]
fn malformed_rfc7306_messages_terminate() {
    // An Atomic Request body cut short, an unknown atomic operation, an
    // Immediate Data of 4 octets, an Atomic Response nobody asked for.
    let mut body = AtomicRequest {
        op: AtomicOp::FetchAdd,
        req_id: 0,
        stag: 0,
        to: 0,
        add_swap: 1,
        add_swap_mask: 0,
        compare: 0,
        compare_mask: 0,
    }
    .to_bytes()
    .to_vec();
    let cases: Vec<(DdpHeader, Vec<u8>, bool, TermCode)> = vec![
        (
            untagged_hdr(Opcode::AtomicRequest, 0, 1, 0, true),
            body[..40].to_vec(),
            false,
            TermCode::RDMAP_OP_UNSPECIFIED,
        ),
        (
            untagged_hdr(Opcode::AtomicRequest, 0, 1, 0, true),
            {
                body[3] = 9;
                body.clone()
            },
            false,
            TermCode::RDMAP_OP_UNSPECIFIED,
        ),
        (
            untagged_hdr(Opcode::AtomicRequest, 0, 1, 0, true),
            [body.clone(), vec![0; 4]].concat(),
            false,
            TermCode::DDP_U_TOO_LONG,
        ),
        (
            untagged_hdr(Opcode::ImmediateData, 0, 1, 0, true),
            vec![1, 2, 3, 4],
            true,
            TermCode::RDMAP_OP_UNSPECIFIED,
        ),
        (
            untagged_hdr(Opcode::ImmediateData, 0, 1, 0, true),
            vec![0; 12],
            true,
            TermCode::DDP_U_TOO_LONG,
        ),
        (
            untagged_hdr(Opcode::AtomicResponse, 0, 1, 0, true),
            vec![0; 12],
            false,
            TermCode::DDP_U_NO_BUFFER,
        ),
        (
            // An Atomic Request on QN 0.
            DdpHeader::Untagged(UntaggedHeader {
                ddp: DdpControl::new(false, true),
                rdmap: RdmapControl::new(Opcode::AtomicRequest),
                inval_stag: 0,
                qn: 0,
                msn: 1,
                mo: 0,
            }),
            body.clone(),
            false,
            TermCode::RDMAP_UNEXPECTED_OPCODE,
        ),
    ];
    for (i, (hdr, payload, recv, code)) in cases.into_iter().enumerate() {
        let mut b = End::new(200);
        if recv {
            b.qp.post_recv(&b.mem, 1, SgList::default()).unwrap();
        }
        let mut framer = Framer::new(true, false);
        let bytes = fpdu(&mut framer, hdr, &payload);
        for piece in bytes.chunks(5) {
            b.qp.receive(piece, &mut b.mem);
        }
        let t = queued_terminate(&mut b.qp, &b.mem);
        assert_eq!(t.code, code, "case {i}");
        assert_eq!(t.ddp_header, Some(hdr), "case {i}");
    }
}

// ------------------------------------------------ the small-message path

/// Small Sends and Writes, one FPDU each, in every form the small path
/// (`Qp::small_next`) takes, and two it leaves to the general path (a
/// gather of two pieces, a Write past `copy_below`).
fn small_mix(e: &mut End, peer_stag: STag) -> Vec<WorkRequest> {
    let a = e.reg(pattern(300, 7), Access::LOCAL_READ);
    let b = e.reg(pattern(40, 9), Access::LOCAL_READ);
    vec![
        write(1, sge(a, 3, 64), peer_stag, 0x10),
        WorkRequest::WriteInline {
            wr_id: 2,
            signaled: true,
            data: InlineData::new(b"inline!!").unwrap(),
            remote_stag: peer_stag,
            remote_to: 0x99,
        },
        WorkRequest::Send {
            wr_id: 3,
            signaled: true,
            local: sge(b, 1, 21).into(),
            solicited: true,
            invalidate: Some(STag(0x0102_0304)),
        },
        WorkRequest::SendInline {
            wr_id: 4,
            signaled: true,
            data: InlineData::new(b"abc").unwrap(),
            solicited: false,
            invalidate: None,
        },
        send(5, SgList::EMPTY, None),
        write(
            6,
            SgList::new(&[sge(a, 0, 5), sge(b, 0, 6)]).unwrap(),
            peer_stag,
            0,
        ),
        write(7, sge(a, 0, 299), peer_stag, 0x20),
        send(8, sge(b, 39, 1), None),
    ]
}

/// `poll_record`'s small path writes each small message's FPDU straight
/// into its record: octet for octet what the general path frames
/// (`poll_transmit`: MPA length, DDP/RDMAP header, payload, PAD, CRC —
/// RFC 5044 §4.1, RFC 5041 §4, RFC 5040 §4), MSNs in order, and each
/// request complete once handed over (RFC 5040 §5.5 rule 14), with and
/// without the CRC.
#[test]
fn a_small_message_is_written_into_its_record_as_the_general_path_frames_it() {
    for crc in [true, false] {
        let mk = || {
            let mut e = End::new(1024);
            e.qp = Qp::new(QpConfig {
                crc,
                ..cfg(e.pd, 1024)
            });
            e
        };
        let (mut small, mut general) = (mk(), mk());
        for e in [&mut small, &mut general] {
            for wr in small_mix(e, STag(0x1122_3344)) {
                e.qp.post_send(&e.mem, wr).unwrap();
            }
        }
        let mut want = Vec::new();
        general
            .qp
            .poll_transmit(&general.mem, &mut want, usize::MAX, usize::MAX);
        let mut txq = crate::txq::TxQueue::new(0);
        let mut records = 0;
        while small.qp.poll_record(&small.mem, usize::MAX, 200, &mut txq) {
            records += 1;
        }
        assert_eq!(records, 8, "crc {crc}");
        let mut got = vec![0u8; txq.end() as usize];
        assert!(txq.fill(&small.mem, 0, &mut got));
        assert_eq!(got, want, "crc {crc}");
        // The first FPDU, by the octet: 2 + 14 + 64 + PAD 0 + CRC 4.
        assert_eq!(&got[..2], &[0, 78]);
        assert_eq!(
            &got[2..4],
            &[0xc1, 0x40],
            "tagged, last, DDP v1; RDMA Write, RDMAP v1"
        );
        assert_eq!(&got[4..8], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&got[8..16], &0x10u64.to_be_bytes());
        assert_eq!(&got[16..80], &pattern(300, 7)[3..67]);
        let want_crc = if crc {
            let mut c = crate::crc::Crc32c::new();
            c.update(&got[..80]);
            crate::crc::Crc32c::to_wire(c.value())
        } else {
            [0; 4]
        };
        assert_eq!(&got[80..84], &want_crc);
        // Every one completed (copied: none waits for an acknowledgement),
        // the one past `copy_below` by reference, when acknowledged.
        let done: Vec<u64> = comps(&mut small.qp).iter().map(|c| c.wr_id).collect();
        assert_eq!(done, vec![1, 2, 3, 4, 5, 6], "crc {crc}");
        let qp = &mut small.qp;
        txq.release(txq.end(), &mut |seq| qp.fpdu_acked(seq));
        assert_eq!(
            statuses(&comps(&mut small.qp)),
            vec![(7, WcStatus::Success), (8, WcStatus::Success)]
        );
    }
}

/// The small path leaves a source that fails its checks to the general
/// path: the request completes in error and a Terminate follows (RFC
/// 5040 §7.1 case 1), as it would have without the small path.
#[test]
fn a_small_message_whose_source_went_away_fails_as_before() {
    let mut a = End::new(1024);
    let mut b = End::new(1024);
    let src = a.reg(pattern(64, 1), Access::LOCAL_READ);
    let dst = b.reg(vec![0; 64], Access::REMOTE_WRITE);
    a.qp.post_send(&a.mem, write(1, sge(src, 0, 64), dst, 0))
        .unwrap();
    a.mem.deregister(src).unwrap();
    let mut txq = crate::txq::TxQueue::new(0);
    assert!(a.qp.poll_record(&a.mem, usize::MAX, 200, &mut txq));
    assert_eq!(
        statuses(&comps(&mut a.qp)),
        vec![(1, WcStatus::LocalProtection(AccessError::InvalidStag))]
    );
    let mut out = vec![0u8; txq.end() as usize];
    assert!(txq.fill(&a.mem, 0, &mut out));
    b.qp.receive(&out, &mut b.mem);
    let t = events(&mut b.qp)
        .into_iter()
        .find_map(|e| match e {
            QpEvent::TerminateReceived(t) => Some(t),
            _ => None,
        })
        .expect("a Terminate");
    assert_eq!(t, TerminateRepr::bare(TermCode::RDMAP_LOCAL_CATASTROPHIC));
    assert!(b.mem.snapshot(dst).unwrap().iter().all(|x| *x == 0));
}
