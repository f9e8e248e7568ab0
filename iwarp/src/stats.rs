//! Live counters of a running context ([`Context::stats`](crate::Context::stats))
//! and of a queue pair ([`Qp::stats`](crate::Qp::stats)).

use std::fmt;

pub use iwarp_datapath::runtime::LoopStats;
pub use iwarp_datapath::stack::StackStats;
pub use iwarp_proto::qp::QpStats;
#[cfg(feature = "xdp")]
pub use iwarp_xdp::{AttachMode, XskMode};
pub use tcp_lite::iface::IfaceStats;
pub use tcp_lite::tcp::Stats as TcpStats;

/// Counters of a whole context, read while it runs.
#[derive(Debug, Clone)]
pub struct ContextStats {
    /// The host stack's own counters (segments for no socket, backpressure
    /// drops, send errors; `tcp_closed` sums connections that ended), and
    /// the memory budget: octets held for peers now (`held_octets`, the
    /// most by one connection `held_max_conn`) and `budget_aborts`.
    pub stack: StackStats,
    /// TCP counters summed over every connection, open and ended.
    pub tcp: TcpStats,
    /// The Ethernet/IPv4 interface's counters (parse drops, bad and partial
    /// TCP checksums, ARP, ICMP).
    pub iface: IfaceStats,
    /// Connections the stack holds now over either transport (over TCP in
    /// any state, TIME-WAIT included; over SCTP in any phase, until freed).
    pub connections: usize,
    /// Ports listening now, over either transport.
    pub listeners: usize,
    /// The poll loop's counters (rounds, frames, sleeps, pinning).
    pub poll_loop: LoopStats,
    /// The device's counters and how it is bound (loop 0's device on a
    /// context of several loops).
    pub device: DeviceStats,
    /// Each loop's share, in loop order (one entry on a context of one
    /// loop); the fields above sum them (the most any loop listens on
    /// for `listeners`, since every loop listens on every port).
    pub loops: Vec<LoopSplit>,
}

/// One poll loop's share of a context's work ([`ContextStats::loops`]).
#[derive(Debug, Clone, Copy)]
pub struct LoopSplit {
    /// Connections this loop holds now (either transport, any state).
    pub connections: usize,
    /// TCP segments this loop's interface took.
    pub rx_tcp: u64,
    /// Frames this loop's interface sent.
    pub tx_frames: u64,
    /// Octets TCP delivered in order on this loop's connections, open and
    /// ended.
    pub tcp_delivered: u64,
    /// The loop's own counters (rounds, frames, sleeps, pinning).
    pub poll_loop: LoopStats,
}

impl ContextStats {
    /// The likely cause and the fix when most TCP segments dropped for a
    /// bad checksum carried a partial one (see
    /// [`IfaceStats::checksum_diagnosis`]).
    pub fn checksum_diagnosis(&self) -> Option<String> {
        self.iface.checksum_diagnosis()
    }
}

/// A device's counters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DeviceStats {
    /// The simulated link (in-memory queues; no counters of its own).
    Sim,
    /// A device given to [`Context::with_device`](crate::Context::with_device)
    /// (its counters, if it keeps any, are the application's to read).
    Other,
    /// An AF_XDP socket (feature `xdp`).
    #[cfg(feature = "xdp")]
    Xdp(XdpDeviceStats),
    /// A DPDK port (feature `dpdk`).
    #[cfg(feature = "dpdk")]
    Dpdk(DpdkDeviceStats),
    /// Our memif link (feature `memif`).
    #[cfg(feature = "memif")]
    Memif(MemifDeviceStats),
}

/// One end of our memif link: its role, its peer and its counters.
#[cfg(feature = "memif")]
#[derive(Debug, Clone)]
pub struct MemifDeviceStats {
    /// Server or client.
    pub role: iwarp_memif::Role,
    /// The peer's name, from the handshake.
    pub peer: String,
    /// Slots in each ring.
    pub ring_size: u16,
    /// Why the link is down, if it is (a server waiting for its client,
    /// and why the last one went; a link that broke).
    pub broken: Option<String>,
    /// Frames, drops, chains, refusals, kicks.
    pub counters: iwarp_memif::Stats,
}

/// An AF_XDP device: what it obtained when it opened, and its counters.
#[cfg(feature = "xdp")]
#[derive(Debug, Clone)]
pub struct XdpDeviceStats {
    /// Interface.
    pub iface: String,
    /// Queue id.
    pub queue: u32,
    /// Bind mode obtained: `Copy` or `ZeroCopy`.
    pub bind: XskMode,
    /// Where the XDP program runs: `Driver` or `Skb` (generic).
    pub attach: AttachMode,
    /// Frames span several UMEM chunks (`XDP_USE_SG`).
    pub multi_buffer: bool,
    /// The socket's own counters (frames, kicks, wakeups, refusals).
    pub socket: iwarp_xdp::Counters,
    /// `XDP_STATISTICS` (ring-full and invalid-descriptor drops); `None`
    /// if the kernel refused the query.
    pub kernel: Option<iwarp_xdp::KernelStats>,
}

/// A DPDK port's counters.
#[cfg(feature = "dpdk")]
#[derive(Debug, Clone)]
pub struct DpdkDeviceStats {
    /// The port's name.
    pub port: String,
    /// Ours (frames, drops, refusals).
    pub counters: iwarp_dpdk::Counters,
    /// The driver's (`rte_eth_stats_get`); `None` if it failed.
    pub driver: Option<iwarp_dpdk::PortStats>,
}

impl fmt::Display for ContextStats {
    /// One `name value` pair per line, grouped by layer (for `--stats`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stack;
        writeln!(
            f,
            "stack: connections {} listeners {} rx_no_socket {} rx_backpressure_drops {} tx_errors {} \
             held_octets {} held_max_conn {} budget_aborts {}",
            self.connections,
            self.listeners,
            s.rx_no_socket,
            s.rx_backpressure_drops,
            s.tx_errors,
            s.held_octets,
            s.held_max_conn,
            s.budget_aborts
        )?;
        let t = &self.tcp;
        writeln!(
            f,
            "tcp: delivered {} rto_retransmits {} fast_retransmits {} spurious_rto_undone {} \
             ooo_segments {} ooo_dropped {} sack_skipped {} challenge_acks {} \
             no_timestamp_drops {} persist_aborts {} cwnd_limited_ns {} app_limited_ns {} rwnd_limited_ns {}",
            t.delivered,
            t.rto_retransmits,
            t.fast_retransmits,
            t.spurious_rto_undone,
            t.ooo_segments,
            t.ooo_dropped,
            t.sack_skipped,
            t.challenge_acks,
            t.no_timestamp_drops,
            t.persist_aborts,
            t.cwnd_limited_ns,
            t.app_limited_ns,
            t.rwnd_limited_ns
        )?;
        let i = &self.iface;
        writeln!(
            f,
            "iface: rx_frames {} rx_tcp {} rx_bad_checksum {} rx_partial_checksum {} \
             rx_malformed {} rx_not_for_us_mac {} rx_not_for_us_ip {} rx_fragments {} \
             rx_other_protocol {} rx_other_ethertype {} icmp_echo_replies {} tx_frames {} \
             tx_queued {} tx_dropped {} tx_too_big {}",
            i.rx_frames,
            i.rx_tcp,
            i.rx_bad_checksum,
            i.rx_partial_checksum,
            i.rx_malformed,
            i.rx_not_for_us_mac,
            i.rx_not_for_us_ip,
            i.rx_fragments,
            i.rx_other_protocol,
            i.rx_other_ethertype,
            i.icmp_echo_replies,
            i.tx_frames,
            i.tx_queued,
            i.tx_dropped,
            i.tx_too_big
        )?;
        let l = &self.poll_loop;
        writeln!(
            f,
            "loop: rounds {} rx_frames {} tx_frames {} tx_refused {} outputs_dropped {} sleeps {} pinned {}",
            l.rounds, l.rx_frames, l.tx_frames, l.tx_dropped, l.out_dropped, l.sleeps, l.pinned
        )?;
        if self.loops.len() > 1 {
            for (i, l) in self.loops.iter().enumerate() {
                writeln!(
                    f,
                    "loop {i}: connections {} rx_tcp {} tx_frames {} tcp_delivered {} rounds {} \
                     rx_frames {} sleeps {} pinned {}",
                    l.connections,
                    l.rx_tcp,
                    l.tx_frames,
                    l.tcp_delivered,
                    l.poll_loop.rounds,
                    l.poll_loop.rx_frames,
                    l.poll_loop.sleeps,
                    l.poll_loop.pinned
                )?;
            }
        }
        match &self.device {
            DeviceStats::Sim => writeln!(f, "device: simulated link")?,
            DeviceStats::Other => writeln!(f, "device: the application's")?,
            #[cfg(feature = "xdp")]
            DeviceStats::Xdp(x) => {
                let c = &x.socket;
                writeln!(
                    f,
                    "device: AF_XDP {} queue {} bind {:?} attach {:?} multi_buffer {}",
                    x.iface, x.queue, x.bind, x.attach, x.multi_buffer
                )?;
                writeln!(
                    f,
                    "xsk: rx_frames {} rx_multi_buffer {} rx_wakeups {} rx_bad_descs {} \
                     tx_frames {} tx_completed {} tx_full {} tx_too_big {} tx_kicks {} \
                     tx_kick_again {} tx_kick_errors {}",
                    c.rx_frames,
                    c.rx_multi_buffer,
                    c.rx_wakeups,
                    c.rx_bad_descs,
                    c.tx_frames,
                    c.tx_completed,
                    c.tx_full,
                    c.tx_too_big,
                    c.tx_kicks,
                    c.tx_kick_again,
                    c.tx_kick_errors
                )?;
                if let Some(k) = &x.kernel {
                    writeln!(
                        f,
                        "xsk kernel: rx_dropped {} rx_invalid_descs {} rx_ring_full {} \
                         rx_fill_ring_empty_descs {} tx_invalid_descs {} tx_ring_empty_descs {}",
                        k.rx_dropped,
                        k.rx_invalid_descs,
                        k.rx_ring_full,
                        k.rx_fill_ring_empty_descs,
                        k.tx_invalid_descs,
                        k.tx_ring_empty_descs
                    )?;
                }
            }
            #[cfg(feature = "memif")]
            DeviceStats::Memif(m) => {
                let c = &m.counters;
                writeln!(
                    f,
                    "device: memif {:?} peer {:?} ring {} rx_frames {} rx_chained {} rx_bad_desc {} \
                     rx_too_long {} tx_frames {} tx_chained {} tx_refused {} kicks {}{}",
                    m.role,
                    m.peer,
                    m.ring_size,
                    c.rx_frames,
                    c.rx_chained,
                    c.rx_bad_desc,
                    c.rx_too_long,
                    c.tx_frames,
                    c.tx_chained,
                    c.tx_refused,
                    c.kicks,
                    m.broken.as_ref().map(|b| format!(" broken: {b}")).unwrap_or_default()
                )?;
            }
            #[cfg(feature = "dpdk")]
            DeviceStats::Dpdk(d) => {
                let c = &d.counters;
                writeln!(
                    f,
                    "device: DPDK {} rx_frames {} rx_dropped {} tx_frames {} tx_dropped {} \
                     tx_no_mbuf {} tx_too_big {}",
                    d.port,
                    c.rx_frames,
                    c.rx_dropped,
                    c.tx_frames,
                    c.tx_dropped,
                    c.tx_no_mbuf,
                    c.tx_too_big
                )?;
                if let Some(p) = &d.driver {
                    writeln!(
                        f,
                        "port: ipackets {} opackets {} imissed {} ierrors {} oerrors {} rx_nombuf {}",
                        p.ipackets, p.opackets, p.imissed, p.ierrors, p.oerrors, p.rx_nombuf
                    )?;
                }
            }
        }
        if let Some(why) = self.checksum_diagnosis() {
            writeln!(f, "warning: {why}")?;
        }
        Ok(())
    }
}

/// Counters of one queue pair and its TCP connection, read while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCounters {
    /// DDP/RDMAP counters (FPDUs, octets placed, stream octets); `None`
    /// before the MPA exchange has finished.
    pub qp: Option<QpStats>,
    /// The connection's TCP counters.
    pub tcp: TcpStats,
}
