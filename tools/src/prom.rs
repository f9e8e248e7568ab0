//! The Prometheus text exposition format (version 0.0.4) of a context's
//! counters ([`iwarp::ContextStats`]) and of its queue pairs'
//! ([`iwarp::QpCounters`]), as `iwarp-serve` serves them on `/metrics`.
//!
//! Every family gets one `# HELP` and one `# TYPE` line; counters end in
//! `_total`. Per-connection families carry the labels `qp` (the queue
//! pair's id) and `peer` (its address).

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use iwarp::{ContextStats, DeviceStats, QpCounters, TcpStats};

/// The content type of the exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One connection's counters, as the server keeps them.
#[derive(Debug, Clone)]
pub struct ConnStats {
    /// The queue pair's id ([`iwarp::Qp::id`]).
    pub qp: usize,
    /// The peer's address.
    pub peer: Ipv4Addr,
    /// Its counters.
    pub counters: QpCounters,
}

/// Counter or gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Escape a label value (`\`, `"` and newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Append one family: `# HELP`, `# TYPE`, then one line per sample
/// (`labels` already formatted as `a="b",c="d"`, or empty).
pub fn family(out: &mut String, name: &str, kind: Kind, help: &str, samples: &[(String, u64)]) {
    debug_assert!(valid_name(name), "{name}");
    let kind = match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
    };
    let _ = writeln!(
        out,
        "# HELP {name} {}",
        help.replace('\\', "\\\\").replace('\n', "\\n")
    );
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

fn one(out: &mut String, name: &str, kind: Kind, help: &str, v: u64) {
    family(out, name, kind, help, &[(String::new(), v)]);
}

/// Unlabelled counters `{prefix}{name}_total`, each helped as `{what}: {name}`.
fn counters(out: &mut String, prefix: &str, what: &str, items: &[(&str, u64)]) {
    for &(k, v) in items {
        one(
            out,
            &format!("{prefix}{k}_total"),
            Kind::Counter,
            &format!("{what}: {k}"),
            v,
        );
    }
}

/// Reads one of a queue pair's counters.
type QpField = fn(&iwarp::QpStats) -> u64;

/// The TCP counters as (suffix, help, value).
fn tcp_fields(t: &TcpStats) -> [(&'static str, &'static str, u64); 16] {
    [
        ("delivered_octets", "Octets delivered in order", t.delivered),
        (
            "rto_retransmits",
            "Segments retransmitted on RTO",
            t.rto_retransmits,
        ),
        ("fast_retransmits", "Fast retransmits", t.fast_retransmits),
        (
            "spurious_rto_undone",
            "Retransmission timeouts found spurious and undone",
            t.spurious_rto_undone,
        ),
        (
            "ooo_segments",
            "Out-of-order segments stored",
            t.ooo_segments,
        ),
        (
            "ooo_dropped",
            "Out-of-order segments dropped (too many ranges)",
            t.ooo_dropped,
        ),
        (
            "sack_skipped",
            "Retransmission runs skipped because the peer SACKed them",
            t.sack_skipped,
        ),
        ("challenge_acks", "Challenge ACKs sent", t.challenge_acks),
        (
            "no_timestamp_drops",
            "Segments dropped for a missing timestamp",
            t.no_timestamp_drops,
        ),
        (
            "persist_aborts",
            "Connections aborted for a window closed too long",
            t.persist_aborts,
        ),
        (
            "sack_recoveries",
            "SACK-based loss recoveries entered",
            t.sack_recoveries,
        ),
        ("rack_losses", "Segments marked lost by RACK", t.rack_losses),
        (
            "lost_retransmits",
            "Retransmissions found lost and sent again",
            t.lost_retransmits,
        ),
        ("tlp_probes", "Tail loss probes sent", t.tlp_probes),
        ("dsacks_received", "D-SACKs received", t.dsacks_received),
        (
            "dsack_undos",
            "Window reductions undone by D-SACK",
            t.dsack_undos,
        ),
    ]
}

/// Render `stats` and the connections' counters in the text format.
pub fn render(stats: &ContextStats, conns: &[ConnStats]) -> String {
    use Kind::{Counter, Gauge};
    let mut out = String::new();
    let s = &stats.stack;
    one(
        &mut out,
        "iwarp_connections",
        Gauge,
        "TCP connections the stack holds (any state)",
        stats.connections as u64,
    );
    one(
        &mut out,
        "iwarp_listeners",
        Gauge,
        "Ports listening",
        stats.listeners as u64,
    );
    one(
        &mut out,
        "iwarp_stack_rx_no_socket_total",
        Counter,
        "Segments for no socket",
        s.rx_no_socket,
    );
    one(
        &mut out,
        "iwarp_stack_rx_backpressure_drops_total",
        Counter,
        "Segments dropped for backpressure",
        s.rx_backpressure_drops,
    );
    one(
        &mut out,
        "iwarp_stack_tx_errors_total",
        Counter,
        "Send errors",
        s.tx_errors,
    );
    for (k, help, v) in tcp_fields(&stats.tcp) {
        one(
            &mut out,
            &format!("iwarp_tcp_{k}_total"),
            Counter,
            &format!("TCP: {help} (all connections, open and ended)"),
            v,
        );
    }
    let i = &stats.iface;
    for (k, help, v) in [
        ("rx_frames", "Frames received", i.rx_frames),
        ("rx_tcp", "TCP segments received", i.rx_tcp),
        (
            "rx_bad_checksum",
            "TCP segments dropped for a bad checksum",
            i.rx_bad_checksum,
        ),
        (
            "rx_partial_checksum",
            "TCP segments with a partial checksum (peer TX offload)",
            i.rx_partial_checksum,
        ),
        ("rx_malformed", "Malformed frames", i.rx_malformed),
        (
            "rx_not_for_us_mac",
            "Frames for another MAC address",
            i.rx_not_for_us_mac,
        ),
        (
            "rx_not_for_us_ip",
            "Packets for another IP address",
            i.rx_not_for_us_ip,
        ),
        ("rx_fragments", "IP fragments dropped", i.rx_fragments),
        (
            "rx_other_protocol",
            "IP packets of another protocol",
            i.rx_other_protocol,
        ),
        (
            "rx_other_ethertype",
            "Frames of another ethertype",
            i.rx_other_ethertype,
        ),
        (
            "icmp_echo_replies",
            "ICMP echo replies sent",
            i.icmp_echo_replies,
        ),
        ("tx_frames", "Frames sent", i.tx_frames),
        ("tx_queued", "Frames queued for an ARP answer", i.tx_queued),
        ("tx_dropped", "Frames dropped before sending", i.tx_dropped),
        ("tx_too_big", "Frames over the MTU", i.tx_too_big),
    ] {
        one(
            &mut out,
            &format!("iwarp_iface_{k}_total"),
            Counter,
            &format!("Interface: {help}"),
            v,
        );
    }
    let l = &stats.poll_loop;
    for (k, help, v) in [
        ("rounds", "Poll loop rounds", l.rounds),
        (
            "rx_frames",
            "Frames the loop took from the device",
            l.rx_frames,
        ),
        ("tx_frames", "Frames the loop gave the device", l.tx_frames),
        ("tx_refused", "Frames the device refused", l.tx_dropped),
        (
            "outputs_dropped",
            "Outputs dropped (application queue full)",
            l.out_dropped,
        ),
        ("sleeps", "Times the loop slept", l.sleeps),
    ] {
        one(
            &mut out,
            &format!("iwarp_loop_{k}_total"),
            Counter,
            &format!("Loop: {help}"),
            v,
        );
    }
    one(
        &mut out,
        "iwarp_loop_pinned",
        Gauge,
        "1 if the poll loop is pinned to a core",
        u64::from(l.pinned),
    );
    match &stats.device {
        DeviceStats::Sim => {
            family(
                &mut out,
                "iwarp_device_info",
                Gauge,
                "The device (kind, and for AF_XDP the bind and attach modes obtained)",
                &[("kind=\"sim\"".into(), 1)],
            );
        }
        DeviceStats::Xdp(x) => {
            let labels = format!(
                "kind=\"af_xdp\",iface=\"{}\",queue=\"{}\",bind=\"{:?}\",attach=\"{:?}\",multi_buffer=\"{}\"",
                escape(&x.iface), x.queue, x.bind, x.attach, x.multi_buffer
            );
            family(
                &mut out,
                "iwarp_device_info",
                Gauge,
                "The device (kind, and for AF_XDP the bind and attach modes obtained)",
                &[(labels, 1)],
            );
            let c = &x.socket;
            counters(
                &mut out,
                "iwarp_xsk_",
                "AF_XDP socket",
                &[
                    ("rx_frames", c.rx_frames),
                    ("rx_multi_buffer", c.rx_multi_buffer),
                    ("rx_wakeups", c.rx_wakeups),
                    ("rx_bad_descs", c.rx_bad_descs),
                    ("tx_frames", c.tx_frames),
                    ("tx_completed", c.tx_completed),
                    ("tx_full", c.tx_full),
                    ("tx_too_big", c.tx_too_big),
                    ("tx_kicks", c.tx_kicks),
                    ("tx_kick_again", c.tx_kick_again),
                    ("tx_kick_errors", c.tx_kick_errors),
                ],
            );
            if let Some(k) = &x.kernel {
                counters(
                    &mut out,
                    "iwarp_xsk_kernel_",
                    "XDP_STATISTICS",
                    &[
                        ("rx_dropped", k.rx_dropped),
                        ("rx_invalid_descs", k.rx_invalid_descs),
                        ("rx_ring_full", k.rx_ring_full),
                        ("rx_fill_ring_empty_descs", k.rx_fill_ring_empty_descs),
                        ("tx_invalid_descs", k.tx_invalid_descs),
                        ("tx_ring_empty_descs", k.tx_ring_empty_descs),
                    ],
                );
            }
        }
        DeviceStats::Dpdk(d) => {
            let labels = format!("kind=\"dpdk\",port=\"{}\"", escape(&d.port));
            family(
                &mut out,
                "iwarp_device_info",
                Gauge,
                "The device (kind, and for AF_XDP the bind and attach modes obtained)",
                &[(labels, 1)],
            );
            let c = &d.counters;
            counters(
                &mut out,
                "iwarp_dpdk_",
                "DPDK port",
                &[
                    ("rx_frames", c.rx_frames),
                    ("rx_dropped", c.rx_dropped),
                    ("tx_frames", c.tx_frames),
                    ("tx_dropped", c.tx_dropped),
                    ("tx_no_mbuf", c.tx_no_mbuf),
                    ("tx_too_big", c.tx_too_big),
                ],
            );
        }
    }
    // Per connection.
    one(
        &mut out,
        "iwarp_qps",
        Gauge,
        "Queue pairs the server holds",
        conns.len() as u64,
    );
    let label = |c: &ConnStats| format!("qp=\"{}\",peer=\"{}\"", c.qp, c.peer);
    let qp_fields: [(&str, &str, QpField); 5] = [
        ("fpdus_tx", "FPDUs sent", |q| q.fpdus_tx),
        ("fpdus_rx", "FPDUs received", |q| q.fpdus_rx),
        (
            "bytes_placed",
            "Octets placed into registered memory",
            |q| q.bytes_placed,
        ),
        ("stream_tx", "Stream octets sent", |q| q.stream_tx),
        ("stream_rx", "Stream octets received", |q| q.stream_rx),
    ];
    for (k, help, get) in qp_fields {
        let samples: Vec<_> = conns
            .iter()
            .map(|c| (label(c), c.counters.qp.as_ref().map_or(0, get)))
            .collect();
        family(
            &mut out,
            &format!("iwarp_qp_{k}_total"),
            Counter,
            &format!("Queue pair: {help}"),
            &samples,
        );
    }
    for (k, help, _) in tcp_fields(&TcpStats::default()) {
        let samples: Vec<_> = conns
            .iter()
            .map(|c| {
                let v = tcp_fields(&c.counters.tcp)
                    .into_iter()
                    .find(|f| f.0 == k)
                    .map_or(0, |f| f.2);
                (label(c), v)
            })
            .collect();
        family(
            &mut out,
            &format!("iwarp_qp_tcp_{k}_total"),
            Counter,
            &format!("Queue pair's TCP: {help}"),
            &samples,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp::{IfaceStats, LoopStats, QpStats, StackStats};

    fn literal() -> (ContextStats, Vec<ConnStats>) {
        let stats = ContextStats {
            stack: StackStats {
                rx_no_socket: 3,
                ..Default::default()
            },
            tcp: TcpStats {
                delivered: 4096,
                rto_retransmits: 2,
                ..Default::default()
            },
            iface: IfaceStats {
                rx_frames: 10,
                ..Default::default()
            },
            connections: 1,
            listeners: 1,
            poll_loop: LoopStats {
                rounds: 77,
                pinned: true,
                ..Default::default()
            },
            device: DeviceStats::Sim,
        };
        let conns = vec![ConnStats {
            qp: 5,
            peer: Ipv4Addr::new(10, 0, 0, 2),
            counters: QpCounters {
                qp: Some(QpStats {
                    fpdus_tx: 7,
                    bytes_placed: 8192,
                    ..Default::default()
                }),
                tcp: TcpStats {
                    delivered: 1000,
                    ..Default::default()
                },
            },
        }];
        (stats, conns)
    }

    #[test]
    fn family_text_is_exact() {
        let mut out = String::new();
        family(
            &mut out,
            "a_total",
            Kind::Counter,
            "help",
            &[(String::new(), 1), ("x=\"y\"".into(), 2)],
        );
        assert_eq!(
            out,
            "# HELP a_total help\n# TYPE a_total counter\na_total 1\na_total{x=\"y\"} 2\n"
        );
    }

    #[test]
    fn render_literal_stats() {
        let (stats, conns) = literal();
        let text = render(&stats, &conns);
        for block in [
            "# HELP iwarp_connections TCP connections the stack holds (any state)\n\
             # TYPE iwarp_connections gauge\n\
             iwarp_connections 1\n",
            "# HELP iwarp_stack_rx_no_socket_total Segments for no socket\n\
             # TYPE iwarp_stack_rx_no_socket_total counter\n\
             iwarp_stack_rx_no_socket_total 3\n",
            "# HELP iwarp_tcp_delivered_octets_total TCP: Octets delivered in order (all connections, open and ended)\n\
             # TYPE iwarp_tcp_delivered_octets_total counter\n\
             iwarp_tcp_delivered_octets_total 4096\n",
            "iwarp_tcp_rto_retransmits_total 2\n",
            "iwarp_iface_rx_frames_total 10\n",
            "iwarp_loop_rounds_total 77\n",
            "iwarp_loop_pinned 1\n",
            "# TYPE iwarp_device_info gauge\niwarp_device_info{kind=\"sim\"} 1\n",
            "iwarp_qps 1\n",
            "# HELP iwarp_qp_fpdus_tx_total Queue pair: FPDUs sent\n\
             # TYPE iwarp_qp_fpdus_tx_total counter\n\
             iwarp_qp_fpdus_tx_total{qp=\"5\",peer=\"10.0.0.2\"} 7\n",
            "iwarp_qp_bytes_placed_total{qp=\"5\",peer=\"10.0.0.2\"} 8192\n",
            "iwarp_qp_fpdus_rx_total{qp=\"5\",peer=\"10.0.0.2\"} 0\n",
            "iwarp_qp_tcp_delivered_octets_total{qp=\"5\",peer=\"10.0.0.2\"} 1000\n",
        ] {
            assert!(text.contains(block), "missing:\n{block}\nin:\n{text}");
        }
        // Every line is a HELP, a TYPE or a sample of a valid name; every
        // family has one HELP and one TYPE, before its samples.
        let mut helped = std::collections::HashSet::new();
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or("");
                assert!(valid_name(name), "{line}");
                assert!(helped.insert(name.to_owned()), "two HELP: {line}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap_or(("", ""));
                assert!(helped.contains(name), "TYPE before HELP: {line}");
                assert!(kind == "counter" || kind == "gauge", "{line}");
                assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
                assert!(typed.insert(name.to_owned()), "two TYPE: {line}");
            } else {
                let name = line.split(['{', ' ']).next().unwrap_or("");
                assert!(typed.contains(name), "sample before its TYPE: {line}");
                let value = line.rsplit(' ').next().unwrap_or("");
                assert!(value.parse::<u64>().is_ok(), "{line}");
            }
        }
        assert_eq!(helped.len(), typed.len());
    }

    #[test]
    fn name_check_rejects_bad_names() {
        for good in ["a", "_a:b1", "iwarp_qp_fpdus_tx_total"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "1a", "a-b", "a b", "é"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
