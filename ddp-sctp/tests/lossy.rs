//! RFC 5043 sessions over a seeded faulty link (loss, duplication,
//! reordering, corruption) in virtual time: every DDP Segment arrives once
//! with its DDP-SSN, and a Terminate that overtakes segments (all chunks
//! are unordered, §10) ends the session only after them (§6.1, §6.2).
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::BTreeMap;

use ddp_sctp::{listener, DdpAssociation, DdpEvent, SessionEnd};
use iwarp_testlink::{DatagramLink, Dir, Faults, LinkConfig};
use sctp_lite::assoc::{Config, ListenOutcome, Listener};

const MS: u64 = 1_000_000;

/// The link: 4% loss, 3% duplication, 15% of copies up to 20 ms late,
/// 1% corruption; 5 ms one way.
fn link(seed: u64) -> DatagramLink {
    DatagramLink::new(LinkConfig {
        seed,
        faults: Faults::per_mille(40, 30, 150, 10),
        latency: 5 * MS,
        reorder_max: 20 * MS,
    })
}

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        streams: 4,
        max_packet: 1200,
        rto_initial: 100 * MS,
        rto_min: 50 * MS,
        rto_max: 2_000 * MS,
        max_retransmits: 30,
        sack_delay: 20 * MS,
        ..Config::default()
    }
}

struct World {
    now: u64,
    link: DatagramLink,
    a: DdpAssociation,
    b: Option<DdpAssociation>,
    l: Listener,
    ev_a: Vec<DdpEvent>,
    ev_b: Vec<DdpEvent>,
}

impl World {
    fn send(&mut self, to_b: bool, p: Vec<u8>) {
        self.link.send(self.now, Dir::to_b(to_b), p);
    }

    fn step(&mut self) -> bool {
        let mut buf = vec![0u8; 2048];
        while let Some(n) = self.a.poll_transmit(self.now, &mut buf) {
            let p = buf[..n].to_vec();
            self.send(true, p);
        }
        if let Some(b) = self.b.as_mut() {
            let mut out = Vec::new();
            while let Some(n) = b.poll_transmit(self.now, &mut buf) {
                out.push(buf[..n].to_vec());
            }
            for p in out {
                self.send(false, p);
            }
        }
        while let Some(e) = self.a.poll_event() {
            self.ev_a.push(e);
        }
        if let Some(b) = self.b.as_mut() {
            while let Some(e) = b.poll_event() {
                self.ev_b.push(e);
            }
        }
        let next_pkt = self.link.next_arrival();
        let next = [
            next_pkt,
            self.a.poll_timeout(),
            self.b.as_ref().and_then(|b| b.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        while let Some((dir, p)) = self.link.pop_due(self.now) {
            if dir == Dir::BtoA {
                self.a.handle_packet(self.now, &p);
            } else if let Some(b) = self.b.as_mut() {
                b.handle_packet(self.now, &p);
            } else {
                let mut out = vec![0u8; 2048];
                match self.l.handle_packet(self.now, &p, &mut out) {
                    ListenOutcome::Reply(n) => {
                        let r = out[..n].to_vec();
                        self.send(false, r);
                    }
                    ListenOutcome::Accept(s) => {
                        self.b = Some(DdpAssociation::wrap(*s, cfg(2).max_packet))
                    }
                    ListenOutcome::Drop => {}
                }
            }
        }
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now);
        }
        if let Some(b) = self.b.as_mut() {
            if b.poll_timeout().is_some_and(|t| t <= self.now) {
                b.handle_timeout(self.now);
            }
        }
        true
    }

    fn run_until(&mut self, mut done: impl FnMut(&World) -> bool) {
        for _ in 0..2_000_000 {
            if done(self) {
                return;
            }
            assert!(self.step(), "stalled with nothing scheduled");
            assert!(self.now < 3_600_000 * MS, "virtual hour passed");
        }
        panic!("did not finish");
    }
}

fn segment(stream: u16, i: u16, max: usize) -> Vec<u8> {
    let len = 1 + (usize::from(i) * 389 + usize::from(stream) * 97) % max;
    (0..len)
        .map(|k| (k as u16).wrapping_mul(7).wrapping_add(i ^ stream) as u8)
        .collect()
}

#[test]
fn sessions_survive_a_faulty_link() {
    let mut early = 0;
    for seed in 1..=8u64 {
        let mut w = World {
            now: 0,
            link: link(seed),
            a: DdpAssociation::connect(cfg(1), 4000, 5000, 0, seed).unwrap(),
            b: None,
            l: listener(cfg(2)).unwrap(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
        };
        w.run_until(|w| {
            w.ev_a.contains(&DdpEvent::Connected) && w.ev_b.contains(&DdpEvent::Connected)
        });
        for s in 0..4 {
            w.a.initiate(s, &[s as u8; 3]).unwrap();
        }
        w.run_until(|w| {
            w.ev_b
                .iter()
                .filter(|e| matches!(e, DdpEvent::SessionRequested { .. }))
                .count()
                == 4
        });
        for s in 0..4 {
            w.b.as_mut().unwrap().accept(s, b"").unwrap();
        }
        w.run_until(|w| {
            w.ev_a
                .iter()
                .filter(|e| matches!(e, DdpEvent::SessionAccepted { .. }))
                .count()
                == 4
        });
        let max = w.a.mulpdu();
        const N: u16 = 60;
        for s in 0..4 {
            for i in 1..=N {
                assert_eq!(w.a.send_segment(s, &segment(s, i, max)), Ok(i));
            }
            // Terminate right behind the segments: it may overtake them.
            w.a.terminate(w.now, s).unwrap();
        }
        let ended = |w: &World| {
            w.ev_b
                .iter()
                .filter(|e| {
                    matches!(
                        e,
                        DdpEvent::SessionEnded {
                            why: SessionEnd::PeerTerminated,
                            ..
                        }
                    )
                })
                .count()
        };
        w.run_until(|w| ended(w) == 4);
        for s in 0..4 {
            let mut seen = BTreeMap::new();
            let mut ended_at = None;
            for (k, e) in w.ev_b.iter().enumerate() {
                match e {
                    DdpEvent::Segment {
                        stream,
                        ddp_ssn,
                        segment: data,
                    } if *stream == s => {
                        assert!(
                            ended_at.is_none(),
                            "seed {seed} stream {s}: segment {ddp_ssn} after the session ended"
                        );
                        assert_eq!(
                            data,
                            &segment(s, *ddp_ssn, max),
                            "seed {seed} stream {s} ssn {ddp_ssn}"
                        );
                        assert!(
                            seen.insert(*ddp_ssn, k).is_none(),
                            "seed {seed} stream {s}: ssn {ddp_ssn} twice"
                        );
                    }
                    DdpEvent::SessionEnded { stream, why, .. } if *stream == s => {
                        assert_eq!(*why, SessionEnd::PeerTerminated, "seed {seed} stream {s}");
                        ended_at = Some(k);
                    }
                    _ => {}
                }
            }
            assert_eq!(
                seen.keys().copied().collect::<Vec<_>>(),
                (1..=N).collect::<Vec<_>>(),
                "seed {seed} stream {s}"
            );
            assert!(ended_at.is_some());
        }
        assert!(!w.ev_a.iter().chain(&w.ev_b).any(|e| matches!(
            e,
            DdpEvent::SessionEnded {
                why: SessionEnd::IllegalSequence(_),
                ..
            }
        )));
        // The link really reordered: some segment arrived before a lower DDP-SSN.
        let st = w.b.as_ref().unwrap().sctp().stats();
        assert!(
            st.out_of_order_data > 0 && st.dup_data_received > 0,
            "seed {seed}: {st:?}"
        );
        early += w.b.as_ref().unwrap().early_terminates();
    }
    // Some Terminate did overtake its segments, and waited for them.
    assert!(early > 0);
}
