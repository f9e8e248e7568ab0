//! perftest mode between two of our stacks over the simulated link: every
//! tool, both sides run the perftest protocol (`bench/src/perftest.rs`),
//! the server prints what the client measured (bandwidth reports travel in
//! the comm channel), and `-a` walks all 23 sizes. The same code runs
//! against rdma-core's perftest over siw in `perftest_siw.rs`.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_bench::perftest::{self, Kind, Options};

fn pair(kind: Kind, edit: impl Fn(&mut Options)) -> (perftest::Outcome, perftest::Outcome) {
    pair_with(iwarp::Polling::Adaptive, kind, edit)
}

fn pair_with(
    polling: iwarp::Polling,
    kind: Kind,
    edit: impl Fn(&mut Options),
) -> (perftest::Outcome, perftest::Outcome) {
    let (s, c) = iwarp::Context::sim_pair_with(polling, None);
    let mut so = Options::new(kind);
    edit(&mut so);
    so.port = 18515;
    let mut co = so.clone();
    co.server = Some(s.addr());
    let server = std::thread::spawn(move || perftest::run(&s, &so));
    let client = perftest::run(&c, &co);
    let server = server.join().unwrap();
    match (server, client) {
        (Ok(s), Ok(c)) => (s, c),
        (s, c) => panic!("{kind:?}: server {:?}\nclient {:?}", s.err(), c.err()),
    }
}

/// On contexts with loop threads, and inline (how perftest mode runs by
/// default: each side's thread drives its own stack; `--busy` spins on
/// the CQ, else it waits).
#[test]
fn every_tool_between_two_of_ours() {
    every_tool(iwarp::Polling::Adaptive, false);
}

#[test]
fn every_tool_between_two_of_ours_inline() {
    every_tool(iwarp::Polling::Inline, false);
    every_tool(iwarp::Polling::Inline, true);
}

fn every_tool(polling: iwarp::Polling, busy: bool) {
    let pair = |kind, edit: &dyn Fn(&mut Options)| {
        pair_with(polling, kind, |o| {
            o.busy = busy;
            edit(o)
        })
    };
    for kind in [Kind::WriteLat, Kind::ReadLat, Kind::SendLat] {
        let (s, c) = pair(kind, &|o| {
            o.size = 64;
            o.iters = 50;
        });
        assert_eq!(c.lat.len(), 1, "{kind:?}");
        assert_eq!((c.lat[0].bytes, c.lat[0].iters), (64, 50), "{kind:?}");
        assert!(c.lat[0].t_min > 0.0 && c.lat[0].t_min <= c.lat[0].t_max);
        // The read_lat server runs no verbs and prints nothing (as perftest).
        assert_eq!(s.lat.len(), usize::from(kind != Kind::ReadLat), "{kind:?}");
        assert_eq!(s.peer_version, perftest::VERSION);
        // Each side learned the other's buffer.
        assert_eq!(c.remote, s.local, "{kind:?}");
        assert_eq!(s.remote, c.local, "{kind:?}");
    }
    for kind in [Kind::WriteBw, Kind::ReadBw, Kind::SendBw] {
        let (s, c) = pair(kind, &|o| {
            o.size = 65536;
            o.iters = 40;
            // send_bw: fewer receives than Sends, so credits must flow.
            o.rx_depth = 8;
        });
        assert_eq!(c.bw.len(), 1, "{kind:?}");
        assert_eq!((c.bw[0].size, c.bw[0].iters), (65536, 40), "{kind:?}");
        assert!(c.bw[0].bw_avg > 0.0 && c.bw[0].bw_peak >= c.bw[0].bw_avg * 0.999);
        if kind == Kind::SendBw {
            // The receiver reports its own receive rate.
            assert_eq!(s.bw[0].iters, 40);
        } else {
            // The server prints the client's report, as perftest does.
            assert_eq!(s.bw, c.bw, "{kind:?}");
        }
        if kind == Kind::ReadBw {
            assert_eq!(c.ird_ord, (128, 128));
        } else {
            assert_eq!(c.ird_ord, (0, 0), "{kind:?}");
        }
    }
}

#[test]
fn perftest_mode_all_sizes_over_sim() {
    let all: Vec<u32> = (1..=23).map(|i| 1u32 << i).collect();
    let (s, c) = pair(Kind::WriteLat, |o| {
        o.all = true;
        o.iters = 5;
    });
    let sizes = |o: &perftest::Outcome| o.lat.iter().map(|r| r.bytes).collect::<Vec<_>>();
    assert_eq!(sizes(&c), all);
    assert_eq!(sizes(&s), all);
    let (s, c) = pair(Kind::ReadBw, |o| {
        o.all = true;
        o.iters = 5;
    });
    assert_eq!(c.bw.iter().map(|r| r.size as u32).collect::<Vec<_>>(), all);
    // perftest's bandwidth server prints only the last size's report.
    assert_eq!(s.bw, vec![*c.bw.last().unwrap()]);
}
