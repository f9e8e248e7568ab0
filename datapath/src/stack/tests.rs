use super::*;
use crate::runtime::Engine;
use iwarp_control::MpaConfig;
use iwarp_proto::qp::DisconnectCause;
use std::time::{Duration, Instant};

/// A connection's socket id and its 4-tuple as `lookup` keys it.
type Conn = (SockId, (Ipv4Address, u16, u16));

/// A stack with two connections opened to 10.9.0.2:7000.
fn two_connections() -> (Stack, [Conn; 2]) {
    let iface = iwarp_net::iface::IfaceConfig::new(
        tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        Ipv4Address::new(10, 9, 0, 1),
        24,
    );
    let mut st = Stack::new(StackConfig::new(iface), MemoryTable::new());
    for token in [1, 2] {
        let cmd = Command::Connect {
            transport: Transport::Tcp,
            token,
            remote: Ipv4Address::new(10, 9, 0, 2),
            port: 7000,
            ulp: Ulp::Stream,
        };
        st.handle_command(cmd, 0);
    }
    let mut conns: Vec<_> = st.by_tuple.iter().map(|(k, id)| (*id, *k)).collect();
    conns.sort_unstable();
    assert_eq!(conns.len(), 2);
    (st, [conns[0], conns[1]])
}

/// Freed connections are kept for their posts: the newest
/// `GONE_KEPT`, and beyond them each whose CQs a handle still holds
/// (the API's `Qp`), however many connections were freed after it;
/// once the handle is dropped it goes like the others.
#[test]
fn a_freed_connection_whose_cqs_a_handle_holds_is_kept() {
    let ring = Arc::new(CqRing::new(4));
    let handle = QpCqs::one(ring.clone());
    let mut g = Gone::default();
    g.insert(0, Some(handle.clone()), Some(DisconnectCause::LocalClose));
    // A listener's rings: each connection its own clone, nobody
    // holding it; and connections without rings.
    let listener = QpCqs::one(ring);
    for id in 1..=3 * GONE_KEPT {
        let cq = (id % 2 == 0).then(|| listener.for_connection());
        g.insert(id, cq, None);
    }
    assert!(g.len() <= 2 * GONE_KEPT + 1, "{}", g.len());
    let kept = g.get(0).expect("held by a handle: kept");
    assert_eq!(kept.1, Some(DisconnectCause::LocalClose));
    assert!(kept.0.is_some());
    // The oldest without a handle went, the newest stayed.
    assert!(g.get(1).is_none() && g.get(2).is_none());
    assert!((2 * GONE_KEPT + 1..=3 * GONE_KEPT).all(|id| g.get(id).is_some()));
    drop(handle);
    for id in 3 * GONE_KEPT + 1..=8 * GONE_KEPT {
        g.insert(id, None, None);
    }
    assert!(g.get(0).is_none(), "the handle is gone: so is the entry");
    assert!(g.len() <= 2 * GONE_KEPT, "{}", g.len());
}

/// The record of requests nobody answered stays bounded whatever a
/// peer's requests do: those freed with nothing held are pruned; one
/// holding refusals of the application's posts is kept until it is
/// answered, and then releases them.
#[test]
fn unanswered_requests_are_pruned_but_what_they_hold_is_kept() {
    use iwarp_proto::qp::{PostError, QpState};
    let req = || {
        CmEvent::ConnectRequest(iwarp_control::PeerRequest {
            rev: 2,
            crc: true,
            markers: false,
            ird: None,
            ord: None,
            peer_to_peer: false,
            rtr: iwarp_control::RtrOffer::default(),
            private_data: Vec::new(),
        })
    };
    let refused = HostOutput::RefusedRecv(7, PostError::NotReady(QpState::Error));
    let mut r = Requests::default();
    let mut passed = 0;
    r.pass(Output::Cm(0, req()), &mut |_| passed += 1);
    r.pass(Output::Iwarp(0, refused), &mut |_| passed += 1);
    assert_eq!((passed, r.len()), (1, 1), "the refusal is held");
    for id in 1..=8 * GONE_KEPT {
        r.pass(Output::Cm(id, req()), &mut |_| {});
        r.prune(&|_| false);
    }
    assert!(r.len() <= 2 * GONE_KEPT + 1, "{}", r.len());
    let mut got = Vec::new();
    r.answered(0, None, &mut |o| got.push(o));
    assert!(
        matches!(got[..], [Output::Iwarp(0, HostOutput::RefusedRecv(7, _))]),
        "{got:?}"
    );
}

/// A post to a connection the stack knows nothing of (never was, or
/// freed and forgotten) is refused to the outputs, not dropped, whether
/// the stack has an SCTP part or not (one id space: the id cannot say
/// which transport it was).
#[test]
fn a_post_to_an_unknown_connection_is_refused_not_dropped() {
    use iwarp_proto::qp::{PostError, QpState};
    let (mut st, _) = two_connections();
    st.pending_out.clear();
    for (i, id) in [999, 1999].into_iter().enumerate() {
        if i == 1 {
            // An SCTP part now (the post still finds no connection in
            // the one table).
            st.handle_command(
                Command::Listen {
                    port: 7000,
                    transport: Transport::Sctp,
                    ulp: iwarp_ulp(crate::PdId(1)),
                },
                0,
            );
            st.pending_out.clear();
            assert!(st.sctp().is_some_and(|sc| sc.listening(7000)));
        }
        let sgl = iwarp_proto::qp::SgList::default();
        st.handle_command(Command::Iwarp(id, HostCommand::PostRecv(7, sgl)), 0);
        let got: Vec<_> = st.pending_out.drain(..).collect();
        assert!(
            matches!(
                got.as_slice(),
                [Output::Iwarp(
                    i,
                    HostOutput::RefusedRecv(7, PostError::NotReady(QpState::Error))
                )] if *i == id
            ),
            "{id}: {got:?}"
        );
    }
}

/// One map from `Connect` tokens to connections over both transports: the
/// SCTP connection's token names it as the TCP one's does, a receive
/// posted under it (`IwarpOpening`) waits in its connection's early work
/// (no refusal), and once the connection is freed (aborted, its
/// association gone) the token names nothing and the receive came back
/// flushed under the connection's id.
#[test]
fn one_token_map_names_connections_over_both_transports() {
    let (mut st, tcp, sctp) = one_of_each_transport();
    assert_eq!(
        (st.by_token.get(&1), st.by_token.get(&2)),
        (Some(&tcp), Some(&sctp))
    );
    st.pending_out.clear();
    let recv = |st: &mut Stack, wr_id| {
        let sgl = iwarp_proto::qp::SgList::default();
        st.handle_command(
            Command::IwarpOpening(2, HostCommand::PostRecv(wr_id, sgl)),
            0,
        );
    };
    recv(&mut st, 7);
    assert!(st.pending_out.is_empty(), "{:?}", st.pending_out);
    st.handle_command(Command::Abort(sctp), 0);
    let mut outs = Vec::new();
    let mut now = 0;
    while st.by_token.contains_key(&2) && now < 10 * crate::ABORT_GRACE_NS {
        st.poll(now, &mut |_: &[&[u8]]| {}, &mut |o| outs.push(o));
        now += 1_000_000;
    }
    assert!(
        !st.by_token.contains_key(&2),
        "the token outlived its connection"
    );
    assert_eq!(st.by_token.get(&1), Some(&tcp));
    assert!(!st.is_sctp(sctp) && !st.conns.contains_key(&sctp));
    // The SCTP part's index of its connections let it go too, and its walk
    // over what they hold finds none.
    let sc = st.sctp().expect("the SCTP part");
    assert_eq!(sc.members(), 0);
    assert_eq!(sc.holders(&st.conns).count(), 0);
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::Iwarp(i, HostOutput::RefusedRecv(7, _)) if *i == sctp)),
        "{outs:?}"
    );
}

/// An Accept or a Reject naming no connection request (an id never given
/// out, or a connection already freed) is answered `CmRefused` over both
/// transports alike; before one id space, an SCTP id freed was refused
/// and a TCP one ignored.
#[test]
fn an_answer_to_no_request_is_refused_over_both_transports() {
    let (mut st, tcp, sctp) = one_of_each_transport();
    st.pending_out.clear();
    for id in [999, tcp, sctp] {
        st.handle_command(
            Command::Accept {
                sock: id,
                private_data: Vec::new(),
                ird: 1,
                ord: 1,
                cq: None,
                pd: None,
            },
            0,
        );
        st.handle_command(
            Command::Reject {
                sock: id,
                private_data: Vec::new(),
            },
            0,
        );
        let got: Vec<_> = st.pending_out.drain(..).collect();
        assert!(
            matches!(
                got.as_slice(),
                [Output::CmRefused(a, _), Output::CmRefused(b, _)] if *a == id && *b == id
            ),
            "{id}: {got:?}"
        );
    }
}

/// The last segment's connection is found again without the map, and
/// never once its socket is gone or the tuple belongs to another.
#[test]
fn the_last_connection_is_found_again_and_never_stale() {
    let (mut st, [(a, ka), (b, kb)]) = two_connections();
    assert_eq!(st.lookup(ka), Some(a));
    assert_eq!(st.last_rx, Some((ka, a)));
    assert_eq!(st.lookup(ka), Some(a));
    // Another tuple: the map answers, and it becomes the last.
    assert_eq!(st.lookup(kb), Some(b));
    assert_eq!(st.last_rx, Some((kb, b)));
    // A tuple of no connection.
    let none = (Ipv4Address::new(10, 9, 0, 3), 1, 2);
    assert_eq!(st.lookup(none), None);
    assert_eq!(st.last_rx, None);
    // The socket of the last tuple removed behind the cache's back
    // (as `settle` removes a closed one): not found any more.
    assert_eq!(st.lookup(ka), Some(a));
    st.conns.remove(&a);
    st.by_tuple.remove(&ka);
    assert_eq!(st.lookup(ka), None);
    // The remembered id now holds another connection (an id reused):
    // the tuple check refuses it.
    st.last_rx = Some((ka, b));
    assert_eq!(
        st.lookup(ka),
        None,
        "id {b} is not the connection of {ka:?}"
    );
    assert_eq!(st.lookup(kb), Some(b));
}

/// With a send ring and a receive ring, `route` puts receive
/// completions (flushed ones included) on the receive ring, send-queue
/// completions and refused posts on the send ring, and events on
/// neither; with one ring (`QpCqs::one`) everything lands on it.
#[test]
fn receive_completions_go_to_the_receive_ring() {
    use iwarp_proto::qp::{Completion, PostError, QpEvent, WcOpcode, WcStatus};
    let wc = |wr_id, opcode, status| {
        HostOutput::Completion(Completion {
            wr_id,
            opcode,
            status,
            byte_len: 0,
            solicited: false,
            invalidated: None,
            imm: None,
        })
    };
    let outputs = || {
        [
            wc(1, WcOpcode::Send, WcStatus::Success),
            wc(2, WcOpcode::Recv, WcStatus::Success),
            wc(3, WcOpcode::Write, WcStatus::Success),
            wc(4, WcOpcode::Read, WcStatus::Flushed),
            wc(5, WcOpcode::Recv, WcStatus::Flushed),
            HostOutput::Refused(6, PostError::QueueFull),
            HostOutput::Event(QpEvent::SrqLimitReached),
        ]
    };
    let ids = |r: &CqRing| {
        std::iter::from_fn(|| r.ring.pop())
            .map(|(qp, e)| {
                assert_eq!(qp, 9);
                match e {
                    CqEntry::Done(c) => c.wr_id,
                    CqEntry::Refused { wr_id, .. } => wr_id,
                }
            })
            .collect::<Vec<_>>()
    };
    let (send, recv) = (Arc::new(CqRing::new(16)), Arc::new(CqRing::new(16)));
    let cqs = QpCqs::new(send.clone(), recv.clone());
    let mut out = Vec::new();
    for o in outputs() {
        route(9, o, Some(&cqs), &mut |x| out.push(x));
    }
    assert_eq!(ids(&send), [1, 3, 4, 6]);
    assert_eq!(ids(&recv), [2, 5]);
    assert!(matches!(
        out[..],
        [Output::Iwarp(
            9,
            HostOutput::Event(QpEvent::SrqLimitReached)
        )]
    ));
    let one = QpCqs::from(send.clone());
    for o in outputs() {
        route(9, o, Some(&one), &mut |_| {});
    }
    assert_eq!(ids(&send), [1, 2, 3, 4, 5, 6]);
    assert!(recv.ring.is_empty());
}

/// Two stacks on the virtual-time link with `cfg`, A listening on port
/// 7000 and B connected to it over MPA/TCP; each has one region of `len`
/// octets (A's remotely writable). The link, B's connection, and A's and
/// B's regions.
fn tcp_pair(
    len: usize,
    cfg: crate::link::virtual_link::LinkConfig,
) -> (
    crate::link::virtual_link::VirtualLink<Stack>,
    SockId,
    iwarp_proto::mem::STag,
    iwarp_proto::mem::STag,
) {
    tcp_pair_with(len, cfg, tcp::Config::default())
}

/// [`tcp_pair`] with both stacks' TCP configured as `tcp_cfg`.
fn tcp_pair_with(
    len: usize,
    cfg: crate::link::virtual_link::LinkConfig,
    tcp_cfg: tcp::Config,
) -> (
    crate::link::virtual_link::VirtualLink<Stack>,
    SockId,
    iwarp_proto::mem::STag,
    iwarp_proto::mem::STag,
) {
    use crate::link::virtual_link::{Side, VirtualLink};
    use iwarp_proto::mem::Access;
    let end = |last: u8| {
        let iface = iwarp_net::iface::IfaceConfig::new(
            tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, last]),
            Ipv4Address::new(10, 5, 0, last),
            24,
        );
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let access = Access::LOCAL_READ | Access::REMOTE_WRITE;
        let stag = mem.register(pd, vec![last; len], access, 0).unwrap();
        let ulp = iwarp_ulp(pd);
        let mut cfg = StackConfig::new(iface);
        cfg.tcp = tcp_cfg;
        (Stack::new(cfg, mem), stag, ulp)
    };
    let ((sa, stag_a, ulp_a), (sb, stag_b, ulp_b)) = (end(1), end(2));
    let mut link = VirtualLink::new(sa, sb, cfg);
    link.command(
        Side::A,
        Command::Listen {
            transport: Transport::Tcp,
            port: 7000,
            ulp: ulp_a,
        },
    );
    link.command(
        Side::B,
        Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: Ipv4Address::new(10, 5, 0, 1),
            port: 7000,
            ulp: ulp_b,
        },
    );
    let mut sock = None;
    assert!(link.run_until(1_000_000, |l| {
        l.outputs(Side::A).clear();
        while let Some(o) = l.outputs(Side::B).pop_front() {
            if let Output::Cm(id, CmEvent::Established(_)) = o {
                sock = Some(id);
            }
        }
        sock.is_some()
    }));
    (link, sock.unwrap(), stag_a, stag_b)
}

/// On the virtual-time link (20 µs each way), each 64 KiB Write's
/// latency counts once, from the round that took its post to the one
/// that completed it after the ACK: at least a round trip (40 µs). The
/// setup times count once per side; the active side's spans the TCP
/// handshake and the MPA exchange, two round trips at least.
#[test]
fn completion_latency_and_setup_time_count_each_once() {
    use crate::link::virtual_link::{LinkConfig, Side};
    use iwarp_proto::qp::{Sge, WcStatus, WorkRequest};
    const LEN: usize = 64 << 10;
    let cfg = LinkConfig::default();
    assert_eq!(cfg.latency_ns, 20_000);
    let (mut link, sock, stag_a, stag_b) = tcp_pair(LEN, cfg);
    const N: u64 = 8;
    let mut done = 0;
    for wr_id in 0..N {
        let wr = WorkRequest::Write {
            wr_id,
            signaled: true,
            local: Sge {
                stag: stag_b,
                to: 0,
                len: LEN as u32,
            }
            .into(),
            remote_stag: stag_a,
            remote_to: 0,
        };
        link.command(Side::B, Command::Iwarp(sock, HostCommand::PostSend(wr)));
        assert!(link.run_until(1_000_000, |l| {
            l.outputs(Side::A).clear();
            let mut ok = false;
            while let Some(o) = l.outputs(Side::B).pop_front() {
                if let Output::Iwarp(_, HostOutput::Completion(c)) = o {
                    assert_eq!((c.wr_id, c.status), (wr_id, WcStatus::Success));
                    ok = true;
                }
            }
            ok
        }));
        done += 1;
    }
    // The round after the last completion: the passive side's
    // Established was reported long ago.
    link.step();
    let b = link.engine(Side::B).stats();
    let w = &b.completion_latency.write;
    assert_eq!(w.count(), done);
    assert_eq!(
        b.completion_latency.send.count() + b.completion_latency.read.count(),
        0
    );
    for (bound, n) in w.buckets() {
        if bound.is_some_and(|b| b < 40_000) {
            assert_eq!(n, 0, "a Write completed within {bound:?} ns");
        }
    }
    assert!(w.sum_ns() >= N * 40_000, "{}", w.sum_ns());
    assert_eq!((b.setup_active.count(), b.setup_passive.count()), (1, 0));
    assert!(
        b.setup_active.sum_ns() >= 80_000,
        "{}",
        b.setup_active.sum_ns()
    );
    let a = link.engine(Side::A).stats();
    assert_eq!((a.setup_active.count(), a.setup_passive.count()), (0, 1));
    assert_eq!(
        a.completion_latency,
        Default::default(),
        "the target posted nothing"
    );
}

/// A completion pushed while a thread is parked on the ring unparks it:
/// parked for up to 20 s, the waiter is back within 10 s of the push
/// (in practice microseconds).
#[test]
fn a_push_unparks_the_waiting_thread() {
    let ring = Arc::new(CqRing::new(4));
    let pusher = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            ring.push(
                7,
                CqEntry::Refused {
                    wr_id: 1,
                    error: iwarp_proto::qp::PostError::QueueFull,
                },
            );
            Instant::now()
        })
    };
    while ring.ring.is_empty() {
        ring.park(Duration::from_secs(20));
    }
    let back = Instant::now();
    let pushed = pusher.join().expect("pusher");
    assert!(
        back.saturating_duration_since(pushed) < Duration::from_secs(10),
        "the waiter slept out its park"
    );
    assert!(matches!(
        ring.ring.pop(),
        Some((7, CqEntry::Refused { wr_id: 1, .. }))
    ));
}

/// A signaled Write of the first 64 octets of `from` to the start of `to`.
fn write_64(
    wr_id: u64,
    from: iwarp_proto::mem::STag,
    to: iwarp_proto::mem::STag,
) -> iwarp_proto::qp::WorkRequest {
    iwarp_proto::qp::WorkRequest::Write {
        wr_id,
        signaled: true,
        local: iwarp_proto::qp::Sge {
            stag: from,
            to: 0,
            len: 64,
        }
        .into(),
        remote_stag: to,
        remote_to: 0,
    }
}

/// A round with nothing to do is left out: once a connection is up and
/// quiet, polls return at once (`StackStats::idle_rounds`) and send
/// nothing; a command brings the next round back, and so does a
/// deadline coming due (the idle sweep here), with no frame or command.
#[test]
fn an_idle_round_is_left_out_until_input_or_a_deadline() {
    use crate::link::virtual_link::{LinkConfig, Side};
    use crate::runtime::Engine;
    let (mut link, sock, stag_a, stag_b) = tcp_pair(64, LinkConfig::default());
    // Let the setup's last segments and delayed ACKs settle.
    for _ in 0..1000 {
        link.step();
    }
    let now = link.now();
    let b = link.engine(Side::B);
    let next = b.poll_timeout().expect("the idle sweep at least");
    assert!(next > now + 1_000, "nothing due yet: {next} at {now}");
    let before = b.stats().idle_rounds;
    let mut sent = 0;
    for i in 0..100 {
        let busy = b.poll(now + i, &mut |_: &[&[u8]]| sent += 1, &mut |_| {});
        assert!(!busy);
    }
    assert_eq!(sent, 0);
    assert_eq!(
        b.stats().idle_rounds - before,
        100,
        "every quiet round left out"
    );
    // A post: the next round runs and sends the Write.
    let wr = write_64(7, stag_b, stag_a);
    b.handle_command(Command::Iwarp(sock, HostCommand::PostSend(wr)), now + 100);
    let before = b.stats().idle_rounds;
    let mut frames = Vec::new();
    assert!(b.poll(
        now + 100,
        &mut |p: &[&[u8]]| frames.push(p.concat()),
        &mut |_| {}
    ));
    assert_eq!(b.stats().idle_rounds, before, "the round after a post runs");
    assert_eq!(frames.len(), 1, "the Write's segment");
    // Deadlines with no frame or command: the Write's segment went
    // nowhere (this test took it, not the link), so the connection's
    // timers (a tail-loss probe, the retransmission timeout) come due
    // until one sends it again. Before each deadline the round is left
    // out; at it, the round runs.
    let mut again = 0;
    for _ in 0..20 {
        let t = b.poll_timeout().expect("a timer is armed");
        let before = b.stats().idle_rounds;
        assert!(!b.poll(t - 1, &mut |_: &[&[u8]]| again += 1, &mut |_| {}));
        assert_eq!((b.stats().idle_rounds - before, again), (1, 0));
        b.poll(t, &mut |_: &[&[u8]]| again += 1, &mut |_| {});
        assert_eq!(b.stats().idle_rounds - before, 1, "the round at {t} runs");
        if again > 0 {
            break;
        }
    }
    assert_eq!(again, 1, "the Write's segment, sent again");
}

/// A segment that leaves nothing to do (a Write placed, nothing of ours
/// unacknowledged to answer at once) does not bring the next round back:
/// that round is left out as an idle one, sends nothing, and still runs
/// the hooks (a run-to-completion ping-pong watches its memory in one);
/// what a hook posts there brings the round after it back, which sends
/// the answer carrying the ACK. A segment that does leave work (the
/// Write's retransmission, a duplicate to acknowledge at once) runs the
/// next round.
#[test]
fn a_placed_write_leaves_the_next_round_idle_but_for_the_hooks() {
    use crate::link::virtual_link::{LinkConfig, Side};
    use crate::runtime::Engine;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    // ACKs wait one nanosecond of the loop's clock, as every `iwarp`
    // context's (its `ACK_ROUND`: the next round).
    let tcp_cfg = tcp::Config {
        delayed_ack: Some(1),
        ..tcp::Config::default()
    };
    let (mut link, sock, stag_a, stag_b) = tcp_pair_with(64, LinkConfig::default(), tcp_cfg);
    for _ in 0..1000 {
        link.step();
    }
    let now = link.now();
    // B's Write, taken off the link by the test.
    let b = link.engine(Side::B);
    let wr = write_64(1, stag_b, stag_a);
    b.handle_command(Command::Iwarp(sock, HostCommand::PostSend(wr)), now);
    let mut frames = Vec::new();
    b.poll(now, &mut |p: &[&[u8]]| frames.push(p.concat()), &mut |_| {});
    assert_eq!(frames.len(), 1, "the Write's segment");
    // A, with a hook that counts its runs.
    let runs = Arc::new(AtomicU64::new(0));
    let seen = runs.clone();
    let a = link.engine(Side::A);
    a.handle_command(
        Command::Hook(LoopHook(Box::new(move || {
            seen.fetch_add(1, Ordering::Relaxed);
            HookStatus::Idle
        }))),
        now,
    );
    let mut sent = 0;
    a.poll(now, &mut |_: &[&[u8]]| sent += 1, &mut |_| {});
    assert_eq!((sent, runs.load(Ordering::Relaxed)), (0, 1));
    // The Write arrives and is placed: the round after it is idle, sends
    // nothing (the ACK waits for its deadline), and runs the hook.
    let before = a.stats().idle_rounds;
    a.handle_frame(&frames[0], now + 10);
    assert!(!a.poll(now + 10, &mut |_: &[&[u8]]| sent += 1, &mut |_| {}));
    assert_eq!(
        a.stats().idle_rounds - before,
        1,
        "the round after the Write is idle"
    );
    assert_eq!(
        (sent, runs.load(Ordering::Relaxed)),
        (0, 2),
        "no frame, the hook ran"
    );
    // The same segment again (a retransmission): a duplicate is answered
    // at once (RFC 9293 §3.10.7.4), so the round after it runs and sends
    // that ACK.
    let before = a.stats().idle_rounds;
    a.handle_frame(&frames[0], now + 20);
    a.poll(now + 20, &mut |_: &[&[u8]]| sent += 1, &mut |_| {});
    assert_eq!(
        a.stats().idle_rounds,
        before,
        "the round after a duplicate runs"
    );
    assert_eq!(sent, 1, "the duplicate's ACK");
    assert_eq!(runs.load(Ordering::Relaxed), 3);
}

/// A frame a round sends is published (the device's flush: memif's ring
/// head, AF_XDP's kick) before the rest of that round runs (completions,
/// timers, budget, hooks): a reply is not held behind bookkeeping.
#[test]
fn a_round_publishes_what_it_sent_before_its_hooks_run() {
    use crate::link::virtual_link::{LinkConfig, Side};
    use std::sync::{Arc, Mutex};
    /// Records frames sent and publishes in order.
    struct Order(Arc<Mutex<Vec<&'static str>>>);
    impl FrameSink for Order {
        fn send_parts(&mut self, _parts: &[&[u8]]) -> bool {
            self.0.lock().unwrap().push("sent");
            true
        }
        fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
            let mut b = vec![0; len];
            build(&mut b) && self.send_parts(&[&b])
        }
        fn publish(&mut self) {
            self.0.lock().unwrap().push("published");
        }
    }
    let (mut link, sock, stag_a, stag_b) = tcp_pair(64, LinkConfig::default());
    for _ in 0..1000 {
        link.step();
    }
    let now = link.now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let b = link.engine(Side::B);
    let seen = order.clone();
    b.handle_command(
        Command::Hook(LoopHook(Box::new(move || {
            seen.lock().unwrap().push("hook");
            HookStatus::Idle
        }))),
        now,
    );
    let wr = write_64(1, stag_b, stag_a);
    b.handle_command(Command::Iwarp(sock, HostCommand::PostSend(wr)), now);
    b.poll(now, &mut Order(order.clone()), &mut |_| {});
    assert_eq!(*order.lock().unwrap(), ["sent", "published", "hook"]);
}

/// With [`StackConfig::steering`] an active open takes local ports whose
/// answers (peer to us) the RSS steers to the stack's queue, each port
/// once, and the stack's connection ids follow `sock_ids`; every port
/// of the range in use for that peer fails the connect (`Local`), no
/// hang.
#[test]
fn steered_ephemeral_ports_bring_the_answers_to_the_stacks_queue() {
    use iwarp_net::rss::Rss;
    let (local, remote) = (Ipv4Address::new(10, 9, 0, 1), Ipv4Address::new(10, 9, 0, 2));
    let rss = Rss::symmetric(4).expect("4 queues");
    for queue in 0..4u16 {
        let mut cfg = StackConfig::new(iwarp_net::iface::IfaceConfig::new(
            tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, 1]),
            local,
            24,
        ));
        cfg.steering = Some(Steering {
            rss: rss.clone(),
            queue,
        });
        cfg.sock_ids = (usize::from(queue), 4);
        let mut st = Stack::new(cfg, MemoryTable::new());
        let mut seen = std::collections::HashSet::new();
        for _ in 0..64 {
            let p = st.ephemeral_port(remote, 7000).expect("a port");
            assert!(p >= 49152, "{p}");
            let q = rss.queue_of(remote, local, 7000, p, iwarp_net::wire::IpProtocol::TCP);
            assert_eq!(q, queue, "port {p}");
            assert!(seen.insert(p), "port {p} twice");
        }
        for token in [1, 2, 3] {
            st.handle_command(
                Command::Connect {
                    transport: Transport::Tcp,
                    token,
                    remote,
                    port: 7000,
                    ulp: Ulp::Stream,
                },
                0,
            );
        }
        let mut ids: Vec<SockId> = st.by_tuple.values().copied().collect();
        ids.sort_unstable();
        let q = usize::from(queue);
        assert_eq!(ids, vec![q, q + 4, q + 8]);
        for (&(_, _, lport), _) in st.by_tuple.iter() {
            let to = rss.queue_of(remote, local, 7000, lport, iwarp_net::wire::IpProtocol::TCP);
            assert_eq!(to, queue);
        }
    }
    // A one-port range whose port steers elsewhere: the connect fails.
    let mut cfg = StackConfig::new(iwarp_net::iface::IfaceConfig::new(
        tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        local,
        24,
    ));
    let other = (0..4u16)
        .find(|&q| {
            q != rss.queue_of(
                remote,
                local,
                7000,
                u16::MAX,
                iwarp_net::wire::IpProtocol::TCP,
            )
        })
        .expect("another queue");
    cfg.ephemeral_base = u16::MAX;
    cfg.steering = Some(Steering {
        rss: rss.clone(),
        queue: other,
    });
    let mut st = Stack::new(cfg, MemoryTable::new());
    assert_eq!(st.ephemeral_port(remote, 7000), None);
    st.handle_command(
        Command::Connect {
            transport: Transport::Tcp,
            token: 9,
            remote,
            port: 7000,
            ulp: Ulp::Stream,
        },
        0,
    );
    assert!(st.by_tuple.is_empty());
    assert!(st.pending_out.iter().any(|o| matches!(
        o,
        Output::Failed {
            token: 9,
            error: crate::ConnError::Local(_)
        }
    )));
}

/// A stack with an iWARP connection opening over TCP (id `.1`) and one
/// over SCTP (id `.2`, its association beside it), both to 10.9.0.2,
/// nothing answered; the idle sweep an hour apart, so that only marks
/// and deadlines bring a visit.
fn one_of_each_transport() -> (Stack, SockId, SockId) {
    let iface = iwarp_net::iface::IfaceConfig::new(
        tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        Ipv4Address::new(10, 9, 0, 1),
        24,
    );
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut cfg = StackConfig::new(iface);
    cfg.idle_sweep = 3_600_000_000_000;
    let mut st = Stack::new(cfg, mem);
    let ulp = iwarp_ulp(pd);
    for (token, transport) in [(1, Transport::Tcp), (2, Transport::Sctp)] {
        let cmd = Command::Connect {
            transport,
            token,
            remote: Ipv4Address::new(10, 9, 0, 2),
            port: 7000,
            ulp: ulp.clone(),
        };
        st.handle_command(cmd, 0);
    }
    let tcp = *st.by_tuple.values().next().expect("the TCP connection");
    let sctp = st.by_token.get(&2).copied();
    (st, tcp, sctp.expect("the SCTP connection"))
}

/// One table of connections over both transports (`Connections`): a TCP
/// connection and an SCTP connection are entries of it under their own
/// kind, counted together; a command naming the SCTP one reaches it
/// through the table and leaves the TCP one as it was.
#[test]
fn one_table_holds_the_connections_of_both_transports() {
    let (mut st, tcp, sctp) = one_of_each_transport();
    assert!(matches!(st.conns.get(&tcp), Some(Connection::Tcp(_))));
    assert!(matches!(st.conns.get(&sctp), Some(Connection::Sctp(_))));
    assert_eq!(st.conns.len(), 2);
    assert_eq!((st.connections(), st.sctp_connections()), (2, 1));
    // The SCTP part's index holds its one connection, and its walk over
    // what connections hold visits that one alone.
    let sc = st.sctp().expect("the SCTP part");
    assert_eq!(sc.members(), 1);
    let walked: Vec<_> = sc.holders(&st.conns).map(|h| h.id).collect();
    assert_eq!(walked, [sctp]);
    assert!(st.is_sctp(sctp) && !st.is_sctp(tcp));
    assert_eq!(st.sctp_state(tcp), None);
    assert_eq!(st.sctp_state(sctp), Some(crate::endpoint::State::Opening));
    let syn_sent = |st: &Stack| st.conns[&tcp].tcp().map(|s| s.tcp().state());
    assert_eq!(syn_sent(&st), Some(TcpState::SynSent));
    st.handle_command(Command::Abort(sctp), 0);
    assert_eq!(st.sctp_state(sctp), Some(crate::endpoint::State::Aborting));
    assert_eq!(syn_sent(&st), Some(TcpState::SynSent));
    assert_eq!(st.sctp_counters().map(|c| c.connections), Some(1));
}

/// A post reaches its connection through the one table, whichever
/// transport carries it (`Stack::cmd_post`): a receive posted on the TCP
/// connection and one on the SCTP connection, both still opening, wait
/// in each one's queue of early work; nothing is refused, and each is
/// marked for the next round.
#[test]
fn a_post_reaches_the_connection_of_either_transport() {
    let (mut st, tcp, sctp) = one_of_each_transport();
    st.poll(0, &mut |_: &[&[u8]]| {}, &mut |_| {});
    st.pending_out.clear();
    assert!(st.ready.is_empty(), "{:?}", st.ready.marked());
    for id in [tcp, sctp] {
        let sgl = iwarp_proto::qp::SgList::default();
        st.handle_command(Command::Iwarp(id, HostCommand::PostRecv(7, sgl)), 0);
    }
    assert!(st.pending_out.is_empty(), "{:?}", st.pending_out);
    let tcp_holds = match st.conns.get(&tcp).and_then(Connection::tcp) {
        Some(Sock {
            kind: SockKind::Iwarp(i),
            ..
        }) => i.holds_posts(),
        _ => false,
    };
    assert!(tcp_holds, "the TCP connection holds the post");
    let sctp_holds = st.conns[&sctp].sctp().is_some_and(|c| c.holds_posts());
    assert!(sctp_holds, "the SCTP connection holds the post");
    let mut marked = st.ready.marked().to_vec();
    marked.sort_unstable();
    assert_eq!(marked, [Ready::tcp(tcp), Ready::sctp(sctp)]);
}

/// One id space over both transports (`SockIds`): the TCP connection
/// and the SCTP connection a stack opens one after the other take the
/// next ids of one counter, and a loop of several (`sock_ids` (1, 2))
/// gives both its own residue, so the router finds either by `id % n`.
#[test]
fn both_transports_take_ids_from_one_counter() {
    let (_, tcp, sctp) = one_of_each_transport();
    assert_eq!((tcp, sctp), (0, 1));
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let iface = iwarp_net::iface::IfaceConfig::new(
        tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        Ipv4Address::new(10, 9, 0, 1),
        24,
    );
    let mut cfg = StackConfig::new(iface);
    cfg.sock_ids = (1, 2);
    let mut st = Stack::new(cfg, mem);
    let mut ids = Vec::new();
    for (token, transport) in [
        (1, Transport::Sctp),
        (2, Transport::Tcp),
        (3, Transport::Sctp),
    ] {
        st.handle_command(
            Command::Connect {
                transport,
                token,
                remote: Ipv4Address::new(10, 9, 0, 2),
                port: 7000,
                ulp: iwarp_ulp(pd),
            },
            0,
        );
        ids.extend(st.pending_out.drain(..).filter_map(|o| match o {
            Output::Opening { sock, .. } => Some(sock),
            _ => None,
        }));
    }
    assert_eq!(ids, [1, 3, 5]);
}

/// The stack has one ready set: a TCP connection, an SCTP connection
/// and its association, each marked by its connect, are in the one
/// ready list, and one round visits all three (the TCP connection
/// polled, the SCTP connection driven, the association visited) and
/// leaves the list empty.
#[test]
fn one_ready_set_holds_both_transports_and_one_round_visits_them_all() {
    let (mut st, tcp, sctp) = one_of_each_transport();
    let marked = st.ready.marked().to_vec();
    let assoc = marked.iter().find_map(|k| k.as_assoc());
    let assoc = assoc.expect("the association is in the stack's ready list");
    let mut want = vec![Ready::tcp(tcp), Ready::assoc(assoc), Ready::sctp(sctp)];
    let mut got = marked.clone();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "one list, one entry each: {marked:?}");
    let visits = st.sctp().map(|sc| (sc.drives(), sc.host().visits()));
    assert_eq!(visits, Some((0, 0)));
    st.poll(0, &mut |_: &[&[u8]]| {}, &mut |_| {});
    let sc = st.sctp().expect("the SCTP part");
    assert_eq!(sc.host().polled(), [assoc], "the association visited");
    assert_eq!((sc.drives(), sc.host().visits()), (1, 1));
    // The TCP connection was polled: its SYN's retransmission deadline
    // went into the deadline set as it left the ready list.
    let slot = st.conns[&tcp].tcp().unwrap().head.slot;
    assert!(!slot.is_ready() && slot.deadline().is_some(), "{slot:?}");
    assert!(st.ready.is_empty(), "{:?}", st.ready.marked());
}

/// The stack has one deadline set: an association's deadline (T1-init,
/// its INIT unanswered) and a TCP connection's (its SYN's
/// retransmission) are both in it, and one round at the later of the
/// two, with no frame, command or mark, fires both: the association is
/// visited and the connection polled, each leaving a later deadline.
#[test]
fn an_association_s_and_a_tcp_connection_s_deadlines_fire_from_one_set() {
    let (mut st, tcp, _) = one_of_each_transport();
    let assoc = st.ready.marked().iter().find_map(|k| k.as_assoc()).unwrap();
    st.poll(0, &mut |_: &[&[u8]]| {}, &mut |_| {});
    assert!(st.ready.is_empty(), "{:?}", st.ready.marked());
    let t_tcp = st.conns[&tcp]
        .tcp()
        .unwrap()
        .head
        .slot
        .deadline()
        .expect("the SYN's deadline");
    let host = st.sctp().expect("the SCTP part").host();
    let t_assoc = host.assoc(assoc).and_then(|a| a.poll_timeout()).unwrap();
    assert!(t_tcp > 0 && t_assoc > 0, "{t_tcp} {t_assoc}");
    assert!(st.ready.deadlines() >= 2, "{}", st.ready.deadlines());
    assert_eq!(st.ready.next_deadline(), Some(t_tcp.min(t_assoc)));
    assert_eq!(st.poll_timeout(), Some(t_tcp.min(t_assoc)));
    let visits = host.visits();
    let t = t_tcp.max(t_assoc);
    let idle = st.stats().idle_rounds;
    st.poll(t, &mut |_: &[&[u8]]| {}, &mut |_| {});
    assert_eq!(st.stats().idle_rounds, idle, "the round at {t} runs");
    let host = st.sctp().expect("the SCTP part").host();
    assert_eq!(host.polled(), [assoc], "the association's deadline fired");
    assert_eq!(host.visits(), visits + 1);
    let later = host.assoc(assoc).and_then(|a| a.poll_timeout()).unwrap();
    assert!(later > t, "T1-init again, later: {later} at {t}");
    let again = st.conns[&tcp]
        .tcp()
        .unwrap()
        .head
        .slot
        .deadline()
        .expect("the SYN's next deadline");
    assert!(again > t, "the connection's deadline fired: {again} at {t}");
    assert!(st.conns[&tcp].tcp().unwrap().tcp().stats().rto_retransmits >= 1);
}

/// An iWARP connection's setup with the defaults these tests use
/// (MPA's defaults, queues of 16, no CQ or SRQ of the API's).
fn iwarp_ulp(pd: crate::PdId) -> Ulp {
    Ulp::Iwarp {
        mpa: MpaConfig::default(),
        params: crate::StreamParams {
            pd,
            emss: 1460,
            sq_depth: 16,
            rq_depth: 16,
        },
        manual: false,
        cq: None,
        srq: None,
    }
}

/// A listener's half-open handshake keeps the rounds running (the
/// SYN-ACK's timer is the listener's, not in the deadline set): with the
/// SYN-ACK lost and nothing else arriving, it is sent again at its
/// timeout; once the handshake's retries are spent and it is gone, quiet
/// rounds are left out again.
#[test]
fn a_half_open_handshake_keeps_the_listeners_rounds_running() {
    const MS: u64 = 1_000_000;
    let end = |last: u8| {
        let iface = iwarp_net::iface::IfaceConfig::new(
            tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0x0b, last]),
            Ipv4Address::new(10, 6, 0, last),
            24,
        );
        Stack::new(StackConfig::new(iface), MemoryTable::new())
    };
    let (mut a, mut b) = (end(1), end(2));
    a.handle_command(
        Command::Listen {
            port: 7000,
            transport: Transport::Tcp,
            ulp: Ulp::Stream,
        },
        0,
    );
    b.handle_command(
        Command::Connect {
            token: 1,
            remote: Ipv4Address::new(10, 6, 0, 1),
            port: 7000,
            transport: Transport::Tcp,
            ulp: Ulp::Stream,
        },
        0,
    );
    // ARP, then the SYN reaches `a`: half-open there.
    let (mut to_a, mut to_b): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    let mut t = 0;
    while a.listener_holds().0 == 0 {
        assert!(t < 100 * MS, "no SYN reached the listener");
        t += MS;
        for f in std::mem::take(&mut to_b) {
            b.handle_frame(&f, t);
        }
        b.poll(t, &mut |p: &[&[u8]]| to_a.push(p.concat()), &mut |_| {});
        for f in std::mem::take(&mut to_a) {
            a.handle_frame(&f, t);
        }
        a.poll(t, &mut |p: &[&[u8]]| to_b.push(p.concat()), &mut |_| {});
    }
    // From here on `a` hears nothing: its SYN-ACK (if sent yet) is lost.
    let mut sent = 0;
    let start = t;
    while a.listener_holds().0 == 1 {
        assert!(t - start < 600_000 * MS, "the handshake never ended");
        t += 10 * MS;
        a.poll(t, &mut |_: &[&[u8]]| sent += 1, &mut |_| {});
    }
    assert!(sent >= 2, "{sent} SYN-ACKs sent: none again");
    let before = a.stats().idle_rounds;
    for i in 1..=100 {
        assert!(!a.poll(t + i, &mut |_: &[&[u8]]| sent += 1, &mut |_| {}));
    }
    assert_eq!(a.stats().idle_rounds - before, 100, "quiet again");
}
