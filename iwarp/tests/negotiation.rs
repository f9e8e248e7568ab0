//! Every negotiation combination end to end over the simulated link:
//! MPA Rev 1 and 2 × CRC asked by neither/initiator/responder/both × markers
//! asked per direction × (Rev 2) no peer-to-peer or each RTR kind. Each
//! connection carries an RDMA Write, an RDMA Read and a Send, checked at
//! their destinations, and reports what was negotiated.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, ListenOptions, MpaConfig, RtrOffer, WcOpcode,
    WorkRequest,
};

const T: Duration = Duration::from_secs(10);

fn rtr(kind: Option<u8>) -> RtrOffer {
    RtrOffer {
        zero_length_fpdu: kind == Some(0),
        write: kind == Some(1),
        read: kind == Some(2),
    }
}

#[test]
fn every_mpa_combination_carries_write_read_and_send() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let target = spd
        .register(
            vec![0; 4096],
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
        )
        .unwrap();
    let inbox = spd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let src = cpd
        .register(
            (0..4096).map(|i| (i * 7) as u8).collect(),
            Access::LOCAL_READ,
        )
        .unwrap();
    let sink = cpd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let mut port = 10_000u16;
    let mut combos = 0;
    for rev in [1u8, 2] {
        let p2p_kinds: &[Option<u8>] = if rev == 2 {
            &[None, Some(0), Some(1), Some(2)]
        } else {
            &[None]
        };
        for &p2p in p2p_kinds {
            for crc in 0..4u8 {
                for markers in 0..4u8 {
                    combos += 1;
                    port += 1;
                    let (icrc, rcrc) = (crc & 1 != 0, crc & 2 != 0);
                    let (imark, rmark) = (markers & 1 != 0, markers & 2 != 0);
                    let label = format!(
                        "rev {rev} p2p {p2p:?} crc i{icrc}/r{rcrc} markers i{imark}/r{rmark}"
                    );
                    let mut lo = ListenOptions::new(&spd);
                    lo.mpa = MpaConfig {
                        rev,
                        crc: rcrc,
                        markers_rx: rmark,
                        peer_to_peer: p2p.is_some(),
                        rtr: RtrOffer {
                            zero_length_fpdu: true,
                            write: true,
                            read: true,
                        },
                        ..MpaConfig::default()
                    };
                    let listener = server.listen(port, &lo).unwrap();
                    let mut co = ConnectOptions::new(&cpd, &ccq);
                    co.mpa = MpaConfig {
                        rev,
                        crc: icrc,
                        markers_rx: imark,
                        peer_to_peer: p2p.is_some(),
                        rtr: rtr(p2p),
                        private_data: label.as_bytes().to_vec(),
                        ..MpaConfig::default()
                    };
                    let addr = SocketAddrV4::new(server.addr(), port);
                    let c = client.clone();
                    let t = std::thread::spawn(move || c.connect(addr, &co));
                    let req = listener
                        .get_request(T)
                        .unwrap_or_else(|e| panic!("{label}: {e}"));
                    assert_eq!(req.peer().private_data, label.as_bytes(), "{label}");
                    req.post_recv(1, inbox.sge(0, 100)).unwrap();
                    let sqp = req
                        .accept(&AcceptOptions::default(), &scq)
                        .unwrap_or_else(|e| panic!("{label}: {e}"));
                    let cqp = t.join().unwrap().unwrap_or_else(|e| panic!("{label}: {e}"));
                    let n = cqp.negotiated();
                    assert_eq!(n.rev, rev, "{label}");
                    assert_eq!(n.crc, icrc || rcrc, "{label}: CRC if either side asks");
                    assert_eq!(
                        (n.markers_rx, n.markers_tx),
                        (imark, rmark),
                        "{label}: markers per direction"
                    );
                    let want_rtr = p2p.map(|k| match k {
                        0 => iwarp::RtrKind::ZeroLengthFpdu,
                        1 => iwarp::RtrKind::Write,
                        _ => iwarp::RtrKind::Read,
                    });
                    assert_eq!(n.rtr, want_rtr, "{label}");
                    assert_eq!(sqp.negotiated().crc, n.crc, "{label}");
                    // Write, Read, Send; each checked where it lands.
                    let off = (combos % 8) as u64 * 256;
                    cqp.post_send(WorkRequest::Write {
                        wr_id: 1,
                        signaled: true,
                        local: src.sge(off, 256).into(),
                        remote_stag: target.stag(),
                        remote_to: off,
                    })
                    .unwrap();
                    cqp.post_send(WorkRequest::Read {
                        wr_id: 2,
                        signaled: true,
                        local: sink.sge(off, 256).into(),
                        remote_stag: target.stag(),
                        remote_to: off,
                    })
                    .unwrap();
                    cqp.post_send(WorkRequest::Send {
                        wr_id: 3,
                        signaled: true,
                        local: src.sge(off, 100).into(),
                        solicited: true,
                        invalidate: None,
                    })
                    .unwrap();
                    for want in [
                        (1, WcOpcode::Write),
                        (2, WcOpcode::Read),
                        (3, WcOpcode::Send),
                    ] {
                        let wc = ccq
                            .wait(T)
                            .unwrap_or_else(|| panic!("{label}: no completion"));
                        assert!(wc.status.is_ok(), "{label}: {wc:?}");
                        assert_eq!((wc.wr_id, wc.opcode), (want.0, Some(want.1)), "{label}");
                    }
                    let wc = scq.wait(T).unwrap_or_else(|| panic!("{label}: no Recv"));
                    assert_eq!(
                        (wc.wr_id, wc.opcode, wc.byte_len, wc.solicited),
                        (1, Some(WcOpcode::Recv), 100, true),
                        "{label}"
                    );
                    let expect = src.read(off as usize, 256).unwrap();
                    assert_eq!(
                        target.read(off as usize, 256).unwrap(),
                        expect,
                        "{label}: Write"
                    );
                    assert_eq!(
                        sink.read(off as usize, 256).unwrap(),
                        expect,
                        "{label}: Read"
                    );
                    assert_eq!(inbox.read(0, 100).unwrap(), expect[..100], "{label}: Send");
                    cqp.disconnect().unwrap();
                    cqp.wait_disconnected(T).unwrap();
                    sqp.wait_disconnected(T).unwrap();
                }
            }
        }
    }
    assert_eq!(combos, 16 + 64);
}
