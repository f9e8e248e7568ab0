//! `HostOptions::trusted_link` over DPDK memif, in this process: two
//! trusting ends connect and a Write lands whole (nothing at either end
//! counted as a bad or partial checksum); a trusting server and a
//! verifying client do not connect, and the client counts the server's
//! segments as partial checksums and names the cause. Without DPDK in the
//! build the test says so and passes, except under CI.
#![cfg(feature = "dpdk")]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use iwarp::dpdk::{Eal, MemifRole};
use iwarp::{Access, ConnectOptions, Context, DpdkOptions, ListenOptions, Polling, WorkRequest};

const T: Duration = Duration::from_secs(10);

fn open(eal: &Eal, sock: &Path, index: u32, role: MemifRole, last: u8, trusted: bool) -> Context {
    let mut o = DpdkOptions::memif(index, role, 0, sock, Ipv4Addr::new(10, 77, 12, last), 24);
    // Small rings: four ports within the EAL's 256 MiB.
    o.queues = iwarp::dpdk::Queues {
        rx_desc: 256,
        tx_desc: 256,
    };
    o.host.polling = Polling::Adaptive;
    o.host.trusted_link = trusted;
    Context::dpdk(eal, &o).expect("memif context")
}

fn socket(name: &str) -> std::path::PathBuf {
    let sock = std::env::temp_dir().join(format!("iwarp-{name}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    sock
}

#[test]
fn a_trusted_memif_link_carries_writes_and_a_verifying_peer_names_the_mismatch() {
    if !iwarp::dpdk::AVAILABLE {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI without DPDK: scripts/deps.sh --test installs libdpdk-dev"
        );
        eprintln!("SKIP: built without DPDK (install libdpdk-dev)");
        return;
    }
    let eal = Eal::init(iwarp::dpdk::floating_vdev_args(
        &[],
        &iwarp::dpdk::allowed_cpus(),
    ))
    .expect("EAL");

    // Both ends trust the link.
    let sock = socket("trusted");
    let server = open(&eal, &sock, 0, MemifRole::Server, 1, true);
    let client = open(&eal, &sock, 1, MemifRole::Client, 2, true);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(8), client.create_cq(8));
    let target = spd
        .register(vec![0; 8192], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let listener = server.listen(7600, &ListenOptions::new(&spd)).unwrap();
    let to = SocketAddrV4::new(server.addr(), 7600);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c.connect(to, &o));
    let sqp = listener
        .get_request(T)
        .expect("a request")
        .accept(&Default::default(), &scq)
        .expect("accepted");
    let cqp = t.join().unwrap().expect("connected");
    // Several segments' worth, each octet telling its place.
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 256) as u8).collect();
    let src = cpd.register(data.clone(), Access::LOCAL_WRITE).unwrap();
    cqp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, 8192).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .unwrap();
    let w = ccq.wait(T).expect("the Write's completion");
    assert!(w.status.is_ok(), "{w:?}");
    // Placed once a Send behind it has arrived (RFC 5040 §5.5).
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    sqp.post_recv(9, inbox.sge(0, 0)).unwrap();
    cqp.post_send(WorkRequest::Send {
        wr_id: 2,
        signaled: false,
        local: src.sge(0, 0).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let w = scq.wait(T).expect("the Send's completion");
    assert!(w.status.is_ok(), "{w:?}");
    assert_eq!(target.read(0, 8192).unwrap(), data);
    for (who, ctx) in [("server", &server), ("client", &client)] {
        let i = ctx.stats().expect("stats").iface;
        assert!(i.rx_tcp >= 3, "{who}: {i:?}");
        assert_eq!((i.rx_bad_checksum, i.rx_partial_checksum), (0, 0), "{who}");
    }
    drop((cqp, sqp, listener, client, server));
    let _ = std::fs::remove_file(&sock);

    // A trusting server, a client that verifies: the server's SYN-ACKs
    // carry the pseudo-header sum alone, which the client drops and
    // counts, and says why.
    let sock = socket("mixed");
    let server = open(&eal, &sock, 10, MemifRole::Server, 1, true);
    let client = open(&eal, &sock, 11, MemifRole::Client, 2, false);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let ccq = client.create_cq(8);
    let listener = server.listen(7601, &ListenOptions::new(&spd)).unwrap();
    let mut o = ConnectOptions::new(&cpd, &ccq);
    o.timeout = Duration::from_millis(1500);
    let to = SocketAddrV4::new(server.addr(), 7601);
    assert!(
        client.connect(to, &o).is_err(),
        "connected across a mismatch"
    );
    let st = client.stats().expect("stats");
    assert!(st.iface.rx_partial_checksum >= 1, "{:?}", st.iface);
    assert_eq!(st.iface.rx_tcp, 0, "{:?}", st.iface);
    let why = st.checksum_diagnosis().expect("a diagnosis");
    assert!(why.contains("pseudo-header"), "{why}");
    // The server took the client's SYNs (fully summed) without summing.
    let s = server.stats().expect("stats").iface;
    assert!(s.rx_tcp >= 1, "{s:?}");
    assert_eq!((s.rx_bad_checksum, s.rx_partial_checksum), (0, 0));
    drop((listener, client, server));
    let _ = std::fs::remove_file(&sock);
}
