//! The metrics `iwarp-serve` serves on `/metrics`, through the
//! `prometheus-client` crate: a context's counters ([`iwarp::ContextStats`]),
//! among them the stack's latency histograms (send-queue completions by
//! opcode, connection setup by role; [`iwarp_datapath::latency`]),
//! and its queue pairs' ([`iwarp::QpCounters`]), the SCTP part's
//! (`iwarp_sctp_*`, once the context has one: [`iwarp::SctpCounters`]),
//! what the server itself
//! observes ([`ServeMetrics`]: accept times, scrape times, the HTTP
//! endpoint's connections), `iwarp_build_info` and the `process_*`
//! metrics (read from `/proc/self`).
//!
//! Names follow the Prometheus conventions: a unit is a suffix in its base
//! unit (`_bytes`, `_seconds`), counters end in `_total`, a `_info` metric
//! carries its facts as labels and the value 1. Per-connection families
//! carry the labels `qp` (the queue pair's id) and `peer` (its address).
//!
//! [`render`] writes either text format: the Prometheus one (0.0.4) or
//! OpenMetrics 1.0, as the scraper's `Accept` header asks ([`Format`]).
//! The context's counters are read at each scrape into a [`Snapshot`],
//! a [`Collector`] of a registry built for that scrape; nothing on the
//! stack's fast path keeps a Prometheus counter.

use std::net::Ipv4Addr;

use iwarp::{ContextStats, DeviceStats, QpCounters, SctpCounters, TcpStats};
use iwarp_datapath::latency::{Histogram as Latency, BOUNDS_NS};
use iwarp_xdp::{AttachMode, XskMode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The exposition format of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4 (`text/plain`).
    Text,
    /// OpenMetrics 1.0 text (`application/openmetrics-text`).
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics if it names
    /// `application/openmetrics-text` (as Prometheus does), else the
    /// Prometheus text format (curl, browsers, older scrapers).
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

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

/// The counters of one scrape: the context's and each connection's.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The context's counters.
    pub stats: ContextStats,
    /// The connections'.
    pub conns: Vec<ConnStats>,
    /// The SCTP part's (`None` until an SCTP listen or connect made one:
    /// [`iwarp::Context::sctp_stats`]).
    pub sctp: Option<SctpCounters>,
}

/// What `iwarp-serve` observes itself, kept across scrapes (the handles
/// are shared: clones count into the same metric).
#[derive(Debug, Clone)]
pub struct ServeMetrics {
    /// Seconds from a connection request (the peer's MPA Request, as
    /// `Listener::get_request` hands it over) to the queue pair
    /// established (`ConnectRequest::accept` returned).
    pub accept_seconds: Histogram,
    /// Connection requests accepting failed for.
    pub accept_failures: Counter,
    /// Seconds a scrape took to read the counters (round trips to the
    /// stack's loop thread) and encode them.
    pub scrape_seconds: Histogram,
    /// The HTTP endpoint's connections open now.
    pub http_open: Gauge,
    /// HTTP connections closed at once because the cap was reached.
    pub http_refused: Counter,
    /// HTTP connections closed by the request deadline.
    pub http_timeouts: Counter,
}

impl Default for ServeMetrics {
    fn default() -> Self {
        // 100 µs to 10 s (an accept gives up after 15 s).
        let seconds = [
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0,
        ];
        ServeMetrics {
            accept_seconds: Histogram::new(seconds),
            accept_failures: Counter::default(),
            scrape_seconds: Histogram::new(seconds),
            http_open: Gauge::default(),
            http_refused: Counter::default(),
            http_timeouts: Counter::default(),
        }
    }
}

impl ServeMetrics {
    /// Register clones of the handles (as `iwarp_serve_*` under an
    /// `iwarp` registry).
    fn register(&self, r: &mut Registry) {
        r.register_with_unit(
            "accept_duration",
            "Time from a connection request (the peer's MPA Request) to its queue pair established, as iwarp-serve measures around accept",
            Unit::Seconds,
            self.accept_seconds.clone(),
        );
        r.register(
            "accept_failures",
            "Connection requests that accepting failed for",
            self.accept_failures.clone(),
        );
        r.register_with_unit(
            "scrape_duration",
            "Time a scrape took to read the counters from the stack and encode them",
            Unit::Seconds,
            self.scrape_seconds.clone(),
        );
        r.register(
            "http_connections",
            "Connections open to the metrics endpoint",
            self.http_open.clone(),
        );
        r.register(
            "http_refused",
            "Metrics endpoint connections refused (connection cap reached)",
            self.http_refused.clone(),
        );
        r.register(
            "http_timeouts",
            "Metrics endpoint connections closed by the request deadline",
            self.http_timeouts.clone(),
        );
    }
}

/// The exposition of `snap`, `serve` and the process in `format`.
pub fn render(snap: Snapshot, serve: &ServeMetrics, format: Format) -> String {
    let mut root = Registry::default();
    root.register_collector(Box::new(Process));
    let iwarp = root.sub_registry_with_prefix("iwarp");
    iwarp.register(
        "build",
        "Build of iwarp-serve (version; revision if IWARP_GIT_REVISION was set at build time)",
        Info::new(vec![
            ("version", env!("CARGO_PKG_VERSION")),
            (
                "revision",
                option_env!("IWARP_GIT_REVISION").unwrap_or("unknown"),
            ),
        ]),
    );
    iwarp.register_collector(Box::new(snap));
    serve.register(iwarp.sub_registry_with_prefix("serve"));
    let mut out = String::new();
    let r = match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &root),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &root),
    };
    // Writing into a String fails only on a bug in an encoder.
    debug_assert!(r.is_ok(), "{r:?}");
    out
}

/// The label value of a bind mode.
pub fn bind_label(m: XskMode) -> &'static str {
    match m {
        XskMode::Auto => "auto",
        XskMode::Copy => "copy",
        XskMode::ZeroCopy => "zero_copy",
    }
}

/// The label value of an attach mode.
pub fn attach_label(m: AttachMode) -> &'static str {
    match m {
        AttachMode::Auto => "auto",
        AttachMode::Skb => "skb",
        AttachMode::Driver => "driver",
    }
}

type Fmt = Result<(), std::fmt::Error>;

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<Unit>, v: u64) -> Fmt {
    ConstCounter::new(v).encode(e.encode_descriptor(
        name,
        help,
        unit.as_ref(),
        MetricType::Counter,
    )?)
}

fn gauge<V>(e: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<Unit>, v: V) -> Fmt
where
    V: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug + Send + Sync + 'static,
{
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?)
}

fn info(e: &mut DescriptorEncoder, name: &str, help: &str, labels: &[(&str, String)]) -> Fmt {
    e.encode_descriptor(name, help, None, MetricType::Info)?
        .encode_info(&labels)
}

/// Unlabelled counters `{prefix}{name}`, each helped as `{what}: {name}`.
fn counters(e: &mut DescriptorEncoder, prefix: &str, what: &str, items: &[(&str, u64)]) -> Fmt {
    for &(k, v) in items {
        counter(e, &format!("{prefix}{k}"), &format!("{what}: {k}"), None, v)?;
    }
    Ok(())
}

/// The TCP counters as (name, unit, help, value).
fn tcp_fields(t: &TcpStats) -> [(&'static str, Option<Unit>, &'static str, u64); 16] {
    let n = None;
    [
        (
            "delivered",
            Some(Unit::Bytes),
            "Bytes delivered in order",
            t.delivered,
        ),
        (
            "rto_retransmits",
            n.clone(),
            "Segments retransmitted on RTO",
            t.rto_retransmits,
        ),
        (
            "fast_retransmits",
            n.clone(),
            "Fast retransmits",
            t.fast_retransmits,
        ),
        (
            "spurious_rto_undone",
            n.clone(),
            "Retransmission timeouts found spurious and undone",
            t.spurious_rto_undone,
        ),
        (
            "ooo_segments",
            n.clone(),
            "Out-of-order segments stored",
            t.ooo_segments,
        ),
        (
            "ooo_dropped",
            n.clone(),
            "Out-of-order segments dropped (too many ranges)",
            t.ooo_dropped,
        ),
        (
            "sack_skipped",
            n.clone(),
            "Retransmission runs skipped because the peer SACKed them",
            t.sack_skipped,
        ),
        (
            "challenge_acks",
            n.clone(),
            "Challenge ACKs sent",
            t.challenge_acks,
        ),
        (
            "no_timestamp_drops",
            n.clone(),
            "Segments dropped for a missing timestamp",
            t.no_timestamp_drops,
        ),
        (
            "persist_aborts",
            n.clone(),
            "Connections aborted for a window closed too long",
            t.persist_aborts,
        ),
        (
            "sack_recoveries",
            n.clone(),
            "SACK-based loss recoveries entered",
            t.sack_recoveries,
        ),
        (
            "rack_losses",
            n.clone(),
            "Segments marked lost by RACK",
            t.rack_losses,
        ),
        (
            "lost_retransmits",
            n.clone(),
            "Retransmissions found lost and sent again",
            t.lost_retransmits,
        ),
        (
            "tlp_probes",
            n.clone(),
            "Tail loss probes sent",
            t.tlp_probes,
        ),
        (
            "dsacks_received",
            n.clone(),
            "D-SACKs received",
            t.dsacks_received,
        ),
        (
            "dsack_undos",
            n,
            "Window reductions undone by D-SACK",
            t.dsack_undos,
        ),
    ]
}

/// The SCTP part's families (`iwarp_sctp_*`): counters over its life
/// (those of associations that have closed included), and gauges of what
/// its live connections and associations hold and have done.
fn sctp(e: &mut DescriptorEncoder, c: &SctpCounters) -> Fmt {
    let (h, a) = (&c.host, &c.assoc);
    for (k, help, v) in [
        (
            "rx_packets",
            "SCTP packets handed to an association or listener",
            h.rx_packets,
        ),
        ("tx_packets", "SCTP packets sent", h.tx_packets),
        (
            "rx_udp",
            "SCTP packets received inside UDP (RFC 6951)",
            h.rx_udp,
        ),
        ("tx_udp", "SCTP packets sent inside UDP (RFC 6951)", h.tx_udp),
        (
            "ootb_replies",
            "Out-of-the-blue answers sent (RFC 9260 section 8.4)",
            h.ootb_replies,
        ),
        (
            "ootb_limited",
            "Out-of-the-blue packets left unanswered by the rate limit",
            h.ootb_limited,
        ),
        (
            "arp_drops",
            "SCTP packets dropped for want of a route or ARP resolution",
            h.arp_drops,
        ),
        (
            "retransmits",
            "DATA chunks retransmitted (T3 or fast retransmit), live and closed associations",
            a.retransmits + h.closed_retransmits,
        ),
        (
            "packets_discarded",
            "Received packets discarded (checksum, malformed, wrong tag or ports), live and closed associations",
            a.packets_discarded + h.closed_discarded,
        ),
        (
            "early_segments",
            "DDP Segments that overtook their Session Accept and were held until it came",
            c.early_segments,
        ),
    ] {
        counter(e, &format!("sctp_{k}"), &format!("SCTP: {help}"), None, v)?;
    }
    gauge(
        e,
        "sctp_connections",
        "SCTP: iWARP connections over SCTP (any phase)",
        None,
        c.connections as u64,
    )?;
    for (k, help, v) in [
        (
            "data_chunks_sent",
            "DATA chunks sent for the first time",
            a.data_chunks_sent,
        ),
        (
            "fast_retransmits",
            "Times fast retransmit marked chunks",
            a.fast_retransmits,
        ),
        ("t3_expiries", "T3-rtx expiries", a.t3_expiries),
        (
            "dup_data_received",
            "Duplicate DATA chunks received",
            a.dup_data_received,
        ),
        (
            "heartbeats_sent",
            "HEARTBEATs sent",
            a.heartbeats_sent,
        ),
        (
            "data_in_place",
            "DATA chunks placed from the packet (no copy into the association)",
            a.data_in_place,
        ),
        (
            "segments_by_reference",
            "DDP Segments given to SCTP by reference (written into each packet from registered memory)",
            c.segments_by_reference,
        ),
    ] {
        gauge(
            e,
            &format!("sctp_live_{k}"),
            &format!("SCTP: {help}, summed over the live associations (leaves the sum when one closes)"),
            None,
            v,
        )?;
    }
    gauge(
        e,
        "sctp_qp_held",
        "SCTP: Octets the queue pairs hold out of DDP-SSN order, summed",
        Some(Unit::Bytes),
        c.qp_held_octets as u64,
    )?;
    gauge(
        e,
        "sctp_qp_held_max_conn",
        "SCTP: Octets out of DDP-SSN order held by the queue pair holding the most",
        Some(Unit::Bytes),
        c.qp_held_max as u64,
    )
}

/// One latency histogram (nanoseconds in, seconds out), its buckets and
/// their bounds as the stack counted them.
fn latency(mut m: MetricEncoder, h: &Latency) -> Fmt {
    let mut buckets = [(0.0, 0); BOUNDS_NS.len() + 1];
    for (slot, (bound, n)) in buckets.iter_mut().zip(h.buckets()) {
        *slot = (bound.map_or(f64::INFINITY, |ns| ns as f64 / 1e9), n);
    }
    m.encode_histogram::<NoLabelSet>(h.sum_ns() as f64 / 1e9, h.count(), &buckets, None)
}

/// Reads one of a queue pair's counters.
type QpField = fn(&iwarp::QpStats) -> u64;

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> Fmt {
        let (stats, conns) = (&self.stats, &self.conns);
        let e = &mut e;
        gauge(
            e,
            "connections",
            "Connections the stack holds, over TCP (any state) and SCTP (any phase)",
            None,
            stats.connections as u64,
        )?;
        gauge(
            e,
            "listeners",
            "Ports listening",
            None,
            stats.listeners as u64,
        )?;
        let s = &stats.stack;
        let c = &s.completion_latency;
        let mut m = e.encode_descriptor(
            "completion_latency",
            "Time from the post of a send-queue work request (the round of the poll loop that took it) to its successful completion (the round that produced it), by opcode; receives are not counted",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (op, h) in [("send", &c.send), ("write", &c.write), ("read", &c.read)] {
            latency(m.encode_family(&[("opcode", op)])?, h)?;
        }
        let mut m = e.encode_descriptor(
            "connection_setup_duration",
            "Time to full operation (MPA exchange, or DDP Stream Session Initiate and Accept, done) of connections over TCP and SCTP: active from the connect, passive from the TCP or SCTP handshake done",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (role, h) in [("active", &s.setup_active), ("passive", &s.setup_passive)] {
            latency(m.encode_family(&[("role", role)])?, h)?;
        }
        for (k, help, v) in [
            ("rx_no_socket", "Segments for no socket", s.rx_no_socket),
            (
                "rx_backpressure_drops",
                "Segments dropped for backpressure",
                s.rx_backpressure_drops,
            ),
            ("tx_errors", "Send errors", s.tx_errors),
            (
                "budget_aborts",
                "Connections aborted for the memory budget",
                s.budget_aborts,
            ),
            (
                "idle_rounds",
                "Rounds left out: nothing came in, nothing ready or due",
                s.idle_rounds,
            ),
        ] {
            counter(e, &format!("stack_{k}"), help, None, v)?;
        }
        gauge(
            e,
            "stack_held",
            "Octets held for peers (out-of-order data, reassembly, early data), all connections",
            Some(Unit::Bytes),
            s.held_octets,
        )?;
        gauge(
            e,
            "stack_held_max_conn",
            "Octets held for its peer by the connection holding the most",
            Some(Unit::Bytes),
            s.held_max_conn,
        )?;
        for (k, unit, help, v) in tcp_fields(&stats.tcp) {
            counter(
                e,
                &format!("tcp_{k}"),
                &format!("TCP: {help} (all connections, open and ended)"),
                unit,
                v,
            )?;
        }
        let i = &stats.iface;
        for (k, help, v) in [
            ("rx_frames", "Frames received", i.rx_frames),
            ("rx_tcp", "TCP segments received", i.rx_tcp),
            (
                "rx_sctp",
                "SCTP packets received, raw or inside UDP",
                i.rx_sctp,
            ),
            (
                "rx_udp_bad_checksum",
                "UDP datagrams dropped for a bad checksum",
                i.rx_udp_bad_checksum,
            ),
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
            counter(
                e,
                &format!("iface_{k}"),
                &format!("Interface: {help}"),
                None,
                v,
            )?;
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
            (
                "yields",
                "Idle rounds after which a busy loop yielded the CPU it shares with the application",
                l.yields,
            ),
            (
                "steered_out",
                "Frames passed to the loop that owns their connection (software steering)",
                l.steered_out,
            ),
            (
                "steered_in",
                "Frames another loop passed to this one (software steering)",
                l.steered_in,
            ),
            (
                "steer_dropped",
                "Frames dropped for a full inbox of the loop that owns them (software steering)",
                l.steer_dropped,
            ),
        ] {
            counter(e, &format!("loop_{k}"), &format!("Loop: {help}"), None, v)?;
        }
        gauge(
            e,
            "loop_pinned",
            "1 if the poll loop is pinned to a core",
            None,
            u64::from(l.pinned),
        )?;
        if let Some(c) = &self.sctp {
            sctp(e, c)?;
        }
        let device_help = "The device (kind, and for AF_XDP the bind and attach modes obtained)";
        match &stats.device {
            DeviceStats::Sim => info(e, "device", device_help, &[("kind", "sim".into())])?,
            DeviceStats::Other => info(e, "device", device_help, &[("kind", "other".into())])?,
            DeviceStats::Xdp(x) => {
                info(
                    e,
                    "device",
                    device_help,
                    &[
                        ("kind", "af_xdp".into()),
                        ("iface", x.iface.clone()),
                        ("queue", x.queue.to_string()),
                        ("bind", bind_label(x.bind).into()),
                        ("attach", attach_label(x.attach).into()),
                        ("multi_buffer", x.multi_buffer.to_string()),
                    ],
                )?;
                let c = &x.socket;
                counters(
                    e,
                    "xsk_",
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
                )?;
                if let Some(k) = &x.kernel {
                    counters(
                        e,
                        "xsk_kernel_",
                        "XDP_STATISTICS",
                        &[
                            ("rx_dropped", k.rx_dropped),
                            ("rx_invalid_descs", k.rx_invalid_descs),
                            ("rx_ring_full", k.rx_ring_full),
                            ("rx_fill_ring_empty_descs", k.rx_fill_ring_empty_descs),
                            ("tx_invalid_descs", k.tx_invalid_descs),
                            ("tx_ring_empty_descs", k.tx_ring_empty_descs),
                        ],
                    )?;
                }
            }
            DeviceStats::Dpdk(d) => {
                info(
                    e,
                    "device",
                    device_help,
                    &[("kind", "dpdk".into()), ("port", d.port.clone())],
                )?;
                let c = &d.counters;
                counters(
                    e,
                    "dpdk_",
                    "DPDK port",
                    &[
                        ("rx_frames", c.rx_frames),
                        ("rx_dropped", c.rx_dropped),
                        ("tx_frames", c.tx_frames),
                        ("tx_dropped", c.tx_dropped),
                        ("tx_no_mbuf", c.tx_no_mbuf),
                        ("tx_too_big", c.tx_too_big),
                    ],
                )?;
            }
            DeviceStats::Memif(m) => {
                info(
                    e,
                    "device",
                    device_help,
                    &[
                        ("kind", "memif".into()),
                        (
                            "role",
                            match m.role {
                                iwarp::memif::Role::Server => "server",
                                iwarp::memif::Role::Client => "client",
                            }
                            .into(),
                        ),
                        ("peer", m.peer.clone()),
                        ("ring", m.ring_size.to_string()),
                    ],
                )?;
                let c = &m.counters;
                counters(
                    e,
                    "memif_",
                    "memif link",
                    &[
                        ("rx_frames", c.rx_frames),
                        ("rx_chained", c.rx_chained),
                        ("rx_bad_desc", c.rx_bad_desc),
                        ("rx_too_long", c.rx_too_long),
                        ("tx_frames", c.tx_frames),
                        ("tx_chained", c.tx_chained),
                        ("tx_refused", c.tx_refused),
                        ("kicks", c.kicks),
                    ],
                )?;
                gauge(
                    e,
                    "memif_broken",
                    "1 if the memif link broke (a peer that left, a corrupt ring)",
                    None,
                    u64::from(m.broken.is_some()),
                )?;
            }
            // A device kind this exporter does not know yet: no device metrics.
            _ => {}
        }
        // Per connection.
        gauge(
            e,
            "qps",
            "Queue pairs the server holds",
            None,
            conns.len() as u64,
        )?;
        let labels = |c: &ConnStats| [("qp", c.qp.to_string()), ("peer", c.peer.to_string())];
        let qp_fields: [(&str, Option<Unit>, &str, QpField); 5] = [
            ("fpdus_tx", None, "FPDUs sent", |q| q.fpdus_tx),
            ("fpdus_rx", None, "FPDUs received", |q| q.fpdus_rx),
            (
                "placed",
                Some(Unit::Bytes),
                "Payload bytes placed into registered memory",
                |q| q.bytes_placed,
            ),
            ("stream_tx", Some(Unit::Bytes), "Stream bytes sent", |q| {
                q.stream_tx
            }),
            (
                "stream_rx",
                Some(Unit::Bytes),
                "Stream bytes received",
                |q| q.stream_rx,
            ),
        ];
        for (k, unit, help, get) in qp_fields {
            let name = format!("qp_{k}");
            let help = format!("Queue pair: {help}");
            let mut m = e.encode_descriptor(&name, &help, unit.as_ref(), MetricType::Counter)?;
            for c in conns {
                let v = c.counters.qp.as_ref().map_or(0, get);
                ConstCounter::new(v).encode(m.encode_family(&labels(c))?)?;
            }
        }
        for (i, (k, unit, help, _)) in tcp_fields(&TcpStats::default()).into_iter().enumerate() {
            let name = format!("qp_tcp_{k}");
            let help = format!("Queue pair's TCP: {help}");
            let mut m = e.encode_descriptor(&name, &help, unit.as_ref(), MetricType::Counter)?;
            for c in conns {
                let v = tcp_fields(&c.counters.tcp)[i].3;
                ConstCounter::new(v).encode(m.encode_family(&labels(c))?)?;
            }
        }
        Ok(())
    }
}

/// The `process_*` metrics of the running process, read from `/proc/self`
/// at each scrape (as the Go and Python clients name them); one that
/// cannot be read is left out.
#[derive(Debug, Clone, Copy)]
pub struct Process;

/// `/proc/self/stat`'s fields from the third (state) on.
fn proc_stat() -> Option<Vec<String>> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn boot_time() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn max_fds() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/limits").ok()?;
    let l = s.lines().find(|l| l.starts_with("Max open files"))?;
    l.split_whitespace().nth(3)?.parse().ok()
}

impl Collector for Process {
    fn encode(&self, mut e: DescriptorEncoder) -> Fmt {
        let e = &mut e;
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as u64;
        let field = |f: &[String], n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        if let Some(f) = proc_stat() {
            if let (Some(user), Some(sys)) = (field(&f, 14), field(&f, 15)) {
                let cpu = (user + sys) as f64 / ticks;
                ConstCounter::new(cpu).encode(e.encode_descriptor(
                    "process_cpu",
                    "Total user and system CPU time spent in seconds",
                    Some(&Unit::Seconds),
                    MetricType::Counter,
                )?)?;
            }
            if let (Some(start), Some(btime)) = (field(&f, 22), boot_time()) {
                let t = btime as f64 + start as f64 / ticks;
                gauge(
                    e,
                    "process_start_time",
                    "Start time of the process since unix epoch in seconds",
                    Some(Unit::Seconds),
                    t,
                )?;
            }
        }
        if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
            let mut it = statm.split_whitespace().map(|v| v.parse::<u64>().ok());
            if let (Some(Some(vm)), Some(Some(rss))) = (it.next(), it.next()) {
                gauge(
                    e,
                    "process_virtual_memory",
                    "Virtual memory size in bytes",
                    Some(Unit::Bytes),
                    vm * page,
                )?;
                gauge(
                    e,
                    "process_resident_memory",
                    "Resident memory size in bytes",
                    Some(Unit::Bytes),
                    rss * page,
                )?;
            }
        }
        if let Ok(d) = std::fs::read_dir("/proc/self/fd") {
            gauge(
                e,
                "process_open_fds",
                "Number of open file descriptors",
                None,
                d.count() as u64,
            )?;
        }
        if let Some(m) = max_fds() {
            gauge(
                e,
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                m,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp::{IfaceStats, LoopStats, QpStats, StackStats};

    fn literal() -> Snapshot {
        let stats = ContextStats {
            stack: StackStats {
                rx_no_socket: 3,
                held_octets: 65536,
                budget_aborts: 2,
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
            loops: Vec::new(),
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
        Snapshot {
            stats,
            conns,
            sctp: None,
        }
    }

    #[test]
    fn render_literal_stats_as_text() {
        let serve = ServeMetrics::default();
        serve.accept_seconds.observe(0.003);
        let text = render(literal(), &serve, Format::Text);
        for block in [
            "# HELP iwarp_connections Connections the stack holds, over TCP (any state) and SCTP (any phase)\n\
             # TYPE iwarp_connections gauge\n\
             iwarp_connections 1\n",
            "# HELP iwarp_stack_rx_no_socket_total Segments for no socket\n\
             # TYPE iwarp_stack_rx_no_socket_total counter\n\
             iwarp_stack_rx_no_socket_total 3\n",
            "# HELP iwarp_tcp_delivered_bytes_total TCP: Bytes delivered in order (all connections, open and ended)\n\
             # TYPE iwarp_tcp_delivered_bytes_total counter\n\
             iwarp_tcp_delivered_bytes_total 4096\n",
            "iwarp_tcp_rto_retransmits_total 2\n",
            "# TYPE iwarp_stack_held_bytes gauge\niwarp_stack_held_bytes 65536\n",
            "iwarp_stack_held_max_conn_bytes 0\n",
            "iwarp_stack_budget_aborts_total 2\n",
            "iwarp_iface_rx_frames_total 10\n",
            "iwarp_loop_rounds_total 77\n",
            "# TYPE iwarp_loop_steered_out_total counter\niwarp_loop_steered_out_total 0\n",
            "iwarp_loop_steered_in_total 0\n",
            "iwarp_loop_steer_dropped_total 0\n",
            "iwarp_loop_pinned 1\n",
            "# TYPE iwarp_device_info gauge\niwarp_device_info{kind=\"sim\"} 1\n",
            "iwarp_qps 1\n",
            "# HELP iwarp_qp_fpdus_tx_total Queue pair: FPDUs sent\n\
             # TYPE iwarp_qp_fpdus_tx_total counter\n\
             iwarp_qp_fpdus_tx_total{qp=\"5\",peer=\"10.0.0.2\"} 7\n",
            "iwarp_qp_placed_bytes_total{qp=\"5\",peer=\"10.0.0.2\"} 8192\n",
            "iwarp_qp_stream_tx_bytes_total{qp=\"5\",peer=\"10.0.0.2\"} 0\n",
            "iwarp_qp_fpdus_rx_total{qp=\"5\",peer=\"10.0.0.2\"} 0\n",
            "iwarp_qp_tcp_delivered_bytes_total{qp=\"5\",peer=\"10.0.0.2\"} 1000\n",
            "iwarp_build_info{version=\"",
            "# TYPE iwarp_serve_accept_duration_seconds histogram\n",
            "iwarp_serve_accept_duration_seconds_bucket{le=\"0.0025\"} 0\n",
            "iwarp_serve_accept_duration_seconds_bucket{le=\"0.005\"} 1\n",
            "iwarp_serve_accept_duration_seconds_count 1\n",
            "# TYPE process_cpu_seconds_total counter\n",
            "# TYPE process_resident_memory_bytes gauge\n",
            "# TYPE process_open_fds gauge\n",
            "# TYPE process_start_time_seconds gauge\n",
        ] {
            assert!(text.contains(block), "missing:\n{block}\nin:\n{text}");
        }
        for gone in ["octets", "bytes_placed", "\"Copy\""] {
            assert!(!text.contains(gone), "{gone} in:\n{text}");
        }
    }

    #[test]
    fn xdp_device_labels_are_lowercase() {
        let mut snap = literal();
        snap.stats.device = DeviceStats::Xdp(iwarp::XdpDeviceStats {
            iface: "eth\"0".into(),
            queue: 0,
            bind: XskMode::ZeroCopy,
            attach: AttachMode::Driver,
            multi_buffer: false,
            socket: Default::default(),
            kernel: None,
        });
        let text = render(snap, &ServeMetrics::default(), Format::Text);
        assert!(
            text.contains(
                "iwarp_device_info{kind=\"af_xdp\",iface=\"eth\\\"0\",queue=\"0\",\
                 bind=\"zero_copy\",attach=\"driver\",multi_buffer=\"false\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("iwarp_xsk_tx_kicks_total 0\n"), "{text}");
    }

    #[test]
    fn memif_device_has_its_role_peer_and_counters() {
        let mut snap = literal();
        snap.stats.device = DeviceStats::Memif(iwarp::MemifDeviceStats {
            role: iwarp::memif::Role::Client,
            peer: "net_memif0".into(),
            ring_size: 1024,
            broken: None,
            counters: iwarp::memif::Stats {
                rx_frames: 5,
                rx_bad_desc: 2,
                kicks: 1,
                ..Default::default()
            },
        });
        let text = render(snap, &ServeMetrics::default(), Format::Text);
        for line in [
            "iwarp_device_info{kind=\"memif\",role=\"client\",peer=\"net_memif0\",ring=\"1024\"} 1\n",
            "iwarp_memif_rx_frames_total 5\n",
            "iwarp_memif_rx_bad_desc_total 2\n",
            "iwarp_memif_kicks_total 1\n",
            "iwarp_memif_broken 0\n",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }

    /// No SCTP part, no `iwarp_sctp_*` family; with one, its counters sum
    /// live and closed associations' retransmissions and discards, and
    /// its gauges say what the live ones hold and did.
    #[test]
    fn sctp_families_appear_with_an_sctp_part() {
        let text = render(literal(), &ServeMetrics::default(), Format::Text);
        assert!(!text.contains("iwarp_sctp_"), "{text}");
        let mut snap = literal();
        let mut c = SctpCounters {
            connections: 2,
            qp_held_octets: 4096,
            qp_held_max: 3000,
            segments_by_reference: 11,
            early_segments: 6,
            ..Default::default()
        };
        c.host.rx_packets = 40;
        c.host.tx_packets = 41;
        c.host.closed_retransmits = 3;
        c.host.closed_discarded = 1;
        c.assoc.retransmits = 4;
        c.assoc.packets_discarded = 2;
        c.assoc.t3_expiries = 5;
        snap.sctp = Some(c);
        let text = render(snap, &ServeMetrics::default(), Format::Text);
        for line in [
            "# TYPE iwarp_sctp_rx_packets_total counter\n",
            "iwarp_sctp_rx_packets_total 40\n",
            "iwarp_sctp_tx_packets_total 41\n",
            "iwarp_sctp_retransmits_total 7\n",
            "iwarp_sctp_packets_discarded_total 3\n",
            "# TYPE iwarp_sctp_connections gauge\n",
            "iwarp_sctp_connections 2\n",
            "iwarp_sctp_live_t3_expiries 5\n",
            "iwarp_sctp_live_segments_by_reference 11\n",
            "iwarp_sctp_early_segments_total 6\n",
            "iwarp_sctp_qp_held_bytes 4096\n",
            "iwarp_sctp_qp_held_max_conn_bytes 3000\n",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn accept_header_picks_the_format() {
        assert_eq!(Format::from_accept(None), Format::Text);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Text);
        let prom = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
        let om = render(literal(), &ServeMetrics::default(), Format::OpenMetrics);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# UNIT iwarp_qp_placed_bytes bytes\n"), "{om}");
        assert!(om.contains("iwarp_qp_placed_bytes_total{qp=\"5\",peer=\"10.0.0.2\"} 8192\n"));
    }
}
