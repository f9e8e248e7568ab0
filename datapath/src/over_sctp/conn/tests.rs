use super::*;
use crate::over_tcp::CmEvent;
use crate::runtime::Engine;
use crate::stack::{Command, Stack, StackConfig, Transport, Ulp};
use iwarp_net::iface::IfaceConfig;
use iwarp_proto::mem::{Access, STag};
use iwarp_proto::qp::{Sge, WcStatus, WorkRequest};
use tcp_lite::wire::EthernetAddress;

const MS: u64 = 1_000_000;
const PORT: u16 = 5000;

/// Two stacks on a wire without delay: `a` connects over SCTP to
/// `b`, which listens. Frames from `a` can be dropped.
struct Pair {
    a: Stack,
    b: Stack,
    now: u64,
    out_a: Vec<Output>,
    out_b: Vec<Output>,
    to_a: Vec<Vec<u8>>,
    to_b: Vec<Vec<u8>>,
    /// Drop every frame `a` sends while set.
    drop_from_a: bool,
    /// Frames of `a` dropped.
    dropped: usize,
    /// The region `b` lets `a` write.
    target: STag,
    /// What `a` writes.
    source: STag,
}

fn end(last: u8, idle_sweep: u64) -> (Stack, Ulp, STag) {
    end_with(last, idle_sweep, |_| {})
}

/// As [`end`], its settings changed by `set` first.
fn end_with(last: u8, idle_sweep: u64, set: impl FnOnce(&mut StackConfig)) -> (Stack, Ulp, STag) {
    let iface = IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x5c, last]),
        Ipv4Address::new(10, 7, 0, last),
        24,
    );
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let access = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let stag = mem.register(pd, vec![last; 4096], access, 0).unwrap();
    let ulp = Ulp::Iwarp {
        mpa: iwarp_control::MpaConfig {
            ird: 4,
            ord: 4,
            ..Default::default()
        },
        params: crate::StreamParams {
            pd,
            emss: 1460,
            sq_depth: 16,
            rq_depth: 16,
        },
        manual: true,
        cq: None,
        srq: None,
    };
    let mut cfg = StackConfig::new(iface);
    cfg.idle_sweep = idle_sweep;
    set(&mut cfg);
    (Stack::new(cfg, mem), ulp, stag)
}

impl Pair {
    /// The connection set up: `a`'s and `b`'s ids.
    /// Two stacks, nothing sent, and the ULPs they would use (the
    /// listener's asks its application).
    fn new(idle_sweep: u64) -> (Pair, Ulp, Ulp) {
        let (a, ulp_a, source) = end(1, idle_sweep);
        let (b, ulp_b, target) = end(2, idle_sweep);
        let p = Pair {
            a,
            b,
            now: 0,
            out_a: Vec::new(),
            out_b: Vec::new(),
            to_a: Vec::new(),
            to_b: Vec::new(),
            drop_from_a: false,
            dropped: 0,
            target,
            source,
        };
        (p, ulp_a, ulp_b)
    }

    fn connected(idle_sweep: u64) -> (Pair, SockId, SockId) {
        let (mut p, ulp_a, ulp_b) = Pair::new(idle_sweep);
        p.listen(ulp_b);
        p.connect(1, Transport::Sctp, ulp_a);
        let sb = p.request();
        p.accept(sb);
        let mut up = None;
        assert!(p.run_until(1000, |p| {
            up = p.out_a.iter().find_map(|o| match o {
                Output::Cm(id, CmEvent::Established(_)) => Some(*id),
                _ => None,
            });
            up.is_some()
        }));
        (p, up.unwrap(), sb)
    }

    /// `b`'s application accepts request `sock` (IRD/ORD 4, no private
    /// data).
    fn accept(&mut self, sock: SockId) {
        let now = self.now;
        self.b.handle_command(
            Command::Accept {
                sock,
                private_data: Vec::new(),
                ird: 4,
                ord: 4,
                cq: None,
                pd: None,
            },
            now,
        );
    }

    /// Run until `b`'s application holds a connection request; its id.
    fn request(&mut self) -> SockId {
        let mut req = None;
        assert!(self.run_until(1000, |p| {
            req = p.out_b.iter().find_map(|o| match o {
                Output::Cm(id, CmEvent::ConnectRequest(_)) => Some(*id),
                _ => None,
            });
            req.is_some()
        }));
        req.unwrap()
    }

    /// `b` listens on `PORT` over SCTP with `ulp`.
    fn listen(&mut self, ulp: Ulp) {
        let now = self.now;
        self.b.handle_command(
            Command::Listen {
                port: PORT,
                transport: Transport::Sctp,
                ulp,
            },
            now,
        );
    }

    /// `a` connects to `b`'s `PORT` over `transport` with `ulp`.
    fn connect(&mut self, token: u64, transport: Transport, ulp: Ulp) {
        let now = self.now;
        self.a.handle_command(
            Command::Connect {
                token,
                remote: Ipv4Address::new(10, 7, 0, 2),
                port: PORT,
                transport,
                ulp,
            },
            now,
        );
    }

    /// One round of each stack, `tick` ns after the last.
    fn step(&mut self, tick: u64) {
        self.now += tick;
        let now = self.now;
        for f in std::mem::take(&mut self.to_a) {
            self.a.handle_frame(&f, now);
        }
        let (to_b, out_a) = (&mut self.to_b, &mut self.out_a);
        let (drop, dropped) = (self.drop_from_a, &mut self.dropped);
        self.a.poll(
            now,
            &mut |p: &[&[u8]]| {
                if drop {
                    *dropped += 1;
                } else {
                    to_b.push(p.concat());
                }
            },
            &mut |o| out_a.push(o),
        );
        for f in std::mem::take(&mut self.to_b) {
            self.b.handle_frame(&f, now);
        }
        let (to_a, out_b) = (&mut self.to_a, &mut self.out_b);
        self.b
            .poll(now, &mut |p: &[&[u8]]| to_a.push(p.concat()), &mut |o| {
                out_b.push(o)
            });
    }

    fn run_until(&mut self, n: usize, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        for _ in 0..n {
            if done(self) {
                return true;
            }
            self.step(MS);
        }
        done(self)
    }

    /// Connection drives and association visits of each side so far.
    fn work(&self) -> [(u64, u64); 2] {
        [&self.a, &self.b].map(|s| {
            let sc = s.sctp().unwrap();
            (sc.drives(), sc.host().visits())
        })
    }

    /// `a` writes 64 octets of its region to `b`'s.
    fn write(&mut self, sock: SockId, wr_id: u64) {
        let wr = WorkRequest::Write {
            wr_id,
            signaled: true,
            local: Sge {
                stag: self.source,
                to: 0,
                len: 64,
            }
            .into(),
            remote_stag: self.target,
            remote_to: 0,
        };
        self.a
            .handle_command(Command::Iwarp(sock, HostCommand::PostSend(wr)), self.now);
    }
}

/// The stack's latency counters cover SCTP connections as TCP ones
/// (`StackStats::{setup_active, setup_passive, completion_latency}`):
/// each end counts its connection's setup once, by its role, from its
/// open (the `Connect`; the association accepted) to full operation,
/// and a Write's post to its completion once.
#[test]
fn setup_and_completion_latency_count_over_sctp() {
    let (mut p, sa, _) = Pair::connected(60_000 * MS);
    let (a, b) = (p.a.stats(), p.b.stats());
    assert_eq!((a.setup_active.count(), a.setup_passive.count()), (1, 0));
    assert_eq!((b.setup_active.count(), b.setup_passive.count()), (0, 1));
    // `b`'s application accepted after its request came up; `a`
    // waited for that and the Accept's way back: a few 1 ms steps.
    assert!(
        a.setup_active.sum_ns() >= 2 * MS,
        "{}",
        a.setup_active.sum_ns()
    );
    assert!(
        b.setup_passive.sum_ns() < a.setup_active.sum_ns(),
        "{} {}",
        b.setup_passive.sum_ns(),
        a.setup_active.sum_ns()
    );
    assert_eq!(a.completion_latency.write.count(), 0);
    p.write(sa, 7);
    assert!(p.run_until(100, |p| p.out_a.iter().any(|o| matches!(
        o,
        Output::Iwarp(_, HostOutput::Completion(c)) if c.wr_id == 7
    ))));
    let w = p.a.stats().completion_latency;
    assert_eq!((w.write.count(), w.send.count(), w.read.count()), (1, 0, 0));
    // Posted between steps 1 ms apart, completed on the SACK a step
    // or more later.
    assert!(w.write.sum_ns() >= MS, "{}", w.write.sum_ns());
    assert_eq!(p.b.stats().completion_latency, Default::default());
}

/// A Terminate either way ends the connection as over TCP
/// ([`Lifecycle::stream_ended`], `over_tcp`'s
/// `a_terminate_either_way_closes_the_tcp_stream`): `a` writes to an
/// STag `b` does not have; `b` sends the Terminate, and both
/// connections close by themselves (`Closing`, then `Disconnected`)
/// with the Terminate as the cause.
#[test]
fn a_terminate_either_way_closes_the_connection() {
    let (mut p, sa, sb) = Pair::connected(60_000 * MS);
    p.target = STag(p.target.0 ^ 0x100);
    p.write(sa, 7);
    let over = |_: &Pair, s: &Stack, id| s.sctp_state(id);
    let mut closing = [false; 2];
    assert!(p.run_until(1000, |p| {
        closing[0] |= over(p, &p.a, sa) == Some(State::Closing);
        closing[1] |= over(p, &p.b, sb) == Some(State::Closing);
        [(&p.out_a, sa), (&p.out_b, sb)].iter().all(|(out, id)| {
            out.iter()
                .any(|o| matches!(o, Output::Cm(i, CmEvent::Disconnected) if i == id))
        })
    }));
    assert_eq!(closing, [true, true], "each end closed by itself");
    let cause = |s: &Stack, id| s.disconnect_cause(id);
    assert!(
        matches!(cause(&p.b, sb), Some(DisconnectCause::TerminateSent(_))),
        "b: {:?}",
        cause(&p.b, sb)
    );
    assert!(
        matches!(cause(&p.a, sa), Some(DisconnectCause::TerminateReceived(_))),
        "a: {:?}",
        cause(&p.a, sa)
    );
}

/// The peer's SHUTDOWN begins our close, as its FIN does over TCP
/// (one teardown, [`Lifecycle::teardown`]): `a`'s connection goes
/// through `Closing` while its association finishes the SHUTDOWN
/// exchange, the cause is the peer's close, and a Write posted then is
/// refused with it instead of being handed to an association that
/// takes no new data (RFC 9260 §9.2). Before, over SCTP the connection
/// stayed in full operation until the association was gone.
#[test]
fn the_peers_shutdown_begins_our_close() {
    let (mut p, sa, sb) = Pair::connected(60_000 * MS);
    let now = p.now;
    p.b.handle_command(Command::Close(sb), now);
    let state = |s: &Stack, id| s.sctp_state(id);
    let mut posted = false;
    assert!(p.run_until(1000, |p| {
        if !posted && state(&p.a, sa) == Some(State::Closing) {
            posted = true;
            p.write(sa, 9);
        }
        p.out_a
            .iter()
            .any(|o| matches!(o, Output::Cm(i, CmEvent::Disconnected) if *i == sa))
    }));
    assert!(posted, "a went from full operation to Closed directly");
    let refused = p.out_a.iter().find_map(|o| match o {
        Output::Iwarp(i, HostOutput::Refused(9, e)) if *i == sa => Some(*e),
        _ => None,
    });
    assert_eq!(
        refused,
        Some(PostError::Disconnected(DisconnectCause::PeerClosed))
    );
    assert_eq!(p.a.disconnect_cause(sa), Some(DisconnectCause::PeerClosed));
}

/// A close during the setup exchange ends the connection as over TCP
/// (`over_tcp`'s `Closing` takes no setup step): the peer's Accept
/// that comes after it does not bring the connection up (no
/// `Established`, no queue pair), the close completes with
/// `Disconnected`, and a post made after the close is refused.
/// Before both transports shared one state ([`crate::endpoint`]),
/// an SCTP connection closed while `Initiated` still started its
/// queue pair and reported `Established` when the Accept came.
#[test]
fn a_close_during_setup_ends_without_established() {
    let (mut p, ulp_a, ulp_b) = Pair::new(60_000 * MS);
    p.listen(ulp_b);
    p.connect(1, Transport::Sctp, ulp_a);
    // The association comes up; `a` sends its Initiate and `b`'s
    // application holds the request.
    let req = p.request();
    let sa = p
        .out_a
        .iter()
        .find_map(|o| match o {
            Output::Connected { token: 1, sock, .. } => Some(*sock),
            _ => None,
        })
        .expect("the association is up");
    assert_eq!(p.a.sctp_state(sa), Some(State::AwaitingSetup));
    // `a` closes while it waits for the Accept; `b` accepts.
    p.a.handle_command(Command::Close(sa), p.now);
    assert_eq!(p.a.sctp_state(sa), Some(State::Closing));
    p.accept(req);
    p.write(sa, 9);
    assert!(p
        .run_until(3000, |p| p.out_a.iter().any(
            |o| matches!(o, Output::Cm(id, CmEvent::Disconnected) if *id == sa)
        )));
    assert!(
        !p.out_a
            .iter()
            .any(|o| matches!(o, Output::Cm(_, CmEvent::Established(_)))),
        "{:?}",
        p.out_a
    );
    assert!(
        p.out_a.iter().any(|o| matches!(
            o,
            Output::Iwarp(id, HostOutput::Refused(9, _)) if *id == sa
        )),
        "the Write posted after the close is refused: {:?}",
        p.out_a
    );
    assert!(!p.a.is_sctp(sa), "freed");
}

/// An idle connection is not driven, nor its association visited,
/// round after round: only its deadlines (none within a second here:
/// the heartbeat is 30 s away) and the idle sweep visit it. Before
/// the ready sets every round drove every connection and visited
/// every association twice.
#[test]
fn an_idle_connection_is_not_driven_every_round() {
    let (mut p, sa, _) = Pair::connected(60_000 * MS);
    // Let the setup settle: its last packets and delayed SACKs, and
    // the deadlines it left (setup timers of up to 10 s, a T3-rtx
    // stopped by the SACK) come once each and find nothing to do.
    for _ in 0..1200 {
        p.step(10 * MS);
    }
    assert!(p.a.is_sctp(sa));
    let before = p.work();
    for _ in 0..1000 {
        p.step(MS);
    }
    assert_eq!(
        p.work(),
        before,
        "1000 idle rounds (1 s) drove or visited something"
    );
    assert!(p.a.quiescent() && p.b.quiescent());
    // The stacks' next deadline is the SCTP heartbeat's (RFC 9260
    // §8.3: 30 s plus the RTO after the association came up), not the
    // next round.
    let next = p.a.poll_timeout().unwrap();
    assert!(next > 30_000 * MS, "{next} at {}", p.now);
    // With a sweep every 100 ms each side drives its one connection
    // and visits its association about ten times a second.
    let (mut p, _, _) = Pair::connected(100 * MS);
    for _ in 0..500 {
        p.step(MS);
    }
    let before = p.work();
    for _ in 0..1000 {
        p.step(MS);
    }
    for (w, b) in p.work().iter().zip(before) {
        let (drives, visits) = (w.0 - b.0, w.1 - b.1);
        assert!((9..=11).contains(&drives), "{drives} drives");
        assert!((9..=11).contains(&visits), "{visits} visits");
    }
    // Work still flows: a Write after the quiet second completes.
    let sa = p.out_a.iter().find_map(|o| match o {
        Output::Cm(id, CmEvent::Established(_)) => Some(*id),
        _ => None,
    });
    p.write(sa.unwrap(), 7);
    assert!(p.run_until(100, |p| p.out_a.iter().any(|o| matches!(
        o,
        Output::Iwarp(_, HostOutput::Completion(c)) if c.wr_id == 7
    ))));
}

/// The round that sends a Write's packet leaves the association with
/// only its T3-rtx deadline (RFC 9260 §6.3.2 R1) in the deadline set:
/// the next round neither visits it nor drives its connection, where
/// each used to come once more for nothing (a visit left marked by
/// the send, then the drive of its connection). At the receiver the
/// packet leaves the connection nothing to do (the Write placed from
/// the frame: `SctpConn::idle_after_packet`) and the association only its
/// delayed SACK's deadline (§6.2) to record: neither is driven nor
/// visited, and the round after the packet is left out as an idle
/// one.
#[test]
fn a_sent_packet_leaves_no_visit_for_the_next_round() {
    let (mut p, sa, _) = Pair::connected(3_600_000 * MS);
    for _ in 0..500 {
        p.step(MS);
    }
    let [before, before_b] = p.work();
    let idle_b = p.b.stats().idle_rounds;
    p.write(sa, 1);
    p.step(MS);
    // The command's drive gave the association its segment, and the
    // same round sent it.
    assert_eq!(p.work()[0], (before.0 + 1, before.1));
    // `b` placed the Write from the frame; the round after it neither
    // drove its connection nor visited its association.
    assert_eq!(p.work()[1], before_b);
    assert_eq!(
        p.b.stats().idle_rounds,
        idle_b + 1,
        "b's round after the packet is idle"
    );
    // `b` delays its SACK (one packet, RFC 9260 §6.2): nothing comes
    // back yet, so `a` has nothing to do.
    assert!(p.to_a.is_empty(), "b answered at once");
    p.step(MS);
    assert_eq!(p.work()[0], (before.0 + 1, before.1));
    assert!(p.a.quiescent());
    // The deadline set has the association's T3-rtx (an RTO away, at
    // least RTO.Min: RFC 9260 §6.3.1), not the next round.
    let next = p.a.poll_timeout().unwrap();
    assert!(next > p.now + MS, "{next} at {}", p.now);
    // The delayed SACK comes back and the Write completes.
    assert!(p.run_until(1000, |p| p.out_a.iter().any(|o| matches!(
        o,
        Output::Iwarp(_, HostOutput::Completion(c)) if c.wr_id == 1
    ))));
}

/// A packet lost with nothing else happening: the association is out
/// of the ready set, and only its T3-rtx deadline (RFC 9260 §6.3.3)
/// in the deadline set brings it back to retransmit (the idle sweep
/// is an hour away).
#[test]
fn a_retransmission_fires_from_the_deadline_set() {
    let (mut p, sa, sb) = Pair::connected(3_600_000 * MS);
    for _ in 0..500 {
        p.step(MS);
    }
    let fpdus = |p: &Pair| p.b.qp_stats(sb).unwrap().fpdus_rx;
    let got = fpdus(&p);
    p.drop_from_a = true;
    p.write(sa, 1);
    p.step(MS);
    assert!(p.dropped > 0, "the Write's packet went");
    p.drop_from_a = false;
    let lost = p.now;
    let before = p.work();
    assert!(
        p.run_until(10_000, |p| fpdus(p) > got),
        "never retransmitted"
    );
    let t3 = p.a.sctp_counters().unwrap().assoc.t3_expiries;
    assert!(t3 >= 1, "{t3}");
    // Waiting for T3 (the RTO: a second at first, RFC 9260 §6.3.1)
    // cost a handful of visits, not one a round.
    let waited = (p.now - lost) / MS;
    assert!(waited >= 200, "retransmitted after {waited} ms");
    let [(drives, visits), _] = p.work();
    assert!(
        drives - before[0].0 <= 8 && visits - before[0].1 <= 8,
        "{} drives and {} visits in {waited} rounds",
        drives - before[0].0,
        visits - before[0].1
    );
}

/// The stack's one map of listening ports holds those over SCTP too
/// (issue 26): an SCTP listener is one of the stack's listening
/// ports, and a connection it hands over counts against the port's
/// backlog in the stack's figures until the application accepts it,
/// as over TCP; `Unlisten` removes it from the one map.
#[test]
fn an_sctp_listener_is_one_of_the_stacks_listening_ports() {
    let (mut p, ulp_a, ulp_b) = Pair::new(60_000 * MS);
    assert_eq!(p.b.listening_ports(), 0);
    p.listen(ulp_b);
    assert_eq!(p.b.listening_ports(), 1);
    assert_eq!(p.b.unaccepted(), 0);
    p.connect(1, Transport::Sctp, ulp_a);
    let sb = p.request();
    assert_eq!(p.b.unaccepted(), 1, "the request counts");
    p.accept(sb);
    assert!(p.run_until(1000, |p| p.b.unaccepted() == 0));
    assert_eq!(p.b.sctp_state(sb), Some(State::Operational));
    p.b.handle_command(Command::Unlisten(PORT), p.now);
    assert_eq!(p.b.listening_ports(), 0);
    assert!(!p.b.sctp().unwrap().listening(PORT));
    p.step(MS);
    assert!(p
        .out_b
        .iter()
        .any(|o| matches!(o, Output::Unlistened { removed: true, .. })));
}

/// `Unlisten` frees the connections not accepted yet from the port's
/// backlog, over SCTP as over TCP (the stack clears each connection's
/// `ConnHead::backlog_of`, whichever transport): a listener opened on the
/// port again counts only its own, and answering a request of the old
/// one takes nothing from it.
#[test]
fn an_unlisten_frees_its_sctp_requests_from_the_backlog() {
    let (mut p, ulp_a, ulp_b) = Pair::new(60_000 * MS);
    p.listen(ulp_b.clone());
    p.connect(1, Transport::Sctp, ulp_a.clone());
    let first = p.request();
    assert_eq!(p.b.unaccepted(), 1);
    p.b.handle_command(Command::Unlisten(PORT), p.now);
    assert_eq!(p.b.unaccepted(), 0);
    p.listen(ulp_b);
    assert_eq!(p.b.listening_ports(), 1);
    p.out_b.clear();
    p.connect(2, Transport::Sctp, ulp_a);
    let second = p.request();
    assert_ne!(second, first);
    assert_eq!(p.b.unaccepted(), 1, "the new listener's own request");
    p.b.handle_command(
        Command::Reject {
            sock: first,
            private_data: Vec::new(),
        },
        p.now,
    );
    p.step(MS);
    assert_eq!(
        p.b.unaccepted(),
        1,
        "the old listener's request, answered, takes nothing from the new one"
    );
}

/// An Accept whose settings cannot be sent (private data beyond the
/// Session Accept's 508 octets after the IRD/ORD word) is refused
/// (`CmRefused`) and answers nothing: the Initiate stays held for
/// another answer (`iwarp_control::setup`, as over MPA), which then
/// brings the connection up.
#[test]
fn a_refused_sctp_accept_leaves_the_request_held() {
    let (mut p, ulp_a, ulp_b) = Pair::new(60_000 * MS);
    p.listen(ulp_b);
    p.connect(1, Transport::Sctp, ulp_a);
    let sb = p.request();
    let accept = |private_data: Vec<u8>| Command::Accept {
        sock: sb,
        private_data,
        ird: 4,
        ord: 4,
        cq: None,
        pd: None,
    };
    p.b.handle_command(accept(vec![0; 600]), p.now);
    p.step(MS);
    assert!(p.out_b.iter().any(|o| matches!(
        o,
        Output::CmRefused(id, e) if *id == sb && e.reason == SetupFailure::BadConfig
    )));
    assert_eq!(
        p.b.sctp_state(sb),
        Some(State::AwaitingDecision),
        "still held"
    );
    p.b.handle_command(accept(b"ok".to_vec()), p.now);
    assert!(p.run_until(1000, |p| p.b.sctp_state(sb) == Some(State::Operational)));
    let est = |p: &mut Pair| {
        p.out_a.iter().any(
            |o| matches!(o, Output::Cm(_, CmEvent::Established(n)) if n.peer_private_data == b"ok"),
        )
    };
    assert!(p.run_until(1000, est), "{:?}", p.out_a);
}

/// A full SCTP backlog aborts the next association as it comes up;
/// a request the application answers (here, rejects) leaves the
/// port's count, so the next association is handed over again.
#[test]
fn an_answered_sctp_request_makes_room_in_the_backlog() {
    let (mut p, ulp_a, ulp_b) = Pair::new(60_000 * MS);
    (p.b, _, p.target) = end_with(2, 60_000 * MS, |c| c.backlog = 1);
    p.listen(ulp_b);
    p.connect(1, Transport::Sctp, ulp_a.clone());
    let first = p.request();
    assert_eq!(p.b.unaccepted(), 1);
    // A second association while the first waits: aborted.
    p.connect(2, Transport::Sctp, ulp_a.clone());
    // (Its association aborted as it came up: the Initiate gets no
    // answer, the setup fails on `a`.)
    let failed = |p: &mut Pair| {
        p.out_a
            .iter()
            .any(|o| matches!(o, Output::Cm(1, CmEvent::SetupFailed(_))))
    };
    assert!(p.run_until(1000, failed), "{:?}", p.out_a);
    assert_eq!(p.b.sctp().unwrap().backlog_aborts(), 1);
    assert_eq!(p.b.unaccepted(), 1);
    p.b.handle_command(
        Command::Reject {
            sock: first,
            private_data: Vec::new(),
        },
        p.now,
    );
    assert!(p.run_until(1000, |p| p.b.unaccepted() == 0));
    // Room again: the third is the application's to answer.
    p.out_b.clear();
    p.connect(3, Transport::Sctp, ulp_a);
    let third = p.request();
    assert_ne!(third, first);
    assert_eq!(p.b.unaccepted(), 1);
    assert_eq!(p.b.sctp().unwrap().backlog_aborts(), 1);
}

/// `Connect`/`Listen` name the transport beside one ULP (issue 26
/// item 2): a listener over SCTP that does not ask its application
/// accepts each Initiate at once with its own private data and
/// IRD/ORD, as a non-manual listener over MPA answers the Request.
#[test]
fn a_listener_that_does_not_ask_accepts_by_itself() {
    let (mut p, ulp_a, mut ulp_b) = Pair::new(0);
    let Ulp::Iwarp { mpa, manual, .. } = &mut ulp_b else {
        unreachable!()
    };
    *manual = false;
    mpa.private_data = b"from b".to_vec();
    (mpa.ird, mpa.ord) = (2, 3);
    p.listen(ulp_b);
    p.connect(1, Transport::Sctp, ulp_a);
    let established = |out: &[Output]| {
        out.iter().find_map(|o| match o {
            Output::Cm(_, CmEvent::Established(n)) => Some(n.clone()),
            _ => None,
        })
    };
    assert!(p.run_until(1000, |p| established(&p.out_a).is_some()
        && established(&p.out_b).is_some()));
    assert!(
        !p.out_b
            .iter()
            .any(|o| matches!(o, Output::Cm(_, CmEvent::ConnectRequest(_)))),
        "the application was asked: {:?}",
        p.out_b
    );
    let (na, nb) = (
        established(&p.out_a).unwrap(),
        established(&p.out_b).unwrap(),
    );
    assert_eq!(na.peer_private_data, b"from b");
    // B's limits (within what A offered, 4 and 4); A's ORD capped by
    // B's IRD, its IRD what it offered (B sends at most 3 Reads).
    assert_eq!((nb.ird, nb.ord), (2, 3));
    assert_eq!((na.ird, na.ord), (4, 2));
}

/// What SCTP cannot carry is refused at once and says why: a byte
/// stream, and an Initiate's private data over 508 octets (RFC 5043's
/// IRD/ORD word takes 4 of MPA's 512); nothing goes on the wire.
#[test]
fn what_sctp_cannot_carry_is_refused_locally() {
    let (mut p, mut ulp_a, _) = Pair::new(0);
    p.listen(Ulp::Stream);
    p.connect(1, Transport::SctpOverUdp, Ulp::Stream);
    let Ulp::Iwarp { mpa, .. } = &mut ulp_a else {
        unreachable!()
    };
    mpa.private_data = vec![7; 509];
    p.connect(2, Transport::Sctp, ulp_a.clone());
    p.step(MS);
    assert!(p.out_b.iter().any(|o| matches!(
        o,
        Output::Listening {
            port: PORT,
            result: Err(crate::stack::ListenError::Unsupported(_))
        }
    )));
    for token in [1, 2] {
        assert!(
            p.out_a.iter().any(|o| matches!(
                o,
                Output::Failed { token: t, error: ConnError::Local(_) } if *t == token
            )),
            "token {token}: {:?}",
            p.out_a
        );
    }
    assert!(p.to_b.is_empty() && p.to_a.is_empty(), "something was sent");
    // 508 octets pass.
    if let Ulp::Iwarp { mpa, .. } = &mut ulp_a {
        mpa.private_data.truncate(508);
    }
    p.connect(3, Transport::Sctp, ulp_a);
    assert!(p.run_until(10, |p| p
        .out_a
        .iter()
        .any(|o| matches!(o, Output::Opening { token: 3, .. }))));
}

/// One `Unlisten` for both transports: it closes an SCTP listener
/// (answered `Unlistened`, removed), after which an INIT to the port
/// draws an ABORT and the connect fails with the peer's abort; the
/// port can then listen over TCP.
#[test]
fn one_unlisten_closes_an_sctp_listener() {
    let (mut p, ulp_a, ulp_b) = Pair::new(0);
    p.listen(ulp_b.clone());
    // The port listens over SCTP: not over TCP as well.
    p.b.handle_command(
        Command::Listen {
            port: PORT,
            transport: Transport::Tcp,
            ulp: ulp_b.clone(),
        },
        0,
    );
    p.b.handle_command(Command::Unlisten(PORT), 0);
    p.b.handle_command(
        Command::Listen {
            port: PORT,
            transport: Transport::Tcp,
            ulp: ulp_b,
        },
        0,
    );
    p.step(MS);
    let answers: Vec<_> = p
        .out_b
        .iter()
        .filter_map(|o| match o {
            Output::Listening { result, .. } => Some(format!("{result:?}")),
            Output::Unlistened { removed, .. } => Some(format!("removed {removed}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        ["Ok(())", "Err(PortInUse)", "removed true", "Ok(())"]
    );
    p.connect(1, Transport::Sctp, ulp_a);
    assert!(p.run_until(100, |p| p.out_a.iter().any(|o| matches!(
        o,
        Output::Failed {
            token: 1,
            error: ConnError::PeerAbort(_)
        }
    ))));
}

/// A port that listens over SCTP has no TCP listener in the one map:
/// a SYN to it is answered with RST, and the connect fails as
/// refused, as to a port nobody listens on.
#[test]
fn a_syn_to_a_port_listening_over_sctp_is_reset() {
    let (mut p, ulp_a, ulp_b) = Pair::new(0);
    p.listen(ulp_b);
    p.connect(1, Transport::Tcp, ulp_a);
    let failed = |p: &mut Pair| {
        p.out_a.iter().find_map(|o| match o {
            Output::Failed { token: 1, error } => Some(*error),
            _ => None,
        })
    };
    assert!(p.run_until(100, |p| failed(p).is_some()), "{:?}", p.out_a);
    assert_eq!(failed(&mut p), Some(ConnError::Refused));
    assert_eq!(p.b.stats().rx_no_socket, 1);
    assert_eq!(p.b.sctp_connections(), 0);
}

/// On the loop of queue `q` of 4 (`set_ids`, `set_steering`): SCTP
/// connection ids from the loop's counter (`q`, then 4 apart, after
/// the one TCP connection the loop made first); local ports
/// whose answers (peer to us, SCTP's ports) the RSS brings to `q`;
/// SCTP over UDP refused (its outer ports are fixed); no fitting
/// free port: a local failure, nothing sent.
#[test]
fn a_loop_of_several_takes_its_ids_and_ports() {
    use iwarp_net::rss::Rss;
    use iwarp_net::wire::IpProtocol;
    let (local, remote) = ([10, 7, 0, 1], Ipv4Address::new(10, 7, 0, 2));
    let rss = Rss::symmetric(4).unwrap();
    let (_, ulp, _) = end(1, 0);
    let mut ready = ReadySet::new(1);
    let ulp = SctpUlp::from_ulp(&ulp).unwrap();
    let part = |queue: u16, base: u16| {
        let cfg = SctpHostConfig::new([0x02, 0, 0, 0, 0x5c, 1], local, [7; 16]);
        let mut sc = SctpConns::new(cfg, base).unwrap();
        let ids = Arc::new(SockIds::new(usize::from(queue), 4));
        // The stack's TCP connections take from the same counter.
        assert_eq!(ids.take(), usize::from(queue));
        sc.set_ids(ids);
        sc.set_steering(Some(crate::stack::Steering {
            rss: rss.clone(),
            queue,
        }));
        sc
    };
    for queue in 0..4u16 {
        let mut sc = part(queue, 49152);
        let mut conns = Connections::new();
        let mut out = VecDeque::new();
        for token in 1..=3 {
            let to = (remote, PORT, None);
            sc.connect(&mut conns, &mut ready, token, to, ulp.clone(), 0, &mut out);
        }
        let ids: Vec<SockId> = out
            .iter()
            .map(|o| match o {
                Output::Opening { sock, .. } => *sock,
                o => panic!("{o:?}"),
            })
            .collect();
        let q = usize::from(queue);
        let base = q + 4;
        assert_eq!(ids, [base, base + 4, base + 8]);
        let ports = ids.iter().map(|id| conns[id].sctp().map(|c| c.port));
        let mut ports: Vec<u16> = ports.collect::<Option<_>>().expect("over SCTP");
        for &p in &ports {
            assert!(p >= 49152, "{p}");
            let to = rss.queue_of(remote, Ipv4Address(local), PORT, p, IpProtocol::SCTP);
            assert_eq!(to, queue, "port {p}");
        }
        ports.dedup();
        assert_eq!(ports.len(), 3, "three ports");
        // Inside UDP: refused, naming why.
        out.clear();
        let to = (remote, PORT, Some(9899));
        sc.connect(&mut conns, &mut ready, 9, to, ulp.clone(), 0, &mut out);
        match out.pop_front() {
            Some(Output::Failed {
                token: 9,
                error: ConnError::Local(why),
            }) => assert!(why.contains("9899"), "{why}"),
            o => panic!("{o:?}"),
        }
        assert_eq!(conns.len(), 3);
    }
    // A one-port range whose port steers elsewhere.
    let p = u16::MAX;
    let own = rss.queue_of(remote, Ipv4Address(local), PORT, p, IpProtocol::SCTP);
    let mut sc = part((own + 1) % 4, p);
    let mut conns = Connections::new();
    let mut out = VecDeque::new();
    let to = (remote, PORT, None);
    sc.connect(&mut conns, &mut ready, 1, to, ulp.clone(), 0, &mut out);
    assert!(
        matches!(
            out.pop_front(),
            Some(Output::Failed {
                token: 1,
                error: ConnError::Local(_)
            })
        ),
        "{out:?}"
    );
    assert_eq!(conns.len(), 0);
    // The loop it steers to takes it.
    let mut sc = part(own, p);
    sc.connect(&mut conns, &mut ready, 1, to, ulp, 0, &mut out);
    assert!(matches!(out.pop_front(), Some(Output::Opening { .. })));
    let ports = conns.values().filter_map(Connection::sctp).map(|c| c.port);
    assert_eq!(ports.collect::<Vec<_>>(), [p]);
}

/// `SctpCounters::add`: every count summed, `qp_held_max` the larger.
#[test]
fn counters_add_up() {
    let one = |k: u64| {
        let mut c = SctpCounters {
            connections: k as usize,
            qp_held_octets: 10 * k as usize,
            qp_held_max: 7 * k as usize,
            segments_by_reference: 100 * k,
            early_segments: 1000 * k,
            ..Default::default()
        };
        c.host.rx_packets = k;
        c.host.closed_discarded = 2 * k;
        c.assoc.retransmits = 3 * k;
        c.assoc.data_in_place = 5 * k;
        c
    };
    let mut sum = one(1);
    sum.add(&one(2));
    assert_eq!(sum.connections, 3);
    assert_eq!(sum.qp_held_octets, 30);
    assert_eq!(sum.qp_held_max, 14);
    assert_eq!(sum.segments_by_reference, 300);
    assert_eq!(sum.early_segments, 3000);
    assert_eq!(sum.host.rx_packets, 3);
    assert_eq!(sum.host.closed_discarded, 6);
    assert_eq!(sum.assoc.retransmits, 9);
    assert_eq!(sum.assoc.data_in_place, 15);
    assert_eq!(sum.host.tx_packets, 0);
}

/// Segments the responder sent behind its Accept can arrive first (every
/// chunk is unordered, RFC 5043 §10): the initiator holds them
/// (`early::EarlyData`, counted in `SctpCounters::early_segments`) and
/// gives them to its queue pair once the Accept makes it, so the Write
/// `b` posted right behind its Accept lands in `a`'s region.
#[test]
fn segments_that_overtake_the_accept_are_held_then_placed() {
    let (mut p, ulp_a, ulp_b) = Pair::new(60_000 * MS);
    p.listen(ulp_b);
    p.connect(1, Transport::Sctp, ulp_a);
    let sb = p.request();
    p.accept(sb);
    let poll_b = |p: &mut Pair| {
        let (to_a, out_b) = (&mut p.to_a, &mut p.out_b);
        p.b.poll(p.now, &mut |f: &[&[u8]]| to_a.push(f.concat()), &mut |o| {
            out_b.push(o)
        });
    };
    poll_b(&mut p);
    let accept = std::mem::take(&mut p.to_a);
    assert!(!accept.is_empty(), "the Accept went out");
    // `b` writes 64 octets of its region (2s) into `a`'s (1s).
    let wr = WorkRequest::Write {
        wr_id: 9,
        signaled: true,
        local: Sge {
            stag: p.target,
            to: 0,
            len: 64,
        }
        .into(),
        remote_stag: p.source,
        remote_to: 0,
    };
    p.b.handle_command(Command::Iwarp(sb, HostCommand::PostSend(wr)), p.now);
    poll_b(&mut p);
    assert!(!p.to_a.is_empty(), "the Write went out");
    let early = |p: &Pair| p.a.sctp_counters().unwrap().early_segments;
    // The Write's packet reaches `a` first: held, nothing placed.
    p.step(MS);
    assert_eq!(early(&p), 1);
    assert_eq!(p.a.mem.snapshot(p.source).unwrap()[..64], [1; 64]);
    assert!(!p
        .out_a
        .iter()
        .any(|o| matches!(o, Output::Cm(_, CmEvent::Established(_)))));
    // Then the Accept: the queue pair is made and takes what was held.
    p.to_a.splice(0..0, accept);
    assert!(p.run_until(100, |p| p
        .out_a
        .iter()
        .any(|o| matches!(o, Output::Cm(_, CmEvent::Established(_))))));
    assert_eq!(p.a.mem.snapshot(p.source).unwrap()[..64], [2; 64]);
    assert_eq!(p.a.mem.snapshot(p.source).unwrap()[64..], [1; 4032]);
    assert!(p.run_until(100, |p| p.out_b.iter().any(|o| matches!(
        o,
        Output::Iwarp(_, HostOutput::Completion(c)) if c.wr_id == 9 && c.status == WcStatus::Success
    ))));
}
