//! Two contexts on one memif socket, in this process, whose queue counts
//! differ (`DpdkOptions::queue_count`): the client's `Context::dpdk` fails
//! with an error that names both counts, in either direction, and the
//! server context is unharmed: a client of its own count then connects
//! and a Write lands. Without DPDK in the build the test says so and
//! passes, except under CI.
#![cfg(feature = "dpdk")]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use iwarp::dpdk::{Eal, MemifRole};
use iwarp::{
    Access, ConnectOptions, Context, DpdkOptions, Error, ListenOptions, Polling, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

fn opts(sock: &std::path::Path, index: u32, role: MemifRole, last: u8, n: u16) -> DpdkOptions {
    let mut o = DpdkOptions::memif(index, role, 0, sock, Ipv4Addr::new(10, 77, 11, last), 24);
    o.queue_count = n;
    // Small rings: several ports within the EAL's 256 MiB.
    o.queues = iwarp::dpdk::Queues {
        rx_desc: 256,
        tx_desc: 256,
    };
    o.host.polling = Polling::Adaptive;
    o
}

#[test]
fn memif_contexts_of_different_queue_counts_fail_at_the_clients_open() {
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
    for (k, (ns, nc)) in [(2u16, 1u16), (1, 2)].into_iter().enumerate() {
        let sock = std::env::temp_dir().join(format!("iwarp-mm{k}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let index = 10 * k as u32;
        let server = Context::dpdk(&eal, &opts(&sock, index, MemifRole::Server, 1, ns))
            .expect("memif server");
        assert_eq!(server.loops(), usize::from(ns));
        let e = Context::dpdk(&eal, &opts(&sock, index + 1, MemifRole::Client, 2, nc))
            .expect_err("a client of another queue count");
        assert!(
            matches!(
                &e,
                Error::Dpdk(iwarp::dpdk::Error::MemifRefused { queues, server_queues: Some(s), .. })
                    if (*queues, *s) == (nc, ns)
            ),
            "{e:?}"
        );
        let m = e.to_string();
        assert!(
            m.contains(&format!("has {nc} queue(s)"))
                && m.contains(&format!("has {ns}, and refuses a client of another count"))
                && m.contains("same queue count"),
            "{m}"
        );

        // The server works on: a client of its count connects (the
        // refused one's devargs hot-plug again) and a Write lands.
        let client = Context::dpdk(&eal, &opts(&sock, index + 1, MemifRole::Client, 2, ns))
            .expect("a client of the server's queue count");
        let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
        let (scq, ccq) = (server.create_cq(8), client.create_cq(8));
        let target = spd
            .register(vec![0; 4096], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let listener = server.listen(7500, &ListenOptions::new(&spd)).unwrap();
        let to = SocketAddrV4::new(server.addr(), 7500);
        let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
        let t = std::thread::spawn(move || c.connect(to, &o));
        let sqp = listener
            .get_request(T)
            .expect("a request")
            .accept(&Default::default(), &scq)
            .expect("accepted");
        let cqp = t.join().unwrap().expect("connected");
        let src = cpd.register(vec![0x5a; 4096], Access::LOCAL_WRITE).unwrap();
        cqp.post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: src.sge(0, 4096).into(),
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
        assert_eq!(target.read(0, 4096).unwrap(), vec![0x5a; 4096]);
        drop((cqp, sqp, listener, client, server));
        let _ = std::fs::remove_file(&sock);
    }
}
