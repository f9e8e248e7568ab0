//! Soak against hostile and careless Linux peers (issue 13): our stack on
//! AF_XDP in namespace A, the Linux kernel's TCP in namespace B, one veth
//! pair between them. B speaks MPA by hand (the literal Request bytes of
//! Linux siw), so nothing of ours runs on the peer side.
//!
//! 1. Storms: 1,000 connections in batches of 50 opened at once and then
//!    closed; most exchange Request and Reply, every tenth closes before
//!    its Request, every tenth sends garbage instead.
//! 2. A peer process killed mid-transfer: it takes our RDMA Writes without
//!    reading until its window closes, then SIGKILL (its kernel answers
//!    with RST); every Write completes, the rest flushed.
//! 3. A peer that stops reading (zero window) while we close gracefully:
//!    TCP's persist limit (2 s here) ends the close; the Writes flush.
//!
//! Afterwards every count of what the stack holds is zero — connections
//! (and with them their QPs and timers), half-open handshakes (and their
//! SYN-ACK timers), the accept queue and the payload kept for it, the
//! registered region — and the stack still serves a new connection.
//! Bounded: 1,000 connections, each wait bounded, the whole under 80 s.
//!
//! Needs root; without it the test prints `SKIP:` and passes, except under
//! `CI`, where it fails.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use iwarp_control::MpaConfig;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand, HostOutput};
use iwarp_datapath::runtime::{spawn, LoopHandle, Mode};
use iwarp_datapath::stack::{
    Command as Cmd, InspectOp, MemoryOp, Output, SockId, Stack, StackConfig, Transport, Ulp,
};
use iwarp_datapath::ConnError;
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{Access, MemoryTable, STag};
use iwarp_proto::qp::{Completion, Sge, WcStatus, WorkRequest};
use iwarp_xdp::{Config as XdpConfig, XdpDevice};
use netns_harness::{End, Netns, Spawned, VethPair};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const PORT: u16 = 7174;
/// Linux siw's Rev 2 Request: Enhanced, PD_Length 4, IRD 16, ORD 16.
const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";
/// Our accepting Reply to it: Enhanced, Rev 2, IRD 16, ORD 16.
const REPLY: &[u8] = b"MPA ID Rep Frame\x10\x02\x00\x04\x00\x10\x00\x10";
const STORM: usize = 1000;
const BATCH: usize = 50;
const WRITES: u64 = 64;
const WRITE_LEN: u32 = 16 << 10;

fn skip() -> bool {
    let why = netns_harness::skip_reason().or_else(|| {
        (!netns_harness::command_available("bash")).then(|| "bash is not installed".into())
    });
    match why {
        None => false,
        Some(why) => {
            netns_harness::skip_test(&why);
            true
        }
    }
}

/// Two namespaces and the veth pair; deleted on drop, also on panic.
struct Lab {
    // The veth goes before the namespaces.
    veth: VethPair,
    ours: Netns,
    linux: Netns,
    our_ip: Ipv4Addr,
}

fn lab() -> Lab {
    let ours = Netns::new("hostile3-soak-a").unwrap();
    let linux = Netns::new("hostile3-soak-b").unwrap();
    let mut veth = VethPair::new("h3s").unwrap();
    veth.move_to(End::A, &ours).unwrap();
    veth.move_to(End::B, &linux).unwrap();
    let id = linux.id();
    let (x, y) = ((id >> 8) as u8, id as u8);
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).unwrap();
        // Full checksums, no TSO: what a NIC hands an AF_XDP socket.
        veth.disable_tx_offload(end).unwrap();
        veth.set_up(end).unwrap();
    }
    veth.add_addr(End::B, &format!("10.{x}.{y}.2/24")).unwrap();
    Lab {
        veth,
        ours,
        linux,
        our_ip: Ipv4Addr::new(10, x, y, 1),
    }
}

/// What the stack's outputs told us, per connection.
#[derive(Default)]
struct Seen {
    accepted: Vec<SockId>,
    established: HashSet<SockId>,
    disconnected: HashSet<SockId>,
    closed: HashMap<SockId, Option<ConnError>>,
    completions: HashMap<SockId, Vec<Completion>>,
}

struct Ours {
    h: LoopHandle<Stack>,
    seen: Seen,
    start: Instant,
}

impl Ours {
    fn pump(&mut self) -> bool {
        let mut any = false;
        while let Some(o) = self.h.poll() {
            any = true;
            match o {
                Output::Accepted { sock, .. } => self.seen.accepted.push(sock),
                Output::Cm(sock, CmEvent::Established(_)) => {
                    self.seen.established.insert(sock);
                }
                Output::Cm(sock, CmEvent::Disconnected) => {
                    self.seen.disconnected.insert(sock);
                }
                Output::Closed { sock, error } => {
                    assert!(
                        self.seen.closed.insert(sock, error).is_none(),
                        "{sock} closed twice"
                    );
                }
                Output::Iwarp(sock, HostOutput::Completion(c)) => {
                    self.seen.completions.entry(sock).or_default().push(c)
                }
                Output::Iwarp(
                    sock,
                    HostOutput::Refused(id, e) | HostOutput::RefusedRecv(id, e),
                ) => {
                    panic!("{sock}: post {id} refused: {e:?}")
                }
                _ => {}
            }
        }
        any
    }

    /// Pump until `done`, at most `limit` (and never past 80 s in all).
    fn until(&mut self, what: &str, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            self.pump();
            if done(self) {
                return;
            }
            assert!(Instant::now() < deadline, "no {what} within {limit:?}");
            assert!(
                self.start.elapsed() < Duration::from_secs(80),
                "the soak ran past 80 s (waiting for {what})"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A look at the stack from its loop thread.
    fn inspect<T: Send + 'static>(&mut self, f: impl FnOnce(&Stack) -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        self.h
            .post(Cmd::Inspect(InspectOp(Box::new(move |s| {
                let _ = tx.send(f(s));
            }))))
            .unwrap();
        let mut got = None;
        self.until("inspection", Duration::from_secs(10), |_| {
            got = rx.try_recv().ok();
            got.is_some()
        });
        got.unwrap()
    }

    fn memory<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut MemoryTable) -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = mpsc::channel();
        self.h
            .post(Cmd::Memory(MemoryOp(Box::new(move |m| {
                let _ = tx.send(f(m));
            }))))
            .unwrap();
        let mut got = None;
        self.until("memory operation", Duration::from_secs(10), |_| {
            got = rx.try_recv().ok();
            got.is_some()
        });
        got.unwrap()
    }

    /// (connections, half-open, accept queue + kept payload, listeners).
    fn held(&mut self) -> (usize, usize, usize, usize) {
        self.inspect(|s| {
            let (half_open, ready) = s.listener_holds();
            (s.connections(), half_open, ready, s.listening_ports())
        })
    }

    /// Wait until the stack holds nothing but its listener.
    fn drained(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let held = self.held();
            if held == (0, 0, 0, 1) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "after {what}: (connections, half-open, unaccepted, listeners) = {held:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Post `WRITES` signaled RDMA Writes of `WRITE_LEN` to `sock`.
    fn writes(&mut self, sock: SockId, src: STag) {
        for i in 0..WRITES {
            let wr = WorkRequest::Write {
                wr_id: i,
                signaled: true,
                local: Sge {
                    stag: src,
                    to: 0,
                    len: WRITE_LEN,
                }
                .into(),
                remote_stag: STag(0x1234_5601),
                remote_to: 0,
            };
            self.h
                .post(Cmd::Iwarp(sock, HostCommand::PostSend(wr)))
                .unwrap();
        }
    }

    fn completions(&self, sock: SockId) -> &[Completion] {
        self.seen.completions.get(&sock).map_or(&[], |v| &v[..])
    }
}

/// Connect from namespace B to our listener: the storm. Returns how many
/// Replies it read.
fn storm(lab: &Lab) -> usize {
    let to = SocketAddrV4::new(lab.our_ip, PORT);
    let path = lab.linux.ns_path();
    std::thread::spawn(move || {
        iwarp_xdp::in_netns(&path, move || {
            let mut replies = 0;
            for b in 0..STORM / BATCH {
                let mut open = Vec::new();
                for i in 0..BATCH {
                    let k = b * BATCH + i;
                    let mut s =
                        TcpStream::connect_timeout(&to.into(), Duration::from_secs(10)).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    s.set_nodelay(true).unwrap();
                    match k % 10 {
                        // Gone before its Request.
                        0 => {}
                        // Not MPA at all: we close without a Reply.
                        1 => s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(),
                        _ => s.write_all(REQUEST).unwrap(),
                    }
                    open.push((k, s));
                }
                for (k, s) in &mut open {
                    if *k % 10 >= 2 {
                        let mut reply = [0; 24];
                        s.read_exact(&mut reply).unwrap();
                        assert_eq!(&reply[..], REPLY, "connection {k}");
                        replies += 1;
                    }
                }
                // Every one closes (FIN) at once.
            }
            replies
        })
        .unwrap()
    })
    .join()
    .unwrap()
}

/// A peer process in B that sends the Request and then never reads
/// (`exec sleep`: the process holding the socket is the one we kill).
fn silent_peer(lab: &Lab) -> Spawned {
    let script = format!(
        "exec 3<>/dev/tcp/{}/{PORT} && printf 'MPA ID Req Frame\\x10\\x02\\x00\\x04\\x00\\x10\\x00\\x10' >&3 && exec sleep 60",
        lab.our_ip
    );
    netns_harness::spawn_in(&lab.linux, &["bash", "-c", &script]).unwrap()
}

#[test]
fn storms_killed_and_stalled_peers_leave_nothing_behind() {
    if skip() {
        return;
    }
    let lab = lab();
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let src = mem
        .register(pd, vec![0x77; WRITE_LEN as usize], Access::LOCAL_READ, 0)
        .unwrap();
    let ip = lab.our_ip.octets();
    let cfg = XdpConfig::new(lab.veth.name(End::A), ip);
    let dev = iwarp_xdp::in_netns(&lab.ours.ns_path(), || XdpDevice::open(&cfg))
        .unwrap()
        .unwrap();
    let mut icfg = IfaceConfig::new(EthernetAddress(dev.mac_address()), Ipv4Address(ip), 24);
    icfg.mtu = dev.mtu() as usize;
    let mut scfg = StackConfig::new(icfg);
    scfg.tcp.rto_min = 5_000_000;
    scfg.tcp.time_wait = 200_000_000;
    scfg.tcp.persist_timeout = 2_000_000_000;
    // A Write completes once TCP has its octets: with 256 KiB of send
    // buffer, 1 MiB of Writes cannot all complete against a peer that
    // stopped reading.
    scfg.tcp.snd_buf = 256 << 10;
    let h = spawn(
        Stack::new(scfg, mem),
        dev,
        None,
        Mode::Adaptive {
            spins: 2_000,
            max_sleep: Duration::from_micros(200),
        },
        8192,
    );
    let mut us = Ours {
        h,
        seen: Seen::default(),
        start: Instant::now(),
    };
    us.h.post(Cmd::Listen {
        transport: Transport::Tcp,
        port: PORT,
        ulp: Ulp::Iwarp {
            mpa: MpaConfig::default(),
            params: StreamParams {
                pd,
                emss: 1460,
                sq_depth: 128,
                rq_depth: 8,
            },
            manual: false,
            cq: None,
            srq: None,
        },
    })
    .unwrap();
    us.until("listener", Duration::from_secs(10), |u| u.held().3 == 1);

    // 1. Storms.
    let storm_thread = {
        let to_lab = &lab;
        std::thread::scope(|s| {
            let t = s.spawn(|| storm(to_lab));
            while !t.is_finished() {
                us.pump();
                assert!(us.start.elapsed() < Duration::from_secs(60), "storm stuck");
                std::thread::sleep(Duration::from_millis(1));
            }
            t.join().unwrap()
        })
    };
    assert_eq!(storm_thread, STORM / 10 * 8);
    us.drained("the storms");
    us.pump();
    assert_eq!(
        us.seen.accepted.len(),
        STORM,
        "every connection was accepted"
    );
    assert_eq!(us.seen.established.len(), STORM / 10 * 8);
    for s in &us.seen.accepted {
        assert!(us.seen.closed.contains_key(s), "{s} never reported closed");
    }

    // 2. A peer killed mid-transfer.
    let mut killed = silent_peer(&lab);
    let before = us.seen.accepted.len();
    us.until(
        "the killed peer's connection",
        Duration::from_secs(10),
        |u| {
            u.seen.accepted[before..]
                .iter()
                .any(|s| u.seen.established.contains(s))
        },
    );
    let k = us.seen.accepted[before];
    us.writes(k, src);
    us.until("a Write to the killed peer", Duration::from_secs(10), |u| {
        !u.completions(k).is_empty()
    });
    killed.kill();
    us.until("the killed peer's RST", Duration::from_secs(10), |u| {
        u.seen.closed.contains_key(&k) && u.completions(k).len() == WRITES as usize
    });
    assert_eq!(us.seen.closed[&k], Some(ConnError::Reset));
    assert!(us.seen.disconnected.contains(&k));
    let c = us.completions(k);
    assert!(
        c.iter().any(|c| c.status == WcStatus::Success)
            && c.iter().any(|c| c.status == WcStatus::Flushed),
        "killed mid-transfer: {c:?}"
    );

    // 3. A peer that stops reading while we close gracefully.
    let mut stalled = silent_peer(&lab);
    let before = us.seen.accepted.len();
    us.until(
        "the stalled peer's connection",
        Duration::from_secs(10),
        |u| {
            u.seen.accepted[before..]
                .iter()
                .any(|s| u.seen.established.contains(s))
        },
    );
    let z = us.seen.accepted[before];
    us.writes(z, src);
    us.until(
        "a Write to the stalled peer",
        Duration::from_secs(10),
        |u| !u.completions(z).is_empty(),
    );
    us.h.post(Cmd::Close(z)).unwrap();
    us.until("the stalled peer's close", Duration::from_secs(20), |u| {
        u.seen.closed.contains_key(&z) && u.completions(z).len() == WRITES as usize
    });
    assert_eq!(us.seen.closed[&z], Some(ConnError::TimedOut));
    assert!(us
        .completions(z)
        .iter()
        .any(|c| c.status == WcStatus::Flushed));
    stalled.kill();

    // Nothing held; the region goes too.
    us.drained("the killed and stalled peers");
    assert!(us.memory(move |m| m.deregister(src).is_ok()));
    assert!(!us.inspect(move |s| s.mem.is_valid(src)));

    // And the stack still serves.
    let to = SocketAddrV4::new(lab.our_ip, PORT);
    let reply = iwarp_xdp::in_netns(&lab.linux.ns_path(), move || {
        let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(10)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(REQUEST).unwrap();
        let mut reply = [0; 24];
        s.read_exact(&mut reply).unwrap();
        reply
    })
    .unwrap();
    assert_eq!(&reply[..], REPLY);
    us.drained("a last connection");
    assert_eq!(us.seen.accepted.len(), STORM + 3);
    eprintln!(
        "soak: {} connections in {:.1} s",
        us.seen.accepted.len(),
        us.start.elapsed().as_secs_f64()
    );
}
