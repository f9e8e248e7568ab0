//! A context over any frame device (`Context::with_device`): here the
//! in-memory link of `iwarp_datapath::link`, made lossy by its fault
//! injector, with no backend feature needed (`cargo test -p iwarp
//! --no-default-features` runs it).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, DeviceStats, Error, HostOptions, ListenOptions,
    WcOpcode, WorkRequest,
};
use iwarp_datapath::link::{Faults, FaultyDevice, MemDevice};

const T: Duration = Duration::from_secs(20);

fn host(last: u8) -> HostOptions {
    let mut h = HostOptions::new(Ipv4Addr::new(10, 0, 9, last), 24);
    h.tcp.rto_min = Duration::from_millis(5);
    h
}

fn mac(last: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 9, last]
}

#[test]
fn a_write_crosses_a_lossy_device_given_to_with_device() {
    let (da, db) = MemDevice::pair(4096);
    let faults = Faults {
        loss: 10_000,
        reorder: 10_000,
        ..Faults::default()
    };
    let server =
        Context::with_device(FaultyDevice::new(da, faults, 1), mac(1), 1500, &host(1)).unwrap();
    let client =
        Context::with_device(FaultyDevice::new(db, faults, 2), mac(2), 1500, &host(2)).unwrap();
    assert_eq!(server.addr(), Ipv4Addr::new(10, 0, 9, 1));

    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    const LEN: usize = 256 << 10;
    let target = spd.register(vec![0; LEN], Access::REMOTE_WRITE).unwrap();
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
    let src = cpd.register(pattern.clone(), Access::LOCAL_READ).unwrap();
    let listener = server.listen(9400, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9400);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let req = listener.get_request(T).unwrap();
    let _sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    cqp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, LEN as u32).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .unwrap();
    let wc = ccq.wait(T).unwrap();
    assert!(wc.status.is_ok(), "{wc:?}");
    assert_eq!((wc.wr_id, wc.opcode), (1, Some(WcOpcode::Write)));
    assert_eq!(target.read(0, LEN).unwrap(), pattern);

    let st = client.stats().unwrap();
    assert!(matches!(st.device, DeviceStats::Other), "{st:?}");
    assert!(st.tcp.rto_retransmits + st.tcp.fast_retransmits > 0, "{st}");
    assert!(st.to_string().contains("device: the application's"), "{st}");
}

#[test]
fn with_device_checks_the_host_options_and_the_mtu() {
    let (da, _db) = MemDevice::pair(16);
    let mut h = host(1);
    h.mtu = Some(500);
    assert!(matches!(
        Context::with_device(da, mac(1), 1500, &h),
        Err(Error::InvalidArgument(_))
    ));
    let (da, _db) = MemDevice::pair(16);
    h.mtu = Some(9000);
    match Context::with_device(da, mac(1), 1500, &h) {
        Err(Error::MtuAboveInterface {
            requested: 9000,
            interface: 1500,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}
