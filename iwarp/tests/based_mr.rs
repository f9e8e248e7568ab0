//! Memory registered at a chosen base tagged offset
//! (`Pd::register_region_at`), as verbs registers with the virtual address
//! as the TO: a Write, a Read and a Send between two simulated contexts
//! whose regions (on both sides) sit at large bases land where TO - base
//! says; `Mr::sge` adds the base; a window onto a based region answers to
//! the region's TOs; a TO below the base is refused by the peer.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, ListenOptions, MemError, Region, Sge,
    Status, Wc, WcOpcode, WcStatus, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

/// The client's regions' base TO (a user-space address, as verbs would use).
const CBASE: u64 = 0x7f00_1234_5000;
/// The server's: another one, so that a TO taken from the wrong side fails.
const SBASE: u64 = 0x7f00_9876_0000;

fn next(cq: &Cq, what: &str) -> Wc {
    cq.wait(T)
        .unwrap_or_else(|| panic!("no completion for {what}"))
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_read_and_send_at_a_chosen_base() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND;
    let target = spd
        .register_region_at(Region::from_vec(pattern(1, 8192)), rights, SBASE)
        .unwrap();
    let inbox = spd
        .register_region_at(
            Region::from_vec(vec![0; 4096]),
            Access::LOCAL_WRITE,
            SBASE + 0x10_0000,
        )
        .unwrap();
    let local = cpd
        .register_region_at(
            Region::from_vec(pattern(2, 8192)),
            Access::LOCAL_WRITE,
            CBASE,
        )
        .unwrap();
    assert_eq!(
        (target.base_to(), inbox.base_to(), local.base_to()),
        (SBASE, SBASE + 0x10_0000, CBASE)
    );
    let s = local.sge(100, 7);
    assert_eq!((s.stag, s.to, s.len), (local.stag(), CBASE + 100, 7));
    // A zero-based registration keeps TO == offset.
    let plain = cpd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    assert_eq!((plain.base_to(), plain.sge(8, 8).to), (0, 8));
    // A base whose end overflows is refused.
    assert!(matches!(
        cpd.register_region_at(
            Region::from_vec(vec![0; 64]),
            Access::LOCAL_WRITE,
            u64::MAX - 8
        ),
        Err(iwarp::Error::Memory(MemError::TooLarge))
    ));

    let listener = server.listen(9500, &ListenOptions::new(&spd)).unwrap();
    let co = ConnectOptions::new(&cpd, &ccq);
    let addr = SocketAddrV4::new(server.addr(), 9500);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    req.post_recv(1, inbox.sge(64, 128)).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();

    // Write: local octets 16..80 to the server's TO SBASE + 256.
    cqp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: local.sge(16, 64).into(),
        remote_stag: target.stag(),
        remote_to: SBASE + 256,
    })
    .unwrap();
    let wc = next(&ccq, "the Write");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (1, Some(WcOpcode::Write), Status::Wc(WcStatus::Success))
    );
    // Read: the server's TOs SBASE + 200.. into local octets 5000..
    // (placed behind the Write, so it also shows the Write landed).
    cqp.post_send(WorkRequest::Read {
        wr_id: 2,
        signaled: true,
        local: local.sge(5000, 300).into(),
        remote_stag: target.stag(),
        remote_to: SBASE + 200,
    })
    .unwrap();
    let wc = next(&ccq, "the Read");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, Some(WcOpcode::Read), Status::Wc(WcStatus::Success))
    );
    let mut want = pattern(1, 8192);
    want[256..320].copy_from_slice(&pattern(2, 8192)[16..80]);
    assert_eq!(
        target.read(0, 8192).unwrap(),
        want,
        "the Write at offset 256"
    );
    assert_eq!(
        local.read(5000, 300).unwrap(),
        want[200..500],
        "the Read from offset 200"
    );
    // Send: local octets 1000..1100 into the server's receive at inbox
    // offset 64.
    cqp.post_send(WorkRequest::Send {
        wr_id: 3,
        signaled: true,
        local: local.sge(1000, 100).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    assert_eq!(next(&ccq, "the Send").status, Status::Wc(WcStatus::Success));
    let wc = next(&scq, "the receive");
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, Status::Wc(WcStatus::Success), 100)
    );
    let got = inbox.read(0, 256).unwrap();
    assert_eq!(&got[64..164], &pattern(2, 8192)[1000..1100]);
    assert!(got[..64].iter().chain(&got[164..]).all(|&b| b == 0));

    // A window onto the based region at offset 2048: the peer uses the
    // region's TOs for it.
    let mut mw = spd.alloc_mw().unwrap();
    let wstag = mw.bind(&target, 2048, 128, Access::REMOTE_WRITE).unwrap();
    cqp.post_send(WorkRequest::Write {
        wr_id: 4,
        signaled: true,
        local: local.sge(0, 32).into(),
        remote_stag: wstag,
        remote_to: SBASE + 2048 + 64,
    })
    .unwrap();
    assert_eq!(
        next(&ccq, "the Write through the window").status,
        Status::Wc(WcStatus::Success)
    );
    // Read back through the region (behind the Write).
    cqp.post_send(WorkRequest::Read {
        wr_id: 5,
        signaled: true,
        local: local.sge(6000, 32).into(),
        remote_stag: target.stag(),
        remote_to: SBASE + 2048 + 64,
    })
    .unwrap();
    assert_eq!(
        next(&ccq, "the Read behind it").status,
        Status::Wc(WcStatus::Success)
    );
    assert_eq!(target.read(2112, 32).unwrap(), pattern(2, 8192)[..32]);
    assert_eq!(local.read(6000, 32).unwrap(), pattern(2, 8192)[..32]);

    // A local SGE with TO = offset (ignoring the base) is refused here.
    cqp.post_send(WorkRequest::Send {
        wr_id: 6,
        signaled: true,
        local: Sge {
            stag: local.stag(),
            to: 1000,
            len: 8,
        }
        .into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = next(&ccq, "the Send from a TO below the base");
    assert_eq!(wc.wr_id, 6);
    assert!(
        matches!(
            wc.status,
            Status::Refused(_) | Status::Wc(WcStatus::LocalProtection(_))
        ),
        "{wc:?}"
    );

    // A Read of the server's TOs just below its base: the peer refuses it
    // (remote access error, the Read's completion quotes it).
    cqp.post_send(WorkRequest::Read {
        wr_id: 7,
        signaled: true,
        local: local.sge(0, 64).into(),
        remote_stag: target.stag(),
        remote_to: SBASE - 32,
    })
    .unwrap();
    let wc = next(&ccq, "the Read below the base");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (7, Some(WcOpcode::Read), Status::Wc(WcStatus::RemoteAccess))
    );
    drop((cqp, sqp));
}

/// A Read at TO 0 of a region registered at a large base (what code that
/// took TOs for offsets would send) is refused by the peer.
#[test]
fn a_read_at_offset_zero_of_a_based_region_is_refused() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let target = spd
        .register_region_at(Region::from_vec(vec![9; 4096]), Access::REMOTE_READ, CBASE)
        .unwrap();
    let sink = cpd
        .register_region_at(Region::from_vec(vec![0; 4096]), Access::LOCAL_WRITE, CBASE)
        .unwrap();
    let listener = server.listen(9501, &ListenOptions::new(&spd)).unwrap();
    let co = ConnectOptions::new(&cpd, &ccq);
    let addr = SocketAddrV4::new(server.addr(), 9501);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let sqp = listener
        .get_request(T)
        .unwrap()
        .accept(&AcceptOptions::default(), &scq)
        .unwrap();
    let cqp = t.join().unwrap().unwrap();
    cqp.post_send(WorkRequest::Read {
        wr_id: 1,
        signaled: true,
        local: sink.sge(0, 16).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .unwrap();
    let wc = next(&ccq, "the Read at TO 0");
    assert_eq!(
        (wc.wr_id, wc.status),
        (1, Status::Wc(WcStatus::RemoteAccess))
    );
    assert!(sink.read(0, 16).unwrap().iter().all(|&b| b == 0));
    drop((cqp, sqp));
}
