//! Our stack (AF_XDP on the lab link) against Linux siw in a qemu guest,
//! for each siw build the lab offers. Needs root and the lab set up
//! (`scripts/deps.sh`); skips with the reason elsewhere, but never under CI.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, ConnectOptions, Context, Cq, Error, ListenOptions, Pd, Qp, QpEvent};
use iwarp_interop::iwtest;
use iwarp_interop::lab::{self, Lab, Variant, GUEST, HOST};
use iwarp_interop::rping::{self, Buffers};

/// One lab at a time: it owns the netns.
static LAB: Mutex<()> = Mutex::new(());

const SIZES: [usize; 4] = [26, 1000, 4097, 65535];
const COUNT: u32 = 3;
const T: Duration = Duration::from_secs(30);

fn lab_or_skip() -> bool {
    match lab::skip_reason() {
        None => true,
        Some(r) if std::env::var_os("CI").is_some() => {
            panic!("the siw interop suite must run in CI, but: {r}")
        }
        Some(r) => {
            eprintln!("SKIP: {r}");
            false
        }
    }
}

/// Our MPA settings against build `v`: what it asks for.
fn mpa_for(v: Variant, crc: bool) -> iwarp::MpaConfig {
    let mut m = iwarp::siw_mpa();
    m.crc = crc;
    m.peer_to_peer = v.p2p();
    m
}

fn connect(ctx: &Context, pd: &Pd, cq: &Cq, v: Variant, crc: bool, port: u16) -> Result<Qp, Error> {
    let mut o = ConnectOptions::new(pd, cq);
    o.mpa = mpa_for(v, crc);
    o.mpa.ird = 1;
    o.mpa.ord = 1;
    o.timeout = T;
    ctx.connect(SocketAddrV4::new(GUEST, port), &o)
}

/// We connect to `rping -s` in the guest: every size, COUNT iterations each,
/// echo checked here, and the server's printout of what it read checked there.
fn we_initiate(lab: &Lab, ctx: &Context, v: Variant) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64);
    for (i, &size) in SIZES.iter().enumerate() {
        let crc = i % 2 == 0;
        let b = Buffers::new(&pd, size).unwrap();
        let qp = connect(ctx, &pd, &cq, v, crc, 7174)
            .unwrap_or_else(|e| panic!("{v:?} connect (size {size}): {e}"));
        let n = qp.negotiated();
        // siw as responder echoes the Request's C bit even when built with
        // mpa_crc_required (lab README, "CRC variant"): CRC is what we ask.
        assert_eq!(n.crc, crc, "{v:?}: siw's Reply follows our C bit");
        assert_eq!(n.rtr.is_some(), v.p2p(), "{v:?}: RTR in p2p builds only");
        rping::post_initial_recvs(|id, s| qp.post_recv(id, s), &b).unwrap();
        let texts = rping::client(&qp, &cq, &b, size, COUNT).unwrap_or_else(|e| {
            let mut ev = Vec::new();
            while let Some(e) = qp.poll_event() {
                ev.push(e);
            }
            let con = lab.console();
            let tail = &con[con.len().saturating_sub(1500)..];
            panic!("{v:?} size {size}: {e}; events {ev:?}; console tail:\n{tail}")
        });
        qp.disconnect().unwrap();
        qp.wait_disconnected(T).unwrap();
        // rping -v prints "server ping data: TEXT" for what it read.
        let deadline = Instant::now() + Duration::from_secs(10);
        for t in &texts {
            let line = format!("server ping data: {t}");
            while !lab.console().contains(&line) {
                assert!(
                    Instant::now() < deadline,
                    "{v:?} size {size}: the guest never printed {:?}",
                    &line[..line.len().min(60)]
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The guest's `rping -c -V` connects to us: we Read, check and Write back;
/// rping verifies the echo and exits 0 only if every iteration matched.
fn we_respond(lab: &Lab, ctx: &Context, v: Variant) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64);
    for (i, &size) in SIZES.iter().enumerate() {
        let port = 7200 + i as u16;
        let mut lo = ListenOptions::new(&pd);
        lo.mpa = mpa_for(v, i % 2 == 1);
        let listener = ctx.listen(port, &lo).unwrap();
        let cmd = format!("rping -c -a {HOST} -p {port} -C {COUNT} -S {size} -V -v");
        let guest = std::thread::scope(|s| {
            let g = s.spawn(|| lab.exec(&cmd, Duration::from_secs(90)));
            let b = Buffers::new(&pd, size).unwrap();
            let req = listener
                .get_request(T)
                .unwrap_or_else(|e| panic!("{v:?} size {size}: no request: {e}"));
            rping::post_initial_recvs(|id, s| req.post_recv(id, s), &b).unwrap();
            let qp = req
                .accept(&AcceptOptions::default(), &cq)
                .unwrap_or_else(|e| panic!("{v:?} size {size}: accept: {e}"));
            assert_eq!(qp.negotiated().rtr.is_some(), v.p2p(), "{v:?}");
            // A siw initiator asks for CRC in the crc builds; we ask on odd sizes.
            assert_eq!(qp.negotiated().crc, v.crc() || i % 2 == 1, "{v:?}");
            let served = rping::server(&qp, &cq, &b, size, COUNT)
                .unwrap_or_else(|e| panic!("{v:?} size {size}: {e}"));
            assert_eq!(served, COUNT);
            // rping disconnects after its last iteration.
            qp.wait_disconnected(T)
                .unwrap_or_else(|e| panic!("{v:?} size {size}: {e}"));
            g.join().unwrap()
        })
        .unwrap();
        let out = String::from_utf8_lossy(&guest.stdout).into_owned()
            + &String::from_utf8_lossy(&guest.stderr);
        assert_eq!(
            out.matches("ping data: rdma-ping-").count(),
            COUNT as usize,
            "{v:?} size {size}: {out}"
        );
        if !guest.status.success() && iwarp_interop::rping::teardown_race(guest.status.code(), &out)
        {
            println!("{v:?} size {size}: rping's own teardown race after a clean run (see iwarp_interop::rping::teardown_race)");
            continue;
        }
        assert!(
            guest.status.success(),
            "{v:?} size {size}: guest rping failed ({}): {out}",
            guest.status
        );
    }
}

/// siw refuses markers: a Request asking for them gets a rejecting Reply,
/// which surfaces as `Rejected`.
fn siw_rejects_markers(ctx: &Context, v: Variant) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8);
    let mut o = ConnectOptions::new(&pd, &cq);
    o.mpa = mpa_for(v, true);
    o.mpa.markers_rx = true;
    o.timeout = T;
    match ctx.connect(SocketAddrV4::new(GUEST, 7174), &o) {
        Err(Error::Rejected { .. }) => {}
        other => panic!("{v:?}: markers request: {other:?}"),
    }
}

/// Our Terminate reaches siw: as rping client we advertise an STag that
/// does not exist; siw's Read Request for it draws our RDMAP "invalid
/// STag" Terminate (RFC 5040 §7.2), which siw logs. siw 6.1 reads the
/// control word with its layer and type nibbles swapped (lab README,
/// finding 1), so our RDMAP(0)/remote protection(1)/invalid STag(0) is
/// logged as "layer 1, type 0, code 0".
fn our_terminate_reaches_siw(lab: &Lab, ctx: &Context, v: Variant) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16);
    let b = Buffers::new(&pd, 64).unwrap();
    let qp = connect(ctx, &pd, &cq, v, true, 7174).unwrap();
    rping::post_initial_recvs(|id, s| qp.post_recv(id, s), &b).unwrap();
    b.send
        .write(0, &rping::info(0, b.data.stag().0 ^ 0xff00_0000, 64))
        .unwrap();
    qp.post_send(iwarp::WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: b.send.sge(0, 16).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let deadline = Instant::now() + T;
    let sent = loop {
        match qp.poll_event() {
            Some(QpEvent::TerminateSent(t)) => break t,
            Some(_) => {}
            None => {
                assert!(Instant::now() < deadline, "{v:?}: no Terminate sent");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    assert_eq!(
        (sent.code.layer, sent.code.etype, sent.code.ecode),
        (0, 1, 0),
        "{v:?}: RDMAP remote protection, invalid STag"
    );
    assert!(
        sent.rdma_header.is_some(),
        "{v:?}: the Read Request is copied"
    );
    let deadline = Instant::now() + T;
    loop {
        let log = lab.exec("dmesg", Duration::from_secs(20)).unwrap();
        let log = String::from_utf8_lossy(&log.stdout).into_owned();
        if log.contains("siw: got TERMINATE. layer 1, type 0, code 0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{v:?}: siw did not log our Terminate:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// siw's Terminate reaches us: as rping server we Write the echo to an
/// STag the client never advertised; siw answers with DDP tagged buffer
/// error / invalid STag (RFC 5041 §7.2), which we decode, and the guest's
/// rping fails.
fn siw_terminate_reaches_us(lab: &Lab, ctx: &Context, v: Variant) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16);
    let port = 7300;
    let mut lo = ListenOptions::new(&pd);
    lo.mpa = mpa_for(v, true);
    let listener = ctx.listen(port, &lo).unwrap();
    let cmd = format!("rping -c -a {HOST} -p {port} -C 1 -S 64 -v");
    let guest = std::thread::scope(|s| {
        let g = s.spawn(|| lab.exec(&cmd, Duration::from_secs(90)));
        let b = Buffers::new(&pd, 64).unwrap();
        let req = listener.get_request(T).unwrap();
        rping::post_initial_recvs(|id, s| req.post_recv(id, s), &b).unwrap();
        let qp = req.accept(&AcceptOptions::default(), &cq).unwrap();
        let mut c = rping::Completions::new(&cq, &qp);
        let wc = c.take(rping::RECV_WR, "start info").unwrap();
        let (addr, rkey, len) = rping::parse_info(&b.recv.read(0, 16).unwrap()).unwrap();
        assert_eq!(wc.byte_len, 16);
        qp.post_send(iwarp::WorkRequest::Read {
            wr_id: 2,
            signaled: true,
            local: b.data.sge(0, len).into(),
            remote_stag: iwarp::STag(rkey),
            remote_to: addr,
        })
        .unwrap();
        c.take(2, "Read").unwrap();
        b.send.write(0, &rping::info(0, 0, len)).unwrap();
        qp.post_send(iwarp::WorkRequest::Send {
            wr_id: 1,
            signaled: true,
            local: b.send.sge(0, 16).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
        c.take(1, "go-ahead").unwrap();
        c.take(rping::RECV_WR + 1, "sink info").unwrap();
        let (addr, rkey, _) = rping::parse_info(&b.recv.read(16, 16).unwrap()).unwrap();
        qp.post_send(iwarp::WorkRequest::Write {
            wr_id: 3,
            signaled: true,
            local: b.data.sge(0, len).into(),
            remote_stag: iwarp::STag(rkey ^ 0x7f00_0000),
            remote_to: addr,
        })
        .unwrap();
        let deadline = Instant::now() + T;
        let got = loop {
            match qp.poll_event() {
                Some(QpEvent::TerminateReceived(t)) => break t,
                Some(_) => {}
                None => {
                    assert!(Instant::now() < deadline, "{v:?}: no Terminate from siw");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        // Layer and type are both 1, so siw's nibble swap does not show.
        assert_eq!(
            (got.code.layer, got.code.etype, got.code.ecode),
            (1, 1, 0),
            "{v:?}: DDP tagged buffer error, invalid STag: {got:?}"
        );
        g.join().unwrap()
    })
    .unwrap();
    let out = String::from_utf8_lossy(&guest.stdout).into_owned()
        + &String::from_utf8_lossy(&guest.stderr);
    // rping exits 0 either way; it reports the broken iteration as a wait
    // that ended in its ERROR state (10) and prints no echo.
    assert!(
        out.contains("wait for RDMA_WRITE_COMPLETE state 10") && !out.contains("ping data:"),
        "{v:?}: rping should stop after the Terminate: {out}"
    );
}

/// Message sizes of the iwtest exchanges: rping cannot go below 26 or
/// above 65535 octets.
const IW_SIZES: [usize; 3] = [1, 65536, 1 << 20];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn guest_output(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Our side of one iwtest exchange with the guest program `g`, then the
/// guest's result. When our side fails, the panic carries what tells why:
/// our QP's counters (TCP retransmissions among them), the guest program's
/// own output (it is stopped first) and the end of the guest's console
/// (siw's kernel messages).
fn exchange(
    lab: &Lab,
    qp: &Qp,
    cq: &Cq,
    b: &iwtest::Buffers,
    g: std::thread::ScopedJoinHandle<'_, Result<std::process::Output, String>>,
    what: &str,
) -> Result<std::process::Output, String> {
    let started = Instant::now();
    match iwtest::peer(qp, cq, b) {
        Ok(()) => {
            eprintln!("{what}: our side done in {:.1?}", started.elapsed());
            qp.wait_disconnected(T).unwrap();
            g.join().unwrap()
        }
        Err(e) => {
            let after = started.elapsed();
            let stats = qp.stats();
            // (The guest's busybox has killall, no pkill.)
            let _ = lab.exec("killall iwtest", Duration::from_secs(20));
            let guest = match g.join().unwrap() {
                Ok(o) => guest_output(&o),
                Err(e) => e,
            };
            let console = lab.console();
            let tail: Vec<&str> = console.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{what}: {e} (after {after:.1?})\nour QP: {stats:?}\nthe guest's iwtest: {guest}\nthe guest's console ends:\n{}",
                tail.join("\n")
            )
        }
    }
}

/// Write, Read and Send of each of `sizes` (1 B, 64 KiB and 1 MiB) both ways against the
/// guest's iwtest, in both roles, with private data both ways: every octet
/// checked at both ends.
fn iwtest_both_roles(lab: &Lab, ctx: &Context, v: Variant, sizes: &[usize]) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64);
    for (i, &size) in sizes.iter().enumerate() {
        let crc = i % 2 == 0;
        // The guest listens; we connect.
        let port = 7400 + i as u16;
        let ours = format!("iwarp-rs client {size}");
        let cmd = format!("/tmp/iwtest server {GUEST} {port} {size} siw-server-{size}");
        let guest = std::thread::scope(|s| {
            let g = s.spawn(|| lab.exec(&cmd, Duration::from_secs(120)));
            lab.wait_listening(port, Duration::from_secs(30)).unwrap();
            let b = iwtest::Buffers::new(&pd, size).unwrap();
            let mut o = ConnectOptions::new(&pd, &cq);
            o.mpa = mpa_for(v, crc);
            o.mpa.private_data = ours.clone().into_bytes();
            o.recvs = b.recvs();
            o.timeout = T;
            let qp = ctx
                .connect(SocketAddrV4::new(GUEST, port), &o)
                .unwrap_or_else(|e| panic!("{v:?} iwtest {size}: connect: {e}"));
            assert_eq!(
                qp.negotiated().peer_private_data,
                format!("siw-server-{size}").into_bytes(),
                "{v:?}: the guest's private data"
            );
            // We ask IRD 16 / ORD 16; iwtest accepts with 4/4, but siw
            // (relaxed_ird_negotiation) raises its IRD to our ORD and
            // replies IRD 16 / ORD 4 (seen in a capture: 0010 0004). So
            // our ORD stays 16, and its ORD 4 is within our IRD 16.
            let n = qp.negotiated();
            assert_eq!((n.ird, n.ord), (16, 16), "{v:?}: IRD/ORD");
            exchange(lab, &qp, &cq, &b, g, &format!("{v:?} iwtest server {size}"))
        })
        .unwrap();
        let out = guest_output(&guest);
        assert!(
            guest.status.success() && out.contains("A-ok") && out.contains("PASS"),
            "{v:?} iwtest server {size}: {out}"
        );
        assert!(
            out.contains(&format!("peer-pd: {}", hex(ours.as_bytes()))),
            "{v:?}: our private data at the guest: {out}"
        );

        // We listen; the guest connects.
        let port = 7500 + i as u16;
        let mut lo = ListenOptions::new(&pd);
        lo.mpa = mpa_for(v, !crc);
        let listener = ctx.listen(port, &lo).unwrap();
        let cmd = format!("/tmp/iwtest client {HOST} {port} {size} siw-client-{size}");
        let guest = std::thread::scope(|s| {
            let g = s.spawn(|| lab.exec(&cmd, Duration::from_secs(120)));
            let b = iwtest::Buffers::new(&pd, size).unwrap();
            let req = listener.get_request(T).unwrap();
            assert_eq!(
                req.peer().private_data,
                format!("siw-client-{size}").into_bytes(),
                "{v:?}: the guest's private data"
            );
            for (id, sgl) in b.recvs() {
                req.post_recv_list(id, sgl).unwrap();
            }
            let opts = AcceptOptions {
                private_data: format!("iwarp-rs server {size}").into_bytes(),
                ..AcceptOptions::default()
            };
            assert_eq!(
                (req.peer().ird, req.peer().ord),
                (Some(4), Some(4)),
                "{v:?}: the guest's IRD/ORD"
            );
            let qp = req.accept(&opts, &cq).unwrap();
            // iwtest asks IRD 4 / ORD 4: we cut ours (16/16) to match.
            let n = qp.negotiated();
            assert_eq!((n.ird, n.ord), (4, 4), "{v:?}: IRD/ORD");
            exchange(lab, &qp, &cq, &b, g, &format!("{v:?} iwtest client {size}"))
        })
        .unwrap();
        let out = guest_output(&guest);
        assert!(
            guest.status.success() && out.contains("A-ok") && out.contains("PASS"),
            "{v:?} iwtest client {size}: {out}"
        );
        let want = format!(
            "peer-pd: {}",
            hex(format!("iwarp-rs server {size}").as_bytes())
        );
        assert!(
            out.contains(&want),
            "{v:?}: our private data at the guest: {out}"
        );
    }
}

/// Decode `pcap` with tshark: (FPDUs, "Good CRC32" verdicts, bad verdicts,
/// gaps where the capture missed segments).
fn tshark_crc(pcap: &std::path::Path) -> (usize, usize, usize, usize) {
    let base = [
        "tshark",
        "-r",
        pcap.to_str().unwrap(),
        "--disable-heuristic",
        "rpcrdma_iwarp",
        "--disable-heuristic",
        "smb_direct_iwarp",
    ];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let o = netns_harness::run(&a, Duration::from_secs(120)).unwrap();
        assert!(
            o.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let fpdus = run(&["-T", "fields", "-e", "iwarp_mpa.ulpdulength"])
        .split([',', '\n'])
        .filter(|f| !f.trim().is_empty())
        .count();
    let text = run(&["-V"]);
    (
        fpdus,
        text.matches("(Good CRC32)").count(),
        text.matches("Bad CRC32").count(),
        text.matches("[Previous segment(s) not captured").count(),
    )
}

/// Run `body` (one lab's worth of a test) with the lab lock held, once
/// more if the guest's NIC wedged ([`lab::retry_if_guest_nic_wedged`]).
fn on_lab(name: &str, body: impl Fn()) {
    if !lab_or_skip() {
        return;
    }
    let _one = LAB.lock().unwrap_or_else(|p| p.into_inner());
    lab::retry_if_guest_nic_wedged(name, body);
}

fn suite(v: Variant) {
    on_lab(&format!("{v:?}"), || suite_once(v));
}

fn suite_once(v: Variant) {
    let started = Instant::now();
    let lab = Lab::up(v, "lab-serve 7174 rping -s -P -a 192.168.177.2 -v -S 65535").unwrap();
    lab.wait_listening(7174, Duration::from_secs(60)).unwrap();
    let ctx = lab.context().unwrap();
    we_initiate(&lab, &ctx, v);
    // A siw crc build asks for CRC as initiator: every FPDU of this part,
    // both ways, must carry a CRC that Wireshark finds good.
    let pcap = v
        .crc()
        .then(|| lab.capture_start(&format!("siw-{}", v.name())).unwrap());
    we_respond(&lab, &ctx, v);
    if let Some(pcap) = pcap {
        lab.capture_stop().unwrap();
        let (fpdus, good, bad, gaps) = tshark_crc(&pcap);
        eprintln!(
            "{v:?}: tshark: {fpdus} FPDUs, {good} Good CRC32, {bad} bad, {gaps} capture gaps"
        );
        assert!(
            fpdus > 100,
            "{v:?}: only {fpdus} FPDUs in {}",
            pcap.display()
        );
        // Where tcpdump missed segments (a loaded machine), tshark loses the
        // FPDU framing at the gap and reads a length out of payload: the PDU
        // it then "reassembles" fails its CRC though every FPDU on the wire
        // was good (siw checks them too, and would have terminated). One
        // such verdict per gap at most; with a complete capture, none.
        assert!(
            bad <= gaps && good + bad == fpdus && good >= fpdus.saturating_sub(gaps),
            "{v:?}: {bad} bad CRC32 verdicts with {gaps} capture gaps: {}",
            pcap.display()
        );
    }
    let bin = iwtest::build(&std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))).unwrap();
    iwtest::install(&lab, &bin).unwrap();
    iwtest_both_roles(&lab, &ctx, v, &IW_SIZES);
    siw_rejects_markers(&ctx, v);
    siw_terminate_reaches_us(&lab, &ctx, v);
    our_terminate_reaches_siw(&lab, &ctx, v);
    eprintln!("{v:?}: passed in {:.1?}", started.elapsed());
}

#[test]
fn siw_std() {
    suite(Variant::Std);
}

#[test]
fn siw_crc() {
    suite(Variant::Crc);
}

#[test]
fn siw_p2p() {
    suite(Variant::P2p);
}

#[test]
fn siw_crc_p2p() {
    suite(Variant::CrcP2p);
}

/// Random loss on the lab link: a bridge-family nftables table in the lab's
/// namespace drops `permille` in 1,000 of the frames the lab bridge forwards
/// (between our veth and the guest, both ways). The management link's
/// frames end at the bridge itself and are never forwarded: the exec
/// channel loses nothing. Gone with the lab's namespace at the latest.
struct Loss;

/// `nft ARGS` in the lab's namespace.
fn nft(args: &[&str]) -> Result<std::process::Output, netns_harness::Error> {
    let mut a = vec!["ip", "netns", "exec", lab::NETNS, "nft"];
    a.extend_from_slice(args);
    netns_harness::run(&a, Duration::from_secs(10))
}

impl Loss {
    fn on(permille: u32) -> Loss {
        let rules = format!(
            "table bridge iwloss {{\n  chain forward_drop {{\n    type filter hook forward priority 0; policy accept;\n    numgen random mod 1000 < {permille} counter drop\n  }}\n}}\n"
        );
        let path = std::env::temp_dir().join(format!("iwloss-{}.nft", std::process::id()));
        std::fs::write(&path, rules).unwrap();
        let o = nft(&["-f", path.to_str().unwrap()]).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            o.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Loss
    }

    /// Frames dropped so far.
    fn dropped(&self) -> u64 {
        let o = nft(&["list", "table", "bridge", "iwloss"]).unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        text.split("counter packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter in {text}"))
    }
}

impl Drop for Loss {
    fn drop(&mut self) {
        let _ = nft(&["delete", "table", "bridge", "iwloss"]);
    }
}

/// The 1 MiB iwtest exchanges (Read, Write and Send both ways, both roles,
/// every octet checked) against stock siw with 2% of the lab link's frames
/// lost each way: our TCP recovers against Linux's, and siw's, with no
/// stall and no data lost.
#[test]
fn siw_lossy() {
    on_lab("siw_lossy", lossy_once);
}

fn lossy_once() {
    let started = Instant::now();
    let lab = Lab::up(Variant::Std, "").unwrap();
    let ctx = lab.context().unwrap();
    let bin = iwtest::build(&std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))).unwrap();
    iwtest::install(&lab, &bin).unwrap();
    let loss = Loss::on(20);
    iwtest_both_roles(&lab, &ctx, Variant::Std, &[1 << 20, 1 << 20]);
    let dropped = loss.dropped();
    let tcp = ctx.stats().unwrap().tcp;
    eprintln!(
        "siw_lossy: {dropped} frames dropped; ours: {} RTO, {} fast, {} rescue retransmissions, {} SACK recoveries; passed in {:.1?}",
        tcp.rto_retransmits,
        tcp.fast_retransmits,
        tcp.rescue_retransmits,
        tcp.sack_recoveries,
        started.elapsed()
    );
    assert!(
        dropped > 20,
        "only {dropped} frames dropped: no loss to recover from"
    );
    assert!(
        tcp.rto_retransmits + tcp.fast_retransmits + tcp.rescue_retransmits > 0,
        "{dropped} frames dropped, none of ours retransmitted: {tcp:?}"
    );
}
