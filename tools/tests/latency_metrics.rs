//! The latency histograms of `/metrics`, end to end: two contexts on the
//! simulated link, Writes and Reads from the client, each context's
//! counters rendered as `iwarp-serve` renders them and read back with a
//! Prometheus parser. Each histogram's count is the number of completions
//! (or connections) it saw, its sum above zero.
//!
//! `serve_metrics` checks that a scrape of `iwarp-serve` holds these
//! families; here the counted values are checked.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, ListenOptions, Status, WcOpcode, WcStatus,
    WorkRequest,
};
use iwarp_tools::prom::{self, Format, ServeMetrics, Snapshot};
use openmetrics_parser::{PrometheusType, PrometheusValue};

const T: Duration = Duration::from_secs(10);
const WRITES: u64 = 20;
const READS: u64 = 7;

/// `ctx`'s exposition, parsed: for each sample of `family`, the value of
/// its `label` and its count and sum.
fn histograms(ctx: &Context, family: &str, label: &str) -> Vec<(String, u64, f64)> {
    let snap = Snapshot {
        stats: ctx.stats().unwrap(),
        conns: Vec::new(),
        sctp: None,
    };
    let text = prom::render(snap, &ServeMetrics::default(), Format::Text);
    let parsed = openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
    let f = parsed
        .families
        .get(family)
        .unwrap_or_else(|| panic!("no {family} in:\n{text}"));
    assert_eq!(f.family_type, PrometheusType::Histogram, "{family}");
    let mut out: Vec<_> = f
        .iter_samples()
        .map(|s| {
            let labels = s.get_labelset().unwrap();
            let (_, v) = labels.iter().find(|(k, _)| *k == label).unwrap();
            let PrometheusValue::Histogram(h) = &s.value else {
                panic!("{family}: not a histogram sample");
            };
            // The buckets are cumulative and end with +Inf, which holds
            // every sample.
            let last = h.buckets.last().unwrap();
            assert_eq!(last.upper_bound, f64::INFINITY);
            assert_eq!(last.count.as_f64() as u64, h.count.unwrap());
            let smallest = h.buckets.first().unwrap().upper_bound;
            assert!((smallest - 1e-6).abs() < 1e-12, "first bound {smallest}");
            (
                v.clone(),
                h.count.unwrap(),
                h.sum.as_ref().unwrap().as_f64(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn completion_latency_and_setup_time_histograms_count_what_happened() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let target = spd
        .register(vec![5; 1 << 16], Access::REMOTE_READ | Access::REMOTE_WRITE)
        .unwrap();
    // Writes of 64 KiB: above the size copied into TCP's buffer (and
    // completed in the round that took the post, which the loop's one
    // clock reading per round counts as 0 s), so each waits for its ACK.
    let src = cpd.register(vec![7; 1 << 16], Access::LOCAL_READ).unwrap();
    let sink = cpd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let listener = server.listen(9200, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9200);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    let _server_qp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let qp = t.join().unwrap().unwrap();

    for i in 0..WRITES + READS {
        let wr = if i < WRITES {
            WorkRequest::Write {
                wr_id: i,
                signaled: true,
                local: src.sge(0, 1 << 16).into(),
                remote_stag: target.stag(),
                remote_to: 0,
            }
        } else {
            WorkRequest::Read {
                wr_id: i,
                signaled: true,
                local: sink.sge(0, 4096).into(),
                remote_stag: target.stag(),
                remote_to: 4096,
            }
        };
        qp.post_send(wr).unwrap();
        let wc = ccq.wait(T).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, Status::Wc(WcStatus::Success)));
        let op = if i < WRITES {
            WcOpcode::Write
        } else {
            WcOpcode::Read
        };
        assert_eq!(wc.opcode, Some(op));
    }

    let lat = histograms(&client, "iwarp_completion_latency_seconds", "opcode");
    let counts: Vec<_> = lat.iter().map(|(op, n, _)| (op.as_str(), *n)).collect();
    assert_eq!(counts, [("read", READS), ("send", 0), ("write", WRITES)]);
    for (op, n, sum) in &lat {
        assert_eq!(*n > 0, *sum > 0.0, "{op}: {n} samples, sum {sum} s");
        // Each took less than the wait above allows.
        assert!(*sum <= (*n as f64) * T.as_secs_f64(), "{op}: sum {sum} s");
    }
    // The target posted nothing.
    let lat = histograms(&server, "iwarp_completion_latency_seconds", "opcode");
    assert!(lat.iter().all(|(_, n, _)| *n == 0), "{lat:?}");

    let setup = |ctx| histograms(ctx, "iwarp_connection_setup_duration_seconds", "role");
    let (c, s) = (setup(&client), setup(&server));
    assert_eq!(c[0].0, "active");
    assert_eq!((c[0].1, c[1].1), (1, 0), "client: {c:?}");
    assert_eq!((s[0].1, s[1].1), (0, 1), "server: {s:?}");
    assert!(c[0].2 > 0.0 && s[1].2 > 0.0, "{c:?} {s:?}");
}
