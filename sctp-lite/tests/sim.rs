//! Deterministic simulation of two sctp-lite endpoints over a faulty link:
//! virtual time, seeded loss, duplication, reordering and corruption.
//! Every message is checked (content, exactly once, per-stream order for
//! ordered ones); setup, graceful shutdown and abort are checked too.
//! Nothing here reads a clock: "time" is the simulator's counter.
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::{BTreeMap, VecDeque};

use iwarp_testlink::{DatagramLink, Dir, Faults, LinkConfig};

use sctp_lite::assoc::{
    out_of_the_blue, Association, CloseReason, Config, Event, ListenOutcome, Listener, SendError,
    State, Stats,
};

const MS: u64 = 1_000_000;

/// Link faults in per mille, as this test has always given them.
fn faults(loss: u32, dup: u32, reorder: u32, corrupt: u32) -> Faults {
    Faults::per_mille(loss, dup, reorder, corrupt)
}

const CLEAN: Faults = Faults::NONE;
/// One-way delay of the link; a reordered packet arrives up to four times
/// that late.
const DELAY: u64 = 5 * MS;

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        streams: 8,
        max_packet: 1200,
        recv_buffer: 256 * 1024,
        send_buffer: 256 * 1024,
        max_message: 128 * 1024,
        rto_initial: 100 * MS,
        rto_min: 50 * MS,
        rto_max: 2_000 * MS,
        max_retransmits: 30,
        heartbeat_interval: 500 * MS,
        sack_delay: 20 * MS,
        ..Config::default()
    }
}

/// Message `idx` from side `from`: its size, stream, ordering and bytes.
fn msg(from: u8, idx: u32) -> (u16, bool, Vec<u8>) {
    const SIZES: [usize; 12] = [
        1,
        2,
        3,
        100,
        1171,
        1172,
        1173,
        2344,
        5000,
        20_000,
        65_536,
        128 * 1024,
    ];
    let size = SIZES[(idx as usize * 7 + usize::from(from)) % SIZES.len()];
    let stream = (idx % 5) as u16;
    let unordered = idx.is_multiple_of(3);
    let data = (0..size)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(idx * 7 + u32::from(from)) as u8
        })
        .collect();
    (stream, unordered, data)
}

struct Side {
    name: u8,
    assoc: Option<Association>,
    listener: Option<Listener>,
    events: Vec<Event>,
    next_send: u32,
    to_send: u32,
    got: BTreeMap<u32, ()>,
    last_ordered: BTreeMap<u16, u32>,
    /// Whether the application takes what arrives.
    reading: bool,
}

impl Side {
    fn new(name: u8, to_send: u32) -> Self {
        Side {
            name,
            assoc: None,
            listener: None,
            events: Vec::new(),
            next_send: 0,
            to_send,
            got: BTreeMap::new(),
            last_ordered: BTreeMap::new(),
            reading: true,
        }
    }

    fn pump_app(&mut self) {
        let Some(a) = self.assoc.as_mut() else { return };
        while self.reading {
            let Some(e) = a.poll_event() else { break };
            if let Event::Message(m) = &e {
                let idx = m.ppid;
                let (stream, unordered, data) = msg(1 - self.name, idx);
                assert_eq!(m.stream, stream, "side {} msg {idx}: stream", self.name);
                assert_eq!(
                    m.unordered, unordered,
                    "side {} msg {idx}: U flag",
                    self.name
                );
                assert!(
                    m.data == data,
                    "side {} msg {idx}: {} octets differ from the {} sent",
                    self.name,
                    m.data.len(),
                    data.len()
                );
                assert!(
                    self.got.insert(idx, ()).is_none(),
                    "side {} msg {idx} delivered twice",
                    self.name
                );
                if !unordered {
                    if let Some(prev) = self.last_ordered.insert(stream, idx) {
                        assert!(
                            prev < idx,
                            "side {}: stream {stream} ordered {idx} after {prev}",
                            self.name
                        );
                    }
                }
                continue;
            }
            self.events.push(e);
        }
        if a.state() != State::Established {
            return;
        }
        while self.next_send < self.to_send {
            let (stream, unordered, data) = msg(self.name, self.next_send);
            match a.send(stream, self.next_send, unordered, &data) {
                Ok(_) => self.next_send += 1,
                Err(SendError::BufferFull) => break,
                Err(e) => panic!("side {} send {}: {e:?}", self.name, self.next_send),
            }
        }
    }

    fn deadline(&self) -> Option<u64> {
        self.assoc.as_ref().and_then(|a| a.poll_timeout())
    }
}

struct Sim {
    now: u64,
    link: DatagramLink,
    a: Side,
    b: Side,
}

impl Sim {
    fn new(seed: u64, faults: Faults, n_a: u32, n_b: u32, ca: Config, cb: Config) -> Self {
        let mut a = Side::new(0, n_a);
        a.assoc = Some(Association::connect(ca, 5000, 80, 0, seed).unwrap());
        let mut b = Side::new(1, n_b);
        b.listener = Some(Listener::new(cb).unwrap());
        Sim {
            now: 0,
            link: DatagramLink::new(LinkConfig {
                seed,
                faults,
                latency: DELAY,
                reorder_max: 4 * DELAY,
            }),
            a,
            b,
        }
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; 2048];
        for to_b in [true, false] {
            let side = if to_b { &mut self.a } else { &mut self.b };
            side.pump_app();
            if let Some(a) = side.assoc.as_mut() {
                let mut out = VecDeque::new();
                while let Some(n) = a.poll_transmit(self.now, &mut buf) {
                    out.push_back(buf[..n].to_vec());
                    assert!(out.len() < 10_000, "runaway transmit");
                }
                for p in out {
                    self.link.send(self.now, Dir::to_b(to_b), p);
                }
            }
        }
    }

    /// Runs until `done` or the virtual time limit; returns whether done.
    fn run(&mut self, limit: u64, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let mut buf = vec![0u8; 2048];
        for _ in 0..5_000_000 {
            self.flush();
            if done(self) {
                return true;
            }
            let next_pkt = self.link.next_arrival();
            let next = [next_pkt, self.a.deadline(), self.b.deadline()]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next else { return done(self) };
            if next > limit {
                return false;
            }
            self.now = self.now.max(next);
            while let Some((dir, p)) = self.link.pop_due(self.now) {
                if dir == Dir::AtoB {
                    match self.b.assoc.as_mut() {
                        Some(a) if a.is_closed() => {
                            if let Some(n) = out_of_the_blue(&p, false, &mut buf) {
                                let r = buf[..n].to_vec();
                                self.link.send(self.now, Dir::BtoA, r);
                            }
                        }
                        Some(a) => a.handle_packet(self.now, &p),
                        None => {
                            let l = self.b.listener.as_mut().unwrap();
                            match l.handle_packet(self.now, &p, &mut buf) {
                                ListenOutcome::Drop => {}
                                ListenOutcome::Reply(n) => {
                                    let r = buf[..n].to_vec();
                                    self.link.send(self.now, Dir::BtoA, r);
                                }
                                ListenOutcome::Accept(a) => self.b.assoc = Some(*a),
                            }
                        }
                    }
                } else if let Some(a) = self.a.assoc.as_mut() {
                    if a.is_closed() {
                        // A real endpoint hands packets of no (live)
                        // association to the §8.4 rules.
                        if let Some(n) = out_of_the_blue(&p, false, &mut buf) {
                            let r = buf[..n].to_vec();
                            self.link.send(self.now, Dir::AtoB, r);
                        }
                    } else {
                        a.handle_packet(self.now, &p);
                    }
                }
            }
            for s in [&mut self.a, &mut self.b] {
                if let Some(a) = s.assoc.as_mut() {
                    if a.poll_timeout().is_some_and(|t| t <= self.now) {
                        a.handle_timeout(self.now);
                    }
                }
            }
        }
        false
    }

    fn all_delivered(&self) -> bool {
        self.a.got.len() as u32 == self.b.to_send && self.b.got.len() as u32 == self.a.to_send
    }

    fn closed(s: &Side) -> Option<CloseReason> {
        s.events.iter().find_map(|e| {
            if let Event::Closed(r) = e {
                Some(*r)
            } else {
                None
            }
        })
    }
}

fn transfer_and_shutdown(seed: u64, faults: Faults, n: u32) -> [Stats; 2] {
    let mut sim = Sim::new(seed, faults, n, n, cfg(1), cfg(2));
    assert!(
        sim.run(600_000 * MS, |s| s.all_delivered()),
        "seed {seed}: not all delivered: a got {}/{n}, b got {}/{n}",
        sim.a.got.len(),
        sim.b.got.len()
    );
    assert!(sim.a.events.contains(&Event::Connected));
    assert!(sim.b.events.contains(&Event::Connected));
    sim.a.assoc.as_mut().unwrap().shutdown(sim.now);
    let ok = sim.run(sim.now + 600_000 * MS, |s| {
        s.a.assoc.as_ref().unwrap().is_closed() && s.b.assoc.as_ref().unwrap().is_closed()
    });
    sim.a.pump_app();
    sim.b.pump_app();
    assert!(
        ok,
        "seed {seed}: shutdown did not finish: a {:?} b {:?}",
        sim.a.assoc.as_ref().unwrap().state(),
        sim.b.assoc.as_ref().unwrap().state()
    );
    assert_eq!(
        Sim::closed(&sim.a),
        Some(CloseReason::Shutdown),
        "seed {seed}"
    );
    // B learns of the shutdown; a lost SHUTDOWN-COMPLETE is recovered by
    // A's answer to the retransmitted SHUTDOWN-ACK (§8.4 item 5).
    assert!(
        sim.b.events.contains(&Event::ShutdownReceived),
        "seed {seed}"
    );
    assert_eq!(
        Sim::closed(&sim.b),
        Some(CloseReason::Shutdown),
        "seed {seed}"
    );
    [
        sim.a.assoc.as_ref().unwrap().stats(),
        sim.b.assoc.as_ref().unwrap().stats(),
    ]
}

fn total(v: &[[Stats; 2]], f: impl Fn(&Stats) -> u64) -> u64 {
    v.iter().flatten().map(f).sum()
}

#[test]
fn clean_link_every_message_both_ways() {
    let st = [transfer_and_shutdown(1, CLEAN, 60)];
    // A clean link: nothing lost, nothing resent, nothing discarded.
    assert_eq!(total(&st, |s| s.retransmits), 0);
    assert_eq!(total(&st, |s| s.packets_discarded), 0);
    assert!(total(&st, |s| s.data_chunks_sent) > 60);
}

#[test]
fn lossy_link_every_message_both_ways() {
    let f = faults(50, 0, 0, 0);
    let st: Vec<_> = (1..=6)
        .map(|seed| transfer_and_shutdown(seed, f, 40))
        .collect();
    // The recovery paths ran: fast retransmit and the T3 timer both.
    assert!(total(&st, |s| s.fast_retransmits) > 0, "{st:?}");
    assert!(total(&st, |s| s.t3_expiries) > 0, "{st:?}");
    assert!(total(&st, |s| s.retransmits) > 0, "{st:?}");
}

#[test]
fn duplicating_reordering_corrupting_link() {
    let f = faults(20, 50, 100, 20);
    let st: Vec<_> = (10..=15)
        .map(|seed| transfer_and_shutdown(seed, f, 40))
        .collect();
    assert!(
        total(&st, |s| s.dup_data_received) > 0,
        "duplicates were seen"
    );
    assert!(
        total(&st, |s| s.packets_discarded) > 0,
        "corrupted packets were discarded"
    );
    assert!(
        total(&st, |s| s.out_of_order_data) > 0,
        "reordered data was seen"
    );
}

#[test]
fn heavy_loss_still_delivers() {
    transfer_and_shutdown(99, faults(200, 20, 50, 20), 20);
}

#[test]
fn abort_reaches_the_peer() {
    let mut sim = Sim::new(7, CLEAN, 5, 5, cfg(1), cfg(2));
    assert!(sim.run(60_000 * MS, |s| s.all_delivered()));
    sim.b.assoc.as_mut().unwrap().abort();
    assert!(sim.run(sim.now + 60_000 * MS, |s| s
        .a
        .assoc
        .as_ref()
        .unwrap()
        .is_closed()));
    sim.a.pump_app();
    sim.b.pump_app();
    assert_eq!(Sim::closed(&sim.b), Some(CloseReason::LocalAbort));
    // Cause 12: User-Initiated Abort.
    assert_eq!(Sim::closed(&sim.a), Some(CloseReason::PeerAbort(Some(12))));
}

#[test]
fn dead_link_times_out_setup() {
    let mut sim = Sim::new(3, CLEAN, 0, 0, cfg(1), cfg(2));
    sim.link.set_up(false);
    sim.run(3_600_000 * MS, |s| s.a.assoc.as_ref().unwrap().is_closed());
    sim.a.pump_app();
    assert_eq!(Sim::closed(&sim.a), Some(CloseReason::Timeout));
    assert!(sim.b.assoc.is_none());
}

#[test]
fn link_dying_mid_transfer_times_out() {
    let mut sim = Sim::new(4, CLEAN, 30, 30, cfg(1), cfg(2));
    assert!(sim.run(60_000 * MS, |s| s.a.got.len() > 2));
    sim.link.set_up(false);
    sim.run(sim.now + 3_600_000 * MS, |s| {
        s.a.assoc.as_ref().unwrap().is_closed()
    });
    sim.a.pump_app();
    assert_eq!(Sim::closed(&sim.a), Some(CloseReason::Timeout));
}

#[test]
fn listener_refuses_init_without_required_adaptation() {
    let mut cb = cfg(2);
    cb.require_adaptation = Some(1);
    let mut sim = Sim::new(5, CLEAN, 0, 0, cfg(1), cb);
    sim.run(60_000 * MS, |s| s.a.assoc.as_ref().unwrap().is_closed());
    sim.a.pump_app();
    // Cause 2: Missing Mandatory Parameter.
    assert_eq!(Sim::closed(&sim.a), Some(CloseReason::PeerAbort(Some(2))));
    assert!(sim.b.assoc.is_none());
}

#[test]
fn connector_refuses_init_ack_without_required_adaptation() {
    let mut ca = cfg(1);
    ca.adaptation = Some(1);
    ca.require_adaptation = Some(1);
    let mut sim = Sim::new(6, CLEAN, 0, 0, ca, cfg(2));
    sim.run(60_000 * MS, |s| s.a.assoc.as_ref().unwrap().is_closed());
    sim.a.pump_app();
    assert_eq!(Sim::closed(&sim.a), Some(CloseReason::AdaptationRefused));
    assert!(
        sim.b.assoc.is_none(),
        "no association may come of a refused INIT-ACK"
    );
}

#[test]
fn adaptation_is_seen_by_both_sides() {
    let mut ca = cfg(1);
    ca.adaptation = Some(1);
    ca.require_adaptation = Some(1);
    let mut cb = cfg(2);
    cb.adaptation = Some(1);
    cb.require_adaptation = Some(1);
    let mut sim = Sim::new(8, CLEAN, 3, 3, ca, cb);
    assert!(sim.run(60_000 * MS, |s| s.all_delivered()));
    assert_eq!(sim.a.assoc.as_ref().unwrap().peer_adaptation(), Some(1));
    assert_eq!(sim.b.assoc.as_ref().unwrap().peer_adaptation(), Some(1));
}

#[test]
fn simultaneous_open_collides_into_one_association() {
    // Both sides connect to each other (RFC 9260 §5.2.1, §5.2.4 case B).
    let mut a = Association::connect(cfg(1), 5000, 6000, 0, 1).unwrap();
    let mut b = Association::connect(cfg(2), 6000, 5000, 0, 2).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut now = 0;
    for _ in 0..50 {
        let mut to_b = Vec::new();
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            to_b.push(buf[..n].to_vec());
        }
        let mut to_a = Vec::new();
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            to_a.push(buf[..n].to_vec());
        }
        for p in &to_b {
            b.handle_packet(now, p);
        }
        for p in &to_a {
            a.handle_packet(now, p);
        }
        now += MS;
    }
    assert_eq!(a.state(), State::Established);
    assert_eq!(b.state(), State::Established);
    assert_eq!(a.peer_tag(), b.local_tag());
    assert_eq!(b.peer_tag(), a.local_tag());
    a.send(0, 9, false, b"hello").unwrap();
    for _ in 0..5 {
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            b.handle_packet(now, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            a.handle_packet(now, &buf[..n]);
        }
    }
    let mut got = None;
    while let Some(e) = b.poll_event() {
        if let Event::Message(m) = e {
            got = Some(m.data);
        }
    }
    assert_eq!(got.as_deref(), Some(&b"hello"[..]));
}

#[test]
fn receiver_that_stops_reading_is_bounded_then_resumes() {
    let mut sim = Sim::new(21, CLEAN, 30, 0, cfg(1), cfg(2));
    sim.b.reading = false;
    // Nothing is taken for a minute of virtual time: B holds at most its
    // receive buffer, A keeps the rest, and the association survives
    // (zero window probes are answered).
    let limit = 60_000 * MS;
    sim.run(limit, |s| s.now >= limit);
    let (a, b) = (sim.a.assoc.as_ref().unwrap(), sim.b.assoc.as_ref().unwrap());
    assert_eq!(b.state(), State::Established);
    assert_eq!(a.state(), State::Established);
    assert!(
        b.recv_buffered() <= 256 * 1024,
        "B holds {}",
        b.recv_buffered()
    );
    assert!(
        b.recv_buffered() > 128 * 1024,
        "B's buffer should have filled: {}",
        b.recv_buffered()
    );
    assert!(a.send_buffered() > 0, "A should be stalled");
    assert!(sim.a.got.is_empty() && sim.b.got.is_empty());
    sim.b.reading = true;
    assert!(
        sim.run(sim.now + 600_000 * MS, |s| s.all_delivered()),
        "b got {}/30",
        sim.b.got.len()
    );
}

#[test]
fn idle_association_exchanges_heartbeats() {
    let mut sim = Sim::new(22, CLEAN, 2, 2, cfg(1), cfg(2));
    assert!(sim.run(60_000 * MS, |s| s.all_delivered()));
    let until = sim.now + 10_000 * MS;
    sim.run(until, |s| s.now >= until);
    for side in [&sim.a, &sim.b] {
        let a = side.assoc.as_ref().unwrap();
        assert_eq!(a.state(), State::Established);
        let st = a.stats();
        assert!(st.heartbeats_sent >= 5, "{st:?}");
        assert!(st.heartbeat_acks >= 5, "{st:?}");
        // RTT samples from heartbeats: 10 ms round trips, so RTO.Min.
        assert_eq!(a.rto(), 50 * MS);
    }
}

/// A longer sweep; run with `cargo test -p sctp-lite --test sim -- --ignored`.
#[test]
#[ignore]
fn soak_many_seeds() {
    for seed in 100..300 {
        let k = seed as u32;
        let f = faults(k % 7 * 15, k % 5 * 10, k % 3 * 50, k % 4 * 5);
        transfer_and_shutdown(seed, f, 25);
    }
}
